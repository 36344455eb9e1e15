"""Every maximum the schema documents holds exactly, on both backends: a request sending the
maximum is accepted, one sending one more is refused with BAD_USER_INPUT naming the field
the client sent (never a field of the store's own, as ``accounts(first: 500)`` once named
the store's ``limit``).

The documented maxima are read from the schema's descriptions ("1 to 500", "at most 2,048"),
so a new one without a case here fails ``test_every_documented_maximum_has_a_case``."""

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from graphql import GraphQLInputObjectType, GraphQLObjectType

from resolvers.budget import MAX_ROWS_PER_REQUEST
from server.graph import build_schema
from server.strawberry_internals import graphql_schema
from store.validation import MAX_JSON_BYTES, MAX_JSON_DEPTH, MAX_KEY_LENGTH, MAX_LIST_ITEMS
from tests.api.conftest import GraphQLClient, claim_input, error_codes

CALLER = "did:key:caller"
FAR = 4102444800000
IDENTITY = {
    "ownerDID": "did:key:owner",
    "connectorName": "calendar",
    "model": "Event",
    "accountKey": "acct-1",
    "sourceID": "evt-1",
}
DOCUMENTED = re.compile(r"\b\d[\d,]* to (\d[\d,]*+)(?! ms after)|at most (\d[\d,]*)")
"""A maximum the descriptions give; a deadline's bound ("1,000 to 3,600,000 ms after the store's
now") is a window, not a maximum of the value sent: test_lease_deadlines covers those."""


def documented_maxima() -> dict[str, int]:
    """Each argument (``Type.field(arg)``) and input field (``Input.field``) whose
    description gives a maximum, with that maximum."""
    schema = graphql_schema(build_schema())
    found: dict[str, int] = {}

    def note(at: str, description: str | None) -> None:
        match = DOCUMENTED.search(description or "")
        if match is not None:
            found[at] = int(next(g for g in match.groups() if g).replace(",", ""))

    for name, type_ in schema.type_map.items():
        if name.startswith("__"):
            continue
        if isinstance(type_, GraphQLObjectType):
            for field_name, field in type_.fields.items():
                for arg, value in field.args.items():
                    note(f"{name}.{field_name}({arg})", value.description)
        if isinstance(type_, GraphQLInputObjectType):
            for field_name, input_field in type_.fields.items():
                note(f"{name}.{field_name}", input_field.description)
    return found


@dataclass(frozen=True)
class Case:
    """A request that sends ``value`` where the maximum applies (``document`` and the
    variables ``variables(value)`` build), and the field a refusal must name."""

    document: str
    variables: Callable[[int], dict[str, Any]]
    field: str
    needs_watch: bool = False


def keys(count: int) -> list[dict[str, str]]:
    return [{"callerDID": CALLER, "operationID": f"op-{i}"} for i in range(count)]


def message(size: int) -> str:
    return "m" * size


def mutation(name: str, input_type: str, selection: str = "__typename") -> str:
    return f"mutation($input: {input_type}!) {{ {name}(input: $input) {{ {selection} }} }}"


def argument(field: str, arg: str, selection: str, extra: str = "") -> str:
    return f"query($n: Int) {{ {field}({extra}{arg}: $n) {{ {selection} }} }}"


