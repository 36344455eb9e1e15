"""Operations: claim, leases, send marker, defer and record (seed operations.js), on both
backends. Every refusal re-reads the row and finds it unchanged; the clock moves before each
refused write, so a write that slipped through would show in ``updated_at``."""

import pytest
import sqlalchemy as sa

from store.errors import InvalidInput, ReservedValue
from store.operations import (
    ABANDONED_SEND_MARKER,
    CONTESTED_SEND_MARKER,
    RESERVED_SEND_MARKERS,
    Finalize,
)
from store.records import ENVELOPE
from store.tables import operation as op_table
from store.tables import projection_watch as watch_table
from tests.factories import (
    LEASE_MS,
    claim,
    claimed_operation,
    committed_operation,
    marked,
    marked_operation,
    recorded_operation,
    released_operation,
    reread,
    terminal_operation,
    transition,
)

CALLER = "did:key:caller"
ENVELOPE_FIELDS = ENVELOPE
TERMINAL_STATES = ["committed", "failed", "superseded"]


async def assert_unchanged(store, before):
    assert await reread(store, before) == before


async def all_rows(store):
    return [dict(row) for row in await store.db.fetch_all(sa.select(op_table))]


# --- claim_operation -------------------------------------------------------------------------


async def test_claim_operation__fresh_key_claimed(store, clock):
    result = await store.operations.claim_operation(
        claim(lease_expires_at=clock.now + LEASE_MS, provider_etag="etag-0")
    )

    assert result.status == "claimed"
    record = result.operation
    assert record is not None
    assert (record.caller_did, record.operation_id) == (CALLER, "op-1")
    assert record.state == "attempted"
    assert record.attempts == 0
    assert record.version == 0
    assert record.lease_token == "lease-A"
    assert record.lease_expires_at == clock.now + LEASE_MS
    assert record.created_at == record.updated_at == clock.now
    assert record.reissue_intent == {"fields": ["title"]}
    assert record.provider_etag == "etag-0"
    assert record.document_id == "doc-1"
    assert record.result_entity is None
    assert record.send_marker is None
    assert record.next_attempt_at is None
    assert record.defer_reason is None
    assert record.last_kind is None
    assert record.last_http_status is None
    assert record.node_key and record.incarnation
    for field in ENVELOPE_FIELDS:
        assert getattr(record, field) == getattr(claim(), field)
    assert await reread(store, record) == record


async def test_claim_operation__optional_fields_omitted_stored_as_null(store):
    record = await claimed_operation(store, reissue_intent=None, document_id=None)

    assert record.reissue_intent is None
    assert record.document_id is None
    assert record.provider_etag is None
    rows = await store.db.fetch_all(sa.select(op_table.c.reissue_intent))
    assert [row["reissue_intent"] for row in rows] == ["null"]


async def test_claim_operation__each_key_gets_its_own_node_key_and_incarnation(store):
    first = await claimed_operation(store, operation_id="op-1")
    second = await claimed_operation(store, operation_id="op-2")
    other_caller = await claimed_operation(store, operation_id="op-1", caller_did="did:key:other")

    assert len({first.node_key, second.node_key, other_caller.node_key}) == 3
    assert len({first.incarnation, second.incarnation, other_caller.incarnation}) == 3


async def test_claim_operation__same_envelope_exists_with_stored_record(store, clock):
    stored = await claimed_operation(store)
    clock.advance(5_000)

    replay = claim(
        lease_token="lease-B",
        lease_expires_at=clock.now + 99_000,
        reissue_intent={"other": True},
        provider_etag="etag-new",
        document_id="doc-other",
    )
    result = await store.operations.claim_operation(replay)

    assert result.status == "exists"
    assert result.operation == stored
    assert await reread(store, stored) == stored


@pytest.mark.parametrize("field", ENVELOPE_FIELDS)
async def test_claim_operation__drifted_envelope_conflict(store, clock, field):
    stored = await claimed_operation(store)
    clock.advance(1)

    drifted = claim(**{field: getattr(claim(), field) + "-drifted"})
    result = await store.operations.claim_operation(drifted)

    assert result.status == "conflict"
    assert result.operation is None
    assert await reread(store, stored) == stored


async def test_claim_operation__conflict_never_overwrites_stored_row(store, clock):
    stored = await claimed_operation(store)
    clock.advance(1)
    drifted = claim(
        **{field: getattr(claim(), field) + "-drifted" for field in ENVELOPE_FIELDS},
        lease_token="lease-B",
    )

    assert (await store.operations.claim_operation(drifted)).status == "conflict"
    assert (await store.operations.claim_operation(claim())).status == "exists"
    assert await reread(store, stored) == stored
    assert len(await all_rows(store)) == 1


