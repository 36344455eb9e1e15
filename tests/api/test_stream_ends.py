"""A token that can no longer be used ends every stream it opened: its sign-in session signed
out, or its ``exp`` passed; on each transport the server speaks (graphql-transport-ws and
multipart HTTP; graphql-ws is not served: ``test_live_ws``), for each kind of stream, while
a steady flow of events keeps the stream busy (a stream that always has something to send
still checks). Over HTTP the stream's last part is ``UNAUTHENTICATED`` and the response ends;
over a WebSocket an expired token's subscriptions end with ``UNAUTHENTICATED``, and the
connection is closed with 4403 saying why. A new request with the token is then 401. On a
real server (uvicorn on a free port), on both backends."""

import asyncio
import contextlib
import itertools
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx
import pytest
import websockets

import resolvers.live
import server.websocket
from resolvers.codes import UNAUTHENTICATED
from server.settings import Settings
from store import ConnectorStore
from tests.api.conftest import claim_input, error_codes
from tests.api.live_client import MULTIPART, WAIT_S, Served, parts, served, session_token, socket
from tests.factories import pending_watch
from tests.tokens import bearer, mint

pytestmark = pytest.mark.slow

RECHECK_S = 0.5
"""``SESSION_RECHECK_S`` in these tests: longer than the flow's pause, so a stream that
checked its session only when it had nothing to send would never check it."""
FLOW_PAUSE_S = 0.05
TOKEN_TTL_S = 4
"""An expiring token's life: long enough to open a stream and see its first item on a busy
machine, short enough to wait for."""
STREAMS = {
    "operationEvents": "subscription { operationEvents { sequence } }",
    "workAvailable": "subscription { workAvailable { connectorName } }",
    "watchEvents": "subscription { watchEvents { sequence } }",
}
SERVER_TIME = {"query": "{ serverTime }"}
CLAIM = (
    "mutation Claim($input: ClaimOperationInput!) { claimOperation(input: $input) { __typename } }"
)


async def nothing() -> None:
    """What ends a token whose ``exp`` passes: time alone."""


@contextlib.asynccontextmanager
async def flowing(store: ConnectorStore) -> AsyncIterator[None]:
    """Operations claimed and finalized one after another while the block runs, each
    arming a watch: a steady flow of operation and watch events and of wake-ups for
    ``calendar``."""

    async def claim_on() -> None:
        for n in itertools.count():
            await pending_watch(store, operation_id=f"flow-{n}", source_id=f"flow-{n}")
            await asyncio.sleep(FLOW_PAUSE_S)

    task = asyncio.create_task(claim_on())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def sign_out(app: Served, token: str) -> None:
    async with httpx.AsyncClient(base_url=app.http) as http:
        response = await http.post("/auth/sign-out", headers=bearer(token))
    assert response.json() == {"signedOut": True}, response.text


async def over_multipart(
    app: Served, token: str, query: str, end: Callable[[], Awaitable[None]]
) -> list[dict[str, Any]]:
    """A multipart subscription with ``token``: ``end`` runs once its first item arrived;
    every payload, once the response has ended (a bound against a hang, not a measure)."""
    payloads: list[dict[str, Any]] = []
    headers = {**bearer(token), "Accept": MULTIPART}
    async with (
        asyncio.timeout(WAIT_S),
        httpx.AsyncClient(base_url=app.http, timeout=WAIT_S) as http,
        http.stream("POST", "/graphql", json={"query": query}, headers=headers) as response,
    ):
        assert response.headers["content-type"].startswith("multipart/mixed")
        async for payload in parts(response):
            payloads.append(payload)
            if len(payloads) == 1:
                await end()
    return payloads


async def over_websocket(
    app: Served, token: str, query: str, end: Callable[[], Awaitable[None]]
) -> tuple[list[dict[str, Any]], int, str]:
    """A graphql-transport-ws subscription with ``token``: ``end`` runs once its first item
    arrived; every message, then the close code and reason, once the server closed."""
    messages: list[dict[str, Any]] = []
    async with asyncio.timeout(WAIT_S), socket(app) as sock:
        assert await sock.init(token) == {"type": "connection_ack"}
        await sock.subscribe("1", query)
        try:
            while True:
                messages.append(json.loads(await sock.connection.recv()))
                if len(messages) == 1:
                    await end()
        except websockets.ConnectionClosed as closed:
            assert closed.rcvd is not None, "closed without a close frame"
            return messages, closed.rcvd.code, closed.rcvd.reason


async def refused_now(app: Served, token: str) -> int:
    async with httpx.AsyncClient(base_url=app.http) as http:
        return (await http.post("/graphql", json=SERVER_TIME, headers=bearer(token))).status_code


