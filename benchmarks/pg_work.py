"""PostgreSQL's work per lifecycle (claim → markSendStarted → finalize), statement by statement.

    .venv/bin/python -m benchmarks.pg_work [--lifecycles N] [--explains K] [--json]

On a fresh database (``pgwork_<random>`` on the server of ``--postgres-url``, migrated by
``store.migrate``, dropped at the end), through ``ConnectorStore`` in process on one pooled
connection, so one backend serves every statement:

- **CPU per lifecycle** at batch 1 (``claim_operation`` → ``mark_send_started`` →
  ``finalize_operation_and_arm_watch``) and at batch 50 (``claim_operations`` →
  ``mark_sends_started`` → ``finalize_operations``): the backend's user + system CPU
  (``/proc/<pid>/stat``, the pid from ``pg_backend_pid()``) over the timed lifecycles, after
  warm-up ones, divided by the lifecycles; beside it the statements sent per lifecycle.
- **Rows and indexes**: from ``pg_stat_user_tables`` and ``pg_stat_user_indexes``, over both
  runs (the backend's counters are read after it exits, when it has flushed them): the rows
  inserted and updated per lifecycle, the share of updates that were HOT (no index entry
  written), and every index the lifecycles never read (``idx_scan`` 0).
- **Per statement**: one lifecycle of each shape is recorded
  (``Database.statement_observer``) and replayed ``--explains`` times on fresh ids, each
  statement as ``EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON)`` in the transaction it ran in; the
  median planning, execution and trigger ms and shared buffers touched of each, its calls
  per lifecycle, its share of the execution ms, and that share of the measured CPU per
  lifecycle (an estimate of what the statement costs the backend).

With ``--leasing`` it measures instead the HTTP row "ours at batch 50, leasing"
(``load.leased_batch``) through the store: ``--lessees`` (16) lessees, each on its own
connection, drain a backlog of ``--backlog`` operations of ``load.OWNERS`` owners claimed
with a lapsed lease (``load.preclaim_unleased``'s), ``leaseOperations(limit 50)`` →
``markSendsStarted`` → ``finalizeOperations`` as ``load.drive`` hands out the work (a
shared count, the last call asking for what is left); a fresh ``ConnectorStore`` per round,
as a server started on the backlog, and the first round a warm-up. Each lessee's backend
CPU is read around each ``lease_operations`` call and around its settle, so the lease's
share is its own: **CPU per leased operation** of the lease and of the settle, statements
per lease call and operations per call, the median of ``--rounds``. Then one lease
statement of the head walk, taken with ``--lessees`` - 1 batches held by peers (the
head's rows they hold are read past), is **split by part**: run cut after each of its
CTEs (the walk and its guards; the accounts' caps and locks; the rows locked; the update),
each ``--explains`` times in a rolled-back transaction, with the backend CPU and shared
buffers of each cut.

``pg_stat_statements`` needs a server restart to load; this needs none and measures the same
backend CPU, ``EXPLAIN`` standing in for the per-statement split.
"""

import argparse
import asyncio
import json
import os
import re
import secrets
import statistics
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import asyncpg
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from benchmarks.load import CALLER, LEASE_MS, tenant_of
from benchmarks.side_by_side import claim_for
from store import ConnectorStore
from store.database import Database
from store.migrate import upgrade
from store.operations import Finalize, OperationClaim, SendMark

BATCH = 50
SIZES = {"batch 1": 1, f"batch {BATCH}": BATCH}
"""Lifecycles per call of each shape."""
WARM_UP = 20
"""Lifecycles run before the timed ones (plans cached, the backend's caches filled)."""
TICK_MS = 1000 / os.sysconf("SC_CLK_TCK")

Lifecycle = Callable[[str, str, Callable[[], Any]], Awaitable[None]]
"""``(id prefix, lease token, step_done)``: one batch of lifecycles on operation ids that
start with the prefix, ``step_done`` called after each step."""


def claim(operation_id: str, token: str, now: int) -> OperationClaim:
    """The HTTP rows' claim (``side_by_side.claim_for``), each operation's owner and account
    one of ``load.OWNERS``."""
    return claim_for(operation_id, token, now, tenant_of(operation_id))


