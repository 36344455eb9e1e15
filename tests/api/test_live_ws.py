"""Subscriptions over real WebSockets (graphql-transport-ws, the ``websockets`` client) and
Apollo's multipart protocol over HTTP, on both backends: the token at ``connection_init`` or
in the upgrade's header, refusals with the protocol's close codes, an expiring token, the
bounds, and ``workAvailable`` woken by writes and by time."""

import asyncio
import time
from pathlib import Path

import httpx
import pytest

from resolvers.codes import (
    BAD_REQUEST,
    BAD_USER_INPUT,
    FORBIDDEN,
    OPERATION_RESOLUTION_FAILURE,
    TOO_MANY_SUBSCRIPTIONS,
    UNAUTHENTICATED,
)
from server.settings import Settings
from store import ConnectorStore
from tests.api.live_client import MULTIPART, multipart_first, served, signal, socket
from tests.factories import claimed_operation
from tests.tokens import SERVICE_TOKEN, bearer, mint

LATER_MS = 1500
CRM_WORK = 'subscription { workAvailable(connectorName: "crm") { connectorName } }'


BAD_VARIABLES = [
    pytest.param(
        "subscription W($connector: String) { workAvailable(connectorName: $connector) { at } }",
        {"connector": 5},
        "connector",
        "connector",
        id="workAvailable-wrong-type",
    ),
    pytest.param(
        "subscription E($after: String!) { operationEvents(after: $after) { sequence } }",
        {},
        "after",
        "after",
        id="operationEvents-missing-required",
    ),
    pytest.param(
        "subscription E($filter: OperationFilter) "
        "{ operationEvents(filter: $filter) { sequence } }",
        {"filter": {"states": ["COMMITTED", "GONE"]}},
        "filter",
        "states[1]",
        id="operationEvents-unknown-enum-value",
    ),
    pytest.param(
        "subscription W($filter: WatchFilter) { watchEvents(filter: $filter) { sequence } }",
        {"filter": {"status": "GONE"}},
        "filter",
        "status",
        id="watchEvents-unknown-enum-value",
    ),
    pytest.param(
        "subscription E($d: [OperationState!]) "
        "{ operationEvents(filter: {states: $d}) { sequence } }",
        {"d": ["ATTEMPTED"] * 10_001},
        "d",
        "d",
        id="operationEvents-list-past-any-bound",
    ),
    pytest.param(
        "subscription E($filter: OperationFilter) "
        "{ operationEvents(filter: $filter) { sequence } }",
        {"filter": {f"u{n}": 0 for n in range(100)}},
        "filter",
        "u0",
        id="operationEvents-many-unknown-fields",
    ),
]
"""A subscription, its bad variables, the variable the error names and the field in it."""


def assert_names_the_variable(errors: list[dict], variable: str, field: str) -> None:
    """``errors`` is the one ``BAD_USER_INPUT`` a query with the same variables gets."""
    assert [error["extensions"] for error in errors] == [
        {"code": BAD_USER_INPUT, "field": field, "variable": variable}
    ]
    assert errors[0]["message"].startswith(f"{field}: ")
    assert f"(variable '${variable}')" in errors[0]["message"]


@pytest.mark.parametrize(("query", "variables", "variable", "field"), BAD_VARIABLES)
async def test_subscriptions__bad_variables_over_ws_are_bad_user_input_naming_them(
    store, query, variables, variable, field
):
    async with served(store) as server, socket(server) as sock:
        await sock.init()
        await sock.subscribe("1", query, **variables)
        message = await sock.receive()

    assert message["type"] == "error" and message["id"] == "1", message
    assert_names_the_variable(message["payload"], variable, field)


@pytest.mark.parametrize(("query", "variables", "variable", "field"), BAD_VARIABLES)
async def test_subscriptions__bad_variables_over_multipart_are_bad_user_input_naming_them(
    store, query, variables, variable, field
):
    async with served(store) as server:
        status, payload = await multipart_first(server, {"query": query, "variables": variables})

    assert status == 200
    assert "data" not in payload, payload
    assert_names_the_variable(payload["errors"], variable, field)