@pytest.fixture(autouse=True)
def quick_rechecks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(resolvers.live, "SESSION_RECHECK_S", RECHECK_S)
    monkeypatch.setattr(server.websocket, "SESSION_RECHECK_S", RECHECK_S)


def first_is_an_item(field: str, payload: dict[str, Any]) -> None:
    assert "errors" not in payload and field in payload["data"], payload


@pytest.mark.parametrize("field", STREAMS)
async def test_sign_out__ends_a_busy_multipart_stream_unauthenticated(store, field):
    async with served(store) as app:
        token = await session_token(app, store)
        async with flowing(store):
            payloads = await over_multipart(
                app, token, STREAMS[field], lambda: sign_out(app, token)
            )
        status = await refused_now(app, token)
    first_is_an_item(field, payloads[0])
    assert error_codes(payloads[-1]) == [UNAUTHENTICATED], payloads[-1]
    assert "signed out" in payloads[-1]["errors"][0]["message"]
    assert status == 401


@pytest.mark.parametrize("field", STREAMS)
async def test_exp__ends_a_busy_multipart_stream_unauthenticated(store, field):
    async with served(store, Settings(sweeper=False, jwt_leeway_seconds=0)) as app:
        token = mint("did:key:worker", "service", ttl=TOKEN_TTL_S)
        async with flowing(store):
            payloads = await over_multipart(app, token, STREAMS[field], nothing)
        status = await refused_now(app, token)
    first_is_an_item(field, payloads[0])
    assert error_codes(payloads[-1]) == [UNAUTHENTICATED], payloads[-1]
    assert "expired" in payloads[-1]["errors"][0]["message"]
    assert status == 401


@pytest.mark.parametrize("field", STREAMS)
async def test_sign_out__ends_a_busy_websockets_streams_unauthenticated_then_closes_4403(
    store, field
):
    async with served(store) as app:
        token = await session_token(app, store)
        async with flowing(store):
            messages, code, reason = await over_websocket(
                app, token, STREAMS[field], lambda: sign_out(app, token)
            )
        status = await refused_now(app, token)
    first_is_an_item(field, messages[0]["payload"])
    *_, ended, completed = messages
    assert error_codes(ended["payload"]) == [UNAUTHENTICATED], messages[-3:]
    assert "signed out" in ended["payload"]["errors"][0]["message"]
    assert completed == {"id": "1", "type": "complete"}
    assert code == 4403 and "signed out" in reason
    assert status == 401


@pytest.mark.parametrize("field", STREAMS)
async def test_exp__ends_a_busy_websockets_streams_unauthenticated_then_closes_4403(store, field):
    async with served(store, Settings(sweeper=False, jwt_leeway_seconds=0)) as app:
        token = mint("did:key:worker", "service", ttl=TOKEN_TTL_S)
        async with flowing(store):
            messages, code, reason = await over_websocket(app, token, STREAMS[field], nothing)
        status = await refused_now(app, token)
    first_is_an_item(field, messages[0]["payload"])
    [ended] = [at for at, m in enumerate(messages) if "errors" in m.get("payload", {})]
    assert error_codes(messages[ended]["payload"]) == [UNAUTHENTICATED], messages[ended]
    assert messages[ended + 1 :] in ([], [{"id": "1", "type": "complete"}]), messages[ended:]
    assert code == 4403 and "expired" in reason
    assert status == 401


async def test_exp__a_websockets_next_operation_runs_nothing_before_the_close(store, monkeypatch):
    """An expired token's connection is closed a grace after its ``exp`` (its streams'
    errors go out first); an operation sent in that grace, a mutation even, runs nothing:
    the connection closes 4403 at once, as a new request with the token is 401."""
    monkeypatch.setattr(server.websocket, "EXPIRY_CLOSE_GRACE_S", WAIT_S)
    late = {"query": CLAIM, "variables": {"input": claim_input(operationID="late-1")}}
    messages: list[dict[str, Any]] = []
    async with served(store, Settings(sweeper=False, jwt_leeway_seconds=0)) as app:
        token = mint("did:key:worker", "service", ttl=TOKEN_TTL_S)
        async with asyncio.timeout(WAIT_S), socket(app) as sock:
            assert await sock.init(token) == {"type": "connection_ack"}
            while await refused_now(app, token) != 401:
                await asyncio.sleep(0.1)
            await sock.send({"id": "1", "type": "subscribe", "payload": late})
            try:
                while True:
                    messages.append(json.loads(await sock.connection.recv()))
            except websockets.ConnectionClosed as closed:
                assert closed.rcvd is not None, "closed without a close frame"
                code, reason = closed.rcvd.code, closed.rcvd.reason
        claimed = await store.operations.get_operation("did:key:caller", "late-1")
    assert messages == []
    assert code == 4403 and "expired" in reason
    assert claimed is None
