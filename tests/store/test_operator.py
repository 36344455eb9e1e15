"""Operator controls (store.operator) on both backends: cancel by filter (the holder refused
afterwards), reissue (linked, idempotent, paged), re-arm, force-release, the new filters,
and every refusal."""

import asyncio
import dataclasses

import pytest
import sqlalchemy as sa

from store.errors import InvalidInput
from store.operations import Finalize, OperationFilter
from store.operator import COPIED, OperatorStore, ReissueCounts, reissue_columns, reissue_key
from store.records import OPERATION_FIELDS
from store.tables import operation
from store.watches import WatchFilter
from tests.factories import (
    LEASE_MS,
    bulk_finished_operations,
    claimed_operation,
    committed_operation,
    marked_operation,
    pending_watch,
    repair_failed_watch,
    reread,
    reread_watch,
    transition,
)
from tests.leasing_factories import due_record, insert_operations

CONNECTOR = OperationFilter(connector_name="calendar")


async def failed_operations(store, count, **overrides):
    """``count`` failed operations (``due_record`` 0 … count-1, state failed)."""
    records = [
        due_record(store, n, state="failed", last_kind="permanent", **overrides)
        for n in range(count)
    ]
    await insert_operations(store, records)
    return records


# cancelOperations


async def test_cancel_operations__fails_matching_live_ones_and_clears_the_lease(store, clock):
    held = await claimed_operation(store)
    other = await claimed_operation(store, operation_id="op-2", connector_name="crm")
    clock.advance(7)

    cancelled = await store.operator.cancel_operations(CONNECTOR, reason="provider gone")

    assert [r.operation_id for r in cancelled] == ["op-1"]
    [row] = cancelled
    assert (row.state, row.last_kind, row.lease_token, row.lease_expires_at) == (
        "failed",
        "cancelled",
        None,
        None,
    )
    assert (row.version, row.updated_at) == (held.version + 1, clock())
    assert await reread(store, row) == row
    assert await reread(store, other) == other


async def test_cancel_operations__holder_refused_afterwards(store, clock):
    held = await claimed_operation(store)
    await store.operator.cancel_operations(CONNECTOR)
    key = (held.caller_did, held.operation_id)

    renewed = await store.operations.renew_lease(*key, "lease-A", clock() + LEASE_MS)
    marked = await store.operations.mark_send_started(*key, "lease-A", "run-1")
    final = await store.operations.finalize_operation_and_arm_watch(
        Finalize(*key, version=held.version + 1, lease_token="lease-A", due_at=clock())
    )
    recorded = await store.operations.record_operation(
        transition(held, from_state="failed", version=held.version + 1)
    )
    leased = await store.leasing.renew_leases("lease-A", LEASE_MS, [key])

    assert (renewed, marked, final, recorded) == (None, None, None, None)
    assert list(leased) == []


async def test_cancel_operations__marked_send_keeps_its_marker(store):
    marked = await marked_operation(store)

    [cancelled] = await store.operator.cancel_operations(CONNECTOR)

    assert cancelled.send_marker == marked.send_marker == "run-1"


async def test_cancel_operations__only_live_ones_and_at_most_limit(store):
    committed = await committed_operation(store, operation_id="op-0", source_id="s0")
    await insert_operations(store, [due_record(store, n) for n in range(1, 6)])

    first = await store.operator.cancel_operations(CONNECTOR, limit=3)
    rest = await store.operator.cancel_operations(CONNECTOR, limit=3)

    assert [r.operation_id for r in first] == ["op-1", "op-2", "op-3"]
    assert [r.operation_id for r in rest] == ["op-4", "op-5"]
    assert await store.operator.cancel_operations(CONNECTOR) == []
    assert await reread(store, committed) == committed


async def test_count_cancellable__exact_past_the_limit(store):
    await committed_operation(store, operation_id="op-0", source_id="s0")
    await insert_operations(store, [due_record(store, n) for n in range(1, 6)])

    left = []
    while cancelled := await store.operator.cancel_operations(CONNECTOR, limit=2):
        left.append((len(cancelled), await store.operator.count_cancellable(CONNECTOR)))

    assert left == [(2, 3), (2, 1), (1, 0)]


