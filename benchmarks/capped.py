"""``make bench``: leasing beside a capped account, and batch settles beside many live rows,
on PostgreSQL and SQLite, each on data written in one burst with no ``ANALYZE`` after it.

    .venv/bin/python -m benchmarks.capped [--calls 50] [--rounds 3] [--no-settles]
        [--no-capped] [--backend postgresql|sqlite]

Leasing: one account at its cap (``CAP`` live leases held by another token) with ``DUE``
due operations of one owner, due first, and ``DUE`` more due across ``OTHER_OWNERS`` other
owners, each in an uncapped account of its own; then ``leaseOperations(limit: 100)`` as a
service calls it, each call's leases released outside its timing, so every call finds the
same work. A call that leases fewer than 100, or any operation of the capped account, fails
the run. Reported: p50, p95 and max per call (ms), each round on a fresh database, beside
the targets (``TARGET_P95_MS``, ``TARGET_MAX_MS``) and whether the slowest round met them.

Settles: ``markSendsStarted``, ``recordOperations`` (a failed send kept live under its
lease, as a retry) then ``finalizeOperations`` of ``SETTLED`` leased operations among 1,000
and among 100,000 live (attempted) ones, each step one batch; reported in ms per batch, median
over rounds, and the ratio of the two sizes. Two choices of the settled operations: in lease
order (the ``SETTLED`` due first, as ``leaseOperations`` hands them out, so neighbours in the
table and its indexes) and scattered (every ``live // SETTLED``-th: at 100,000 each item on
pages of its own, the most pages a batch can touch).

On SQLite the write-ahead log is checkpointed and cut before each step, outside its timing
(``Database.truncate_wal``, as the server's sweeper does when writes pause): otherwise the
first step after the burst cuts the burst's log (80 MB at 100,000 live, about 14 ms of CPU,
``journal_size_limit``), and a later step checkpoints the pages of the one before it once
the log passes ``WAL_AUTOCHECKPOINT_PAGES``, which at 1,000 live it never does. A step
still pays the checkpoint of its own pages when they alone pass it.

Alone and on one backend: ``--no-capped --backend sqlite``.

On PostgreSQL autovacuum is turned off for the operation table of the run's database, so no
``ANALYZE`` runs between the burst and the calls: the table's statistics are those of the
empty table the migration created.
"""

import argparse
import asyncio
import contextlib
import os
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Sequence
from pathlib import Path
from typing import TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import make_url

from benchmarks.side_by_side import create_database, drop_database
from store import ConnectorStore
from store.database import Database
from store.migrate import upgrade
from store.operations import Finalize, OperationTransition, SendMark

BACKENDS = ("postgresql", "sqlite")
CAP = 5
DUE = 10_000
OTHER_OWNERS = 200
LIMIT = 100
LEASE_MS = 60_000
TARGET_P95_MS = 100.0
TARGET_MAX_MS = 500.0
"""The capped case's targets, per backend: a call's p95 and max (ms)."""
SETTLED = 500
LIVE_SIZES = (1_000, 100_000)
TOKEN = "bench-capped"
HOLDER = "bench-holder"
SETTLE_TOKEN = "bench-settle"
_T = TypeVar("_T")
SETTLE_ORDERS = ("lease order", "scattered")
SETTLE_STEPS = (
    ("markSendsStarted", "mark"),
    ("recordOperations", "record"),
    ("finalizeOperations", "finalize"),
)

COLUMNS = (
    "caller_did, operation_id, node_key, owner_did, connector_name, model, op, account_key,"
    " target, source_id, deterministic_event_id, payload_hash, reissue_intent, state, attempts,"
    " version, incarnation, lease_token, lease_expires_at, created_at, updated_at"
)


def burst(is_postgres: bool, count: int, select: str) -> str:
    """One ``INSERT … SELECT`` of ``count`` operations, ``select`` naming each row's values
    over ``i`` (1 to ``count``)."""
    table = "kubun_connector_operation"
    if is_postgres:
        rows = f"FROM generate_series(1, {count}) AS g(i)"
        return f"INSERT INTO {table} ({COLUMNS}) SELECT {select} {rows}"
    rows = f"WITH RECURSIVE g(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM g WHERE i < {count})"
    return f"{rows} INSERT INTO {table} ({COLUMNS}) SELECT {select} FROM g"


