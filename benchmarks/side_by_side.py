"""``make bench``: every path side by side in one run, each beside its floor or its peer.

    .venv/bin/python -m benchmarks.side_by_side [--lifecycles N] [--rounds 3] [--million]

Rows (lifecycles/s = claim → markSendStarted → finalize, each on a fresh operation id):
the store's recorded statements on raw asyncpg (pool, prepared statements) and our store
in process on PostgreSQL, 1 and 16 tasks; the same on raw ``sqlite3`` (WAL) and our store
on SQLite. Over HTTP, 16 workers driven by ``benchmarks/load.py`` in a process of its own:
our server at batch 1 beside pg-boss at batch 1 and a minimal Starlette + asyncpg service
(``benchmarks/floor_service.py``), both with operations of ``OWNERS`` owners, each with its
own account (and ours again with one owner and account: every claim locks that account, so
claims wait for each other's commits); our server at batch 50 (claiming, and leasing) beside
pg-boss at batch 50; the client SDK's ``Worker`` beside the leasing batch path
(``benchmarks/sdk_worker.py``); procrastinate; ``{ serverTime }`` beside stock Strawberry
(``benchmarks/stock_strawberry.py``) and a plain Starlette endpoint. Each of those rows,
peers included, reports the CPU per lifecycle of the server, of the PostgreSQL backends
serving it and of the client (``benchmarks/cpu.py``), and ours beside pg-boss's against the
targets (``CPU_PEERS``). Rounds interleave every row; each number is the median over rounds. Then
``dueOperations``/``dueWatches``/``operations(filter)``/``leaseOperations`` latency at 10k
and 100k operations (1M with ``--million``), and the server's peak RSS.
"""

import argparse
import asyncio
import contextlib
import json
import os
import platform
import secrets
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from benchmarks.cpu import Backends, measured
from benchmarks.load import LEASE_MS, OWNERS, claim_input
from benchmarks.seed import event_statements, seed_statements
from benchmarks.targets import cell, cpu_report, targets_report
from benchmarks.template import dumps, groups, record, recording_ids, values_for
from store import ConnectorStore
from store.database import Database
from store.events import Logged
from store.migrate import upgrade
from store.operations import Finalize, OperationClaim, OperationFilter
from store.records import OperationRecord

ROOT = Path(__file__).resolve().parent.parent
TASKS = 16
PEERS = ROOT / "benchmarks" / "peers"
SERVER_PORT = int(os.environ.get("BENCH_PORT", "18931"))
"""Our server's port (``BENCH_PORT``, so that runs can share a machine); the floor service
and stock Strawberry listen on the next two."""
FLOOR_PORT = SERVER_PORT + 1
STOCK_PORT = SERVER_PORT + 2
BATCH = 50
BATCH_JOBS = 10
"""The batch rows run ``BATCH_JOBS`` times ``--lifecycles``: with 16 workers taking 50 a
request, ``--lifecycles`` alone would leave most of them idle after their first request."""
SIZED_LIMIT = 100
"""``limit`` of the queries at size."""


def claim_for(operation_id: str, token: str, now: int, tenant: int = 0) -> OperationClaim:
    """The HTTP rows' claim (``benchmarks.load.claim_input``, owner ``tenant``) as the store
    takes it."""
    given = claim_input(operation_id, token, now + LEASE_MS, tenant)
    return OperationClaim(
        caller_did=given["callerDID"],
        operation_id=given["operationID"],
        owner_did=given["ownerDID"],
        connector_name=given["connectorName"],
        model=given["model"],
        op=given["op"],
        account_key=given["accountKey"],
        target=given["target"],
        source_id=given["sourceID"],
        deterministic_event_id=given["deterministicEventID"],
        payload_hash=given["payloadHash"],
        lease_token=given["leaseToken"],
        lease_expires_at=given["leaseExpiresAt"],
        document_id=given["documentID"],
    )


@contextlib.contextmanager
def without_event_log() -> Iterator[None]:
    """Benchmark only (never the product's): while the block runs, every single write of
    the store (``store.events.Logged``, all a lifecycle makes) runs its write alone
    (``Logged.write``, the same statement without its events), so rows measured in the block
    beside rows measured outside it give the log's cost in one run."""
    logged = Logged.run

    async def bare(self: Logged, db: Database, params: Mapping[str, Any]) -> list[Any]:
        return await db.write_prepared_all(self.write, params)

    Logged.run = bare  # type: ignore[method-assign]
    try:
        yield
    finally:
        Logged.run = logged  # type: ignore[method-assign]


async def unlogged(run: Callable[[], Awaitable[dict[str, float]]]) -> dict[str, float]:
    """``run`` measured ``without_event_log``."""
    with without_event_log():
        return await run()


