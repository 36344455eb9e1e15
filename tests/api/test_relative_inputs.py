"""What a worker sends without the server's clock (docs/worker-protocol.md, 'Enqueueing, relative
times and lease names'): a claim with no lease fields enqueues, ``leaseMs`` and ``delayMs`` count
from the store's now, the single lease inputs name ``leaseToken`` as the batch ones do (the
old ``token``/``expiresAt`` still work, deprecated), and the watch inputs' twins, on both
backends."""

from typing import Any

import pytest

from tests.api.conftest import GraphQLClient, claim_input
from tests.factories import claimed_watch, pending_watch, verified_watch

KEY = {"callerDID": "did:key:caller", "operationID": "op-1"}
NO_LEASE = {"leaseToken": None, "leaseExpiresAt": None}


async def refusal(gql: GraphQLClient, document: str, **variables: Any) -> dict[str, Any]:
    body = await gql.query(document, variables)
    assert body["data"] is None or not any(body["data"].values()), body
    (error,) = body["errors"]
    assert error["extensions"]["code"] == "BAD_USER_INPUT"
    return error


CLAIM = """mutation($input: ClaimOperationInput!) { claimOperation(input: $input) {
  __typename ... on OperationClaimed { operation { leaseToken leaseExpiresAt version } } } }"""


async def test_claim_operation__no_lease_fields_enqueues_for_lease_operations(gql, clock):
    claimed = await gql.query(CLAIM, {"input": claim_input(**NO_LEASE)})
    operation = claimed["data"]["claimOperation"]["operation"]
    assert operation == {"leaseToken": None, "leaseExpiresAt": clock.now - 1, "version": 0}

    leased = await gql.run("LeaseOperations", input={"leaseToken": "worker-1", "leaseMs": 30_000})

    (handed,) = leased["leaseOperations"]["operations"]
    assert handed["operationID"] == "op-1"
    assert handed["deterministicEventID"] == "det-1"
    assert handed["leaseExpiresAt"] == clock.now + 30_000


async def test_claim_operations__items_without_lease_fields_enqueue(gql, clock):
    items = [claim_input(operationID=f"op-{n}", sourceID=f"evt-{n}", **NO_LEASE) for n in (1, 2)]
    claimed = await gql.run("ClaimOperations", input={"items": items})
    results = claimed["claimOperations"]["results"]
    assert [result["operation"]["leaseToken"] for result in results] == [None, None]

    leased = await gql.run("LeaseOperations", input={"leaseToken": "w", "leaseMs": 5_000})
    assert len(leased["leaseOperations"]["operations"]) == 2


async def test_claim_operation__lease_ms_counts_from_the_store_clock(gql, clock):
    claimed = await gql.query(CLAIM, {"input": claim_input(leaseExpiresAt=None, leaseMs=45_000)})
    operation = claimed["data"]["claimOperation"]["operation"]
    assert operation["leaseToken"] == "lease-A"
    assert operation["leaseExpiresAt"] == clock.now + 45_000


@pytest.mark.parametrize(
    ("lease", "field"),
    [
        ({"leaseExpiresAt": None}, "leaseMs"),
        ({"leaseToken": None}, "leaseToken"),
        ({"leaseToken": None, "leaseExpiresAt": None, "leaseMs": 5_000}, "leaseToken"),
        ({"leaseExpiresAt": 1, "leaseMs": 5_000}, "leaseExpiresAt"),
        ({"leaseExpiresAt": None, "leaseMs": 999}, "leaseMs"),
    ],
)
async def test_claim_operation__half_a_lease_refused_naming_the_field(gql, lease, field):
    error = await refusal(gql, CLAIM, input=claim_input(**lease))
    assert error["extensions"]["field"] == field
    listed = await gql.query("{ operations(first: 5) { edges { cursor } } }")
    assert listed["data"]["operations"]["edges"] == []


async def leased(gql: GraphQLClient) -> dict[str, Any]:
    data = await gql.run("ClaimOperation", input=claim_input(leaseExpiresAt=None, leaseMs=10_000))
    return data["claimOperation"]["operation"]


async def test_record_operations__delay_ms_schedules_from_the_store_clock(gql, clock):
    operation = await leased(gql)
    item = KEY | {
        "fromState": "ATTEMPTED",
        "toState": "ATTEMPTED",
        "version": operation["version"],
        "leaseToken": "lease-A",
        "kind": "transient",
        "delayMs": 1_500,
    }
    recorded = await gql.run("RecordOperations", input={"items": [item]})
    assert recorded["recordOperations"]["results"][0]["applied"] is True

    read = await gql.run("GetOperation", **KEY)
    assert read["operation"]["nextAttemptAt"] == clock.now + 1_500


RECORDS = """mutation($input: RecordOperationsInput!) { recordOperations(input: $input) {
  results { applied } } }"""


