"""The store's CPU per lifecycle in process, at batch 1, beside its SQL on raw asyncpg.

    .venv/bin/python -m benchmarks.store_cpu [--lifecycles 300] [--rounds 20] [--profile]

Not part of ``make bench``. On a fresh PostgreSQL database (``--postgres-url``, as
``benchmarks.side_by_side``), one task runs lifecycles (claim → markSendStarted → finalize,
``side_by_side.store_lifecycle``) through our store, and the same statements, values and
transactions on raw asyncpg (``side_by_side.asyncpg_floor``, prepared statements), rounds
interleaving the two. Each row is the process's CPU (``time.process_time``: the store's
Python, ``databases``, asyncpg with its protocol, the event loop) per lifecycle, the least
and the median over rounds, and the store's excess over the floor: what the store's own
layers cost. ``--profile`` prints the functions of one more store round by their own CPU
time (``cProfile`` on ``time.thread_time``; its overhead inflates every figure, so read
it for shares only). To compare two trees, run it alternately with ``PYTHONPATH`` on each.
"""

import argparse
import asyncio
import cProfile
import os
import pstats
import secrets
import statistics
import time
from collections.abc import Awaitable, Callable

import asyncpg
import uvloop
from sqlalchemy.engine import make_url

from benchmarks.side_by_side import (
    asyncpg_floor,
    create_database,
    drop_database,
    fresh_id,
    record_steps,
    store_lifecycle,
)
from store import ConnectorStore
from store.database import Database
from store.migrate import upgrade

DEFAULT_URL = os.environ.get(
    "BENCH_POSTGRES_URL", "postgresql+asyncpg://postgres@127.0.0.1:5432/postgres"
)


async def cpu_ms(run: Callable[[int], Awaitable[None]], count: int) -> float:
    """The process's CPU per run of ``run``, in ms, over ``count`` runs one after another."""
    started = time.process_time()
    for i in range(count):
        await run(i)
    return (time.process_time() - started) * 1000 / count


async def main_async(args: argparse.Namespace) -> None:
    admin_url = make_url(args.postgres_url).set(drivername="postgresql").render_as_string(False)
    name, dsn = await create_database(admin_url)
    try:
        url = dsn.replace("postgresql://", "postgresql+asyncpg://", 1)
        await asyncio.to_thread(upgrade, url)
        steps = await record_steps(url)
        db = Database(url, pool_size=4)
        await db.connect()
        pool = await asyncpg.create_pool(dsn, min_size=1, max_size=4)
        try:
            lifecycle = store_lifecycle(ConnectorStore(db))

            async def store_run(i: int) -> None:
                await lifecycle(fresh_id("cpu", i), secrets.token_hex(8))

            rows = {"raw asyncpg": asyncpg_floor(pool, steps), "our store": store_run}
            for run in rows.values():
                for i in range(200):
                    await run(-1 - i)
            figures: dict[str, list[float]] = {row: [] for row in rows}
            for _ in range(args.rounds):
                for row, run in rows.items():
                    figures[row].append(await cpu_ms(run, args.lifecycles))
            print(f"load average {os.getloadavg()}")
            print("| row | least | median |\n| --- | ---: | ---: |")
            for row, values in figures.items():
                print(f"| {row} | {min(values):.3f} | {statistics.median(values):.3f} |")
            floors, ours = figures["raw asyncpg"], figures["our store"]
            excess = [store - floor for store, floor in zip(ours, floors, strict=True)]
            print(f"| the store's excess | {min(excess):.3f} | {statistics.median(excess):.3f} |")
            if args.profile:
                profile = cProfile.Profile(time.thread_time)
                profile.enable()
                for i in range(args.lifecycles):
                    await store_run(i)
                profile.disable()
                pstats.Stats(profile).sort_stats("tottime").print_stats(40)
        finally:
            await pool.close()
            await db.disconnect()
    finally:
        await drop_database(admin_url, name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--postgres-url", default=DEFAULT_URL)
    parser.add_argument("--lifecycles", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--profile", action="store_true")
    uvloop.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
