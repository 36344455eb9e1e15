"""The batch settles over GraphQL (docs/worker-protocol.md, 'Settling in batches'), through the
documents of graphql/operations, on both backends: results in input order, each the single
mutation's payload; a bad, forbidden or repeated item refuses the whole request naming
``items[i].<field>``, and nothing is written."""

from typing import Any

import pytest

from tests.api.conftest import GraphQLClient, app_client, claim_input, error_codes
from tests.tokens import mint

CALLER = "did:key:caller"
FAR = 4102444800000


def claims(count: int, **overrides: Any) -> list[dict[str, Any]]:
    """``count`` claims, each its own provider entity (``op-i`` of ``evt-i``)."""
    return [
        claim_input(operationID=f"op-{i}", sourceID=f"evt-{i}") | overrides for i in range(count)
    ]


async def claimed(gql: GraphQLClient, count: int) -> list[dict[str, Any]]:
    data = await gql.run("ClaimOperations", input={"items": claims(count)})
    results = data["claimOperations"]["results"]
    assert [r["__typename"] for r in results] == ["OperationClaimed"] * count
    return [r["operation"] for r in results]


async def snapshot(gql: GraphQLClient) -> Any:
    body = await gql.query(
        "{ operations(first: 500) { edges { node { operationID state version attempts "
        "sendMarker leaseToken updatedAt } } } "
        "watches(first: 500) { edges { node { sourceID repairGeneration updatedAt } } } }"
    )
    return body["data"]


async def test_settle_batches__lifecycle_in_input_order(gql, clock):
    operations = await claimed(gql, 3)
    again = await gql.run(
        "ClaimOperations",
        input={
            "items": [
                claim_input(operationID="op-1"),
                claim_input(operationID="op-0", payloadHash="o"),
            ]
        },
    )
    assert [r["__typename"] for r in again["claimOperations"]["results"]] == [
        "OperationExists",
        "OperationConflict",
    ]
    marks = [
        {"callerDID": CALLER, "operationID": "op-2", "leaseToken": "lease-A", "marker": "run"},
        {"callerDID": CALLER, "operationID": "op-0", "leaseToken": "lease-B", "marker": "run"},
        {"callerDID": CALLER, "operationID": "absent", "leaseToken": "lease-A", "marker": "run"},
    ]
    marked = (await gql.run("MarkSendsStarted", input={"items": marks}))["markSendsStarted"]
    assert [
        (r["applied"], r["operation"] and r["operation"]["operationID"]) for r in marked["results"]
    ] == [
        (True, "op-2"),
        (False, "op-0"),
        (False, None),
    ]
    assert marked["results"][0]["operation"]["sendMarker"] == "run"
    finals = [
        {
            "callerDID": CALLER,
            "operationID": op["operationID"],
            "version": op["version"],
            "leaseToken": "lease-A",
            "dueAt": FAR,
        }
        for op in operations[1:]
    ]
    finals[0]["version"] = 5
    done = (await gql.run("FinalizeOperations", input={"items": finals}))["finalizeOperations"]
    assert [r["applied"] for r in done["results"]] == [False, True]
    assert done["results"][0]["watch"] is None
    assert done["results"][0]["operation"]["state"] == "ATTEMPTED"
    assert done["results"][1]["operation"]["state"] == "COMMITTED"
    assert done["results"][1]["watch"]["repairGeneration"] == 1
    records = [
        {
            "callerDID": CALLER,
            "operationID": "op-1",
            "fromState": "ATTEMPTED",
            "toState": "FAILED",
            "version": 0,
            "leaseToken": "lease-A",
            "kind": "permanent",
        },
        {
            "callerDID": CALLER,
            "operationID": "op-2",
            "fromState": "COMMITTED",
            "toState": "FAILED",
            "version": 1,
            "leaseToken": "lease-A",
        },
    ]
    recorded = (await gql.run("RecordOperations", input={"items": records}))["recordOperations"]
    assert [(r["applied"], r["operation"]["state"]) for r in recorded["results"]] == [
        (True, "FAILED"),
        (False, "COMMITTED"),
    ]
    watch = await gql.query(
        '{ watch(identity: {ownerDID: "did:key:owner", connectorName: "calendar", '
        'model: "Event", accountKey: "acct-1", sourceID: "evt-2"}) { repairGeneration } }'
    )
    identity = {
        "ownerDID": "did:key:owner",
        "connectorName": "calendar",
        "model": "Event",
        "accountKey": "acct-1",
        "sourceID": "evt-2",
    }
    generation = watch["data"]["watch"]["repairGeneration"]
    verifications = [
        {
            "identity": identity,
            "generation": generation,
            "fetchedDigest": "d",
            "maxAttempts": 1,
            "dueAt": FAR,
        },
        {
            "identity": identity | {"sourceID": "none"},
            "generation": 1,
            "fetchedDigest": "d",
            "maxAttempts": 3,
            "dueAt": FAR,
        },
    ]
    verified = await gql.run("RecordVerifications", input={"items": verifications})
    results = verified["recordVerifications"]["results"]
    assert [r["outcome"] for r in results] == ["REPAIR_FAILED", "STALE_GENERATION"]
    assert results[1]["watch"] is None