def store_lifecycle(store: ConnectorStore) -> Callable[..., Awaitable[None]]:
    operations = store.operations

    async def lifecycle(operation_id: str, token: str, step_done: Callable[[], Any] = int) -> None:
        claimed = await operations.claim_operation(claim_for(operation_id, token, store.clock()))
        assert claimed.status == "claimed", claimed
        step_done()
        marked = await operations.mark_send_started(
            "did:bench:caller", operation_id, token, f"run-{token}"
        )
        assert marked is not None
        step_done()
        done = await operations.finalize_operation_and_arm_watch(
            Finalize(
                "did:bench:caller",
                operation_id,
                version=marked.version,
                lease_token=token,
                due_at=store.clock() + LEASE_MS,
                result_entity={"id": operation_id},
                provider_etag="etag-1",
            )
        )
        assert done is not None and done.operation.state == "committed"

    return lifecycle


async def rate(run: Callable[[int], Awaitable[None]], count: int, tasks: int) -> dict[str, float]:
    """``count`` runs over ``tasks`` tasks (after a few warm-up runs): ``per_s``, runs per
    second."""
    for i in range(5):
        await run(-1 - i)
    numbers = iter(range(count))

    async def task() -> None:
        for i in numbers:
            await run(i)

    started = time.perf_counter()
    await asyncio.gather(*(task() for _ in range(tasks)))
    return {"per_s": count / (time.perf_counter() - started)}


def fresh_id(prefix: str, i: int) -> str:
    return f"{prefix}-{i}-{secrets.token_hex(4)}"


# --- floors ----------------------------------------------------------------------------------


def asyncpg_floor(pool: asyncpg.Pool, steps: list[Any]) -> Callable[[int], Awaitable[None]]:
    async def run(i: int) -> None:
        operation_id, token = fresh_id("pg", i), secrets.token_hex(8)
        for step in steps:
            async with pool.acquire() as connection:
                for tx, statements in groups(step):
                    if tx is None:
                        for _, sql, values in statements:
                            await connection.fetch(sql, *values_for(values, operation_id, token))
                        continue
                    async with connection.transaction():
                        for _, sql, values in statements:
                            await connection.fetch(sql, *values_for(values, operation_id, token))

    return run


def sqlite3_floor(path: str, steps: list[Any], count: int) -> float:
    """The recorded statements on one ``sqlite3`` connection (WAL, autocommit; the
    transactions with ``BEGIN IMMEDIATE``), one after the other: lifecycles per second."""
    connection = sqlite3.connect(path, isolation_level=None)
    try:
        started = time.perf_counter()
        for i in range(count):
            operation_id, token = fresh_id("sq", i), secrets.token_hex(8)
            for step in steps:
                for tx, statements in groups(step):
                    if tx is not None:
                        connection.execute("BEGIN IMMEDIATE")
                    for _, sql, values in statements:
                        connection.execute(sql, values_for(values, operation_id, token)).fetchall()
                    if tx is not None:
                        connection.execute("COMMIT")
        return count / (time.perf_counter() - started)
    finally:
        connection.close()


# --- HTTP ------------------------------------------------------------------------------------


def start(
    command: list[str], env: dict[str, str], port: int, cwd: Path = ROOT, log: Path | None = None
) -> subprocess.Popen[bytes]:
    """``command`` run in ``cwd`` with ``env`` added to this process's (its output to ``log``
    when given), once it answers HTTP on ``port`` (within 20 s; else killed, and
    ``SystemExit``)."""
    output = None if log is None else log.open("ab")
    process = subprocess.Popen(command, cwd=cwd, env=os.environ | env, stdout=output, stderr=output)
    for _ in range(200):
        try:
            httpx.get(f"http://127.0.0.1:{port}/", timeout=0.5)
            return process
        except httpx.HTTPError:
            time.sleep(0.1)
    process.kill()
    raise SystemExit(f"the server on port {port} did not start")


def stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def memory_mib(pid: int) -> dict[str, float]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmHWM", "VmRSS"):
            fields[name] = int(value.split()[0]) / 1024
    return fields


CPU_GROUPS = ("server", "postgres", "client")
"""The groups of processes whose CPU each measured row reports (``benchmarks.cpu.measured``)."""


def cpu_per_item(spent: dict[str, dict[str, float]], items: float) -> dict[str, float]:
    """A window's CPU (``benchmarks.cpu.Window.close``) in ms per lifecycle (job, request):
    ``server_cpu_ms``, ``postgres_cpu_ms`` and ``client_cpu_ms``, each only if the window
    counted a process of it (a peer has no server; PostgreSQL's backends are counted only
    when they are processes here), with ``postgres_backends``, how many backends it
    counted; ``outside_cpu_ms``, all but PostgreSQL's; ``all_cpu_ms``, all."""
    measures = {
        f"{group}_cpu_ms": spent[group]["cpu_ms"] / items
        for group in CPU_GROUPS
        if group in spent and spent[group]["processes"]
    }
    measures["outside_cpu_ms"] = measures.get("server_cpu_ms", 0) + measures["client_cpu_ms"]
    measures["all_cpu_ms"] = measures["outside_cpu_ms"] + measures.get("postgres_cpu_ms", 0)
    if "postgres" in spent:
        measures["postgres_backends"] = spent["postgres"]["processes"]
    return measures