async def test_claim_operation__row_vanished_before_read_conflict(store, monkeypatch):
    await claimed_operation(store)
    original_get = store.operations.get_operation

    async def delete_then_get(caller_did, operation_id):
        await store.db.fetch_all(
            sa.delete(op_table)
            .where(op_table.c.caller_did == caller_did, op_table.c.operation_id == operation_id)
            .returning(op_table.c.operation_id)
        )
        return await original_get(caller_did, operation_id)

    monkeypatch.setattr(store.operations, "get_operation", delete_then_get)

    result = await store.operations.claim_operation(claim())

    assert result.status == "conflict"
    assert result.operation is None


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"caller_did": ""}, "callerDID"),
        ({"operation_id": 7}, "operationID"),
        ({"payload_hash": "x" * 1025}, "payloadHash"),
        ({"lease_expires_at": -1}, "leaseExpiresAt"),
        ({"lease_expires_at": 1.5}, "leaseExpiresAt"),
        ({"reissue_intent": {"bad": {1, 2}}}, "reissueIntent"),
        ({"document_id": ""}, "documentID"),
    ],
)
async def test_claim_operation__invalid_field_refused_nothing_written(store, overrides, field):
    with pytest.raises(InvalidInput) as raised:
        await store.operations.claim_operation(claim(**overrides))

    assert raised.value.field == field
    assert await all_rows(store) == []


# --- get_operation ---------------------------------------------------------------------------


async def test_get_operation__absent_none(store):
    assert await store.operations.get_operation(CALLER, "missing") is None


async def test_get_operation__present_returns_record(store):
    record = await claimed_operation(store)
    assert await store.operations.get_operation(CALLER, "op-1") == record
    assert await store.operations.get_operation("did:key:other", "op-1") is None


# --- acquire_lease / renew_lease / release_lease ---------------------------------------------

LEASE_METHODS = ["acquire_lease", "renew_lease", "release_lease"]


async def lease_write(store, method, record, token, expires_at):
    """Call one of the three lease methods with the arguments it takes."""
    if method == "release_lease":
        return await store.operations.release_lease(record.caller_did, record.operation_id, token)
    return await getattr(store.operations, method)(
        record.caller_did, record.operation_id, token, expires_at
    )


@pytest.mark.parametrize("method", LEASE_METHODS)
async def test_lease__held_by_other_token_refused(store, clock, method):
    record = await claimed_operation(store)
    clock.advance(1)

    assert await lease_write(store, method, record, "lease-B", clock.now + LEASE_MS) is None
    await assert_unchanged(store, record)


@pytest.mark.parametrize("method", LEASE_METHODS)
async def test_lease__expiring_exactly_now_still_held(store, clock, method):
    record = await claimed_operation(store)
    clock.now = record.lease_expires_at

    assert await lease_write(store, method, record, "lease-B", clock.now + LEASE_MS) is None
    await assert_unchanged(store, record)


async def test_acquire_lease__one_ms_after_expiry_applies(store, clock):
    record = await claimed_operation(store)
    clock.now = record.lease_expires_at + 1

    taken = await store.operations.acquire_lease(CALLER, "op-1", "lease-B", clock.now + LEASE_MS)

    assert taken is not None
    assert taken.lease_token == "lease-B"
    assert taken.lease_expires_at == clock.now + LEASE_MS
    assert taken.updated_at == clock.now
    assert taken.version == record.version
    assert await reread(store, record) == taken


async def test_acquire_lease__same_token_reacquire_applies(store, clock):
    record = await claimed_operation(store)
    clock.advance(1_000)

    taken = await store.operations.acquire_lease(CALLER, "op-1", "lease-A", clock.now + 90_000)

    assert taken is not None
    assert taken.lease_token == "lease-A"
    assert taken.lease_expires_at == clock.now + 90_000
    assert await reread(store, record) == taken


async def test_acquire_lease__released_lease_free_for_any_token(store, clock):
    record = await released_operation(store)
    clock.advance(1)

    taken = await store.operations.acquire_lease(CALLER, "op-1", "lease-B", clock.now + LEASE_MS)

    assert taken is not None and taken.lease_token == "lease-B"
    assert await reread(store, record) == taken


async def test_renew_lease__same_token_moves_expiry(store, clock):
    record = await claimed_operation(store)
    clock.advance(10_000)

    renewed = await store.operations.renew_lease(CALLER, "op-1", "lease-A", clock.now + LEASE_MS)

    assert renewed is not None
    assert renewed.lease_token == "lease-A"
    assert renewed.lease_expires_at == clock.now + LEASE_MS
    assert renewed.updated_at == clock.now
    assert await reread(store, record) == renewed


async def test_renew_lease__lapsed_lease_same_token_applies(store, clock):
    record = await claimed_operation(store)
    clock.now = record.lease_expires_at + 1

    renewed = await store.operations.renew_lease(CALLER, "op-1", "lease-A", clock.now + LEASE_MS)

    assert renewed is not None
    assert renewed.lease_token == "lease-A"
    assert renewed.lease_expires_at == clock.now + LEASE_MS
    assert await reread(store, record) == renewed


async def test_renew_lease__lapsed_lease_other_token_refused_then_it_acquires(store, clock):
    # The seed let a stranger extend a lapsed lease it does not hold, keeping the silent
    # holder's token alive and locking the stranger out of its own takeover.
    record = await claimed_operation(store)
    clock.now = record.lease_expires_at + 1

    renewed = await store.operations.renew_lease(CALLER, "op-1", "stranger", clock.now + 60_000)

    assert renewed is None
    await assert_unchanged(store, record)
    taken = await store.operations.acquire_lease(CALLER, "op-1", "stranger", clock.now + LEASE_MS)
    assert taken is not None and taken.lease_token == "stranger"


