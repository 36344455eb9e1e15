"""Batch leasing (store.leasing) and the lease guards on every path that takes a lease, on
both backends: what qualifies, the fair order, caps, throttles, one lease per provider
entity, takeovers, and every refusal."""

import pytest
import sqlalchemy as sa

from benchmarks.capped import capped_statements
from store.errors import InvalidInput
from store.leasing import fair_order
from store.operations import Finalize, OperationFilter, SendMark
from tests.factories import (
    LEASE_MS,
    claim,
    claimed_operation,
    marked_operation,
    reread,
    transition,
)
from tests.leasing_factories import due_operations, due_record, insert_operations

TOKEN = "lease-W"


async def lease(store, limit=10, **options):
    return await store.leasing.lease_operations(TOKEN, LEASE_MS, limit=limit, **options)


def keys(records):
    return sorted(record.operation_id for record in records)


async def test_lease_operations__leases_due_operations_to_the_token(store, clock):
    await due_operations(store, 3)

    leased = await lease(store)

    assert keys(leased) == ["op-0", "op-1", "op-2"]
    assert {r.lease_token for r in leased} == {TOKEN}
    assert {r.lease_expires_at for r in leased} == {clock() + LEASE_MS}
    assert [await reread(store, r) for r in leased] == leased


async def test_lease_operations__a_live_lease_is_skipped_until_it_lapses(store, clock):
    await due_operations(store, 2)
    first = await lease(store)

    assert await lease(store) == []
    clock.advance(LEASE_MS + 1)
    again = await lease(store)

    assert keys(again) == keys(first)


async def test_lease_operations__not_due_or_finished_is_skipped(store, clock):
    await insert_operations(
        store,
        [
            due_record(store, 0, next_attempt_at=clock() + 1),
            due_record(store, 1, state="committed"),
            due_record(store, 2, next_attempt_at=clock()),
        ],
    )

    assert keys(await lease(store)) == ["op-2"]


async def test_lease_operations__limit_connector_accounts_and_caller_filter(store):
    await insert_operations(
        store,
        [
            due_record(store, 0),
            due_record(store, 1, connector_name="crm"),
            due_record(store, 2, account_key="acct-2"),
            due_record(store, 3, caller_did="did:key:other"),
            due_record(store, 4),
        ],
    )

    assert keys(await lease(store, connector_name="crm")) == ["op-1"]
    assert keys(await lease(store, account_keys=["acct-2"])) == ["op-2"]
    assert keys(await lease(store, caller_did="did:key:other")) == ["op-3"]
    assert await lease(store, account_keys=[]) == []
    assert keys(await lease(store, limit=1)) == ["op-0"]


async def test_lease_operations__fair_across_owners(store):
    many = [due_record(store, n, owner_did="did:key:big") for n in range(20)]
    one = due_record(store, 100, owner_did="did:key:small")
    await insert_operations(store, [*many, one])

    leased = await lease(store, limit=3)

    assert [r.operation_id for r in leased] == ["op-0", "op-100", "op-1"]


async def test_lease_operations__one_per_entity_oldest_first(store, clock):
    await insert_operations(
        store,
        [due_record(store, n, source_id="evt-same") for n in range(3)],
    )

    first = await lease(store)
    assert keys(first) == ["op-0"]
    assert await lease(store) == []

    clock.advance(LEASE_MS + 1)
    assert keys(await lease(store)) == ["op-0"]


async def test_lease_operations__a_deferred_older_operation_holds_back_the_entity(store, clock):
    await insert_operations(
        store,
        [
            due_record(store, 0, source_id="evt-same", next_attempt_at=clock() + 60_000),
            due_record(store, 1, source_id="evt-same"),
        ],
    )

    assert await lease(store) == []


async def test_lease_operations__the_entity_frees_when_the_older_finishes(store, clock):
    older = await claimed_operation(store, operation_id="op-old", source_id="evt-same")
    newer = due_record(store, 1, source_id="evt-same", created_at=clock() + 1)
    await insert_operations(store, [newer])
    clock.advance(LEASE_MS + 1)
    (taken,) = await lease(store)
    assert taken.operation_id == older.operation_id

    assert await store.operations.record_operation(transition(taken, to_state="failed"))

    assert keys(await lease(store)) == ["op-1"]


async def test_lease_operations__refused_while_a_younger_of_the_entity_holds_a_lease(store):
    """A younger operation leased before the older one existed (e.g. another replica's
    clock): the older one waits until that lease ends."""
    await claimed_operation(store, operation_id="op-young", source_id="evt-same")
    await insert_operations(store, [due_record(store, 1, source_id="evt-same")])

    assert await lease(store) == []


async def test_lease_operations__cap_bounds_live_leases_of_the_account(store, clock):
    await due_operations(store, 5)
    await store.accounts.set_account_limit("calendar", "acct-1", 2)

    assert len(await lease(store)) == 2
    assert await lease(store) == []
    clock.advance(LEASE_MS + 1)
    assert len(await lease(store)) == 2