RESULTS = "results { __typename }"
OPERATOR_FILTER = {"callerDID": CALLER}
CASES: dict[str, Case] = {
    "OperationFilter.search": Case(
        "query($s: String) { operations(filter: {search: $s}, first: 1) { edges { cursor } } }",
        lambda n: {"s": "x" * n},
        "search",
    ),
    "Operation.events(first)": Case(
        'query($n: Int) { operation(callerDID: "did:key:caller", operationID: "op-1") '
        "{ events(first: $n) { edges { cursor } } } }",
        lambda n: {"n": n},
        "first",
    ),
    "Watch.events(first)": Case(
        "query($n: Int) { watches(first: 1) { edges { node { events(first: $n) "
        "{ edges { cursor } } } } } }",
        lambda n: {"n": n},
        "first",
        needs_watch=True,
    ),
    "Query.operations(first)": Case(
        argument("operations", "first", "edges { cursor }"), lambda n: {"n": n}, "first"
    ),
    "Query.operations(last)": Case(
        argument("operations", "last", "edges { cursor }"), lambda n: {"n": n}, "last"
    ),
    "Query.watches(first)": Case(
        argument("watches", "first", "edges { cursor }"), lambda n: {"n": n}, "first"
    ),
    "Query.operationStats(bucketMs)": Case(
        "query($until: EpochMillis) { operationStats(since: 0, until: $until, bucketMs: 1000) "
        "{ start } }",
        lambda n: {"until": n * 1000},
        "bucketMs",
    ),
    "Query.syncStates(first)": Case(
        argument("syncStates", "first", "edges { cursor }", 'connectorName: "calendar", '),
        lambda n: {"n": n},
        "first",
    ),
    "Query.accounts(first)": Case(
        argument("accounts", "first", "edges { cursor }", 'connectorName: "calendar", '),
        lambda n: {"n": n},
        "first",
    ),
    "Query.failureGroups(first)": Case(
        argument("failureGroups", "first", "count"), lambda n: {"n": n}, "first"
    ),
    "Query.dueOperations(limit)": Case(
        argument("dueOperations", "limit", "operationID", f"now: {FAR}, "),
        lambda n: {"n": n},
        "limit",
    ),
    "Query.dueWatches(limit)": Case(
        argument("dueWatches", "limit", "sourceID", f"now: {FAR}, "), lambda n: {"n": n}, "limit"
    ),
    "CollectFinishedOperationsInput.limit": Case(
        mutation("collectFinishedOperations", "CollectFinishedOperationsInput"),
        lambda n: {"input": {"olderThan": 0, "limit": n}},
        "limit",
    ),
    "ClaimOperationsInput.items": Case(
        mutation("claimOperations", "ClaimOperationsInput", RESULTS),
        lambda n: {
            "input": {
                "items": [claim_input(operationID=f"op-{i}", sourceID=f"evt-{i}") for i in range(n)]
            }
        },
        "items",
    ),
    "MarkSendsStartedInput.items": Case(
        mutation("markSendsStarted", "MarkSendsStartedInput", "results { applied }"),
        lambda n: {"input": {"items": [k | {"leaseToken": "t", "marker": "m"} for k in keys(n)]}},
        "items",
    ),
    "RecordOperationsInput.items": Case(
        mutation("recordOperations", "RecordOperationsInput", "results { applied }"),
        lambda n: {
            "input": {
                "items": [
                    k
                    | {
                        "fromState": "ATTEMPTED",
                        "toState": "FAILED",
                        "version": 1,
                        "leaseToken": "t",
                    }
                    for k in keys(n)
                ]
            }
        },
        "items",
    ),
    "FinalizeOperationsInput.items": Case(
        mutation("finalizeOperations", "FinalizeOperationsInput", "results { applied }"),
        lambda n: {
            "input": {
                "items": [k | {"version": 1, "leaseToken": "t", "dueAt": FAR} for k in keys(n)]
            }
        },
        "items",
    ),
    "RecordVerificationsInput.items": Case(
        mutation("recordVerifications", "RecordVerificationsInput"),
        lambda n: {
            "input": {
                "items": [
                    {
                        "identity": IDENTITY | {"sourceID": f"evt-{i}"},
                        "generation": 1,
                        "fetchedDigest": None,
                        "maxAttempts": 3,
                        "dueAt": FAR,
                    }
                    for i in range(n)
                ]
            }
        },
        "items",
    ),
    "ClaimOperationInput.leaseMs": Case(
        mutation("claimOperation", "ClaimOperationInput"),
        lambda n: claim_with(leaseToken="t", leaseExpiresAt=None, leaseMs=n),
        "leaseMs",
    ),
    "AcquireLeaseInput.leaseMs": Case(
        mutation("acquireLease", "AcquireLeaseInput"),
        lambda n: {"input": keys(1)[0] | {"leaseToken": "t", "leaseMs": n}},
        "leaseMs",
    ),
    "RenewLeaseInput.leaseMs": Case(
        mutation("renewLease", "RenewLeaseInput"),
        lambda n: {"input": keys(1)[0] | {"leaseToken": "lease-A", "leaseMs": n}},
        "leaseMs",
    ),
    "DeferOperationInput.delayMs": Case(
        mutation("deferOperation", "DeferOperationInput"),
        lambda n: {"input": keys(1)[0] | {"delayMs": n, "leaseToken": "t"}},
        "delayMs",
    ),
    "RecordOperationInput.delayMs": Case(
        mutation("recordOperation", "RecordOperationInput"),
        lambda n: {
            "input": keys(1)[0]
            | {
                "fromState": "ATTEMPTED",
                "toState": "ATTEMPTED",
                "version": 1,
                "leaseToken": "t",
                "delayMs": n,
            }
        },
        "delayMs",
    ),
    "FinalizeOperationInput.delayMs": Case(
        mutation("finalizeOperation", "FinalizeOperationInput"),
        lambda n: {"input": keys(1)[0] | {"version": 1, "leaseToken": "t", "delayMs": n}},
        "delayMs",
    ),
    "ArmWatchInput.delayMs": Case(
        mutation("armWatch", "ArmWatchInput", "outcome"),
        lambda n: {"input": {"identity": IDENTITY, "reason": "MANUAL", "delayMs": n}},
        "delayMs",
        needs_watch=True,
    ),
    "ClaimWatchAttemptInput.leaseMs": Case(
        mutation("claimWatchAttempt", "ClaimWatchAttemptInput", "applied"),
        lambda n: {"input": {"identity": IDENTITY, "generation": 1, "leaseMs": n}},
        "leaseMs",
        needs_watch=True,
    ),
    "DeferWatchInput.delayMs": Case(
        mutation("deferWatch", "DeferWatchInput", "applied"),
        lambda n: {
            "input": {"identity": IDENTITY, "generation": 1, "claimedUntil": FAR, "delayMs": n}
        },
        "delayMs",
        needs_watch=True,
    ),
    "RecordVerificationInput.delayMs": Case(
        mutation("recordVerification", "RecordVerificationInput", "outcome"),
        lambda n: {
            "input": {
                "identity": IDENTITY,
                "generation": 1,
                "fetchedDigest": None,
                "maxAttempts": 3,
                "claimedUntil": FAR,
                "delayMs": n,
            }
        },
        "delayMs",
        needs_watch=True,
    ),
    "RecordIngressInput.delayMs": Case(
        mutation("recordIngress", "RecordIngressInput", "results { outcome }"),
        lambda n: {"input": {"documentID": "doc-1", "winnerDigest": "d-2", "delayMs": n}},
        "delayMs",
        needs_watch=True,
    ),
    "LeaseOperationsInput.leaseMs": Case(
        mutation("leaseOperations", "LeaseOperationsInput", "operations { operationID }"),
        lambda n: {"input": {"leaseToken": "t", "leaseMs": n}},
        "leaseMs",
    ),
    "LeaseOperationsInput.limit": Case(
        mutation("leaseOperations", "LeaseOperationsInput", "operations { operationID }"),
        lambda n: {"input": {"leaseToken": "t", "leaseMs": 1000, "limit": n}},
        "limit",
    ),
    "LeaseOperationsInput.accountKeys": Case(
        mutation("leaseOperations", "LeaseOperationsInput", "operations { operationID }"),
        lambda n: {
            "input": {
                "leaseToken": "t",
                "leaseMs": 1000,
                "connectorName": "calendar",
                "accountKeys": [f"acct-{i}" for i in range(n)],
            }
        },
        "accountKeys",
    ),
    "RenewLeasesInput.leaseMs": Case(
        mutation("renewLeases", "RenewLeasesInput"),
        lambda n: {"input": {"leaseToken": "t", "leaseMs": n, "keys": keys(1)}},
        "leaseMs",
    ),
    "RenewLeasesInput.keys": Case(
        mutation("renewLeases", "RenewLeasesInput"),
        lambda n: {"input": {"leaseToken": "t", "leaseMs": 1000, "keys": keys(n)}},
        "keys",
    ),
    "ReleaseLeasesInput.keys": Case(
        mutation("releaseLeases", "ReleaseLeasesInput"),
        lambda n: {"input": {"leaseToken": "t", "keys": keys(n)}},
        "keys",
    ),
    "ForceReleaseLeasesInput.keys": Case(
        mutation("forceReleaseLeases", "ForceReleaseLeasesInput"),
        lambda n: {"input": {"keys": keys(n)}},
        "keys",
    ),
    "ClaimWatchesInput.claimMs": Case(
        mutation("claimWatches", "ClaimWatchesInput"),
        lambda n: {"input": {"claimMs": n}},
        "claimMs",
    ),
    "ClaimWatchesInput.limit": Case(
        mutation("claimWatches", "ClaimWatchesInput"),
        lambda n: {"input": {"claimMs": 1000, "limit": n}},
        "limit",
    ),
    "ThrottleAccountInput.retryAfterMs": Case(
        mutation("throttleAccount", "ThrottleAccountInput"),
        lambda n: {
            "input": {"connectorName": "calendar", "accountKey": "acct-1", "retryAfterMs": n}
        },
        "retryAfterMs",
    ),
    "ResumeAccountInput.spreadMs": Case(
        mutation("resumeAccount", "ResumeAccountInput"),
        lambda n: {"input": {"connectorName": "calendar", "spreadMs": n}},
        "spreadMs",
    ),
    "CancelOperationsInput.limit": Case(
        mutation("cancelOperations", "CancelOperationsInput"),
        lambda n: {"input": {"filter": OPERATOR_FILTER, "limit": n}},
        "limit",
    ),
    "CancelOperationsInput.reason": Case(
        mutation("cancelOperations", "CancelOperationsInput"),
        lambda n: {"input": {"filter": OPERATOR_FILTER, "reason": message(n)}},
        "reason",
    ),
    "ReissueOperationsInput.limit": Case(
        mutation("reissueOperations", "ReissueOperationsInput"),
        lambda n: {"input": {"filter": OPERATOR_FILTER, "limit": n}},
        "limit",
    ),
    "RearmWatchesInput.limit": Case(
        mutation("rearmWatches", "RearmWatchesInput"),
        lambda n: {"input": {"filter": {"connectorName": "calendar"}, "limit": n}},
        "limit",
    ),
    "DeferOperationInput.errorMessage": Case(
        mutation("deferOperation", "DeferOperationInput"),
        lambda n: {
            "input": keys(1)[0]
            | {"nextAttemptAt": FAR, "leaseToken": "t", "errorMessage": message(n)}
        },
        "errorMessage",
    ),
    "RecordOperationInput.errorMessage": Case(
        mutation("recordOperation", "RecordOperationInput"),
        lambda n: {
            "input": keys(1)[0]
            | {
                "fromState": "ATTEMPTED",
                "toState": "FAILED",
                "version": 1,
                "leaseToken": "t",
                "errorMessage": message(n),
            }
        },
        "errorMessage",
    ),
    "RecordVerificationInput.errorMessage": Case(
        mutation("recordVerification", "RecordVerificationInput"),
        lambda n: {
            "input": {
                "identity": IDENTITY,
                "generation": 1,
                "fetchedDigest": None,
                "maxAttempts": 3,
                "dueAt": FAR,
                "errorMessage": message(n),
            }
        },
        "errorMessage",
    ),
}