def single(store: ConnectorStore) -> Lifecycle:
    """One lifecycle through the single methods."""
    operations = store.operations

    async def lifecycle(prefix: str, token: str, step_done: Callable[[], Any]) -> None:
        operation_id = f"{prefix}0"
        claimed = await operations.claim_operation(claim(operation_id, token, store.clock()))
        assert claimed.status == "claimed" and claimed.operation is not None, claimed
        assert claimed.operation.lease_token == token, claimed
        step_done()
        marked = await operations.mark_send_started(CALLER, operation_id, token, f"run-{token}")
        assert marked is not None
        step_done()
        done = await operations.finalize_operation_and_arm_watch(
            Finalize(
                CALLER,
                operation_id,
                version=marked.version,
                lease_token=token,
                due_at=store.clock() + LEASE_MS,
                result_entity={"id": operation_id},
                provider_etag="etag-1",
            )
        )
        assert done is not None and done.operation.state == "committed"
        step_done()

    return lifecycle


def batched(store: ConnectorStore) -> Lifecycle:
    """``BATCH`` lifecycles through the batch methods."""
    batches = store.batches

    async def lifecycle(prefix: str, token: str, step_done: Callable[[], Any]) -> None:
        ids = [f"{prefix}{i:03}" for i in range(BATCH)]
        now = store.clock()
        claimed = await batches.claim_operations([claim(i, token, now) for i in ids])
        assert all(c.status == "claimed" and c.operation is not None for c in claimed), claimed
        assert all(c.operation is not None and c.operation.lease_token == token for c in claimed)
        step_done()
        marked = await batches.mark_sends_started(
            [SendMark(CALLER, i, token, f"run-{token}") for i in ids]
        )
        step_done()
        finals = []
        for i, record in zip(ids, marked, strict=True):
            assert record is not None
            finals.append(
                Finalize(
                    CALLER,
                    i,
                    version=record.version,
                    lease_token=token,
                    due_at=store.clock() + LEASE_MS,
                    result_entity={"id": i},
                    provider_etag="etag-1",
                )
            )
        done = await batches.finalize_operations(finals)
        assert all(d is not None and d.operation.state == "committed" for d in done)
        step_done()

    return lifecycle


def cpu_ms(pid: int) -> float:
    """User + system CPU of process ``pid`` so far, in ms."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * TICK_MS


async def backend_pid(db: Database) -> int:
    """The pid of the pool's one backend."""
    row = await db.fetch_one(sa.select(sa.func.pg_backend_pid()))
    assert row is not None
    return int(row[0])


