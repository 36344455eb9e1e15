"""What a worker's lifecycle costs in round trips, on both backends (``tests/round_trips.py``
counts them as a user pays: on PostgreSQL every statement, ``BEGIN`` and ``COMMIT``; on
SQLite every hop to a connection's thread). Each step is one statement in autocommit where
one statement holds its atomicity: a claim, a mark and a settle one round trip each, at
batch 1 and at batch 50. Each lifecycle runs once before it is counted, so asyncpg's
statement cache is warm, as a running server's is."""

import pytest

from store import ConnectorStore
from store.operations import Finalize, SendMark
from tests.factories import LEASE_MS, claim
from tests.round_trips import round_trips


async def lifecycle(store: ConnectorStore, n: int, account: str) -> list[int]:
    """claimOperation → markSendStarted → finalizeOperation of one operation: the round
    trips of each step."""
    trips: list[int] = []
    key = f"op-{n}"
    with round_trips(pytest.MonkeyPatch()) as counted:
        claimed = await store.operations.claim_operation(
            claim(
                operation_id=key,
                source_id=f"evt-{n}",
                account_key=account,
                lease_token=f"run-{n}",
                lease_expires_at=store.clock() + LEASE_MS,
            )
        )
        trips.append(counted.count)
        assert claimed.status == "claimed" and claimed.operation is not None
        assert claimed.operation.lease_token == f"run-{n}"
        counted.reset()
        marked = await store.operations.mark_send_started(
            "did:key:caller", key, f"run-{n}", f"marker-{n}"
        )
        trips.append(counted.count)
        assert marked is not None
        counted.reset()
        done = await store.operations.finalize_operation_and_arm_watch(
            Finalize(
                "did:key:caller",
                key,
                version=marked.version,
                lease_token=f"run-{n}",
                due_at=store.clock() + 60_000,
            )
        )
        trips.append(counted.count)
        assert done is not None and done.operation.state == "committed"
    return trips


async def batch_lifecycle(store: ConnectorStore, batch: int, size: int, account: str) -> list[int]:
    """claimOperations → markSendsStarted → finalizeOperations of ``size`` operations: the
    round trips of each step."""
    trips: list[int] = []
    token = f"batch-{batch}"
    keys = [f"b{batch}-{n}" for n in range(size)]
    with round_trips(pytest.MonkeyPatch()) as counted:
        claimed = await store.batches.claim_operations(
            [
                claim(
                    operation_id=key,
                    source_id=key,
                    account_key=account,
                    lease_token=token,
                    lease_expires_at=store.clock() + LEASE_MS,
                )
                for key in keys
            ]
        )
        trips.append(counted.count)
        assert [r.status for r in claimed] == ["claimed"] * size
        assert all(r.operation and r.operation.lease_token == token for r in claimed)
        counted.reset()
        marked = await store.batches.mark_sends_started(
            [SendMark("did:key:caller", key, token, f"m-{key}") for key in keys]
        )
        trips.append(counted.count)
        counted.reset()
        done = await store.batches.finalize_operations(
            [
                Finalize(
                    "did:key:caller",
                    key,
                    version=record.version,
                    lease_token=token,
                    due_at=store.clock() + 60_000,
                )
                for key, record in zip(keys, marked, strict=True)
                if record is not None
            ]
        )
        trips.append(counted.count)
        assert len(done) == size and all(d is not None for d in done)
    return trips


async def test_a_lifecycle_at_batch_1_is_a_round_trip_a_step(store):
    """claim, mark, settle: one round trip each (the account exists after the first)."""
    await lifecycle(store, 0, "acct-1")

    assert await lifecycle(store, 1, "acct-1") == [1, 1, 1]


async def test_a_lifecycle_of_a_new_account_is_a_round_trip_a_step(store):
    """The claim that creates its account's row does so in its own statement."""
    await lifecycle(store, 0, "acct-1")

    assert await lifecycle(store, 1, "acct-2") == [1, 1, 1]


async def test_a_lifecycle_at_batch_50_is_a_round_trip_a_step(store):
    """claimOperations, markSendsStarted, finalizeOperations of 50: one round trip each."""
    await batch_lifecycle(store, 0, 50, "acct-1")

    assert await batch_lifecycle(store, 1, 50, "acct-1") == [1, 1, 1]
