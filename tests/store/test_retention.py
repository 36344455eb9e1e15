"""list_due_operations: live operations a worker may pick up at a given time (attempted,
due, the lease free or lapsed, the account not paused), on both backends."""

import pytest

from store import ConnectorStore
from store.database import Database
from store.errors import InvalidInput
from store.retention import MAX_COLLECT_LIMIT, MAX_LIMIT
from tests.factories import (
    bulk_finished_operations,
    claimed_operation,
    claimed_watch,
    pending_watch,
    released_operation,
    terminal_operation,
)

CALLER = "did:key:caller"
TERMINAL = ["committed", "failed", "superseded"]


def keys(records):
    return [(record.caller_did, record.operation_id) for record in records]


async def test_list_due_operations__empty_store_empty(store, clock):
    assert await store.retention.list_due_operations(clock.now) == []


async def test_list_due_operations__released_never_deferred_due(store, clock):
    record = await released_operation(store)

    assert await store.retention.list_due_operations(clock.now) == [record]


async def test_list_due_operations__lease_held_not_due(store, clock):
    record = await claimed_operation(store)

    assert await store.retention.list_due_operations(clock.now) == []
    assert await store.retention.list_due_operations(record.lease_expires_at - 1) == []


async def test_list_due_operations__lease_expiring_exactly_now_not_due(store):
    record = await claimed_operation(store)

    assert await store.retention.list_due_operations(record.lease_expires_at) == []


async def test_list_due_operations__lease_expired_due(store):
    record = await claimed_operation(store)

    assert await store.retention.list_due_operations(record.lease_expires_at + 1) == [record]


async def test_list_due_operations__uses_given_now_not_store_clock(store, clock):
    record = await claimed_operation(store)
    clock.now = record.lease_expires_at + 1_000

    assert await store.retention.list_due_operations(record.lease_expires_at) == []
    assert await store.retention.list_due_operations(record.created_at - 1) == []


async def test_list_due_operations__next_attempt_in_future_not_due(store, clock):
    await released_operation(store)
    deferred = await store.operations.defer_operation(CALLER, "op-1", clock.now + 5_000)
    assert deferred is not None

    assert await store.retention.list_due_operations(clock.now + 4_999) == []
    assert await store.retention.list_due_operations(clock.now + 5_000) == [deferred]
    assert await store.retention.list_due_operations(clock.now + 9_000) == [deferred]


async def test_list_due_operations__next_attempt_in_past_due_even_if_created_later(store, clock):
    await released_operation(store)
    deferred = await store.operations.defer_operation(CALLER, "op-1", clock.now - 5_000)
    assert deferred is not None

    assert await store.retention.list_due_operations(clock.now - 1) == [deferred]


@pytest.mark.parametrize("state", ["committed", "failed", "superseded"])
async def test_list_due_operations__terminal_excluded(store, clock, state):
    record = await terminal_operation(store, state)
    await store.operations.release_lease(CALLER, "op-1", "lease-A")

    assert await store.retention.list_due_operations(record.lease_expires_at + 10**9) == []


async def test_list_due_operations__ordered_by_due_time_then_caller_then_id(store, clock):
    start = clock.now
    # Never deferred: due at created_at.
    await released_operation(store, caller_did="did:key:b", operation_id="op-1")
    await released_operation(store, caller_did="did:key:a", operation_id="op-2")
    await released_operation(store, caller_did="did:key:a", operation_id="op-1")
    clock.advance(100)
    await released_operation(store, caller_did="did:key:a", operation_id="op-late")
    clock.advance(100)
    # Created last, but deferred to before every other operation's due time.
    await released_operation(store, caller_did="did:key:z", operation_id="op-early")
    await store.operations.defer_operation("did:key:z", "op-early", start - 50)
    # Deferred to exactly the first operations' created_at: ties broken by caller, id.
    await released_operation(store, caller_did="did:key:a", operation_id="op-0")
    await store.operations.defer_operation("did:key:a", "op-0", start)
    await released_operation(store, caller_did="did:key:c", operation_id="op-0")
    await store.operations.defer_operation("did:key:c", "op-0", start)
    # Deferred to between the two created_at groups.
    await released_operation(store, caller_did="did:key:y", operation_id="op-mid")
    await store.operations.defer_operation("did:key:y", "op-mid", start + 50)
    # Deferred past now: not due.
    await released_operation(store, caller_did="did:key:a", operation_id="op-future")
    await store.operations.defer_operation("did:key:a", "op-future", clock.now + 1)

    due = await store.retention.list_due_operations(clock.now)

    assert keys(due) == [
        ("did:key:z", "op-early"),
        ("did:key:a", "op-0"),
        ("did:key:a", "op-1"),
        ("did:key:a", "op-2"),
        ("did:key:b", "op-1"),
        ("did:key:c", "op-0"),
        ("did:key:y", "op-mid"),
        ("did:key:a", "op-late"),
    ]