async def test_record_operations__delay_ms_beside_next_attempt_at_refused(gql, clock):
    operation = await leased(gql)
    item = KEY | {
        "fromState": "ATTEMPTED",
        "toState": "ATTEMPTED",
        "version": operation["version"],
        "leaseToken": "lease-A",
        "delayMs": 1_500,
        "nextAttemptAt": clock.now + 1_500,
    }
    error = await refusal(gql, RECORDS, input={"items": [item]})
    assert error["extensions"]["field"] == "items[0].nextAttemptAt"
    read = await gql.run("GetOperation", **KEY)
    assert read["operation"]["version"] == operation["version"]


async def test_finalize_operation__delay_ms_arms_the_watch_from_the_store_clock(gql, clock):
    operation = await leased(gql)
    final = KEY | {"version": operation["version"], "leaseToken": "lease-A", "delayMs": 60_000}
    done = await gql.run("FinalizeOperation", input=final)
    assert done["finalizeOperation"]["applied"] is True
    assert done["finalizeOperation"]["watch"]["nextAttemptAt"] == clock.now + 60_000


FINALIZE = """mutation($input: FinalizeOperationInput!) { finalizeOperation(input: $input) {
  applied } }"""


async def test_finalize_operation__without_due_at_or_delay_refused(gql):
    operation = await leased(gql)
    final = KEY | {"version": operation["version"], "leaseToken": "lease-A"}
    error = await refusal(gql, FINALIZE, input=final)
    assert error["extensions"]["field"] == "dueAt"


async def test_defer_operation__delay_ms_schedules_from_the_store_clock(gql, clock):
    await leased(gql)
    deferred = await gql.run(
        "DeferOperation", input=KEY | {"leaseToken": "lease-A", "delayMs": 9_000}
    )
    assert deferred["deferOperation"]["operation"]["nextAttemptAt"] == clock.now + 9_000


async def test_single_lease_inputs__lease_token_and_lease_ms_as_the_batch_inputs(gql, clock):
    await leased(gql)
    clock.advance(10_001)

    taken = await gql.run("AcquireLease", input=KEY | {"leaseToken": "lease-B", "leaseMs": 20_000})
    assert taken["acquireLease"]["operation"]["leaseExpiresAt"] == clock.now + 20_000
    renewed = await gql.run("RenewLease", input=KEY | {"leaseToken": "lease-B", "leaseMs": 40_000})
    assert renewed["renewLease"]["operation"]["leaseExpiresAt"] == clock.now + 40_000
    released = await gql.run("ReleaseLease", input=KEY | {"leaseToken": "lease-B"})
    assert released["releaseLease"]["operation"]["leaseToken"] is None


async def test_single_lease_inputs__deprecated_token_still_takes_the_lease(gql, clock):
    await leased(gql)
    clock.advance(10_001)

    taken = await gql.run(
        "AcquireLease", input=KEY | {"token": "lease-B", "expiresAt": clock.now + 5_000}
    )

    assert taken["acquireLease"]["applied"] is True
    assert taken["acquireLease"]["operation"]["leaseToken"] == "lease-B"


ACQUIRE = """mutation($input: AcquireLeaseInput!) { acquireLease(input: $input) { applied } }"""


@pytest.mark.parametrize(
    ("lease", "field"),
    [
        ({"leaseToken": "b", "token": "c", "leaseMs": 5_000}, "leaseToken"),
        ({"leaseMs": 5_000}, "leaseToken"),
        ({"leaseToken": "b"}, "leaseMs"),
        ({"leaseToken": "b", "leaseMs": 5_000, "expiresAt": 4102444800000}, "leaseMs"),
    ],
)
async def test_acquire_lease__ambiguous_or_missing_lease_refused(gql, clock, lease, field):
    await leased(gql)
    clock.advance(10_001)
    error = await refusal(gql, ACQUIRE, input=KEY | lease)
    assert error["extensions"]["field"] == field
    read = await gql.run("GetOperation", **KEY)
    assert read["operation"]["leaseToken"] == "lease-A"


# The watch inputs take the same relative twins: delayMs beside dueAt/nextAttemptAt, leaseMs
# beside a claim's until.

WATCH = {
    "ownerDID": "did:key:owner",
    "connectorName": "calendar",
    "model": "Event",
    "accountKey": "acct-1",
    "sourceID": "evt-1",
}


async def test_arm_watch__delay_ms_counts_from_the_store_clock(gql, store, clock):
    await pending_watch(store)

    armed = await gql.run(
        "ArmWatch", input={"identity": WATCH, "reason": "MANUAL", "delayMs": 7_000}
    )

    assert armed["armWatch"]["watch"]["nextAttemptAt"] == clock.now + 7_000


async def test_record_ingress__delay_ms_counts_from_the_store_clock(gql, store, clock):
    await verified_watch(store, "digest-1")

    ingress = await gql.run(
        "RecordIngress",
        input={"documentID": "doc-1", "winnerDigest": "digest-2", "delayMs": 3_000},
    )

    (result,) = ingress["recordIngress"]["results"]
    assert result["outcome"] == "OPENED"
    assert result["watch"]["nextAttemptAt"] == clock.now + 3_000


