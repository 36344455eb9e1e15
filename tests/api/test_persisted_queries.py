"""Apollo's automatic persisted queries over POST and GET: a hash alone is a miss
(``PERSISTED_QUERY_NOT_FOUND``) until the query is sent with it, then a hit; a hash that does
not match its query is refused and registers nothing."""

import hashlib
import json

import httpx
import pytest

from tests.api.conftest import app_client, error_codes

QUERY = "query Now { serverTime }"
SHA = hashlib.sha256(QUERY.encode()).hexdigest()


def extensions(sha: str = SHA) -> dict:
    return {"persistedQuery": {"version": 1, "sha256Hash": sha}}


async def send(http: httpx.AsyncClient, method: str, body: dict) -> httpx.Response:
    if method == "POST":
        return await http.post("/graphql", json=body)
    params = {
        name: json.dumps(value) if isinstance(value, dict) else value
        for name, value in body.items()
    }
    return await http.get("/graphql", params=params)


@pytest.mark.parametrize("method", ["POST", "GET"])
async def test_apq__miss_register_hit(http, method):
    miss = await send(http, method, {"extensions": extensions()})
    assert miss.status_code == 200
    assert "data" not in miss.json()
    assert error_codes(miss.json()) == ["PERSISTED_QUERY_NOT_FOUND"]

    registered = await send(http, method, {"query": QUERY, "extensions": extensions()})
    assert registered.status_code == 200
    assert "serverTime" in registered.json()["data"]

    hit = await send(http, method, {"extensions": extensions()})
    assert hit.status_code == 200, hit.text
    assert "serverTime" in hit.json()["data"]


@pytest.mark.parametrize("method", ["POST", "GET"])
async def test_apq__mismatched_hash_refused_and_not_registered(http, method):
    other = hashlib.sha256(b"{ __typename }").hexdigest()
    refused = await send(http, method, {"query": QUERY, "extensions": extensions(other)})
    assert refused.status_code == 400
    assert "does not match" in refused.json()["errors"][0]["message"]
    miss = await send(http, method, {"extensions": extensions(other)})
    assert error_codes(miss.json()) == ["PERSISTED_QUERY_NOT_FOUND"]


@pytest.mark.parametrize("query", ["{ serverTime ", "{ noSuchField }"])
async def test_apq__a_document_that_fails_to_parse_or_validate_is_not_registered(http, query):
    sha = hashlib.sha256(query.encode()).hexdigest()
    failed = await http.post("/graphql", json={"query": query, "extensions": extensions(sha)})
    assert "data" not in failed.json()
    miss = await http.post("/graphql", json={"extensions": extensions(sha)})
    assert error_codes(miss.json()) == ["PERSISTED_QUERY_NOT_FOUND"]


async def test_apq__registrations_stop_at_the_limit(store):
    assert await store.persisted_queries.register("{ a }", limit=2)
    assert await store.persisted_queries.register("{ b }", limit=2)
    assert not await store.persisted_queries.register("{ c }", limit=2)
    assert await store.persisted_queries.get(hashlib.sha256(b"{ c }").hexdigest()) is None


async def test_apq__registrations_stop_at_the_byte_limit(store):
    first, second = "{ a " + "é" * 40 + " }", "{ b }"
    assert await store.persisted_queries.register(first, max_bytes=90)
    assert not await store.persisted_queries.register(second, max_bytes=90)
    assert await store.persisted_queries.get(hashlib.sha256(second.encode()).hexdigest()) is None
    assert await store.persisted_queries.register(second, max_bytes=91)


@pytest.mark.parametrize(
    ("persisted", "says"),
    [
        ({"version": 1, "sha256Hash": "not-a-hash"}, "sha256Hash must be 64 hex digits"),
        ({"version": 2, "sha256Hash": SHA}, "only version 1 is supported"),
        ("x", "must be an object with version 1 and sha256Hash"),
    ],
)
async def test_apq__a_malformed_extension_is_refused_saying_what_is_wrong(http, persisted, says):
    response = await http.post("/graphql", json={"extensions": {"persistedQuery": persisted}})
    assert response.status_code == 400
    assert says in response.text, response.text


async def test_apq__hash_alone_over_get_needs_a_token(store, http):
    await send(http, "POST", {"query": QUERY, "extensions": extensions()})
    async with app_client(store, token=None) as anonymous:
        response = await anonymous.get(
            "/graphql",
            params={"extensions": json.dumps(extensions())},
            headers={"Accept": "text/html, */*"},
        )
    assert response.status_code == 401
    assert "serverTime" not in response.text
