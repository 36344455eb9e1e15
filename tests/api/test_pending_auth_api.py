"""Pending auth over GraphQL (docs/api.md, 'OAuth state and sync checkpoints'), on both backends:
the code verifier leaves the server through consumePendingAuth alone."""

from typing import Any

import pytest
from graphql import get_named_type, is_interface_type, is_object_type, is_union_type

from server.graph import build_schema
from server.strawberry_internals import graphql_schema
from tests.api.conftest import GraphQLClient, error_codes

EXPIRES = 1_750_000_600_000


def create_input(**overrides: Any) -> dict[str, Any]:
    """A valid ``CreatePendingAuthInput``; any field may be overridden."""
    return {
        "state": "state-1",
        "codeVerifier": "verifier-secret-1",
        "provider": "google",
        "ownerDID": "did:key:owner",
        "controllerWrappableDID": "did:key:controller",
        "createdAt": 1_750_000_000_000,
        "redirectURL": "https://app.example/callback",
        "scopes": ["calendar.read", "calendar.write"],
        "incremental": True,
        "expiresAt": EXPIRES,
    } | overrides


async def create(gql: GraphQLClient, **overrides: Any) -> dict[str, Any]:
    data = await gql.run("CreatePendingAuth", input=create_input(**overrides))
    return data["createPendingAuth"]["pendingAuth"]


async def test_create_pending_auth__returns_record_without_verifier(gql):
    created = await create(gql)

    expected = create_input(ownerWrappableDID=None)
    del expected["codeVerifier"]
    assert created == expected
    assert (await gql.run("GetPendingAuth", state="state-1"))["pendingAuth"] == expected


async def test_create_pending_auth__existing_state_bad_user_input_untouched(gql):
    await create(gql)

    body = await gql.query(
        "mutation($input: CreatePendingAuthInput!) { createPendingAuth(input: $input) "
        "{ pendingAuth { state } } }",
        {"input": create_input(codeVerifier="other", redirectURL="https://evil.example/")},
    )

    assert error_codes(body) == ["BAD_USER_INPUT"]
    assert body["errors"][0]["extensions"]["field"] == "state"
    consumed = await gql.run("ConsumePendingAuth", input={"state": "state-1"})
    assert consumed["consumePendingAuth"]["codeVerifier"] == "verifier-secret-1"
    assert consumed["consumePendingAuth"]["redirectURL"] == "https://app.example/callback"


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"state": ""}, "state"),
        ({"redirectURL": ""}, "redirectURL"),
        ({"scopes": [""]}, "scopes[0]"),
    ],
)
async def test_create_pending_auth__invalid_field_named(gql, overrides, field):
    body = await gql.query(
        "mutation($input: CreatePendingAuthInput!) { createPendingAuth(input: $input) "
        "{ pendingAuth { state } } }",
        {"input": create_input(**overrides)},
    )

    assert error_codes(body) == ["BAD_USER_INPUT"]
    assert body["errors"][0]["extensions"]["field"] == field


async def test_pending_auth__absent_null(gql):
    assert (await gql.run("GetPendingAuth", state="nope"))["pendingAuth"] is None


async def test_pending_auth__code_verifier_not_queryable(gql):
    await create(gql)

    body = await gql.query('{ pendingAuth(state: "state-1") { codeVerifier } }')

    assert error_codes(body) == ["GRAPHQL_VALIDATION_FAILED"]


async def test_consume_pending_auth__once_then_null(gql):
    await create(gql)

    first = await gql.run("ConsumePendingAuth", input={"state": "state-1"})
    second = await gql.run("ConsumePendingAuth", input={"state": "state-1"})

    assert first["consumePendingAuth"]["codeVerifier"] == "verifier-secret-1"
    assert first["consumePendingAuth"]["scopes"] == ["calendar.read", "calendar.write"]
    assert second["consumePendingAuth"] is None
    assert (await gql.run("GetPendingAuth", state="state-1"))["pendingAuth"] is None


async def test_consume_pending_auth__bad_state_named(gql):
    body = await gql.query('mutation { consumePendingAuth(input: {state: ""}) { state } }')

    assert error_codes(body) == ["BAD_USER_INPUT"]
    assert body["errors"][0]["extensions"]["field"] == "state"


async def test_delete_expired_pending_auth__strict_cutoff(gql):
    await create(gql, state="at-cutoff", expiresAt=EXPIRES)
    await create(gql, state="older", expiresAt=EXPIRES - 1)

    deleted = await gql.run("DeleteExpiredPendingAuth", input={"cutoff": EXPIRES})

    assert deleted["deleteExpiredPendingAuth"] == {"deleted": 1}
    assert (await gql.run("GetPendingAuth", state="at-cutoff"))["pendingAuth"] is not None
    assert (await gql.run("GetPendingAuth", state="older"))["pendingAuth"] is None


async def test_delete_expired_pending_auth__bad_cutoff_refused(gql):
    body = await gql.query("mutation { deleteExpiredPendingAuth(input: {cutoff: -1}) { deleted } }")

    assert error_codes(body) == ["BAD_USER_INPUT"]


def reachable_types(schema, roots):
    """Every named type reachable from the fields ``roots`` (pairs of a root type and a
    field name): through fields, union members and interface implementations."""
    seen: dict[str, object] = {}
    pending = [get_named_type(root.fields[name].type) for root, name in roots]
    while pending:
        named = pending.pop()
        if named.name in seen:
            continue
        seen[named.name] = named
        if is_object_type(named) or is_interface_type(named):
            pending.extend(get_named_type(field.type) for field in named.fields.values())
        if is_interface_type(named):
            pending.extend(schema.get_implementations(named).objects)
        if is_union_type(named):
            pending.extend(named.types)
    return seen


def test_schema__no_query_path_returns_code_verifier():
    schema = graphql_schema(build_schema())
    query = schema.query_type
    mutation = schema.mutation_type
    from_queries = reachable_types(schema, [(query, name) for name in query.fields])
    from_mutations = reachable_types(
        schema, [(mutation, name) for name in mutation.fields if name != "consumePendingAuth"]
    )

    for name, named in (from_queries | from_mutations).items():
        fields = getattr(named, "fields", {}) or {}
        assert "codeVerifier" not in fields, name
    assert "ConsumedPendingAuth" not in from_queries
    consumed = schema.get_type("ConsumedPendingAuth")
    assert "codeVerifier" in consumed.fields
    assert mutation.fields["consumePendingAuth"].type is consumed