async def test_cancel_operations__concurrent_calls_cancel_each_once(store):
    await insert_operations(store, [due_record(store, n) for n in range(40)])

    results = await asyncio.gather(
        *(store.operator.cancel_operations(CONNECTOR, limit=7) for _ in range(8))
    )

    cancelled = [r.operation_id for result in results for r in result]
    assert sorted(cancelled) == sorted(f"op-{n}" for n in range(40))
    assert {r.version for result in results for r in result} == {1}


async def test_cancel_operations__new_filters(store, clock):
    base = clock()
    await insert_operations(
        store,
        [
            due_record(store, 0, owner_did="did:key:a", updated_at=base - 10),
            due_record(store, 1, owner_did="did:key:b", updated_at=base - 10),
            due_record(store, 2, owner_did="did:key:a", account_key="acct-2"),
            due_record(store, 3, owner_did="did:key:a", last_kind="rate_limited"),
        ],
    )

    by_owner_and_time = await store.operator.cancel_operations(
        OperationFilter(owner_did="did:key:a", updated_after=base - 10, updated_before=base)
    )
    by_account = await store.operator.cancel_operations(OperationFilter(account_key="acct-2"))
    by_kind = await store.operator.cancel_operations(OperationFilter(kind="rate_limited"))

    assert [r.operation_id for r in by_owner_and_time] == ["op-0"]
    assert [r.operation_id for r in by_account] == ["op-2"]
    assert [r.operation_id for r in by_kind] == ["op-3"]


async def test_list_tracked_operations__new_filters(store, clock):
    base = clock()
    await insert_operations(
        store,
        [
            due_record(store, 0, owner_did="did:key:a", updated_at=base - 10),
            due_record(store, 1, owner_did="did:key:b", updated_at=base),
            due_record(store, 2, account_key="acct-2", last_kind="permanent", updated_at=base),
        ],
    )

    async def ids(**fields):
        page = await store.operations.list_tracked_operations(OperationFilter(**fields))
        return [r.operation_id for r in page]

    assert await ids(owner_did="did:key:a") == ["op-0"]
    assert await ids(account_key="acct-2") == ["op-2"]
    assert await ids(kind="permanent") == ["op-2"]
    assert await ids(updated_after=base) == ["op-1", "op-2"]
    assert await ids(updated_before=base) == ["op-0"]
    assert await ids(updated_after=base - 10, updated_before=base - 10) == []


async def test_cancel_operations__empty_states_or_documents_match_nothing(store):
    await claimed_operation(store)

    assert await store.operator.cancel_operations(OperationFilter(states=[])) == []
    assert await store.operator.cancel_operations(OperationFilter(document_ids=[])) == []


@pytest.mark.parametrize(
    ("where", "options", "field"),
    [
        (OperationFilter(), {}, "filter"),
        (CONNECTOR, {"limit": 0}, "limit"),
        (CONNECTOR, {"limit": 1001}, "limit"),
        (CONNECTOR, {"reason": "x" * 2049}, "reason"),
        (CONNECTOR, {"reason": "é" * 1025}, "reason"),
        (OperationFilter(owner_did=""), {}, "filter.ownerDID"),
        (OperationFilter(kind=""), {}, "filter.kind"),
        (OperationFilter(updated_after=2, updated_before=1), {}, "filter.updatedBefore"),
        (OperationFilter(updated_after=-1), {}, "filter.updatedAfter"),
        (OperationFilter(states=["gone"]), {}, "filter.states"),
        (OperationFilter(document_ids=[f"d{n}" for n in range(501)]), {}, "filter.documentIDs"),
    ],
)
async def test_cancel_operations__bad_input_names_the_field_and_writes_nothing(
    store, where, options, field
):
    held = await claimed_operation(store)

    with pytest.raises(InvalidInput) as raised:
        await store.operator.cancel_operations(where, **options)

    assert raised.value.field == field
    assert await reread(store, held) == held


# reissueOperations


