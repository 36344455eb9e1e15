"""The event log (docs/architecture.md, 'The event log'), on both backends: one event per applied
write of an operation or a watch, in order, with its actor, and none for a refused one; the error
message kept on the event and the row; per-row pages; the log read in commit-safe order."""

import asyncio
from dataclasses import replace

import pytest
import sqlalchemy as sa

from store.context import acting_as
from store.errors import EventsCollected, InvalidInput
from store.events import (
    EVENT_CLOCK_POSTGRESQL,
    MAX_ERROR_BYTES,
    OperationEventFilter,
    WatchEventFilter,
    position,
    sequence_of,
)
from store.operations import Finalize, SendMark
from store.operations import OperationFilter as Filter
from store.operator import MARKED_NOTE
from store.records import OperationKey
from store.tables import event_collected, operation_event, watch_event
from store.watches import Verification, WatchFilter
from tests.factories import (
    LEASE_MS,
    VERIFY_DUE_MS,
    aged_events,
    claim,
    claimed_operation,
    claimed_watch,
    committed_operation,
    marked_operation,
    pending_watch,
    repair_failed_watch,
    transition,
)

ACTOR = "did:key:worker"
LOG_WAIT_S = 30.0
"""How long a test waits for the log's safe horizon to pass its own committed writes: on
PostgreSQL a transaction open anywhere on the cluster (another test run's) holds it back."""


async def released(store, operation_id, source_id):
    record = await claimed_operation(store, operation_id=operation_id, source_id=source_id)
    await store.operations.release_lease(record.caller_did, record.operation_id, "lease-A")
    return record


def key_of(record):
    return OperationKey(caller_did=record.caller_did, operation_id=record.operation_id)


async def actions(store, record):
    return [event.action for event in await store.events.operation_events(key_of(record))]


async def watch_actions(store, record):
    return [event.action for event in await store.events.watch_events(record.identity)]


async def event_count(store):
    counted = await store.db.fetch_one(sa.select(sa.func.count()).select_from(operation_event))
    watches = await store.db.fetch_one(sa.select(sa.func.count()).select_from(watch_event))
    return counted[0] + watches[0]


async def database_clock(store):
    """What an event written now would carry as ``at``: PostgreSQL's statement clock, or the
    store's (a test's ``FrozenClock``) on SQLite."""
    if not store.db.is_postgres:
        return store.clock()
    row = await store.db.fetch_one(sa.select(sa.literal_column(EVENT_CLOCK_POSTGRESQL)))
    return row[0]


async def log_after(store, after, expected, **filters):
    """The operations log after ``after`` once it holds ``expected`` events (bounded wait
    for the safe horizon, never a timed assertion)."""
    for _ in range(int(LOG_WAIT_S / 0.05)):
        found = await store.events.operation_events_after(
            after, 500, OperationEventFilter(**filters)
        )
        if len(found) >= expected:
            return found
        await asyncio.sleep(0.05)
    return found


# --- one event per applied write, in order, with its actor -----------------------------------


async def test_operation_lifecycle__one_event_per_write_in_order(store, clock):
    before = await database_clock(store)
    with acting_as(ACTOR):
        record = await claimed_operation(store)
        clock.advance(1)
        await store.operations.renew_lease(
            record.caller_did, record.operation_id, "lease-A", clock.now + LEASE_MS
        )
        marked = await store.operations.mark_send_started(
            record.caller_did, record.operation_id, "lease-A", "run-1"
        )
        assert marked is not None
        clock.advance(1)
        done = await store.operations.finalize_operation_and_arm_watch(
            Finalize(
                record.caller_did,
                record.operation_id,
                version=0,
                lease_token="lease-A",
                due_at=clock.now + VERIFY_DUE_MS,
            )
        )
        assert done is not None

    events = await store.events.operation_events(key_of(record))
    assert [event.action for event in events] == ["claimed", "send_marked", "finalized"]
    assert [event.from_state for event in events] == [None, "attempted", "attempted"]
    assert [event.to_state for event in events] == ["attempted", "attempted", "committed"]
    assert [event.attempts for event in events] == [0, 0, 1]
    times = [event.at for event in events]
    if store.db.is_postgres:
        assert before <= times[0] <= times[1] <= times[2] <= await database_clock(store)
    else:
        assert times == [record.created_at, clock.now - 1, clock.now]
    assert {event.actor_did for event in events} == {ACTOR}
    assert [e.sequence for e in events] == sorted(e.sequence for e in events)
    watch_events = await store.events.watch_events(done.watch.identity)
    assert [(e.action, e.generation, e.from_status, e.to_status) for e in watch_events] == [
        ("opened", 1, None, "pending_verification")
    ]
    assert watch_events[0].actor_did == ACTOR


