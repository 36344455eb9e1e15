"""A takeover that counted a lapsed run's abandoned send, on both backends: whatever the new
holder then does to give the lease up (release it, release many, let it lapse), the
abandoned-send marker stays for the next holder, and ``take_lease`` says whether the lease
counted one."""

import pytest

from store.operations import ABANDONED_SEND_MARKER
from tests.factories import LEASE_MS, marked_operation

KEY = ("did:key:caller", "op-1")


async def give_up_release(store, clock):
    return await store.operations.release_lease(*KEY, "lease-B")


async def give_up_releases(store, clock):
    [released] = await store.leasing.release_leases("lease-B", [KEY])
    return released


async def give_up_lapse(store, clock):
    clock.advance(LEASE_MS + 1)
    return await store.operations.get_operation(*KEY)


@pytest.mark.parametrize("give_up", [give_up_release, give_up_releases, give_up_lapse])
async def test_a_takeover_given_up_keeps_the_abandoned_marker(store, clock, give_up):
    await marked_operation(store, lease_expires_at=clock() + 1_000)
    clock.advance(2_000)
    taken, counted = await store.operations.take_lease(*KEY, "lease-B", lease_ms=LEASE_MS)
    assert counted and taken.attempts == 1 and taken.send_marker == ABANDONED_SEND_MARKER

    given_up = await give_up(store, clock)
    [next_lease] = await store.leasing.lease_operations("lease-C", LEASE_MS, limit=10)

    assert given_up is not None and given_up.send_marker == ABANDONED_SEND_MARKER
    assert next_lease.send_marker == ABANDONED_SEND_MARKER
    assert next_lease.attempts == 1
