"""Projection watches in the store (seed projection-watches.js; docs/api.md, 'Verifying and
repairing'), on both backends: arm, verify, claim, defer, resume, ingress and the reads. Every
refusal re-reads the watch after the clock moved, so a write that slipped through would show in
updated_at."""

import pytest
import sqlalchemy as sa

from store import ConnectorStore
from store.errors import CasRetriesExhausted, InvalidInput, ReservedValue
from store.operations import Finalize
from store.records import WatchIdentity
from store.tables import projection_watch as watch_table
from store.watches import CAS_ATTEMPTS, WatchFilter
from tests.factories import (
    LEASE_MS,
    claimed_operation,
    claimed_watch,
    committed_operation,
    pending_watch,
    repair_failed_watch,
    reread_watch,
    verified_watch,
)

DUE_MS = 60_000
ABSENT = WatchIdentity("did:key:nobody", "calendar", "Event", "acct-1", "evt-none")


async def verify(store, record, fetched, *, max_attempts=3, due_in=DUE_MS, **overrides):
    return await store.watches.record_verification(
        record.identity,
        generation=overrides.pop("generation", record.repair_generation),
        fetched_digest=fetched,
        max_attempts=max_attempts,
        due_at=store.clock() + due_in,
        **overrides,
    )


async def arm(store, record, reason="ingress", due_in=DUE_MS, triggering=None):
    identity = record if isinstance(record, WatchIdentity) else record.identity
    return await store.watches.arm_watch(identity, reason, store.clock() + due_in, triggering)


async def assert_unchanged(store, record):
    assert await reread_watch(store, record) == record


# --- arm_watch ---------------------------------------------------------------------------


async def test_arm_watch__ingress_noop_when_triggering_is_not_current_winner(store, clock):
    watch = await verified_watch(store, "digest-1")
    await store.winners.record_winner("doc-1", "digest-2")
    clock.advance(1_000)

    result = await arm(store, watch, triggering="digest-3")

    assert result.outcome == "noop" and result.watch == watch
    await assert_unchanged(store, watch)


async def test_arm_watch__ingress_noop_when_triggering_equals_verified_watermark(store, clock):
    watch = await verified_watch(store, "digest-1")
    clock.advance(1_000)

    result = await arm(store, watch, triggering="digest-1")

    assert result.outcome == "noop"
    await assert_unchanged(store, watch)


async def test_arm_watch__ingress_noop_when_triggering_equals_observed_watermark(store, clock):
    watch = await pending_watch(store, "digest-1")
    assert watch.observed_winner_digest == "digest-1" and watch.verified_state_digest is None
    clock.advance(1_000)

    result = await arm(store, watch, triggering="digest-1")

    assert result.outcome == "noop"
    await assert_unchanged(store, watch)


async def test_arm_watch__ingress_opens_from_verified(store, clock):
    watch = await verified_watch(store, "digest-1")
    await store.winners.record_winner("doc-1", "digest-2")
    clock.advance(1_000)

    result = await arm(store, watch, triggering="digest-2", due_in=5_000)

    opened = result.watch
    assert result.outcome == "opened" and opened is not None
    assert opened.repair_generation == watch.repair_generation + 1
    assert opened.verification_status == "pending_verification"
    assert opened.verification_attempts == 0
    assert opened.observed_winner_digest == "digest-2"
    assert opened.verified_state_digest == "digest-1"
    assert opened.next_attempt_at == clock.now + 5_000
    assert opened.claimed_until is None and opened.defer_reason is None
    assert opened.version == watch.version + 1 and opened.updated_at == clock.now
    assert await reread_watch(store, watch) == opened


async def test_arm_watch__ingress_opens_from_repair_failed(store, clock):
    watch = await repair_failed_watch(store, "digest-1")
    assert watch.verification_attempts == 1
    await store.winners.record_winner("doc-1", "digest-2")
    clock.advance(1_000)

    result = await arm(store, watch, triggering="digest-2")

    assert result.outcome == "opened" and result.watch is not None
    assert result.watch.verification_status == "pending_verification"
    assert result.watch.verification_attempts == 0
    assert result.watch.repair_generation == watch.repair_generation + 1
    assert result.watch.observed_winner_digest == "digest-2"


