"""Retention over GraphQL, on both backends: collectFinishedOperations, and a sweep of a
10,000-operation backlog while the server keeps answering (the longest request latency
during the sweep is printed; run with ``-s`` to see it)."""

import asyncio
import time

import pytest

from server.sweeper import Retention, Sweeper
from tests.api.conftest import GraphQLClient, claim_input, error_codes
from tests.factories import bulk_finished_operations

BACKLOG = 10_000
BATCH = 1000


async def collect(gql: GraphQLClient, **given) -> int:
    data = await gql.run("CollectFinishedOperations", input=given)
    return data["collectFinishedOperations"]["deleted"]


async def test_collect_finished_operations__limit_and_default(gql, database, clock):
    await bulk_finished_operations(database, 1003, updated_at=clock.now - 1, state="superseded")

    assert await collect(gql, olderThan=clock.now, limit=2) == 2
    assert await collect(gql, olderThan=clock.now) == 1000
    assert await collect(gql, olderThan=clock.now) == 1


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
    [({"limit": 0}, "limit"), ({"limit": 10_001}, "limit"), ({"olderThan": -1}, None)],
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


async def test_sweep__ten_thousand_in_batches_while_server_answers(
    gql, store, database, clock, request
):
    await bulk_finished_operations(database, BACKLOG, updated_at=clock.now - 1)
    sweeper = Sweeper(store, interval_s=60, retention=Retention(finished_ms=0), batch=BATCH)
    sweep = asyncio.create_task(sweeper.sweep())
    latencies: list[float] = []
    number = 0
    while not sweep.done():
        number += 1
        started = time.perf_counter()
        claimed = await gql.run("ClaimOperation", input=claim_input(operationID=f"live-{number}"))
        read = await gql.run("GetOperation", callerDID="did:key:caller", operationID="live-1")
        latencies.append(time.perf_counter() - started)
        assert claimed["claimOperation"]["__typename"] == "OperationClaimed"
        assert read["operation"] is not None
    result = await sweep

    assert result is not None
    assert (result.operations, result.batches) == (BACKLOG, BACKLOG // BATCH + 1)
    assert len(latencies) >= 2
    longest_ms = max(latencies) * 1000
    print(
        f"\n[{request.node.callspec.id}] sweep of {BACKLOG} in {result.batches} batches: "
        f"{len(latencies)} request pairs answered, longest {longest_ms:.1f} ms"
    )
    assert longest_ms < 5000
    assert (
        await store.retention.count_finished_operations(2**53 - 1, failed_older_than=2**53 - 1) == 0
    )
