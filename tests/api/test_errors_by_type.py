"""Error codes decided by where an error was raised: validation failures are
``GRAPHQL_VALIDATION_FAILED``; a bad inline literal and a bad variable give the same
field-naming ``BAD_USER_INPUT``; a document with several operations and no operationName
is refused and writes nothing; a request that fails before execution has no ``data``."""

import pytest

from tests.api.conftest import claim_input, error_codes

GRAPHQL_RESPONSE = {"Accept": "application/graphql-response+json"}


@pytest.mark.parametrize(
    "query",
    [
        "query($unused: Int) { serverTime }",
        "{ dueOperations(now: $undefined) { id } }",
        "query($now: String) { dueOperations(now: $now) { id } }",
    ],
    ids=["unused-variable", "undefined-variable", "wrong-variable-type"],
)
async def test_validation_failures__validation_code_and_no_data(gql, query):
    response = await gql.http.post("/graphql", json={"query": query})
    body = response.json()
    assert response.status_code == 200
    assert "data" not in body
    assert set(error_codes(body)) == {"GRAPHQL_VALIDATION_FAILED"}
    strict = await gql.http.post("/graphql", json={"query": query}, headers=GRAPHQL_RESPONSE)
    assert strict.status_code == 400
    assert strict.headers["content-type"].startswith("application/graphql-response+json")
    assert "data" not in strict.json()


LEASE = 'callerDID: "a", operationID: "b", token: "t"'


async def test_inline_literal_and_variable__same_field_naming_bad_user_input(gql):
    inline = await gql.query(
        f"mutation {{ acquireLease(input: {{{LEASE}, expiresAt: 1.5}}) {{ applied }} }}"
    )
    variable = await gql.query(
        "mutation($i: AcquireLeaseInput!) { acquireLease(input: $i) { applied } }",
        {"i": {"callerDID": "a", "operationID": "b", "token": "t", "expiresAt": 1.5}},
    )
    for body in (inline, variable):
        assert "data" not in body
        [error] = body["errors"]
        assert error["extensions"]["code"] == "BAD_USER_INPUT"
        assert error["extensions"]["field"] == "expiresAt"
        assert error["message"].startswith("expiresAt: ")


async def test_several_operations_without_name__refused_and_nothing_written(gql):
    document = (
        "mutation Claim($input: ClaimOperationInput!) { claimOperation(input: $input) "
        "{ __typename } }\nquery Now { serverTime }"
    )
    response = await gql.http.post(
        "/graphql", json={"query": document, "variables": {"input": claim_input()}}
    )
    body = response.json()
    assert "data" not in body
    assert error_codes(body) == ["OPERATION_RESOLUTION_FAILURE"]
    listed = await gql.query("{ operations { edges { node { id } } } }")
    assert listed["data"]["operations"]["edges"] == []
    named = await gql.http.post("/graphql", json={"query": document, "operationName": "Now"})
    assert "serverTime" in named.json()["data"]


@pytest.mark.parametrize(
    ("accept", "status"),
    [("application/json", 200), ("application/graphql-response+json", 400)],
)
async def test_unknown_operation_name__operation_resolution_failure(gql, accept, status):
    response = await gql.http.post(
        "/graphql",
        json={"query": "query B { serverTime }", "operationName": "Z"},
        headers={"Accept": accept},
    )
    assert response.status_code == status
    body = response.json()
    assert "data" not in body
    assert error_codes(body) == ["OPERATION_RESOLUTION_FAILURE"]


async def test_wrong_content_type__says_json_expected(gql):
    response = await gql.http.post(
        "/graphql", content=b"{ serverTime }", headers={"Content-Type": "text/plain"}
    )
    assert response.status_code == 400
    assert "application/json" in response.json()["errors"][0]["message"]


async def test_root__redirects_to_graphql(gql):
    response = await gql.http.get("/")
    assert response.status_code == 308
    assert response.headers["location"] == "/graphql"


@pytest.mark.parametrize(
    ("query", "fields"),
    [
        ("mutation { acquireLease { applied } }", ["input"]),
        ('{ operation(callerDID: "a") { id } }', ["operationID"]),
        ("{ serverTime @include }", ["if"]),
        (
            'mutation { acquireLease(input: {operationID: "b", leaseMs: 1000}) { applied } }',
            ["callerDID"],
        ),
        (
            'mutation { armWatch(input: {identity: {ownerDID: "o"}, dueAt: 1}) { outcome } }',
            ["connectorName", "model", "accountKey", "sourceID", "reason"],
        ),
        (
            f"mutation {{ acquireLease(input: {{{LEASE}, expiresAt: 1, later: 2}}) "
            "{ applied } }",
            ["later"],
        ),
    ],
    ids=[
        "missing-argument",
        "second-argument",
        "directive-argument",
        "missing-input-field",
        "several-missing-in-nested-inputs",
        "unknown-input-field",
    ],
)
async def test_missing_or_unknown_values__bad_user_input_naming_each(gql, query, fields):
    body = await gql.query(query)
    assert "data" not in body
    assert error_codes(body) == ["BAD_USER_INPUT"] * len(fields)
    assert [error["extensions"]["field"] for error in body["errors"]] == fields
    assert [error["message"].split(":", 1)[0] for error in body["errors"]] == fields
