"""Leasing and settling raced together, for real, on both backends: leasers over several
owners' capped accounts while workers settle what they leased in batches (record, finalize
with and without a document), abandon leases that lapse and are taken over, and settle
again with the lapsed token; an operator pauses and throttles an account meanwhile. An
observer on its own connection checks, at every instant it looks, that no account holds
more live leases than its cap and no provider entity two live leases."""

import asyncio
from collections import Counter, defaultdict

import sqlalchemy as sa

from store import ConnectorStore
from store.errors import DatabaseBusy
from store.operations import Finalize, OperationFilter, OperationTransition
from store.records import OperationRecord
from tests.factories import LEASE_MS
from tests.leasing_factories import due_record, insert_operations

CAPS = {"acct-1": 2, "acct-2": 3, "acct-3": 1, "acct-4": 2}
OWNERS = {"acct-1": "owner-a", "acct-2": "owner-a", "acct-3": "owner-b", "acct-4": "owner-b"}
OPERATIONS = 240
ENTITIES = 60
LEASERS = 10

LIVE_BY_ACCOUNT = sa.text(
    "SELECT account_key, count(*) AS n FROM kubun_connector_operation "
    "WHERE state = 'attempted' AND lease_token IS NOT NULL AND lease_expires_at >= :now "
    "GROUP BY account_key"
)
LIVE_BY_ENTITY = sa.text(
    "SELECT source_id, count(*) AS n FROM kubun_connector_operation "
    "WHERE state = 'attempted' AND lease_token IS NOT NULL AND lease_expires_at >= :now "
    "GROUP BY source_id HAVING count(*) > 1"
)

HOLDER = sa.text(
    "SELECT lease_token FROM kubun_connector_operation WHERE operation_id = :operation_id"
)


async def seed(store: ConnectorStore) -> None:
    accounts = list(CAPS)
    await insert_operations(
        store,
        [
            due_record(
                store,
                n,
                account_key=accounts[n % len(accounts)],
                owner_did=OWNERS[accounts[n % len(accounts)]],
                source_id=f"evt-{n % ENTITIES}",
            )
            for n in range(OPERATIONS)
        ],
    )
    for account, cap in CAPS.items():
        await store.accounts.set_account_limit("calendar", account, cap)


async def lease(store: ConnectorStore, token: str, limit: int) -> list[OperationRecord]:
    while True:
        try:
            return await store.leasing.lease_operations(token, LEASE_MS, limit=limit)
        except DatabaseBusy:
            continue


def failing(record: OperationRecord, n: int) -> OperationTransition:
    """A record of ``record``'s attempt: some items fail it (leaving their state), some keep
    it live with its schedule as the row holds it (the statement that names no schedule)."""
    if n % 2:
        return OperationTransition(
            record.caller_did,
            record.operation_id,
            "attempted",
            "failed",
            record.version,
            record.lease_token or "",
            next_attempt_at=record.next_attempt_at,
            defer_reason=record.defer_reason,
        )
    return OperationTransition(
        record.caller_did,
        record.operation_id,
        "attempted",
        "attempted",
        record.version,
        record.lease_token or "",
        count_attempt=False,
        next_attempt_at=record.next_attempt_at,
        defer_reason=record.defer_reason,
    )