async def test_reissue_operations__new_linked_operation_with_the_envelope(store, clock):
    [inserted] = await failed_operations(store, 1, provider_etag="etag-1")
    original = await reread(store, inserted)
    assert original is not None
    clock.advance(5)

    [new] = await store.operator.reissue_operations(CONNECTOR)
    linked = await reread(store, original)

    assert new.operation_id == reissue_key(original.caller_did, original.operation_id)
    assert new.caller_did == original.caller_did
    assert all(getattr(new, name) == getattr(original, name) for name in COPIED)
    assert (new.state, new.attempts, new.version, new.lease_token, new.next_attempt_at) == (
        "attempted",
        0,
        0,
        None,
        None,
    )
    assert (new.created_at, new.reissued_from, new.reissued_as) == (
        clock(),
        original.operation_id,
        None,
    )
    assert new.node_key != original.node_key and new.incarnation != original.incarnation
    assert linked is not None
    assert (linked.state, linked.reissued_as, linked.updated_at) == (
        "failed",
        new.operation_id,
        clock(),
    )


async def test_reissue_operations__repeat_creates_nothing(store):
    await failed_operations(store, 3)

    first = await store.operator.reissue_operations(CONNECTOR)
    again = await store.operator.reissue_operations(CONNECTOR)

    assert len(first) == 3 and again == []


async def test_reissue_operations__the_reissue_is_leased_then_reissued_again(store, clock):
    [original] = await failed_operations(store, 1)
    [new] = await store.operator.reissue_operations(CONNECTOR)

    [leased] = await store.leasing.lease_operations("lease-W", LEASE_MS)
    failed = await store.operations.record_operation(
        transition(leased, to_state="failed", lease_token="lease-W")
    )
    [newer] = await store.operator.reissue_operations(CONNECTOR)

    assert leased.operation_id == new.operation_id and failed is not None
    assert newer.operation_id == reissue_key(new.caller_did, new.operation_id)
    assert newer.reissued_from == new.operation_id
    assert (await reread(store, original)).reissued_as == new.operation_id


async def test_reissue_operations__only_failed_ones(store):
    await insert_operations(
        store,
        [
            due_record(store, 0, state="committed"),
            due_record(store, 1),
            due_record(store, 2, state="superseded"),
        ],
    )

    assert await store.operator.reissue_operations(CONNECTOR) == []


async def test_reissue_operations__ten_thousand_in_at_most_twenty_calls(store, clock):
    await bulk_finished_operations(store.db, 10_000, clock(), state="failed")

    calls, reissued = 0, 0
    while True:
        calls += 1
        page = await store.operator.reissue_operations(CONNECTOR, limit=1000)
        reissued += len(page)
        if not page:
            break

    assert reissued == 10_000
    assert calls <= 20


async def test_reissue_operations__concurrent_calls_reissue_each_once(store):
    await failed_operations(store, 30)

    results = await asyncio.gather(
        *(store.operator.reissue_operations(CONNECTOR, limit=7) for _ in range(6))
    )

    froms = [r.reissued_from for result in results for r in result]
    assert len(froms) == len(set(froms))
    while page := await store.operator.reissue_operations(CONNECTOR):
        froms += [r.reissued_from for r in page]
    assert sorted(froms) == sorted(f"op-{n}" for n in range(30))


def counts(cancelled=0, outcome_unknown=0, blocked=0, remaining=0):
    return ReissueCounts(
        cancelled=cancelled, outcome_unknown=outcome_unknown, blocked=blocked, remaining=remaining
    )


async def risky_failures(store, clock):
    """Four failed operations, as the store's own writes leave them: ``op-plain`` failed
    permanently (its answer recorded); ``op-cancelled`` cancelled before any send;
    ``op-cancelled-marked`` cancelled after its send was marked; ``op-abandoned`` recorded
    failed without counting the attempt by the run that took it over from one that marked
    and lapsed (its marker ``*abandoned*``)."""
    plain = await claimed_operation(store, operation_id="op-plain", source_id="evt-1")
    assert await store.operations.record_operation(
        transition(plain, to_state="failed", kind="permanent", http_status=422)
    )
    await claimed_operation(store, operation_id="op-cancelled", source_id="evt-2")
    await marked_operation(store, operation_id="op-cancelled-marked", source_id="evt-3")
    await store.operator.cancel_operations(
        OperationFilter(operation_id="op-cancelled"), reason="closed"
    )
    await store.operator.cancel_operations(OperationFilter(operation_id="op-cancelled-marked"))
    lapsed = await marked_operation(store, operation_id="op-abandoned", source_id="evt-4")
    clock.advance(LEASE_MS + 1)
    taken = await store.operations.acquire_lease(
        lapsed.caller_did, lapsed.operation_id, "lease-B", clock() + LEASE_MS
    )
    assert taken is not None and taken.send_marker == "*abandoned*"
    gave_up = await store.operations.record_operation(
        transition(taken, to_state="failed", lease_token="lease-B", count_attempt=False)
    )
    assert gave_up is not None and gave_up.send_marker == "*abandoned*"


