"""``make bench``'s procrastinate peer: defer N jobs (16 at a time), then one worker with a
no-op task and concurrency 16 runs them all.

    .venv/bin/python -m benchmarks.peer_procrastinate <conninfo> <jobs> <concurrency>

A measured child of ``benchmarks.cpu``: after the warm-up it says it is ready, and when told
to go runs both halves and prints one JSON line: jobs per second for the whole job (defer,
then fetch, run and finish: the counterpart of our claim → markSendStarted → finalize) and
for each half. The CPU of its window (its own and PostgreSQL's) is counted by whoever runs
it (``benchmarks.side_by_side``). The schema is applied to the database given if it is not
there yet (make bench creates the database and drops it after). procrastinate is in the
``bench`` extra (``pip install -e '.[dev,bench]'``).
"""

import asyncio
import logging
import sys
import time

import procrastinate

from benchmarks import cpu

QUEUE = "bench"


async def main(conninfo: str, jobs: int, concurrency: int) -> None:
    app = procrastinate.App(
        connector=procrastinate.PsycopgConnector(
            conninfo=conninfo, min_size=concurrency, max_size=concurrency
        )
    )
    done = 0

    @app.task(name="noop", queue=QUEUE)
    async def noop() -> None:
        nonlocal done
        done += 1

    async with app.open_async():
        found = await app.connector.execute_query_one_async(
            "SELECT to_regclass('procrastinate_jobs') IS NOT NULL AS found"
        )
        if not found["found"]:
            await app.schema_manager.apply_schema_async()

        async def defer_all(count: int) -> None:
            numbers = iter(range(count))

            async def deferrer() -> None:
                for _ in numbers:
                    await noop.defer_async()

            await asyncio.gather(*(deferrer() for _ in range(concurrency)))

        async def work() -> None:
            await app.run_worker_async(
                queues=[QUEUE],
                concurrency=concurrency,
                wait=False,
                listen_notify=False,
                install_signal_handlers=False,
            )

        # Warm-up: a few jobs through both halves, not timed.
        await defer_all(5)
        await work()
        done = 0

        cpu.ready()
        t0 = time.perf_counter()
        await defer_all(jobs)
        t1 = time.perf_counter()
        await work()
        t2 = time.perf_counter()
        if done != jobs:
            raise SystemExit(f"ran {done} of {jobs} jobs")
        cpu.done(
            {
                "jobs": jobs,
                "concurrency": concurrency,
                "jobs_per_s": jobs / (t2 - t0),
                "defer_per_s": jobs / (t1 - t0),
                "work_per_s": jobs / (t2 - t1),
            }
        )


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    # Its note that the app lives in __main__ (fine for a one-file benchmark).
    logging.getLogger("procrastinate.blueprints").setLevel(logging.ERROR)
    conninfo, jobs, concurrency = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    asyncio.run(main(conninfo, jobs, concurrency))