async def test_renew_lease__released_lease_refused(store, clock):
    record = await released_operation(store)
    clock.advance(1)

    assert (
        await store.operations.renew_lease(CALLER, "op-1", "lease-A", clock.now + LEASE_MS) is None
    )
    await assert_unchanged(store, record)


async def test_renew_and_release_lease__holder_applies_after_finalize(store, clock):
    record = await committed_operation(store)
    clock.now = record.lease_expires_at + 1

    renewed = await store.operations.renew_lease(CALLER, "op-1", "lease-A", clock.now + LEASE_MS)
    assert renewed is not None and renewed.lease_expires_at == clock.now + LEASE_MS
    released = await store.operations.release_lease(CALLER, "op-1", "lease-A")
    assert released is not None and released.lease_token is None
    assert released.state == "committed"


async def test_release_lease__same_token_clears_lease(store, clock):
    record = await claimed_operation(store)
    clock.advance(1)

    released = await store.operations.release_lease(CALLER, "op-1", "lease-A")

    assert released is not None
    assert released.lease_token is None
    assert released.lease_expires_at is None
    assert released.updated_at == clock.now
    assert await reread(store, record) == released


async def test_release_lease__lapsed_lease_other_token_refused(store, clock):
    # Releasing another run's lapsed lease would erase whose run lapsed, so the next
    # acquire could not count that run's abandoned send.
    record = await marked_operation(store)
    clock.now = record.lease_expires_at + 1

    assert await store.operations.release_lease(CALLER, "op-1", "lease-B") is None
    await assert_unchanged(store, record)


async def test_release_lease__no_lease_applies_for_any_token(store, clock):
    await released_operation(store)
    clock.advance(1)

    released = await store.operations.release_lease(CALLER, "op-1", "lease-B")

    assert released is not None and released.lease_token is None
    assert released.updated_at == clock.now


@pytest.mark.parametrize("state", TERMINAL_STATES)
@pytest.mark.parametrize("token", ["lease-A", "lease-B"])
async def test_acquire_lease__finished_operation_refused(store, clock, state, token):
    record = await terminal_operation(store, state)
    clock.now = (record.lease_expires_at or 0) + 1

    assert await store.operations.acquire_lease(CALLER, "op-1", token, clock.now + LEASE_MS) is None
    await assert_unchanged(store, record)


async def test_acquire_lease__takeover_after_marked_send_counts_abandoned_attempt(store, clock):
    record = await marked_operation(store, marker="run-1")
    clock.now = record.lease_expires_at + 1

    taken = await store.operations.acquire_lease(CALLER, "op-1", "lease-B", clock.now + LEASE_MS)

    assert taken is not None
    assert taken.attempts == record.attempts + 1
    assert taken.send_marker == ABANDONED_SEND_MARKER
    assert taken.lease_token == "lease-B"
    assert taken.version == record.version
    assert await reread(store, record) == taken


async def test_acquire_lease__takeover_from_a_run_that_never_marked_counts_nothing(store, clock):
    # Run 1 marked and died; run 2 took over (counting run 1's send) and died before it
    # marked anything: run 3's takeover has no abandoned send to count.
    record = await marked_operation(store, marker="run-1")
    clock.now = record.lease_expires_at + 1
    second = await store.operations.acquire_lease(CALLER, "op-1", "lease-B", clock.now + 1_000)
    assert second is not None and second.attempts == 1
    clock.now += 1_001

    third = await store.operations.acquire_lease(CALLER, "op-1", "lease-C", clock.now + 1_000)

    assert third is not None
    assert third.attempts == 1
    assert third.send_marker == ABANDONED_SEND_MARKER


async def test_acquire_lease__holder_reacquiring_lapsed_marked_lease_counts_nothing(store, clock):
    record = await marked_operation(store)
    clock.now = record.lease_expires_at + 1

    taken = await store.operations.acquire_lease(CALLER, "op-1", "lease-A", clock.now + LEASE_MS)

    assert taken is not None and taken.attempts == record.attempts


async def test_acquire_lease__takeover_without_marker_counts_nothing(store, clock):
    record = await claimed_operation(store)
    clock.now = record.lease_expires_at + 1

    taken = await store.operations.acquire_lease(CALLER, "op-1", "lease-B", clock.now + LEASE_MS)

    assert taken is not None and taken.attempts == record.attempts


async def test_acquire_lease__free_lease_with_uncounted_marker_counts_nothing(store, clock):
    # A run that recorded its attempt as not counted and released its lease handed the
    # operation over on purpose: no run was abandoned.
    record = await marked_operation(store)
    kept = await store.operations.record_operation(transition(record, count_attempt=False))
    assert kept is not None and kept.send_marker == "run-1"
    await store.operations.release_lease(CALLER, "op-1", "lease-A")
    clock.advance(1)

    taken = await store.operations.acquire_lease(CALLER, "op-1", "lease-B", clock.now + LEASE_MS)

    assert taken is not None and taken.attempts == kept.attempts