async def test_list_due_operations__limit_takes_the_oldest_due(store, clock):
    for number in range(5):
        await released_operation(store, operation_id=f"op-{number}")
        clock.advance(1)

    due = await store.retention.list_due_operations(clock.now, limit=3)

    assert keys(due) == [(CALLER, "op-0"), (CALLER, "op-1"), (CALLER, "op-2")]


async def test_list_due_operations__default_limit_100(store, clock):
    for number in range(101):
        await released_operation(store, operation_id=f"op-{number:03d}")

    due = await store.retention.list_due_operations(clock.now)

    assert len(due) == 100
    assert due[-1].operation_id == "op-099"


async def test_list_due_operations__connector_filter(store, clock):
    await released_operation(store, operation_id="op-1", connector_name="calendar")
    await released_operation(store, operation_id="op-2", connector_name="crm")
    await released_operation(store, operation_id="op-3", connector_name="calendar")

    calendar = await store.retention.list_due_operations(clock.now, connector_name="calendar")
    crm = await store.retention.list_due_operations(clock.now, connector_name="crm")
    drive = await store.retention.list_due_operations(clock.now, connector_name="drive")

    assert keys(calendar) == [(CALLER, "op-1"), (CALLER, "op-3")]
    assert keys(crm) == [(CALLER, "op-2")]
    assert drive == []


async def test_list_due_operations__lease_and_schedule_both_required(store, clock):
    record = await claimed_operation(store, operation_id="op-held")
    await released_operation(store, operation_id="op-free")
    await store.operations.defer_operation(CALLER, "op-free", clock.now + 10)
    await store.operations.defer_operation(CALLER, "op-held", clock.now + 10, lease_token="lease-A")

    assert await store.retention.list_due_operations(clock.now + 9) == []
    assert keys(await store.retention.list_due_operations(clock.now + 10)) == [(CALLER, "op-free")]
    assert keys(await store.retention.list_due_operations(record.lease_expires_at + 1)) == [
        (CALLER, "op-free"),
        (CALLER, "op-held"),
    ]


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"now": -1}, "now"),
        ({"now": 1.0}, "now"),
        ({"now": 2**53}, "now"),
        ({"limit": 0}, "limit"),
        ({"limit": MAX_LIMIT + 1}, "limit"),
        ({"limit": True}, "limit"),
        ({"connector_name": ""}, "connectorName"),
    ],
)
async def test_list_due_operations__invalid_input_refused(store, clock, kwargs, field):
    arguments = {"now": clock.now} | kwargs

    with pytest.raises(InvalidInput) as raised:
        await store.retention.list_due_operations(**arguments)

    assert raised.value.field == field


async def test_list_due_operations__limit_max_accepted(store, clock):
    await released_operation(store)

    assert len(await store.retention.list_due_operations(clock.now, limit=MAX_LIMIT)) == 1


async def test_collect_finished_operations__terminal_only_never_attempted(store, clock):
    for state in ["committed", "failed", "superseded"]:
        await terminal_operation(store, state, operation_id=f"op-{state}")
    await claimed_operation(store, operation_id="op-live")
    await released_operation(store, operation_id="op-released")
    clock.advance(10**12)

    deleted = await store.retention.collect_finished_operations(
        clock.now + 1, failed_older_than=clock.now + 1, limit=10_000
    )

    assert deleted == 3
    left = [await store.operations.get_operation(CALLER, f"op-{n}") for n in TERMINAL]
    assert left == [None, None, None]
    assert await store.operations.get_operation(CALLER, "op-live") is not None
    assert await store.operations.get_operation(CALLER, "op-released") is not None