async def timed(
    url: str, shape: Callable[[ConnectorStore], Lifecycle], count: int, size: int
) -> dict[str, float]:
    """``count`` lifecycles (``count // size`` calls of ``shape``) on one connection, after
    ``WARM_UP``: the backend's CPU ms and the statements sent, per lifecycle."""
    db = Database(url, pool_size=1)
    await db.connect()
    try:
        store = ConnectorStore(db)
        lifecycle = shape(store)
        run = secrets.token_hex(4)
        for i in range(max(1, WARM_UP // size)):
            await lifecycle(f"w{run}{i}-", secrets.token_hex(8), int)
        pid = await backend_pid(db)
        sent = 0

        def counting(sql: str, values: Sequence[Any], transaction: object | None) -> None:
            nonlocal sent
            sent += 1

        calls = max(1, count // size)
        db.statement_observer = counting
        cpu, wall = cpu_ms(pid), time.perf_counter()
        for i in range(calls):
            await lifecycle(f"t{run}{i}-", secrets.token_hex(8), int)
        cpu, wall = cpu_ms(pid) - cpu, time.perf_counter() - wall
        db.statement_observer = None
        lifecycles = calls * size
        plans = [
            {"statement": label(0, row[0]).split(": ", 1)[1], "generic": row[1], "custom": row[2]}
            for row in await db.fetch_all(PLANS)
        ]
        return {
            "lifecycles": lifecycles,
            "cpu_ms": cpu / lifecycles,
            "wall_ms": wall * 1000 / lifecycles,
            "statements": sent / lifecycles,
            "plans": plans,
        }
    finally:
        await db.disconnect()


PLANS = sa.text(
    "SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements"
    " WHERE custom_plans > 0 OR generic_plans > 0 ORDER BY custom_plans DESC"
)
"""The backend's prepared statements and how often each was planned for its values
(custom) or ran its cached plan (generic)."""


def median_row(measures: list[dict[str, Any]]) -> dict[str, Any]:
    """The median of each measure over rounds (the last round's plans)."""
    numbers = ("lifecycles", "cpu_ms", "wall_ms", "statements")
    return {name: statistics.median(m[name] for m in measures) for name in numbers} | {
        "plans": measures[-1]["plans"]
    }


Recorded = list[tuple[int, int | None, str, list[Any]]]
"""(step, transaction number or None, SQL, values)."""


async def record(url: str, shape: Callable[[ConnectorStore], Lifecycle]) -> tuple[Recorded, str]:
    """The statements of one call of ``shape`` (after warm-up) and the id prefix and token
    it ran with (one string, ``RECORDED``)."""
    db = Database(url, pool_size=1)
    await db.connect()
    try:
        lifecycle = shape(ConnectorStore(db, new_id=lambda: f"{RECORDED}{secrets.token_hex(8)}"))
        await lifecycle(f"rw{secrets.token_hex(4)}-", secrets.token_hex(8), int)
        statements: Recorded = []
        step = 0
        numbers: dict[object, int] = {}

        def recording(sql: str, values: Sequence[Any], transaction: object | None) -> None:
            number = None if transaction is None else numbers.setdefault(transaction, len(numbers))
            statements.append((step, number, sql, list(values)))

        def next_step() -> None:
            nonlocal step
            step += 1

        db.statement_observer = recording
        await lifecycle(RECORDED, RECORDED, next_step)
        db.statement_observer = None
        return statements, RECORDED
    finally:
        await db.disconnect()


RECORDED = "recordedxyzzy"


def substituted(value: Any, fresh: str) -> Any:
    """``value`` with every ``RECORDED`` in its strings (in lists too) replaced by ``fresh``."""
    if isinstance(value, str):
        return value.replace(RECORDED, fresh)
    if isinstance(value, list):
        return [substituted(item, fresh) for item in value]
    return value


STEPS = ("claim", "mark", "finalize")


def label(step: int, sql: str) -> str:
    """A short name of a statement: its step, then what it writes or reads."""
    text = " ".join(sql.split())
    writes = re.findall(r"(INSERT INTO|UPDATE|DELETE FROM) (\w+)", text)
    if writes:
        verb, table = writes[-1] if text.startswith("WITH") else writes[0]
        what = f"{verb.split()[0]} {table.removeprefix('kubun_connector_')}"
        if re.search(r"INSERT INTO kubun_connector_\w+_event", text):
            what += " +events"
    else:
        table = re.search(r"FROM (\w+)", text)
        what = f"SELECT {table.group(1).removeprefix('kubun_connector_') if table else ''}"
        if "FOR UPDATE" in text or "FOR SHARE" in text:
            what += " (lock)"
    return f"{STEPS[step] if step < len(STEPS) else step}: {what}"


def plan_totals(plan: dict[str, Any]) -> dict[str, float]:
    """The planning, execution and trigger ms and shared buffers of one ``EXPLAIN`` result."""
    top = plan["Plan"]
    buffers = top.get("Shared Hit Blocks", 0) + top.get("Shared Read Blocks", 0)
    return {
        "plan_ms": plan.get("Planning Time", 0.0),
        "exec_ms": plan.get("Execution Time", 0.0),
        "trigger_ms": sum(t.get("Time", 0.0) for t in plan.get("Triggers", [])),
        "buffers": buffers + plan.get("Planning", {}).get("Shared Hit Blocks", 0),
    }


async def explained(dsn: str, statements: Recorded, times: int) -> list[dict[str, Any]]:
    """Each recorded statement replayed ``times`` on fresh ids as ``EXPLAIN (ANALYZE,
    BUFFERS)``, in its transaction: its median measures."""
    connection = await asyncpg.connect(dsn)
    measures: list[list[dict[str, float]]] = [[] for _ in statements]
    try:
        for _ in range(times):
            fresh = f"x{secrets.token_hex(6)}"
            transaction = None
            open_tx: int | None = None
            for index, (_, number, sql, values) in enumerate(statements):
                if number != open_tx:
                    if transaction is not None:
                        await transaction.commit()
                        transaction = None
                    if number is not None:
                        transaction = connection.transaction()
                        await transaction.start()
                    open_tx = number
                rows = await connection.fetch(
                    f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {sql}",
                    *(substituted(v, fresh) for v in values),
                )
                plan = rows[0][0]
                plan = json.loads(plan) if isinstance(plan, str) else plan
                measures[index].append(plan_totals(plan[0]))
            if transaction is not None:
                await transaction.commit()
    finally:
        await connection.close()
    return [
        {
            "statement": label(step, sql),
            **{
                field: statistics.median(m[field] for m in measures[index])
                for field in ("plan_ms", "exec_ms", "trigger_ms", "buffers")
            },
        }
        for index, (step, _, sql, _) in enumerate(statements)
    ]


TABLE_STATS = """
SELECT relname, n_tup_ins, n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables
"""
INDEX_STATS = """
SELECT relname, indexrelname, idx_scan FROM pg_stat_user_indexes
"""


async def stats(dsn: str) -> tuple[dict[str, tuple[int, int, int]], dict[str, tuple[str, int]]]:
    connection = await asyncpg.connect(dsn)
    try:
        tables = {r[0]: (r[1], r[2], r[3]) for r in await connection.fetch(TABLE_STATS)}
        indexes = {r[1]: (r[0], r[2]) for r in await connection.fetch(INDEX_STATS)}
    finally:
        await connection.close()
    return tables, indexes


async def table_pages(dsn: str) -> int:
    """The operations table's heap, in pages."""
    connection = await asyncpg.connect(dsn)
    try:
        pages: int = await connection.fetchval(
            "SELECT pg_relation_size('kubun_connector_operation')"
            " / current_setting('block_size')::int"
        )
    finally:
        await connection.close()
    return pages


async def wait_for_exits(dsn: str) -> None:
    """Until no other backend is connected to the database (each flushed its counters)."""
    connection = await asyncpg.connect(dsn)
    try:
        while await connection.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND pid <> pg_backend_pid()"
        ):
            await asyncio.sleep(0.05)
    finally:
        await connection.close()


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    admin_url = make_url(args.postgres_url).set(drivername="postgresql").render_as_string(False)
    name = f"pgwork_{secrets.token_hex(5)}"
    admin = await asyncpg.connect(admin_url)
    await admin.execute(f'CREATE DATABASE "{name}"')
    dsn = make_url(admin_url).set(database=name).render_as_string(False)
    url = dsn.replace("postgresql://", "postgresql+asyncpg://", 1)
    try:
        await asyncio.to_thread(upgrade, url)
        await wait_for_exits(dsn)
        before = await stats(dsn)
        rounds: dict[str, list[dict[str, Any]]] = {"batch 1": [], f"batch {BATCH}": []}
        for _ in range(args.rounds):
            rounds["batch 1"].append(await timed(url, single, args.lifecycles, 1))
            rounds[f"batch {BATCH}"].append(await timed(url, batched, args.lifecycles * 5, BATCH))
        rows = {name: median_row(measures) for name, measures in rounds.items()}
        await wait_for_exits(dsn)
        after = await stats(dsn)
        total = (sum(int(row["lifecycles"]) for row in rows.values()) + WARM_UP * 2) * args.rounds
        tables = {}
        for table, counts in after[0].items():
            ins, upd, hot = (a - b for a, b in zip(counts, before[0][table], strict=True))
            if ins or upd:
                tables[table] = {
                    "inserts": ins / total,
                    "updates": upd / total,
                    "hot": hot / upd if upd else None,
                }
        heap = await table_pages(dsn)
        unread = sorted(
            index
            for index, (table, scans) in after[1].items()
            if table in tables and scans == before[1][index][1]
        )
        indexes = {table: sum(1 for t, _ in after[1].values() if t == table) for table in tables}
        statements = {}
        for shape_name, shape in (("batch 1", single), (f"batch {BATCH}", batched)):
            recorded, _ = await record(url, shape)
            statements[shape_name] = await explained(dsn, recorded, args.explains)
        return {
            "rows": rows,
            "tables": tables,
            "indexes": indexes,
            "unread": unread,
            "heap_pages_per_1000": heap * 1000 / total,
            "statements": statements,
        }
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


def report(results: dict[str, Any]) -> str:
    lines = [
        "| lifecycle | PostgreSQL CPU ms / lifecycle | wall ms / lifecycle |"
        " statements / lifecycle |",
        "| --- | ---: | ---: | ---: |",
    ]
    for name, row in results["rows"].items():
        lines.append(
            f"| {name} ({row['lifecycles']:.0f}) | {row['cpu_ms']:.3f} | {row['wall_ms']:.3f} |"
            f" {row['statements']:.2f} |"
        )
    for name, row in results["rows"].items():
        lines += ["", f"{name}, plans (runs of a cached plan / plans made for the call):", ""]
        lines += [
            f"- {plan['statement']}: {plan['generic']} / {plan['custom']}" for plan in row["plans"]
        ]
    lines += [
        "",
        "| table | indexes | rows inserted / lifecycle | rows updated / lifecycle | HOT |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for table, row in results["tables"].items():
        hot = "" if row["hot"] is None else f"{row['hot']:.0%}"
        lines.append(
            f"| {table} | {results['indexes'][table]} | {row['inserts']:.2f} |"
            f" {row['updates']:.2f} | {hot} |"
        )
    lines += [
        "",
        f"Operations heap: {results['heap_pages_per_1000']:.0f} pages per 1,000 lifecycles.",
    ]
    lines += ["", "Indexes no lifecycle read: " + (", ".join(results["unread"]) or "none")]
    for shape, statements in results["statements"].items():
        size = SIZES[shape]
        executed = sum(s["exec_ms"] for s in statements) or 1.0
        cpu = results["rows"][shape]["cpu_ms"]
        lines += [
            "",
            f"{shape}, per statement (median of EXPLAIN ANALYZE runs; share: of the execution"
            " ms, the timed runs reusing cached plans; CPU: the share of the measured CPU per"
            " lifecycle):",
            "",
            "| statement | calls / lifecycle | planning ms | execution ms | of it triggers ms |"
            " buffers | share | ≈ CPU ms / lifecycle |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        ]
        for s in statements:
            share = s["exec_ms"] / executed
            lines.append(
                f"| {s['statement']} | {1 / size:.2f} | {s['plan_ms']:.3f} | {s['exec_ms']:.3f} |"
                f" {s['trigger_ms']:.3f} | {s['buffers']:.0f} | {share:.0%} | {share * cpu:.3f} |"
            )
        lines.append(
            f"| total | {len(statements) / size:.2f} |"
            f" {sum(s['plan_ms'] for s in statements):.3f} | {executed:.3f} |"
            f" {sum(s['trigger_ms'] for s in statements):.3f} |"
            f" {sum(s['buffers'] for s in statements):.0f} | 100% | {cpu:.3f} |"
        )
    return "\n".join(lines)


LEASE_LIMIT = BATCH
LEASE_BYTES = 4_000_000
"""A byte bound as the API's call gives (``resolvers.budget``), far from binding."""


async def fill(store: ConnectorStore, prefix: str, count: int) -> None:
    """``count`` operations of ``load.OWNERS`` owners, each claimed with a lapsed lease: due
    and free to lease (``load.preclaim_unleased``)."""
    for start in range(0, count, 500):
        lapsed = store.clock() - LEASE_MS - 1
        ids = [f"{prefix}{i:06}" for i in range(start, min(count, start + 500))]
        await store.batches.claim_operations([claim(i, secrets.token_hex(8), lapsed) for i in ids])


async def lessee(db: Database, pid: int, remaining: list[int], totals: dict[str, float]) -> None:
    """One lessee of ``leasing_round``: lease, then settle what it leased, until the shared
    count of operations left is 0 (or a call leases none)."""
    store = ConnectorStore(db)
    sent = 0

    def counting(sql: str, values: Sequence[Any], transaction: object | None) -> None:
        nonlocal sent
        sent += 1

    while remaining[0] > 0:
        take = min(LEASE_LIMIT, remaining[0])
        remaining[0] -= take
        token = secrets.token_hex(8)
        db.statement_observer = counting
        before = cpu_ms(pid)
        leased = await store.leasing.lease_operations(
            token, LEASE_MS, limit=take, max_bytes=LEASE_BYTES
        )
        leasing = cpu_ms(pid)
        db.statement_observer = None
        remaining[0] += take - len(leased)
        totals["lease_cpu"] += leasing - before
        totals["calls"] += 1
        totals["leased"] += len(leased)
        if not leased:
            break
        marked = await store.batches.mark_sends_started(
            [SendMark(r.caller_did, r.operation_id, token, f"run-{token}") for r in leased]
        )
        finals = []
        for record, mark in zip(leased, marked, strict=True):
            assert mark is not None
            finals.append(
                Finalize(
                    record.caller_did,
                    record.operation_id,
                    version=mark.version,
                    lease_token=token,
                    due_at=store.clock() + LEASE_MS,
                    result_entity={"id": record.operation_id},
                    provider_etag="etag-1",
                )
            )
        done = await store.batches.finalize_operations(finals)
        assert all(d is not None and d.operation.state == "committed" for d in done)
        totals["settle_cpu"] += cpu_ms(pid) - leasing
    totals["statements"] += sent


async def leasing_round(
    url: str, lessees: list[tuple[Database, int]], backlog: int, number: int
) -> dict[str, float]:
    """One round of ``--leasing``: ``backlog`` operations filled, then drained by the
    lessees (a connection and its backend's pid each): per leased operation the lease's and
    the settle's CPU ms, and per lease call the statements and the operations."""
    db = Database(url, pool_size=1)
    await db.connect()
    try:
        await fill(ConnectorStore(db), f"r{number}-", backlog)
    finally:
        await db.disconnect()
    totals = dict.fromkeys(("lease_cpu", "settle_cpu", "calls", "leased", "statements"), 0.0)
    remaining = [backlog]
    wall = time.perf_counter()
    await asyncio.gather(*(lessee(db, pid, remaining, totals) for db, pid in lessees))
    wall = time.perf_counter() - wall
    leased = max(totals["leased"], 1.0)
    return {
        "leased": totals["leased"],
        "lease_cpu_ms": totals["lease_cpu"] / leased,
        "settle_cpu_ms": totals["settle_cpu"] / leased,
        "statements_per_call": totals["statements"] / max(totals["calls"], 1.0),
        "per_call": totals["leased"] / max(totals["calls"], 1.0),
        "per_s": totals["leased"] / wall,
    }


def cuts(sql: str) -> dict[str, str]:
    """``sql`` (a lease statement) cut after each of its parts: its CTEs up to the one
    named, then a count of that one's rows; the whole statement last."""
    starts = {m.group(1): m.start() for m in re.finditer(r"(\w+) AS \n?\((?:SELECT|UPDATE)", sql)}
    parts = {
        "walk and guards (candidates)": ("capped_locked", "candidates"),
        "+ caps and account locks (capacity)": ("chosen", "capacity"),
        "+ rows locked (kept)": ("leased", "kept"),
        "+ update (leased)": ("touched", "leased"),
    }
    shown = {
        name: f"{sql[: starts[until]].rstrip().rstrip(',')}\nSELECT count(*) FROM {last}"
        for name, (until, last) in parts.items()
    }
    return shown | {"whole statement (+ accounts touched, events)": sql}


async def rolled_back(
    connection: asyncpg.Connection, statement: Any, values: Sequence[Any]
) -> list[Any]:
    """The rows of ``statement`` (SQL or a prepared statement) run in a transaction that is
    rolled back, so each run finds the rows as the last did."""
    transaction = connection.transaction()
    await transaction.start()
    try:
        if isinstance(statement, str):
            return list(await connection.fetch(statement, *values))
        return list(await statement.fetch(*values))
    finally:
        await transaction.rollback()


async def split_lease(url: str, dsn: str, lessees: int, times: int) -> list[dict[str, Any]]:
    """The head walk's lease statement, taken after ``lessees`` - 1 leases of ``BATCH``
    held, cut by part (``cuts``): each cut's backend CPU ms (over ``times`` runs, each rolled
    back) and shared buffers (``EXPLAIN (ANALYZE, BUFFERS)``)."""
    db = Database(url, pool_size=1)
    await db.connect()
    try:
        store = ConnectorStore(db)
        await fill(store, "split-", BATCH * lessees * 4)
        for _ in range(lessees - 1):
            await store.leasing.lease_operations(
                secrets.token_hex(8), LEASE_MS, limit=BATCH, max_bytes=LEASE_BYTES
            )
        recorded: list[tuple[str, list[Any]]] = []
        db.statement_observer = lambda sql, values, _: recorded.append((sql, list(values)))
        await store.leasing.lease_operations(
            secrets.token_hex(8), LEASE_MS, limit=BATCH, max_bytes=LEASE_BYTES
        )
        db.statement_observer = None
    finally:
        await db.disconnect()
    sql, values = next((s, v) for s, v in recorded if "LIMIT" in s)
    connection = await asyncpg.connect(dsn)
    try:
        pid = await connection.fetchval("SELECT pg_backend_pid()")
        types = [t.name for t in (await connection.prepare(sql)).get_parameters()]
        # Every cut names every parameter, so each is typed as in the whole statement.
        typed = ", ".join(f"${i}::{name}" for i, name in enumerate(types, 1))
        results = []
        for name, text in cuts(sql).items():
            if text is not sql:
                text = f"WITH parameters AS (SELECT {typed}), {text.removeprefix('WITH ')}"
            plan = await rolled_back(
                connection, f"EXPLAIN (ANALYZE, BUFFERS, TIMING OFF, FORMAT JSON) {text}", values
            )
            statement = await connection.prepare(text)
            cpu = cpu_ms(pid)
            for _ in range(times):
                await rolled_back(connection, statement, values)
            results.append(
                {
                    "part": name,
                    "cpu_ms": (cpu_ms(pid) - cpu) / times,
                    "buffers": plan_totals(json.loads(plan[0][0])[0])["buffers"],
                }
            )
        return results
    finally:
        await connection.close()


async def leasing_main(args: argparse.Namespace) -> dict[str, Any]:
    """``--leasing``: the rounds and the split, on a fresh database."""
    admin_url = make_url(args.postgres_url).set(drivername="postgresql").render_as_string(False)
    name = f"pglease_{secrets.token_hex(5)}"
    admin = await asyncpg.connect(admin_url)
    await admin.execute(f'CREATE DATABASE "{name}"')
    dsn = make_url(admin_url).set(database=name).render_as_string(False)
    url = dsn.replace("postgresql://", "postgresql+asyncpg://", 1)
    try:
        await asyncio.to_thread(upgrade, url)
        lessees = []
        for _ in range(args.lessees):
            db = Database(url, pool_size=1)
            await db.connect()
            lessees.append((db, await backend_pid(db)))
        try:
            rounds = [
                await leasing_round(url, lessees, args.backlog, number)
                for number in range(args.rounds + 1)
            ][1:]
        finally:
            for db, _ in lessees:
                await db.disconnect()
        row = {key: statistics.median(r[key] for r in rounds) for key in rounds[0]}
        return {"row": row, "split": await split_lease(url, dsn, args.lessees, args.explains)}
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


def leasing_report(results: dict[str, Any], args: argparse.Namespace) -> str:
    row = results["row"]
    lines = [
        f"{args.lessees} lessees, backlog {args.backlog}, median of {args.rounds} rounds:",
        "",
        "| lease CPU ms / leased op | settle CPU ms / leased op | statements / lease call |"
        " ops / lease call | leased ops/s |",
        "| ---: | ---: | ---: | ---: | ---: |",
        f"| {row['lease_cpu_ms']:.3f} | {row['settle_cpu_ms']:.3f} |"
        f" {row['statements_per_call']:.2f} | {row['per_call']:.1f} | {row['per_s']:.0f} |",
        "",
        f"One head-walk lease statement ({BATCH} leased, {args.lessees - 1} batches held by"
        f" peers), cut after each part, {args.explains} runs each rolled back:",
        "",
        "| cut after | backend CPU ms | shared buffers |",
        "| --- | ---: | ---: |",
    ]
    lines += [f"| {p['part']} | {p['cpu_ms']:.2f} | {p['buffers']:.0f} |" for p in results["split"]]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lifecycles", type=int, default=1000, help="at batch 1; 5x at 50")
    parser.add_argument("--rounds", type=int, default=3, help="medians over rounds")
    parser.add_argument("--explains", type=int, default=9)
    parser.add_argument(
        "--postgres-url",
        default=os.environ.get("BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"),
    )
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--leasing", action="store_true", help="the leasing row instead")
    parser.add_argument("--lessees", type=int, default=16, help="--leasing: concurrent lessees")
    parser.add_argument("--backlog", type=int, default=3016, help="--leasing: per round")
    args = parser.parse_args()
    if args.leasing:
        leased = asyncio.run(leasing_main(args))
        print(json.dumps(leased, indent=1) if args.json else leasing_report(leased, args))
        return
    results = asyncio.run(main_async(args))
    print(json.dumps(results, indent=1) if args.json else report(results))


if __name__ == "__main__":
    main()
