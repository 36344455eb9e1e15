"""The subgraph's own fields: ``_service`` gives SDL with our keys; ``_entities`` resolves
our entities by key for a viewer that may see them, null otherwise, and refuses a
representation that names no entity of ours with ``BAD_USER_INPUT``; ``Query.node`` is
shareable, so a Relay subgraph composes beside ours."""

import json

import pytest

from tests.api.conftest import app_client, claim_input, error_codes
from tests.e2e.live import node
from tests.tokens import mint

CLAIM = "mutation($input: ClaimOperationInput!) { claimOperation(input: $input) { __typename } }"
ENTITIES = (
    "query($r: [_Any!]!) { _entities(representations: $r) "
    "{ ... on Operation { operationID state } } }"
)
KEY = {"__typename": "Operation", "callerDID": "did:key:caller", "operationID": "op-1"}


async def test_service_sdl__keys_and_shareable(gql):
    sdl = (await gql.query("{ _service { sdl } }"))["data"]["_service"]["sdl"]
    assert 'type Operation implements Node @key(fields: "callerDID operationID")' in sdl
    assert '@key(fields: "ownerDID connectorName model accountKey sourceID")' in sdl
    assert "type PageInfo @shareable" in sdl


async def test_entities__the_caller_sees_its_own_a_stranger_gets_null(store, gql):
    await gql.query(CLAIM, {"input": claim_input()})
    caller = mint("did:key:caller", "operations:read")
    stranger = mint("did:key:stranger", "operations:read")
    async with app_client(store, token=caller) as own, app_client(store, token=stranger) as other:
        mine = await own.post("/graphql", json={"query": ENTITIES, "variables": {"r": [KEY]}})
        theirs = await other.post("/graphql", json={"query": ENTITIES, "variables": {"r": [KEY]}})
    assert mine.json()["data"]["_entities"] == [{"operationID": "op-1", "state": "ATTEMPTED"}]
    assert theirs.json() == {"data": {"_entities": [None]}}


@pytest.mark.parametrize("representation", [{"__typename": "Nope"}, {"callerDID": "x"}, 5])
async def test_entities__not_our_entity_is_bad_user_input(gql, representation):
    body = await gql.query(ENTITIES, {"r": [representation]})
    assert error_codes(body) == ["BAD_USER_INPUT"]


@pytest.mark.parametrize(
    "key",
    [["Operation", ""], ["Operation", "x" * 2000], ["Watch", ["", "c", "m", "a", "s"]], "junk"],
)
async def test_node__forged_id_is_not_found_naming_no_field(gql, key):
    from schema.node import encode_opaque

    forged = key if isinstance(key, str) else encode_opaque(key)
    body = await gql.query("query($id: ID!) { node(id: $id) { id } }", {"id": forged})
    assert body["data"] == {"node": None}
    assert error_codes(body) == ["NOT_FOUND"]
    assert "field" not in body["errors"][0]["extensions"]


async def test_entities__representations_count_against_the_request_rows(gql):
    many = [KEY | {"operationID": f"op-{n}"} for n in range(1001)]
    body = await gql.query(ENTITIES, {"r": many})
    assert error_codes(body) == ["BAD_USER_INPUT"]
    assert body["errors"][0]["extensions"]["field"] == "representations"
    fits = await gql.query(ENTITIES, {"r": many[:1000]})
    assert "errors" not in fits and len(fits["data"]["_entities"]) == 1000


async def test_service_sdl__composes_beside_a_relay_subgraph(gql, tmp_path):
    """``Query.node`` is shareable: a subgraph with the Relay ``Node`` interface and its own
    ``Query.node`` composes with ours (Apollo's ``composeServices``)."""
    sdl = (await gql.query("{ _service { sdl } }"))["data"]["_service"]["sdl"]
    (tmp_path / "store.graphql").write_text(sdl)

    composed = node("compose-relay.mjs", str(tmp_path / "store.graphql"), timeout_s=120)

    assert composed.returncode == 0, composed.stderr
    assert json.loads(composed.stdout.splitlines()[-1]) == {"errors": []}