async def test_lease_operations__cap_counts_leases_held_through_other_paths(store):
    await claimed_operation(store, operation_id="held", source_id="evt-held")
    await due_operations(store, 5)
    await store.accounts.set_account_limit("calendar", "acct-1", 2)

    assert len(await lease(store)) == 1


async def test_lease_operations__cap_of_one_account_leaves_others_unbounded(store):
    await insert_operations(
        store,
        [due_record(store, n) for n in range(4)]
        + [due_record(store, 10 + n, account_key="acct-2") for n in range(4)],
    )
    await store.accounts.set_account_limit("calendar", "acct-1", 1)

    leased = await lease(store)

    assert sorted(r.account_key for r in leased) == ["acct-1"] + ["acct-2"] * 4


async def test_lease_operations__throttled_account_gets_none_until_its_time(store, clock):
    await due_operations(store, 2)
    await store.accounts.throttle_account("calendar", "acct-1", 5_000)

    assert await lease(store) == []
    clock.advance(4_999)
    assert await lease(store) == []
    clock.advance(1)
    assert len(await lease(store)) == 2


async def test_lease_operations__takeover_counts_an_abandoned_send(store, clock):
    marked = await marked_operation(store)
    clock.advance(LEASE_MS + 1)

    (taken,) = await lease(store)

    assert taken.attempts == marked.attempts + 1
    assert taken.send_marker == "*abandoned*"
    assert taken.lease_token == TOKEN


async def test_lease_operations__takeover_of_an_unmarked_run_counts_nothing(store, clock):
    claimed = await claimed_operation(store)
    clock.advance(LEASE_MS + 1)

    (taken,) = await lease(store)

    assert taken.attempts == claimed.attempts
    assert taken.send_marker is None


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"lease_ms": 999}, "leaseMs"),
        ({"lease_ms": 3_600_001}, "leaseMs"),
        ({"limit": 0}, "limit"),
        ({"limit": 501}, "limit"),
        ({"connector_name": ""}, "connectorName"),
        ({"account_keys": ["a", ""]}, "accountKeys[1]"),
        ({"account_keys": [f"a{n}" for n in range(501)]}, "accountKeys"),
        ({"token": ""}, "leaseToken"),
    ],
)
async def test_lease_operations__bad_input_names_the_field(store, options, field):
    arguments = {"token": TOKEN, "lease_ms": LEASE_MS} | options
    token, lease_ms = arguments.pop("token"), arguments.pop("lease_ms")

    with pytest.raises(InvalidInput) as raised:
        await store.leasing.lease_operations(token, lease_ms, **arguments)

    assert raised.value.field == field


def test_fair_order__owner_rank_then_due_then_key(store):
    records = [
        due_record(store, 0, owner_did="a"),
        due_record(store, 1, owner_did="a"),
        due_record(store, 2, owner_did="b"),
        due_record(store, 3, owner_did="a", next_attempt_at=1),
    ]

    assert [r.operation_id for r in fair_order(records)] == ["op-3", "op-2", "op-0", "op-1"]


async def test_acquire_lease__refused_at_the_cap(store, clock):
    await claimed_operation(store, operation_id="held", source_id="evt-held")
    await due_operations(store, 1)
    await store.accounts.set_account_limit("calendar", "acct-1", 1)

    refused = await store.operations.acquire_lease("did:key:caller", "op-0", TOKEN, clock() + 1000)

    assert refused is None
    assert (await store.operations.get_operation("did:key:caller", "op-0")).lease_token is None


async def test_acquire_lease__the_holder_renews_at_the_cap(store, clock):
    held = await claimed_operation(store)
    await store.accounts.set_account_limit("calendar", "acct-1", 1)

    again = await store.operations.acquire_lease(
        held.caller_did, held.operation_id, held.lease_token, clock() + 5000
    )

    assert again is not None and again.lease_expires_at == clock() + 5000


async def test_acquire_lease__the_holder_renews_at_the_cap_beside_a_waiting_operation(store, clock):
    held = await claimed_operation(store)
    await claimed_operation(
        store, operation_id="waiting", source_id="evt-2", lease_token=None, lease_expires_at=None
    )
    await store.accounts.set_account_limit("calendar", "acct-1", 1)

    again = await store.operations.acquire_lease(
        held.caller_did, held.operation_id, held.lease_token, clock() + 5000
    )

    assert again is not None and again.lease_expires_at == clock() + 5000


async def test_acquire_lease__the_cap_counts_its_own_accounts_leases_only(store, clock):
    await insert_operations(
        store,
        [due_record(store, 0)] + [due_record(store, n, account_key="acct-2") for n in (1, 2)],
    )
    await store.accounts.set_account_limit("calendar", "acct-1", 1)
    for n in (1, 2):
        assert await store.operations.acquire_lease(
            "did:key:caller", f"op-{n}", TOKEN, clock() + 1000
        )

    assert await store.operations.acquire_lease("did:key:caller", "op-0", TOKEN, clock() + 1000)


async def test_acquire_lease__refused_while_throttled(store, clock):
    await due_operations(store, 1)
    await store.accounts.throttle_account("calendar", "acct-1", 1_000)

    assert (
        await store.operations.acquire_lease("did:key:caller", "op-0", TOKEN, clock() + LEASE_MS)
        is None
    )
    clock.advance(1_000)
    assert await store.operations.acquire_lease("did:key:caller", "op-0", TOKEN, clock() + LEASE_MS)