@pytest.mark.parametrize(("due_in", "expected_in"), [(10_000, 10_000), (120_000, DUE_MS)])
async def test_arm_watch__ingress_coalesces_pending_to_earlier_due(
    store, clock, due_in, expected_in
):
    watch = await pending_watch(store, "digest-1")
    assert watch.next_attempt_at == clock.now + DUE_MS
    await store.winners.record_winner("doc-1", "digest-2")
    start = clock.now
    clock.advance(0)

    result = await arm(store, watch, triggering="digest-2", due_in=due_in)

    assert result.outcome == "coalesced" and result.watch is not None
    assert result.watch.next_attempt_at == start + expected_in
    assert result.watch.repair_generation == watch.repair_generation
    assert result.watch.observed_winner_digest == "digest-1"
    assert result.watch.version == watch.version + 1
    assert await reread_watch(store, watch) == result.watch


async def test_arm_watch__coalesce_drops_nothing_else(store, clock):
    watch = await claimed_watch(store, clock)
    await store.winners.record_winner("doc-1", "digest-2")

    result = await arm(store, watch, triggering="digest-2")

    assert result.outcome == "coalesced" and result.watch is not None
    assert result.watch.claimed_until == watch.claimed_until


@pytest.mark.parametrize("state", ["pending", "verified", "repair_failed"])
async def test_arm_watch__manual_always_opens(store, clock, state):
    factory = {
        "pending": pending_watch,
        "verified": verified_watch,
        "repair_failed": repair_failed_watch,
    }[state]
    watch = await factory(store, "digest-1")
    clock.advance(1_000)

    result = await arm(store, watch, reason="manual")

    assert result.outcome == "opened" and result.watch is not None
    assert result.watch.repair_generation == watch.repair_generation + 1
    assert result.watch.verification_status == "pending_verification"
    assert result.watch.observed_winner_digest == "digest-1"


async def test_arm_watch__manual_drops_the_claim(store, clock):
    watch = await claimed_watch(store, clock)

    result = await arm(store, watch, reason="manual")

    assert result.watch is not None and result.watch.claimed_until is None


@pytest.mark.parametrize("reason", ["ingress", "manual"])
async def test_arm_watch__no_watch_noop(store, reason):
    result = await arm(store, ABSENT, reason=reason, triggering="digest-1")

    assert result.outcome == "noop" and result.watch is None
    assert await store.watches.get_watch(ABSENT) is None


async def test_arm_watch__reason_finalize_reserved(store, clock):
    watch = await pending_watch(store)
    clock.advance(1_000)

    with pytest.raises(ReservedValue) as refused:
        await arm(store, watch, reason="finalize")

    assert refused.value.field == "reason"
    await assert_unchanged(store, watch)


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        ({"reason": "later"}, "reason"),
        ({"due_at": -1}, "dueAt"),
        ({"triggering_winner": ""}, "triggeringWinner"),
        ({"identity": WatchIdentity("", "c", "m", "a", "s")}, "ownerDID"),
    ],
)
async def test_arm_watch__bad_input_names_the_field(store, arguments, field):
    values = {
        "identity": ABSENT,
        "reason": "ingress",
        "due_at": 0,
        "triggering_winner": "d",
    } | arguments
    with pytest.raises(InvalidInput) as refused:
        await store.watches.arm_watch(**values)
    assert refused.value.field == field


def moving_document(database, calls, moves):
    """A read_winner that, on its first ``moves`` calls, moves the watch to another document
    in the same transaction, so the watch read under lock no longer matches."""

    async def read_winner(document_id):
        calls.append(document_id)
        if len(calls) <= moves:
            await database.fetch_one(
                sa.update(watch_table)
                .values(document_id=f"moved-{len(calls)}")
                .returning(watch_table.c.source_id)
            )
        row = await database.fetch_one(
            sa.text(
                "SELECT winner_digest FROM kubun_connector_document_winner WHERE document_id = :d"
            ).bindparams(d=document_id)
        )
        return None if row is None else row[0]

    return read_winner


async def test_arm_watch__gate_rerun_on_retry(database, clock):
    calls: list[str | None] = []
    store = ConnectorStore(database, clock=clock, read_winner=moving_document(database, calls, 1))
    watch = await pending_watch(store, "digest-1")
    calls.clear()

    result = await arm(store, watch, reason="manual")

    assert calls == ["doc-1", "doc-1"]
    assert result.outcome == "opened" and result.watch is not None
    assert result.watch.document_id == "doc-1"