async def load(
    spec: dict[str, Any], server_pid: int, backends: Backends | None
) -> dict[str, float]:
    """One HTTP row: ``benchmarks.load`` in a child process with ``spec`` (16 connections
    unless it says otherwise) against the server ``server_pid``; its JSON line
    (lifecycles/s, requests per lifecycle) and ``cpu_per_item`` of its window (the server's
    process tree, its PostgreSQL backends, the load generator)."""
    command = [sys.executable, "-m", "benchmarks.load", json.dumps({"connections": TASKS} | spec)]
    result, spent = await measured(command, [server_pid], backends)
    return result | cpu_per_item(spent, result["lifecycles"])


async def sdk_load(
    spec: dict[str, Any], server_pid: int, backends: Backends | None
) -> dict[str, float]:
    """The SDK worker's row: ``benchmarks.sdk_worker`` in a child process with ``spec``
    (16 lessees unless it says otherwise), measured as ``load`` measures its rows."""
    spec = {"connections": TASKS} | spec
    command = [sys.executable, "-m", "benchmarks.sdk_worker", json.dumps(spec)]
    result, spent = await measured(command, [server_pid], backends)
    return result | cpu_per_item(spent, result["lifecycles"])


def worker_token(command: list[str], env: dict[str, str]) -> str:
    """A worker's bearer token, signed with the server's secret: a ``service`` token, as a
    connector worker writing back for its tenants holds (a tenant token may only claim its
    own work, and the benchmark's operations are owned by another DID)."""
    scopes = "service"
    minted = subprocess.run(
        [command[0], "token", "--sub", "did:bench:caller", "--scope", scopes],
        env=os.environ | env,
        check=True,
        capture_output=True,
        text=True,
    )
    return minted.stdout.strip().splitlines()[-1]


# --- peers ----------------------------------------------------------------------------------


async def peer_rate(command: list[str], backends: Backends | None) -> dict[str, float]:
    """A peer's benchmark in a child process (``command`` ends with the job count and the
    concurrency, and for pg-boss the batch size): enqueue, then fetch, run and complete, N
    jobs, 16 at a time. Its ``jobs_per_s`` and ``cpu_per_item`` of its window (its own
    process, as the client, and its PostgreSQL backends)."""
    result, spent = await measured(command, [], backends)
    return {"per_s": float(result["jobs_per_s"])} | cpu_per_item(spent, result["jobs"])


def pgboss_command(dsn: str, count: int, batch: int) -> list[str]:
    return ["node", str(PEERS / "pgboss.mjs"), dsn, str(count), str(TASKS), str(batch)]


def procrastinate_command(dsn: str, count: int) -> list[str]:
    return [sys.executable, "-m", "benchmarks.peer_procrastinate", dsn, str(count), str(TASKS)]


# --- queries at size -------------------------------------------------------------------------


async def p50_ms(
    call: Callable[[], Awaitable[Any]],
    undo: Callable[[Any], Awaitable[Any]] | None = None,
    repeats: int = 30,
) -> float:
    """The median time of ``call`` in ms over ``repeats`` calls, after 3 warm-up calls;
    ``undo``, given each call's result, runs after each call outside the timing."""
    times = []
    for number in range(3 + repeats):
        started = time.perf_counter()
        result = await call()
        if number >= 3:
            times.append(time.perf_counter() - started)
        if undo is not None:
            await undo(result)
    return statistics.median(times) * 1000


def leasing(
    store: ConnectorStore,
) -> tuple[
    Callable[[], Awaitable[list[OperationRecord]]],
    Callable[[list[OperationRecord]], Awaitable[None]],
]:
    """``leaseOperations(limit: 100)`` as a service calls it, through the store, and its undo:
    release what it leased, so that every call finds the same due operations (a call that
    leased fewer than 100 fails the run: the row would measure less work)."""
    token = "bench-sized-lease"

    async def lease() -> list[OperationRecord]:
        leased = await store.leasing.lease_operations(token, LEASE_MS, limit=SIZED_LIMIT)
        if len(leased) != SIZED_LIMIT:
            raise SystemExit(f"leaseOperations leased {len(leased)} of {SIZED_LIMIT}")
        return leased

    async def release(leased: list[OperationRecord]) -> None:
        keys = [(record.caller_did, record.operation_id) for record in leased]
        await store.leasing.release_leases(token, keys)

    return lease, release