async def test_acquire_lease__refused_for_a_newer_operation_of_the_entity(store, clock):
    await insert_operations(store, [due_record(store, n, source_id="evt-same") for n in range(2)])

    assert (
        await store.operations.acquire_lease("did:key:caller", "op-1", TOKEN, clock() + LEASE_MS)
        is None
    )
    assert await store.operations.acquire_lease("did:key:caller", "op-0", TOKEN, clock() + LEASE_MS)


async def test_acquire_lease__refused_while_another_of_the_entity_holds_a_lease(store, clock):
    # A younger operation leased before the older one existed (e.g. clock skew).
    await insert_operations(
        store,
        [
            due_record(
                store, 1, source_id="evt-same", lease_token="other", lease_expires_at=clock() + 1000
            ),
            due_record(store, 0, source_id="evt-same", created_at=clock() - 2_000_000),
        ],
    )

    assert (
        await store.operations.acquire_lease("did:key:caller", "op-0", TOKEN, clock() + LEASE_MS)
        is None
    )


async def test_claim_operation__a_second_of_the_entity_is_claimed_unleased_and_due(store, clock):
    await claimed_operation(store, operation_id="op-1")

    result = await store.operations.claim_operation(
        claim(operation_id="op-2", lease_expires_at=clock() + LEASE_MS)
    )

    assert result.status == "claimed"
    assert result.operation.lease_expires_at == clock() - 1
    assert result.operation.next_attempt_at is None


async def test_claim_operation__unleased_at_the_cap(store, clock):
    await store.accounts.set_account_limit("calendar", "acct-1", 1)
    await claimed_operation(store, operation_id="op-1")

    second = await claimed_operation(store, operation_id="op-2", source_id="evt-2")

    assert second.lease_expires_at == clock() - 1


async def test_claim_operation__unleased_while_throttled(store, clock):
    await store.accounts.throttle_account("calendar", "acct-1", 1_000)

    claimed = await claimed_operation(store)

    assert claimed.lease_expires_at == clock() - 1


async def test_claim_operation__leased_where_allowed_and_creates_the_account(store, clock):
    claimed = await claimed_operation(store)

    assert claimed.lease_expires_at == clock() + LEASE_MS
    (account,) = await store.accounts.list_accounts("calendar")
    assert account.in_flight == 1
    assert account.account.max_in_flight is None


async def test_claim_operation__unleased_claim_carries_no_token(store, clock):
    await claimed_operation(store, operation_id="op-1")

    second = await claimed_operation(store, operation_id="op-2")

    assert second.lease_token is None
    assert second.lease_expires_at == clock() - 1
    assert await reread(store, second) == second


async def claimants_writes(store, clock, record):
    """Every write its claimant could try on ``record`` with its own token ``lease-A``,
    single and batch; each result is None (or an empty list) where it was refused."""
    caller, operation = record.caller_did, record.operation_id
    final = Finalize(caller, operation, version=record.version, lease_token="lease-A", due_at=5)
    return {
        "mark": await store.operations.mark_send_started(caller, operation, "lease-A", "run-1"),
        "marks": await store.batches.mark_sends_started(
            [SendMark(caller, operation, "lease-A", "run-1")]
        ),
        "renew": await store.operations.renew_lease(
            caller, operation, "lease-A", clock() + LEASE_MS
        ),
        "renews": list(
            await store.leasing.renew_leases("lease-A", LEASE_MS, [(caller, operation)])
        ),
        "finalize": await store.operations.finalize_operation_and_arm_watch(final),
        "finalizes": await store.batches.finalize_operations([final]),
        "record": await store.operations.record_operation(
            transition(record, lease_token="lease-A", to_state="failed")
        ),
        "records": await store.batches.record_operations(
            [transition(record, lease_token="lease-A", to_state="failed")]
        ),
    }


REFUSED_WRITES = {
    "mark": None,
    "marks": [None],
    "renew": None,
    "renews": [],
    "finalize": None,
    "finalizes": [None],
    "record": None,
    "records": [None],
}


async def test_claim_operation__unleased_claimants_token_writes_nothing(store, clock):
    await claimed_operation(store, operation_id="op-1")
    second = await claimed_operation(store, operation_id="op-2")
    clock.advance(1_000)

    refused = await claimants_writes(store, clock, second)

    assert refused == REFUSED_WRITES
    assert await reread(store, second) == second
    assert await store.watches.get_watch(second.identity) is None


async def test_claim_operations__unleased_claimants_token_writes_nothing(store, clock):
    first, second = await claimed_in_one_batch(store, clock, ["evt-1", "evt-1"])
    clock.advance(1_000)

    refused = await claimants_writes(store, clock, second)

    assert refused == REFUSED_WRITES
    assert await reread(store, second) == second
    assert (first.lease_token, second.lease_token) == ("lease-A", None)
    assert await store.watches.get_watch(second.identity) is None