async def test_arm_watch__retries_exhausted_raise_and_write_nothing(database, clock):
    calls: list[str | None] = []
    store = ConnectorStore(database, clock=clock, read_winner=moving_document(database, calls, 99))
    await store.winners.record_winner("doc-1", "digest-1")
    operation = await committed_operation(store)
    watch = await store.watches.get_watch(
        WatchIdentity(
            operation.owner_did,
            operation.connector_name,
            operation.model,
            operation.account_key,
            operation.source_id,
        )
    )
    calls.clear()
    clock.advance(1_000)

    with pytest.raises(CasRetriesExhausted) as refused:
        await arm(store, watch, reason="manual")

    assert refused.value.attempts == CAS_ATTEMPTS and len(calls) == CAS_ATTEMPTS
    await assert_unchanged(store, watch)


# --- record_verification -------------------------------------------------------------------


async def test_record_verification__stale_generation_checked_before_stale_claim(store, clock):
    watch = await claimed_watch(store, clock)
    clock.advance(1_000)

    result = await verify(
        store, watch, "digest-1", generation=2, claimed_until=watch.claimed_until + 1
    )

    assert result.outcome == "stale-generation" and result.watch == watch
    await assert_unchanged(store, watch)


async def test_record_verification__stale_claim(store, clock):
    watch = await claimed_watch(store, clock)
    clock.advance(1_000)

    result = await verify(store, watch, "digest-1", claimed_until=watch.claimed_until + 1)

    assert result.outcome == "stale-claim" and result.watch == watch
    await assert_unchanged(store, watch)


async def test_record_verification__claim_gate_skipped_when_omitted(store, clock):
    watch = await claimed_watch(store, clock)

    result = await verify(store, watch, "digest-1")

    assert result.outcome == "verified"


async def test_record_verification__matching_digest_verified_with_both_watermarks(store, clock):
    watch = await claimed_watch(store, clock)
    await store.winners.record_winner("doc-1", "digest-2")
    clock.advance(1_000)

    result = await verify(store, watch, "digest-2", claimed_until=watch.claimed_until)

    verified = result.watch
    assert result.outcome == "verified" and verified is not None
    assert verified.verification_status == "verified"
    assert verified.observed_winner_digest == "digest-2"
    assert verified.verified_state_digest == "digest-2"
    assert verified.next_attempt_at is None and verified.claimed_until is None
    assert verified.verification_attempts == watch.verification_attempts
    assert verified.version == watch.version + 1 and verified.updated_at == clock.now
    assert await reread_watch(store, watch) == verified


async def test_record_verification__mismatch_below_max_pending_watermarks_untouched(store, clock):
    watch = await claimed_watch(store, clock)
    await store.winners.record_winner("doc-1", "digest-2")
    clock.advance(1_000)

    result = await verify(store, watch, "digest-1", max_attempts=2, due_in=7_000)

    pending = result.watch
    assert result.outcome == "pending" and pending is not None
    assert pending.verification_status == "pending_verification"
    assert pending.verification_attempts == 1
    assert pending.next_attempt_at == clock.now + 7_000
    assert pending.observed_winner_digest == "digest-1"
    assert pending.verified_state_digest is None
    assert pending.claimed_until is None
    assert await reread_watch(store, watch) == pending


async def test_record_verification__absent_digest_is_a_mismatch(store):
    watch = await pending_watch(store)

    result = await verify(store, watch, None)

    assert result.outcome == "pending"


async def test_record_verification__at_max_attempts_repair_failed_observes_current_winner(
    store, clock
):
    watch = await pending_watch(store, "digest-1")
    first = await verify(store, watch, "digest-x", max_attempts=2)
    assert first.outcome == "pending"
    await store.winners.record_winner("doc-1", "digest-2")
    clock.advance(1_000)

    result = await verify(store, first.watch, "digest-x", max_attempts=2)

    failed = result.watch
    assert result.outcome == "repair_failed" and failed is not None
    assert failed.verification_status == "repair_failed"
    assert failed.verification_attempts == 2
    assert failed.observed_winner_digest == "digest-2"
    assert failed.verified_state_digest is None
    assert failed.next_attempt_at is None
    assert await reread_watch(store, watch) == failed