async def test_acquire_lease__crash_loop_of_three_takeovers_counts_three(store, clock):
    record = await claimed_operation(store)
    token = "lease-A"
    for run in range(1, 5):
        marked = await store.operations.mark_send_started(CALLER, "op-1", token, f"run-{run}")
        assert marked is not None
        clock.now = (marked.lease_expires_at or 0) + 1
        if run == 4:
            break
        token = f"lease-{run + 1}"
        taken = await store.operations.acquire_lease(CALLER, "op-1", token, clock.now + 2_000)
        assert taken is not None and taken.attempts == run

    current = await reread(store, record)
    assert current is not None and current.attempts == 3
    assert current.send_marker == CONTESTED_SEND_MARKER


async def test_acquire_lease__takeover_then_finalize_counts_both_sends(store, clock):
    record = await marked_operation(store, marker="run-1", lease_expires_at=clock.now + 2_000)
    clock.now = record.lease_expires_at + 1
    taken = await store.operations.acquire_lease(CALLER, "op-1", "lease-B", clock.now + 2_000)
    assert taken is not None
    marked = await store.operations.mark_send_started(CALLER, "op-1", "lease-B", "run-2")
    assert marked is not None and marked.send_marker == CONTESTED_SEND_MARKER

    refund = await store.operations.record_operation(
        transition(marked, refund_attempt=True, send_marker="run-2")
    )
    assert refund is None
    done = await store.operations.finalize_operation_and_arm_watch(
        Finalize(CALLER, "op-1", version=marked.version, lease_token="lease-B", due_at=clock.now)
    )

    assert done is not None and done.operation.attempts == 2


@pytest.mark.parametrize(
    ("method", "args", "field"),
    [
        ("acquire_lease", ("", 1), "token"),
        ("acquire_lease", ("lease-B", -5), "leaseExpiresAt"),
        ("renew_lease", ("lease-A", True), "leaseExpiresAt"),
        ("renew_lease", (None, 1), "token"),
        ("release_lease", ("",), "token"),
    ],
)
async def test_lease__invalid_input_refused_nothing_written(store, clock, method, args, field):
    record = await claimed_operation(store)
    clock.now = record.lease_expires_at + 1

    with pytest.raises(InvalidInput) as raised:
        await getattr(store.operations, method)(CALLER, "op-1", *args)

    assert raised.value.field == field
    await assert_unchanged(store, record)


# --- mark_send_started -----------------------------------------------------------------------


async def test_mark_send_started__postgres_update_is_hot(store, database, clock):
    """Marking a send writes no indexed column (no index holds ``updated_at``), and a fresh
    row's page has room (the table's fillfactor): PostgreSQL updates the row without a new
    entry in any of the table's indexes (a HOT update)."""
    if not database.is_postgres:
        pytest.skip("HOT updates are PostgreSQL's")
    async with database.write_transaction():
        await claimed_operation(store)
        clock.advance(1)
        marked = await store.operations.mark_send_started(CALLER, "op-1", "lease-A", "run-1")
        (counts,) = await database.fetch_all(
            sa.text(
                "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_xact_user_tables"
                " WHERE relname = 'kubun_connector_operation'"
            )
        )
    assert marked is not None and (marked.send_marker, marked.updated_at) == ("run-1", clock.now)
    assert (counts[0], counts[1]) == (1, 1)


async def test_mark_send_started__unmarked_takes_marker(store, clock):
    record = await claimed_operation(store)
    clock.advance(1)

    marked = await store.operations.mark_send_started(CALLER, "op-1", "lease-A", "run-1")

    assert marked is not None
    assert marked.send_marker == "run-1"
    assert marked.updated_at == clock.now
    assert (marked.version, marked.attempts, marked.state) == (
        record.version,
        record.attempts,
        record.state,
    )
    assert await reread(store, record) == marked


async def test_mark_send_started__same_marker_again_kept(store, clock):
    record = await marked_operation(store, "run-1")
    clock.advance(1)

    again = await store.operations.mark_send_started(CALLER, "op-1", "lease-A", "run-1")

    assert again is not None and again.send_marker == "run-1"
    assert await reread(store, record) == again


async def test_mark_send_started__second_run_marker_contests(store, clock):
    record = await marked_operation(store, "run-1")
    clock.advance(1)

    contested = await store.operations.mark_send_started(CALLER, "op-1", "lease-A", "run-2")

    assert contested is not None
    assert contested.send_marker == CONTESTED_SEND_MARKER
    assert await reread(store, record) == contested


@pytest.mark.parametrize("marker", ["run-1", "run-2", "run-3"])
async def test_mark_send_started__contested_stays_contested(store, marker):
    await marked_operation(store, "run-1")
    await store.operations.mark_send_started(CALLER, "op-1", "lease-A", "run-2")

    again = await store.operations.mark_send_started(CALLER, "op-1", "lease-A", marker)

    assert again is not None and again.send_marker == CONTESTED_SEND_MARKER


