"""The dashboard's counts (store.counts), on both backends: grouped as the rows are, due and
in flight by the predicates of the due list and of a live lease, narrowed to a connector and
to a tenant."""

import pytest

from store.counts import OperationCount, WatchCount
from store.errors import InvalidInput
from tests.leasing_factories import due_record, due_watch_record, insert_operations, insert_watches


async def seeded(store):
    """Eight operations over two connectors and three accounts, of every kind the counts
    tell apart."""
    now = store.clock()
    await insert_operations(
        store,
        [
            due_record(store, 0),  # due: never leased
            due_record(store, 1, lease_token="L", lease_expires_at=now + 1_000),  # in flight
            due_record(store, 2, next_attempt_at=now + 10_000),  # waits
            due_record(store, 3, lease_token="L", lease_expires_at=now - 1),  # due: lapsed
            due_record(store, 4, state="committed", lease_token="L", lease_expires_at=now + 1),
            due_record(store, 5, state="failed"),
            due_record(store, 6, state="committed", account_key="acct-2"),
            due_record(
                store,
                7,
                connector_name="crm",
                caller_did="did:key:other",
                owner_did="did:key:other",
            ),
        ],
    )


async def test_count_operations__groups_with_due_and_in_flight(store):
    await seeded(store)

    counts = await store.counts.count_operations()

    assert counts == [
        OperationCount("calendar", "acct-1", "attempted", 4, due=2, in_flight=1),
        OperationCount("calendar", "acct-1", "committed", 1, due=0, in_flight=0),
        OperationCount("calendar", "acct-1", "failed", 1, due=0, in_flight=0),
        OperationCount("calendar", "acct-2", "committed", 1, due=0, in_flight=0),
        OperationCount("crm", "acct-1", "attempted", 1, due=1, in_flight=0),
    ]


async def test_count_operations__due_is_what_the_due_list_hands_out(store, clock):
    await seeded(store)
    clock.advance(5_000)  # op-1's lease lapses; op-2 still waits

    counts = await store.counts.count_operations()
    due = await store.retention.list_due_operations(clock(), 500)

    assert sum(count.due for count in counts) == len(due) == 4
    assert sum(count.in_flight for count in counts) == 0


async def test_count_operations__narrowed_to_a_connector_and_to_a_tenant(store):
    await seeded(store)

    crm = await store.counts.count_operations(connector_name="crm")
    other = await store.counts.count_operations(visible_to="did:key:other")
    nobody = await store.counts.count_operations(visible_to="did:key:nobody")

    assert [(c.connector_name, c.count) for c in crm] == [("crm", 1)]
    assert other == crm
    assert nobody == []


async def test_count_watches__by_connector_and_status_narrowed_to_an_owner(store):
    await insert_watches(
        store,
        [
            due_watch_record(store, 0),
            due_watch_record(store, 1),
            due_watch_record(store, 2, verification_status="repair_failed"),
            due_watch_record(store, 3, connector_name="crm", owner_did="did:key:other"),
        ],
    )

    every = await store.counts.count_watches()
    crm = await store.counts.count_watches(connector_name="crm")
    mine = await store.counts.count_watches(owner_did="did:key:owner")

    assert every == [
        WatchCount("calendar", "pending_verification", 2),
        WatchCount("calendar", "repair_failed", 1),
        WatchCount("crm", "pending_verification", 1),
    ]
    assert crm == [WatchCount("crm", "pending_verification", 1)]
    assert mine == every[:2]


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda s: s.counts.count_operations(connector_name=""), "connectorName"),
        (lambda s: s.counts.count_operations(visible_to=""), "visibleTo"),
        (lambda s: s.counts.count_watches(connector_name=""), "connectorName"),
        (lambda s: s.counts.count_watches(owner_did=""), "ownerDID"),
    ],
)
async def test_counts__bad_input_names_the_field(store, call, field):
    with pytest.raises(InvalidInput) as raised:
        await call(store)
    assert raised.value.field == field