async def test_record_verification__no_watch_stale_generation_null_watch(store):
    result = await store.watches.record_verification(
        ABSENT, generation=1, fetched_digest="d", max_attempts=3, due_at=0
    )

    assert result.outcome == "stale-generation" and result.watch is None


@pytest.mark.parametrize("max_attempts", [0, -1])
async def test_record_verification__max_attempts_below_one_refused(store, clock, max_attempts):
    watch = await pending_watch(store)
    clock.advance(1_000)

    with pytest.raises(InvalidInput) as refused:
        await verify(store, watch, "digest-1", max_attempts=max_attempts)

    assert refused.value.field == "maxAttempts"
    await assert_unchanged(store, watch)


async def test_record_verification__retries_exhausted_raise_and_write_nothing(database, clock):
    calls: list[str | None] = []
    store = ConnectorStore(database, clock=clock, read_winner=moving_document(database, calls, 99))
    await store.winners.record_winner("doc-1", "digest-1")
    await committed_operation(store)
    [watch] = await store.watches.list_watches_by_documents(["doc-1"])
    calls.clear()
    clock.advance(1_000)

    with pytest.raises(CasRetriesExhausted):
        await verify(store, watch, "digest-1")

    assert len(calls) == CAS_ATTEMPTS
    await assert_unchanged(store, watch)


# --- claim_watch_attempt / defer_watch -------------------------------------------------------


async def test_claim_watch_attempt__due_and_unclaimed_applies(store, clock):
    watch = await pending_watch(store)
    clock.now = watch.next_attempt_at

    claimed = await store.watches.claim_watch_attempt(
        watch.identity, 1, clock.now + LEASE_MS, clock.now
    )

    assert claimed is not None
    assert claimed.claimed_until == clock.now + LEASE_MS
    assert claimed.version == watch.version + 1 and claimed.updated_at == clock.now
    assert await reread_watch(store, watch) == claimed


async def test_claim_watch_attempt__lapsed_claim_applies(store, clock):
    watch = await claimed_watch(store, clock)
    clock.now = watch.claimed_until

    claimed = await store.watches.claim_watch_attempt(
        watch.identity, 1, clock.now + LEASE_MS, clock.now
    )

    assert claimed is not None and claimed.claimed_until == clock.now + LEASE_MS


async def test_claim_watch_attempt__takeover_of_lapsed_claim_counts_the_abandoned_attempt(
    store, clock
):
    watch = await claimed_watch(store, clock)
    assert watch.verification_attempts == 0

    for lapsed in range(1, 6):
        clock.now = watch.claimed_until
        watch = await store.watches.claim_watch_attempt(
            watch.identity, 1, clock.now + LEASE_MS, clock.now
        )
        assert watch is not None and watch.verification_attempts == lapsed

    assert (await reread_watch(store, watch)).verification_attempts == 5


async def test_claim_watch_attempt__first_claim_and_claim_after_defer_count_nothing(store, clock):
    watch = await claimed_watch(store, clock)
    deferred = await store.watches.defer_watch(
        watch.identity, 1, watch.claimed_until, clock.now, None
    )
    assert deferred is not None

    claimed = await store.watches.claim_watch_attempt(
        watch.identity, 1, clock.now + LEASE_MS, clock.now
    )

    assert claimed is not None and claimed.verification_attempts == 0


async def test_record_verification__attempts_counted_by_takeovers_reach_max_attempts(store, clock):
    watch = await claimed_watch(store, clock)
    for _ in range(4):
        clock.now = watch.claimed_until
        watch = await store.watches.claim_watch_attempt(
            watch.identity, 1, clock.now + LEASE_MS, clock.now
        )
        assert watch is not None

    result = await store.watches.record_verification(
        watch.identity,
        generation=1,
        fetched_digest="not-the-winner",
        max_attempts=5,
        due_at=clock.now,
        claimed_until=watch.claimed_until,
    )

    assert result.outcome == "repair_failed"
    assert result.watch is not None and result.watch.verification_attempts == 5


