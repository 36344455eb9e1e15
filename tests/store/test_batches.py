"""The batch settles (docs/worker-protocol.md, 'Settling in batches'): each item's outcome is its
single write's, in input order; a bad item, or a key named twice, refuses the whole batch and writes
nothing; two batches racing over the same keys apply each key once. On both backends."""

import asyncio
import dataclasses
import shutil
import sqlite3
from dataclasses import replace

import asyncpg
import pytest
import sqlalchemy as sa
from sqlalchemy.dialects.postgresql.asyncpg import dialect as asyncpg_dialect
from sqlalchemy.dialects.sqlite import dialect as sqlite_dialect

from store.batches import (
    FINALIZE_OPERATIONS,
    FINALIZE_OPERATIONS_KEEPING_DOCUMENTS,
    MARK_SENDS_STARTED,
    RECORD_OPERATIONS,
    RECORD_OPERATIONS_KEEPING_SCHEDULE,
    RECORD_OPERATIONS_STAYING,
    RECORD_OPERATIONS_STAYING_KEEPING_SCHEDULE,
)
from store.dialects import POSTGRESQL, SQLITE
from store.errors import InvalidInput, ReservedValue
from store.items import MAX_ITEMS
from store.operations import (
    FINALIZE_KEEPING_DOCUMENT,
    ITEM_COLUMNS,
    RECORD_OPERATION_KEEPING_SCHEDULE,
    RECORD_OPERATION_STAYING,
    RECORD_OPERATION_STAYING_KEEPING_SCHEDULE,
    Finalize,
    RecordShape,
    SendMark,
    record_steps,
)
from store.sql_text import compiled
from store.tables import operation as operation_table
from store.tables import projection_watch as watch_table
from store.watches import Verification
from tests.factories import (
    LEASE_MS,
    claim,
    claimed_operation,
    claimed_watch,
    committed_operation,
    leased_operation,
    marked,
    marked_operation,
    pending_watch,
    recorded_operation,
    transition,
)

DUE_MS = 60_000


def keyed(prefix, case, **overrides):
    """The fields that make a case's rows its own in one world (``s``: single writes, ``b``:
    the batch): key, entity and document."""
    return {
        "operation_id": f"{prefix}-op-{case}",
        "source_id": f"{prefix}-evt-{case}",
        "document_id": f"{prefix}-doc-{case}",
    } | overrides