def nested(depth: int) -> Any:
    """A JSON object nested ``depth`` deep (an object holding lists)."""
    value: Any = []
    for _ in range(depth - 2):
        value = [value]
    return {"f": value}


def claim_with(**overrides: Any) -> dict[str, Any]:
    return {"input": claim_input(operationID="op-new", sourceID="evt-new", **overrides)}


def rows(n: int) -> str:
    """A request listing ``n`` rows in all over three pages (500, 499, the rest)."""
    return (
        f"{{ a: operations(first: 500) {{ edges {{ cursor }} }} "
        f"b: operations(first: 499) {{ edges {{ cursor }} }} "
        f"c: operations(first: {n - 999}) {{ edges {{ cursor }} }} }}"
    )


CLAIM = mutation("claimOperation", "ClaimOperationInput")
BOUNDS_CASES: dict[str, tuple[int, Case]] = {
    "a key (1 to 1024 characters)": (
        MAX_KEY_LENGTH,
        Case(CLAIM, lambda n: claim_with(callerDID="d" * n), "callerDID"),
    ),
    "a JSON value (at most 64 KiB as ASCII JSON)": (
        MAX_JSON_BYTES,
        Case(CLAIM, lambda n: claim_with(reissueIntent={"f": "x" * (n - 8)}), "reissueIntent"),
    ),
    "a JSON value (32 levels deep)": (
        MAX_JSON_DEPTH,
        Case(CLAIM, lambda n: claim_with(reissueIntent=nested(n)), "reissueIntent"),
    ),
    "an id list (at most 10,000 items)": (
        MAX_LIST_ITEMS,
        Case(
            "query($ids: [String!]) { operations(filter: {documentIDs: $ids}, first: 1) "
            "{ edges { cursor } } }",
            lambda n: {"ids": [f"doc-{i}" for i in range(n)]},
            # Too long a list variable is refused before it is coerced, naming the variable
            # the client sent.
            "ids",
        ),
    ),
    "one request (at most 1000 rows across its lists)": (
        MAX_ROWS_PER_REQUEST,
        Case("", lambda n: {"rows": n}, "first"),
    ),
}
"""The maxima docs/api.md gives for every input of a kind (its 'HTTP and bounds'), each with one
field it bounds."""