async def test_claim_watch_attempt__now_ahead_of_store_clock_cannot_take_over_live_claim(
    store, clock
):
    watch = await claimed_watch(store, clock)
    clock.now = watch.claimed_until - 1

    assert (
        await store.watches.claim_watch_attempt(
            watch.identity, 1, watch.claimed_until + LEASE_MS, watch.claimed_until
        )
        is None
    )

    clock.advance(1_000)
    await assert_unchanged(store, watch)


async def test_claim_watch_attempt__now_ahead_of_store_clock_cannot_claim_before_due(store, clock):
    watch = await pending_watch(store)
    clock.now = watch.next_attempt_at - 1

    assert (
        await store.watches.claim_watch_attempt(
            watch.identity, 1, watch.next_attempt_at + LEASE_MS, watch.next_attempt_at
        )
        is None
    )

    clock.advance(1_000)
    await assert_unchanged(store, watch)


async def test_claim_watch_attempt__not_due_refused(store, clock):
    watch = await pending_watch(store)
    clock.now = watch.next_attempt_at - 1

    assert (
        await store.watches.claim_watch_attempt(watch.identity, 1, clock.now + LEASE_MS, clock.now)
        is None
    )

    clock.advance(1_000)
    await assert_unchanged(store, watch)


async def test_claim_watch_attempt__claimed_refused(store, clock):
    watch = await claimed_watch(store, clock)
    clock.now = watch.claimed_until - 1

    assert (
        await store.watches.claim_watch_attempt(watch.identity, 1, clock.now + LEASE_MS, clock.now)
        is None
    )

    clock.advance(1_000)
    await assert_unchanged(store, watch)


async def test_claim_watch_attempt__wrong_generation_refused(store, clock):
    watch = await pending_watch(store)
    clock.now = watch.next_attempt_at

    assert (
        await store.watches.claim_watch_attempt(watch.identity, 2, clock.now + LEASE_MS, clock.now)
        is None
    )

    clock.advance(1_000)
    await assert_unchanged(store, watch)


async def set_columns(store, record, **values):
    """Write watch columns directly, to reach states no method produces (a verified watch
    that is due and claimed), so only the status guard can refuse."""
    row = await store.db.fetch_one(
        sa.update(watch_table)
        .where(watch_table.c.source_id == record.source_id)
        .values(values)
        .returning(watch_table)
    )
    assert row is not None
    return await reread_watch(store, record)


@pytest.mark.parametrize("status", ["verified", "repair_failed"])
async def test_claim_watch_attempt__not_pending_refused(store, clock, status):
    factory = verified_watch if status == "verified" else repair_failed_watch
    watch = await set_columns(store, await factory(store), next_attempt_at=clock.now)

    assert (
        await store.watches.claim_watch_attempt(watch.identity, 1, clock.now + LEASE_MS, clock.now)
        is None
    )

    clock.advance(1_000)
    await assert_unchanged(store, watch)


async def test_claim_watch_attempt__absent_refused(store, clock):
    assert (
        await store.watches.claim_watch_attempt(ABSENT, 1, clock.now + LEASE_MS, clock.now) is None
    )


async def test_defer_watch__same_claim_applies(store, clock):
    watch = await claimed_watch(store, clock)
    clock.advance(1_000)

    deferred = await store.watches.defer_watch(
        watch.identity, 1, watch.claimed_until, clock.now + 9_000, "offline"
    )

    assert deferred is not None
    assert deferred.next_attempt_at == clock.now + 9_000
    assert deferred.defer_reason == "offline"
    assert deferred.claimed_until is None
    assert deferred.version == watch.version + 1 and deferred.updated_at == clock.now
    assert await reread_watch(store, watch) == deferred


@pytest.mark.parametrize("case", ["other_claim", "wrong_generation", "not_pending", "unclaimed"])
async def test_defer_watch__refused(store, clock, case):
    watch = await claimed_watch(store, clock)
    claimed_until, generation = watch.claimed_until, 1
    if case == "other_claim":
        claimed_until += 1
    elif case == "wrong_generation":
        generation = 2
    elif case == "not_pending":
        result = await verify(store, watch, "digest-1")
        watch = await set_columns(store, result.watch, claimed_until=claimed_until)
    else:
        deferred = await store.watches.defer_watch(watch.identity, 1, claimed_until, clock.now)
        assert deferred is not None
        watch = deferred
    clock.advance(1_000)

    refused = await store.watches.defer_watch(
        watch.identity, generation, claimed_until, clock.now + 9_000, "auth"
    )

    assert refused is None
    await assert_unchanged(store, watch)