@pytest.mark.parametrize("reserved", sorted(RESERVED_SEND_MARKERS))
@pytest.mark.parametrize("prior_marker", [None, "run-1"])
async def test_mark_send_started__reserved_marker_rejected_nothing_written(
    store, clock, prior_marker, reserved
):
    record = (
        await claimed_operation(store)
        if prior_marker is None
        else await marked_operation(store, prior_marker)
    )
    clock.advance(1)

    with pytest.raises(ReservedValue) as raised:
        await store.operations.mark_send_started(CALLER, "op-1", "lease-A", reserved)

    assert raised.value.field == "marker"
    await assert_unchanged(store, record)


async def test_mark_send_started__foreign_lease_token_refused(store, clock):
    record = await claimed_operation(store)
    clock.advance(1)

    assert await store.operations.mark_send_started(CALLER, "op-1", "lease-B", "run-1") is None
    await assert_unchanged(store, record)


async def test_mark_send_started__released_lease_refused(store, clock):
    record = await released_operation(store)
    clock.advance(1)

    assert await store.operations.mark_send_started(CALLER, "op-1", "lease-A", "run-1") is None
    await assert_unchanged(store, record)


async def test_mark_send_started__lapsed_lease_same_token_applies(store, clock):
    # The seed guards the token only, not its expiry.
    record = await claimed_operation(store)
    clock.now = record.lease_expires_at + 1

    marked = await store.operations.mark_send_started(CALLER, "op-1", "lease-A", "run-1")

    assert marked is not None and marked.send_marker == "run-1"


@pytest.mark.parametrize("state", TERMINAL_STATES)
async def test_mark_send_started__not_attempted_refused(store, clock, state):
    record = await terminal_operation(store, state)
    clock.advance(1)

    assert await store.operations.mark_send_started(CALLER, "op-1", "lease-A", "run-9") is None
    await assert_unchanged(store, record)


# --- defer_operation -------------------------------------------------------------------------


@pytest.mark.parametrize("reason", ["offline", "auth", None])
async def test_defer_operation__free_lease_sets_schedule_and_reason(store, clock, reason):
    record = await released_operation(store)
    clock.advance(1)

    deferred = await store.operations.defer_operation(
        CALLER, "op-1", clock.now + 60_000, reason=reason
    )

    assert deferred is not None
    assert deferred.next_attempt_at == clock.now + 60_000
    assert deferred.defer_reason == reason
    assert deferred.updated_at == clock.now
    assert (deferred.version, deferred.attempts, deferred.state) == (
        record.version,
        record.attempts,
        "attempted",
    )
    assert await reread(store, record) == deferred


async def test_defer_operation__reason_omitted_clears_previous_reason(store, clock):
    await released_operation(store)
    await store.operations.defer_operation(CALLER, "op-1", clock.now + 1_000, reason="auth")

    deferred = await store.operations.defer_operation(CALLER, "op-1", clock.now + 2_000)

    assert deferred is not None
    assert deferred.defer_reason is None
    assert deferred.next_attempt_at == clock.now + 2_000


async def test_defer_operation__without_token_lease_held_refused(store, clock):
    record = await claimed_operation(store)
    clock.advance(1)

    assert (
        await store.operations.defer_operation(CALLER, "op-1", clock.now + 1, reason="offline")
        is None
    )
    await assert_unchanged(store, record)


async def test_defer_operation__without_token_lease_expiring_exactly_now_refused(store, clock):
    record = await claimed_operation(store)
    clock.now = record.lease_expires_at

    assert await store.operations.defer_operation(CALLER, "op-1", clock.now + 1) is None
    await assert_unchanged(store, record)


async def test_defer_operation__without_token_expired_lease_applies(store, clock):
    record = await claimed_operation(store)
    clock.now = record.lease_expires_at + 1

    deferred = await store.operations.defer_operation(
        CALLER, "op-1", clock.now + 5_000, reason="offline"
    )

    assert deferred is not None
    assert deferred.next_attempt_at == clock.now + 5_000
    assert deferred.defer_reason == "offline"
    assert deferred.lease_token == "lease-A"


async def test_defer_operation__own_token_lease_held_applies(store, clock):
    record = await claimed_operation(store)
    clock.advance(1)

    deferred = await store.operations.defer_operation(
        CALLER, "op-1", clock.now + 5_000, reason="auth", lease_token="lease-A"
    )

    assert deferred is not None
    assert deferred.defer_reason == "auth"
    assert deferred.lease_token == "lease-A"
    assert await reread(store, record) == deferred


async def test_defer_operation__other_token_lease_held_refused(store, clock):
    record = await claimed_operation(store)
    clock.advance(1)

    assert (
        await store.operations.defer_operation(
            CALLER, "op-1", clock.now + 5_000, reason="auth", lease_token="lease-B"
        )
        is None
    )
    await assert_unchanged(store, record)


