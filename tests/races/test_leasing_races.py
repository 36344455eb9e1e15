"""Leasing raced for real, on both backends: many leasers (and acquireLease and claims) at
once, each in its own task and connection. No operation is held by two live leases, no
account passes its cap, no provider entity has two live leases, and no call fails (but a
leaser's retryable DatabaseBusy, which it sends again)."""

import asyncio
from collections import Counter

import asyncpg
import pytest
import sqlalchemy as sa

from store import ConnectorStore
from store.database import Database
from store.errors import DatabaseBusy
from store.operations import OperationFilter
from tests.factories import LEASE_MS, claim
from tests.leasing_factories import (
    due_operations,
    due_record,
    due_watch_record,
    insert_operations,
    insert_watches,
)

LEASERS = 16


async def race(calls):
    results = await asyncio.gather(
        *(asyncio.create_task(call) for call in calls), return_exceptions=True
    )
    errors = [result for result in results if isinstance(result, BaseException)]
    assert errors == [], errors
    return results


class Progress:
    """The calls racers have completed, which an operator paces its changes by: it waits for
    calls to run beside each change, not for a length of time."""

    def __init__(self) -> None:
        self.calls = 0
        self._waiting: list[tuple[int, asyncio.Future[None]]] = []

    def tick(self) -> None:
        """One more call completed."""
        self.calls += 1
        for target, future in self._waiting:
            if self.calls >= target and not future.done():
                future.set_result(None)

    async def past(self, calls: int) -> None:
        """Returns once ``calls`` more calls than now have completed."""
        future = asyncio.get_running_loop().create_future()
        self._waiting.append((self.calls + calls, future))
        try:
            await future
        finally:
            self._waiting = [(t, f) for t, f in self._waiting if f is not future]


async def drain(store: ConnectorStore, token: str, limit: int = 50) -> list:
    """Lease until a call leases nothing; every lease stays live (the clock stands). A call
    refused ``DatabaseBusy`` (retryable: it waited past the lock timeout, as 16 leasers on
    one capped account can on a machine whose commits are slow) is sent again, as a worker
    does; it leased nothing."""
    leased = []
    while True:
        try:
            batch = await store.leasing.lease_operations(token, LEASE_MS, limit=limit)
        except DatabaseBusy:
            continue
        if not batch:
            return leased
        leased.extend(batch)


async def live_leases(store: ConnectorStore) -> list:
    now = store.clock()
    rows = await store.operations.list_tracked_operations(OperationFilter())
    return [
        r for r in rows if r.lease_token and r.lease_expires_at >= now and r.state == "attempted"
    ]


@pytest.mark.parametrize("owners", [1, 100])
async def test_lease_operations__16_leasers_lease_each_of_1000_exactly_once(store, owners):
    """One owner: each call walks the owner; 100 owners, 20 a call: each call reads the head
    of the due order first (``store.leasing.HEAD``)."""
    await insert_operations(
        store, [due_record(store, n, owner_did=f"owner-{n % owners}") for n in range(1000)]
    )

    results = await race(drain(store, f"leaser-{n}", limit=20) for n in range(LEASERS))

    counts = Counter((r.caller_did, r.operation_id) for batch in results for r in batch)
    assert len(counts) == 1000
    assert set(counts.values()) == {1}
    assert len(await live_leases(store)) == 1000


@pytest.mark.parametrize("owners", [1, 50])
async def test_lease_operations__concurrent_leasers_keep_the_cap(store, owners):
    await insert_operations(
        store, [due_record(store, n, owner_did=f"owner-{n % owners}") for n in range(200)]
    )
    await store.accounts.set_account_limit("calendar", "acct-1", 2)

    results = await race(drain(store, f"leaser-{n}", limit=5) for n in range(LEASERS))

    assert sum(len(batch) for batch in results) == 2
    assert len(await live_leases(store)) == 2


