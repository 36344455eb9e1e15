"""The due lists and the filtered operation list are index range scans in due order, not
scans of the whole table: EXPLAIN on both backends, over a few thousand analyzed rows."""

import asyncio
import time
from typing import Any

import pytest
import sqlalchemy as sa

from benchmarks.seed import seed_statements
from store import ConnectorStore
from store.database import Database
from store.operations import OperationFilter
from store.retention import finished_before
from store.tables import operation as op
from store.tombstones import find_tombstones, key_digest
from tests.factories import bulk_finished_operations

ROWS = 5000
NOW = 1_800_000_000_000


async def plan_of(database: Database, run: Any) -> str:
    """The plan of the last statement ``run`` sends (the store's own statement, its values
    rendered in), as one text."""
    sent: list[Any] = []
    fetch_all, fetch_one = database.fetch_all, database.fetch_one

    async def recording(query: Any) -> Any:
        sent.append(query)
        return await fetch_all(query)

    async def recording_one(query: Any) -> Any:
        sent.append(query)
        return await fetch_one(query)

    database.fetch_all = recording  # type: ignore[method-assign]
    database.fetch_one = recording_one  # type: ignore[method-assign]
    try:
        await run()
    finally:
        del database.fetch_all
        del database.fetch_one
    if database.is_postgres:
        dialect = sa.dialects.postgresql.dialect()
        sql = str(sent[-1].compile(dialect=dialect, compile_kwargs={"literal_binds": True}))
        rows = await database.fetch_all(sa.text("EXPLAIN " + sql))
    else:
        # With its values bound as the store sends them: SQLAlchemy's SQLite compiler leaves
        # the -1 of a LIMIT it adds before an OFFSET (``lease_guards.probe``) a parameter
        # even under ``literal_binds``.
        sql, values = database._compile(sent[-1])
        rows = await database._execute("EXPLAIN QUERY PLAN " + sql, values, one=False)
    return "\n".join(" ".join(str(value) for value in row.values()) for row in rows)


@pytest.fixture
async def seeded(database: Database) -> ConnectorStore:
    for statement in seed_statements(database.is_postgres, ROWS, NOW):
        await database.write_all(sa.text(statement))
    return ConnectorStore(database)


def assert_no_table_scan(plan: str, table: str) -> None:
    """Every read of ``table`` in ``plan`` goes through one of its indexes."""
    lines = plan.splitlines()
    assert [line for line in lines if table in line], plan
    assert not [line for line in lines if f"Seq Scan on {table}" in line], plan
    assert not [line for line in lines if f"Bitmap Heap Scan on {table}" in line], plan
    assert not [line for line in lines if line.rstrip().endswith(f"SCAN {table}")], plan


async def test_plan__due_operations_walk_the_live_partial_indexes(seeded: ConnectorStore):
    retention = seeded.retention
    plan = await plan_of(seeded.db, lambda: retention.list_due_operations(NOW, 100))
    assert_no_table_scan(plan, "kubun_connector_operation")
    due = await retention.list_due_operations(NOW, 100)
    assert len(due) == 100 and all(record.state == "attempted" for record in due)


async def test_plan__due_watches_walk_the_pending_partial_index(seeded: ConnectorStore):
    watches = seeded.watches
    plan = await plan_of(seeded.db, lambda: watches.list_due_watches(NOW, 100))
    assert_no_table_scan(plan, "kubun_connector_projection_watch")


async def test_plan__filtered_operations_walk_the_order_index(seeded: ConnectorStore):
    operations = seeded.operations
    where = OperationFilter(connector_name="seed")
    plan = await plan_of(seeded.db, lambda: operations.list_tracked_operations(where, limit=100))
    assert_no_table_scan(plan, "kubun_connector_operation")


