"""The due lists and the filtered operation list are index range scans in due order, not
scans of the whole table: EXPLAIN on both backends, over a few thousand analyzed rows."""

from typing import Any

import pytest
import sqlalchemy as sa

from benchmarks.seed import seed_statements
from store import ConnectorStore
from store.database import Database
from store.operations import OperationFilter

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
    dialect = (
        sa.dialects.postgresql.dialect() if database.is_postgres else sa.dialects.sqlite.dialect()
    )
    sql = str(sent[-1].compile(dialect=dialect, compile_kwargs={"literal_binds": True}))
    explain = "EXPLAIN " if database.is_postgres else "EXPLAIN QUERY PLAN "
    rows = await database.fetch_all(sa.text(explain + sql))
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


async def test_plan__the_work_timer_reads_walk_indexes(seeded: ConnectorStore):
    wakeups = seeded.wakeups
    plans = [
        await plan_of(seeded.db, lambda: wakeups.next_due_after(NOW)),
        await plan_of(seeded.db, lambda: wakeups.due_between(NOW - 1000, NOW)),
    ]
    for plan in plans:
        assert_no_table_scan(plan, "kubun_connector_operation")