async def test_claim_operation__unleased_claimant_writes_once_it_leases(store, clock):
    first = await marked_operation(store, operation_id="op-1")
    second = await claimed_operation(store, operation_id="op-2")
    await store.operations.record_operation(transition(first, to_state="failed"))

    leased = await store.operations.acquire_lease(
        second.caller_did, second.operation_id, "lease-A", clock() + LEASE_MS
    )
    marked = await store.operations.mark_send_started(
        second.caller_did, second.operation_id, "lease-A", "run-1"
    )

    assert leased is not None and leased.lease_token == "lease-A"
    assert marked is not None and marked.send_marker == "run-1"


async def test_lease_operations__max_bytes_bounds_the_rows_as_the_lease_leaves_them(store, clock):
    for n in range(3):
        await claimed_operation(
            store, operation_id=f"op-{n}", source_id=f"evt-{n}", lease_expires_at=clock() - 1
        )
    stored = await store.operations.list_tracked_operations(OperationFilter(), max_bytes=10**9)
    one, prior = stored.sizes[0], len(stored[0].lease_token)
    bound = 2 * one + 10
    token = "T" * (prior + one // 2)

    leased = await store.leasing.lease_operations(
        token, LEASE_MS, limit=50, max_bytes=bound, at_least_one=False
    )

    assert keys(leased) == ["op-0"] and sum(leased.sizes) <= bound
    assert (await reread(store, stored[1])).lease_token == stored[1].lease_token


async def test_lease_operations__leases_only_what_max_bytes_fits(store, clock):
    for n in range(6):
        await claimed_operation(
            store,
            operation_id=f"op-{n}",
            source_id=f"evt-{n}",
            reissue_intent={"blob": "x" * 10_000},
            lease_expires_at=clock() - 1,
        )

    first = await lease(store, limit=50, max_bytes=1)
    one = first.sizes[0]
    more = await lease(store, limit=50, max_bytes=2 * one + one // 2)
    none = await lease(store, limit=50, max_bytes=one // 2, at_least_one=False)

    assert keys(first) == ["op-0"] and one > 10_000
    assert keys(more) == ["op-1", "op-2"] and more.sizes == [one, one]
    assert list(none) == []
    stored = await store.operations.list_tracked_operations(OperationFilter())
    assert keys(r for r in stored if r.lease_token == TOKEN) == ["op-0", "op-1", "op-2"]


async def test_lease_operations__each_call_of_one_shape_leases_with_its_own_token_and_now(
    store, clock
):
    await due_operations(store, 2)
    first = await store.leasing.lease_operations("lease-A", LEASE_MS, limit=1)
    clock.advance(1_000)
    second = await store.leasing.lease_operations("lease-B", 2 * LEASE_MS, limit=1)

    assert [(r.lease_token, r.lease_expires_at) for r in first] == [
        ("lease-A", clock() - 1_000 + LEASE_MS)
    ]
    assert [(r.lease_token, r.lease_expires_at) for r in second] == [
        ("lease-B", clock() + 2 * LEASE_MS)
    ]
    assert keys(first + second) == ["op-0", "op-1"]


async def test_renew_and_release_leases__return_each_operations_size(store):
    await due_operations(store, 2)
    leased = await lease(store)
    keys_of = [(r.caller_did, r.operation_id) for r in leased]

    renewed = await store.leasing.renew_leases(TOKEN, LEASE_MS, keys_of)
    released = await store.leasing.release_leases(TOKEN, keys_of)

    assert renewed.sizes == leased.sizes
    assert all(size > 512 for size in renewed.sizes)
    # Released, an operation no longer carries its lease token.
    assert released.sizes == [size - len(TOKEN) for size in leased.sizes]


async def claimed_in_one_batch(store, clock, sources):
    """Claim ``op-0`` … in one ``claim_operations``, ``op-n`` of entity ``sources[n]``."""
    claims = [
        claim(operation_id=f"op-{n}", source_id=source, lease_expires_at=clock() + LEASE_MS)
        for n, source in enumerate(sources)
    ]
    results = await store.batches.claim_operations(claims)
    assert {result.status for result in results} == {"claimed"}
    return [result.operation for result in results]


def leased_in(records, clock):
    return sorted(r.operation_id for r in records if r.lease_expires_at == clock() + LEASE_MS)


async def test_claim_operations__two_of_one_entity_lease_the_first_only(store, clock):
    first, second = await claimed_in_one_batch(store, clock, ["evt-1", "evt-1"])

    assert first.lease_expires_at == clock() + LEASE_MS
    assert second.lease_expires_at == clock() - 1
    assert second.next_attempt_at is None


async def test_claim_operations__a_capped_account_leases_up_to_its_cap(store, clock):
    await store.accounts.set_account_limit("calendar", "acct-1", 2)

    records = await claimed_in_one_batch(store, clock, [f"evt-{n}" for n in range(5)])

    assert leased_in(records, clock) == ["op-0", "op-1"]
    assert {r.lease_expires_at for r in records[2:]} == {clock() - 1}
    (account,) = await store.accounts.list_accounts("calendar")
    assert account.in_flight == 2


async def test_claim_operations__the_cap_counts_leases_already_held(store, clock):
    await store.accounts.set_account_limit("calendar", "acct-1", 2)
    await claimed_operation(store, operation_id="held", source_id="evt-held")

    records = await claimed_in_one_batch(store, clock, [f"evt-{n}" for n in range(3)])

    assert leased_in(records, clock) == ["op-0"]


async def test_claim_operations__a_throttled_account_leases_none(store, clock):
    await store.accounts.throttle_account("calendar", "acct-1", 1_000)

    records = await claimed_in_one_batch(store, clock, [f"evt-{n}" for n in range(3)])

    assert leased_in(records, clock) == []
    assert {r.lease_expires_at for r in records} == {clock() - 1}


async def test_claim_operations__an_entity_already_stored_is_claimed_unleased(store, clock):
    await claimed_operation(store, operation_id="older", source_id="evt-0")

    records = await claimed_in_one_batch(store, clock, ["evt-0", "evt-1"])

    assert leased_in(records, clock) == ["op-1"]


async def test_claim_operations__creates_every_account(store, clock):
    claims = [
        claim(operation_id=f"op-{n}", account_key=f"acct-{n}", lease_expires_at=clock() + LEASE_MS)
        for n in range(3)
    ]

    await store.batches.claim_operations(claims)

    loads = await store.accounts.list_accounts("calendar")
    assert [(load.account.account_key, load.in_flight) for load in loads] == [
        ("acct-0", 1),
        ("acct-1", 1),
        ("acct-2", 1),
    ]


async def test_renew_leases__the_holder_only_and_not_lapsed(store, clock):
    await due_operations(store, 3)
    leased = await lease(store, limit=2)
    keys_of = [(r.caller_did, r.operation_id) for r in leased]
    clock.advance(1000)

    renewed = await store.leasing.renew_leases(
        TOKEN, 60_000, [*keys_of, ("did:key:caller", "op-2")]
    )
    assert [r.operation_id for r in renewed] == keys(leased)
    assert {r.lease_expires_at for r in renewed} == {clock() + 60_000}

    assert await store.leasing.renew_leases("stranger", 60_000, keys_of) == []
    clock.advance(60_001)
    assert await store.leasing.renew_leases(TOKEN, 60_000, keys_of) == []


async def test_renew_leases__a_tenant_renews_only_its_calls(store):
    await due_operations(store, 1)
    (leased,) = await lease(store)

    key = [(leased.caller_did, leased.operation_id)]
    assert await store.leasing.renew_leases(TOKEN, 60_000, key, caller_did="did:key:other") == []


async def test_release_leases__the_holder_only(store):
    await due_operations(store, 2)
    leased = await lease(store)
    keys_of = [(r.caller_did, r.operation_id) for r in leased]

    assert await store.leasing.release_leases("stranger", keys_of) == []
    released = await store.leasing.release_leases(TOKEN, keys_of)

    assert [r.lease_token for r in released] == [None, None]
    assert keys(await lease(store)) == keys(leased)


async def test_release_leases__a_key_named_twice_releases_nothing(store):
    await insert_operations(store, [due_record(store, n) for n in range(2)])
    leased = await lease(store)
    keys_of = [(r.caller_did, r.operation_id) for r in leased]

    with pytest.raises(InvalidInput):
        await store.leasing.release_leases(TOKEN, [*keys_of, keys_of[0]])

    assert [r.lease_token for r in await store.leasing.renew_leases(TOKEN, 1000, keys_of)] == [
        TOKEN,
        TOKEN,
    ]


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda s: s.leasing.renew_leases(TOKEN, 999, []), "leaseMs"),
        (lambda s: s.leasing.renew_leases("", 1000, []), "leaseToken"),
        (lambda s: s.leasing.renew_leases(TOKEN, 1000, [("", "x")]), "keys[0].callerDID"),
        (
            lambda s: s.leasing.release_leases(TOKEN, [("a", "b"), ("a", "b"), ("a", "")]),
            "keys[2].operationID",
        ),
        (lambda s: s.leasing.release_leases(TOKEN, [("x", "y")] * 501), "keys"),
        (
            lambda s: s.leasing.renew_leases(TOKEN, 1000, [("a", "b"), ("a", "c"), ("a", "b")]),
            "keys[2].operationID",
        ),
        (
            lambda s: s.leasing.release_leases(TOKEN, [("a", "b"), ("a", "b")]),
            "keys[1].operationID",
        ),
        (lambda s: s.leasing.claim_watches(999), "claimMs"),
        (lambda s: s.leasing.claim_watches(1000, limit=501), "limit"),
    ],
)
async def test_batch_leases__bad_input_names_the_field(store, call, field):
    with pytest.raises(InvalidInput) as raised:
        await call(store)

    assert raised.value.field == field


