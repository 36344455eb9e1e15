"""Seeded data for the browser tests, written through the API as workers write it: two
connectors, three accounts, operations in every state, a committed one with its watch, a
failed one, a repair-failed watch, and a live one due now (its lease already lapsed)."""

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx

from tests.tokens import SERVICE_TOKEN, bearer

WORKER = "did:key:worker"
LEASE_MS = 60_000
FAILURE = "422 Unprocessable: the event ends before it starts"
REPAIR_FAILURE = "the provider still shows another writer's version"


@dataclass(frozen=True)
class Seeded:
    """What ``seed`` wrote: the server's URL, the token it used, and the keys by role."""

    url: str
    token: str
    committed: str
    failed: str
    live: list[str]
    due: str


class Api:
    """A service's GraphQL client of a live server."""

    def __init__(self, http: httpx.AsyncClient) -> None:
        self.http = http

    async def __call__(self, query: str, **variables: Any) -> dict[str, Any]:
        response = await self.http.post("/graphql", json={"query": query, "variables": variables})
        body = response.json()
        assert response.status_code == 200 and "errors" not in body, body
        return body["data"]


CLAIM = """
mutation ($input: ClaimOperationInput!) {
  claimOperation(input: $input) { __typename ... on OperationClaimed { operation { version } } }
}
"""
MARK = """
mutation ($input: MarkSendStartedInput!) { markSendStarted(input: $input) { applied } }
"""
FINALIZE = """
mutation ($input: FinalizeOperationInput!) { finalizeOperation(input: $input) { applied } }
"""
RECORD = """
mutation ($input: RecordOperationInput!) { recordOperation(input: $input) { applied } }
"""
ARM = """
mutation ($input: ArmWatchInput!) { armWatch(input: $input) { outcome } }
"""
VERIFY = """
mutation ($input: RecordVerificationInput!) { recordVerification(input: $input) { outcome } }
"""


def claim_input(operation_id: str, now: int, **overrides: Any) -> dict[str, Any]:
    """A claim of ``operation_id`` by the worker, its own provider entity, leased for a
    minute."""
    return {
        "callerDID": WORKER,
        "operationID": operation_id,
        "ownerDID": "did:key:alice",
        "connectorName": "calendar",
        "model": "Event",
        "op": "update",
        "accountKey": "acct-1",
        "target": f"events/{operation_id}",
        "sourceID": f"evt-{operation_id}",
        "deterministicEventID": f"det-{operation_id}",
        "payloadHash": "sha256:aaa",
        "documentID": f"doc-{operation_id}",
        "leaseToken": f"lease-{operation_id}",
        "leaseExpiresAt": now + LEASE_MS,
    } | overrides


async def claimed(api: Api, operation_id: str, now: int, **overrides: Any) -> dict[str, Any]:
    """Claim; return the claim's input."""
    given = claim_input(operation_id, now, **overrides)
    data = await api(CLAIM, input=given)
    assert data["claimOperation"]["__typename"] == "OperationClaimed", data
    return given


CLAIMS = """
mutation ($input: ClaimOperationsInput!) {
  claimOperations(input: $input) { results { __typename } }
}
"""


async def claimed_many(api: Api, ids: list[str], now: int, **overrides: Any) -> None:
    """Claim each of ``ids`` (as ``claimed``), 500 a request."""
    for start in range(0, len(ids), 500):
        items = [claim_input(i, now, **overrides) for i in ids[start : start + 500]]
        results = (await api(CLAIMS, input={"items": items}))["claimOperations"]["results"]
        assert {r["__typename"] for r in results} == {"OperationClaimed"}, results


def key_of(given: dict[str, Any]) -> dict[str, Any]:
    return {"callerDID": given["callerDID"], "operationID": given["operationID"]}


async def committed(api: Api, operation_id: str, now: int, **overrides: Any) -> dict[str, Any]:
    """Claim, mark and finalize: the operation committed, its watch armed."""
    given = await claimed(api, operation_id, now, **overrides)
    await api(MARK, input=key_of(given) | {"leaseToken": given["leaseToken"], "marker": "run-1"})
    await api(
        FINALIZE,
        input=key_of(given)
        | {"version": 0, "leaseToken": given["leaseToken"], "dueAt": now + LEASE_MS},
    )
    return given


async def failed(api: Api, operation_id: str, now: int, **overrides: Any) -> dict[str, Any]:
    """Claim, then record a permanent failure (HTTP 422, ``FAILURE``)."""
    given = await claimed(api, operation_id, now, **overrides)
    data = await api(
        RECORD,
        input=key_of(given)
        | {
            "fromState": "ATTEMPTED",
            "toState": "FAILED",
            "version": 0,
            "leaseToken": given["leaseToken"],
            "kind": "permanent",
            "httpStatus": 422,
            "errorMessage": FAILURE,
        },
    )
    assert data["recordOperation"]["applied"]
    return given


async def repair_failed(api: Api, operation_id: str, now: int, **overrides: Any) -> dict[str, Any]:
    """Commit, then fail the watch's first verification: a REPAIR_FAILED watch; the claim's
    input."""
    given = await committed(api, operation_id, now, **overrides)
    await fail_verification(api, given, now)
    return given


async def fail_verification(api: Api, given: dict[str, Any], now: int) -> None:
    """Fail the first verification of the watch of ``given`` (a committed claim's input),
    with ``REPAIR_FAILURE``: the watch is REPAIR_FAILED."""
    identity = {
        name: given[name]
        for name in ("ownerDID", "connectorName", "model", "accountKey", "sourceID")
    }
    verified = await api(
        VERIFY,
        input={
            "identity": identity,
            "generation": 1,
            "fetchedDigest": "digest-wrong",
            "maxAttempts": 1,
            "dueAt": now + LEASE_MS,
            "errorMessage": REPAIR_FAILURE,
        },
    )
    assert verified["recordVerification"]["outcome"] == "REPAIR_FAILED", verified


@contextlib.asynccontextmanager
async def api_of(seeded: Seeded) -> AsyncIterator[Api]:
    """A service's client of the seeded server."""
    async with httpx.AsyncClient(
        base_url=seeded.url, headers=bearer(seeded.token), timeout=60
    ) as http:
        yield Api(http)


async def seed(url: str) -> Seeded:
    """Write the seeded data to the server at ``url``."""
    async with httpx.AsyncClient(base_url=url, headers=bearer(SERVICE_TOKEN)) as http:
        api = Api(http)
        now = (await api("{ serverTime }"))["serverTime"]
        done = await committed(api, "op-committed", now)
        repair = await committed(api, "op-repair", now, accountKey="acct-2")
        gone = await failed(api, "op-failed", now)
        live = [
            await claimed(api, "op-live-1", now),
            await claimed(api, "op-live-2", now, connectorName="crm", accountKey="acct-9"),
        ]
        # Enqueued (claimed unleased): due now, for leaseOperations.
        due = await claimed(api, "op-due", now, leaseToken=None, leaseExpiresAt=None)
        await fail_verification(api, repair, now)
    return Seeded(
        url=url,
        token=SERVICE_TOKEN,
        committed=done["operationID"],
        failed=gone["operationID"],
        live=[given["operationID"] for given in live],
        due=due["operationID"],
    )