async def test_reissue_operations__cancelled_and_outcome_unknown_skipped_by_default(store, clock):
    await risky_failures(store, clock)

    made = await store.operator.reissue_operations(CONNECTOR)
    left = await store.operator.count_reissue(CONNECTOR)

    assert [record.reissued_from for record in made] == ["op-plain"]
    assert left == counts(cancelled=1, outcome_unknown=2)
    for kept in ("op-cancelled", "op-cancelled-marked", "op-abandoned"):
        stored = await store.operations.get_operation("did:key:caller", kept)
        assert stored is not None and stored.reissued_as is None


@pytest.mark.parametrize(
    ("include", "reissued", "left"),
    [
        (["cancelled"], {"op-cancelled"}, counts(outcome_unknown=2)),
        (["outcome_unknown"], {"op-abandoned"}, counts(cancelled=2)),
        (
            ["cancelled", "outcome_unknown"],
            {"op-cancelled", "op-cancelled-marked", "op-abandoned"},
            counts(),
        ),
    ],
)
async def test_reissue_operations__include_lets_each_risk_through(
    store, clock, include, reissued, left
):
    await risky_failures(store, clock)
    await store.operator.reissue_operations(OperationFilter(operation_id="op-plain"))

    made = await store.operator.reissue_operations(CONNECTOR, include=include)

    assert {record.reissued_from for record in made} == reissued
    assert await store.operator.count_reissue(CONNECTOR, include=include) == left


async def test_reissue_operations__a_blocked_one_takes_no_place_of_the_limit(store):
    await failed_operations(store, 3)
    # A client claimed op-0's reissue key for itself: op-0 cannot be reissued.
    await insert_operations(
        store, [due_record(store, 9, operation_id=reissue_key("did:key:caller", "op-0"))]
    )

    first = await store.operator.reissue_operations(CONNECTOR, limit=1)
    after_first = await store.operator.count_reissue(CONNECTOR)
    second = await store.operator.reissue_operations(CONNECTOR, limit=1)
    after_second = await store.operator.count_reissue(CONNECTOR)
    third = await store.operator.reissue_operations(CONNECTOR, limit=1)

    assert [record.reissued_from for record in first] == ["op-1"]
    assert after_first == counts(blocked=1, remaining=1)
    assert [record.reissued_from for record in second] == ["op-2"]
    assert after_second == counts(blocked=1)
    assert third == []
    blocked = await store.operations.get_operation("did:key:caller", "op-0")
    assert blocked is not None and blocked.reissued_as is None


async def test_reissue_operations__blocked_run_read_in_few_rounds(store, monkeypatch):
    # 600 blocked originals, then one free: a press of limit 1 reissues the free one,
    # reading the blocked ones in rounds of growing size, not one round per original.
    await failed_operations(store, 601)
    taken = [
        due_record(
            store,
            1_000 + n,
            operation_id=reissue_key("did:key:caller", f"op-{n}"),
            connector_name="other",
        )
        for n in range(600)
    ]
    await insert_operations(store, taken)
    rounds = []
    sort_reissues = OperatorStore._sort_reissues

    async def counted(self, items):
        rounds.append(len(items))
        return await sort_reissues(self, items)

    monkeypatch.setattr(OperatorStore, "_sort_reissues", counted)

    made = await store.operator.reissue_operations(CONNECTOR, limit=1)

    assert [record.reissued_from for record in made] == ["op-600"]
    assert len(rounds) <= 11
    assert await store.operator.count_reissue(CONNECTOR) == counts(blocked=600)