def operation_values(
    prefix: str, owner: str, account: str, state: str, lease: str, created: str
) -> str:
    """The values of one seeded operation (SQL over ``i``): ``prefix`` names its key, source
    and node; the others are SQL expressions."""
    return (
        f"'did:bench:caller', '{prefix}-' || i, 'node-{prefix}-' || i, {owner}, 'bench',"
        f" 'CalendarEvent', 'create', {account}, 'calendars/primary', '{prefix}-source-' || i,"
        f" 'event-{prefix}-' || i, 'sha256:0', 'null', '{state}', 0, 0, 'seed', {lease},"
        f" {created}, {created}"
    )


def capped_statements(
    is_postgres: bool, now: int, due: int = DUE, owners: int = OTHER_OWNERS
) -> list[str]:
    """The capped case's burst: the capped account's held leases and ``due`` due operations
    (due first), then ``due`` due operations across ``owners`` other owners, each owner's in
    an uncapped account of its own."""
    held = f"'{HOLDER}', {now + 3_600_000}"
    free = "NULL, NULL"
    other_owner = f"'did:bench:owner-' || (i % {owners})"
    other_account = f"'open-' || (i % {owners})"
    return [
        "INSERT INTO kubun_connector_account (connector_name, account_key, max_in_flight,"
        f" updated_at) VALUES ('bench', 'capped', {CAP}, {now})",
        burst(
            is_postgres,
            CAP,
            operation_values(
                "held", "'did:bench:capped'", "'capped'", "attempted", held, f"{now - 30_000} + i"
            ),
        ),
        burst(
            is_postgres,
            due,
            operation_values(
                "capped",
                "'did:bench:capped'",
                "'capped'",
                "attempted",
                free,
                f"{now - 3_000_000} + i",
            ),
        ),
        burst(
            is_postgres,
            due,
            operation_values(
                "other", other_owner, other_account, "attempted", free, f"{now - 2_000_000} + i"
            ),
        ),
    ]


def live_statements(is_postgres: bool, now: int, count: int) -> list[str]:
    """``count`` live operations, each leased to ``SETTLE_TOKEN`` and its own entity."""
    lease = f"'{SETTLE_TOKEN}', {now + 3_600_000}"
    return [
        burst(
            is_postgres,
            count,
            operation_values(
                "live", "'did:bench:owner'", "'open'", "attempted", lease, f"{now - 100_000} + i"
            ),
        )
    ]


def admin_url(url: str) -> str:
    """``url`` as asyncpg takes it."""
    return make_url(url).set(drivername="postgresql").render_as_string(False)


@contextlib.asynccontextmanager
async def fresh_store(backend: str, postgres_url: str) -> AsyncIterator[ConnectorStore]:
    """A store on a new, migrated database (a PostgreSQL database made for it and dropped
    after, or a SQLite file in a temporary folder), its operation table analyzed while empty
    and, on PostgreSQL, left alone by autovacuum."""
    with tempfile.TemporaryDirectory() as folder:
        name = None
        if backend == "postgresql":
            name, dsn = await create_database(admin_url(postgres_url))
            url = dsn.replace("postgresql://", "postgresql+asyncpg://", 1)
        else:
            url = f"sqlite+aiosqlite:///{Path(folder) / 'bench.db'}"
        try:
            await asyncio.to_thread(upgrade, url)
            db = Database(url, pool_size=4, statement_timeout_s=0)
            await db.connect()
            try:
                await db.write_all(sa.text("ANALYZE"))
                if db.is_postgres:
                    await db.write_all(
                        sa.text(
                            "ALTER TABLE kubun_connector_operation SET (autovacuum_enabled = false)"
                        )
                    )
                yield ConnectorStore(db)
            finally:
                await db.disconnect()
        finally:
            if name is not None:
                await drop_database(admin_url(postgres_url), name)