async def overview_counts(store: ConnectorStore) -> None:
    """The dashboard overview's counts (``operationCounts`` and ``watchCounts``), as a
    service asks for them: side by side, as GraphQL resolves a query's root fields."""
    await asyncio.gather(store.counts.count_operations(), store.counts.count_watches())


async def last_hour(store: ConnectorStore, connector_name: str | None = None) -> None:
    """The Overview's charts for the last hour by minute (``operationStats``, 60 buckets),
    of every connector or of one."""
    now = int(time.time() * 1000)
    await store.stats.operation_stats(
        since=now - 3_600_000, until=now, bucket_ms=60_000, connector_name=connector_name
    )


async def queries_at_size(url: str, sizes: list[int]) -> list[dict[str, float]]:
    """The p50 of each list at each size: ``seed_statements`` (10% of operations live and
    due, ``OWNERS`` owners, then ANALYZE) and ``event_statements`` (as many events, over the
    last day) grow one database from size to size, with no
    statement timeout (seeding the 1M rows takes longer than the store's 30 s backstop)."""
    db = Database(url, pool_size=4, statement_timeout_s=0)
    await db.connect()
    store = ConnectorStore(db)
    now = int(time.time() * 1000)
    where = OperationFilter(connector_name="seed")
    lease, release = leasing(store)
    results = []
    seeded = 0
    try:
        for size in sizes:
            for statement in seed_statements(True, size - seeded, now, start=seeded, owners=OWNERS):
                await db.write_all(sa.text(statement))
            for statement in event_statements(
                True, size - seeded, now, start=seeded, owners=OWNERS
            ):
                await db.write_all(sa.text(statement))
            seeded = size
            results.append(
                {
                    "rows": size,
                    "due_operations_ms": await p50_ms(
                        lambda: store.retention.list_due_operations(now, SIZED_LIMIT)
                    ),
                    "due_watches_ms": await p50_ms(
                        lambda: store.watches.list_due_watches(now, SIZED_LIMIT)
                    ),
                    "operations_filter_ms": await p50_ms(
                        lambda: store.operations.list_tracked_operations(where, limit=SIZED_LIMIT)
                    ),
                    "lease_operations_ms": await p50_ms(lease, release),
                    "overview_ms": await p50_ms(lambda: overview_counts(store)),
                    "stats_ms": await p50_ms(lambda: last_hour(store)),
                    "stats_connector_ms": await p50_ms(lambda: last_hour(store, "seed")),
                }
            )
        # What the overview costs once (auto)vacuum has set the visibility map after the
        # bulk load: its counts become index-only scans that read no table page.
        await db.fetch_all(sa.text("VACUUM (ANALYZE)"))
        results[-1]["overview_vacuumed_ms"] = await p50_ms(lambda: overview_counts(store))
    finally:
        await db.disconnect()
    return results


async def soak_server(
    spec: dict[str, Any], pid: int, backends: Backends | None, minutes: float
) -> list[dict[str, float]]:
    """The HTTP lifecycle load of ``spec`` (16 workers) on the server for ``minutes``, in
    batches of about 30 s: after each batch, the elapsed minutes, the batch's lifecycles/s
    and the server's VmRSS/VmHWM (MiB)."""
    started = time.monotonic()
    samples = []
    batch = 300
    while time.monotonic() - started < minutes * 60:
        per_s = (await load(spec | {"count": batch}, pid, backends))["per_s"]
        batch = max(50, int(per_s * 30))
        sample = {"minutes": (time.monotonic() - started) / 60, "per_s": per_s}
        samples.append(sample | memory_mib(pid))
        print(f"soak: {json.dumps(samples[-1])}", file=sys.stderr)
    return samples


# --- the run ---------------------------------------------------------------------------------


def medians(rounds: list[dict[str, float]]) -> dict[str, float]:
    """Each measure's median over the rounds."""
    return {field: statistics.median(measure[field] for measure in rounds) for field in rounds[0]}


async def create_database(admin_url: str) -> tuple[str, str]:
    name = f"bench_{secrets.token_hex(6)}"
    admin = await asyncpg.connect(admin_url, timeout=5)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    return name, make_url(admin_url).set(database=name).render_as_string(False)


async def drop_database(admin_url: str, name: str) -> None:
    admin = await asyncpg.connect(admin_url, timeout=5)
    try:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.close()


async def record_steps(url: str) -> list[Any]:
    db = Database(url)
    await db.connect()
    try:
        return await record(db, store_lifecycle(ConnectorStore(db, new_id=recording_ids())))
    finally:
        await db.disconnect()


