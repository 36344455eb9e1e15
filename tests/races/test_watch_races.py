"""Watch writes raced for real: each call in its own asyncio task (its own connection), on
both backends. Ingress arms once per new winner, a verification never ends VERIFIED
against a winner an ingress already replaced, and one claim wins."""

import asyncio

from tests.factories import LEASE_MS, pending_watch, reread_watch, verified_watch
from tests.races.test_operation_races import race

DUE_MS = 60_000


async def test_record_ingress__20_concurrent_same_winner_generation_rises_once(store, clock):
    watch = await verified_watch(store, "digest-1")

    results = await race(
        store.watches.record_ingress("doc-1", "digest-2", clock.now + n) for n in range(20)
    )

    outcomes = [result.outcome for [result] in results]
    assert outcomes.count("opened") == 1 and outcomes.count("noop") == 19
    stored = await reread_watch(store, watch)
    assert stored.repair_generation == watch.repair_generation + 1
    assert stored.observed_winner_digest == "digest-2"
    assert stored.version == watch.version + 1
    assert await store.winners.read_winner("doc-1") == "digest-2"


async def test_record_verification__ingress_between_fetch_and_record_never_verifies_old(
    store, clock
):
    watch = await pending_watch(store, "digest-1")
    fetched = asyncio.Event()
    ingested = asyncio.Event()

    async def verifier():
        provider_digest = await store.winners.read_winner("doc-1")
        fetched.set()
        await ingested.wait()
        return await store.watches.record_verification(
            watch.identity,
            generation=watch.repair_generation,
            fetched_digest=provider_digest,
            max_attempts=3,
            due_at=clock.now + DUE_MS,
        )

    async def ingress():
        await fetched.wait()
        try:
            return await store.watches.record_ingress("doc-1", "digest-2", clock.now)
        finally:
            ingested.set()

    verification, [armed] = await race([verifier(), ingress()])

    assert armed.outcome == "coalesced"
    assert verification.outcome == "pending"
    stored = await reread_watch(store, watch)
    assert stored.verification_status == "pending_verification"
    assert stored.verified_state_digest is None
    assert stored.observed_winner_digest == "digest-1"
    assert stored.verification_attempts == 1


async def test_record_verification__racing_ingress_looped_never_verified_against_old(store, clock):
    watch = await pending_watch(store, "digest-0")
    seen = set()
    for n in range(1, 16):
        current = await reread_watch(store, watch)
        provider_digest = await store.winners.read_winner("doc-1")

        verify = store.watches.record_verification(
            watch.identity,
            generation=current.repair_generation,
            fetched_digest=provider_digest,
            max_attempts=1000,
            due_at=clock.now,
        )
        ingress = store.watches.record_ingress("doc-1", f"digest-{n}", clock.now)
        if n % 2:
            verification, [armed] = await race([verify, ingress])
        else:
            [armed], verification = await race([ingress, verify])

        seen.add((verification.outcome, armed.outcome))
        stored = await reread_watch(store, watch)
        winner = await store.winners.read_winner("doc-1")
        assert winner == f"digest-{n}"
        assert not (
            stored.verification_status == "verified" and stored.verified_state_digest != winner
        )
        if verification.outcome == "verified":
            assert verification.watch.verified_state_digest == provider_digest
            assert armed.outcome == "opened"
            assert stored.repair_generation == current.repair_generation + 1
        else:
            assert verification.outcome == "pending"
            assert stored.verified_state_digest != winner
    assert seen <= {("verified", "opened"), ("pending", "coalesced")}


async def test_claim_watch_attempt__20_concurrent_one_applies(store, clock):
    watch = await pending_watch(store)
    clock.now = watch.next_attempt_at

    results = await race(
        store.watches.claim_watch_attempt(
            watch.identity, watch.repair_generation, clock.now + LEASE_MS + n, clock.now
        )
        for n in range(20)
    )

    applied = [result for result in results if result is not None]
    assert len(applied) == 1
    assert await reread_watch(store, watch) == applied[0]


async def test_arm_watch__10_concurrent_manual_each_opens_one_generation(store, clock):
    watch = await verified_watch(store)

    results = await race(
        store.watches.arm_watch(watch.identity, "manual", clock.now + n) for n in range(10)
    )

    assert sorted(result.watch.repair_generation for result in results) == list(
        range(watch.repair_generation + 1, watch.repair_generation + 11)
    )
    stored = await reread_watch(store, watch)
    assert stored.repair_generation == watch.repair_generation + 10