LIVE_DOCUMENT = (
    Path(__file__).resolve().parents[2] / "graphql/operations/live.graphql"
).read_text()


async def test_subscriptions__an_unknown_operation_name_is_operation_resolution_failure(store):
    async with served(store) as server, socket(server) as sock:
        await sock.init()
        await sock.send(
            {
                "id": "1",
                "type": "subscribe",
                "payload": {"query": LIVE_DOCUMENT, "operationName": "Missing"},
            }
        )
        message = await sock.receive()
        _, payload = await multipart_first(
            server, {"query": LIVE_DOCUMENT, "operationName": "Missing"}
        )

    assert message["type"] == "error" and message["id"] == "1", message
    for errors in (message["payload"], payload["errors"]):
        assert [error["extensions"] for error in errors] == [{"code": OPERATION_RESOLUTION_FAILURE}]
        assert '"Missing"' in errors[0]["message"]
    assert "data" not in payload


@pytest.mark.parametrize(
    ("body", "says"),
    [
        pytest.param({}, "query", id="no-query"),
        pytest.param({"query": "{ serverTime }"}, "send a query", id="a-query"),
        pytest.param({"query": "mutation { __typename }"}, "send a query", id="a-mutation"),
    ],
)
async def test_multipart__what_is_no_subscription_is_bad_request(store, body, says):
    async with served(store) as server:
        status, payload = await multipart_first(server, body)

    assert status == 200 and "data" not in payload, payload
    assert [error["extensions"] for error in payload["errors"]] == [{"code": BAD_REQUEST}]
    assert says in payload["errors"][0]["message"]


@pytest.fixture
def timed_store(database) -> ConnectorStore:
    """A store on the system clock: the work timer follows real time."""
    return ConnectorStore(database)


async def test_work_available__token_in_init_first_signal_at_once_then_each_claim(store):
    async with served(store) as server, socket(server) as sock:
        assert await sock.init() == {"type": "connection_ack"}
        await sock.subscribe("1", connector="calendar")
        assert (await signal(sock, "1"))["connectorName"] == "calendar"

        await claimed_operation(store, connector_name="drive")
        await claimed_operation(store, operation_id="op-2", connector_name="calendar")

        first = await signal(sock, "1")
        assert first["connectorName"] == "calendar" and first["at"] == store.clock()


async def test_work_available__token_in_the_upgrade_header(store):
    async with served(store) as server, socket(server, headers=bearer(SERVICE_TOKEN)) as sock:
        assert await sock.init(token=None) == {"type": "connection_ack"}
        await sock.subscribe("w")
        assert (await signal(sock, "w"))["connectorName"] is None
        await claimed_operation(store, connector_name="drive")
        assert (await signal(sock, "w"))["connectorName"] == "drive"


@pytest.mark.parametrize(
    ("headers", "token", "reason"),
    [
        ({}, None, "send a bearer token"),
        ({}, "not-a-jwt", "not a well-formed JWT"),
        ({}, mint(ttl=-120), "expired"),
        (bearer("not-a-jwt"), None, "not a well-formed JWT"),
    ],
)
async def test_ws__refused_init_is_closed_4403_saying_why(store, headers, token, reason):
    async with served(store) as server, socket(server, headers=headers) as sock:
        payload = {} if token is None else {"Authorization": f"Bearer {token}"}
        await sock.send({"type": "connection_init", "payload": payload})
        code, text = await sock.closed()
    assert code == 4403
    assert reason in text


