"""The HTTP surface: /graphql over GET and POST, GraphiQL, health, limits, masking."""

import asyncio
import json
import logging
import re
import shutil

import httpx
import pytest
import sqlalchemy as sa
from graphql import get_introspection_query

from server.app import create_app
from server.settings import Settings
from store import ConnectorStore
from store.database import Database
from store.migrate import upgrade
from tests.api.conftest import app_client, claim_input, error_codes

CLAIM = "mutation($i: ClaimOperationInput!) { claimOperation(input: $i) { __typename } }"


async def test_healthz_and_readyz__ok(http):
    assert (await http.get("/healthz")).json() == {"status": "ok"}
    ready = await http.get("/readyz")
    assert ready.status_code == 200 and ready.json() == {"status": "ok"}


async def test_readyz__sqlite_folder_deleted_is_503_and_writes_unavailable(tmp_path, caplog):
    url = f"sqlite+aiosqlite:///{tmp_path}/data/store.db"
    await asyncio.to_thread(upgrade, url)
    db = Database(url)
    await db.connect()
    try:
        async with app_client(ConnectorStore(db)) as http:
            assert (await http.get("/readyz")).status_code == 200
            shutil.rmtree(tmp_path / "data")

            assert (await http.get("/readyz")).status_code == 503
            response = await http.post(
                "/graphql",
                json={"query": CLAIM, "variables": {"i": claim_input()}},
                headers={"x-request-id": "req-gone"},
            )
    finally:
        await db.disconnect()
    body = response.json()
    assert error_codes(body) == ["SERVICE_UNAVAILABLE"]
    assert body["errors"][0]["extensions"]["requestId"] == "req-gone"
    assert body["data"] is None
    assert "req-gone" in caplog.text


async def test_mutation__database_busy_is_service_unavailable_not_masked(database_url):
    db = Database(database_url, pool_size=1, wait_timeout_s=0.2)
    await db.connect()
    holding, done = asyncio.Event(), asyncio.Event()

    async def hold() -> None:
        async with db.write_transaction():
            await db.fetch_one(sa.text("SELECT 1"))
            holding.set()
            await done.wait()

    holder = asyncio.create_task(hold())
    try:
        await holding.wait()
        async with app_client(ConnectorStore(db)) as http:
            response = await http.post(
                "/graphql", json={"query": CLAIM, "variables": {"i": claim_input()}}
            )
    finally:
        done.set()
        await holder
        await db.disconnect()
    body = response.json()
    assert error_codes(body) == ["SERVICE_UNAVAILABLE"]
    assert body["errors"][0]["extensions"]["retryable"] is True


async def test_get__queries_run_and_mutations_refused(http):
    response = await http.get("/graphql", params={"query": "{ serverTime }"})
    assert response.status_code == 200
    assert isinstance(response.json()["data"]["serverTime"], int)
    null_variables = await http.get(
        "/graphql", params={"query": "{ serverTime }", "variables": "null"}
    )
    assert null_variables.status_code == 200
    release = 'releaseLease(input: {callerDID: "a", operationID: "b", token: "t"}) { applied }'
    mutation = f"mutation {{ {release} }}"
    refused = await http.get("/graphql", params={"query": mutation})
    assert refused.status_code == 405
    assert refused.headers["allow"] == "POST"
    assert error_codes(refused.json()) == ["METHOD_NOT_ALLOWED"]


@pytest.mark.parametrize(
    "subscription",
    [
        "subscription { workAvailable { at } }",
        "subscription { operationEvents { sequence } }",
        "subscription { watchEvents { sequence } }",
    ],
)
@pytest.mark.parametrize("method", ["POST", "GET"])
@pytest.mark.parametrize("accept", ["application/json", "application/graphql-response+json"])
async def test_subscription__sent_for_a_single_answer_is_406_saying_how_to_subscribe(
    http, subscription, method, accept
):
    sent = (
        {"json": {"query": subscription}}
        if method == "POST"
        else {"params": {"query": subscription}}
    )
    refused = await http.request(method, "/graphql", headers={"Accept": accept}, **sent)

    assert refused.status_code == 406
    assert error_codes(refused.json()) == ["NOT_ACCEPTABLE"]
    message = refused.json()["errors"][0]["message"]
    assert "graphql-transport-ws" in message
    assert 'Accept: multipart/mixed;subscriptionSpec="1.0"' in message


async def test_refused_requests__json_errors_that_echo_little(http):
    unknown = await http.post(
        "/graphql", json={"query": "{ serverTime }", "operationName": "x" * 100_000}
    )
    assert unknown.status_code == 200
    assert error_codes(unknown.json()) == ["OPERATION_RESOLUTION_FAILURE"]
    assert len(unknown.text) < 1000
    plain = await http.post(
        "/graphql", content=b"{ serverTime }", headers={"content-type": "text/plain"}
    )
    assert plain.status_code == 400 and error_codes(plain.json()) == ["BAD_REQUEST"]


