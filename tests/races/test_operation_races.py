"""Operation writes raced for real: each call runs in its own asyncio task, so ``databases``
gives each its own connection, and the database decides who wins. On both backends: exactly
one winner per CAS, and no call fails (no "database is locked" on SQLite)."""

import asyncio
from collections import Counter
from dataclasses import replace

from store import ConnectorStore
from store.database import Database
from store.operations import Finalize
from store.records import ENVELOPE
from tests.factories import (
    LEASE_MS,
    claim,
    claimed_operation,
    identity_of,
    leased_operation,
    marked_operation,
    reread,
    transition,
)

CALLER = "did:key:caller"


async def race(calls):
    """Run every coroutine in its own task at once; fail on any exception."""
    results = await asyncio.gather(
        *(asyncio.create_task(call) for call in calls), return_exceptions=True
    )
    errors = [result for result in results if isinstance(result, BaseException)]
    assert errors == [], errors
    return results


def envelope(operation_claim):
    return tuple(getattr(operation_claim, field) for field in ENVELOPE)


async def test_claim_operation__50_concurrent_one_claimed_rest_exist(store):
    claims = [
        claim(lease_token=f"lease-{n}", lease_expires_at=store.clock() + LEASE_MS)
        for n in range(50)
    ]

    results = await race(store.operations.claim_operation(c) for c in claims)

    statuses = [result.status for result in results]
    assert statuses.count("claimed") == 1
    assert statuses.count("exists") == 49
    winner = next(result.operation for result in results if result.status == "claimed")
    assert all(result.operation == winner for result in results)
    assert await reread(store, winner) == winner


async def test_claim_operation__concurrent_with_drifted_envelopes_conflict(store):
    base = claim(lease_expires_at=store.clock() + LEASE_MS)
    drifts = ["payload_hash", "target", "owner_did", "source_id", "op"]
    claims = [replace(base, lease_token=f"lease-{n}") for n in range(40)] + [
        replace(base, lease_token=f"drift-{n}", **{field: f"{getattr(base, field)}-{n}"})
        for n, field in enumerate(drifts * 2)
    ]

    results = await race(store.operations.claim_operation(c) for c in claims)

    claimed = [(c, r) for c, r in zip(claims, results, strict=True) if r.status == "claimed"]
    assert len(claimed) == 1
    winner_claim, winner_result = claimed[0]
    stored = await reread(store, winner_result.operation)
    assert stored == winner_result.operation
    assert stored.lease_token == winner_claim.lease_token
    for c, result in zip(claims, results, strict=True):
        if c is winner_claim:
            continue
        if envelope(c) == envelope(winner_claim):
            assert result.status == "exists" and result.operation == stored
        else:
            assert result.status == "conflict" and result.operation is None
    conflicts = sum(result.status == "conflict" for result in results)
    assert conflicts >= 9


async def test_acquire_lease__20_concurrent_tokens_one_wins(store, clock):
    record = await claimed_operation(store)
    clock.now = record.lease_expires_at + 1
    tokens = [f"token-{n}" for n in range(20)]

    results = await race(
        store.operations.acquire_lease(CALLER, "op-1", token, clock.now + LEASE_MS)
        for token in tokens
    )

    applied = [result for result in results if result is not None]
    assert len(applied) == 1
    stored = await reread(store, record)
    assert stored == applied[0]
    assert stored.lease_token in tokens
    assert stored.lease_token == applied[0].lease_token


async def test_record_operation__20_concurrent_same_version_one_applies(store):
    record = await marked_operation(store)

    results = await race(
        store.operations.record_operation(transition(record, kind=f"kind-{n}")) for n in range(20)
    )

    applied = [result for result in results if result is not None]
    assert len(applied) == 1
    stored = await reread(store, record)
    assert stored == applied[0]
    assert stored.version == record.version + 1
    assert stored.attempts == record.attempts + 1


async def test_mark_send_started__concurrent_runs_contest(store):
    record = await claimed_operation(store)

    results = await race(
        store.operations.mark_send_started(CALLER, "op-1", "lease-A", f"run-{n}") for n in range(10)
    )

    assert all(result is not None for result in results)
    stored = await reread(store, record)
    assert stored.send_marker == "*contested*"


async def test_finalize__20_concurrent_same_version_one_applies(store, clock):
    record = await marked_operation(store)
    await store.winners.record_winner("doc-1", "winner-1")

    results = await race(
        store.operations.finalize_operation_and_arm_watch(
            Finalize(
                CALLER,
                "op-1",
                version=record.version,
                lease_token="lease-A",
                due_at=clock.now + n,
                result_entity={"n": n},
            )
        )
        for n in range(20)
    )

    applied = [result for result in results if result is not None]
    assert len(applied) == 1
    done = applied[0]
    stored = await reread(store, record)
    assert stored == done.operation
    assert stored.state == "committed"
    assert stored.version == record.version + 1
    assert stored.attempts == record.attempts + 1
    watch = await store.watches.get_watch(identity_of(record))
    assert watch == done.watch
    assert watch.repair_generation == 1
    assert watch.next_attempt_at == clock.now + done.operation.result_entity["n"]


