"""Pausing and resuming accounts (store.pauses) on both backends: a paused account is leased
nothing and its watches are claimed by no verifier on every path, the due lists leave it
out, a connector pauses as a whole, and a resume spreads the backlog."""

import math

import pytest

from store.errors import InvalidInput
from tests.factories import LEASE_MS, claim, claimed_operation, released_operation
from tests.leasing_factories import (
    due_operations,
    due_record,
    due_watch_record,
    insert_operations,
    insert_watches,
)

TOKEN = "lease-W"
CLAIM_MS = 30_000


async def lease(store, **options):
    return await store.leasing.lease_operations(TOKEN, LEASE_MS, limit=50, **options)


def accounts_of(records):
    return sorted({record.account_key for record in records})


async def two_accounts(store):
    """Due operations and due watches of accounts ``acct-1`` and ``acct-2``."""
    await insert_operations(
        store,
        [due_record(store, n, account_key=f"acct-{n % 2 + 1}") for n in range(4)],
    )
    await insert_watches(
        store,
        [due_watch_record(store, n, account_key=f"acct-{n % 2 + 1}") for n in range(4)],
    )


@pytest.fixture(params=["account", "connector"])
async def paused(request, store):
    """``acct-1`` paused: on its own, or with its whole connector (then ``acct-2`` too)."""
    if request.param == "account":
        state = await store.pauses.pause_account("calendar", "acct-1")
        assert state.account is not None and state.account.paused
        return ["acct-1"]
    state = await store.pauses.pause_account("calendar", None)
    assert state.connector_paused and state.account is None
    return ["acct-1", "acct-2"]


async def test_pause_account__lease_operations_leases_nothing_of_it(store, paused):
    await two_accounts(store)

    leased = await lease(store)

    assert not set(accounts_of(leased)) & set(paused)


async def test_pause_account__acquire_lease_refused(store, clock, paused):
    record = await released_operation(store)

    taken = await store.operations.acquire_lease(
        record.caller_did, record.operation_id, "lease-B", clock() + LEASE_MS
    )

    assert taken is None


async def test_pause_account__a_claim_takes_no_lease(store, paused):
    single = await claimed_operation(store)
    [batch] = await store.batches.claim_operations([claim(operation_id="op-2", source_id="e2")])

    assert single.lease_token is None
    assert batch.operation is not None and batch.operation.lease_token is None


async def test_pause_account__watches_claimed_by_no_verifier(store, clock, paused):
    await two_accounts(store)
    watch = due_watch_record(store, 0)
    assert watch.account_key == "acct-1"

    claimed = await store.leasing.claim_watches(CLAIM_MS, limit=50)
    one = await store.watches.claim_watch_attempt(
        watch.identity, watch.repair_generation, clock() + CLAIM_MS, clock()
    )

    assert not set(accounts_of(claimed)) & set(paused)
    assert one is None


async def test_pause_account__left_out_of_the_due_lists(store, clock, paused):
    await two_accounts(store)

    operations = await store.retention.list_due_operations(clock(), 50)
    watches = await store.watches.list_due_watches(clock(), 50)
    backlog = await store.retention.count_backlog(clock())

    assert not set(accounts_of(operations)) & set(paused)
    assert not set(accounts_of(watches)) & set(paused)
    assert backlog.due_operations == len(operations)
    assert backlog.due_watches == len(watches)


async def test_resume_account__leasing_goes_on(store, paused):
    await two_accounts(store)
    key = "acct-1" if paused == ["acct-1"] else None

    state = await store.pauses.resume_account("calendar", key)
    leased = await lease(store)

    assert not state.connector_paused
    assert accounts_of(leased) == ["acct-1", "acct-2"]


async def test_resume_connector__an_account_paused_on_its_own_stays_paused(store):
    await two_accounts(store)
    await store.accounts.set_account_limit("calendar", "acct-2", None)
    await store.pauses.pause_account("calendar", "acct-1")
    await store.pauses.pause_account("calendar", None)

    await store.pauses.resume_account("calendar", None)
    leased = await lease(store)
    [acct1, acct2] = await store.accounts.list_accounts("calendar")

    assert accounts_of(leased) == ["acct-2"]
    assert (acct1.paused, acct2.paused) == (True, False)


async def test_resume_account__its_connector_still_paused_leases_nothing(store):
    await two_accounts(store)
    await store.pauses.pause_account("calendar", "acct-1")
    await store.pauses.pause_account("calendar", None)

    state = await store.pauses.resume_account("calendar", "acct-1")

    assert state.connector_paused
    assert state.account is not None and state.account.paused
    assert state.account.account.paused_at is None
    assert await lease(store) == []


async def test_pause_account__leases_held_stay(store, clock):
    held = await claimed_operation(store)

    await store.pauses.pause_account("calendar", "acct-1")
    renewed = await store.operations.renew_lease(
        held.caller_did, held.operation_id, "lease-A", clock() + LEASE_MS
    )

    assert renewed is not None and renewed.lease_token == "lease-A"