async def test_refused_requests__a_message_echoing_a_lone_surrogate_is_json(http):
    """JSON may carry a lone surrogate (``\\udc00``); a refusal that echoes it answers in
    JSON with it escaped (it was a 500 in plain text: Starlette's encoder refused it)."""
    unknown = await http.post(
        "/graphql",
        content=b'{"query": "{ serverTime }", "operationName": "\\udc00x"}',
        headers={"content-type": "application/json"},
    )
    assert unknown.status_code == 200, unknown.text
    assert error_codes(unknown.json()) == ["OPERATION_RESOLUTION_FAILURE"]
    assert "\\udc00x" in unknown.text


@pytest.mark.parametrize(
    "content_type",
    [
        "application/json",
        "application/json; charset=utf-8",
        "application/json;charset=utf-8",
        'application/json; charset="utf-8"',
    ],
)
async def test_json_content_type__each_spelling_answers_alike(http, content_type):
    body = json.dumps({"query": "{ __typename }"}).encode()
    answered = await http.post("/graphql", content=body, headers={"content-type": content_type})
    assert answered.status_code == 200 and answered.json() == {"data": {"__typename": "Query"}}


@pytest.mark.parametrize(
    "body",
    [
        {"query": "{ __typename }", "operationName": None, "variables": None},
        {"query": 1},
        {"query": "{ __typename }", "variables": []},
        {"query": "{ __typename }", "extensions": "x"},
        {"query": "{ __typename }", "operationName": 1},
        [{"query": "{ __typename }"}],
        "{ __typename }",
    ],
)
async def test_json_body__read_here_answered_as_strawberry_reads_it(http, body):
    """A JSON body with the usual ``Content-Type`` is read by the view itself
    (``GraphQLApp.parse_http_body``); any other spelling by Strawberry: both answer alike."""
    content = json.dumps(body).encode()
    answers = [
        await http.post("/graphql", content=content, headers={"content-type": content_type})
        for content_type in ("application/json", "application/json;charset=utf-8")
    ]
    assert [(a.status_code, a.json()) for a in answers[1:]] == [
        (answers[0].status_code, answers[0].json())
    ]


@pytest.mark.parametrize(
    "content_type", ["application/jsonx", "application/json-seq", "text/json", ""]
)
async def test_other_content_types__are_400(http, content_type):
    body = json.dumps({"query": "{ __typename }"}).encode()
    refused = await http.post("/graphql", content=body, headers={"content-type": content_type})
    assert refused.status_code == 400 and error_codes(refused.json()) == ["BAD_REQUEST"]


async def test_duplicate_json_key__in_a_body_is_400_naming_it_and_writes_nothing(http, store):
    item = json.dumps(claim_input(operationID="op-1"))
    twice = item.replace('"operationID": "op-1"', '"operationID": "op-1", "operationID": "op-2"')
    body = f'{{"query": {json.dumps(CLAIM)}, "variables": {{"i": {twice}}}}}'
    refused = await http.post(
        "/graphql", content=body.encode(), headers={"content-type": "application/json"}
    )
    assert refused.status_code == 400 and error_codes(refused.json()) == ["BAD_REQUEST"]
    assert '"operationID" appears twice' in refused.json()["errors"][0]["message"]
    for operation_id in ("op-1", "op-2"):
        assert await store.operations.get_operation("did:key:caller", operation_id) is None


async def test_duplicate_json_key__at_the_top_or_in_get_variables_is_400(http):
    top = '{"query": "{ serverTime }", "query": "{ __typename }"}'
    posted = await http.post(
        "/graphql", content=top.encode(), headers={"content-type": "application/json"}
    )
    got = await http.get(
        "/graphql", params={"query": "{ serverTime }", "variables": '{"a": 1, "a": 2}'}
    )
    for refused, key in [(posted, "query"), (got, "a")]:
        assert refused.status_code == 400 and error_codes(refused.json()) == ["BAD_REQUEST"]
        assert f'"{key}" appears twice' in refused.json()["errors"][0]["message"]


async def test_duplicate_json_key__in_text_that_is_not_json_is_refused_as_not_json(http):
    for broken in ['{"variables": {"a": 1, "a": 2}', '{"variables": {"a": 1, "a": 2}} trailing']:
        refused = await http.post(
            "/graphql", content=broken.encode(), headers={"content-type": "application/json"}
        )
        assert refused.status_code == 400 and error_codes(refused.json()) == ["BAD_REQUEST"]
        assert refused.json()["errors"][0]["message"] == "Unable to parse request body as JSON"


