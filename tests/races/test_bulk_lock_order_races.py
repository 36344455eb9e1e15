"""Multi-row writes over the same operations raced for real, on both backends: the
operator's bulk cancel and forced release, a worker's lease renewals and releases, and
batch settles (mark, record), each naming the rows in an order of its own, the rows stored
out of key order. Every write that waits for a row lock takes its rows in key order (the
cancel waits for none: it skips rows locked elsewhere), so on PostgreSQL no two of them
wait on each other in a cycle: none fails (a deadlock would be
``DatabaseBusy``), and each row's version counts the writes that say they changed it (a
cancel, at most one of the two records)."""

import asyncio
from collections import Counter

from store import ConnectorStore
from store.database import Database
from store.errors import DatabaseBusy
from store.operations import OperationFilter, SendMark
from store.records import OperationRecord
from tests.factories import LEASE_MS, leased_operation, transition

ROWS = 80
ROUNDS = 30
CONNECTIONS = 4


async def stored_out_of_key_order(store: ConnectorStore, round_: int) -> list[OperationRecord]:
    """``ROWS`` leased operations, written in descending key order (so the table holds
    them against key order), returned in key order."""
    written = [
        await leased_operation(
            store,
            operation_id=f"r{round_}-op-{n:03d}",
            source_id=f"r{round_}-evt-{n}",
            document_id=f"r{round_}-doc-{n}",
        )
        for n in reversed(range(ROWS))
    ]
    return written[::-1]


async def test_bulk_writes__racing_in_opposite_orders_never_deadlock(database_url, clock):
    handles = [Database(database_url, pool_size=4) for _ in range(CONNECTIONS)]
    for handle in handles:
        await handle.connect()
    try:
        stores = [ConnectorStore(handle, clock=clock) for handle in handles]
        for round_ in range(ROUNDS):
            records = await stored_out_of_key_order(stores[0], round_)
            keys = [(r.caller_did, r.operation_id) for r in records]
            documents = [r.document_id or "" for r in records]
            backwards = records[::-1]
            calls = [
                stores[0].operator.cancel_operations(
                    OperationFilter(document_ids=documents[::-1]), limit=ROWS
                ),
                stores[1].batches.record_operations(
                    [transition(r, count_attempt=False) for r in backwards]
                ),
                stores[2].batches.mark_sends_started(
                    [SendMark(r.caller_did, r.operation_id, "lease-A", "run-1") for r in records]
                ),
                stores[3].leasing.renew_leases("lease-A", LEASE_MS, keys[::-1]),
                stores[0].operator.force_release_leases(keys),
                stores[1].leasing.release_leases("lease-A", keys[::-1]),
                stores[2].batches.record_operations(
                    [transition(r, count_attempt=False) for r in records]
                ),
                stores[3].leasing.renew_leases("lease-A", LEASE_MS, keys),
                stores[0].batches.mark_sends_started(
                    [SendMark(r.caller_did, r.operation_id, "lease-A", "run-2") for r in backwards]
                ),
                stores[3].batches.mark_sends_started(
                    [SendMark(r.caller_did, r.operation_id, "lease-A", "run-3") for r in records]
                ),
            ]
            results = await asyncio.gather(
                *(asyncio.create_task(call) for call in calls), return_exceptions=True
            )
            failed = [r for r in results if isinstance(r, BaseException)]
            assert not [r for r in failed if isinstance(r, DatabaseBusy)], failed
            assert failed == []
            cancelled, recorded, _, _, _, _, recorded_again, *_ = results
            bumped = Counter(
                r.operation_id for r in [*cancelled, *recorded, *recorded_again] if r is not None
            )
            for record in records:
                stored = await stores[0].operations.get_operation(
                    record.caller_did, record.operation_id
                )
                assert stored is not None
                assert stored.version == record.version + bumped[record.operation_id]
    finally:
        for handle in handles:
            await handle.disconnect()