async def test_acquire_lease__concurrent_with_leasers_keeps_the_cap(store, clock):
    await due_operations(store, 40)
    await store.accounts.set_account_limit("calendar", "acct-1", 2)
    acquires = [
        store.operations.acquire_lease("did:key:caller", f"op-{n}", f"acq-{n}", clock() + LEASE_MS)
        for n in range(0, 40, 2)
    ]

    await race([*acquires, *(drain(store, f"leaser-{n}", limit=3) for n in range(8))])

    assert len(await live_leases(store)) == 2


async def test_claim_operation__concurrent_claims_keep_the_cap(store, clock):
    await store.accounts.set_account_limit("calendar", "acct-1", 2)
    claims = [
        claim(
            operation_id=f"op-{n}",
            source_id=f"evt-{n}",
            lease_token=f"c-{n}",
            lease_expires_at=clock() + LEASE_MS,
        )
        for n in range(LEASERS * 2)
    ]

    results = await race(store.operations.claim_operation(c) for c in claims)

    assert {r.status for r in results} == {"claimed"}
    assert len(await live_leases(store)) == 2


async def test_claim_operation__concurrent_claims_of_one_entity_lease_one(store, clock):
    claims = [
        claim(operation_id=f"op-{n}", lease_token=f"c-{n}", lease_expires_at=clock() + LEASE_MS)
        for n in range(LEASERS * 2)
    ]

    await race(store.operations.claim_operation(c) for c in claims)

    assert len(await live_leases(store)) == 1


@pytest.mark.parametrize("owners", [1, 10])
async def test_lease_operations__concurrent_leasers_lease_one_per_entity(store, clock, owners):
    await insert_operations(
        store,
        [
            due_record(store, n, source_id=f"evt-{n % 10}", owner_did=f"owner-{n % 10 % owners}")
            for n in range(100)
        ],
    )
    acquires = [
        store.operations.acquire_lease("did:key:caller", f"op-{n}", f"acq-{n}", clock() + LEASE_MS)
        for n in range(100)
    ]

    await race([*acquires, *(drain(store, f"leaser-{n}", limit=7) for n in range(LEASERS))])

    live = await live_leases(store)
    entities = Counter(r.source_id for r in live)
    assert len(live) == 10
    assert set(entities.values()) == {1}
    assert all(int(r.operation_id[3:]) < 10 for r in live)


def batch_claims(clock, batch, sources):
    return [
        claim(
            operation_id=f"b{batch}-{n}",
            source_id=source,
            lease_token=f"b{batch}",
            lease_expires_at=clock() + LEASE_MS,
        )
        for n, source in enumerate(sources)
    ]