@pytest.mark.parametrize(
    ("number", "why"),
    [
        ("NaN", "NaN is not a JSON number"),
        ("-Infinity", "-Infinity is not a JSON number"),
        ("1e999", "1e999 is too large a number"),
    ],
)
async def test_numbers_json_lacks__are_400_and_write_nothing(http, store, number, why):
    item = json.dumps(claim_input(operationID="op-1", reissueIntent={"x": 1}))
    spoiled = item.replace('{"x": 1}', f'{{"x": {number}}}')
    body = f'{{"query": {json.dumps(CLAIM)}, "variables": {{"i": {spoiled}}}}}'
    refused = await http.post(
        "/graphql", content=body.encode(), headers={"content-type": "application/json"}
    )
    assert refused.status_code == 400 and error_codes(refused.json()) == ["BAD_REQUEST"]
    assert why in refused.json()["errors"][0]["message"]
    assert await store.operations.get_operation("did:key:caller", "op-1") is None


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (
            b'{"query": "{ __typename }", "x": "\xff"}',
            "the body is not UTF-8 (byte 0xff at offset 34)",
        ),
        ('{"query": "{ __typename }"}'.encode("utf-16"), "the body is not UTF-8 (byte 0xff at"),
        (b'{"query": "{ __typename }", "x": ' + b"1" * 5000 + b"}", "a number has more digits"),
    ],
    ids=["latin-1", "utf-16", "digits"],
)
async def test_a_body_python_cannot_read__is_400_saying_why(http, body, why):
    """Each by its own cause: bytes that are not UTF-8 (JSON's encoding, never guessed as
    UTF-16) say so, an integer past Python's digit limit says that."""
    refused = await http.post(
        "/graphql", content=body, headers={"content-type": "application/json"}
    )
    assert refused.status_code == 400 and error_codes(refused.json()) == ["BAD_REQUEST"]
    message = refused.json()["errors"][0]["message"]
    assert message.startswith(f"Unable to parse request body as JSON: {why}"), message


async def test_get_parameter_given_twice__is_400_naming_it(http):
    for name, pairs in [
        ("query", [("query", "{ serverTime }"), ("query", "{ __typename }")]),
        ("variables", [("query", "{ serverTime }"), ("variables", "{}"), ("variables", "{}")]),
    ]:
        refused = await http.get("/graphql", params=pairs)
        assert refused.status_code == 400 and error_codes(refused.json()) == ["BAD_REQUEST"]
        assert refused.json()["errors"][0]["message"] == f'The parameter "{name}" appears twice'
    once = await http.get("/graphql", params=[("query", "{ __typename }")])
    assert once.status_code == 200 and once.json() == {"data": {"__typename": "Query"}}


async def test_graphiql__served_to_browsers_with_local_assets(http):
    response = await http.get("/graphql", headers={"accept": "text/html"})
    assert response.status_code == 200
    linked = re.findall(r'(?:src|href)="([^"]+)"', response.text)
    # The icon is an empty data URL, so the browser asks for no /favicon.ico.
    assets = [asset for asset in linked if asset != "data:,"]
    assert len(assets) == 6 == len(linked) - 1
    for asset in assets:
        assert asset.startswith("/graphiql/"), asset
        served = await http.get(asset)
        assert served.status_code == 200 and served.content, asset


async def test_graphiql__can_be_switched_off(store):
    async with app_client(store, Settings(graphiql=False)) as http:
        response = await http.get("/graphql", headers={"accept": "text/html"})
        asset = await http.get("/graphiql/graphiql.min.js")
    assert response.status_code != 200 or "graphiql" not in response.text.lower()
    assert asset.status_code == 404


async def test_body_limit__oversized_request_is_413(store):
    async with app_client(store, Settings(max_body_bytes=2048)) as http:
        big = claim_input(reissueIntent={"blob": "x" * 5000})
        response = await http.post(
            "/graphql",
            json={
                "query": CLAIM,
                "variables": {"i": big},
            },
        )
    assert response.status_code == 413
    assert error_codes(response.json()) == ["PAYLOAD_TOO_LARGE"]
    assert await store.operations.get_operation("did:key:caller", "op-1") is None


async def test_limits__depth_and_aliases_bounded(store):
    async with app_client(store, Settings(max_query_depth=3, max_aliases=2)) as http:
        deep = await http.post(
            "/graphql",
            json={"query": "{ operations { edges { node { watch { id } } } } }"},
        )
        aliases = await http.post(
            "/graphql", json={"query": "{ a: serverTime b: serverTime c: serverTime }"}
        )
    assert deep.json()["errors"] and deep.json().get("data") is None
    assert aliases.json()["errors"] and aliases.json().get("data") is None