async def capped_round(backend: str, postgres_url: str, calls: int) -> dict[str, float]:
    """One round of the capped case on a fresh database: p50, p95 and max (ms) of ``calls``
    ``leaseOperations(limit: 100)`` calls after 3 warm-up calls."""
    async with fresh_store(backend, postgres_url) as store:
        now = store.clock()
        for statement in capped_statements(store.db.is_postgres, now):
            await store.db.write_all(sa.text(statement))
        times = []
        for number in range(3 + calls):
            started = time.perf_counter()
            leased = await store.leasing.lease_operations(TOKEN, LEASE_MS, limit=LIMIT)
            elapsed = time.perf_counter() - started
            if len(leased) != LIMIT or any(r.account_key == "capped" for r in leased):
                raise SystemExit(f"{backend}: a call leased {len(leased)}, capped included")
            if number >= 3:
                times.append(elapsed * 1000)
            keys = [(record.caller_did, record.operation_id) for record in leased]
            await store.leasing.release_leases(TOKEN, keys)
        times.sort()
        return {
            "p50_ms": statistics.median(times),
            "p95_ms": times[max(0, int(len(times) * 0.95) - 1)],
            "max_ms": times[-1],
        }


def settled_keys(live: int, order: str) -> list[tuple[str, str]]:
    """The keys of the ``SETTLED`` operations a round settles among ``live`` seeded ones:
    the due first (``lease order``) or every ``live // SETTLED``-th (``scattered``)."""
    step = 1 if order == "lease order" else live // SETTLED
    return [("did:bench:caller", f"live-{1 + i * step}") for i in range(SETTLED)]


async def settle_round(backend: str, postgres_url: str, live: int, order: str) -> dict[str, float]:
    """One round of the settles on a fresh database with ``live`` live operations: the ms
    (``<step>_ms``) and this process's CPU ms (``<step>_cpu``: on SQLite the statements'
    work itself, without waits for the disk or for a busy machine's cores) of
    ``markSendsStarted``, ``recordOperations`` and ``finalizeOperations`` of ``SETTLED`` of
    them (``settled_keys``), each step after the write-ahead log is cut (SQLite; outside its
    timing)."""
    measured: dict[str, float] = {}

    async def step(name: str, call: Awaitable[_T]) -> _T:
        await store.db.truncate_wal()
        cpu, started = time.process_time(), time.perf_counter()
        result = await call
        measured[f"{name}_ms"] = (time.perf_counter() - started) * 1000
        measured[f"{name}_cpu"] = (time.process_time() - cpu) * 1000
        return result

    async with fresh_store(backend, postgres_url) as store:
        now = store.clock()
        for statement in live_statements(store.db.is_postgres, now, live):
            await store.db.write_all(sa.text(statement))
        marks = [
            SendMark(caller, key, SETTLE_TOKEN, "bench-run")
            for caller, key in settled_keys(live, order)
        ]
        marked = await step("mark", store.batches.mark_sends_started(marks))
        changes = [
            OperationTransition(
                r.caller_did, r.operation_id, "attempted", "attempted", r.version, SETTLE_TOKEN
            )
            for r in marked
            if r is not None
        ]
        recorded = await step("record", store.batches.record_operations(changes))
        finals = [
            Finalize(r.caller_did, r.operation_id, r.version, SETTLE_TOKEN, now + 60_000)
            for r in recorded
            if r is not None
        ]
        if len(finals) != SETTLED:
            raise SystemExit(f"{backend}: {len(finals)} of {SETTLED} marked and recorded")
        finalized = await step("finalize", store.batches.finalize_operations(finals))
        if sum(1 for f in finalized if f is not None) != SETTLED:
            raise SystemExit(f"{backend}: not every item finalized")
        return measured