def normalized(value, prefix):
    """``value`` (a record, a result, a list of them) with the world's prefix and the ids
    minted per row taken out, so both worlds compare equal when they did the same."""
    if isinstance(value, list | tuple):
        return [normalized(item, prefix) for item in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {
            field.name: normalized(getattr(value, field.name), prefix)
            for field in dataclasses.fields(value)
            if field.name not in ("node_key", "incarnation")
        }
        return (type(value).__name__, fields)
    if isinstance(value, str):
        return value.replace(f"{prefix}-", "P-")
    return value


async def both_worlds(store, clock, setups):
    """Run each case's setup in the single world and then in the batch world from the same
    clock, so both hold the same rows; returns the inputs of each world."""
    singles, batch = [], []
    for case, setup in enumerate(setups):
        start = clock.now
        singles.append(await setup(store, clock, "s", case))
        after = clock.now
        clock.now = start
        batch.append(await setup(store, clock, "b", case))
        assert clock.now == after
    clock.advance(1_000)
    return singles, batch


async def rows_of(store, table, prefix):
    rows = await store.db.fetch_all(sa.select(table))
    # The random ids are left out before the prefix is looked for: one may begin with it.
    minted = [
        {k: v for k, v in row.items() if k not in ("node_key", "incarnation")} for row in rows
    ]
    keep = [
        row
        for row in minted
        if any(isinstance(v, str) and v.startswith(f"{prefix}-") for v in row.values())
    ]
    return sorted(normalized(list(row.items()), prefix) for row in keep)


async def assert_same_outcomes(store, clock, setups, single, batch):
    """Every case through the single write (one call each, in order) and through one batch
    of all of them: the same outcomes, in input order, and the same rows afterwards."""
    single_inputs, batch_inputs = await both_worlds(store, clock, setups)
    single_results = [await single(store, item) for item in single_inputs]
    batch_results = await batch(store, batch_inputs)
    assert len(batch_results) == len(batch_inputs)
    for case, (one, many) in enumerate(zip(single_results, batch_results, strict=True)):
        assert normalized(many, "b") == normalized(one, "s"), f"case {case}"
    for table in (operation_table, watch_table):
        assert await rows_of(store, table, "b") == await rows_of(store, table, "s")


# markSendsStarted


async def mark_applies(store, clock, p, case):
    record = await claimed_operation(store, **keyed(p, case))
    return SendMark(record.caller_did, record.operation_id, "lease-A", "run-1")


async def mark_wrong_token(store, clock, p, case):
    record = await claimed_operation(store, **keyed(p, case))
    return SendMark(record.caller_did, record.operation_id, "lease-B", "run-1")


async def mark_absent(store, clock, p, case):
    return SendMark("did:key:caller", f"{p}-op-{case}", "lease-A", "run-1")


async def mark_contested(store, clock, p, case):
    record = await marked_operation(store, "run-1", **keyed(p, case))
    return SendMark(record.caller_did, record.operation_id, "lease-A", "run-2")


async def mark_same_marker(store, clock, p, case):
    record = await marked_operation(store, "run-1", **keyed(p, case))
    return SendMark(record.caller_did, record.operation_id, "lease-A", "run-1")


async def mark_committed(store, clock, p, case):
    record = await committed_operation(store, **keyed(p, case))
    return SendMark(record.caller_did, record.operation_id, "lease-A", "run-2")


MARK_CASES = [
    mark_applies,
    mark_wrong_token,
    mark_absent,
    mark_contested,
    mark_same_marker,
    mark_committed,
]


async def mark_one(store, mark):
    return await store.operations.mark_send_started(
        mark.caller_did, mark.operation_id, mark.lease_token, mark.marker
    )


async def mark_many(store, marks):
    return await store.batches.mark_sends_started(marks)


async def test_mark_sends_started__outcomes_equal_single(store, clock):
    await assert_same_outcomes(store, clock, MARK_CASES, mark_one, mark_many)


# recordOperations


async def record_counts(store, clock, p, case):
    return transition(await claimed_operation(store, **keyed(p, case)), to_state="failed")


async def record_keeps(store, clock, p, case):
    record = await claimed_operation(store, **keyed(p, case))
    return transition(record, count_attempt=False, next_attempt_at=clock.now + 5, kind="transient")


async def record_refunds(store, clock, p, case):
    record = await recorded_operation(store, "attempted", **keyed(p, case))
    return transition(record, refund_attempt=True, send_marker="run-1", http_status=503)


async def record_refund_refused(store, clock, p, case):
    record = await marked_operation(store, "run-1", **keyed(p, case))
    return transition(record, refund_attempt=True, send_marker="run-2")


async def record_stale_version(store, clock, p, case):
    record = await claimed_operation(store, **keyed(p, case))
    return transition(record, version=record.version + 1)


async def record_wrong_token(store, clock, p, case):
    record = await claimed_operation(store, **keyed(p, case))
    return transition(record, lease_token="lease-B", to_state="superseded")


async def record_terminal(store, clock, p, case):
    record = await committed_operation(store, **keyed(p, case))
    return transition(record, to_state="failed")


async def record_absent(store, clock, p, case):
    return replace(
        transition(await claimed_operation(store, **keyed(p, case))),
        operation_id=f"{p}-absent-{case}",
    )


RECORD_CASES = [
    record_counts,
    record_keeps,
    record_refunds,
    record_refund_refused,
    record_stale_version,
    record_wrong_token,
    record_terminal,
    record_absent,
]


async def record_one(store, change):
    return await store.operations.record_operation(change)


async def record_many(store, changes):
    return await store.batches.record_operations(changes)


async def test_record_operations__outcomes_equal_single(store, clock):
    await assert_same_outcomes(store, clock, RECORD_CASES, record_one, record_many)


async def test_record_operations__items_staying_in_their_state_outcomes_equal_single(store, clock):
    """A batch whose every item stays in its state runs the statement that leaves ``state``
    out of its SET (``RECORD_OPERATIONS_STAYING``): the same outcomes as the single write."""
    staying = [c for c in RECORD_CASES if c not in (record_counts, record_wrong_token)]
    await assert_same_outcomes(store, clock, staying, record_one, record_many)


async def scheduled_operation(store, clock, p, case, reason="offline"):
    """A claimed operation recorded back to attempted, kept live with a due time and a
    defer reason (as a failed send kept live is)."""
    record = await claimed_operation(store, **keyed(p, case))
    kept = await store.operations.record_operation(
        transition(record, next_attempt_at=clock.now + 7, defer_reason=reason)
    )
    assert kept is not None
    return kept


async def record_keeps_schedule(store, clock, p, case):
    record = await scheduled_operation(store, clock, p, case)
    return transition(record, next_attempt_at=record.next_attempt_at, defer_reason="offline")


async def record_keeps_schedule_to_failed(store, clock, p, case):
    record = await scheduled_operation(store, clock, p, case)
    return transition(
        record,
        to_state="failed",
        next_attempt_at=record.next_attempt_at,
        defer_reason="offline",
    )


async def record_keeps_due_changes_reason(store, clock, p, case):
    record = await scheduled_operation(store, clock, p, case)
    return transition(record, next_attempt_at=record.next_attempt_at, defer_reason="auth")


async def record_clears_schedule(store, clock, p, case):
    return transition(await scheduled_operation(store, clock, p, case))


async def record_keeps_schedule_stale(store, clock, p, case):
    record = await scheduled_operation(store, clock, p, case)
    return transition(
        record,
        version=record.version - 1,
        next_attempt_at=record.next_attempt_at,
        defer_reason="offline",
    )


async def record_keeps_schedule_foreign(store, clock, p, case):
    record = await scheduled_operation(store, clock, p, case)
    return transition(
        record,
        lease_token="lease-B",
        next_attempt_at=record.next_attempt_at,
        defer_reason="offline",
    )


async def record_keeps_schedule_refund_refused(store, clock, p, case):
    record = await marked(store, await scheduled_operation(store, clock, p, case), "run-1")
    return transition(
        record,
        refund_attempt=True,
        send_marker="run-2",
        next_attempt_at=record.next_attempt_at,
        defer_reason="offline",
    )


SCHEDULE_CASES = [
    record_keeps_schedule,
    record_keeps_schedule_to_failed,
    record_keeps_due_changes_reason,
    record_clears_schedule,
    record_keeps_schedule_stale,
    record_keeps_schedule_foreign,
    record_keeps_schedule_refund_refused,
]


@pytest.mark.parametrize("cases", ["schedule", "mixed", "staying"])
async def test_record_operations__items_keeping_their_schedule_outcomes_equal_single(
    store, clock, cases
):
    """Items whose rows already hold their due time and defer reason (written by the
    statement that leaves both out), beside items that change them, stale and foreign
    items: each outcome, and every row, is the single write's."""
    chosen = {
        "schedule": SCHEDULE_CASES,
        "mixed": [*SCHEDULE_CASES, *RECORD_CASES],
        "staying": [
            c
            for c in [*SCHEDULE_CASES, *RECORD_CASES]
            if c not in (record_counts, record_wrong_token, record_keeps_schedule_to_failed)
        ],
    }[cases]
    await assert_same_outcomes(store, clock, chosen, record_one, record_many)


# finalizeOperations


def finalizing(record, clock, **overrides):
    base = Finalize(
        record.caller_did,
        record.operation_id,
        version=record.version,
        lease_token=record.lease_token or "",
        due_at=clock.now + DUE_MS,
        result_entity={"id": "remote-1"},
    )
    return replace(base, **overrides)


async def finalize_applies(store, clock, p, case):
    await store.winners.record_winner(f"{p}-doc-{case}", "digest-1")
    record = await marked_operation(store, **keyed(p, case))
    return finalizing(record, clock, provider_etag="etag-2")


async def finalize_reopens(store, clock, p, case):
    await committed_operation(store, **keyed(p, case))
    record = await marked_operation(store, **keyed(p, case, operation_id=f"{p}-op-{case}-2"))
    return finalizing(record, clock, document_id=f"{p}-doc-moved")


async def finalize_stale_version(store, clock, p, case):
    record = await marked_operation(store, **keyed(p, case))
    return finalizing(record, clock, version=record.version + 1)


async def finalize_wrong_token(store, clock, p, case):
    record = await marked_operation(store, **keyed(p, case))
    return finalizing(record, clock, lease_token="lease-B")


async def finalize_absent(store, clock, p, case):
    record = await marked_operation(store, **keyed(p, case))
    return finalizing(record, clock, operation_id=f"{p}-absent-{case}")


def same_entity(second):
    """Two operations of one provider entity finalized in one batch: each opens its own
    generation, in input order. Both hold live leases, which no claim hands out together."""

    async def setup(store, clock, p, case):
        record = await leased_operation(
            store, **keyed(p, case, source_id=f"{p}-evt-shared", operation_id=f"{p}-e-{second}")
        )
        return finalizing(await marked(store, record), clock)

    return setup


FINALIZE_CASES = [
    finalize_applies,
    finalize_reopens,
    finalize_stale_version,
    same_entity(1),
    finalize_wrong_token,
    same_entity(2),
    finalize_absent,
]


async def finalize_one(store, final):
    return await store.operations.finalize_operation_and_arm_watch(final)


async def finalize_many(store, finals):
    return await store.batches.finalize_operations(finals)


async def test_finalize_operations__outcomes_equal_single(store, clock):
    await assert_same_outcomes(store, clock, FINALIZE_CASES, finalize_one, finalize_many)


async def test_finalize_operations__items_without_document_outcomes_equal_single(store, clock):
    """A batch whose items give no ``document_id`` runs the statement that leaves it out of
    its SET (``FINALIZE_OPERATIONS_KEEPING_DOCUMENTS``): each row keeps its own, as the
    single write."""
    keeping = [c for c in FINALIZE_CASES if c is not finalize_reopens]
    await assert_same_outcomes(store, clock, keeping, finalize_one, finalize_many)


# claimOperations


async def claim_fresh(store, clock, p, case):
    return claim(**keyed(p, case), lease_expires_at=clock.now + LEASE_MS)


async def claim_exists(store, clock, p, case):
    record = await claimed_operation(store, **keyed(p, case))
    return claim(**keyed(p, case), lease_expires_at=record.lease_expires_at)


async def claim_conflict(store, clock, p, case):
    await claimed_operation(store, **keyed(p, case))
    return claim(**keyed(p, case), payload_hash="sha256:other")


CLAIM_CASES = [claim_fresh, claim_exists, claim_conflict, claim_fresh]


async def test_claim_operations__outcomes_equal_single(store, clock):
    async def one(store, item):
        return await store.operations.claim_operation(item)

    async def many(store, items):
        return await store.batches.claim_operations(items)

    await assert_same_outcomes(store, clock, CLAIM_CASES, one, many)


# recordVerifications


def verifying(watch, clock, **overrides):
    base = Verification(
        identity=watch.identity,
        generation=watch.repair_generation,
        fetched_digest="digest-1",
        max_attempts=3,
        due_at=clock.now + DUE_MS,
    )
    return replace(base, **overrides)


async def verify_verified(store, clock, p, case):
    return verifying(await pending_watch(store, **keyed(p, case)), clock)


async def verify_pending(store, clock, p, case):
    watch = await pending_watch(store, **keyed(p, case))
    return verifying(watch, clock, fetched_digest="digest-wrong")


async def verify_repair_failed(store, clock, p, case):
    watch = await pending_watch(store, **keyed(p, case))
    return verifying(watch, clock, fetched_digest="digest-wrong", max_attempts=1)


async def verify_stale_generation(store, clock, p, case):
    watch = await pending_watch(store, **keyed(p, case))
    return verifying(watch, clock, generation=watch.repair_generation + 1)


async def verify_stale_claim(store, clock, p, case):
    watch = await claimed_watch(store, clock, **keyed(p, case))
    return verifying(watch, clock, claimed_until=(watch.claimed_until or 0) + 1)


async def verify_claimed(store, clock, p, case):
    watch = await claimed_watch(store, clock, **keyed(p, case))
    return verifying(watch, clock, claimed_until=watch.claimed_until)


async def verify_absent(store, clock, p, case):
    watch = await pending_watch(store, **keyed(p, case))
    return verifying(watch, clock, identity=replace(watch.identity, source_id=f"{p}-none"))


VERIFY_CASES = [
    verify_verified,
    verify_pending,
    verify_repair_failed,
    verify_stale_generation,
    verify_stale_claim,
    verify_claimed,
    verify_absent,
]


async def test_record_verifications__outcomes_equal_single(store, clock):
    async def one(store, item):
        return await store.watches.record_verification(
            item.identity,
            generation=item.generation,
            fetched_digest=item.fetched_digest,
            max_attempts=item.max_attempts,
            due_at=item.due_at,
            claimed_until=item.claimed_until,
        )

    async def many(store, items):
        return await store.batches.record_verifications(items)

    await assert_same_outcomes(store, clock, VERIFY_CASES, one, many)


# Sizes, refusals, races


async def claimed_many(store, clock, count, prefix="op"):
    """``count`` operations claimed in one batch, each its own provider entity, all leased."""
    claims = [
        claim(
            operation_id=f"{prefix}-{index}",
            source_id=f"{prefix}-evt-{index}",
            lease_expires_at=clock.now + LEASE_MS,
        )
        for index in range(count)
    ]
    results = await store.batches.claim_operations(claims)
    assert [result.status for result in results] == ["claimed"] * count
    assert all(result.operation.lease_token == "lease-A" for result in results)
    return [result.operation for result in results]


async def leased_of_one_entity(store, count):
    """``count`` operations of one provider entity (one watch), each holding a live lease."""
    return [await leased_operation(store, operation_id=f"op-{index}") for index in range(count)]


@pytest.mark.parametrize("count", [1, MAX_ITEMS])
async def test_settle_batches__one_and_most_items_apply(store, clock, count):
    await claimed_many(store, clock, count, prefix="new")
    records = await leased_of_one_entity(store, count)
    marks = [SendMark(r.caller_did, r.operation_id, "lease-A", "run-1") for r in records]
    marked = await store.batches.mark_sends_started(marks)
    assert [m.operation_id for m in marked] == [r.operation_id for r in records]
    finals = [finalizing(m, clock) for m in marked]
    done = await store.batches.finalize_operations(finals)
    assert [d.operation.state for d in done] == ["committed"] * count
    assert [d.operation.operation_id for d in done] == [r.operation_id for r in records]
    assert all(d.watch.repair_generation == index + 1 for index, d in enumerate(done))


async def database_rows(store):
    found = {}
    for table in (operation_table, watch_table):
        rows = await store.db.fetch_all(sa.select(table))
        found[table.name] = sorted(sorted(row.items()) for row in rows)
    return found


@pytest.mark.parametrize("count", [0, MAX_ITEMS + 1])
async def test_mark_sends_started__too_few_or_many_items_refused(store, clock, count):
    record = await claimed_operation(store)
    marks = [SendMark(record.caller_did, record.operation_id, "lease-A", "run-1")] * count
    before = await database_rows(store)
    with pytest.raises(InvalidInput) as refused:
        await store.batches.mark_sends_started(marks)
    assert refused.value.field == "items"
    assert await database_rows(store) == before


async def test_claim_operations__too_many_items_refused(store, clock):
    claims = [claim(operation_id=f"op-{i}") for i in range(MAX_ITEMS + 1)]
    with pytest.raises(InvalidInput) as refused:
        await store.batches.claim_operations(claims)
    assert refused.value.field == "items"
    assert await database_rows(store) == {
        "kubun_connector_operation": [],
        "kubun_connector_projection_watch": [],
    }


async def settle_inputs(store, clock):
    """Three live operations, marked, and a valid item of each batch write for them."""
    records = [
        await marked_operation(store, operation_id=f"op-{i}", source_id=f"evt-{i}")
        for i in range(3)
    ]
    return records, {
        "claim": [claim(operation_id=f"new-{i}") for i in range(3)],
        "mark": [SendMark(r.caller_did, r.operation_id, "lease-A", "run-1") for r in records],
        "record": [transition(r, to_state="failed") for r in records],
        "finalize": [finalizing(r, clock) for r in records],
    }


BATCH_WRITE = {
    "claim": lambda store: store.batches.claim_operations,
    "mark": lambda store: store.batches.mark_sends_started,
    "record": lambda store: store.batches.record_operations,
    "finalize": lambda store: store.batches.finalize_operations,
}
BAD_ITEM = {
    "claim": (lambda item: replace(item, lease_token=""), "leaseToken"),
    "mark": (lambda item: replace(item, marker="*contested*"), "marker"),
    "record": (lambda item: replace(item, to_state="committed"), "toState"),
    "finalize": (lambda item: replace(item, due_at=-1), "dueAt"),
}


@pytest.mark.parametrize("write", sorted(BATCH_WRITE))
async def test_settle_batches__bad_item_refuses_whole_batch(store, clock, write):
    _, inputs = await settle_inputs(store, clock)
    spoil, field = BAD_ITEM[write]
    items = list(inputs[write])
    items[2] = spoil(items[2])
    before = await database_rows(store)
    clock.advance(1_000)
    with pytest.raises(InvalidInput) as refused:
        await BATCH_WRITE[write](store)(items)
    assert refused.value.field == f"items[2].{field}"
    assert await database_rows(store) == before


async def test_mark_sends_started__reserved_marker_keeps_its_type(store, clock):
    _, inputs = await settle_inputs(store, clock)
    items = [inputs["mark"][0], replace(inputs["mark"][1], marker="*abandoned*")]
    with pytest.raises(ReservedValue) as refused:
        await store.batches.mark_sends_started(items)
    assert refused.value.field == "items[1].marker"


async def test_record_operations__kind_cancelled_refuses_whole_batch(store, clock):
    _, inputs = await settle_inputs(store, clock)
    items = [inputs["record"][0], replace(inputs["record"][1], kind="cancelled")]
    before = await database_rows(store)
    with pytest.raises(ReservedValue) as refused:
        await store.batches.record_operations(items)
    assert refused.value.field == "items[1].kind"
    assert await database_rows(store) == before


@pytest.mark.parametrize("write", sorted(BATCH_WRITE))
async def test_settle_batches__repeated_key_refuses_whole_batch(store, clock, write):
    _, inputs = await settle_inputs(store, clock)
    items = [*inputs[write], inputs[write][0]]
    before = await database_rows(store)
    clock.advance(1_000)
    with pytest.raises(InvalidInput) as refused:
        await BATCH_WRITE[write](store)(items)
    assert refused.value.field == "items[3].operationID"
    assert await database_rows(store) == before


async def test_record_verifications__repeated_watch_refuses_whole_batch(store, clock):
    watch = await pending_watch(store)
    item = verifying(watch, clock)
    before = await database_rows(store)
    with pytest.raises(InvalidInput) as refused:
        await store.batches.record_verifications([item, item])
    assert refused.value.field == "items[1].identity"
    assert await database_rows(store) == before


async def test_record_verifications__bad_item_refuses_whole_batch(store, clock):
    watch = await pending_watch(store)
    other = await pending_watch(store, **keyed("x", 1))
    items = [verifying(watch, clock), verifying(other, clock, max_attempts=0)]
    before = await database_rows(store)
    with pytest.raises(InvalidInput) as refused:
        await store.batches.record_verifications(items)
    assert refused.value.field == "items[1].maxAttempts"
    assert await database_rows(store) == before


async def test_finalize_operations__racing_batches_apply_each_key_once(store, clock):
    records = await leased_of_one_entity(store, 40)
    forward = [finalizing(r, clock) for r in records]
    backward = list(reversed(forward))
    first, second = await asyncio.gather(
        store.batches.finalize_operations(forward), store.batches.finalize_operations(backward)
    )
    applied = [d.operation.operation_id for d in [*first, *second] if d is not None]
    assert sorted(applied) == sorted(r.operation_id for r in records)
    watches = await store.db.fetch_all(sa.select(watch_table))
    assert len(watches) == 1 and watches[0]["repair_generation"] == len(records)


async def test_record_operations__racing_batches_apply_each_key_once(store, clock):
    records = await claimed_many(store, clock, 40)
    forward = [transition(r, to_state="failed") for r in records]
    first, second = await asyncio.gather(
        store.batches.record_operations(forward),
        store.batches.record_operations(list(reversed(forward))),
    )
    applied = [r.operation_id for r in [*first, *second] if r is not None]
    assert sorted(applied) == sorted(r.operation_id for r in records)


async def test_claim_operations__racing_batches_claim_each_key_once(store, clock):
    claims = [claim(operation_id=f"op-{i}", lease_expires_at=clock.now + 1_000) for i in range(40)]
    first, second = await asyncio.gather(
        store.batches.claim_operations(claims),
        store.batches.claim_operations(list(reversed(claims))),
    )
    statuses = [result.status for result in [*first, *second]]
    assert statuses.count("claimed") == 40 and statuses.count("exists") == 40


async def test_finalize_operations__injected_read_winner_observed(database, clock):
    from store import ConnectorStore

    async def read_winner(document_id):
        return None if document_id is None else f"winner-of-{document_id}"

    store = ConnectorStore(database, clock=clock, read_winner=read_winner)
    record = await marked_operation(store)
    [done] = await store.batches.finalize_operations([finalizing(record, clock)])
    assert done.watch.observed_winner_digest == "winner-of-doc-1"


async def test_record_verifications__racing_batches_lose_no_attempt(store, clock):
    watches = [await pending_watch(store, **keyed("r", i)) for i in range(20)]
    items = [verifying(w, clock, fetched_digest="digest-wrong", max_attempts=10) for w in watches]
    first, second = await asyncio.gather(
        store.batches.record_verifications(items),
        store.batches.record_verifications(list(reversed(items))),
    )
    assert {r.outcome for r in [*first, *second]} == {"pending"}
    stored = [await store.watches.get_watch(w.identity) for w in watches]
    assert [w.verification_attempts for w in stored] == [2] * len(watches)
    assert [w.version for w in stored] == [w.version + 2 for w in watches]


SETTLES = {
    "markSendsStarted": MARK_SENDS_STARTED,
    "recordOperations": RECORD_OPERATIONS,
    "recordOperations staying": RECORD_OPERATIONS_STAYING,
    "recordOperations keeping schedule": RECORD_OPERATIONS_KEEPING_SCHEDULE,
    "recordOperations staying, keeping schedule": RECORD_OPERATIONS_STAYING_KEEPING_SCHEDULE,
    "finalizeOperations": FINALIZE_OPERATIONS,
    "finalizeOperations keeping documents": FINALIZE_OPERATIONS_KEEPING_DOCUMENTS,
}


@pytest.mark.parametrize(
    ("statement", "left_out"),
    [
        (RECORD_OPERATIONS_STAYING, "state"),
        (RECORD_OPERATIONS_KEEPING_SCHEDULE, "next_attempt_at"),
        (RECORD_OPERATIONS_KEEPING_SCHEDULE, "defer_reason"),
        (RECORD_OPERATIONS_STAYING_KEEPING_SCHEDULE, "state"),
        (RECORD_OPERATIONS_STAYING_KEEPING_SCHEDULE, "next_attempt_at"),
        (FINALIZE_OPERATIONS_KEEPING_DOCUMENTS, "document_id"),
        (RECORD_OPERATION_STAYING, "state"),
        (RECORD_OPERATION_KEEPING_SCHEDULE, "next_attempt_at"),
        (RECORD_OPERATION_KEEPING_SCHEDULE, "defer_reason"),
        (RECORD_OPERATION_STAYING_KEEPING_SCHEDULE, "state"),
        (RECORD_OPERATION_STAYING_KEEPING_SCHEDULE, "defer_reason"),
        (FINALIZE_KEEPING_DOCUMENT, "document_id"),
    ],
)
def test_settle_variants_leave_the_unchanged_indexed_column_out_of_the_set(statement, left_out):
    """SQLite rewrites a row's entry in every index of a column an UPDATE's SET names,
    changed or not: the variants for items that keep ``state``, ``document_id`` or the
    schedule (``next_attempt_at``, ``defer_reason``) do not name it, so a settle writes no
    entry of the indexes that hold it (nor of the partial indexes whose condition names
    it)."""
    [(_, write), *_] = statement.statements("sqlite")
    sql = str(compiled(write, "sqlite", by_name=True))
    assigned = sql.split(" SET ", 1)[1].split(" FROM ", 1)[0].split(" WHERE ", 1)[0]
    assert f"{left_out}=" not in assigned.replace(" ", ""), assigned


@pytest.mark.parametrize("stays", [False, True])
def test_record_steps__keep_the_schedule_first_only_where_writers_take_turns(stays):
    """Where writers take turns (SQLite) the statement that keeps the schedule runs first
    and the full one after it; elsewhere the full one alone, so a batch locks its rows
    once, in key order. ``state`` is left out only when every item stays."""
    items = [{"from_state": "attempted", "to_state": "attempted"}]
    if not stays:
        items.append({"from_state": "attempted", "to_state": "failed"})
    assert record_steps(items, one_writer=True) == [
        RecordShape(stays, keeps_schedule=True),
        RecordShape(stays, keeps_schedule=False),
    ]
    assert record_steps(items, one_writer=False) == [RecordShape(stays, keeps_schedule=False)]


@pytest.mark.parametrize("name", SETTLES)
@pytest.mark.parametrize("analyzed", [False, True], ids=["before-analyze", "after-analyze"])
def test_plan__a_sqlite_settle_probes_each_items_key_not_the_live_rows(
    sqlite_template_path, tmp_path, name, analyzed
):
    """A batch settle on SQLite reads its items once and probes the primary key for each:
    never the live rows through an index on ``state``, scanning the items again for each
    (a cost that grows with the live rows: seconds at 10,000). Over 2,000 live rows, before
    and after ``ANALYZE``."""
    path = tmp_path / "plans.db"
    shutil.copy(sqlite_template_path, path)
    connection = sqlite3.connect(path)
    try:
        connection.execute(live_rows_sql(2000))
        if analyzed:
            connection.execute("ANALYZE")
        prepared, values = SETTLES[name].bind(SQLITE, [], p_now=0, p_actor=None)
        sql, bound = prepared.bind(sqlite_dialect(), values)
        plan = [row[3] for row in connection.execute("EXPLAIN QUERY PLAN " + sql, bound)]
    finally:
        connection.close()

    assert "VIRTUAL TABLE" in plan[0], plan
    assert "USING INDEX sqlite_autoindex_kubun_connector_operation_1" in plan[1], plan
    # A mark's lease guard (a lapsed lease is a new lease) reads its item's account,
    # connector, the account's live leases and the entity's other rows through their
    # indexes: probes per item, never a scan of the live rows.
    assert not [line for line in plan[2:] if line.startswith("SCAN")], plan


@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
@pytest.mark.parametrize("name", SETTLES)
@pytest.mark.parametrize("analyzed", [False, True], ids=["before-analyze", "after-analyze"])
async def test_plan__a_postgresql_settle_probes_each_items_key_not_the_leased_rows(
    database, database_url, name, analyzed
):
    """A batch settle on PostgreSQL probes the primary key for each item: never every
    leased row through a partial index its state guard would prove (``lapse_idx``,
    ``leased_idx``), hashed against the items, a cost that grows with the live rows. Over
    20,000 leased rows written after the empty table was analyzed (a burst's statistics),
    and after ``ANALYZE``."""
    await database.write_all(sa.text("ANALYZE kubun_connector_operation"))
    await database.write_all(sa.text(live_rows_sql(20_000)))
    if analyzed:
        await database.write_all(sa.text("ANALYZE kubun_connector_operation"))
    items = [settle_item(i) for i in range(1, 51)]
    prepared, values = SETTLES[name].bind(POSTGRESQL, items, p_now=0, p_actor=None)
    sql, arguments = prepared.bind(asyncpg_dialect(), values)
    connection = await asyncpg.connect(database_url.replace("+asyncpg", ""))
    try:
        plan = "\n".join(row[0] for row in await connection.fetch("EXPLAIN " + sql, *arguments))
    finally:
        await connection.close()

    assert "Index Scan using kubun_connector_operation_pkey" in plan, plan
    assert "Bitmap" not in plan, plan
    assert "Hash Join" not in plan, plan


def settle_item(number):
    """An item of any settle (a value for each of ``ITEM_COLUMNS``) naming
    ``live_rows_sql``'s row ``number``."""
    named = {
        "caller": "did:plan",
        "operation": f"op-{number}",
        "token": "token",
        "from_state": "attempted",
        "to_state": "attempted",
        "attempts": "keep",
    }
    return {
        name: named.get(name, 0 if isinstance(column.type, sa.Integer) else None)
        for name, column in ITEM_COLUMNS.items()
    }


def live_rows_sql(count):
    """``count`` live operations, one statement."""
    return (
        f"WITH RECURSIVE g(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM g WHERE i < {count})"
        " INSERT INTO kubun_connector_operation (caller_did, operation_id, node_key, owner_did,"
        " connector_name, model, op, account_key, target, source_id, deterministic_event_id,"
        " payload_hash, reissue_intent, state, attempts, version, incarnation, lease_token,"
        " lease_expires_at, created_at, updated_at) SELECT 'did:plan', 'op-' || i, 'node-' || i,"
        " 'did:plan', 'plan', 'Model', 'create', 'account', 'target', 'source-' || i, 'event',"
        " 'sha256:0', 'null', 'attempted', 0, 0, 'plan', 'token', 1, i, i FROM g"
    )