async def test_introspection__can_be_switched_off(store):
    async with app_client(store, Settings(introspection=False)) as http:
        body = (
            await http.post("/graphql", json={"query": "{ __schema { types { name } } }"})
        ).json()
    assert body.get("data") is None and body["errors"]


class ExplodingOperations:
    async def get_operation(self, caller_did: str, operation_id: str) -> None:
        raise RuntimeError("secret connection string postgres://admin:hunter2@db")


async def test_unexpected_errors__masked_with_request_id(store, caplog):
    store.operations = ExplodingOperations()  # type: ignore[assignment]
    async with app_client(store) as http:
        with caplog.at_level(logging.ERROR, logger="connector_store.errors"):
            response = await http.post(
                "/graphql",
                json={"query": '{ operation(callerDID: "a", operationID: "b") { id } }'},
                headers={"x-request-id": "req-42"},
            )
    body = response.json()
    assert response.status_code == 200
    assert error_codes(body) == ["INTERNAL_SERVER_ERROR"]
    assert "hunter2" not in response.text
    assert body["errors"][0]["extensions"]["requestId"] == "req-42"
    assert "req-42" in caplog.text and "hunter2" in caplog.text


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
async def test_app_lifespan__opens_and_closes_its_database(database_url, tmp_path):
    app = create_app(Settings(database_url=database_url))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
            assert (await http.get("/readyz")).status_code == 200


async def test_document_cache__limits_hold_on_repeated_documents(store):
    deep = {"query": "{ operations { edges { node { watch { id } } } } }"}
    async with app_client(store, Settings(max_query_depth=3, introspection=False)) as http:
        for _ in range(3):
            assert (await http.post("/graphql", json=deep)).json().get("data") is None
            schema = await http.post("/graphql", json={"query": "{ __schema { types { name } } }"})
            assert schema.json().get("data") is None
            broken = await http.post("/graphql", json={"query": "{ serverTime "})
            assert error_codes(broken.json()) == ["GRAPHQL_PARSE_FAILED"]
    async with app_client(store) as http:
        allowed = await http.post("/graphql", json=deep)
        assert allowed.json() == {"data": {"operations": {"edges": []}}}


async def test_limits__fragment_bomb_refused_before_validation(http):
    spreads = " ".join(f"fragment F{n} on Query {{ ...F{n + 1} ...F{n + 1} }}" for n in range(40))
    bomb = f"query {{ ...F0 }} {spreads} fragment F40 on Query {{ serverTime }}"
    body = (await http.post("/graphql", json={"query": bomb})).json()
    assert body.get("data") is None
    assert error_codes(body) == ["GRAPHQL_VALIDATION_FAILED"]
    assert f"{2**40} fields" in body["errors"][0]["message"]


async def test_limits__aliases_counted_through_fragments(store):
    aliased = "fragment A on Query { a: serverTime b: serverTime }"
    query = f"{{ ...A x: operations {{ edges {{ cursor }} }} ...A }} {aliased}"
    async with app_client(store, Settings(max_aliases=5)) as http:
        allowed = (await http.post("/graphql", json={"query": query})).json()
    async with app_client(store, Settings(max_aliases=4)) as http:
        refused = (await http.post("/graphql", json={"query": query})).json()
    assert "errors" not in allowed
    assert error_codes(refused) == ["GRAPHQL_VALIDATION_FAILED"]


async def test_limits__standard_introspection_allowed(http):
    body = (await http.post("/graphql", json={"query": get_introspection_query()})).json()
    assert "errors" not in body
    assert body["data"]["__schema"]["queryType"]["name"] == "Query"


async def test_row_budget__aliased_pages_cannot_exceed_1000_rows(http):
    page = "operations(first: 500) { edges { cursor } }"
    two = (await http.post("/graphql", json={"query": f"{{ a: {page} b: {page} }}"})).json()
    assert "errors" not in two
    three = await http.post("/graphql", json={"query": f"{{ a: {page} b: {page} c: {page} }}"})
    assert error_codes(three.json()) == ["BAD_USER_INPUT"]
    assert three.json()["data"] is None or three.json()["data"].get("c") is None


@pytest.mark.parametrize("method", ["PUT", "DELETE", "PATCH"])
async def test_graphql__other_methods_are_405_json_with_a_code_and_allow(http, method):
    refused = await http.request(method, "/graphql")
    assert refused.status_code == 405
    assert refused.json()["errors"][0]["extensions"]["code"] == "METHOD_NOT_ALLOWED"
    assert set(refused.headers["allow"].replace(" ", "").split(",")) >= {"GET", "POST"}


async def test_unknown_path__is_404_json_with_a_code(http):
    missing = await http.get("/nowhere")
    assert missing.status_code == 404
    assert missing.json()["errors"][0]["extensions"]["code"] == "NOT_FOUND"