async def test_claim_watch_attempt__lease_ms_and_the_store_clock_as_now(gql, store, clock):
    watch = await pending_watch(store)
    clock.now = watch.next_attempt_at

    claimed = await gql.run(
        "ClaimWatchAttempt", input={"identity": WATCH, "generation": 1, "leaseMs": 20_000}
    )

    assert claimed["claimWatchAttempt"]["applied"] is True
    assert claimed["claimWatchAttempt"]["watch"]["claimedUntil"] == clock.now + 20_000


async def test_defer_watch__delay_ms_counts_from_the_store_clock(gql, store, clock):
    watch = await claimed_watch(store, clock)
    defer = {"identity": WATCH, "generation": 1, "claimedUntil": watch.claimed_until}

    deferred = await gql.run("DeferWatch", input=defer | {"delayMs": 5_000})

    assert deferred["deferWatch"]["applied"] is True
    assert deferred["deferWatch"]["watch"]["nextAttemptAt"] == clock.now + 5_000


async def test_record_verification__delay_ms_counts_from_the_store_clock(gql, store, clock):
    await claimed_watch(store, clock)
    verification = {
        "identity": WATCH,
        "generation": 1,
        "fetchedDigest": "digest-x",
        "maxAttempts": 3,
        "delayMs": 4_000,
    }

    recorded = await gql.run("RecordVerification", input=verification)

    assert recorded["recordVerification"]["outcome"] == "PENDING"
    assert recorded["recordVerification"]["watch"]["nextAttemptAt"] == clock.now + 4_000


@pytest.mark.parametrize(
    ("mutation", "input_type", "value", "field"),
    [
        ("armWatch", "ArmWatchInput", {"reason": "MANUAL"}, "dueAt"),
        ("armWatch", "ArmWatchInput", {"reason": "MANUAL", "dueAt": 1, "delayMs": 1}, "dueAt"),
        ("armWatch", "ArmWatchInput", {"reason": "MANUAL", "delayMs": -1}, "delayMs"),
        ("claimWatchAttempt", "ClaimWatchAttemptInput", {"generation": 1}, "until"),
        (
            "claimWatchAttempt",
            "ClaimWatchAttemptInput",
            {"generation": 1, "leaseMs": 999},
            "leaseMs",
        ),
        (
            "deferWatch",
            "DeferWatchInput",
            {"generation": 1, "claimedUntil": 1, "nextAttemptAt": 1, "delayMs": 1},
            "nextAttemptAt",
        ),
        (
            "recordVerification",
            "RecordVerificationInput",
            {"generation": 1, "fetchedDigest": None, "maxAttempts": 2},
            "dueAt",
        ),
    ],
)
async def test_watch_inputs__both_or_neither_time_refused_nothing_written(
    gql, store, clock, mutation, input_type, value, field
):
    watch = await claimed_watch(store, clock)
    body = await gql.query(
        f"mutation($input: {input_type}!) {{ {mutation}(input: $input) {{ __typename }} }}",
        {"input": {"identity": WATCH} | value},
    )

    assert body["data"] is None
    (error,) = body["errors"]
    assert error["extensions"] == {"code": "BAD_USER_INPUT", "field": field}
    assert await store.watches.get_watch(watch.identity) == watch


async def test_record_ingress__due_at_beside_delay_ms_refused(gql, store):
    watch = await verified_watch(store, "digest-1")
    body = await gql.query(
        """mutation($input: RecordIngressInput!) { recordIngress(input: $input) {
        results { outcome } } }""",
        {"input": {"documentID": "doc-1", "winnerDigest": "d-2", "dueAt": 1, "delayMs": 1}},
    )

    (error,) = body["errors"]
    assert error["extensions"] == {"code": "BAD_USER_INPUT", "field": "dueAt"}
    assert await store.watches.get_watch(watch.identity) == watch
    assert await store.winners.read_winner("doc-1") == "digest-1"


async def test_record_verifications__delay_ms_per_item_and_both_refused(gql, store, clock):
    watch = await claimed_watch(store, clock)
    item = {
        "identity": WATCH,
        "generation": 1,
        "fetchedDigest": "digest-x",
        "maxAttempts": 3,
        "delayMs": 4_000,
    }
    documents = """mutation($input: RecordVerificationsInput!) { recordVerifications(
    input: $input) { results { outcome watch { nextAttemptAt } } } }"""

    both = await gql.query(documents, {"input": {"items": [item | {"dueAt": 1}]}})
    (error,) = both["errors"]
    assert error["extensions"] == {"code": "BAD_USER_INPUT", "field": "items[0].dueAt"}
    assert await store.watches.get_watch(watch.identity) == watch

    recorded = await gql.query(documents, {"input": {"items": [item]}})
    (result,) = recorded["data"]["recordVerifications"]["results"]
    assert result == {"outcome": "PENDING", "watch": {"nextAttemptAt": clock.now + 4_000}}