async def test_leasers_settlers_and_an_operator_keep_caps_and_entities(store, clock):
    await seed(store)
    stop = asyncio.Event()
    violations: list[str] = []
    looks = 0
    stale_refused = Counter[str]()
    leased = Counter[str]()
    applied: dict[str, list[str]] = defaultdict(list)

    async def observer() -> None:
        nonlocal looks
        while not stop.is_set():
            # Counted live at the clock read after the snapshot: live for every leaser
            # whose call began before it.
            now = clock()
            rows = await store.db.fetch_all(LIVE_BY_ACCOUNT.bindparams(now=now))
            for row in rows:
                if row["n"] > CAPS[row["account_key"]]:
                    violations.append(f"{row['account_key']} holds {row['n']}")
            for row in await store.db.fetch_all(LIVE_BY_ENTITY.bindparams(now=now)):
                violations.append(f"{row['source_id']} leased {row['n']} times")
            looks += 1
            await asyncio.sleep(0.002)

    async def settle_stale(records: list[OperationRecord]) -> list[OperationRecord]:
        """The lapsed holders settle once another token took their lease over (or the
        operation ended): every guard refuses them. Returns those still held by their token."""
        held, taken = [], []
        for record in records:
            token = await store.db.fetch_all(HOLDER.bindparams(operation_id=record.operation_id))
            (held if token[0]["lease_token"] == record.lease_token else taken).append(record)
        for n, record in enumerate(taken):
            if n % 3 == 0:
                done = await store.batches.record_operations([failing(record, n)])
                stale_refused["record"] += done == [None]
            elif n % 3 == 1:
                final = Finalize(
                    record.caller_did,
                    record.operation_id,
                    record.version,
                    record.lease_token or "",
                    due_at=clock() + 60_000,
                    document_id=f"doc-{record.operation_id}",
                )
                done = await store.batches.finalize_operations([final])
                stale_refused["finalize"] += done == [None]
            else:
                done = await store.operations.renew_lease(
                    record.caller_did,
                    record.operation_id,
                    record.lease_token or "",
                    clock() + LEASE_MS,
                )
                stale_refused["renew"] += done is None
            assert done in ([None], None), (record.operation_id, done)
        return held

    async def leaser(n: int) -> None:
        abandoned: list[OperationRecord] = []
        round_ = 0
        while not stop.is_set():
            round_ += 1
            batch = await lease(store, f"leaser-{n}-{round_}", limit=3)
            for record in batch:
                leased[record.operation_id] += 1
            abandoned = await settle_stale(abandoned)
            if not batch:
                await asyncio.sleep(0.001)
                continue
            kept, records, finals = [], [], []
            for m, record in enumerate(batch):
                choice = (n + round_ + m) % 4
                if choice == 0:
                    abandoned.append(record)
                    await store.operations.mark_send_started(
                        record.caller_did, record.operation_id, record.lease_token or "", "run"
                    )
                elif choice == 1:
                    records.append(failing(record, round_ + m))
                    kept.append(record)
                else:
                    finals.append(
                        Finalize(
                            record.caller_did,
                            record.operation_id,
                            record.version,
                            record.lease_token or "",
                            due_at=clock() + 60_000,
                            document_id=f"doc-{record.operation_id}" if choice == 2 else None,
                        )
                    )
            if records:
                for record, done in zip(
                    kept, await store.batches.record_operations(records), strict=True
                ):
                    assert done is not None, record
                    applied[record.operation_id].append(done.state)
            if finals:
                for final, done in zip(
                    finals, await store.batches.finalize_operations(finals), strict=True
                ):
                    assert done is not None, final
                    applied[final.operation_id].append("committed")

    async def operator() -> None:
        while not stop.is_set():
            await store.pauses.pause_account("calendar", "acct-3")
            await asyncio.sleep(0.005)
            await store.pauses.resume_account("calendar", "acct-3")
            await store.accounts.throttle_account("calendar", "acct-4", 1)
            await asyncio.sleep(0.005)
            clock.advance(LEASE_MS // 3)

    async def finish() -> None:
        """Stop once every operation was settled, or after 8 s."""
        deadline = asyncio.get_running_loop().time() + 8
        while not stop.is_set():
            rows = await store.db.fetch_all(
                sa.text(
                    "SELECT count(*) AS n FROM kubun_connector_operation WHERE state = 'attempted'"
                )
            )
            if rows[0]["n"] == 0 or asyncio.get_running_loop().time() > deadline:
                stop.set()
            await asyncio.sleep(0.01)

    async def stopping(task):
        """A task that fails stops the others."""
        try:
            return await task
        finally:
            stop.set()

    results = await asyncio.wait_for(
        asyncio.gather(
            stopping(observer()),
            stopping(operator()),
            finish(),
            *(stopping(leaser(n)) for n in range(LEASERS)),
            return_exceptions=True,
        ),
        timeout=60,
    )
    assert [r for r in results if isinstance(r, BaseException)] == []
    assert violations == []
    assert looks > 0
    ended = {op: [k for k in kinds if k != "attempted"] for op, kinds in applied.items()}
    assert [op for op, kinds in ended.items() if len(kinds) > 1] == []
    states = await store.db.fetch_all(
        sa.text("SELECT operation_id, state FROM kubun_connector_operation")
    )
    assert {r["operation_id"]: r["state"] for r in states if r["state"] != "attempted"} == {
        op: kinds[0] for op, kinds in ended.items() if kinds
    }
    assert looks > 0 and stale_refused.total() > 0 and leased.total() > 0


async def test_takeovers_and_the_lapsed_holders_record_count_each_abandoned_send_once(store, clock):
    """Marked sends whose leases lapsed: 16 leasers take them over while each lapsed
    holder records its attempt (counting it) at once; then the new holders abandon
    theirs unmarked, and 16 leasers take them over again. Each attempt is counted once,
    by the record or by the takeover, never by both, and a second takeover counts none."""
    await insert_operations(
        store,
        [
            due_record(store, n, owner_did=f"owner-{n % 3}", account_key=f"acct-{n % 2}")
            for n in range(40)
        ],
    )
    first = await lease(store, "holder", limit=40)
    assert len(first) == 40
    marked = [
        await store.operations.mark_send_started(r.caller_did, r.operation_id, "holder", "run-1")
        for r in first
    ]
    clock.advance(LEASE_MS + 1)
    records = [
        OperationTransition(
            r.caller_did, r.operation_id, "attempted", "attempted", r.version, "holder"
        )
        for r in marked
        if r is not None
    ]
    assert len(records) == 40

    async def drain(token: str) -> list[OperationRecord]:
        taken = []
        while batch := await lease(store, token, limit=3):
            taken.extend(batch)
        return taken

    results = await asyncio.gather(
        *(drain(f"taker-{n}") for n in range(16)),
        *(store.operations.record_operation(change) for change in records[::2]),
        store.batches.record_operations(records[1::2]),
    )
    taken = Counter(r.operation_id for batch in results[:16] for r in batch)
    recorded = {r.operation_id for r in results[16:-1] if r is not None} | {
        r.operation_id for r in results[-1] if r is not None
    }
    rows = {
        r.operation_id: r for r in await store.operations.list_tracked_operations(OperationFilter())
    }
    assert set(taken.values()) <= {1}
    assert all(row.attempts == 1 for row in rows.values()), {k: v.attempts for k, v in rows.items()}
    # A record leaves its lapsed lease to be taken over: every operation was taken, the
    # recorded ones counted by their record alone.
    assert len(taken) == 40 and recorded <= set(taken)

    clock.advance(LEASE_MS + 1)
    again = await asyncio.gather(*(drain(f"again-{n}") for n in range(16)))
    retaken = Counter(r.operation_id for batch in again for r in batch)
    assert set(retaken.values()) == {1} and len(retaken) == 40
    rows = await store.operations.list_tracked_operations(OperationFilter())
    assert {row.attempts for row in rows} == {1}


async def test_a_paused_account_is_never_leased_by_a_call_begun_after_the_pause(store, clock):
    """An operator pauses and resumes an account over and over while 8 leasers lease and
    release: a call that began after a pause returned, and ended before the resume
    began, hands out none of the account's operations."""
    await insert_operations(
        store,
        [
            due_record(store, n, account_key=f"acct-{min(n % 6, 1)}", owner_did="owner-a")
            for n in range(60)
        ],
    )
    stop = asyncio.Event()
    paused_at: list[tuple[int, int]] = []
    seen = 0
    events = 0

    def tick() -> int:
        nonlocal events
        events += 1
        return events

    async def leaser(n: int) -> list[tuple[int, int, str]]:
        calls = []
        while not stop.is_set():
            began = tick()
            batch = await lease(store, f"l-{n}-{began}", limit=4)
            ended = tick()
            calls.extend((began, ended, r.account_key) for r in batch)
            for r in batch:
                await store.operations.release_lease(
                    r.caller_did, r.operation_id, r.lease_token or ""
                )
            await asyncio.sleep(0)
        return calls

    async def operator() -> None:
        nonlocal seen
        for _ in range(60):
            await store.pauses.pause_account("calendar", "acct-1")
            start = tick()
            await asyncio.sleep(0.003)
            end = tick()
            await store.pauses.resume_account("calendar", "acct-1")
            paused_at.append((start, end))
            await asyncio.sleep(0.003)
        stop.set()

    results = await asyncio.wait_for(
        asyncio.gather(operator(), *(leaser(n) for n in range(8))), timeout=60
    )
    calls = [call for batch in results[1:] for call in batch]
    wrong = [
        (began, ended)
        for began, ended, account in calls
        for start, end in paused_at
        if account == "acct-1" and start < began and ended < end
    ]
    assert wrong == []
    assert {account for _, _, account in calls} == {"acct-0", "acct-1"}


async def test_concurrent_leasers_reach_an_owners_open_account_beside_its_blocked_backlogs(
    store, clock
):
    """Owner A has 400 due operations; owner B a long, older backlog on an account at its
    cap, one on a paused account and one on a throttled account, and 10 due operations on
    an open account. 8 leasers at once, calls of 4: B's open account is reached in fair
    order (all 10 leased while A has given at most 100 of its 400), and none of B's
    blocked accounts is leased."""
    blocked = {"acct-capped": 0, "acct-paused": 1, "acct-throttled": 2}
    records = [
        due_record(store, n, owner_did="owner-b", account_key=account, created_at=n)
        for account, shift in blocked.items()
        for n in range(shift * 1000, shift * 1000 + 300)
    ]
    records += [
        due_record(store, 5000 + n, owner_did="owner-b", account_key="acct-open") for n in range(10)
    ]
    records += [
        due_record(store, 6000 + n, owner_did="owner-a", account_key="acct-a") for n in range(400)
    ]
    await insert_operations(store, records)
    await store.accounts.set_account_limit("calendar", "acct-capped", 1)
    assert len(await lease(store, "holder", limit=1)) == 1
    await store.pauses.pause_account("calendar", "acct-paused")
    await store.accounts.throttle_account("calendar", "acct-throttled", 60_000)

    leased = Counter[str]()

    async def leaser(n: int) -> None:
        for round_ in range(25):
            batch = await lease(store, f"l-{n}-{round_}", limit=4)
            leased.update(r.account_key for r in batch)
            if leased["acct-open"] == 10:
                return

    await asyncio.gather(*(leaser(n) for n in range(8)))
    assert leased["acct-open"] == 10
    assert leased.keys() <= {"acct-open", "acct-a"}
    assert leased["acct-a"] <= 100, leased
