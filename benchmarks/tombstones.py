"""The size of a tombstone on PostgreSQL, and what a tombstone costs a claim (issue 17's target:
a tombstone row at most 120 bytes, ``pg_total_relation_size`` / rows at 100k rows, its
indexes included).

``python -m benchmarks.tombstones [--rows 100000] [--claims 2000]``: on a fresh database
(``bench_<random>`` on the server of ``BENCH_POSTGRES_URL``, default
``postgresql://postgres@127.0.0.1:5432/test``, dropped at the end), ``--rows`` committed
operations are inserted in one statement, then collected by the store's own
``collect_finished_operations`` in batches of 1,000 (the sweeper's default), which writes
their tombstones as production does (random key digests, in the order of collection). It
prints the tombstone table's size per row right after the collection and after ``VACUUM``
(which adds the free-space and visibility maps and summarises the BRIN index), the collect
rate, the plan of a claim's tombstone probe, and the median time of ``claim_operation``
through the store for a fresh key, a replayed key that exists, and a replayed key that was
collected (probe, then roll back), each ``--claims`` times, and of the probe alone.
"""

import argparse
import asyncio
import hashlib
import os
import secrets
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg
from sqlalchemy.engine import make_url

from store import ConnectorStore
from store.database import Database
from store.migrate import upgrade
from store.records import OperationClaim
from store.retention import MAX_COLLECT_LIMIT
from store.tables import operation_tombstone
from store.tombstones import get_tombstone, key_digest

TABLE = operation_tombstone.name
BATCH = 1000
COLUMNS = (
    "caller_did, operation_id, node_key, owner_did, connector_name, model, op, account_key,"
    " target, source_id, deterministic_event_id, payload_hash, reissue_intent, state, attempts,"
    " version, incarnation, created_at, updated_at"
)
VALUES = (
    "'did:key:z6MkBench' || (i % 97), 'op-' || md5(i::text), 'node-' || i, 'did:key:owner',"
    " 'calendar', 'Event', 'update', 'acct-' || (i % 13), 'events/' || i, 'evt-' || i,"
    " 'det-' || i, 'sha256:' || md5(i::text), '{{}}', 'committed', 1, 1, 'inc', {at}, {at}"
)


def claim(number: int, now: int, operation_id: str | None = None) -> OperationClaim:
    """The envelope the seeded operation ``number`` was claimed with (``VALUES``), or a
    fresh key's when ``operation_id`` is given."""
    digest = hashlib.md5(str(number).encode()).hexdigest()
    return OperationClaim(
        caller_did=f"did:key:z6MkBench{number % 97}",
        operation_id=operation_id or f"op-{digest}",
        owner_did="did:key:owner",
        connector_name="calendar",
        model="Event",
        op="update",
        account_key=f"acct-{number % 13}",
        target=f"events/{number}",
        source_id=f"evt-{number}",
        deterministic_event_id=f"det-{number}",
        payload_hash=f"sha256:{digest}",
        lease_token="lease-bench",
        lease_expires_at=now + 60_000,
    )


async def sizes(connection: asyncpg.Connection) -> dict[str, int]:
    """The tombstone table's rows and bytes: heap, each index, and in all."""
    row = await connection.fetchrow(
        f"SELECT count(*) AS rows, pg_relation_size('{TABLE}') AS heap,"
        f" pg_relation_size('{TABLE}_pkey') AS pkey,"
        f" pg_relation_size('{TABLE}_collected_idx') AS brin,"
        f" pg_total_relation_size('{TABLE}') AS total FROM {TABLE}"
    )
    assert row is not None
    return dict(row)


def show(label: str, measured: dict[str, int]) -> None:
    rows = measured["rows"]
    print(
        f"{label}: {rows} tombstones, {measured['total']} bytes in all = "
        f"{measured['total'] / rows:.1f} bytes a row (heap {measured['heap'] / rows:.1f}, "
        f"primary key {measured['pkey'] / rows:.1f}, BRIN {measured['brin'] / rows:.2f})"
    )


