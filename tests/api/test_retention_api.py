"""Retention over GraphQL, on both backends: collectFinishedOperations, and a sweep of a
10,000-operation backlog while the server keeps answering (the longest request latency
during the sweep is printed; run with ``-s`` to see it)."""

import asyncio

import pytest

from server.settings import Settings
from server.sweeper import Retention, Sweeper
from tests.api.conftest import GraphQLClient, app_client, claim_input, error_codes
from tests.factories import bulk_finished_operations, committed_operation, terminal_operation
from tests.tokens import mint

BACKLOG = 10_000
BATCH = 1000
DAY_MS = 24 * 3600 * 1000


async def collect(gql: GraphQLClient, **given) -> int:
    data = await gql.run("CollectFinishedOperations", input=given)
    return data["collectFinishedOperations"]["deleted"]


async def test_collect_finished_operations__limit_and_default(gql, database, clock):
    await bulk_finished_operations(database, 1003, updated_at=clock.now - 1, state="superseded")

    assert await collect(gql, olderThan=clock.now, limit=2) == 2
    assert await collect(gql, olderThan=clock.now) == 1000
    assert await collect(gql, olderThan=clock.now) == 1


async def test_collect_finished_operations__remaining_exact_past_the_limit(gql, database, clock):
    await bulk_finished_operations(database, 5, updated_at=clock.now - 1, state="committed")
    await bulk_finished_operations(
        database, 2, updated_at=clock.now, state="committed", prefix="new"
    )

    answers = []
    for _ in range(3):
        data = await gql.run(
            "CollectFinishedOperations", input={"olderThan": clock.now, "limit": 2}
        )
        answers.append(data["collectFinishedOperations"])

    assert answers == [
        {"deleted": 2, "remaining": 3},
        {"deleted": 2, "remaining": 1},
        {"deleted": 1, "remaining": 0},
    ]


async def test_collect_finished_operations__attempted_kept_boundary_kept(gql, database, clock):
    await bulk_finished_operations(database, 10, updated_at=0, state="attempted")
    await bulk_finished_operations(
        database, 1, updated_at=clock.now, state="superseded", prefix="boundary"
    )

    assert await collect(gql, olderThan=clock.now, limit=10_000) == 0
    assert await collect(gql, olderThan=2**53 - 1, limit=10_000) == 1
    assert await collect(gql, olderThan=2**53 - 1, limit=10_000) == 0
    page = await gql.query(
        '{ operations(filter: {callerDID: "did:key:bulk"}) { edges { cursor } } }'
    )
    assert len(page["data"]["operations"]["edges"]) == 10


@pytest.mark.parametrize(
    ("given", "field"),
    [
        ({"limit": 0}, "limit"),
        ({"limit": 10_001}, "limit"),
        ({"olderThan": -1}, None),
        ({"failedOlderThan": -1}, None),
    ],
)
async def test_collect_finished_operations__bad_input(gql, clock, given, field):
    body = await gql.query(
        "mutation($input: CollectFinishedOperationsInput!) "
        "{ collectFinishedOperations(input: $input) { deleted } }",
        {"input": {"olderThan": clock.now} | given},
    )

    assert error_codes(body) == ["BAD_USER_INPUT"]
    if field is not None:
        assert body["errors"][0]["extensions"]["field"] == field


async def test_collect_finished_operations__failed_kept_by_default_until_failed_older_than(
    gql, database, clock
):
    await bulk_finished_operations(database, 2, updated_at=clock.now - DAY_MS, state="failed")
    await bulk_finished_operations(database, 1, clock.now - DAY_MS, state="committed", prefix="c")

    by_default = await collect(gql, olderThan=clock.now)
    explicit = await collect(gql, olderThan=clock.now, failedOlderThan=clock.now)

    assert (by_default, explicit) == (1, 2)


async def test_collect_finished_operations__default_failed_cutoff_is_retain_failed_seconds(
    store, database, clock
):
    """``failedOlderThan`` omitted: the store's now less ``RETAIN_FAILED_SECONDS``."""
    await bulk_finished_operations(database, 1, updated_at=clock.now - 61_000, state="failed")
    await bulk_finished_operations(database, 1, clock.now - 59_000, state="failed", prefix="new")

    async with app_client(store, Settings(retain_failed_seconds=60, sweeper=False)) as http:
        deleted = await collect(GraphQLClient(http), olderThan=clock.now)

    assert deleted == 1
    assert await store.operations.get_operation("did:key:new", "new-1") is not None