async def test_lease_operations__one_due_of_a_tenant_among_10000_of_another_in_first_50(store):
    others = [due_record(store, n, owner_did="did:key:big") for n in range(10_000)]
    mine = due_record(store, 20_000, owner_did="did:key:small", caller_did="did:key:small")
    await insert_operations(store, [*others, mine])

    leased = await lease(store, limit=50)

    assert len(leased) == 50
    assert ("did:key:small", "op-20000") in [(r.caller_did, r.operation_id) for r in leased]


async def test_lease_operations__owners_with_little_leave_the_rest_to_others(store):
    """On PostgreSQL the first walk takes limit/owners of each owner (here 4); the owners
    with less leave room that a deeper walk fills from the others, in fair order."""
    await insert_operations(
        store,
        [due_record(store, n, owner_did="a") for n in range(10)]
        + [due_record(store, 20, owner_did="b"), due_record(store, 21, owner_did="c")],
    )

    leased = await lease(store, limit=10)

    assert [r.operation_id for r in leased] == [
        "op-0",
        "op-20",
        "op-21",
        *(f"op-{n}" for n in range(1, 8)),
    ]


def by_owner(store, owners, each, **overrides):
    """``each`` due operations of each of ``owners`` owners, the owners' operations
    interleaved in due order, every third one deferred to a next attempt before them all."""
    records = []
    for n in range(owners * each):
        record = due_record(store, n, owner_did=f"owner-{n % owners:03}", **overrides)
        if n % 3 == 0:
            record = due_record(
                store,
                n,
                owner_did=f"owner-{n % owners:03}",
                next_attempt_at=record.created_at - 10_000,
                **overrides,
            )
        records.append(record)
    return records


