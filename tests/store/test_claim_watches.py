"""claim_watches (store.leasing) on both backends: due pending watches claimed in a batch,
fair across owners, a lapsed claim's takeover counted, every refusal."""

from tests.leasing_factories import due_watch_record, insert_watches

CLAIM_MS = 30_000


def sources(records):
    return [record.source_id for record in records]


async def test_claim_watches__claims_due_unclaimed_watches(store, clock):
    await insert_watches(
        store,
        [
            due_watch_record(store, 0),
            due_watch_record(store, 1, next_attempt_at=clock() + 1),
            due_watch_record(store, 2, verification_status="verified"),
            due_watch_record(store, 3, claimed_until=clock() + 1),
            due_watch_record(store, 4, next_attempt_at=clock()),
        ],
    )

    claimed = await store.leasing.claim_watches(CLAIM_MS)

    assert sources(claimed) == ["evt-0", "evt-4"]
    assert {w.claimed_until for w in claimed} == {clock() + CLAIM_MS}
    assert [await store.watches.get_watch(w.identity) for w in claimed] == claimed
    assert await store.leasing.claim_watches(CLAIM_MS) == []


async def test_claim_watches__each_call_of_one_shape_claims_at_its_own_now_and_length(store, clock):
    await insert_watches(store, [due_watch_record(store, n) for n in range(2)])

    first = await store.leasing.claim_watches(CLAIM_MS, limit=1)
    clock.advance(1_000)
    second = await store.leasing.claim_watches(2 * CLAIM_MS, limit=1)

    assert [w.claimed_until for w in first] == [clock() - 1_000 + CLAIM_MS]
    assert [w.claimed_until for w in second] == [clock() + 2 * CLAIM_MS]
    assert sorted(sources(first + second)) == ["evt-0", "evt-1"]


async def test_claim_watches__fair_across_owners(store):
    big = [due_watch_record(store, n, owner_did="did:key:big") for n in range(20)]
    small = due_watch_record(store, 100, owner_did="did:key:small")
    await insert_watches(store, [*big, small])

    claimed = await store.leasing.claim_watches(CLAIM_MS, limit=3)

    assert sources(claimed) == ["evt-0", "evt-100", "evt-1"]


async def test_claim_watches__owner_and_connector_filters(store):
    await insert_watches(
        store,
        [
            due_watch_record(store, 0),
            due_watch_record(store, 1, owner_did="did:key:other"),
            due_watch_record(store, 2, connector_name="crm"),
        ],
    )

    assert sources(await store.leasing.claim_watches(CLAIM_MS, owner_did="did:key:other")) == [
        "evt-1"
    ]
    assert sources(await store.leasing.claim_watches(CLAIM_MS, connector_name="crm")) == ["evt-2"]


async def test_claim_watches__takeover_of_a_lapsed_claim_counts_the_attempt(store, clock):
    await insert_watches(store, [due_watch_record(store, 0)])
    (first,) = await store.leasing.claim_watches(CLAIM_MS)
    assert first.verification_attempts == 0

    clock.advance(CLAIM_MS)
    (taken,) = await store.leasing.claim_watches(CLAIM_MS)

    assert taken.verification_attempts == 1
    assert taken.claimed_until == clock() + CLAIM_MS


async def test_claim_watches__claims_only_what_max_bytes_fits(store):
    await insert_watches(store, [due_watch_record(store, n) for n in range(6)])

    first = await store.leasing.claim_watches(CLAIM_MS, limit=50, max_bytes=1)
    one = first.sizes[0]
    more = await store.leasing.claim_watches(CLAIM_MS, limit=50, max_bytes=2 * one + one // 2)
    none = await store.leasing.claim_watches(
        CLAIM_MS, limit=50, max_bytes=one // 2, at_least_one=False
    )

    assert sources(first) == ["evt-0"]
    assert sources(more) == ["evt-1", "evt-2"] and more.sizes == [one, one]
    assert list(none) == []
    assert sources(await store.leasing.claim_watches(CLAIM_MS, limit=50)) == [
        "evt-3",
        "evt-4",
        "evt-5",
    ]