async def test_claim_operation__a_collected_key_answers_operation_collected(gql, store, clock):
    await committed_operation(store)
    clock.advance(1000)
    await collect(gql, olderThan=clock.now)

    replayed = await gql.run("ClaimOperation", input=claim_input())
    drifted = await gql.run("ClaimOperation", input=claim_input(payloadHash="sha256:drifted"))
    read = await gql.run("GetOperation", callerDID="did:key:caller", operationID="op-1")

    assert replayed["claimOperation"] == {
        "__typename": "OperationCollected",
        "callerDID": "did:key:caller",
        "operationID": "op-1",
        "finalState": "COMMITTED",
        "collectedAt": clock.now,
    }
    assert drifted["claimOperation"]["__typename"] == "OperationConflict"
    assert drifted["claimOperation"]["message"] == (
        f"the key's operation was collected at {clock.now} (epoch ms) with a different envelope"
    )
    assert read["operation"] is None


async def test_claim_operations__collected_items_answered_beside_claimed_ones(gql, store, clock):
    await terminal_operation(store, "failed")
    await committed_operation(store, operation_id="op-3", source_id="evt-3")
    clock.advance(1000)
    await collect(gql, olderThan=clock.now, failedOlderThan=clock.now)

    data = await gql.run(
        "ClaimOperations",
        input={
            "items": [
                claim_input(operationID="op-2", sourceID="evt-2"),
                claim_input(),
                claim_input(operationID="op-3", sourceID="evt-3", target="events/drifted"),
            ]
        },
    )
    results = data["claimOperations"]["results"]

    assert [result["__typename"] for result in results] == [
        "OperationClaimed",
        "OperationCollected",
        "OperationConflict",
    ]
    assert (results[1]["finalState"], results[1]["collectedAt"]) == ("FAILED", clock.now)


async def test_sweep__ten_thousand_in_batches_while_server_answers(gql, store, database, clock):
    """The sweeper collects a backlog in batches, each its own transaction, so requests are
    answered between them: some request pair is answered while part of the backlog is
    collected and part is left (a sweep in one transaction, or one that held what a claim
    needs until its end, would show none)."""
    await bulk_finished_operations(database, BACKLOG, updated_at=clock.now - 1)
    sweeper = Sweeper(store, interval_s=60, retention=Retention(finished_ms=0), batch=BATCH)
    sweep = asyncio.create_task(sweeper.sweep())
    left_when_answered: list[int] = []
    number = 0
    while not sweep.done():
        number += 1
        claimed = await gql.run("ClaimOperation", input=claim_input(operationID=f"live-{number}"))
        read = await gql.run("GetOperation", callerDID="did:key:caller", operationID="live-1")
        assert claimed["claimOperation"]["__typename"] == "OperationClaimed"
        assert read["operation"] is not None
        left_when_answered.append(await finished_left(store))
    result = await sweep

    assert result is not None
    assert (result.operations, result.batches) == (BACKLOG, BACKLOG // BATCH + 1)
    assert any(0 < left < BACKLOG for left in left_when_answered), left_when_answered
    assert await finished_left(store) == 0


async def finished_left(store) -> int:
    """How many finished operations a sweep with no retention would still collect."""
    return await store.retention.count_finished_operations(2**53 - 1, failed_older_than=2**53 - 1)


async def test_claim_operation__a_tenant_replaying_its_collected_key_is_answered_collected(
    gql, store, clock
):
    """A tenant claims only its own keys (caller and owner its DID), so the tombstone it
    is answered with is of its own operation."""
    tenant = "did:key:tenant"
    await committed_operation(store, caller_did=tenant, owner_did=tenant)
    clock.advance(1000)
    await collect(gql, olderThan=clock.now)
    token = mint(tenant, "operations:read operations:write")

    async with app_client(store, Settings(sweeper=False), token=token) as http:
        replayed = await GraphQLClient(http).run(
            "ClaimOperation", input=claim_input(callerDID=tenant, ownerDID=tenant)
        )

    assert replayed["claimOperation"]["__typename"] == "OperationCollected"
    assert replayed["claimOperation"]["callerDID"] == tenant