async def test_finalize__concurrent_operations_of_one_watch_count_generations(store, clock):
    count = 12
    records = [
        await leased_operation(store, operation_id=f"op-{n}", document_id=f"doc-{n}")
        for n in range(count)
    ]

    results = await race(
        store.operations.finalize_operation_and_arm_watch(
            Finalize(
                record.caller_did,
                record.operation_id,
                version=record.version,
                lease_token="lease-A",
                due_at=clock.now + 1_000,
            )
        )
        for record in records
    )

    assert all(result is not None for result in results)
    assert sorted(result.watch.repair_generation for result in results) == list(range(1, count + 1))
    watch = await store.watches.get_watch(identity_of(records[0]))
    assert watch.repair_generation == count
    assert watch.version == count - 1
    last = max(results, key=lambda result: result.watch.repair_generation)
    assert watch == last.watch
    for record in records:
        assert (await reread(store, record)).state == "committed"


async def test_finalize_and_record_operation__race_on_one_version_one_wins(store, clock):
    record = await marked_operation(store)
    finalizes = [
        store.operations.finalize_operation_and_arm_watch(
            Finalize(
                CALLER, "op-1", version=record.version, lease_token="lease-A", due_at=clock.now
            )
        )
        for _ in range(10)
    ]
    records = [
        store.operations.record_operation(transition(record, to_state="failed")) for _ in range(10)
    ]
    calls = [call for pair in zip(finalizes, records, strict=True) for call in pair]

    results = await race(calls)

    applied = [result for result in results if result is not None]
    assert len(applied) == 1
    stored = await reread(store, record)
    assert stored.version == record.version + 1
    watch = await store.watches.get_watch(identity_of(record))
    if stored.state == "committed":
        assert applied[0].operation == stored
        assert watch == applied[0].watch
    else:
        assert stored.state == "failed"
        assert applied[0] == stored
        assert watch is None


async def test_races__four_database_handles_share_one_database(database_url, clock):
    """Four ``Database`` objects on one database, as four server processes would be: on
    SQLite they do not share the in-process writer queue, so SQLite's own locking (WAL and
    the busy timeout) decides, and still exactly one CAS wins and no call fails."""
    handles = [Database(database_url, pool_size=10) for _ in range(4)]
    for handle in handles:
        await handle.connect()
    try:
        stores = [ConnectorStore(handle, clock=clock) for handle in handles]
        claims = [
            stores[n % 4].operations.claim_operation(
                claim(lease_token=f"lease-{n}", lease_expires_at=clock() + LEASE_MS)
            )
            for n in range(40)
        ]
        statuses = [result.status for result in await race(claims)]
        assert statuses.count("claimed") == 1 and statuses.count("exists") == 39

        clock.advance(LEASE_MS + 1)
        leases = [
            stores[n % 4].operations.acquire_lease(CALLER, "op-1", f"token-{n}", clock() + LEASE_MS)
            for n in range(40)
        ]
        acquired = [record for record in await race(leases) if record is not None]
        assert len(acquired) == 1
        stored = await stores[0].operations.get_operation(CALLER, "op-1")
        assert stored is not None and stored.lease_token == acquired[0].lease_token
    finally:
        for handle in handles:
            await handle.disconnect()


async def test_record_operations__overlapping_batches_splitting_rows_differently_never_deadlock(
    store, clock
):
    """Batches of one holder name the same rows live with a schedule, each keeping the
    schedule of some and moving the others' (a retry beside its first call), in both
    orders: each row is recorded once, and no batch fails (a deadlock would be
    ``DatabaseBusy``)."""
    for round_ in range(10):
        kept = []
        for n in range(6):
            record = await claimed_operation(
                store, operation_id=f"r{round_}-{n}", source_id=f"e{round_}-{n}"
            )
            live = await store.operations.record_operation(
                transition(
                    record, count_attempt=False, next_attempt_at=clock() + 9, defer_reason="offline"
                )
            )
            assert live is not None
            kept.append(live)

        def batch(keeping: int, kept: list = kept) -> list:
            return [
                transition(
                    record,
                    count_attempt=False,
                    next_attempt_at=(record.next_attempt_at or 0) + (n % 2 != keeping),
                    defer_reason="offline",
                )
                for n, record in enumerate(kept)
            ]

        results = await asyncio.gather(
            *(
                store.batches.record_operations(changes)
                for changes in [batch(0), batch(1), batch(0)[::-1], batch(1)[::-1]]
            ),
            return_exceptions=True,
        )

        assert [r for r in results if isinstance(r, BaseException)] == []
        applied = Counter(r.operation_id for result in results for r in result if r)
        assert applied == Counter(r.operation_id for r in kept)
