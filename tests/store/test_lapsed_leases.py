"""A lapsed lease taken up again is a new lease, on both backends: renewing it, acquiring it,
marking a send on it (single and batch) pass the leasing guard (pause, throttle, cap, one
live lease per provider entity) or are refused; ``renewLeases`` renews no lapsed lease; a
lapsed watch claim is claimed again only past the pause guard. And the bound every lease
deadline shares with ``leaseMs``."""

import pytest

from store.errors import InvalidInput
from store.operations import SendMark
from tests.factories import LEASE_MS, claim, claimed_operation, claimed_watch

HOLDER = "lease-A"
PEER = "lease-B"


async def lapsed_beside_a_peer(store, clock):
    """X leased to ``HOLDER`` in an account capped at 1 beside Y (another entity of the
    account, enqueued first); X lapses and a peer leases Y in the freed slot. Returns X."""
    waiting = await claimed_operation(
        store, operation_id="op-0", source_id="evt-0", lease_token=None, lease_expires_at=None
    )
    assert waiting.lease_token is None
    x = await claimed_operation(store)
    await store.accounts.set_account_limit("calendar", "acct-1", 1)
    clock.advance(LEASE_MS + 1)
    [y] = await store.leasing.lease_operations(PEER, LEASE_MS, limit=1)
    assert y.operation_id == "op-0"
    return x


async def in_flight(store):
    [account] = await store.accounts.list_accounts("calendar")
    return account.in_flight


async def lapsed(store, clock, shut):
    """X leased to ``HOLDER``, its account then shut by ``shut`` ("pause" or "throttle"),
    and X's lease lapsed. Returns X."""
    x = await claimed_operation(store)
    if shut == "pause":
        await store.pauses.pause_account("calendar", "acct-1")
    else:
        await store.accounts.throttle_account("calendar", "acct-1", 10 * LEASE_MS)
    clock.advance(LEASE_MS + 1)
    return x


async def test_renew_lease__a_lapsed_lease_is_refused_once_a_peer_filled_the_cap(store, clock):
    x = await lapsed_beside_a_peer(store, clock)

    renewed = await store.operations.renew_lease(
        x.caller_did, x.operation_id, HOLDER, lease_ms=LEASE_MS
    )

    assert renewed is None
    assert await in_flight(store) == 1
    stored = await store.operations.get_operation(x.caller_did, x.operation_id)
    assert stored.lease_expires_at == x.lease_expires_at


@pytest.mark.parametrize("shut", ["pause", "throttle"])
async def test_renew_lease__a_lapsed_lease_is_refused_while_the_account_is_shut(store, clock, shut):
    x = await lapsed(store, clock, shut)

    renewed = await store.operations.renew_lease(
        x.caller_did, x.operation_id, HOLDER, clock() + LEASE_MS
    )

    assert renewed is None


async def test_renew_lease__a_lapsed_lease_the_guard_allows_is_renewed(store, clock):
    x = await claimed_operation(store)
    await store.accounts.set_account_limit("calendar", "acct-1", 1)
    clock.advance(LEASE_MS + 1)

    renewed = await store.operations.renew_lease(
        x.caller_did, x.operation_id, HOLDER, lease_ms=LEASE_MS
    )

    assert renewed is not None and renewed.lease_expires_at == clock() + LEASE_MS
    assert await in_flight(store) == 1


async def test_renew_lease__a_live_lease_at_the_cap_is_renewed(store, clock):
    x = await claimed_operation(store)
    await store.accounts.set_account_limit("calendar", "acct-1", 1)
    await store.pauses.pause_account("calendar", "acct-1")

    renewed = await store.operations.renew_lease(
        x.caller_did, x.operation_id, HOLDER, lease_ms=LEASE_MS
    )

    assert renewed is not None and renewed.lease_expires_at == clock() + LEASE_MS


async def test_renew_leases__a_lapsed_lease_is_not_renewed(store, clock):
    x = await lapsed_beside_a_peer(store, clock)

    renewed = await store.leasing.renew_leases(HOLDER, LEASE_MS, [(x.caller_did, x.operation_id)])

    assert list(renewed) == []
    assert await in_flight(store) == 1


async def test_acquire_lease__a_lapsed_lease_is_refused_once_a_peer_filled_the_cap(store, clock):
    x = await lapsed_beside_a_peer(store, clock)

    taken = await store.operations.acquire_lease(
        x.caller_did, x.operation_id, HOLDER, lease_ms=LEASE_MS
    )

    assert taken is None
    assert await in_flight(store) == 1