async def test_mark_sends_started__five_hundred_items_apply(gql, clock):
    await claimed(gql, 500)
    marks = [
        {"callerDID": CALLER, "operationID": f"op-{i}", "leaseToken": "lease-A", "marker": "m"}
        for i in range(500)
    ]
    marked = await gql.run("MarkSendsStarted", input={"items": marks})
    assert [r["applied"] for r in marked["markSendsStarted"]["results"]] == [True] * 500


async def test_claim_operations__five_hundred_and_one_items_refused(gql, clock):
    body = await gql.query(
        "mutation($input: ClaimOperationsInput!) { claimOperations(input: $input) "
        "{ results { __typename } } }",
        {"input": {"items": claims(501)}},
    )
    assert error_codes(body) == ["BAD_USER_INPUT"]
    assert body["errors"][0]["extensions"]["field"] == "items"
    assert (await snapshot(gql))["operations"]["edges"] == []


MARK = (
    "mutation($input: MarkSendsStartedInput!) { markSendsStarted(input: $input) "
    "{ results { applied } } }"
)


@pytest.mark.parametrize(
    ("spoil", "field"),
    [
        ({"marker": "*contested*"}, "items[2].marker"),
        ({"leaseToken": ""}, "items[2].leaseToken"),
        ({"operationID": "op-0"}, "items[2].operationID"),
        ({"leaseToken": 7}, "items[2].leaseToken"),
        ({"leaseToken": None}, "items[2].leaseToken"),
        ({"bogus": 1}, "items[2].bogus"),
    ],
    ids=["reserved", "empty", "repeated", "not-a-string", "null", "unknown-field"],
)
async def test_mark_sends_started__bad_item_refuses_whole_request(gql, clock, spoil, field):
    await claimed(gql, 3)
    before = await snapshot(gql)
    clock.advance(1_000)
    marks = [
        {"callerDID": CALLER, "operationID": f"op-{i}", "leaseToken": "lease-A", "marker": "m"}
        for i in range(3)
    ]
    marks[2] |= spoil
    body = await gql.query(MARK, {"input": {"items": marks}})
    assert error_codes(body) == ["BAD_USER_INPUT"]
    assert body["errors"][0]["extensions"]["field"] == field
    assert await snapshot(gql) == before


async def test_mark_sends_started__variables_missing_fields_named_each_with_its_index(gql):
    marks = [
        {"callerDID": CALLER, "operationID": "op-0", "leaseToken": "lease-A", "marker": "m"},
        {"callerDID": CALLER, "marker": "m", "bogus": 1},
        {"operationID": "op-2", "leaseToken": "lease-A", "marker": "m"},
    ]
    body = await gql.query(MARK, {"input": {"items": marks}})
    assert error_codes(body) == ["BAD_USER_INPUT"] * 4
    assert [error["extensions"]["field"] for error in body["errors"]] == [
        "items[1].operationID",
        "items[1].leaseToken",
        "items[1].bogus",
        "items[2].callerDID",
    ]


ITEMS_AS_VARIABLE = (
    "mutation($items: [MarkSendStartedInput!]!) "
    "{ markSendsStarted(input: {items: $items}) { results { applied } } }"
)


async def test_mark_sends_started__a_list_variable_names_its_item_by_index(gql):
    marks = [
        {"callerDID": CALLER, "operationID": f"op-{i}", "leaseToken": "lease-A", "marker": "m"}
        for i in range(3)
    ]
    marks[2]["marker"] = 7
    del marks[1]["leaseToken"]
    body = await gql.query(ITEMS_AS_VARIABLE, {"items": marks})
    assert [error["extensions"]["field"] for error in body["errors"]] == [
        "items[1].leaseToken",
        "items[2].marker",
    ]
    listed = await gql.query(
        "query($s: [OperationState!]) { operations(filter: {states: $s}) { edges { cursor } } }",
        {"s": ["COMMITTED", None]},
    )
    assert [error["extensions"]["field"] for error in listed["errors"]] == ["s[1]"]


async def test_mark_sends_started__many_bad_items_answer_with_the_first_50_errors(gql):
    body = await gql.query(ITEMS_AS_VARIABLE, {"items": [{"callerDID": CALLER}] * 500})
    assert error_codes(body) == ["BAD_USER_INPUT"] * 50
    assert body["errors"][-1]["extensions"]["field"] == "items[16].leaseToken"