async def test_defer_watch__bad_reason_names_the_field(store, clock):
    watch = await claimed_watch(store, clock)
    with pytest.raises(InvalidInput) as refused:
        await store.watches.defer_watch(watch.identity, 1, watch.claimed_until, 0, "later")
    assert refused.value.field == "reason"


# --- resume ----------------------------------------------------------------------------------


async def deferred_watch(store, clock, reason, **overrides):
    watch = await claimed_watch(store, clock, **overrides)
    deferred = await store.watches.defer_watch(
        watch.identity, 1, watch.claimed_until, clock.now + 3_600_000, reason
    )
    assert deferred is not None
    return deferred


async def deferred_operation(store, clock, reason, **overrides):
    record = await claimed_operation(store, **overrides)
    deferred = await store.operations.defer_operation(
        record.caller_did,
        record.operation_id,
        clock.now + 3_600_000,
        reason=reason,
        lease_token="lease-A",
    )
    assert deferred is not None
    return deferred


def entity(n, owner="did:key:owner", connector="calendar"):
    return {
        "operation_id": f"op-{n}",
        "source_id": f"evt-{n}",
        "document_id": f"doc-{n}",
        "owner_did": owner,
        "connector_name": connector,
    }


async def test_resume_offline_deferred__only_offline_rows(store, clock):
    offline_watch = await deferred_watch(store, clock, "offline", **entity(1))
    auth_watch = await deferred_watch(store, clock, "auth", **entity(2))
    offline_op = await deferred_operation(store, clock, "offline", **entity(3))
    auth_op = await deferred_operation(store, clock, "auth", **entity(4))
    plain_op = await deferred_operation(store, clock, None, **entity(5))
    settled = await set_columns(
        store, await verified_watch(store, **entity(6)), defer_reason="offline"
    )
    clock.advance(1_000)

    resumed = await store.watches.resume_offline_deferred(clock.now)

    assert (resumed.operations, resumed.watches) == (1, 1)
    watch = await reread_watch(store, offline_watch)
    assert watch.next_attempt_at == clock.now and watch.defer_reason is None
    assert watch.version == offline_watch.version + 1 and watch.updated_at == clock.now
    operation = await store.operations.get_operation(offline_op.caller_did, "op-3")
    assert operation.next_attempt_at == clock.now and operation.defer_reason is None
    for untouched_watch in (auth_watch, settled):
        assert await reread_watch(store, untouched_watch) == untouched_watch
    for untouched in (auth_op, plain_op):
        assert (
            await store.operations.get_operation(untouched.caller_did, untouched.operation_id)
            == untouched
        )


async def test_resume_offline_deferred__terminal_operation_untouched(store, clock):
    record = await deferred_operation(store, clock, "offline")
    finalized = await store.operations.finalize_operation_and_arm_watch(
        Finalize(
            record.caller_did,
            record.operation_id,
            version=record.version,
            lease_token="lease-A",
            due_at=clock.now,
        )
    )
    assert finalized is not None
    # finalize clears the defer reason: write one back to prove the state guard holds
    await store.db.fetch_all(
        sa.text(
            "UPDATE kubun_connector_operation SET defer_reason = 'offline' RETURNING operation_id"
        )
    )
    before = await store.operations.get_operation(record.caller_did, record.operation_id)
    clock.advance(1_000)

    resumed = await store.watches.resume_offline_deferred(clock.now)

    assert resumed.operations == 0
    assert await store.operations.get_operation(record.caller_did, record.operation_id) == before