async def test_collect_finished_operations__attempted_never_deleted_whatever_age(
    store, database, clock
):
    await bulk_finished_operations(database, 50, updated_at=0, state="attempted")

    assert (
        await store.retention.collect_finished_operations(
            2**53 - 1, failed_older_than=2**53 - 1, limit=10_000
        )
        == 0
    )
    assert (
        await store.retention.count_finished_operations(2**53 - 1, failed_older_than=2**53 - 1) == 0
    )


async def test_collect_finished_operations__boundary_updated_at_equal_kept(store, clock):
    kept = await terminal_operation(store, "failed", operation_id="op-kept")
    clock.advance(1)
    await terminal_operation(store, "failed", operation_id="op-newer")

    assert (
        await store.retention.collect_finished_operations(
            kept.updated_at, failed_older_than=kept.updated_at
        )
        == 0
    )
    assert (
        await store.retention.collect_finished_operations(
            kept.updated_at + 1, failed_older_than=kept.updated_at + 1
        )
        == 1
    )
    assert await store.operations.get_operation(CALLER, "op-kept") is None
    assert await store.operations.get_operation(CALLER, "op-newer") is not None


async def test_collect_finished_operations__at_most_limit_per_call(store, database, clock):
    await bulk_finished_operations(database, 25, updated_at=clock.now - 1)

    assert (
        await store.retention.count_finished_operations(clock.now, failed_older_than=clock.now)
        == 25
    )
    assert [
        await store.retention.collect_finished_operations(
            clock.now, failed_older_than=clock.now, limit=10
        )
        for _ in range(4)
    ] == [10, 10, 5, 0]
    assert (
        await store.retention.count_finished_operations(clock.now, failed_older_than=clock.now) == 0
    )


async def test_collect_finished_operations__default_limit_1000(store, database, clock):
    await bulk_finished_operations(database, 1001, updated_at=clock.now - 1)

    assert (
        await store.retention.collect_finished_operations(clock.now, failed_older_than=clock.now)
        == 1000
    )
    assert (
        await store.retention.collect_finished_operations(clock.now, failed_older_than=clock.now)
        == 1
    )


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"older_than": -1}, "olderThan"),
        ({"older_than": 1.0}, "olderThan"),
        ({"failed_older_than": -1}, "failedOlderThan"),
        ({"failed_older_than": None}, "failedOlderThan"),
        ({"limit": 0}, "limit"),
        ({"limit": MAX_COLLECT_LIMIT + 1}, "limit"),
        ({"limit": True}, "limit"),
    ],
)
async def test_collect_finished_operations__invalid_input_refused(store, clock, kwargs, field):
    await terminal_operation(store, "failed")
    arguments = {"older_than": clock.now + 1, "failed_older_than": clock.now + 1} | kwargs

    with pytest.raises(InvalidInput) as raised:
        await store.retention.collect_finished_operations(**arguments)

    assert raised.value.field == field
    assert await store.operations.get_operation(CALLER, "op-1") is not None


async def test_exclusive_sweep__one_holder_at_a_time(store, database, database_url):
    other = Database(database_url)
    await other.connect()
    try:
        rival = ConnectorStore(other)
        async with (
            store.retention.exclusive_sweep() as mine,
            rival.retention.exclusive_sweep() as theirs,
        ):
            assert mine is True
            assert theirs is (not database.is_postgres)
        async with rival.retention.exclusive_sweep() as after_release:
            assert after_release is True
    finally:
        await other.disconnect()


# --- count_backlog (the metrics gauges) -------------------------------------------------------


async def test_count_backlog__states_and_due_work_by_the_due_lists_predicates(store, clock):
    await pending_watch(store, operation_id="op-1", source_id="evt-1")
    await claimed_watch(store, clock, operation_id="op-2", source_id="evt-2")
    await released_operation(store, operation_id="op-3", source_id="evt-3")
    await claimed_operation(store, operation_id="op-4", source_id="evt-4")

    backlog = await store.retention.count_backlog(clock.now)

    assert backlog.operations_by_state == {"committed": 2, "attempted": 2}
    due_operations = await store.retention.list_due_operations(clock.now)
    due_watches = await store.watches.list_due_watches(clock.now)
    assert backlog.due_operations == len(due_operations) == 1
    assert backlog.due_watches == len(due_watches) == 1
