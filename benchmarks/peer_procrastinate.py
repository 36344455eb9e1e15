"""``make bench``'s procrastinate peer: defer N jobs (16 at a time), then one worker with a
no-op task and concurrency 16 runs them all.

    .venv/bin/python -m benchmarks.peer_procrastinate <conninfo> <jobs> <concurrency>

Prints one JSON line: jobs per second for the whole job (defer, then fetch, run and finish:
the counterpart of our claim → markSendStarted → finalize) and for each half, and this
process's CPU (user + system) per job over both halves. The schema is
applied to the database given if it is not there yet (make bench creates the database and
drops it after). procrastinate is in the ``bench`` extra (``pip install -e '.[dev,bench]'``).
"""

import asyncio
import json
import logging
import sys
import time

import procrastinate

QUEUE = "bench"


async def main(conninfo: str, jobs: int, concurrency: int) -> dict[str, float]:
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

        cpu = time.process_time()
        t0 = time.perf_counter()
        await defer_all(jobs)
        t1 = time.perf_counter()
        await work()
        t2 = time.perf_counter()
        cpu = time.process_time() - cpu
    if done != jobs:
        raise SystemExit(f"ran {done} of {jobs} jobs")
    return {
        "jobs": jobs,
        "concurrency": concurrency,
        "jobs_per_s": jobs / (t2 - t0),
        "defer_per_s": jobs / (t1 - t0),
        "work_per_s": jobs / (t2 - t1),
        "cpu_ms_per_job": cpu * 1000 / jobs,
    }


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    # Its note that the app lives in __main__ (fine for a one-file benchmark).
    logging.getLogger("procrastinate.blueprints").setLevel(logging.ERROR)
    conninfo, jobs, concurrency = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    print(json.dumps(asyncio.run(main(conninfo, jobs, concurrency))))