async def test_claim_operations__racing_batches_and_leasers_keep_the_cap(store, clock):
    await store.accounts.set_account_limit("calendar", "acct-1", 2)
    await due_operations(store, 40)
    batches = [
        store.batches.claim_operations(batch_claims(clock, b, [f"e{b}-{n}" for n in range(5)]))
        for b in range(LEASERS // 2)
    ]

    await race([*batches, *(drain(store, f"leaser-{n}", limit=3) for n in range(LEASERS // 2))])

    assert len(await live_leases(store)) == 2


async def test_claim_operations__racing_batches_and_leasers_lease_one_per_entity(store, clock):
    await insert_operations(
        store, [due_record(store, n, source_id=f"evt-{n % 5}") for n in range(20)]
    )
    await store.accounts.set_account_limit("calendar", "acct-1", None)
    sources = [f"evt-{n % 40}" for n in range(80)]
    batches = [
        store.batches.claim_operations(batch_claims(clock, b, sources)) for b in range(LEASERS - 4)
    ]

    await race([*batches, *(drain(store, f"leaser-{n}", limit=4) for n in range(4))])

    entities = Counter(r.source_id for r in await live_leases(store))
    assert set(entities) == {f"evt-{n}" for n in range(40)}
    assert set(entities.values()) == {1}


async def test_claim_watches__16_claimers_claim_each_of_300_once(store):
    await insert_watches(
        store, [due_watch_record(store, n, owner_did=f"o{n % 7}") for n in range(300)]
    )

    async def claimer():
        claimed = []
        while batch := await store.leasing.claim_watches(LEASE_MS, limit=20):
            claimed.extend(batch)
        return claimed

    results = await race(claimer() for _ in range(LEASERS))

    counts = Counter(w.identity for batch in results for w in batch)
    assert len(counts) == 300
    assert set(counts.values()) == {1}


async def holding_account(peer: asyncpg.Connection) -> asyncpg.transaction.Transaction:
    """A transaction of ``peer`` that holds account ``acct-1``'s row, as every path that
    takes a lease of it does (``store.accounts.touch``)."""
    transaction = peer.transaction()
    await transaction.start()
    await peer.execute(
        "UPDATE kubun_connector_account SET max_in_flight = max_in_flight "
        "WHERE connector_name = 'calendar' AND account_key = 'acct-1'"
    )
    return transaction


@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
async def test_lease_operations__a_capped_account_a_peer_holds_is_counted_after_its_commit(
    store, database_url, clock
):
    """A peer transaction holds the account (as every lease-taking path does) and has leased
    one of its operations, uncommitted: the leaser's statement cannot count that lease, so
    it skips the account, waits for the peer's lock, and counts afresh after the commit."""
    await due_operations(store, 2)
    await store.accounts.set_account_limit("calendar", "acct-1", 1)
    peer = await asyncpg.connect(database_url.replace("+asyncpg", ""))
    try:
        transaction = await holding_account(peer)
        await peer.execute(
            "UPDATE kubun_connector_operation SET lease_token = 'peer', lease_expires_at = $1 "
            "WHERE operation_id = 'op-1'",
            clock() + LEASE_MS,
        )
        leasing = asyncio.create_task(store.leasing.lease_operations("leaser", LEASE_MS, limit=5))
        while not await peer.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
            "AND datname = current_database()"
        ):
            assert not leasing.done(), leasing.result()
            await asyncio.sleep(0)
        await transaction.commit()
        leased = await leasing
    finally:
        await peer.close()

    assert leased == []
    assert [r.lease_token for r in await live_leases(store)] == ["peer"]


@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
async def test_lease_operations__a_wait_past_the_lock_timeout_returns_what_was_leased(
    store, database_url, clock
):
    """A peer holds a capped account's row: the first round leases the other account's
    operations and commits, skipping the capped one; the wait for that account's lock then
    passes the lock timeout. The call returns what its first round leased (refused, those
    leases would be held by a token its caller was never told of)."""
    await insert_operations(
        store,
        [due_record(store, n) for n in range(2)]
        + [due_record(store, 10 + n, account_key="acct-2") for n in range(3)],
    )
    await store.accounts.set_account_limit("calendar", "acct-1", 5)
    impatient = Database(database_url, lock_timeout_s=0.2)
    await impatient.connect()
    peer = await asyncpg.connect(database_url.replace("+asyncpg", ""))
    try:
        transaction = await holding_account(peer)
        leased = await ConnectorStore(impatient, clock=clock).leasing.lease_operations(
            "leaser", LEASE_MS, limit=5
        )
        await transaction.rollback()
    finally:
        await peer.close()
        await impatient.disconnect()

    assert sorted(r.operation_id for r in leased) == ["op-10", "op-11", "op-12"]
    assert sorted(r.operation_id for r in await live_leases(store)) == ["op-10", "op-11", "op-12"]


CAP_AND_LIVE = sa.text(
    "SELECT a.account_key, a.max_in_flight AS cap, (SELECT count(*) FROM "
    "kubun_connector_operation o WHERE o.connector_name = a.connector_name "
    "AND o.account_key = a.account_key AND o.state = 'attempted' "
    "AND o.lease_token IS NOT NULL AND o.lease_expires_at >= :now) AS n "
    "FROM kubun_connector_account a WHERE a.connector_name = 'calendar'"
)
# Each cap a new value (None between them), so an observer that sees one cap twice saw it
# unchanged in between.
CAPS = [3, None, 1, 5, 0, 2, None, 4, 7, None, 6, 8, 9, None, 10, 11]


async def test_caps_set_raised_lowered_and_cleared_while_leasing_are_never_passed(store, clock):
    """An operator sets, raises, lowers and clears the caps of two accounts while leasers
    (leaseOperations, acquireLease) and claim batches take and release leases of them and
    of an uncapped third: once an observer on its own connection sees an account within
    a cap, with every call in flight begun after that cap was set, it never sees that
    account past the same cap (a lowered cap lets held leases stay, no new one through). A
    leaseOperations statement begun before a cap was first set on an uncapped account does
    not see that cap, so calls begun before it are waited out."""
    await insert_operations(
        store,
        [
            due_record(store, n, account_key=f"acct-{n % 3}", owner_did=f"o{n % 4}")
            for n in range(300)
        ],
    )
    stop = asyncio.Event()
    progress = Progress()
    caps_set = 0
    in_flight = Counter[int]()
    violations: list[str] = []
    looks = 0
    taken = 0

    async def observer() -> None:
        nonlocal looks
        within: dict[str, int] = {}
        while not stop.is_set():
            now_set = caps_set
            settled = not any(n for began, n in in_flight.items() if began < now_set)
            rows = await store.db.fetch_all(CAP_AND_LIVE.bindparams(now=clock()))
            settled = settled and caps_set == now_set
            for row in rows:
                key, cap, n = row["account_key"], row["cap"], row["n"]
                if not settled or cap is None:
                    within.pop(key, None)
                elif within.get(key) == cap and n > cap:
                    violations.append(f"{key} holds {n} past its cap {cap}")
                elif n <= cap:
                    within[key] = cap
                else:
                    within.pop(key, None)
            looks += 1
            await asyncio.sleep(0)

    async def operator() -> None:
        nonlocal caps_set
        for cap in CAPS:
            await store.accounts.set_account_limit("calendar", "acct-1", cap)
            await store.accounts.set_account_limit("calendar", "acct-2", cap)
            caps_set += 1
            await progress.past(10)
        stop.set()

    async def release(records) -> None:
        for record in records:
            await store.leasing.release_leases(
                record.lease_token or "", [(record.caller_did, record.operation_id)]
            )

    async def leaser(n: int) -> None:
        nonlocal taken
        round_ = 0
        while not stop.is_set():
            round_ += 1
            began = caps_set
            in_flight[began] += 1
            try:
                batch = await store.leasing.lease_operations(f"l{n}-{round_}", LEASE_MS, limit=4)
            except DatabaseBusy:
                continue
            finally:
                in_flight[began] -= 1
            taken += len(batch)
            progress.tick()
            await asyncio.sleep(0)
            await release(batch)

    async def acquirer(n: int) -> None:
        round_ = 0
        while not stop.is_set():
            round_ += 1
            key = f"op-{(n * 37 + round_) % 300}"
            began = caps_set
            in_flight[began] += 1
            try:
                got = await store.operations.acquire_lease(
                    "did:key:caller", key, f"a{n}-{round_}", clock() + LEASE_MS
                )
            finally:
                in_flight[began] -= 1
            progress.tick()
            await asyncio.sleep(0)
            if got is not None:
                await release([got])

    async def claimer(n: int) -> None:
        round_ = 0
        while not stop.is_set():
            round_ += 1
            claims = [
                claim(
                    operation_id=f"c{n}-{round_}-{m}",
                    source_id=f"c{n}-{round_}-{m}",
                    account_key=f"acct-{m % 3}",
                    lease_token=f"c{n}-{round_}",
                    lease_expires_at=clock() + LEASE_MS,
                )
                for m in range(6)
            ]
            began = caps_set
            in_flight[began] += 1
            try:
                results = await store.batches.claim_operations(claims)
            finally:
                in_flight[began] -= 1
            progress.tick()
            await asyncio.sleep(0)
            await release([r.operation for r in results if r.operation and r.operation.lease_token])

    await asyncio.wait_for(
        race(
            [
                observer(),
                operator(),
                *(leaser(n) for n in range(6)),
                *(acquirer(n) for n in range(2)),
                *(claimer(n) for n in range(2)),
            ]
        ),
        timeout=120,
    )
    assert violations == []
    assert looks > 0 and taken > 0


async def test_a_throttle_or_a_connectors_pause_binds_every_call_begun_after_it(store, clock):
    """An operator throttles one account (until the clock reaches its end, when it is open
    again) and pauses and resumes the whole connector, over and over, while leasers
    (leaseOperations, acquireLease, claim batches) lease and release: a call that began
    after the throttle or pause returned, and ended before it was lifted, leases nothing of
    what it shuts."""
    await insert_operations(
        store, [due_record(store, n, account_key=f"acct-{n % 2}") for n in range(200)]
    )
    stop = asyncio.Event()
    progress = Progress()
    shut = {"throttle": 0, "pause": 0}
    violations: list[str] = []
    leased = Counter[str]()

    def shut_now() -> tuple[int, int]:
        return shut["throttle"], shut["pause"]

    def check(began: tuple[int, int], records) -> None:
        ended = shut_now()
        for record in records:
            if record.lease_token is None or record.lease_expires_at < clock():
                continue
            leased[record.account_key] += 1
            for n, name in enumerate(("throttle", "pause")):
                shuts = name == "pause" or record.account_key == "acct-1"
                if shuts and began[n] % 2 and began[n] == ended[n]:
                    violations.append(f"{record.operation_id} leased in {name} {began[n]}")

    async def release(records) -> None:
        for record in records:
            if record.lease_token:
                await store.leasing.release_leases(
                    record.lease_token, [(record.caller_did, record.operation_id)]
                )

    async def operator() -> None:
        for _ in range(10):
            await store.accounts.throttle_account("calendar", "acct-1", 1_000)
            shut["throttle"] += 1
            await progress.past(8)
            shut["throttle"] += 1
            clock.advance(1_000)
            await progress.past(4)
            await store.pauses.pause_account("calendar", None)
            shut["pause"] += 1
            await progress.past(8)
            shut["pause"] += 1
            await store.pauses.resume_account("calendar", None)
            await progress.past(4)
        stop.set()

    async def leaser(n: int) -> None:
        round_ = 0
        while not stop.is_set():
            round_ += 1
            began = shut_now()
            try:
                batch = await store.leasing.lease_operations(f"l{n}-{round_}", LEASE_MS, limit=4)
            except DatabaseBusy:
                continue
            check(began, batch)
            progress.tick()
            await release(batch)

    async def acquirer(n: int) -> None:
        round_ = 0
        while not stop.is_set():
            round_ += 1
            began = shut_now()
            got = await store.operations.acquire_lease(
                "did:key:caller",
                f"op-{(n * 31 + round_) % 200}",
                f"a{n}-{round_}",
                clock() + LEASE_MS,
            )
            check(began, [got] if got else [])
            progress.tick()
            await release([got] if got else [])

    async def claimer(n: int) -> None:
        round_ = 0
        while not stop.is_set():
            round_ += 1
            began = shut_now()
            results = await store.batches.claim_operations(
                [
                    claim(
                        operation_id=f"c{n}-{round_}-{m}",
                        source_id=f"c{n}-{round_}-{m}",
                        account_key=f"acct-{m % 2}",
                        lease_token=f"c{n}-{round_}",
                        lease_expires_at=clock() + LEASE_MS,
                    )
                    for m in range(4)
                ]
            )
            records = [r.operation for r in results if r.operation]
            check(began, records)
            progress.tick()
            await release(records)

    await asyncio.wait_for(
        race(
            [
                operator(),
                *(leaser(n) for n in range(4)),
                *(acquirer(n) for n in range(2)),
                *(claimer(n) for n in range(2)),
            ]
        ),
        timeout=120,
    )
    assert violations == []
    assert leased["acct-1"] > 0 and leased["acct-0"] > 0