async def median_ms(run: Callable[[int], Awaitable[Any]], count: int) -> float:
    times = []
    for number in range(count):
        started = time.perf_counter()
        await run(number)
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


async def measure(url: str, rows: int, claims: int) -> None:
    now = int(time.time() * 1000)
    await asyncio.to_thread(upgrade, url)
    raw = await asyncpg.connect(make_url(url).set(drivername="postgresql").render_as_string(False))
    db = Database(url)
    await db.connect()
    try:
        select = VALUES.format(at=now - 10 * 24 * 3600 * 1000)
        await raw.execute(
            f"INSERT INTO kubun_connector_operation ({COLUMNS})"
            f" SELECT {select} FROM generate_series(1, {rows}) AS g(i)"
        )
        await raw.execute("ANALYZE kubun_connector_operation")
        store = ConnectorStore(db)
        started = time.perf_counter()
        collected = 0
        while True:
            batch = await store.retention.collect_finished_operations(
                now, min(BATCH, MAX_COLLECT_LIMIT), failed_older_than=now
            )
            collected += batch
            if batch < BATCH:
                break
        seconds = time.perf_counter() - started
        print(
            f"collected {collected} operations in batches of {BATCH}: {seconds:.1f} s, "
            f"{collected / seconds:.0f} a second (delete + tombstones, one transaction a batch)"
        )
        show("after the collection", await sizes(raw))
        await raw.execute(f"VACUUM ANALYZE {TABLE}")
        show("after VACUUM", await sizes(raw))
        plan = await raw.fetch(
            f"EXPLAIN SELECT * FROM {TABLE} WHERE key_digest = $1", key_digest("x", "y")
        )
        print("a claim's probe:", " / ".join(row[0].strip() for row in plan))

        fresh = await median_ms(
            lambda n: store.operations.claim_operation(
                claim(rows + n, store.clock(), operation_id=f"fresh-{n}")
            ),
            claims,
        )
        exists = await median_ms(
            lambda n: store.operations.claim_operation(
                claim(rows + n, store.clock(), operation_id=f"fresh-{n}")
            ),
            claims,
        )
        replayed = [await store.operations.claim_operation(claim(n + 1, now)) for n in range(3)]
        assert {result.status for result in replayed} == {"collected"}, replayed
        collected_ms = await median_ms(
            lambda n: store.operations.claim_operation(claim(n + 1, store.clock())), claims
        )
        probe_ms = await median_ms(
            lambda n: get_tombstone(db, key_digest(f"did:key:z6MkBench{n % 97}", f"fresh-{n}")),
            claims,
        )
        print(
            f"claim_operation, median of {claims}: fresh key {fresh:.3f} ms (insert, probe, "
            f"commit), key that exists {exists:.3f} ms (no probe), collected key "
            f"{collected_ms:.3f} ms (insert, probe, roll back: no commit to flush); the probe "
            f"alone {probe_ms:.3f} ms"
        )
    finally:
        await db.disconnect()
        await raw.close()


async def main_async(args: argparse.Namespace) -> None:
    admin_url = make_url(args.postgres_url).set(drivername="postgresql").render_as_string(False)
    name = f"bench_{secrets.token_hex(6)}"
    admin = await asyncpg.connect(admin_url, timeout=5)
    await admin.execute(f'CREATE DATABASE "{name}"')
    try:
        url = (
            make_url(args.postgres_url)
            .set(drivername="postgresql+asyncpg", database=name)
            .render_as_string(False)
        )
        server = await admin.fetchval("SHOW server_version")
        print(f"PostgreSQL {server}, {args.rows} rows")
        await measure(url, args.rows, args.claims)
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--claims", type=int, default=2000)
    parser.add_argument(
        "--postgres-url",
        default=os.environ.get("BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"),
    )
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
