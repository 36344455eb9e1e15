"""Leases that fence on every path (docs/worker-protocol.md, 'What each lease call accepts'; issue
5's cases 1 to 3), over GraphQL, on both backends."""

from typing import Any

from tests.api.conftest import GraphQLClient, claim_input

KEY = {"callerDID": "did:key:caller", "operationID": "op-1"}


async def claimed(gql: GraphQLClient, expires_at: int) -> dict[str, Any]:
    data = await gql.run("ClaimOperation", input=claim_input(leaseExpiresAt=expires_at))
    return data["claimOperation"]["operation"]


async def mark(gql: GraphQLClient, token: str, marker: str) -> dict[str, Any]:
    data = await gql.run("MarkSendStarted", input=KEY | {"leaseToken": token, "marker": marker})
    assert data["markSendStarted"]["applied"] is True
    return data["markSendStarted"]["operation"]


async def acquire(gql: GraphQLClient, token: str, expires_at: int) -> dict[str, Any]:
    data = await gql.run("AcquireLease", input=KEY | {"token": token, "expiresAt": expires_at})
    return data["acquireLease"]


async def test_acquire_lease__committed_operation_with_lapsed_lease_refused(gql, clock):
    operation = await claimed(gql, clock.now + 1_000)
    finalized = await gql.run(
        "FinalizeOperation",
        input=KEY | {"version": operation["version"], "leaseToken": "lease-A", "dueAt": clock.now},
    )
    assert finalized["finalizeOperation"]["applied"] is True
    clock.advance(2_000)

    taken = await acquire(gql, "lease-B", clock.now + 60_000)

    assert taken["applied"] is False
    assert taken["operation"]["state"] == "COMMITTED"
    assert taken["operation"]["leaseToken"] == "lease-A"


async def test_renew_lease__stranger_cannot_extend_lapsed_lease_then_takes_over(gql, clock):
    await claimed(gql, clock.now + 1_000)
    clock.advance(1_001)

    renewed = await gql.run(
        "RenewLease", input=KEY | {"token": "stranger", "expiresAt": clock.now + 60_000}
    )
    assert renewed["renewLease"]["applied"] is False
    assert renewed["renewLease"]["operation"]["leaseExpiresAt"] == clock.now - 1

    taken = await acquire(gql, "stranger", clock.now + 30_000)
    assert taken["applied"] is True
    assert taken["operation"]["leaseToken"] == "stranger"


async def test_acquire_lease__crash_loop_of_three_takeovers_ends_with_three_attempts(gql, clock):
    await claimed(gql, clock.now + 2_000)
    token = "lease-A"
    for run in range(1, 4):
        await mark(gql, token, f"run-{run}")
        clock.advance(2_001)
        token = f"lease-{run + 1}"
        taken = await acquire(gql, token, clock.now + 2_000)
        assert taken["applied"] is True
        assert taken["operation"]["attempts"] == run

    due = await gql.run("DueOperations", now=clock.now + 2_001)
    assert [operation["attempts"] for operation in due["dueOperations"]] == [3]


async def test_acquire_lease__silent_worker_then_takeover_finalize_counts_two_sends(gql, clock):
    await claimed(gql, clock.now + 2_000)
    await mark(gql, "lease-A", "worker-1")
    clock.advance(2_001)
    taken = await acquire(gql, "lease-B", clock.now + 2_000)
    assert taken["operation"]["attempts"] == 1
    marked = await mark(gql, "lease-B", "worker-2")
    assert marked["sendMarker"] == "*contested*"

    finalized = await gql.run(
        "FinalizeOperation",
        input=KEY | {"version": marked["version"], "leaseToken": "lease-B", "dueAt": clock.now},
    )

    assert finalized["finalizeOperation"]["applied"] is True
    assert finalized["finalizeOperation"]["operation"]["attempts"] == 2


async def test_acquire_lease__takeovers_of_runs_that_never_marked_count_once(gql, clock):
    await claimed(gql, clock.now + 1_000)
    await mark(gql, "lease-A", "worker-1")
    attempts = []
    for token in ["t1", "t2", "t3", "t4"]:
        clock.advance(1_001)
        taken = await acquire(gql, token, clock.now + 1_000)
        assert taken["applied"] is True
        attempts.append(taken["operation"]["attempts"])

    assert attempts == [1, 1, 1, 1]