async def test_defer_operation__other_token_expired_lease_applies(store, clock):
    record = await claimed_operation(store)
    clock.now = record.lease_expires_at + 1

    deferred = await store.operations.defer_operation(
        CALLER, "op-1", clock.now + 5_000, lease_token="lease-B"
    )

    assert deferred is not None
    assert deferred.next_attempt_at == clock.now + 5_000
    assert deferred.lease_token == "lease-A"


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"reason": "sleepy"}, "reason"),
        ({"reason": "OFFLINE"}, "reason"),
        ({"next_attempt_at": -1}, "nextAttemptAt"),
        ({"next_attempt_at": None}, "nextAttemptAt"),
        ({"lease_token": ""}, "leaseToken"),
    ],
)
async def test_defer_operation__invalid_input_refused_nothing_written(store, clock, kwargs, field):
    record = await released_operation(store)
    clock.advance(1)
    arguments = {"next_attempt_at": clock.now + 1_000} | kwargs

    with pytest.raises(InvalidInput) as raised:
        await store.operations.defer_operation(CALLER, "op-1", **arguments)

    assert raised.value.field == field
    await assert_unchanged(store, record)


@pytest.mark.parametrize("state", TERMINAL_STATES)
async def test_defer_operation__not_attempted_refused(store, clock, state):
    record = await terminal_operation(store, state)
    clock.now = record.lease_expires_at + 1

    assert (
        await store.operations.defer_operation(
            CALLER, "op-1", clock.now + 1_000, reason="offline", lease_token="lease-A"
        )
        is None
    )
    await assert_unchanged(store, record)


# --- record_operation ------------------------------------------------------------------------


@pytest.mark.parametrize("to_state", ["attempted", "failed", "superseded"])
async def test_record_operation__applied_counts_attempt(store, clock, to_state):
    record = await marked_operation(store, "run-1")
    clock.advance(1)

    moved = await store.operations.record_operation(transition(record, to_state=to_state))

    assert moved is not None
    assert moved.state == to_state
    assert moved.attempts == record.attempts + 1
    assert moved.send_marker is None
    assert moved.version == record.version + 1
    assert moved.updated_at == clock.now
    assert moved.lease_token == record.lease_token
    assert await reread(store, record) == moved


async def test_record_operation__fields_set_from_input(store):
    record = await claimed_operation(store)

    moved = await store.operations.record_operation(
        transition(
            record,
            provider_etag="etag-7",
            next_attempt_at=record.created_at + 30_000,
            defer_reason="offline",
            kind="rate_limited",
            http_status=429,
        )
    )

    assert moved is not None
    assert moved.provider_etag == "etag-7"
    assert moved.next_attempt_at == record.created_at + 30_000
    assert moved.defer_reason == "offline"
    assert moved.last_kind == "rate_limited"
    assert moved.last_http_status == 429
    assert await reread(store, record) == moved


async def test_record_operation__omitted_fields_cleared(store):
    record = await claimed_operation(store, provider_etag="etag-from-claim")
    first = await store.operations.record_operation(
        transition(
            record,
            provider_etag="etag-7",
            next_attempt_at=record.created_at + 30_000,
            defer_reason="auth",
            kind="transient",
            http_status=503,
        )
    )
    assert first is not None

    second = await store.operations.record_operation(transition(first))

    assert second is not None
    assert second.provider_etag is None
    assert second.next_attempt_at is None
    assert second.defer_reason is None
    assert second.last_kind is None
    assert second.last_http_status is None
    assert second.version == record.version + 2
    assert await reread(store, record) == second


async def test_record_operation__claim_provider_etag_cleared_when_omitted(store):
    record = await claimed_operation(store, provider_etag="etag-from-claim")

    moved = await store.operations.record_operation(transition(record))

    assert moved is not None and moved.provider_etag is None


@pytest.mark.parametrize("version_delta", [-1, 1])
async def test_record_operation__stale_version_refused(store, clock, version_delta):
    record = await recorded_operation(store, "attempted")
    clock.advance(1)

    refused = await store.operations.record_operation(
        transition(record, version=record.version + version_delta)
    )

    assert refused is None
    await assert_unchanged(store, record)


async def test_record_operation__wrong_from_state_refused(store, clock):
    record = await recorded_operation(store, "failed")
    clock.advance(1)

    refused = await store.operations.record_operation(
        transition(record, from_state="attempted", to_state="superseded")
    )

    assert refused is None
    await assert_unchanged(store, record)


@pytest.mark.parametrize("from_state", TERMINAL_STATES)
async def test_record_operation__terminal_from_state_on_attempted_row_refused(
    store, clock, from_state
):
    record = await claimed_operation(store)
    clock.advance(1)

    assert (
        await store.operations.record_operation(transition(record, from_state=from_state)) is None
    )
    await assert_unchanged(store, record)


async def test_record_operation__foreign_lease_token_refused(store, clock):
    record = await claimed_operation(store)
    clock.advance(1)

    assert (
        await store.operations.record_operation(transition(record, lease_token="lease-B")) is None
    )
    await assert_unchanged(store, record)


async def test_record_operation__released_lease_refused(store, clock):
    record = await released_operation(store)
    clock.advance(1)

    assert (
        await store.operations.record_operation(transition(record, lease_token="lease-A")) is None
    )
    await assert_unchanged(store, record)