@pytest.mark.parametrize("shut", ["pause", "throttle"])
async def test_acquire_lease__a_lapsed_lease_is_refused_while_the_account_is_shut(
    store, clock, shut
):
    x = await lapsed(store, clock, shut)

    taken = await store.operations.acquire_lease(
        x.caller_did, x.operation_id, HOLDER, lease_ms=LEASE_MS
    )

    assert taken is None


async def test_mark_send_started__on_a_lapsed_lease_is_refused_once_a_peer_filled_the_cap(
    store, clock
):
    x = await lapsed_beside_a_peer(store, clock)

    marked = await store.operations.mark_send_started(x.caller_did, x.operation_id, HOLDER, "run-1")
    [batch] = await store.batches.mark_sends_started(
        [SendMark(x.caller_did, x.operation_id, HOLDER, "run-1")]
    )

    assert marked is None and batch is None
    stored = await store.operations.get_operation(x.caller_did, x.operation_id)
    assert stored.send_marker is None


@pytest.mark.parametrize("shut", ["pause", "throttle"])
async def test_mark_send_started__on_a_lapsed_lease_is_refused_while_the_account_is_shut(
    store, clock, shut
):
    x = await lapsed(store, clock, shut)

    marked = await store.operations.mark_send_started(x.caller_did, x.operation_id, HOLDER, "run-1")
    [batch] = await store.batches.mark_sends_started(
        [SendMark(x.caller_did, x.operation_id, HOLDER, "run-1")]
    )

    assert marked is None and batch is None


async def test_mark_send_started__on_a_lapsed_lease_the_guard_allows_applies(store, clock):
    x = await claimed_operation(store)
    clock.advance(LEASE_MS + 1)

    [batch] = await store.batches.mark_sends_started(
        [SendMark(x.caller_did, x.operation_id, HOLDER, "run-1")]
    )

    assert batch is not None and batch.send_marker == "run-1"


async def test_mark_send_started__on_a_live_lease_applies_while_paused(store, clock):
    x = await claimed_operation(store)
    await store.pauses.pause_account("calendar", "acct-1")

    marked = await store.operations.mark_send_started(x.caller_did, x.operation_id, HOLDER, "run-1")

    assert marked is not None and marked.send_marker == "run-1"


async def test_claim_watch_attempt__a_lapsed_claim_is_not_taken_again_while_paused(store, clock):
    held = await claimed_watch(store, clock)
    await store.pauses.pause_account("calendar", "acct-1")
    clock.advance(LEASE_MS + 1)

    again = await store.watches.claim_watch_attempt(
        held.identity, held.repair_generation, None, lease_ms=LEASE_MS
    )
    batch = await store.leasing.claim_watches(LEASE_MS, limit=10)

    assert again is None and list(batch) == []


# --- the bound of every lease deadline ---------------------------------------------------


@pytest.mark.parametrize("offset", [10 * 365 * 86_400_000, 3_600_001, 999, 0, -1])
async def test_lease_deadlines__past_the_bound_are_refused_naming_the_field(store, clock, offset):
    held = await claimed_watch(store, clock, operation_id="op-5", source_id="evt-5")
    x = await claimed_operation(store)
    at = clock() + offset
    calls = [
        (
            lambda: store.operations.claim_operation(
                claim(operation_id="op-9", source_id="evt-9", lease_expires_at=at)
            ),
            "leaseExpiresAt",
        ),
        (
            lambda: store.batches.claim_operations(
                [claim(operation_id="op-9", source_id="evt-9", lease_expires_at=at)]
            ),
            "items[0].leaseExpiresAt",
        ),
        (
            lambda: store.operations.acquire_lease(x.caller_did, x.operation_id, HOLDER, at),
            "leaseExpiresAt",
        ),
        (
            lambda: store.operations.renew_lease(x.caller_did, x.operation_id, HOLDER, at),
            "leaseExpiresAt",
        ),
        (
            lambda: store.watches.claim_watch_attempt(held.identity, held.repair_generation, at),
            "until",
        ),
    ]
    for call, field in calls:
        with pytest.raises(InvalidInput) as refused:
            await call()
        assert refused.value.field == field

    assert await store.operations.get_operation(x.caller_did, "op-9") is None
    stored = await store.operations.get_operation(x.caller_did, x.operation_id)
    assert stored.lease_expires_at == x.lease_expires_at


@pytest.mark.parametrize("offset", [1_000, 3_600_000])
async def test_lease_deadlines__the_bound_itself_is_accepted(store, clock, offset):
    x = await claimed_operation(store)

    claimed = await store.operations.claim_operation(
        claim(operation_id="op-9", source_id="evt-9", lease_expires_at=clock() + offset)
    )
    renewed = await store.operations.renew_lease(
        x.caller_did, x.operation_id, HOLDER, clock() + offset
    )

    assert claimed.status == "claimed"
    assert renewed is not None and renewed.lease_expires_at == clock() + offset