def ids(records):
    return [record.operation_id for record in records]


async def test_lease_operations__many_owners_lease_in_fair_order(store):
    records = by_owner(store, 40, 3)
    await insert_operations(store, records)

    first = await lease(store, limit=20)
    second = await lease(store, limit=20)

    expected = fair_order(records)
    assert ids(first) == ids(expected[:20])
    assert ids(second) == ids(fair_order([r for r in records if r not in expected[:20]])[:20])


async def test_lease_operations__an_owner_filling_the_due_head_leaves_room_for_the_others(store):
    """One owner's 100 operations come first in due order, then 30 owners' one each: the
    head of the due order holds one owner, so the call is not one owner's first plus
    whatever comes next, but each owner's first."""
    big = [due_record(store, n, owner_did="big") for n in range(100)]
    others = [due_record(store, 200 + n, owner_did=f"owner-{n:02}") for n in range(30)]
    await insert_operations(store, [*big, *others])

    leased = await lease(store, limit=10)

    assert ids(leased) == ["op-0", *(f"op-{200 + n}" for n in range(9))]


async def test_lease_operations__many_owners_with_a_capped_account_fill_from_the_rest(store):
    capped = [
        due_record(store, n, owner_did=f"capped-{n:02}", account_key="acct-capped")
        for n in range(10)
    ]
    others = [due_record(store, 100 + n, owner_did=f"owner-{n:02}") for n in range(40)]
    await insert_operations(store, [*capped, *others])
    await store.accounts.set_account_limit("calendar", "acct-capped", 2)

    leased = await lease(store, limit=20)

    assert ids(leased) == ["op-0", "op-1", *(f"op-{100 + n}" for n in range(18))]


@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
async def test_lease_operations__the_per_owner_walk_is_planned_with_its_values(store):
    """A generic plan of the per-owner walk may read every owner's due rows for each owner:
    the walk runs in a transaction that plans it with its values (``custom_plans``)."""
    await due_operations(store, 5)
    seen = []
    store.db.statement_observer = lambda sql, values, tx: seen.append((sql, tx))
    try:
        leased = await lease(store, limit=5)
    finally:
        store.db.statement_observer = None

    walks = [(sql, tx) for sql, tx in seen if "RECURSIVE owner_accounts" in sql and "UPDATE" in sql]
    plans = [tx for sql, tx in seen if "plan_cache_mode = force_custom_plan" in sql]
    assert len(leased) == 5
    assert walks and all(tx is not None and tx in plans for _, tx in walks)


async def test_lease_operations__a_capped_owners_first_passes_to_the_next_owner_not_a_second(
    store, clock
):
    """For 2: A's only operation is on an account at its cap, B has 20 due early, D one due
    later. The head holds A and B, but only B's first has room: the call is B's first, then
    D's first (found past the head), never B's second."""
    held = due_record(
        store,
        -5,
        operation_id="held",
        owner_did="A",
        account_key="acct-capped",
        source_id="evt-held",
        lease_token="other",
        lease_expires_at=clock() + LEASE_MS,
    )
    await insert_operations(
        store,
        [
            held,
            due_record(store, 0, owner_did="A", account_key="acct-capped", source_id="evt-a1"),
            *(due_record(store, n, owner_did="B") for n in range(1, 21)),
            due_record(store, 100, owner_did="D"),
        ],
    )
    await store.accounts.set_account_limit("calendar", "acct-capped", 1)

    leased = await lease(store, limit=2)

    assert ids(leased) == ["op-1", "op-100"]