async def test_plan__byte_bounded_lists_still_walk_their_indexes(seeded: ConnectorStore):
    operations, retention, watches = seeded.operations, seeded.retention, seeded.watches
    where = OperationFilter(connector_name="seed")
    bounded = 1_000_000
    plans = [
        await plan_of(
            seeded.db,
            lambda: operations.list_tracked_operations(where, limit=100, max_bytes=bounded),
        ),
        await plan_of(
            seeded.db, lambda: retention.list_due_operations(NOW, 100, max_bytes=bounded)
        ),
    ]
    watch_plan = await plan_of(
        seeded.db, lambda: watches.list_due_watches(NOW, 100, max_bytes=bounded)
    )
    for plan in plans:
        assert_no_table_scan(plan, "kubun_connector_operation")
    assert_no_table_scan(watch_plan, "kubun_connector_projection_watch")


async def test_plan__finished_operations_walk_a_created_at_range(seeded: ConnectorStore):
    """Collection's choice (``finished_before``) reads the terminal rows past the cutoff
    through an index range bounded by ``created_at``: no index holds ``updated_at``."""
    cutoff = NOW - 10_000_000 + 200
    chosen = (
        sa.select(op.c.caller_did, op.c.operation_id)
        .where(finished_before(cutoff, cutoff))
        .limit(100)
    )
    plan = await plan_of(seeded.db, lambda: seeded.db.fetch_all(chosen))
    assert_no_table_scan(plan, "kubun_connector_operation")
    # An index range bounded by created_at (the partial finished index, or the order index
    # when the planner prefers it), whatever the backend.
    assert "created_at <" in plan or "created_at<" in plan, plan
    rows = await seeded.db.fetch_all(chosen)
    assert len(rows) == 100


TOMBSTONES = 100_000
FILL_TOMBSTONES = {
    True: "INSERT INTO kubun_connector_operation_tombstone SELECT"
    " substring(decode(md5(i::text), 'hex') from 1 for 12), '\\x0000000000000000'::bytea, 1, i"
    f" FROM generate_series(1, {TOMBSTONES}) AS g(i)",
    False: f"WITH RECURSIVE g(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM g WHERE i < {TOMBSTONES})"
    " INSERT INTO kubun_connector_operation_tombstone SELECT randomblob(12), zeroblob(8), 1, i"
    " FROM g",
}
"""Tombstones of random keys, as many as the size target's (PostgreSQL, SQLite)."""


async def test_plan__a_batch_claims_tombstone_lookup_probes_the_primary_key(database: Database):
    """``claimOperations``' one lookup of the tombstones of the keys it inserted
    (``find_tombstones``: the rows whose ``key_digest`` is in a list) probes the primary key
    among 100,000 tombstones. Its statement is written here with the digests as literals:
    SQLAlchemy renders no bytes."""
    await database.write_all(sa.text(FILL_TOMBSTONES[database.is_postgres]))
    await bulk_finished_operations(database, 45, updated_at=NOW - 1)
    store = ConnectorStore(database)
    await store.retention.collect_finished_operations(NOW, failed_older_than=NOW)
    await database.write_all(sa.text("ANALYZE"))
    digests = [key_digest("did:key:bulk", f"bulk-{number}") for number in range(1, 51)]
    literal = "'\\x{}'::bytea" if database.is_postgres else "X'{}'"
    listed = ", ".join(literal.format(digest.hex()) for digest in digests)
    explain = "EXPLAIN " if database.is_postgres else "EXPLAIN QUERY PLAN "
    table = "kubun_connector_operation_tombstone"
    rows = await database.fetch_all(
        sa.text(f"{explain}SELECT * FROM {table} WHERE key_digest IN ({listed})")
    )
    plan = "\n".join(" ".join(str(value) for value in row.values()) for row in rows)

    # Probes of the primary key (a bitmap over them is fine: no order is asked for).
    assert f"{table}_pkey" in plan or "sqlite_autoindex" in plan, plan
    assert f"Seq Scan on {table}" not in plan, plan
    assert not [line for line in plan.splitlines() if line.rstrip().endswith(f"SCAN {table}")]
    assert len(await find_tombstones(database, digests)) == 45