async def test_event_at__a_write_late_in_a_long_transaction_is_later_than_its_start(store, clock):
    """The store's time read as a transaction starts (what a method that reads "now" once
    carries), a pause, then a write: the event's ``at`` is when the write was applied,
    past the pause, not the transaction's start. PostgreSQL's clock; SQLite stamps with
    the store's (``test_event_at__never_before_an_event_already_in_the_log``)."""
    if not store.db.is_postgres:
        pytest.skip("SQLite stamps events with the store's clock")
    record = await claimed_operation(store)
    start = sa.literal_column("floor(extract(epoch FROM now()) * 1000)::bigint")
    async with store.db.write_transaction():
        started = (await store.db.fetch_one(sa.select(start)))[0]
        clock.now = started
        await store.db.fetch_one(sa.select(sa.func.pg_sleep(0.2)))
        await store.operations.release_lease(record.caller_did, record.operation_id, "lease-A")
        assert (await store.db.fetch_one(sa.select(start)))[0] == started

    claimed, released = await store.events.operation_events(key_of(record))
    assert released.action == "released"
    assert released.at >= started + 200 > claimed.at


async def test_event_at__never_before_an_event_already_in_the_log(store, clock):
    """A write whose time was read before another write took effect (it waited for the
    write lock meanwhile) is stamped no earlier than that write's event, in each log: a
    timeline rebuilt from the log in its order never runs backwards."""
    one = await claimed_operation(store)
    two = await claimed_operation(store, operation_id="op-2", source_id="evt-2")
    early = clock.now
    clock.advance(1000)
    await store.operations.release_lease(one.caller_did, one.operation_id, "lease-A")
    await pending_watch(store, operation_id="op-3", source_id="evt-3")
    clock.now = early + 500
    await store.operations.release_lease(two.caller_did, two.operation_id, "lease-A")
    await pending_watch(store, operation_id="op-4", source_id="evt-4")

    operations = await log_after(store, None, 10)
    watches = await store.events.watch_events_after(None, 500)
    assert len(operations) == 10 and len(watches) == 2
    for events in (operations, watches):
        times = [event.at for event in events]
        assert times == sorted(times)


async def test_operation_events__system_writes_have_no_actor(store):
    record = await claimed_operation(store)

    (event,) = await store.events.operation_events(key_of(record))
    assert event.actor_did is None


async def test_acquire_lease__free_lease_leased_lapsed_one_taken_over(store, clock):
    record = await claimed_operation(store)
    await store.operations.release_lease(record.caller_did, record.operation_id, "lease-A")
    leased = await store.operations.acquire_lease(
        record.caller_did, record.operation_id, "lease-B", clock.now + LEASE_MS
    )
    assert leased is not None
    clock.advance(LEASE_MS + 1)
    taken = await store.operations.acquire_lease(
        record.caller_did, record.operation_id, "lease-C", clock.now + LEASE_MS
    )
    assert taken is not None
    again = await store.operations.acquire_lease(
        record.caller_did, record.operation_id, "lease-C", clock.now + LEASE_MS
    )
    assert again is not None

    assert await actions(store, record) == [
        "claimed",
        "released",
        "leased",
        "taken_over",
        "leased",
    ]


async def test_defer_and_record__message_kept_on_event_and_row(store, clock):
    record = await claimed_operation(store)
    deferred = await store.operations.defer_operation(
        record.caller_did,
        record.operation_id,
        clock.now + 5_000,
        "offline",
        "lease-A",
        error_message="provider down",
    )
    assert deferred is not None and deferred.last_error == "provider down"
    failed = await store.operations.record_operation(
        transition(
            deferred,
            to_state="failed",
            kind="permanent",
            http_status=422,
            error_message="title too long ✂",
        )
    )
    assert failed is not None and failed.last_error == "title too long ✂"

    _, defer, recorded = await store.events.operation_events(key_of(record))
    assert (defer.action, defer.message, defer.kind) == ("deferred", "provider down", None)
    assert (recorded.action, recorded.from_state, recorded.to_state) == (
        "recorded",
        "attempted",
        "failed",
    )
    assert (recorded.kind, recorded.http_status, recorded.message, recorded.attempts) == (
        "permanent",
        422,
        "title too long ✂",
        1,
    )


async def test_record_operation__no_message_clears_last_error(store, clock):
    record = await claimed_operation(store)
    first = await store.operations.record_operation(
        transition(record, kind="transient", error_message="timeout")
    )
    assert first is not None and first.last_error == "timeout"

    second = await store.operations.record_operation(transition(first))

    assert second is not None and second.last_error is None