async def test_reissue_operations__remaining_exact_past_the_limit(store):
    await failed_operations(store, 5)
    await insert_operations(store, [due_record(store, 7, state="failed", last_kind="cancelled")])

    left = []
    while made := await store.operator.reissue_operations(CONNECTOR, limit=2):
        left.append((len(made), await store.operator.count_reissue(CONNECTOR)))

    assert left == [
        (2, counts(cancelled=1, remaining=3)),
        (2, counts(cancelled=1, remaining=1)),
        (1, counts(cancelled=1, remaining=0)),
    ]


async def test_reissue_operations__concurrent_connections_reissue_each_once(store):
    await failed_operations(store, 24)
    await insert_operations(
        store,
        [
            due_record(store, 30, state="failed", last_kind="cancelled"),
            due_record(store, 31, state="failed", send_marker="run-1"),
            due_record(store, 32, operation_id=reissue_key("did:key:caller", "op-3")),
        ],
    )

    async def press():
        return await store.operator.reissue_operations(CONNECTOR, limit=1)

    results = await asyncio.gather(*(asyncio.create_task(press()) for _ in range(12)))
    froms = [record.reissued_from for result in results for record in result]
    while page := await store.operator.reissue_operations(CONNECTOR, limit=5):
        froms += [record.reissued_from for record in page]

    assert len(froms) == len(set(froms))
    assert sorted(froms) == sorted(f"op-{n}" for n in range(24) if n != 3)
    assert await store.operator.count_reissue(CONNECTOR) == counts(
        cancelled=1, outcome_unknown=1, blocked=1
    )
    rows = await store.db.fetch_all(
        sa.select(operation.c.reissued_from, sa.func.count().label("n"))
        .where(operation.c.reissued_from.is_not(None))
        .group_by(operation.c.reissued_from)
    )
    assert {row["n"] for row in rows} == {1}


async def test_count_reissue__bad_include_names_the_field(store):
    with pytest.raises(InvalidInput) as raised:
        await store.operator.reissue_operations(CONNECTOR, include=["committed"])
    with pytest.raises(InvalidInput) as counted:
        await store.operator.count_reissue(CONNECTOR, include=["committed"])

    assert raised.value.field == counted.value.field == "include"


def test_reissue_columns__every_column_is_copied_or_fresh():
    original = operation.alias("original")
    item = operation.alias("item")
    item_columns = type(
        "Item",
        (),
        {
            "new_operation": item.c.operation_id,
            "node_key": item.c.node_key,
            "incarnation": item.c.incarnation,
        },
    )

    columns = reissue_columns(original, item_columns)

    assert [column.name for column in columns] == list(OPERATION_FIELDS)
    assert set(OPERATION_FIELDS) >= COPIED


def test_reissue_key__bounded_and_derived():
    long = reissue_key("did:key:c", "x" * 1024)

    assert len(long) == len(reissue_key("did:key:c", "op-1")) == 72
    assert long != reissue_key("did:key:d", "x" * 1024)


@pytest.mark.parametrize(
    ("where", "options", "field"),
    [
        (OperationFilter(), {}, "filter"),
        (CONNECTOR, {"limit": 0}, "limit"),
        (OperationFilter(caller_did=""), {}, "filter.callerDID"),
    ],
)
async def test_reissue_operations__bad_input_names_the_field(store, where, options, field):
    with pytest.raises(InvalidInput) as raised:
        await store.operator.reissue_operations(where, **options)

    assert raised.value.field == field


# rearmWatches


async def test_rearm_watches__new_generation_observing_the_current_winner(store, clock):
    failed = await repair_failed_watch(store)
    pending = await pending_watch(store, operation_id="op-2", source_id="evt-2")
    await store.winners.record_winner("doc-1", "digest-2")
    clock.advance(9)

    [rearmed] = await store.operator.rearm_watches(WatchFilter(connector_name="calendar"))

    assert rearmed.identity == failed.identity
    assert (rearmed.repair_generation, rearmed.verification_status) == (
        failed.repair_generation + 1,
        "pending_verification",
    )
    assert (rearmed.verification_attempts, rearmed.observed_winner_digest) == (0, "digest-2")
    assert (rearmed.next_attempt_at, rearmed.claimed_until, rearmed.version) == (
        clock(),
        None,
        failed.version + 1,
    )
    assert await reread_watch(store, rearmed) == rearmed
    assert await reread_watch(store, pending) == pending
    assert await store.operator.rearm_watches(WatchFilter()) == []