async def vacuumed_all_visible(database: Database, table: str) -> None:
    """``VACUUM (ANALYZE)`` until every page of ``table`` is marked all-visible (a vacuum
    leaves a page unmarked while another session's snapshot may still need its rows'
    prior state; on a busy machine the first one can), for at most 30 s."""
    visible = sa.text(
        "SELECT relallvisible >= relpages AS done FROM pg_class WHERE relname = :table"
    ).bindparams(table=table)
    deadline = time.monotonic() + 30
    while True:
        await database.fetch_all(sa.text("VACUUM (ANALYZE)"))
        row = await database.fetch_one(visible)
        if row is not None and row["done"]:
            return
        assert time.monotonic() < deadline, f"{table}'s pages never all became visible"
        await asyncio.sleep(0.1)


async def test_plan__overview_counts_read_only_their_covering_indexes(seeded: ConnectorStore):
    """Once (auto)vacuum has set the visibility map, each count is an index-only scan on
    PostgreSQL: no table page is read, however many rows. SQLite reads the totals and the
    watches from covering indexes, and the live rows through their partial index (it does
    not take a partial index's own condition as covered)."""
    if seeded.db.is_postgres:
        await vacuumed_all_visible(seeded.db, "kubun_connector_operation")
    counts = seeded.counts
    operations = await plan_of(seeded.db, counts.count_operations)
    watches = await plan_of(seeded.db, counts.count_watches)
    if seeded.db.is_postgres:
        assert operations.count("Index Only Scan") == 2, operations
        assert "kubun_connector_operation_account_state_idx" in operations, operations
        assert "kubun_connector_operation_live_account_idx" in operations, operations
        assert "Index Only Scan using kubun_connector_projection_watch_status_idx" in watches
    else:
        assert "COVERING INDEX kubun_connector_operation_account_state_idx" in operations
        assert "INDEX kubun_connector_operation_live_account_idx" in operations
        assert "COVERING INDEX kubun_connector_projection_watch_status_idx" in watches


async def test_plan__the_work_timer_reads_walk_indexes(seeded: ConnectorStore):
    wakeups = seeded.wakeups
    plans = [
        await plan_of(seeded.db, lambda: wakeups.next_due_after(NOW)),
        await plan_of(seeded.db, lambda: wakeups.due_between(NOW - 1000, NOW)),
    ]
    for plan in plans:
        assert_no_table_scan(plan, "kubun_connector_operation")


async def plan_of_update(database: Database, run: Any) -> str:
    """The plan of the first ``UPDATE`` of operations ``run`` sends on SQLite, as the store's
    statement observer saw it."""
    sent: list[tuple[str, Any]] = []
    database.statement_observer = lambda sql, values, _: sent.append((sql, values))
    try:
        await run()
    finally:
        database.statement_observer = None
    sql, values = next(
        (sql, values) for sql, values in sent if "UPDATE kubun_connector_operation " in sql
    )
    rows = await database._execute("EXPLAIN QUERY PLAN " + sql, values, one=False)
    return "\n".join(" ".join(str(value) for value in row.values()) for row in rows)


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
async def test_plan__writes_of_named_keys_probe_the_primary_key(seeded: ConnectorStore):
    """On SQLite ``renewLeases``, ``releaseLeases`` and ``forceReleaseLeases`` find the
    operations they name by their keys, one probe each, never by reading the table (as it
    does for an ``IN`` list of pairs). PostgreSQL probes its primary key for such a list."""
    keys = [("did:seed:caller", f"seed-{number}") for number in range(10, 510, 10)]
    leasing = seeded.leasing
    plans = [
        await plan_of_update(seeded.db, lambda: leasing.renew_leases("token", 60_000, keys)),
        await plan_of_update(seeded.db, lambda: leasing.release_leases("token", keys)),
        await plan_of_update(seeded.db, lambda: seeded.operator.force_release_leases(keys)),
    ]
    for plan in plans:
        assert_no_table_scan(plan, "kubun_connector_operation")
        assert "sqlite_autoindex_kubun_connector_operation_1" in plan, plan