@pytest.mark.parametrize("size", [MAX_ERROR_BYTES, MAX_ERROR_BYTES + 1])
async def test_error_message__at_most_2048_bytes_of_utf8(store, clock, size):
    record = await claimed_operation(store)
    message = "é" * (size // 2) + "x" * (size % 2)
    assert len(message.encode()) == size
    before = await event_count(store)

    if size > MAX_ERROR_BYTES:
        with pytest.raises(InvalidInput) as refused:
            await store.operations.record_operation(transition(record, error_message=message))
        assert refused.value.field == "errorMessage"
        with pytest.raises(InvalidInput) as deferred:
            await store.operations.defer_operation(
                record.caller_did, record.operation_id, clock.now, error_message=message
            )
        assert deferred.value.field == "errorMessage"
        assert await event_count(store) == before
        assert await store.operations.get_operation(record.caller_did, record.operation_id) == (
            record
        )
    else:
        recorded = await store.operations.record_operation(
            transition(record, error_message=message)
        )
        assert recorded is not None and recorded.last_error == message


async def test_refused_writes__append_nothing(store, clock):
    record = await marked_operation(store)
    before = await event_count(store)
    clock.advance(1)

    assert (
        await store.operations.acquire_lease(
            record.caller_did, record.operation_id, "lease-B", clock.now + LEASE_MS
        )
        is None
    )
    assert await store.operations.release_lease(record.caller_did, record.operation_id, "x") is None
    assert (
        await store.operations.mark_send_started(record.caller_did, record.operation_id, "x", "r")
        is None
    )
    assert (
        await store.operations.defer_operation(
            record.caller_did, record.operation_id, clock.now, lease_token="x"
        )
        is None
    )
    assert await store.operations.record_operation(transition(record, version=7)) is None
    assert (
        await store.operations.finalize_operation_and_arm_watch(
            Finalize(
                record.caller_did, record.operation_id, version=3, lease_token="lease-A", due_at=0
            )
        )
        is None
    )
    assert (await store.operations.claim_operation(claim())).status == "exists"
    assert (
        await store.batches.mark_sends_started(
            [SendMark(*key_of(record).__dict__.values(), "x", "r")]
        )
    ) == [None]

    assert await event_count(store) == before


async def test_renew_lease__a_heartbeat_is_no_event(store, clock):
    record = await claimed_operation(store)
    clock.advance(1)

    renewed = await store.operations.renew_lease(
        record.caller_did, record.operation_id, "lease-A", clock.now + LEASE_MS
    )

    assert renewed is not None
    assert await actions(store, record) == ["claimed"]


# --- batches -----------------------------------------------------------------------------


async def test_batches__one_event_per_applied_item(store, clock):
    with acting_as(ACTOR):
        results = await store.batches.claim_operations(
            [
                claim(
                    operation_id=f"op-{n}",
                    source_id=f"evt-{n}",
                    lease_expires_at=clock.now + LEASE_MS,
                )
                for n in range(3)
            ]
        )
        records = [result.operation for result in results]
        marks = await store.batches.mark_sends_started(
            [SendMark(r.caller_did, r.operation_id, "lease-A", "run-1") for r in records[:2]]
            + [SendMark(records[2].caller_did, records[2].operation_id, "wrong", "run-1")]
        )
        assert marks[2] is None
        recorded = await store.batches.record_operations(
            [
                transition(marks[0], to_state="failed", error_message="nope", kind="permanent"),
                transition(records[2], version=9),
            ]
        )
        assert recorded[1] is None
        finals = await store.batches.finalize_operations(
            [
                Finalize(
                    marks[1].caller_did,
                    marks[1].operation_id,
                    version=0,
                    lease_token="lease-A",
                    due_at=clock.now + VERIFY_DUE_MS,
                )
            ]
        )
        assert finals[0] is not None

    assert await actions(store, records[0]) == ["claimed", "send_marked", "recorded"]
    assert await actions(store, records[1]) == ["claimed", "send_marked", "finalized"]
    assert await actions(store, records[2]) == ["claimed"]
    events = await store.events.operation_events(key_of(records[0]))
    assert events[-1].message == "nope" and events[-1].kind == "permanent"
    assert {event.actor_did for event in events} == {ACTOR}
    assert await watch_actions(store, finals[0].watch) == ["opened"]


async def test_record_verifications__logged_by_outcome_with_message(store, clock):
    first = await pending_watch(store)
    second = await pending_watch(
        store, operation_id="op-2", source_id="evt-2", document_id="doc-2", winner="digest-2"
    )

    results = await store.batches.record_verifications(
        [
            Verification(
                identity=first.identity,
                generation=1,
                fetched_digest="digest-1",
                max_attempts=3,
                due_at=clock.now,
            ),
            Verification(
                identity=second.identity,
                generation=1,
                fetched_digest="stale",
                max_attempts=3,
                due_at=clock.now,
                error_message="title differs",
            ),
        ]
    )

    assert [result.outcome for result in results] == ["verified", "pending"]
    assert await watch_actions(store, first) == ["opened", "verified"]
    events = await store.events.watch_events(second.identity)
    assert [(e.action, e.from_status, e.message) for e in events] == [
        ("opened", None, None),
        ("pending", "pending_verification", "title differs"),
    ]
    assert results[1].watch.last_error == "title differs"


# --- watches -----------------------------------------------------------------------------


async def test_watch_lifecycle__claim_defer_verify_arm(store, clock):
    watch = await claimed_watch(store, clock)
    deferred = await store.watches.defer_watch(
        watch.identity, 1, watch.claimed_until, clock.now + 1_000, "offline"
    )
    assert deferred is not None
    resumed = await store.watches.resume_offline_deferred(clock.now)
    assert resumed.watches == 1
    failed = await store.watches.record_verification(
        watch.identity,
        generation=1,
        fetched_digest="other",
        max_attempts=1,
        due_at=clock.now,
        error_message="mismatch",
    )
    assert failed.outcome == "repair_failed"
    armed = await store.watches.arm_watch(watch.identity, "manual", clock.now)
    assert armed.outcome == "opened"
    await store.winners.record_winner("doc-1", "digest-1")
    coalesced = await store.watches.record_ingress("doc-1", "digest-9")
    assert [result.outcome for result in coalesced] == ["coalesced"]

    events = await store.events.watch_events(watch.identity)
    assert [(e.action, e.generation, e.to_status) for e in events] == [
        ("opened", 1, "pending_verification"),
        ("claimed", 1, "pending_verification"),
        ("deferred", 1, "pending_verification"),
        ("resumed", 1, "pending_verification"),
        ("repair_failed", 1, "repair_failed"),
        ("opened", 2, "pending_verification"),
        ("coalesced", 2, "pending_verification"),
    ]
    assert events[4].message == "mismatch"
    assert events[5].from_status == "repair_failed"


async def test_refused_watch_writes__append_nothing(store, clock):
    watch = await pending_watch(store)
    before = await event_count(store)

    assert (
        await store.watches.claim_watch_attempt(watch.identity, 2, clock.now + LEASE_MS, clock.now)
        is None
    )
    assert await store.watches.defer_watch(watch.identity, 1, 12345, clock.now) is None
    stale = await store.watches.record_verification(
        watch.identity, generation=5, fetched_digest="x", max_attempts=1, due_at=clock.now
    )
    assert stale.outcome == "stale-generation"
    noop = await store.watches.arm_watch(watch.identity, "ingress", clock.now, "digest-1")
    assert noop.outcome == "noop"

    assert await event_count(store) == before


async def test_resume_auth_deferred__operations_resumed(store, clock):
    record = await claimed_operation(store)
    await store.operations.defer_operation(
        record.caller_did, record.operation_id, clock.now + 5_000, "auth", "lease-A"
    )

    resumed = await store.watches.resume_auth_deferred("did:key:owner", ["calendar"], clock.now)

    assert resumed.operations == 1
    events = await store.events.operation_events(key_of(record))
    assert [e.action for e in events] == ["claimed", "deferred", "resumed"]


# --- reading -----------------------------------------------------------------------------


async def test_operation_events__pages_oldest_first(store, clock):
    record = await claimed_operation(store)
    for n in range(4):
        clock.advance(1)
        await store.operations.mark_send_started(
            record.caller_did, record.operation_id, "lease-A", f"run-{n}"
        )
    every = await store.events.operation_events(key_of(record))

    first = await store.events.operation_events(key_of(record), limit=2)
    rest = await store.events.operation_events(key_of(record), after=first[-1].sequence)

    assert first + rest == every
    assert len(every) == 5


async def test_position__round_trips_and_refuses_foreign_text():
    assert position("after", sequence_of(2**40 + 3, 17)) == (2**40 + 3, 17)
    for bad in ["", "xyz", "0" * 31, "g" * 32]:
        with pytest.raises(InvalidInput) as refused:
            position("after", bad)
        assert refused.value.field == "after"


async def test_operation_events_after__resumes_and_filters(store, clock):
    one = await claimed_operation(store)
    two = await claimed_operation(
        store, operation_id="op-2", source_id="evt-2", owner_did="did:key:other"
    )
    await store.operations.release_lease(one.caller_did, one.operation_id, "lease-A")

    every = await log_after(store, None, 3)
    assert [(e.operation_id, e.action) for e in every] == [
        ("op-1", "claimed"),
        ("op-2", "claimed"),
        ("op-1", "released"),
    ]
    resumed = await log_after(store, every[0].sequence, 2)
    assert resumed == every[1:]
    owned = await log_after(store, None, 1, owner_did="did:key:other")
    assert [(e.operation_id, e.action) for e in owned] == [("op-2", "claimed")]
    assert (
        await store.events.operation_events_after(None, 10, OperationEventFilter(states=[])) == []
    )
    assert not await store.events.operation_events_collected(every[0].sequence)
    assert two.operation_id == "op-2"


async def test_watch_events_after__filters_by_status(store, clock):
    watch = await pending_watch(store)
    await store.watches.record_verification(
        watch.identity, generation=1, fetched_digest="digest-1", max_attempts=3, due_at=clock.now
    )

    verified = []
    for _ in range(int(LOG_WAIT_S / 0.05)):
        verified = await store.events.watch_events_after(
            None, 10, WatchEventFilter(statuses=["verified"])
        )
        if verified:
            break
        await asyncio.sleep(0.05)

    assert [(e.action, e.from_status) for e in verified] == [("verified", "pending_verification")]


DAY_MS = 24 * 3600 * 1000


def sequences(events):
    return [event.sequence for event in events]


async def lifecycles(store, count):
    """``count`` operations, each claimed then released: two events each, in log order."""
    for n in range(count):
        await released(store, f"op-{n}", f"evt-{n}")
    return await log_after(store, None, 2 * count)


async def test_collect_operation_events__a_prefix_by_age_stops_at_the_first_young_event(store):
    every = await lifecycles(store, 3)
    ids = [position("after", event.sequence)[1] for event in every]
    await aged_events(store.db, operation_event, ids[:2] + ids[3:])
    assert await store.events.count_collectable_operation_events(DAY_MS) == 2
    assert await store.events.count_collectable_operation_events(3 * DAY_MS) == 0

    assert await store.events.collect_operation_events(DAY_MS, 500) == 2
    assert await store.events.count_collectable_operation_events(DAY_MS) == 0
    assert await store.events.collect_operation_events(DAY_MS, 500) == 0
    assert sequences(await log_after(store, None, 4)) == sequences(every[2:])


async def test_collect_operation_events__after_below_what_was_collected_is_events_collected(
    store,
):
    every = await lifecycles(store, 3)
    await aged_events(
        store.db, operation_event, [position("after", e.sequence)[1] for e in every[:3]]
    )
    assert await store.events.collect_operation_events(DAY_MS, 2) == 2
    assert await store.events.collect_operation_events(DAY_MS, 2) == 1
    first_kept = every[3]

    for gone in every[:2]:
        assert await store.events.operation_events_collected(gone.sequence)
        with pytest.raises(EventsCollected):
            await store.events.operation_events_after(gone.sequence, 500)
    # The last event collected: a reader that saw it missed nothing.
    for seen in (every[2], first_kept, every[4]):
        assert not await store.events.operation_events_collected(seen.sequence)
        start = every.index(seen) + 1
        read = await store.events.operation_events_after(seen.sequence, 500)
        assert sequences(read) == sequences(every[start:])


async def test_collect_finished_operations__leaves_its_events_readable_by_after(store, clock):
    done = await committed_operation(store)
    kept = await claimed_operation(store, operation_id="op-2", source_id="evt-2")
    every = await log_after(store, None, 4)
    clock.advance(1)

    collected = await store.retention.collect_finished_operations(
        clock.now, failed_older_than=clock.now
    )

    assert collected == 1
    assert await store.operations.get_operation(done.caller_did, done.operation_id) is None
    assert [e.action for e in every if e.operation_id == done.operation_id] == await actions(
        store, done
    )
    assert await actions(store, kept) == ["claimed"]
    assert await store.events.operation_events_after(every[0].sequence, 500) == every[1:]
    assert not await store.events.operation_events_collected(every[0].sequence)


FILTERS = [
    {"connector_name": "crm"},
    {"account_key": "acct-crm"},
    {"owner_did": "did:key:crm-owner"},
    {"caller_did": "did:key:crm-caller"},
    {"visible_to": "did:key:crm-owner"},
    {"visible_to": "did:key:crm-caller"},
    {"connector_name": "crm", "states": ["committed"]},
]


@pytest.mark.parametrize("filters", FILTERS, ids=lambda f: "+".join(f))
async def test_operation_events_after__a_filter_matches_a_collected_operations_events(
    store, clock, filters
):
    """A (crm) finishes, C (crm) is claimed after, B (calendar) between: once A is collected,
    a filtered read from before A's events gets A's events, in order, then C's, as it did
    while A was kept; B's never."""
    start = await store.events.operation_events_head()
    crm = {
        "connector_name": "crm",
        "account_key": "acct-crm",
        "owner_did": "did:key:crm-owner",
        "caller_did": "did:key:crm-caller",
    }
    a = await committed_operation(store, operation_id="op-a", source_id="evt-a", **crm)
    await claimed_operation(store, operation_id="op-b", source_id="evt-b")
    await committed_operation(store, operation_id="op-c", source_id="evt-c", **crm)
    every = await log_after(store, start, 7)
    wanted = [
        e
        for e in every
        if e.operation_id != "op-b" and e.to_state in filters.get("states", [e.to_state])
    ]
    assert await log_after(store, start, len(wanted), **filters) == wanted
    clock.advance(1)

    assert (
        await store.retention.collect_finished_operations(clock.now, failed_older_than=clock.now)
        == 2
    )
    assert await store.operations.get_operation(a.caller_did, a.operation_id) is None

    assert await log_after(store, start, len(wanted), **filters) == wanted
    assert wanted[0].operation_id == "op-a"


async def test_operation_events_after__a_tenant_reads_its_collected_operation_not_anothers(
    store, clock
):
    """Collected, a tenant's operation's events still reach its caller and its owner, and
    another tenant's still reach neither."""
    start = await store.events.operation_events_head()
    mine = await committed_operation(
        store, operation_id="op-mine", caller_did="did:key:a", owner_did="did:key:a-owner"
    )
    await committed_operation(
        store,
        operation_id="op-theirs",
        source_id="evt-theirs",
        caller_did="did:key:b",
        owner_did="did:key:b",
    )
    every = await log_after(store, start, 6)
    clock.advance(1)
    assert (
        await store.retention.collect_finished_operations(clock.now, failed_older_than=clock.now)
        == 2
    )

    own = [e for e in every if e.operation_id == mine.operation_id]
    for viewer in ("did:key:a", "did:key:a-owner"):
        assert await log_after(store, start, len(own), visible_to=viewer) == own
    assert await log_after(store, start, 0, visible_to="did:key:c") == []


async def test_operation_events_after__kind_matches_the_events_own_outcome(store, clock):
    """``kind`` matches the outcome an event recorded, not the operation's last one: a
    retry's transient event keeps matching after the operation fails permanently."""
    start = await store.events.operation_events_head()
    record = await claimed_operation(store)
    retried = await store.operations.record_operation(
        transition(record, kind="transient", error_message="timeout")
    )
    assert retried is not None
    failed = await store.operations.record_operation(
        transition(retried, to_state="failed", kind="permanent", error_message="gone")
    )
    assert failed is not None

    transient = await log_after(store, start, 1, kind="transient")
    permanent = await log_after(store, start, 1, kind="permanent")

    assert [(e.action, e.to_state, e.kind) for e in transient + permanent] == [
        ("recorded", "attempted", "transient"),
        ("recorded", "failed", "permanent"),
    ]


async def test_collect_events__newest_collected_the_head_stays_where_it_was(store):
    """Collecting every event leaves the log empty, and its head, the newest sequence ever
    handed out, where it was: a reader that saw the newest event resumes there; before
    collection a reader sees no head past it."""
    every = await lifecycles(store, 2)
    newest = every[-1].sequence
    assert await store.events.operation_events_head() == newest
    await aged_events(store.db, operation_event, [position("after", e.sequence)[1] for e in every])

    assert await store.events.collect_operation_events(DAY_MS, 500) == 4

    assert await log_after(store, None, 0) == []
    assert await store.events.operation_events_head() == newest
    assert not await store.events.operation_events_collected(newest)
    assert await store.events.operation_events_after(newest, 500) == []
    with pytest.raises(EventsCollected):
        await store.events.operation_events_after(every[-2].sequence, 500)
    after = await released(store, "op-9", "evt-9")
    later = await log_after(store, newest, 2)
    assert [(e.operation_id, e.action) for e in later] == [
        (after.operation_id, "claimed"),
        (after.operation_id, "released"),
    ]
    assert await store.events.operation_events_head() == later[-1].sequence


async def test_collect_watch_events__a_prefix_by_age_with_its_own_frontier(store, clock):
    for n in range(3):
        await pending_watch(store, operation_id=f"op-{n}", source_id=f"evt-{n}")
    every = await store.events.watch_events_after(None, 500)
    assert len(every) == 3
    await aged_events(store.db, watch_event, [position("after", e.sequence)[1] for e in every[:2]])
    assert await store.events.count_collectable_watch_events(DAY_MS) == 2

    assert await store.events.collect_watch_events(DAY_MS, 500) == 2

    assert sequences(await store.events.watch_events_after(None, 500)) == sequences(every[2:])
    assert await store.events.watch_events_collected(every[0].sequence)
    assert not await store.events.watch_events_collected(every[1].sequence)
    assert not await store.events.operation_events_collected(every[0].sequence)
    assert await store.events.watch_events_head() == every[2].sequence


async def test_collect_events__bad_age_or_limit_names_the_field(store):
    with pytest.raises(InvalidInput, match="olderThanMs"):
        await store.events.collect_operation_events(-1, 10)
    with pytest.raises(InvalidInput, match="limit"):
        await store.events.collect_watch_events(0, 0)


# --- commit order ------------------------------------------------------------------------


async def test_log__transactions_committing_out_of_sequence_order_are_both_read(store, clock):
    """T1 takes the smaller sequence and commits last; T2 commits first. A reader between
    the two commits must not get past T1's place: resuming from what it read, it then gets
    both. On SQLite the second writer cannot even start before the first commits (writers
    are serialized), which is why ids there are commit-ordered."""
    one = await claimed_operation(store)
    two = await claimed_operation(store, operation_id="op-2", source_id="evt-2")
    seen = await log_after(store, None, 2)
    assert len(seen) == 2
    wrote_one, finish_one = asyncio.Event(), asyncio.Event()

    async def first() -> None:
        async with store.db.write_transaction():
            await store.operations.release_lease(one.caller_did, one.operation_id, "lease-A")
            wrote_one.set()
            await finish_one.wait()

    async def second() -> None:
        await store.operations.release_lease(two.caller_did, two.operation_id, "lease-A")

    t1 = asyncio.create_task(first())
    await wrote_one.wait()
    t2 = asyncio.create_task(second())
    try:
        if store.db.is_postgres:
            await t2
        else:
            await asyncio.sleep(0.05)
            assert not t2.done()
        between = await store.events.operation_events_after(seen[-1].sequence, 500)
    finally:
        finish_one.set()
        await t1
        await t2
    assert between == []
    after = await log_after(store, seen[-1].sequence, 2)
    assert [(e.operation_id, e.action) for e in after] == [
        ("op-1", "released"),
        ("op-2", "released"),
    ]
    assert after[0].sequence < after[1].sequence


async def test_events__rows_in_order_under_concurrent_writers(store, clock):
    records = [
        await claimed_operation(store, operation_id=f"op-{n}", source_id=f"evt-{n}")
        for n in range(8)
    ]

    async def churn(record) -> None:
        for n in range(5):
            marked = await store.operations.mark_send_started(
                record.caller_did, record.operation_id, "lease-A", f"run-{n}"
            )
            assert marked is not None

    await asyncio.gather(*(churn(record) for record in records))

    for record in records:
        assert await actions(store, record) == ["claimed"] + ["send_marked"] * 5
    every = await log_after(store, None, 48)
    assert len(every) == 48
    assert [e.sequence for e in every] == sorted(e.sequence for e in every)
    assert replace(every[0]) == every[0]


# --- leasing, operator controls, pauses, retention -------------------------------------------


async def test_lease_operations__leased_and_taken_over(store, clock):
    free = await released(store, "op-1", "evt-1")
    lapsed = await claimed_operation(store, operation_id="op-2", source_id="evt-2")
    clock.advance(LEASE_MS + 1)

    with acting_as(ACTOR):
        leased = await store.leasing.lease_operations("lease-B", LEASE_MS, limit=10)

    assert {(r.operation_id, r.lease_token) for r in leased} == {
        ("op-1", "lease-B"),
        ("op-2", "lease-B"),
    }
    assert await actions(store, free) == ["claimed", "released", "leased"]
    assert await actions(store, lapsed) == ["claimed", "taken_over"]
    (event,) = (await store.events.operation_events(key_of(lapsed)))[-1:]
    assert event.actor_did == ACTOR


async def test_lease_operations__nothing_due_appends_nothing(store, clock):
    await claimed_operation(store)
    before = await event_count(store)

    assert list(await store.leasing.lease_operations("lease-B", LEASE_MS)) == []

    assert await event_count(store) == before


async def test_renew_and_release_leases__released_logged_renewal_not(store, clock):
    record = await claimed_operation(store)
    key = (record.caller_did, record.operation_id)

    renewed = await store.leasing.renew_leases("lease-A", LEASE_MS, [key])
    refused = await store.leasing.release_leases("lease-X", [key])
    released_ = await store.leasing.release_leases("lease-A", [key])

    assert len(list(renewed)) == 1 and list(refused) == [] and len(list(released_)) == 1
    assert await actions(store, record) == ["claimed", "released"]


async def test_claim_watches__claimed_logged(store, clock):
    watch = await pending_watch(store)
    clock.now = watch.next_attempt_at

    claimed = await store.leasing.claim_watches(LEASE_MS)

    assert len(list(claimed)) == 1
    assert await watch_actions(store, watch) == ["opened", "claimed"]


async def test_cancel_operations__cancelled_says_a_marked_send(store, clock):
    marked = await marked_operation(store)
    quiet = await claimed_operation(store, operation_id="op-2", source_id="evt-2")

    with acting_as("did:key:operator"):
        cancelled = await store.operator.cancel_operations(
            Filter(caller_did=marked.caller_did), reason="provider gone"
        )

    assert len(cancelled) == 2
    last = (await store.events.operation_events(key_of(marked)))[-1]
    assert (last.action, last.from_state, last.to_state, last.kind) == (
        "cancelled",
        "attempted",
        "failed",
        "cancelled",
    )
    assert last.message == f"provider gone ({MARKED_NOTE})"
    assert last.actor_did == "did:key:operator"
    quiet_last = (await store.events.operation_events(key_of(quiet)))[-1]
    assert quiet_last.message == "provider gone"


async def test_reissue_operations__both_logged_reissued(store, clock):
    original = await claimed_operation(store)
    await store.operations.record_operation(transition(original, to_state="failed"))

    (reissue,) = await store.operator.reissue_operations(Filter(caller_did=original.caller_did))

    assert await actions(store, original) == ["claimed", "recorded", "reissued"]
    events = await store.events.operation_events(key_of(reissue))
    assert [(e.action, e.from_state, e.to_state) for e in events] == [
        ("reissued", None, "attempted")
    ]


async def test_rearm_watches_and_force_release__logged(store, clock):
    failed = await repair_failed_watch(store)
    record = await claimed_operation(store, operation_id="op-2", source_id="evt-2")

    rearmed = await store.operator.rearm_watches(WatchFilter(owner_did=failed.owner_did))
    released_ = await store.operator.force_release_leases(
        [(record.caller_did, record.operation_id)]
    )

    assert [w.repair_generation for w in rearmed] == [2]
    assert (await watch_actions(store, failed))[-1] == "rearmed"
    assert len(released_) == 1
    assert await actions(store, record) == ["claimed", "force_released"]


async def test_resume_account__spread_operations_resumed(store, clock):
    record = await released(store, "op-1", "evt-1")
    await store.pauses.pause_account("calendar", "acct-1")

    state = await store.pauses.resume_account("calendar", "acct-1", spread_ms=10_000)

    assert state.spread == 1
    assert await actions(store, record) == ["claimed", "released", "resumed"]


async def test_collect_events__concurrent_writers_collector_and_resuming_reader(store, clock):
    """Writers append, a collector collects the log's prefix as fast as it can, and a
    reader resumes with ``after`` page by page, all at once: the reader gets the log in
    order with no repeat, every event still kept at the end, and never steps silently
    over a collected one (each position a collection reached lies behind a page the
    reader read or behind an ``EventsCollected``, after which it starts again from the
    oldest kept)."""
    writing = asyncio.Event()
    rounds = [asyncio.Event()]
    frontiers: list[str] = []
    received: list[str] = []
    restarts: list[int] = []

    async def writer(w: int) -> None:
        for n in range(15):
            await released(store, f"op-{w}-{n}", f"evt-{w}-{n}")

    async def collector() -> None:
        while writing.is_set():
            clock.advance(1)
            await store.events.collect_operation_events(0, 4)
            row = await store.db.fetch_one(
                sa.select(event_collected.c.tx, event_collected.c.id).where(
                    event_collected.c.log == operation_event.name
                )
            )
            if row is not None:
                frontiers.append(sequence_of(row["tx"], row["id"]))
            done, rounds[0] = rounds[0], asyncio.Event()
            done.set()
            await asyncio.sleep(0)
        rounds[0].set()

    async def read_on(cursor: str | None, size: int = 500) -> tuple[str | None, int]:
        try:
            page = await store.events.operation_events_after(cursor, size)
        except EventsCollected:
            restarts.append(len(received))
            return None, -1
        received.extend(event.sequence for event in page)
        return (page[-1].sequence if page else cursor), len(page)

    async def reader() -> str | None:
        cursor = None
        while writing.is_set():
            cursor, _ = await read_on(cursor, 2)
            # A slow reader: one short page per round of the collector, which passes it.
            await rounds[0].wait()
        return cursor

    writing.set()
    tasks = [asyncio.create_task(collector()), asyncio.create_task(reader())]
    try:
        await asyncio.gather(*(writer(w) for w in range(3)))
    finally:
        writing.clear()
    _, cursor = await asyncio.gather(*tasks)
    for _ in range(int(LOG_WAIT_S / 0.05)):
        cursor, read = await read_on(cursor)
        kept = [e.sequence for e in await store.events.operation_events_after(None, 500)]
        stored = await store.db.fetch_one(sa.select(sa.func.count()).select_from(operation_event))
        if read == 0 and len(kept) == stored[0]:
            break
        await asyncio.sleep(0.05)

    assert received == sorted(set(received)), "in log order, none repeated"
    assert set(kept) <= set(received), "every kept event read"
    assert frontiers, "the collector ran"
    restarted_at = set(restarts)
    for i in range(1, len(received)):
        if i in restarted_at:
            continue
        stepped_over = [f for f in frontiers if received[i - 1] < f < received[i]]
        assert not stepped_over, (received[i - 1], received[i], stepped_over)