async def test_pause_account__listed_as_paused(store, clock):
    await store.pauses.pause_account("calendar", "acct-1")
    await store.pauses.pause_account("crm", None)
    await store.accounts.set_account_limit("crm", "acct-9", 2)

    [calendar] = await store.accounts.list_accounts("calendar")
    [crm] = await store.accounts.list_accounts("crm")

    assert (calendar.paused, calendar.account.paused_at) == (True, clock())
    assert (crm.paused, crm.account.paused_at) == (True, None)


def most_in_one_second(times):
    """The most of ``times`` (epoch ms) in any window of 1,000 ms."""
    ordered = sorted(times)
    most, start = 0, 0
    for end, time in enumerate(ordered):
        while time - ordered[start] >= 1000:
            start += 1
        most = max(most, end - start + 1)
    return most


@pytest.mark.parametrize(("backlog", "spread_ms"), [(100, 10_000), (250, 7_300), (7, 60_000)])
async def test_resume_account__spreads_the_backlog_evenly(store, clock, backlog, spread_ms):
    await due_operations(store, backlog)
    await insert_operations(store, [due_record(store, 10_000, account_key="acct-other")])
    await store.pauses.pause_account("calendar", "acct-1")
    clock.advance(5_000)

    state = await store.pauses.resume_account("calendar", "acct-1", spread_ms)
    rows = await store.operations.list_operations(
        [(r.caller_did, r.operation_id) for r in [due_record(store, n) for n in range(backlog)]]
    )

    times = [record.next_attempt_at for record in rows]
    assert state.spread == backlog
    assert all(clock() <= time < clock() + spread_ms for time in times)
    assert most_in_one_second(times) <= math.ceil(backlog / (spread_ms / 1000)) + 1
    assert len(await store.retention.list_due_operations(clock(), 500)) == 2  # first + other


async def test_resume_account__spread_keeps_the_due_order(store, clock):
    await due_operations(store, 5)
    await store.pauses.pause_account("calendar", "acct-1")

    await store.pauses.resume_account("calendar", "acct-1", 5_000)
    rows = await store.operations.list_operations([("did:key:caller", f"op-{n}") for n in range(5)])

    by_id = {record.operation_id: record.next_attempt_at for record in rows}
    assert [by_id[f"op-{n}"] for n in range(5)] == [clock() + 1000 * n for n in range(5)]


async def test_resume_account__spread_zero_leaves_all_due_now(store, clock):
    await due_operations(store, 3)
    await store.pauses.pause_account("calendar", "acct-1")

    state = await store.pauses.resume_account("calendar", "acct-1", 0)

    assert state.spread == 0
    assert len(await store.retention.list_due_operations(clock(), 50)) == 3


async def test_resume_account__spread_skips_leased_and_future_operations(store, clock):
    await insert_operations(
        store,
        [
            due_record(store, 0),
            due_record(store, 1, lease_token="held", lease_expires_at=clock() + 1),
            due_record(store, 2, next_attempt_at=clock() + 99_000),
        ],
    )
    await store.pauses.pause_account("calendar", "acct-1")

    state = await store.pauses.resume_account("calendar", "acct-1", 10_000)
    rows = await store.operations.list_operations([("did:key:caller", f"op-{n}") for n in range(3)])

    assert state.spread == 1
    assert [r.next_attempt_at for r in rows] == [clock(), None, clock() + 99_000]


async def test_resume_offline_deferred__one_connector(store, clock):
    await insert_operations(
        store,
        [
            due_record(store, 0, defer_reason="offline", next_attempt_at=clock() + 9_000),
            due_record(
                store,
                1,
                connector_name="crm",
                defer_reason="offline",
                next_attempt_at=clock() + 9_000,
            ),
        ],
    )

    resumed = await store.watches.resume_offline_deferred(clock(), "crm")
    rows = await store.operations.list_operations([("did:key:caller", f"op-{n}") for n in range(2)])

    assert resumed.operations == 1
    assert [(r.connector_name, r.defer_reason) for r in rows] == [
        ("calendar", "offline"),
        ("crm", None),
    ]


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda s: s.pauses.pause_account("", "a"), "connectorName"),
        (lambda s: s.pauses.pause_account("c", ""), "accountKey"),
        (lambda s: s.pauses.resume_account("c", "a", -1), "spreadMs"),
        (lambda s: s.pauses.resume_account("c", "a", 86_400_001), "spreadMs"),
        (lambda s: s.pauses.resume_account("c", None, True), "spreadMs"),
        (lambda s: s.watches.resume_offline_deferred(0, ""), "connectorName"),
    ],
)
async def test_pauses__bad_input_names_the_field(store, call, field):
    with pytest.raises(InvalidInput) as raised:
        await call(store)

    assert raised.value.field == field