async def main_async(args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    admin_url = make_url(args.postgres_url).set(drivername="postgresql").render_as_string(False)
    names: list[str] = []
    processes: list[subprocess.Popen[bytes]] = []
    # Closed in `finally` also when a row fails: an open asyncpg pool would go on
    # reconnecting to the dropped database and keep the run from ending.
    closers: list[Callable[[], Awaitable[Any]]] = []
    try:
        name, dsn = await create_database(admin_url)
        names.append(name)
        pg_url = dsn.replace("postgresql://", "postgresql+asyncpg://", 1)
        await asyncio.to_thread(upgrade, pg_url)
        sqlite_file = folder / "bench.db"
        sqlite_url = f"sqlite+aiosqlite:///{sqlite_file}"
        await asyncio.to_thread(upgrade, sqlite_url)

        pgboss_name, pgboss_dsn = await create_database(admin_url)
        names.append(pgboss_name)
        procrastinate_name, procrastinate_dsn = await create_database(admin_url)
        names.append(procrastinate_name)

        # PostgreSQL's backends serving each measured row, when they are processes here.
        backends = await Backends.connect(admin_url)
        if backends is not None:
            closers.append(backends.close)
        pg_steps = await record_steps(pg_url)
        sqlite_steps = await record_steps(sqlite_url)
        template = folder / "steps.json"
        template.write_text(dumps(pg_steps))

        # The server as `make run` starts it: its defaults (log line, sweeper, pool), but
        # the database and a secret of the run's own.
        env = {"DATABASE_URL": pg_url, "JWT_SECRET": secrets.token_hex(32)}
        server_command = [str(ROOT / ".venv/bin/connector-store"), "serve", "--no-migrate"]
        # Its log (a line a request, at INFO) goes to a file, as a deployment's goes to its
        # collector: written all the same, without filling the report's terminal.
        server = start(
            [*server_command, "--port", str(SERVER_PORT)],
            env,
            SERVER_PORT,
            log=folder / "server.log",
        )
        token = worker_token(server_command, env)
        processes.append(server)
        # The peers of our server run under uvicorn as it does (uvloop, httptools, no access log).
        uvicorn_command = [sys.executable, "-m", "uvicorn", "--log-level", "warning"]
        uvicorn_command.append("--no-access-log")
        floor_env = {"BENCH_DSN": dsn, "BENCH_TEMPLATE": str(template)}
        floor = start(
            [*uvicorn_command, "benchmarks.floor_service:app", "--port", str(FLOOR_PORT)],
            floor_env,
            FLOOR_PORT,
        )
        processes.append(floor)
        stock = start(
            [*uvicorn_command, "benchmarks.stock_strawberry:app", "--port", str(STOCK_PORT)],
            {},
            STOCK_PORT,
        )
        processes.append(stock)

        pg_db = Database(pg_url, pool_size=TASKS)
        await pg_db.connect()
        closers.append(pg_db.disconnect)
        sqlite_db = Database(sqlite_url)
        await sqlite_db.connect()
        closers.append(sqlite_db.disconnect)
        pool = await asyncpg.create_pool(dsn, min_size=TASKS, max_size=TASKS)
        closers.append(pool.close)
        pg_store, sqlite_store = ConnectorStore(pg_db), ConnectorStore(sqlite_db)

        def store_run(store: ConnectorStore, prefix: str) -> Callable[[int], Awaitable[None]]:
            lifecycle = store_lifecycle(store)

            async def run(i: int) -> None:
                await lifecycle(fresh_id(prefix, i), secrets.token_hex(8))

            return run

        async def sqlite3_row() -> dict[str, float]:
            per_s = await asyncio.to_thread(sqlite3_floor, str(sqlite_file), sqlite_steps, count)
            return {"per_s": per_s}

        count, batch_count = args.lifecycles, args.lifecycles * BATCH_JOBS
        ours = {"port": SERVER_PORT, "token": token}

        def http(
            spec: dict[str, Any], on: subprocess.Popen[bytes]
        ) -> Callable[[], Awaitable[dict[str, float]]]:
            return lambda: load(spec, on.pid, backends)

        def peer(command: list[str]) -> Callable[[], Awaitable[dict[str, float]]]:
            return lambda: peer_rate(command, backends)

        def ours_batch(scenario: str) -> Callable[[], Awaitable[dict[str, float]]]:
            return http(ours | {"scenario": scenario, "count": batch_count, "batch": BATCH}, server)

        lifecycle_spec = ours | {"scenario": "lifecycle", "count": count, "owners": OWNERS}
        rows: dict[str, Callable[[], Awaitable[dict[str, float]]]] = {
            "asyncpg_1": lambda: rate(asyncpg_floor(pool, pg_steps), count, 1),
            "store_pg_1": lambda: rate(store_run(pg_store, "spg"), count, 1),
            "asyncpg_16": lambda: rate(asyncpg_floor(pool, pg_steps), count, TASKS),
            "store_pg_16": lambda: rate(store_run(pg_store, "spg"), count, TASKS),
            "store_pg_1_nolog": lambda: unlogged(
                lambda: rate(store_run(pg_store, "npg"), count, 1)
            ),
            "store_pg_16_nolog": lambda: unlogged(
                lambda: rate(store_run(pg_store, "npg"), count, TASKS)
            ),
            "sqlite3_1": sqlite3_row,
            "store_sqlite_1": lambda: rate(store_run(sqlite_store, "ssq"), count, 1),
            "store_sqlite_16": lambda: rate(store_run(sqlite_store, "ssq"), count, TASKS),
            "store_sqlite_1_nolog": lambda: unlogged(
                lambda: rate(store_run(sqlite_store, "nsq"), count, 1)
            ),
            "store_sqlite_16_nolog": lambda: unlogged(
                lambda: rate(store_run(sqlite_store, "nsq"), count, TASKS)
            ),
            "pgboss_1": peer(pgboss_command(pgboss_dsn, count, 1)),
            "server_http_1": http(lifecycle_spec, server),
            "server_http_1_one_account": http(lifecycle_spec | {"owners": 1}, server),
            "floor_http_1": http(
                {"scenario": "floor_lifecycle", "port": FLOOR_PORT}
                | {"count": count, "steps": len(pg_steps), "owners": OWNERS},
                floor,
            ),
            "pgboss_50": peer(pgboss_command(pgboss_dsn, batch_count, BATCH)),
            "server_http_50": ours_batch("claimed_batch"),
            "server_http_50_one_account": lambda: load(
                ours
                | {"scenario": "claimed_batch", "count": batch_count, "batch": BATCH}
                | {"owners": 1},
                server.pid,
                backends,
            ),
            "server_lease_50": ours_batch("leased_batch"),
            "sdk_worker_50": lambda: sdk_load(
                ours | {"count": batch_count, "batch": BATCH}, server.pid, backends
            ),
            "procrastinate_16": peer(procrastinate_command(procrastinate_dsn, count)),
            "plain_time_16": http(
                {"scenario": "plain_time", "port": FLOOR_PORT, "count": count * 5}, floor
            ),
            "stock_time_16": http(
                {"scenario": "server_time", "port": STOCK_PORT, "count": count * 5}, stock
            ),
            "server_time_16": http(ours | {"scenario": "server_time", "count": count * 5}, server),
        }
        chosen = args.rows or list(rows)
        measured: dict[str, list[dict[str, float]]] = {key: [] for key in chosen}
        memory: list[dict[str, float]] = []
        for round_number in range(args.rounds):
            for key in chosen:
                measured[key].append(await rows[key]())
            memory.append(memory_mib(server.pid))
            print(f"round {round_number + 1}: {json.dumps(measured)}", file=sys.stderr)
        soak = []
        if args.minutes:
            soak = await soak_server(lifecycle_spec, server.pid, backends, args.minutes)
        for close in reversed(closers):
            await close()
        closers.clear()

        sizes_measured = []
        if not args.rows:
            sizes = [10_000, 100_000] + ([1_000_000] if args.million else [])
            name2, dsn2 = await create_database(admin_url)
            names.append(name2)
            sized_url = dsn2.replace("postgresql://", "postgresql+asyncpg://", 1)
            await asyncio.to_thread(upgrade, sized_url)
            sizes_measured = await queries_at_size(sized_url, sizes)
        return {
            "medians": {key: medians(values) for key, values in measured.items()},
            "all": measured,
            "memory": memory,
            "sizes": sizes_measured,
            "soak": soak,
        }
    finally:
        for close in reversed(closers):
            with contextlib.suppress(Exception):
                await close()
        for process in processes:
            stop(process)
        for name in names:
            await drop_database(admin_url, name)


RATIOS = [
    ("asyncpg_1", "the store's SQL on raw asyncpg (pool, prepared statements), 1 task", None),
    ("store_pg_1", "our store in process, PostgreSQL, 1 task", "asyncpg_1"),
    ("asyncpg_16", f"the store's SQL on raw asyncpg, {TASKS} tasks", None),
    ("store_pg_16", f"our store in process, PostgreSQL, {TASKS} tasks", "asyncpg_16"),
    ("sqlite3_1", "the store's SQL on raw sqlite3 (WAL), 1 thread", None),
    ("store_sqlite_1", "our store in process, SQLite, 1 task", "sqlite3_1"),
    ("store_sqlite_16", f"our store in process, SQLite, {TASKS} tasks", "sqlite3_1"),
    (
        "store_pg_1_nolog",
        "our store in process, PostgreSQL, 1 task, without the event log (benchmark only)",
        "store_pg_1",
    ),
    (
        "store_pg_16_nolog",
        f"our store in process, PostgreSQL, {TASKS} tasks, without the event log",
        "store_pg_16",
    ),
    (
        "store_sqlite_1_nolog",
        "our store in process, SQLite, 1 task, without the event log",
        "store_sqlite_1",
    ),
    (
        "store_sqlite_16_nolog",
        f"our store in process, SQLite, {TASKS} tasks, without the event log",
        "store_sqlite_16",
    ),
    (
        "pgboss_1",
        f"pg-boss at batch 1: send, then fetch(batchSize 1) + complete, {TASKS} workers",
        None,
    ),
    (
        "server_http_1",
        "ours over HTTP at batch 1: claimOperation → markSendStarted → finalizeOperation,"
        f" {TASKS} workers, {OWNERS:,} owners",
        "pgboss_1",
    ),
    (
        "server_http_1_one_account",
        f"ours over HTTP at batch 1, {TASKS} workers, every claim of one owner and account",
        "server_http_1",
    ),
    (
        "floor_http_1",
        f"minimal Starlette + asyncpg service over HTTP, the store's SQL, {TASKS} workers,"
        f" {OWNERS:,} owners",
        None,
    ),
    (
        "pgboss_50",
        f"pg-boss at batch {BATCH}: insert, then fetch(batchSize {BATCH}) + complete(ids),"
        f" {TASKS} workers",
        None,
    ),
    (
        "server_http_50",
        f"ours over HTTP at batch {BATCH}: claimOperations → markSendsStarted →"
        f" finalizeOperations, {TASKS} workers",
        "pgboss_50",
    ),
    (
        "server_http_50_one_account",
        f"ours over HTTP at batch {BATCH}, claiming, every claim of one owner and account",
        "pgboss_50",
    ),
    (
        "server_lease_50",
        f"ours over HTTP at batch {BATCH}, leasing: leaseOperations → markSendsStarted →"
        f" finalizeOperations, {TASKS} workers",
        "pgboss_50",
    ),
    (
        "sdk_worker_50",
        f"the client SDK's Worker over HTTP at batch {BATCH} (httpx, generated models):"
        f" leaseOperations → markSendsStarted → finalizeOperations, {TASKS} lessees",
        "server_lease_50",
    ),
    (
        "procrastinate_16",
        f"procrastinate: defer, then a no-op task, concurrency {TASKS}",
        None,
    ),
    ("plain_time_16", f"plain Starlette JSON endpoint, {TASKS} workers (requests/s)", None),
    (
        "stock_time_16",
        f"stock Strawberry `{{ serverTime }}`, no extensions, {TASKS} workers (requests/s)",
        None,
    ),
    (
        "server_time_16",
        f"ours `{{ serverTime }}` over HTTP, {TASKS} workers (requests/s)",
        "stock_time_16",
    ),
]
PEERS_ROWS = ("pgboss_1", "pgboss_50", "procrastinate_16", "stock_time_16")
EXTRA_RATIOS = [
    ("the event log: with / without (PostgreSQL, 1 task)", "store_pg_1", "store_pg_1_nolog"),
    (
        f"the event log: with / without (PostgreSQL, {TASKS} tasks)",
        "store_pg_16",
        "store_pg_16_nolog",
    ),
    ("the event log: with / without (SQLite, 1 task)", "store_sqlite_1", "store_sqlite_1_nolog"),
    (
        f"the event log: with / without (SQLite, {TASKS} tasks)",
        "store_sqlite_16",
        "store_sqlite_16_nolog",
    ),
    ("ours over HTTP at batch 1 / the minimal service", "server_http_1", "floor_http_1"),
    (
        "ours over HTTP at batch 1 / our store in process (PostgreSQL, 16)",
        "server_http_1",
        "store_pg_16",
    ),
    ("our store in process (PostgreSQL, 16) / pg-boss at batch 1", "store_pg_16", "pgboss_1"),
    ("ours over HTTP at batch 1 / procrastinate", "server_http_1", "procrastinate_16"),
    ("our store in process (PostgreSQL, 16) / procrastinate", "store_pg_16", "procrastinate_16"),
    ("ours `{ serverTime }` / plain Starlette", "server_time_16", "plain_time_16"),
]


def sized_report(sizes: list[dict[str, float]]) -> list[str]:
    """The report's lines on the queries at size."""
    lines = [
        "",
        f"Queries at size, limit {SIZED_LIMIT}, through the store (PostgreSQL; 10% of"
        f" operations live and due, {OWNERS:,} owners):",
        "",
        "| operations (and watches) | dueOperations p50 ms | dueWatches p50 ms"
        " | operations(filter) p50 ms | leaseOperations p50 ms | overview counts p50 ms"
        " | operationStats p50 ms (of a connector) |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for size in sizes:
        lines.append(
            f"| {size['rows']:,} | {size['due_operations_ms']:.2f} | {size['due_watches_ms']:.2f}"
            f" | {size['operations_filter_ms']:.2f} | {size['lease_operations_ms']:.2f}"
            f" | {size['overview_ms']:.2f} | {size['stats_ms']:.2f}"
            f" ({size['stats_connector_ms']:.2f}) |"
        )
    smallest, largest = sizes[0], sizes[-1]
    lines += [
        "",
        f"Overview counts (operationCounts + watchCounts) p50 at {largest['rows']:,} after"
        f" VACUUM: {largest['overview_vacuumed_ms']:.2f} ms (issue 19's target: at most 300 ms"
        " at 1,000,000 on PostgreSQL)",
        "",
        f"operationStats: the last hour by minute over {largest['rows']:,} events spread over"
        " a day (about 1 in 24 in the window; 7 in 10 of those counted); of a connector, by"
        " each counted event's own connector.",
    ]
    lines += [
        "",
        f"leaseOperations p50 at {largest['rows']:,} / at {smallest['rows']:,}:"
        f" {largest['lease_operations_ms'] / smallest['lease_operations_ms']:.2f}"
        " (issue 16's target: at most 1.5 at 1,000,000 / 10,000)",
    ]
    return lines


def report(results: dict[str, Any], args: argparse.Namespace, elapsed: float) -> str:
    medians = results["medians"]
    lines = [
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {os.cpu_count()} CPUs ({platform.machine()},"
        f" {platform.system()} {platform.release()}), Python {platform.python_version()},"
        f" SQLite {sqlite3.sqlite_version}, {args.lifecycles} lifecycles per row"
        f" ({args.lifecycles * BATCH_JOBS} at batch {BATCH}), median of {args.rounds}"
        f" interleaved rounds, {elapsed:.0f} s in all",
        "",
        "CPU: user + system ms per lifecycle (per job, per request) over the timed window"
        " (benchmarks/cpu.py); server: the HTTP server's process tree; PostgreSQL: the"
        " backends connected from the server or the client; client: the load generator's"
        " process, or a peer's own (the library with its workers).",
        "",
        "| row | per second | ratio | to | server CPU ms | PostgreSQL CPU ms | client CPU ms"
        " | requests |",
        "| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: |",
    ]
    for key, title, to in RATIOS:
        if key not in medians:
            continue
        measure = medians[key]
        if to is None:
            ratio, to = "1", "peer" if key in PEERS_ROWS else "floor"
        elif to not in medians:
            ratio, to = "", ""
        else:
            ratio = f"{measure['per_s'] / medians[to]['per_s']:.2f}"
        lines.append(
            f"| {title} | {measure['per_s']:.0f} | {ratio} | {to}"
            + "".join(f" | {cell(measure, f'{group}_cpu_ms', '.3f')}" for group in CPU_GROUPS)
            + f" | {cell(measure, 'requests_per_lifecycle', '.2f')} |"
        )
    for title, key, to in EXTRA_RATIOS:
        if key in medians and to in medians:
            ratio = medians[key]["per_s"] / medians[to]["per_s"]
            lines.append(f"| {title} | | {ratio:.2f} | {to} | | | | |")
    lines += cpu_report(medians)
    lines += targets_report(medians)
    sizes = results["sizes"]
    if sizes:
        lines += sized_report(sizes)
    memory = results["memory"]
    lines += [
        "",
        "Server memory after each round (MiB): "
        + ", ".join(f"RSS {m['VmRSS']:.0f} / peak {m['VmHWM']:.0f}" for m in memory),
    ]
    soak = results["soak"]
    if soak:
        first, last = soak[0], soak[-1]
        lines += [
            "",
            f"Server under the HTTP load for {last['minutes']:.1f} min ({len(soak)} samples):"
            f" RSS {first['VmRSS']:.0f} MiB after {first['minutes']:.1f} min,"
            f" {last['VmRSS']:.0f} MiB at the end, peak {max(s['VmHWM'] for s in soak):.0f} MiB;"
            f" lifecycles/s {statistics.median(s['per_s'] for s in soak):.0f} (median of"
            " the samples)",
        ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--lifecycles", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--million", action="store_true", help="also 1M rows (slow)")
    parser.add_argument(
        "--postgres-url",
        default=os.environ.get("BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"),
    )
    parser.add_argument(
        "--minutes",
        type=float,
        default=0,
        help="after the rounds, keep the HTTP load on the server this long, sampling its RSS",
    )
    parser.add_argument(
        "--rows",
        type=lambda names: names.split(","),
        help="run only these rows (comma-separated keys of RATIOS, e.g."
        " pgboss_50,server_http_50), without the queries at size",
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    unknown = set(args.rows or ()) - {key for key, _, _ in RATIOS}
    if unknown:
        parser.error(f"unknown rows: {', '.join(sorted(unknown))}")
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-") as folder:
        results = asyncio.run(main_async(args, Path(folder)))
    print(report(results, args, time.perf_counter() - started))
    if args.json:
        print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