@pytest.mark.parametrize("at", sorted(BOUNDS_CASES))
async def test_bounds_maximum__accepted_and_one_more_refused_naming_the_field(gql, at):
    maximum, case = BOUNDS_CASES[at]
    for value, accepted in ((maximum, True), (maximum + 1, False)):
        variables = case.variables(value)
        if "rows" in variables:
            body = await gql.query(rows(variables["rows"]))
        else:
            body = await gql.query(case.document, variables)
        if accepted:
            assert "errors" not in body, body
        else:
            assert error_codes(body) == ["BAD_USER_INPUT"], body
            assert body["errors"][0]["extensions"]["field"] == case.field, body


def test_every_documented_maximum_has_a_case():
    assert set(documented_maxima()) == set(CASES)


async def send(gql: GraphQLClient, case: Case, value: int) -> dict[str, Any]:
    return await gql.query(case.document, case.variables(value))


@pytest.mark.parametrize("at", sorted(CASES))
async def test_documented_maximum__accepted_and_one_more_refused_naming_the_field(gql, at):
    maximum = documented_maxima()[at]
    case = CASES[at]
    if case.needs_watch:
        claimed = await gql.run("ClaimOperation", input=claim_input())
        operation = claimed["claimOperation"]["operation"]
        await gql.run(
            "FinalizeOperation",
            input={
                "callerDID": CALLER,
                "operationID": "op-1",
                "version": operation["version"],
                "leaseToken": "lease-A",
                "dueAt": FAR,
            },
        )
    else:
        await gql.run("ClaimOperation", input=claim_input())

    accepted = await send(gql, case, maximum)
    assert "errors" not in accepted, accepted

    refused = await send(gql, case, maximum + 1)
    assert error_codes(refused) == ["BAD_USER_INPUT"], refused
    assert refused["errors"][0]["extensions"]["field"] == case.field, refused