async def test_resume_auth_deferred__only_that_owner_and_connectors(store, clock):
    mine = await deferred_watch(store, clock, "auth", **entity(1))
    other_owner = await deferred_watch(store, clock, "auth", **entity(2, owner="did:key:other"))
    other_connector = await deferred_watch(store, clock, "auth", **entity(3, connector="crm"))
    drive = await deferred_watch(store, clock, "auth", **entity(4, connector="drive"))
    offline = await deferred_watch(store, clock, "offline", **entity(5))
    my_op = await deferred_operation(store, clock, "auth", **entity(6))
    other_op = await deferred_operation(store, clock, "auth", **entity(7, owner="did:key:other"))
    crm_op = await deferred_operation(store, clock, "auth", **entity(8, connector="crm"))
    clock.advance(1_000)

    resumed = await store.watches.resume_auth_deferred(
        "did:key:owner", ["calendar", "drive"], clock.now
    )

    assert (resumed.operations, resumed.watches) == (1, 2)
    for watch in (mine, drive):
        now = await reread_watch(store, watch)
        assert now.next_attempt_at == clock.now and now.defer_reason is None
    for untouched in (other_owner, other_connector, offline):
        assert await reread_watch(store, untouched) == untouched
    assert (await store.operations.get_operation(my_op.caller_did, "op-6")).defer_reason is None
    for untouched in (other_op, crm_op):
        assert (
            await store.operations.get_operation(untouched.caller_did, untouched.operation_id)
            == untouched
        )


async def test_resume_auth_deferred__no_connectors_resumes_nothing(store, clock):
    watch = await deferred_watch(store, clock, "auth")

    resumed = await store.watches.resume_auth_deferred("did:key:owner", [], clock.now)

    assert (resumed.operations, resumed.watches) == (0, 0)
    assert await reread_watch(store, watch) == watch


# --- record_ingress ----------------------------------------------------------------------------


async def test_record_ingress__records_winner_and_arms_every_watch(store, clock):
    first = await verified_watch(store, "digest-1", **entity(1))
    second = await verified_watch(
        store, "digest-1", **entity(2, connector="crm") | {"document_id": "doc-1"}
    )
    clock.advance(1_000)

    results = await store.watches.record_ingress("doc-1", "digest-2", clock.now + 5_000)

    assert [result.outcome for result in results] == ["opened", "opened"]
    assert [result.watch.identity for result in results] == sorted(
        [first.identity, second.identity], key=lambda i: (i.connector_name,)
    )
    assert await store.winners.read_winner("doc-1") == "digest-2"
    for result in results:
        assert result.watch.observed_winner_digest == "digest-2"
        assert result.watch.next_attempt_at == clock.now + 5_000
        assert await reread_watch(store, result.watch) == result.watch


async def test_record_ingress__retries_exhausted_write_nothing_not_even_the_winner(database, clock):
    calls: list[str | None] = []

    async def bumping_read_winner(document_id):
        calls.append(document_id)
        await database.fetch_all(
            sa.update(watch_table)
            .values(version=watch_table.c.version + 1)
            .returning(watch_table.c.version)
        )
        return await store.winners.read_winner(document_id)

    store = ConnectorStore(database, clock=clock, read_winner=bumping_read_winner)
    await store.winners.record_winner("doc-1", "digest-1")
    await committed_operation(store)
    [watch] = await store.watches.list_watches_by_documents(["doc-1"])
    calls.clear()
    clock.advance(1_000)

    with pytest.raises(CasRetriesExhausted) as refused:
        await store.watches.record_ingress("doc-1", "digest-2")

    assert refused.value.method == "recordIngress" and len(calls) == CAS_ATTEMPTS
    await assert_unchanged(store, watch)
    assert await store.winners.read_winner("doc-1") == "digest-1"


async def test_record_ingress__no_watch_still_records_winner(store):
    assert await store.watches.record_ingress("doc-9", "digest-9") == []
    assert await store.winners.read_winner("doc-9") == "digest-9"


async def test_record_ingress__same_winner_again_noop(store, clock):
    watch = await verified_watch(store, "digest-1")
    [opened] = await store.watches.record_ingress("doc-1", "digest-2")
    clock.advance(1_000)

    [again] = await store.watches.record_ingress("doc-1", "digest-2")

    assert again.outcome == "noop" and again.watch == opened.watch
    assert opened.watch.repair_generation == watch.repair_generation + 1


async def test_record_ingress__default_due_is_now(store, clock):
    await verified_watch(store, "digest-1")
    clock.advance(1_000)

    [opened] = await store.watches.record_ingress("doc-1", "digest-2")

    assert opened.watch.next_attempt_at == clock.now


