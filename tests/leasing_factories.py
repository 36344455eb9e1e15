"""Test data for leasing: many due operations and watches at once, written in bulk."""

from dataclasses import replace
from typing import Any

import sqlalchemy as sa

from store import ConnectorStore
from store.records import (
    ATTEMPTED,
    OPERATION_FIELDS,
    PENDING_VERIFICATION,
    WATCH_FIELDS,
    OperationRecord,
    WatchRecord,
)
from store.tables import operation, projection_watch
from tests.factories import claim

ROWS_PER_INSERT = 500


def due_record(store: ConnectorStore, n: int, **overrides: Any) -> OperationRecord:
    """The ``n``-th due operation: attempted, never leased, created ``n`` ms before the
    store's now, its own provider entity (``source_id``) unless overridden."""
    now = store.clock()
    base = claim(operation_id=f"op-{n}", source_id=f"evt-{n}")
    fields = {name: getattr(base, name) for name in OPERATION_FIELDS if hasattr(base, name)}
    fields |= {"lease_token": None, "lease_expires_at": None}
    record = OperationRecord(
        **fields,
        node_key=f"node-{n}",
        incarnation=f"inc-{n}",
        state=ATTEMPTED,
        created_at=now - 1_000_000 + n,
        updated_at=now,
    )
    return replace(record, **overrides)


async def insert_operations(store: ConnectorStore, records: list[OperationRecord]) -> None:
    """Write ``records`` as they are, a few hundred rows per statement; then ANALYZE, as
    autovacuum would after a bulk load, so the planner knows the table's size."""
    for start in range(0, len(records), ROWS_PER_INSERT):
        chunk = records[start : start + ROWS_PER_INSERT]
        rows = [{name: getattr(record, name) for name in OPERATION_FIELDS} for record in chunk]
        for row in rows:
            row["reissue_intent"] = "null"
        await store.db.write_all(
            operation.insert().values(rows).returning(operation.c.operation_id)
        )
    await store.db.fetch_all(sa.text("ANALYZE"))


async def due_operations(
    store: ConnectorStore, count: int, **overrides: Any
) -> list[OperationRecord]:
    """``count`` due operations (``due_record`` 0 … count-1), each with ``overrides``."""
    records = [due_record(store, n, **overrides) for n in range(count)]
    await insert_operations(store, records)
    return records


def due_watch_record(store: ConnectorStore, n: int, **overrides: Any) -> WatchRecord:
    """The ``n``-th due watch: pending verification, unclaimed, due ``n`` ms after a time
    1,000 s before the store's now, its own source."""
    now = store.clock()
    record = WatchRecord(
        owner_did="did:key:owner",
        connector_name="calendar",
        model="Event",
        account_key="acct-1",
        source_id=f"evt-{n}",
        document_id=f"doc-{n}",
        repair_generation=1,
        verification_status=PENDING_VERIFICATION,
        verification_attempts=0,
        observed_winner_digest="digest-1",
        verified_state_digest=None,
        next_attempt_at=now - 1_000_000 + n,
        claimed_until=None,
        defer_reason=None,
        version=0,
        created_at=now,
        updated_at=now,
    )
    return replace(record, **overrides)


async def insert_watches(store: ConnectorStore, records: list[WatchRecord]) -> None:
    """Write ``records`` as they are, a few hundred rows per statement."""
    for start in range(0, len(records), ROWS_PER_INSERT):
        rows = [
            {name: getattr(record, name) for name in WATCH_FIELDS}
            for record in records[start : start + ROWS_PER_INSERT]
        ]
        await store.db.write_all(
            projection_watch.insert().values(rows).returning(projection_watch.c.source_id)
        )