@pytest.mark.parametrize(
    ("query", "variables", "field", "count", "most"),
    [
        (ITEMS_AS_VARIABLE, {"items": [{}] * 100_000}, "items", 100_000, 500),
        (
            "mutation($input: ClaimOperationsInput!) { claimOperations(input: $input) "
            "{ results { __typename } } }",
            {"input": {"items": [{}] * 501}},
            "items",
            501,
            500,
        ),
        (
            "mutation($input: RenewLeasesInput!) { renewLeases(input: $input) { renewed { id } } }",
            {"input": {"leaseToken": "t", "leaseMs": 1000, "keys": [{}] * 100_000}},
            "keys",
            100_000,
            500,
        ),
        (
            "query($s: [String!]) { operations(filter: {documentIDs: $s}) { edges { cursor } } }",
            {"s": [7] * 10_001},
            "s",
            10_001,
            10_000,
        ),
    ],
    ids=["items-variable", "items-in-input", "keys", "scalars"],
)
async def test_a_list_longer_than_its_bound_is_refused_before_its_items_are_checked(
    gql, query, variables, field, count, most
):
    body = await gql.query(query, variables)
    assert error_codes(body) == ["BAD_USER_INPUT"]
    assert body["errors"][0]["extensions"]["field"] == field
    assert "data" not in body
    said = (
        f"must hold at most {most} items, not {count}"
        if field != "s"
        else f"holds {count} items, more than any list input takes ({most})"
    )
    assert said in body["errors"][0]["message"]


async def test_an_object_of_many_unknown_fields_is_refused_by_the_first_of_them(gql):
    filter_ = {"callerDID": "did:key:caller"} | {f"u{n}": 0 for n in range(100_000)}
    body = await gql.query(
        "query($f: OperationFilter) { operations(filter: $f) { edges { cursor } } }",
        {"f": filter_},
    )
    assert error_codes(body) == ["BAD_USER_INPUT"]
    assert body["errors"][0]["extensions"]["field"] == "u0"
    assert "is not a field of OperationFilter" in body["errors"][0]["message"]


async def test_finalize_operations__item_of_another_caller_forbidden(store, gql, clock):
    await claimed(gql, 2)
    before = await snapshot(gql)
    tenant = mint(CALLER, "operations:write operations:read watches:read")
    finals = [
        {"callerDID": CALLER, "operationID": f"op-{i}", "version": 0, "leaseToken": "lease-A"}
        | {"dueAt": FAR}
        for i in range(2)
    ]
    finals[1]["callerDID"] = "did:key:other"
    async with app_client(store, token=tenant) as http:
        body = (
            await http.post(
                "/graphql",
                json={
                    "query": "mutation($input: FinalizeOperationsInput!) { "
                    "finalizeOperations(input: $input) { results { applied } } }",
                    "variables": {"input": {"items": finals}},
                },
            )
        ).json()
    assert error_codes(body) == ["FORBIDDEN"]
    assert body["errors"][0]["extensions"]["field"] == "items[1].callerDID"
    assert await snapshot(gql) == before


async def test_record_verifications__item_of_another_owner_forbidden(store, gql, clock):
    tenant = mint("did:key:owner", "watches:write watches:read")
    identity = {
        "connectorName": "calendar",
        "model": "Event",
        "accountKey": "acct-1",
        "sourceID": "evt-1",
    }
    items = [
        {"identity": identity | {"ownerDID": owner}, "generation": 1, "maxAttempts": 1}
        | {"dueAt": FAR, "fetchedDigest": "d"}
        for owner in ("did:key:owner", "did:key:owner", "did:key:other")
    ]
    async with app_client(store, token=tenant) as http:
        body = (
            await http.post(
                "/graphql",
                json={
                    "query": "mutation($input: RecordVerificationsInput!) { "
                    "recordVerifications(input: $input) { results { outcome } } }",
                    "variables": {"input": {"items": items}},
                },
            )
        ).json()
    assert error_codes(body) == ["FORBIDDEN"]
    assert body["errors"][0]["extensions"]["field"] == "items[2].ownerDID"


@pytest.mark.parametrize(
    ("item", "field"),
    [
        (
            '{callerDID: "did:key:caller", operationID: "op-1", leaseToken: 7, marker: "m"}',
            "items[1].leaseToken",
        ),
        ('{callerDID: "did:key:caller", operationID: "op-1", marker: "m"}', "items[1].leaseToken"),
    ],
    ids=["wrong-type", "missing"],
)
async def test_mark_sends_started__bad_literal_item_named(gql, clock, item, field):
    first = '{callerDID: "did:key:caller", operationID: "op-0", leaseToken: "l", marker: "m"}'
    body = await gql.query(
        f"mutation {{ markSendsStarted(input: {{items: [{first}, {item}]}}) "
        "{ results { applied } } }"
    )
    assert error_codes(body) == ["BAD_USER_INPUT"]
    assert body["errors"][0]["extensions"]["field"] == field