async def test_rearm_watches__filter_and_limit(store):
    for n in range(3):
        await repair_failed_watch(
            store, operation_id=f"op-{n}", source_id=f"evt-{n}", account_key=f"acct-{n % 2}"
        )

    by_account = await store.operator.rearm_watches(WatchFilter(account_key="acct-1"))
    limited = await store.operator.rearm_watches(WatchFilter(), limit=1)

    assert [w.source_id for w in by_account] == ["evt-1"]
    assert [w.source_id for w in limited] == ["evt-0"]


async def test_rearm_watches__a_source_id_names_one_watch_of_its_siblings(store):
    for n in range(3):
        await repair_failed_watch(store, operation_id=f"op-{n}", source_id=f"evt-{n}")

    one = await store.operator.rearm_watches(
        WatchFilter(connector_name="calendar", source_id="evt-1")
    )

    assert [w.source_id for w in one] == ["evt-1"]
    assert await store.operator.count_rearmable(WatchFilter(connector_name="calendar")) == 2


async def test_count_rearmable__exact_past_the_limit(store):
    for n in range(3):
        await repair_failed_watch(store, operation_id=f"op-{n}", source_id=f"evt-{n}")
    await pending_watch(store, operation_id="op-9", source_id="evt-9")

    left = []
    while rearmed := await store.operator.rearm_watches(WatchFilter(), limit=2):
        left.append((len(rearmed), await store.operator.count_rearmable(WatchFilter())))

    assert left == [(2, 1), (1, 0)]


async def test_rearm_watches__concurrent_calls_rearm_each_once(store):
    for n in range(6):
        await repair_failed_watch(store, operation_id=f"op-{n}", source_id=f"evt-{n}")

    results = await asyncio.gather(*(store.operator.rearm_watches(WatchFilter()) for _ in range(4)))

    rearmed = [w.source_id for result in results for w in result]
    assert sorted(rearmed) == [f"evt-{n}" for n in range(6)]
    assert {w.repair_generation for result in results for w in result} == {2}


@pytest.mark.parametrize(
    ("where", "options", "field"),
    [
        (WatchFilter(), {"limit": 1001}, "limit"),
        (WatchFilter(account_key=""), {}, "filter.accountKey"),
        (WatchFilter(updated_after=5, updated_before=4), {}, "filter.updatedBefore"),
        (WatchFilter(status="nope"), {}, "filter.status"),
    ],
)
async def test_rearm_watches__bad_input_names_the_field(store, where, options, field):
    with pytest.raises(InvalidInput) as raised:
        await store.operator.rearm_watches(where, **options)

    assert raised.value.field == field


# forceReleaseLeases


async def test_force_release_leases__frees_whatever_the_token(store, clock):
    held = await claimed_operation(store)
    clock.advance(3)

    [released] = await store.operator.force_release_leases([(held.caller_did, held.operation_id)])

    assert (released.lease_token, released.lease_expires_at, released.attempts) == (None, None, 0)
    assert released.updated_at == clock()
    assert await reread(store, held) == released
    assert (
        await store.operations.renew_lease(
            held.caller_did, held.operation_id, "lease-A", clock() + LEASE_MS
        )
        is None
    )


async def test_force_release_leases__marked_send_counted_as_abandoned(store):
    marked = await marked_operation(store)
    key = (marked.caller_did, marked.operation_id)

    [released] = await store.operator.force_release_leases([key])
    taken = await store.operations.acquire_lease(*key, "lease-B", store.clock() + LEASE_MS)

    assert (released.attempts, released.send_marker) == (marked.attempts + 1, "*abandoned*")
    assert taken is not None and taken.attempts == released.attempts


async def test_force_release_leases__concurrent_calls_release_each_once(store, clock):
    await insert_operations(
        store,
        [
            due_record(store, n, lease_token=f"t{n}", lease_expires_at=clock() + 1)
            for n in range(30)
        ],
    )
    keys = [("did:key:caller", f"op-{n}") for n in range(30)]

    results = await asyncio.gather(
        *(
            store.operator.force_release_leases(keys if n % 2 else list(reversed(keys)))
            for n in range(6)
        )
    )

    released = [r.operation_id for result in results for r in result]
    assert sorted(released) == sorted(key[1] for key in keys)


