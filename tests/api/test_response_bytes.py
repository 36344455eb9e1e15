"""One request's answer is bounded in bytes (``MAX_RESPONSE_BYTES``), on both backends: a page
stops early with ``hasNextPage`` and clients page on; a list asked for once the bytes are
spent answers ``RESPONSE_TOO_LARGE``; small requests are unchanged."""

from typing import Any

import httpx

from server.settings import Settings
from store import ConnectorStore
from tests.api.conftest import app_client, error_codes
from tests.factories import claimed_operation, committed_operation
from tests.tokens import mint

LIMIT = 100_000
"""The test's ``MAX_RESPONSE_BYTES``."""
BLOB = 30_000
"""Bytes of each operation's reissue intent: three fit under ``LIMIT``, four do not."""
ROWS = 10
PAGE = "pageInfo { hasNextPage endCursor } edges { cursor node { operationID reissueIntent } }"
OPERATIONS = "query($after: String) { operations(first: 10, after: $after) { " + PAGE + " } }"
TWO_ALIASES = (
    "{ a: operations(first: 10) { " + PAGE + " } b: operations(first: 10) { " + PAGE + " } }"
)


async def blob_operations(store: ConnectorStore, count: int = ROWS, **overrides: Any) -> None:
    """``count`` operations ``op-00``… of one watch, each with a ``BLOB``-byte intent."""
    for index in range(count):
        await claimed_operation(
            store, operation_id=f"op-{index:02}", reissue_intent={"blob": "x" * BLOB}, **overrides
        )


def bounded(store: ConnectorStore, token: str | None = None) -> httpx.AsyncClient:
    """A client of an app whose ``MAX_RESPONSE_BYTES`` is ``LIMIT``."""
    settings = Settings(max_response_bytes=LIMIT)
    return app_client(store, settings) if token is None else app_client(store, settings, token)


async def post(client: httpx.AsyncClient, query: str, **variables: Any) -> httpx.Response:
    response = await client.post("/graphql", json={"query": query, "variables": variables})
    assert response.status_code == 200, response.text
    return response


async def test_operations_page__stops_within_the_limit_with_a_next_page(store):
    await blob_operations(store)
    async with bounded(store) as client:
        response = await post(client, OPERATIONS)

    page = response.json()["data"]["operations"]
    assert len(response.content) < LIMIT
    assert [edge["node"]["operationID"] for edge in page["edges"]] == ["op-00", "op-01", "op-02"]
    assert page["pageInfo"] == {"hasNextPage": True, "endCursor": page["edges"][-1]["cursor"]}


async def test_operations_pages__reach_every_row_exactly_once(store):
    await blob_operations(store)
    seen: list[str] = []
    async with bounded(store) as client:
        after = None
        while True:
            response = await post(client, OPERATIONS, after=after)
            assert len(response.content) < LIMIT
            page = response.json()["data"]["operations"]
            seen.extend(edge["node"]["operationID"] for edge in page["edges"])
            if not page["pageInfo"]["hasNextPage"]:
                break
            after = page["pageInfo"]["endCursor"]

    assert seen == [f"op-{index:02}" for index in range(ROWS)]


async def test_tenant_page__stops_within_the_limit_over_its_own_rows(store):
    await blob_operations(store)
    tenant = mint("did:key:caller", "operations:read")
    async with bounded(store, tenant) as client:
        response = await post(client, OPERATIONS)

    page = response.json()["data"]["operations"]
    assert len(response.content) < LIMIT
    assert len(page["edges"]) == 3 and page["pageInfo"]["hasNextPage"] is True


async def test_second_alias__answers_response_too_large(store):
    await blob_operations(store)
    async with bounded(store) as client:
        response = await post(client, TWO_ALIASES)

    body = response.json()
    assert len(response.content) < LIMIT
    assert error_codes(body) == ["RESPONSE_TOO_LARGE"]
    extensions = body["errors"][0]["extensions"]
    assert extensions["field"] == "operations" and extensions["maxResponseBytes"] == LIMIT
    assert body["errors"][0]["path"] == ["b"]


async def test_two_aliases__load_one_after_the_other_within_the_limit(store):
    await blob_operations(store)
    sent: list[int] = []
    fetch_all = store.db.fetch_all

    async def counting(query: Any) -> Any:
        rows = await fetch_all(query)
        sent.append(len(rows))
        return rows

    store.db.fetch_all = counting  # type: ignore[method-assign]
    async with bounded(store) as client:
        await post(client, TWO_ALIASES)

    # The first alias: its three rows and the one telling more follow; the second: its
    # first row (past what is left, so refused) and the one after it.
    assert sorted(sent) == [2, 4]


async def test_due_operations__return_fewer_within_the_limit(store, clock):
    await blob_operations(store, lease_expires_at=clock.now - 1)
    query = "query($now: EpochMillis!) { dueOperations(now: $now) { operationID } }"
    async with bounded(store) as client:
        response = await post(client, query, now=clock.now)

    assert len(response.json()["data"]["dueOperations"]) == 3


async def test_nested_operations_past_the_limit__answer_response_too_large(store):
    record = await committed_operation(store, operation_id="op-99")
    await blob_operations(store, count=4)
    identity = {
        "ownerDID": record.owner_did,
        "connectorName": record.connector_name,
        "model": record.model,
        "accountKey": record.account_key,
        "sourceID": record.source_id,
    }
    query = (
        "query($identity: WatchIdentityInput!) { watch(identity: $identity) "
        "{ operations { operationID reissueIntent } } }"
    )
    async with bounded(store) as client:
        response = await post(client, query, identity=identity)

    body = response.json()
    assert len(response.content) < LIMIT
    assert error_codes(body) == ["RESPONSE_TOO_LARGE"]
    assert body["errors"][0]["extensions"]["field"] == "operations"


async def test_entities__past_the_limit_answer_response_too_large(store):
    await blob_operations(store)
    keys = [
        {"__typename": "Operation", "callerDID": "did:key:caller", "operationID": f"op-{i:02}"}
        for i in range(ROWS)
    ]
    query = (
        "query($r: [_Any!]!) { _entities(representations: $r) "
        "{ ... on Operation { operationID reissueIntent } } }"
    )
    async with bounded(store) as client:
        response = await post(client, query, r=keys)

    body = response.json()
    found = [entity["operationID"] for entity in body["data"]["_entities"] if entity]
    assert len(response.content) < LIMIT
    assert found == ["op-00", "op-01", "op-02"]
    assert set(error_codes(body)) == {"RESPONSE_TOO_LARGE"}


async def test_small_request__unchanged_under_the_default_limit(store):
    for index in range(3):
        await claimed_operation(store, operation_id=f"op-{index}")
    async with app_client(store) as client:
        response = await post(client, OPERATIONS)

    page = response.json()["data"]["operations"]
    assert "errors" not in response.json()
    assert [edge["node"]["operationID"] for edge in page["edges"]] == ["op-0", "op-1", "op-2"]
    assert page["pageInfo"]["hasNextPage"] is False