@pytest.mark.parametrize(
    ("arguments", "field"),
    [(("", "d"), "documentID"), (("doc", ""), "winnerDigest"), (("doc", "d", -5), "dueAt")],
)
async def test_record_ingress__bad_input_names_the_field(store, arguments, field):
    with pytest.raises(InvalidInput) as refused:
        await store.watches.record_ingress(*arguments)
    assert refused.value.field == field
    assert await store.winners.read_winner(arguments[0] or "x") is None


# --- reads -------------------------------------------------------------------------------------


async def test_get_watch_by_document__found_and_absent(store):
    watch = await pending_watch(store)

    assert await store.watches.get_watch_by_document("doc-1") == watch
    assert await store.watches.get_watch_by_document("doc-none") is None


async def test_list_watches_by_documents__chunks_past_500(store):
    watches = [await pending_watch(store, None, **entity(n)) for n in range(3)]
    ids = [f"doc-x{n}" for n in range(1200)] + ["doc-2", "doc-0", "doc-0"]

    found = await store.watches.list_watches_by_documents(ids)

    assert found == [watches[0], watches[2]]
    assert await store.watches.list_watches_by_documents([]) == []


async def test_list_due_watches__due_unclaimed_or_lapsed_in_order(store, clock):
    start = clock.now
    late = await pending_watch(store, None, **entity(1))
    clock.advance(-10_000)
    early = await pending_watch(store, None, **entity(2))
    clock.now = start
    claimed = await claimed_watch(store, clock, claim_ms=10**9, **entity(3))
    lapsed = await claimed_watch(store, clock, claim_ms=10, **entity(4))
    await verified_watch(store, **entity(5))
    await pending_watch(store, None, **entity(6, connector="crm"))
    now = clock.now + 100

    due = await store.watches.list_due_watches(now, 100, "calendar")

    assert [w.source_id for w in due] == [early.source_id, late.source_id, lapsed.source_id]
    assert claimed.source_id not in [w.source_id for w in due]
    assert len(await store.watches.list_due_watches(now)) == 3
    assert len(await store.watches.list_due_watches(now, 1)) == 1
    assert await store.watches.list_due_watches(start) == []


@pytest.mark.parametrize(
    ("arguments", "field"), [((-1,), "now"), ((0, 0), "limit"), ((0, 501), "limit")]
)
async def test_list_due_watches__bad_input_names_the_field(store, arguments, field):
    with pytest.raises(InvalidInput) as refused:
        await store.watches.list_due_watches(*arguments)
    assert refused.value.field == field


async def test_list_watches_matching__filters_and_pages(store, clock):
    a = await pending_watch(store, None, **entity(1))
    b = await verified_watch(store, **entity(2))
    c = await pending_watch(store, None, **entity(3, owner="did:key:zed", connector="crm"))
    watches = store.watches

    assert await watches.list_watches_matching(WatchFilter()) == [a, b, c]
    assert await watches.list_watches_matching(WatchFilter(owner_did="did:key:zed")) == [c]
    assert await watches.list_watches_matching(WatchFilter(connector_name="calendar")) == [a, b]
    assert await watches.list_watches_matching(WatchFilter(model="Other")) == []
    assert await watches.list_watches_matching(WatchFilter(status="verified")) == [b]
    assert await watches.list_watches_matching(WatchFilter(document_ids=["doc-3", "doc-1"])) == [
        a,
        c,
    ]
    assert await watches.list_watches_matching(WatchFilter(document_ids=[])) == []
    assert await watches.list_watches_matching(WatchFilter(due_before=a.next_attempt_at + 1)) == [
        a,
        c,
    ]
    assert await watches.list_watches_matching(WatchFilter(due_before=a.next_attempt_at)) == []
    first = await watches.list_watches_matching(WatchFilter(), limit=2)
    assert first == [a, b]
    assert await watches.list_watches_matching(WatchFilter(), after=b.order_key) == [c]
    many = [f"doc-x{n}" for n in range(700)] + ["doc-2", "doc-1"]
    assert await watches.list_watches_matching(WatchFilter(document_ids=many), limit=1) == [a]
    with pytest.raises(InvalidInput) as refused:
        await watches.list_watches_matching(WatchFilter(status="lost"))
    assert refused.value.field == "status"
