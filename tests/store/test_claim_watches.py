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


def in_fair_order(records):
    """``records`` in claim_watches' order: each owner's k-th before any owner's (k+1)-th,
    then next attempt, then identity."""
    ranks = {}
    ranked = []
    for record in sorted(records, key=lambda r: (r.next_attempt_at, r.identity.parts)):
        rank = ranks[record.owner_did] = ranks.get(record.owner_did, 0) + 1
        ranked.append(((rank, record.next_attempt_at, record.identity.parts), record))
    return [record for _, record in sorted(ranked, key=lambda pair: pair[0])]


async def test_claim_watches__many_owners_claim_in_fair_order(store):
    """400 watches of 40 owners, interleaved: the head of the due order (80 for 10) holds
    more than 10 owners, and their firsts are the first 10 in fair order."""
    records = [
        due_watch_record(store, n, owner_did=f"owner-{n % 40:02}", next_attempt_at=1_000 + n)
        for n in range(400)
    ]
    await insert_watches(store, records)

    first = await store.leasing.claim_watches(CLAIM_MS, limit=10)
    second = await store.leasing.claim_watches(CLAIM_MS, limit=10)

    expected = in_fair_order(records)
    assert sources(first) == sources(expected[:10])
    rest = [r for r in records if r.source_id not in sources(first)]
    assert sources(second) == sources(in_fair_order(rest)[:10])


async def test_claim_watches__an_owner_filling_the_due_head_leaves_room_for_the_others(store):
    """One owner's 200 watches come first in due order, then 30 owners' one each: the head
    holds one owner and not every due watch, so every due watch is ranked."""
    big = [due_watch_record(store, n, owner_did="big") for n in range(200)]
    others = [due_watch_record(store, 500 + n, owner_did=f"owner-{n:02}") for n in range(30)]
    await insert_watches(store, [*big, *others])

    claimed = await store.leasing.claim_watches(CLAIM_MS, limit=10)

    assert sources(claimed) == ["evt-0", *(f"evt-{500 + n}" for n in range(9))]


async def test_claim_watches__a_head_of_exactly_its_length_is_not_every_due_watch(store):
    """For 2 the head is 16 long: 16 watches of one owner fill it, and one of another owner
    comes after; the head cannot tell it holds every due watch, so every one is ranked."""
    big = [due_watch_record(store, n, owner_did="big") for n in range(16)]
    await insert_watches(store, [*big, due_watch_record(store, 100, owner_did="small")])

    claimed = await store.leasing.claim_watches(CLAIM_MS, limit=2)

    assert sources(claimed) == ["evt-0", "evt-100"]


async def test_claim_watches__a_head_holding_every_due_watch_claims_in_one_statement(store):
    await insert_watches(
        store, [due_watch_record(store, n, owner_did=f"owner-{n % 3}") for n in range(12)]
    )
    writes = []
    store.db.statement_observer = lambda sql, values, tx: writes.append(sql)
    try:
        claimed = await store.leasing.claim_watches(CLAIM_MS, limit=5)
    finally:
        store.db.statement_observer = None

    claims = [sql for sql in writes if sql.lstrip().startswith(("WITH", "UPDATE"))]
    assert sources(claimed) == ["evt-0", "evt-1", "evt-2", "evt-3", "evt-4"]
    assert len(claims) == 1, claims


async def test_claim_watches__what_passes_max_bytes_ends_the_answer(store):
    """The fair order is B's first, C's first (too large for the bytes left), D's, B's
    second: the answer is B's first alone, not B's first and second."""
    await insert_watches(
        store,
        [
            due_watch_record(store, 0, owner_did="B"),
            due_watch_record(store, 1, owner_did="B"),
            due_watch_record(store, 2, owner_did="C", observed_winner_digest="x" * 5000),
            due_watch_record(store, 3, owner_did="D"),
        ],
    )
    one = (await store.leasing.claim_watches(CLAIM_MS, limit=1, owner_did="D")).sizes[0]
    await insert_watches(store, [due_watch_record(store, 4, owner_did="D")])

    claimed = await store.leasing.claim_watches(CLAIM_MS, limit=2, max_bytes=2 * one + 200)

    assert sources(claimed) == ["evt-0"]
