"""List reads stop at a byte allowance measured in the database, on both backends: the rows
past it are never sent, the first row always is, and paging on reaches every row once."""

from typing import Any

import sqlalchemy as sa

from store import ConnectorStore
from store.database import Database
from store.operations import OperationFilter
from store.records import WatchIdentity
from store.sizes import ROW_OVERHEAD
from store.tables import operation as op
from store.watches import WatchFilter
from tests.factories import claimed_operation, committed_operation, progress

BLOB = 10_000
"""Bytes of each test row's JSON blob: ten rows hold about 100 KB."""
ALLOWANCE = 35_000
"""Room for three of those rows, not four."""


async def blob_operations(store: ConnectorStore, count: int = 10, **overrides: Any) -> None:
    """``count`` operations ``op-00``… of one watch, each with a ``BLOB``-byte reissue intent."""
    for index in range(count):
        await claimed_operation(
            store, operation_id=f"op-{index:02}", reissue_intent={"blob": "x" * BLOB}, **overrides
        )


def sent_rows(database: Database) -> list[int]:
    """Record how many rows each ``fetch_all`` of ``database`` brings back (the rows the
    database sent)."""
    counts: list[int] = []
    fetch_all = database.fetch_all

    async def counting(query: Any) -> Any:
        rows = await fetch_all(query)
        counts.append(len(rows))
        return rows

    database.fetch_all = counting  # type: ignore[method-assign]
    return counts


async def test_list_tracked_operations__stop_within_the_allowance_and_say_so(store):
    await blob_operations(store)
    everything = await store.operations.list_tracked_operations(OperationFilter())

    page = await store.operations.list_tracked_operations(OperationFilter(), max_bytes=ALLOWANCE)

    assert [r.operation_id for r in page] == ["op-00", "op-01", "op-02"]
    assert page.cut is True and sum(page.sizes) <= ALLOWANCE
    assert len(everything) == 10 and everything.cut is False


async def test_list_tracked_operations__send_at_most_one_row_past_the_allowance(store, database):
    await blob_operations(store)
    counts = sent_rows(database)

    page = await store.operations.list_tracked_operations(
        OperationFilter(), limit=10, max_bytes=ALLOWANCE
    )

    assert len(page) == 3 and counts == [4]


async def test_list_tracked_operations__keep_the_first_row_past_any_allowance(store):
    await blob_operations(store, count=2)

    page = await store.operations.list_tracked_operations(OperationFilter(), max_bytes=1)

    assert [r.operation_id for r in page] == ["op-00"] and page.cut is True


async def test_row_size__counts_the_bytes_of_every_text_column_and_the_overhead(store, database):
    await claimed_operation(store, operation_id="ascii-op", source_id="evt-1", target="e" * 100)
    await claimed_operation(store, operation_id="accented", source_id="evt-2", target="é" * 100)

    page = await store.operations.list_tracked_operations(OperationFilter())

    sizes = {record.operation_id: size for record, size in zip(page, page.sizes, strict=True)}
    assert sizes["accented"] - sizes["ascii-op"] == 100
    row = (await database.fetch_all(sa.select(op).where(op.c.operation_id == "accented")))[0]
    texts = [value for value in dict(row).values() if isinstance(value, str)]
    assert sizes["accented"] == ROW_OVERHEAD + sum(len(text.encode()) for text in texts)


async def test_list_tracked_operations__page_on_with_after_reaches_every_row_once(store):
    await blob_operations(store)
    seen: list[str] = []
    after = None

    while True:
        page = await store.operations.list_tracked_operations(
            OperationFilter(), after=after, limit=5, max_bytes=ALLOWANCE
        )
        seen.extend(r.operation_id for r in page)
        if not page.cut and len(page) < 5:
            break
        after = page[-1].order_key

    assert seen == [f"op-{index:02}" for index in range(10)]


async def test_list_tracked_operations__cut_across_document_chunks(store):
    await blob_operations(store, document_id="doc-1")
    ids = ["doc-1", *(f"other-{index}" for index in range(600))]

    page = await store.operations.list_tracked_operations(
        OperationFilter(document_ids=ids), max_bytes=ALLOWANCE
    )

    assert [r.operation_id for r in page] == ["op-00", "op-01", "op-02"] and page.cut


async def test_list_due_operations__return_fewer_within_the_allowance(store, clock):
    await blob_operations(store, lease_expires_at=clock.now - 1)

    page = await store.retention.list_due_operations(clock.now, 100, max_bytes=ALLOWANCE)

    assert len(page) == 3 and page.cut and sum(page.sizes) <= ALLOWANCE


async def test_list_operations_by_key__cut_in_key_order(store):
    await blob_operations(store)
    keys = [("did:key:caller", f"op-{index:02}") for index in reversed(range(10))]

    page = await store.operations.list_operations(keys, max_bytes=ALLOWANCE)

    assert [r.operation_id for r in page] == ["op-00", "op-01", "op-02"] and page.cut


async def test_list_operations_of_watches__cut_by_identity_then_order(store):
    await blob_operations(store, count=3, source_id="evt-b")
    await blob_operations(store, count=3, source_id="evt-a", caller_did="did:key:other")
    identities = [
        WatchIdentity("did:key:owner", "calendar", "Event", "acct-1", source)
        for source in ("evt-b", "evt-a")
    ]

    page = await store.operations.list_operations_of_watches(identities, max_bytes=45_000)

    assert [(r.source_id, r.operation_id) for r in page] == [
        ("evt-a", "op-00"),
        ("evt-a", "op-01"),
        ("evt-a", "op-02"),
        ("evt-b", "op-00"),
    ]
    assert page.cut


async def blob_watches(store: ConnectorStore, count: int = 6) -> int:
    """``count`` pending watches with 1000-character source ids; returns one's size."""
    for index in range(count):
        await committed_operation(
            store, operation_id=f"op-{index}", source_id=f"{index}" + "s" * 999
        )
    page = await store.watches.list_watches_matching(WatchFilter())
    return page.sizes[0]


async def test_list_watches_matching__stop_within_the_allowance(store):
    size = await blob_watches(store)

    page = await store.watches.list_watches_matching(WatchFilter(), max_bytes=int(2.5 * size))

    assert len(page) == 2 and page.cut and sum(page.sizes) <= 2.5 * size


async def test_list_due_watches__return_fewer_within_the_allowance(store, clock):
    size = await blob_watches(store)
    clock.advance(120_000)

    page = await store.watches.list_due_watches(clock.now, 100, max_bytes=int(2.5 * size))

    assert len(page) == 2 and page.cut


async def test_list_watches_by_identity__cut_in_identity_order(store):
    size = await blob_watches(store)
    everything = await store.watches.list_watches_matching(WatchFilter())

    page = await store.watches.list_watches(
        [record.identity for record in reversed(everything)], max_bytes=int(2.5 * size)
    )

    assert page == everything[:2] and page.cut


async def test_list_sync_states__stop_within_the_allowance(store):
    for index in range(6):
        await store.sync_state.set_sync_state(
            "calendar", f"did:key:{index}", progress(checkpoint={"blob": "x" * BLOB}), "idle"
        )

    page = await store.sync_state.list_sync_states_for_connector(
        "calendar", limit=10, max_bytes=25_000
    )

    assert [r.owner_did for r in page] == ["did:key:0", "did:key:1"] and page.cut