async def test_ws__protocol_refusals_keep_their_close_codes(store):
    async with served(store) as server:
        async with socket(server) as sock:
            await sock.subscribe("1")
            assert (await sock.closed())[0] == 4401
        async with socket(server) as sock:
            await sock.init()
            await sock.send({"type": "connection_init", "payload": {}})
            assert (await sock.closed())[0] == 4429
        async with socket(server) as sock:
            await sock.send({"type": "connection_init", "payload": "token"})
            assert (await sock.closed())[0] == 4400
        async with socket(server) as sock:
            await sock.connection.send('{"type": "connection_init", "type": "ping"}')
            assert (await sock.closed())[0] == 4400
        async with socket(server) as sock:
            await sock.connection.send('{"type": "connection_init", "payload": {"n": NaN}}')
            assert (await sock.closed())[0] == 4400
        for unreadable in ["1" * 5000, "[" * 5000 + "]" * 5000]:
            async with socket(server) as sock:
                await sock.connection.send(f'{{"type": "ping", "payload": {unreadable}}}')
                assert (await sock.closed())[0] == 4400
        async with socket(server, protocol="graphql-ws") as sock:
            assert (await sock.closed())[0] == 4406


async def test_ws__a_message_past_max_body_bytes_closes_the_connection(store):
    settings = Settings(sweeper=False, max_body_bytes=2048)
    async with served(store, settings) as server, socket(server) as sock:
        await sock.init()
        await sock.send({"type": "ping", "payload": {"pad": "x" * 1500}})
        assert (await sock.receive())["type"] == "pong"
        await sock.send({"type": "ping", "payload": {"pad": "x" * 3000}})
        assert (await sock.closed())[0] == 1009


async def test_ws__an_expiring_token_closes_the_connection_and_ends_its_subscriptions(store):
    settings = Settings(sweeper=False, jwt_leeway_seconds=0)
    token = mint(ttl=2)
    async with served(store, settings) as server, socket(server) as sock:
        assert await sock.init(token) == {"type": "connection_ack"}
        await sock.subscribe("1")
        await signal(sock, "1")
        started = time.monotonic()
        message = await sock.receive()
        assert message["type"] == "next" and message["id"] == "1"
        assert [e["extensions"]["code"] for e in message["payload"]["errors"]] == [UNAUTHENTICATED]
        code, reason = await sock.closed()
    assert code == 4403 and "expired" in reason
    assert time.monotonic() - started < 4


async def test_work_available__a_tenant_is_refused_before_the_stream_starts(store):
    tenant = mint("did:key:tenant", "operations:read operations:write")
    async with served(store) as server, socket(server) as sock:
        await sock.init(tenant)
        await sock.subscribe("1")
        message = await sock.receive()
        assert message["type"] == "error" and message["id"] == "1"
        assert [error["extensions"]["code"] for error in message["payload"]] == [FORBIDDEN]
        assert server.app.state.hub.subjects == {}


async def test_subscriptions__bounded_per_connection_and_per_viewer(store):
    settings = Settings(
        sweeper=False, max_subscriptions_per_connection=2, max_subscriptions_per_viewer=3
    )
    async with served(store, settings) as server, socket(server) as one, socket(server) as two:
        await one.init()
        await two.init()
        for id_ in ("a", "b"):
            await one.subscribe(id_)
            await signal(one, id_)
        await one.subscribe("c")
        assert "MAX_SUBSCRIPTIONS_PER_CONNECTION" in await refused(one, "c")

        await two.subscribe("d")
        await signal(two, "d")
        await two.subscribe("e")
        assert "MAX_SUBSCRIPTIONS_PER_VIEWER" in await refused(two, "e")

        await one.send({"id": "a", "type": "complete"})
        for _ in range(50):
            if server.app.state.hub.subjects["workAvailable", "sub", "service"] == 2:
                break
            await asyncio.sleep(0.02)
        await two.subscribe("f")
        await signal(two, "f")


async def refused(sock, id_: str) -> str:
    """The message of subscription ``id_``'s one error, ``TOO_MANY_SUBSCRIPTIONS``, after
    which it completes."""
    message = await sock.receive()
    assert message["type"] == "next" and message["id"] == id_, message
    errors = message["payload"]["errors"]
    assert [error["extensions"]["code"] for error in errors] == [TOO_MANY_SUBSCRIPTIONS]
    assert await sock.receive() == {"id": id_, "type": "complete"}
    return errors[0]["message"]