async def test_record_operation__lapsed_lease_same_token_applies(store, clock):
    # The seed's CAS compares the token, not its expiry.
    record = await claimed_operation(store)
    clock.now = record.lease_expires_at + 1

    moved = await store.operations.record_operation(transition(record, to_state="failed"))

    assert moved is not None and moved.state == "failed"


async def test_record_operation__to_committed_rejected_nothing_written(store, clock):
    record = await marked_operation(store)
    clock.advance(1)

    with pytest.raises(InvalidInput) as raised:
        await store.operations.record_operation(transition(record, to_state="committed"))

    assert raised.value.field == "toState"
    assert not isinstance(raised.value, ReservedValue)
    await assert_unchanged(store, record)


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"to_state": "done"}, "toState"),
        ({"from_state": "pending"}, "fromState"),
        ({"version": -1}, "version"),
        ({"version": "0"}, "version"),
        ({"lease_token": ""}, "leaseToken"),
        ({"defer_reason": "nap"}, "deferReason"),
        ({"next_attempt_at": 2**53}, "nextAttemptAt"),
        ({"http_status": 4.29}, "httpStatus"),
        ({"kind": ""}, "kind"),
        ({"provider_etag": ""}, "providerEtag"),
    ],
)
async def test_record_operation__invalid_input_refused_nothing_written(
    store, clock, overrides, field
):
    record = await marked_operation(store)
    clock.advance(1)

    with pytest.raises(InvalidInput) as raised:
        await store.operations.record_operation(transition(record, **overrides))

    assert raised.value.field == field
    await assert_unchanged(store, record)


@pytest.mark.parametrize("reserved", sorted(RESERVED_SEND_MARKERS))
@pytest.mark.parametrize("refund_attempt", [False, True])
async def test_record_operation__reserved_send_marker_rejected_nothing_written(
    store, clock, refund_attempt, reserved
):
    record = await marked_operation(store, "run-1")
    await store.operations.mark_send_started(CALLER, "op-1", "lease-A", "run-2")
    record = await reread(store, record)
    clock.advance(1)

    with pytest.raises(ReservedValue) as raised:
        await store.operations.record_operation(
            transition(record, refund_attempt=refund_attempt, send_marker=reserved)
        )

    assert raised.value.field == "sendMarker"
    await assert_unchanged(store, record)


@pytest.mark.parametrize("to_state", ["failed", "attempted"])
async def test_record_operation__kind_cancelled_rejected_nothing_written(store, clock, to_state):
    # A worker's "cancelled" would read as an operator's cancel: reissueOperations would
    # count it as one and skip it.
    record = await marked_operation(store)
    clock.advance(1)

    with pytest.raises(ReservedValue) as raised:
        await store.operations.record_operation(
            transition(record, to_state=to_state, kind="cancelled")
        )

    assert raised.value.field == "kind"
    await assert_unchanged(store, record)


async def test_record_operation__count_attempt_false_leaves_attempts_and_marker(store, clock):
    record = await marked_operation(store, "run-1")
    clock.advance(1)

    moved = await store.operations.record_operation(
        transition(record, count_attempt=False, kind="transient")
    )

    assert moved is not None
    assert moved.attempts == record.attempts
    assert moved.send_marker == "run-1"
    assert moved.version == record.version + 1
    assert moved.last_kind == "transient"
    assert await reread(store, record) == moved


async def retried_marked_operation(store, marker="run-1"):
    """An operation with one attempt counted whose next attempt ``marker`` has started."""
    record = await claimed_operation(store)
    counted = await store.operations.record_operation(transition(record))
    assert counted is not None and counted.attempts == 1
    if marker is None:
        return counted
    marked = await store.operations.mark_send_started(CALLER, "op-1", "lease-A", marker)
    assert marked is not None
    return marked


async def test_record_operation__refund_unmarked_takes_attempt_back(store, clock):
    record = await retried_marked_operation(store, marker=None)
    clock.advance(1)

    refunded = await store.operations.record_operation(
        transition(record, refund_attempt=True, kind="transient")
    )

    assert refunded is not None
    assert refunded.attempts == record.attempts - 1 == 0
    assert refunded.send_marker is None
    assert refunded.version == record.version + 1
    assert await reread(store, record) == refunded


async def test_record_operation__refund_own_marker_applies_and_clears_it(store, clock):
    record = await retried_marked_operation(store, "run-1")
    clock.advance(1)

    refunded = await store.operations.record_operation(
        transition(record, refund_attempt=True, send_marker="run-1")
    )

    assert refunded is not None
    assert refunded.attempts == 0
    assert refunded.send_marker is None
    assert await reread(store, record) == refunded


async def test_record_operation__refund_wins_over_count_attempt_false(store):
    record = await retried_marked_operation(store, "run-1")

    refunded = await store.operations.record_operation(
        transition(record, refund_attempt=True, count_attempt=False, send_marker="run-1")
    )

    assert refunded is not None
    assert refunded.attempts == 0 and refunded.send_marker is None