async def test_lease_operations__what_passes_max_bytes_ends_the_answer(store):
    """The fair order is B's first, C's first (too large for the bytes left), D's, B's
    second: the answer is B's first alone, a prefix of that order, not B's first and
    second."""
    records = [
        due_record(store, 0, owner_did="B"),
        due_record(store, 1, owner_did="B"),
        due_record(store, 2, owner_did="C", target="x" * 5000),
        due_record(store, 3, owner_did="D"),
    ]
    await insert_operations(store, records)
    stored = await store.operations.list_tracked_operations(OperationFilter(), max_bytes=10**9)

    leased = await lease(store, limit=2, max_bytes=2 * min(stored.sizes) + 200)

    assert ids(leased) == ["op-0"]


async def test_lease_operations__a_capped_accounts_backlog_leaves_every_call_full(store):
    """One account at its cap (5 leases held) with 300 operations due before everyone else's,
    and 300 due across 30 other owners, written at once with no ``ANALYZE`` after: each call
    leases a full batch of the others in fair order (each owner's k-th before any owner's
    (k+1)-th), none of the capped account, until the others have no due work left."""
    now = store.clock()
    for statement in capped_statements(store.db.is_postgres, now, due=300, owners=30):
        await store.db.write_all(sa.text(statement))
    taken: dict[str, int] = {}
    for _ in range(30):
        leased = await store.leasing.lease_operations("worker", 60_000, limit=10)
        assert len(leased) == 10
        assert {record.account_key for record in leased}.isdisjoint({"capped"})
        for record in leased:
            taken[record.owner_did] = taken.get(record.owner_did, 0) + 1
        assert max(taken.values()) - min(taken.values()) <= 1, taken
    assert sorted(taken.values()) == [10] * 30
    assert await store.leasing.lease_operations("worker", 60_000, limit=10) == []
    capped = await store.accounts.list_accounts("bench")
    assert [(a.account.account_key, a.in_flight) for a in capped if a.account.max_in_flight] == [
        ("capped", 5)
    ]


async def test_lease_operations__a_capped_account_with_room_gets_its_share_never_past_its_cap(
    store,
):
    """The capped case with room for 2 (2 of its 5 held leases released): each call is full
    while the others have due work, the capped account's first two (due before everyone
    else's) go in the first two calls, one each (its owner's first, then its second), and
    none after: its live leases reach its cap of 5 and stay there."""
    now = store.clock()
    for statement in capped_statements(store.db.is_postgres, now, due=300, owners=30):
        await store.db.write_all(sa.text(statement))
    await store.leasing.release_leases("bench-holder", [("did:bench:caller", "held-1")])
    await store.leasing.release_leases("bench-holder", [("did:bench:caller", "held-2")])
    capped_by_call = []
    for _ in range(30):
        leased = await store.leasing.lease_operations("worker", 60_000, limit=10)
        assert len(leased) == 10
        capped_by_call.append(sorted(r.operation_id for r in leased if r.account_key == "capped"))
    assert capped_by_call[:2] == [["capped-1"], ["capped-2"]]
    assert all(ids == [] for ids in capped_by_call[2:])
    accounts = await store.accounts.list_accounts("bench")
    assert [(a.account.account_key, a.in_flight) for a in accounts if a.account.max_in_flight] == [
        ("capped", 5)
    ]


@pytest.mark.parametrize("blocked", ["paused", "throttled"])
async def test_lease_operations__a_blocked_accounts_backlog_leaves_every_call_full(store, blocked):
    """A paused or throttled account with 300 operations due before everyone else's, and
    200 due across 20 other owners: each call leases a full batch of the others in fair
    order, none of the blocked account, until the others have no due work left."""
    backlog = [
        due_record(store, n, owner_did="did:key:blocked", account_key="acct-blocked")
        for n in range(300)
    ]
    others = [due_record(store, 1_000 + n, owner_did=f"owner-{n % 20:02}") for n in range(200)]
    await insert_operations(store, [*backlog, *others])
    if blocked == "paused":
        await store.pauses.pause_account("calendar", "acct-blocked")
    else:
        await store.accounts.throttle_account("calendar", "acct-blocked", 3_600_000)
    taken: dict[str, int] = {}
    for _ in range(20):
        leased = await lease(store, limit=10)
        assert len(leased) == 10
        assert {record.account_key for record in leased}.isdisjoint({"acct-blocked"})
        for record in leased:
            taken[record.owner_did] = taken.get(record.owner_did, 0) + 1
        assert max(taken.values()) - min(taken.values()) <= 1, taken
    assert sorted(taken.values()) == [10] * 20
    assert await lease(store, limit=10) == []


@pytest.mark.parametrize("blocked", ["paused", "throttled"])
async def test_lease_operations__an_owners_other_account_is_not_held_behind_a_blocked_backlog(
    store, blocked
):
    """Owner X has 100 operations due first on an account that may not lease (paused or
    throttled) and 5 later on an open account; 9 other owners have 5 each.
    Every call of 10 is each owner's next in fair order: X's open operations go one a call,
    beside the others', never behind its blocked backlog."""
    backlog = [due_record(store, n, owner_did="X", account_key="acct-blocked") for n in range(100)]
    mine = [due_record(store, 1_000 + n, owner_did="X") for n in range(5)]
    others = [due_record(store, 2_000 + n, owner_did=f"owner-{n % 9}") for n in range(45)]
    await insert_operations(store, [*backlog, *mine, *others])
    if blocked == "paused":
        await store.pauses.pause_account("calendar", "acct-blocked")
    else:
        await store.accounts.throttle_account("calendar", "acct-blocked", 3_600_000)

    calls = [await lease(store, limit=10) for _ in range(5)]

    assert [sorted({r.owner_did for r in leased}) for leased in calls] == [
        ["X", *(f"owner-{n}" for n in range(9))]
    ] * 5
    assert [r.operation_id for leased in calls for r in leased if r.owner_did == "X"] == ids(mine)