async def test_work_available__a_lapsed_lease_and_a_deferral_come_due_by_the_timer(timed_store):
    # The lapse and the due time are LATER_MS away: far enough that, on a loaded machine, the
    # write's own signal is read before the timer's (else the two coalesce into one).
    store = timed_store
    async with served(store) as server, socket(server) as sock:
        await sock.init()
        await sock.subscribe("1", connector="calendar")
        await signal(sock, "1")
        record = await claimed_operation(store, lease_expires_at=store.clock() + LATER_MS)
        await signal(sock, "1")

        lapsed = await signal(sock, "1")
        assert lapsed["at"] > record.lease_expires_at

        other = await claimed_operation(store, operation_id="op-2", source_id="evt-2")
        await signal(sock, "1")
        due = store.clock() + LATER_MS
        deferred = await store.operations.defer_operation(
            other.caller_did, other.operation_id, due, None, "lease-A"
        )
        assert deferred is not None
        await signal(sock, "1")
        came_due = await signal(sock, "1")
        assert came_due["at"] >= due


async def test_work_available__multipart_picks_the_named_operation_of_several(store):
    """Workers send the whole ``live.graphql`` (several subscriptions) with an
    ``operationName``: the server runs that one (it refused the document as unnamed)."""
    async with (
        served(store) as server,
        httpx.AsyncClient(base_url=server.http, headers=bearer(SERVICE_TOKEN)) as http,
        http.stream(
            "POST",
            "/graphql",
            json={"query": LIVE_DOCUMENT, "operationName": "WorkAvailable"},
            headers={"Accept": MULTIPART},
        ) as response,
    ):
        chunks = response.aiter_text()
        text = ""
        while '"workAvailable"' not in text and "errors" not in text:
            text += await asyncio.wait_for(anext(chunks), 5)

    assert '"workAvailable"' in text, text


async def test_work_available__multipart_over_http(store):
    async with (
        served(store) as server,
        httpx.AsyncClient(base_url=server.http, headers=bearer(SERVICE_TOKEN)) as http,
        http.stream(
            "POST",
            "/graphql",
            json={"query": CRM_WORK},
            headers={"Accept": MULTIPART},
        ) as response,
    ):
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("multipart/mixed")
        parts: list[str] = []
        chunks = response.aiter_text()
        while sum('"workAvailable"' in part for part in parts) < 2:
            parts.append(await asyncio.wait_for(anext(chunks), 5))
            if len(parts) == 1:
                await claimed_operation(store, connector_name="crm")
    body = "".join(parts)
    assert body.count('{"payload":{"data":{"workAvailable":{"connectorName":"crm"}}}}') == 2


async def test_work_available__multipart_refuses_a_tenant_with_forbidden(store):
    tenant = mint("did:key:tenant", "operations:read operations:write")
    async with (
        served(store) as server,
        httpx.AsyncClient(base_url=server.http, headers=bearer(tenant)) as http,
    ):
        response = await http.post(
            "/graphql",
            json={"query": "subscription { workAvailable { connectorName } }"},
            headers={"Accept": MULTIPART},
        )
    assert FORBIDDEN in response.text


async def test_metrics__open_subscriptions_and_delivered_events(store):
    async with served(store) as server, socket(server) as sock:
        metrics = server.app.state.metrics
        await sock.init()
        await sock.subscribe("1")
        await signal(sock, "1")
        assert metrics.subscriptions.labels("workAvailable")._value.get() == 1
        assert metrics.subscription_events.labels("workAvailable")._value.get() == 1
        await sock.send({"id": "1", "type": "complete"})
        for _ in range(50):
            if metrics.subscriptions.labels("workAvailable")._value.get() == 0:
                break
            await asyncio.sleep(0.02)
        assert metrics.subscriptions.labels("workAvailable")._value.get() == 0


async def test_ws__a_websocket_outlives_the_http_head_deadline(store):
    settings = Settings(sweeper=False, header_timeout_seconds=0.5)
    async with served(store, settings) as server, socket(server) as sock:
        await sock.init()
        await asyncio.sleep(1.0)
        await sock.subscribe("1")
        assert (await signal(sock, "1"))["connectorName"] is None