@pytest.mark.parametrize("send_marker", [None, "run-2"])
async def test_record_operation__refund_other_runs_marker_refused(store, clock, send_marker):
    record = await retried_marked_operation(store, "run-1")
    clock.advance(1)

    refused = await store.operations.record_operation(
        transition(record, refund_attempt=True, send_marker=send_marker)
    )

    assert refused is None
    await assert_unchanged(store, record)


@pytest.mark.parametrize("send_marker", ["run-1", "run-2", None])
async def test_record_operation__refund_contested_refused_for_every_run(store, clock, send_marker):
    await retried_marked_operation(store, "run-1")
    contested = await store.operations.mark_send_started(CALLER, "op-1", "lease-A", "run-2")
    assert contested is not None and contested.send_marker == CONTESTED_SEND_MARKER
    clock.advance(1)

    refused = await store.operations.record_operation(
        transition(contested, refund_attempt=True, send_marker=send_marker)
    )

    assert refused is None
    await assert_unchanged(store, contested)


@pytest.mark.parametrize("send_marker", [None, "run-1"])
async def test_record_operation__refund_with_no_attempts_refused(store, clock, send_marker):
    record = await claimed_operation(store)
    if send_marker is not None:
        record = await store.operations.mark_send_started(CALLER, "op-1", "lease-A", send_marker)
    assert record is not None and record.attempts == 0
    clock.advance(1)

    refused = await store.operations.record_operation(
        transition(record, refund_attempt=True, send_marker=send_marker)
    )

    assert refused is None
    await assert_unchanged(store, record)


@pytest.mark.parametrize("state", TERMINAL_STATES)
@pytest.mark.parametrize("to_state", ["attempted", "failed", "superseded"])
async def test_record_operation__nothing_leaves_terminal_state(store, clock, state, to_state):
    record = await terminal_operation(store, state)
    clock.advance(1)

    refused = await store.operations.record_operation(
        transition(record, from_state=state, to_state=to_state)
    )

    assert refused is None
    await assert_unchanged(store, record)


async def test_record_operation__other_operations_untouched(store):
    record = await claimed_operation(store, operation_id="op-1")
    neighbour = await claimed_operation(store, operation_id="op-2")

    assert await store.operations.record_operation(transition(record, to_state="failed"))

    assert await reread(store, neighbour) == neighbour


# --- writes on an absent key -----------------------------------------------------------------


@pytest.mark.parametrize(
    "write",
    [
        "acquire_lease",
        "renew_lease",
        "release_lease",
        "mark_send_started",
        "defer_operation",
        "record_operation",
        "finalize_operation_and_arm_watch",
    ],
)
async def test_write__absent_key_none(store, clock, write):
    await committed_operation(store, operation_id="op-present")
    before = await all_rows(store)
    watches_before = await store.db.fetch_all(sa.select(watch_table))
    record = await claimed_operation(store, operation_id="op-ghost")
    await store.db.fetch_all(
        sa.delete(op_table)
        .where(op_table.c.operation_id == "op-ghost")
        .returning(op_table.c.operation_id)
    )
    clock.now = record.lease_expires_at + 1
    operations = store.operations
    calls = {
        "acquire_lease": lambda: operations.acquire_lease(
            CALLER, "op-ghost", "t", clock.now + LEASE_MS
        ),
        "renew_lease": lambda: operations.renew_lease(
            CALLER, "op-ghost", "t", clock.now + LEASE_MS
        ),
        "release_lease": lambda: operations.release_lease(CALLER, "op-ghost", "t"),
        "mark_send_started": lambda: operations.mark_send_started(
            CALLER, "op-ghost", "lease-A", "run-1"
        ),
        "defer_operation": lambda: operations.defer_operation(CALLER, "op-ghost", clock.now),
        "record_operation": lambda: operations.record_operation(transition(record)),
        "finalize_operation_and_arm_watch": lambda: operations.finalize_operation_and_arm_watch(
            Finalize(CALLER, "op-ghost", version=0, lease_token="lease-A", due_at=clock.now)
        ),
    }

    assert await calls[write]() is None
    assert await store.operations.get_operation(CALLER, "op-ghost") is None
    assert await all_rows(store) == before
    assert [dict(row) for row in await store.db.fetch_all(sa.select(watch_table))] == [
        dict(row) for row in watches_before
    ]


async def test_settling__checks_the_token_not_the_clock_until_another_takes_the_lease(store, clock):
    record = await claimed_operation(store)
    clock.now = record.lease_expires_at + 1

    lapsed = await marked(store, record)
    assert lapsed.send_marker == "run-1" and lapsed.version == record.version

    taken = await store.operations.acquire_lease(CALLER, "op-1", "lease-B", clock.now + LEASE_MS)
    assert taken is not None and taken.version == lapsed.version
    refused = await store.operations.finalize_operation_and_arm_watch(
        Finalize(CALLER, "op-1", version=taken.version, lease_token="lease-A", due_at=clock.now)
    )
    assert refused is None
    assert (await reread(store, record)).lease_token == "lease-B"