async def settle_lines(postgres_url: str, rounds: int, backends: Sequence[str]) -> list[str]:
    """The settles' table: per backend of ``backends``, order and step, the median ms per
    batch at each of ``LIVE_SIZES`` and the ratio of the largest to the smallest."""
    lines = [
        f"Settles of {SETTLED} items among live operations, median over {rounds} rounds: ms"
        " per batch (this process's CPU ms: SQLite's work, PostgreSQL's client side).",
        "",
        "| backend | items | step | "
        + " | ".join(f"{n:,} live" for n in LIVE_SIZES)
        + " | ratio |",
        "| --- | --- | --- | " + " | ".join("---" for _ in LIVE_SIZES) + " | --- |",
    ]
    for backend in backends:
        for order in SETTLE_ORDERS:
            by_size = []
            for live in LIVE_SIZES:
                settles = [
                    await settle_round(backend, postgres_url, live, order) for _ in range(rounds)
                ]
                by_size.append(median_of(settles))
            for step, name in SETTLE_STEPS:
                wall, cpu = f"{name}_ms", f"{name}_cpu"
                cells = " | ".join(f"{size[wall]:.0f} ({size[cpu]:.0f})" for size in by_size)
                ratio = by_size[-1][wall] / by_size[0][wall]
                cpu_ratio = by_size[-1][cpu] / by_size[0][cpu]
                lines.append(
                    f"| {backend} | {order} | {step} | {cells} | {ratio:.2f} ({cpu_ratio:.2f}) |"
                )
                print(lines[-1], file=sys.stderr)
    return lines


def median_of(rounds: list[dict[str, float]]) -> dict[str, float]:
    return {name: statistics.median(r[name] for r in rounds) for name in rounds[0]}


def spread(rounds: list[dict[str, float]], name: str) -> str:
    values = sorted(r[name] for r in rounds)
    return f"{statistics.median(values):.0f} ({values[0]:.0f}-{values[-1]:.0f})"


async def main_async(args: argparse.Namespace) -> list[str]:
    if not args.capped:
        return await settle_lines(args.postgres_url, args.rounds, args.backends)
    lines = [
        f"Capped case: leaseOperations(limit: {LIMIT}), one account at its cap of {CAP} with"
        f" {DUE:,} due, {DUE:,} due across {OTHER_OWNERS} other owners, no ANALYZE after the"
        f" burst; {args.calls} calls a round, {args.rounds} rounds; median (min-max over"
        " rounds), ms.",
        "",
        f"Target: p95 ≤ {TARGET_P95_MS:.0f}, max ≤ {TARGET_MAX_MS:.0f} (met: in every round).",
        "",
        "| backend | p50 | p95 | max | target met |",
        "| --- | --- | --- | --- | --- |",
    ]
    for backend in args.backends:
        rounds = [
            await capped_round(backend, args.postgres_url, args.calls) for _ in range(args.rounds)
        ]
        cells = " | ".join(spread(rounds, name) for name in ("p50_ms", "p95_ms", "max_ms"))
        met = all(r["p95_ms"] <= TARGET_P95_MS and r["max_ms"] <= TARGET_MAX_MS for r in rounds)
        lines.append(f"| {backend} | {cells} | {'yes' if met else 'no'} |")
        print(lines[-1], file=sys.stderr)
    if not args.settles:
        return lines
    lines += ["", *await settle_lines(args.postgres_url, args.rounds, args.backends)]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--no-settles",
        dest="settles",
        action="store_false",
        help="measure the capped case only",
    )
    parser.add_argument(
        "--no-capped",
        dest="capped",
        action="store_false",
        help="measure the settles only",
    )
    parser.add_argument(
        "--backend",
        dest="backends",
        action="append",
        choices=BACKENDS,
        help="measure this backend only (repeat for more; default: both)",
    )
    parser.add_argument(
        "--postgres-url",
        default=os.environ.get(
            "BENCH_POSTGRES_URL", "postgresql+asyncpg://postgres@127.0.0.1:5432/test"
        ),
    )
    args = parser.parse_args()
    args.backends = args.backends or list(BACKENDS)
    print("\n".join(asyncio.run(main_async(args))))


if __name__ == "__main__":
    main()