async def test_lease_operations__an_owners_other_account_is_not_held_behind_a_capped_backlog(
    store, clock
):
    """Owner X has an account at its cap of 1 (one lease held) with 100 operations due
    first (half of them deferred to a past next attempt), more than a call's limit, and 5
    due later on an open account; 9 other owners have 5 each. Every call of 10 is each
    owner's next in fair order: X's open operations go one a call, beside the others',
    never behind its capped backlog."""
    held = due_record(
        store,
        -5,
        operation_id="held",
        owner_did="X",
        account_key="acct-capped",
        source_id="evt-held",
        lease_token="other",
        lease_expires_at=clock() + LEASE_MS,
    )
    backlog = [
        due_record(
            store,
            n,
            owner_did="X",
            account_key="acct-capped",
            next_attempt_at=None if n % 2 else clock() - 999_500 + n,
        )
        for n in range(100)
    ]
    mine = [due_record(store, 1_000 + n, owner_did="X") for n in range(5)]
    others = [due_record(store, 2_000 + n, owner_did=f"owner-{n % 9}") for n in range(45)]
    await insert_operations(store, [held, *backlog, *mine, *others])
    await store.accounts.set_account_limit("calendar", "acct-capped", 1)

    calls = [await lease(store, limit=10) for _ in range(5)]

    assert [sorted({r.owner_did for r in leased}) for leased in calls] == [
        ["X", *(f"owner-{n}" for n in range(9))]
    ] * 5
    assert [r.operation_id for leased in calls for r in leased if r.owner_did == "X"] == ids(mine)


# Each account of one ``leaseOperations`` call or claim batch, and how many of its two
# operations a lease may take: no row, cap 0, cap 1, throttled until now (open) and until
# now + 1 (shut), paused on its own, and of a paused connector.
MIXED = {
    ("calendar", "absent"): 2,
    ("calendar", "cap-0"): 0,
    ("calendar", "cap-1"): 1,
    ("calendar", "throttle-ends-now"): 2,
    ("calendar", "throttled-1-more"): 0,
    ("calendar", "paused"): 0,
    ("mail", "absent"): 0,
}


async def mixed_accounts(store, clock):
    await store.accounts.set_account_limit("calendar", "cap-0", 0)
    await store.accounts.set_account_limit("calendar", "cap-1", 1)
    await store.accounts.throttle_account("calendar", "throttle-ends-now", 999)
    await store.accounts.throttle_account("calendar", "throttled-1-more", 1_000)
    await store.pauses.pause_account("calendar", "paused")
    await store.pauses.pause_account("mail", None)
    clock.advance(999)


def mixed_claims(clock, leased=True):
    return [
        claim(
            operation_id=f"{connector}-{key}-{n}",
            connector_name=connector,
            account_key=key,
            source_id=f"evt-{connector}-{key}-{n}",
            lease_token="lease-A" if leased else None,
            lease_expires_at=clock() + LEASE_MS if leased else None,
        )
        for connector, key in MIXED
        for n in range(2)
    ]


def leased_by_account(records, clock):
    counts = dict.fromkeys(MIXED, 0)
    for r in records:
        if r.lease_token is not None and r.lease_expires_at >= clock():
            counts[(r.connector_name, r.account_key)] += 1
    return counts


async def test_lease_operations__one_call_over_accounts_open_capped_throttled_and_paused(
    store, clock
):
    await mixed_accounts(store, clock)
    for c in mixed_claims(clock, leased=False):
        await store.operations.claim_operation(c)

    leased = await lease(store, limit=50)

    assert leased_by_account(leased, clock) == MIXED


async def test_claim_operations__one_batch_over_accounts_open_capped_throttled_and_paused(
    store, clock
):
    await mixed_accounts(store, clock)

    results = await store.batches.claim_operations(mixed_claims(clock))

    assert leased_by_account([r.operation for r in results], clock) == MIXED


async def test_claim_operation__each_over_accounts_open_capped_throttled_and_paused(store, clock):
    await mixed_accounts(store, clock)

    results = [await store.operations.claim_operation(c) for c in mixed_claims(clock)]

    assert leased_by_account([r.operation for r in results], clock) == MIXED


async def test_acquire_lease__each_over_accounts_open_capped_throttled_and_paused(store, clock):
    await mixed_accounts(store, clock)
    claims = mixed_claims(clock, leased=False)
    for c in claims:
        await store.operations.claim_operation(c)

    acquired = [
        await store.operations.acquire_lease(c.caller_did, c.operation_id, TOKEN, clock() + 1000)
        for c in claims
    ]

    assert leased_by_account([r for r in acquired if r is not None], clock) == MIXED