async def test_force_release_leases__no_lease_or_finished_left_out(store):
    committed = await committed_operation(store)
    await insert_operations(store, [due_record(store, 5)])

    released = await store.operator.force_release_leases(
        [("did:key:caller", "op-1"), ("did:key:caller", "op-5"), ("did:key:caller", "gone")]
    )

    assert released == []
    assert await reread(store, committed) == committed


@pytest.mark.parametrize(
    ("keys", "field"),
    [
        ([], "keys"),
        ([("c", "o")] * 501, "keys"),
        ([("c", "o"), ("", "o")], "keys[1].callerDID"),
        ([("c", "")], "keys[0].operationID"),
        ([("c", "o"), ("d", "o"), ("c", "o")], "keys[2].operationID"),
    ],
)
async def test_force_release_leases__bad_input_names_the_field(store, keys, field):
    with pytest.raises(InvalidInput) as raised:
        await store.operator.force_release_leases(keys)

    assert raised.value.field == field


def test_operation_filter__is_empty():
    assert OperationFilter().is_empty
    assert not dataclasses.replace(OperationFilter(), states=[]).is_empty


# failureGroups


async def failures_of(store, kinds_and_messages):
    """One failed operation per (kind, message), numbered in order, updated at n ms past now."""
    records = [
        due_record(
            store,
            n,
            state="failed",
            last_kind=kind,
            last_error=message,
            updated_at=store.clock() + n,
        )
        for n, (kind, message) in enumerate(kinds_and_messages)
    ]
    await insert_operations(store, records)
    return records


async def test_failure_groups__by_kind_and_message_largest_first(store, clock):
    await failures_of(
        store,
        [
            ("permanent", "422 bad"),
            ("permanent", "422 bad"),
            ("permanent", "401 auth"),
            ("cancelled", None),
            ("permanent", "422 bad"),
            ("cancelled", None),
        ],
    )
    await insert_operations(
        store, [due_record(store, 9, last_kind="permanent", last_error="422 bad")]
    )

    groups = await store.operator.failure_groups(OperationFilter())

    assert [(g.kind, g.message, g.count, g.unreissued) for g in groups] == [
        ("permanent", "422 bad", 3, 3),
        ("cancelled", None, 2, 2),
        ("permanent", "401 auth", 1, 1),
    ]
    assert groups[0].last_at == clock() + 4


async def test_failure_groups__a_group_is_what_its_filter_lists(store):
    await failures_of(store, [("permanent", "422 bad"), ("permanent", "401 auth")] * 3)
    [group, *_] = await store.operator.failure_groups(OperationFilter(connector_name="calendar"))

    where = OperationFilter(states=["failed"], kind=group.kind, last_error=group.message)
    listed = await store.operations.list_tracked_operations(where, limit=50)

    assert len(listed) == group.count == 3
    assert {(r.last_kind, r.last_error) for r in listed} == {(group.kind, group.message)}


async def test_failure_groups__counts_reissued_apart_and_narrows_by_filter(store):
    await failures_of(store, [("permanent", "422 bad")] * 3)
    await store.operator.reissue_operations(OperationFilter(operation_id="op-0"))

    [group] = await store.operator.failure_groups(OperationFilter(kind="permanent"))
    none = await store.operator.failure_groups(OperationFilter(connector_name="crm"))
    nobody = await store.operator.failure_groups(OperationFilter(visible_to="did:key:nobody"))

    assert (group.count, group.unreissued) == (3, 2)
    assert none == nobody == []


async def test_failure_groups__limit_and_bad_input_refused(store):
    await failures_of(store, [("permanent", f"error {n}") for n in range(4)])

    assert len(await store.operator.failure_groups(OperationFilter(), limit=2)) == 2
    with pytest.raises(InvalidInput) as low:
        await store.operator.failure_groups(OperationFilter(), limit=0)
    with pytest.raises(InvalidInput) as high:
        await store.operator.failure_groups(OperationFilter(), limit=501)
    with pytest.raises(InvalidInput) as message:
        await store.operator.failure_groups(OperationFilter(last_error=""))
    assert (low.value.field, high.value.field, message.value.field) == (
        "first",
        "first",
        "filter.lastError",
    )
