"""The app served over real sockets in the test's event loop (uvicorn, lifespan and all), and
a graphql-transport-ws client on the ``websockets`` library."""

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import websockets

from server.app import create_app
from server.http_server import listening
from server.settings import Settings
from store import ConnectorStore
from tests.ports import free_port
from tests.tokens import SERVICE_TOKEN, bearer

PROTOCOL = "graphql-transport-ws"
MULTIPART = 'multipart/mixed;subscriptionSpec="1.0"'
WAIT_S = 60.0
"""How long a test waits for a message or a close it expects: a bound against a hang, not a
measure (a loaded machine delivers late; ``quiet`` asks for silence with its own short wait)."""
WORK = (
    "subscription Work($connector: String) "
    "{ workAvailable(connectorName: $connector) { connectorName at } }"
)


@dataclass
class Served:
    """An app on ``127.0.0.1:port``, its ``hub`` and ``metrics``."""

    port: int
    app: Any

    @property
    def http(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws(self) -> str:
        return f"ws://127.0.0.1:{self.port}/graphql"


@asynccontextmanager
async def served(store: ConnectorStore, settings: Settings | None = None) -> AsyncIterator[Served]:
    """``create_app`` over ``store``, its lifespan run (the hub listening), on a free port."""
    settings = settings or Settings(sweeper=False)
    app = create_app(settings, store=store)
    port = free_port()
    async with app.router.lifespan_context(app), listening(app, settings, "127.0.0.1", port):
        yield Served(port, app)


class Socket:
    """One graphql-transport-ws connection."""

    def __init__(self, connection: Any) -> None:
        self.connection = connection

    async def send(self, message: dict[str, Any]) -> None:
        await self.connection.send(json.dumps(message))

    async def receive(self, timeout_s: float = WAIT_S) -> dict[str, Any]:
        """The next message (waiting at most ``timeout_s``)."""
        return json.loads(await asyncio.wait_for(self.connection.recv(), timeout_s))

    async def init(self, token: str | None = SERVICE_TOKEN) -> dict[str, Any]:
        """``connection_init`` with ``token`` in its payload (None: an empty payload); the
        answer."""
        payload = {} if token is None else {"Authorization": f"Bearer {token}"}
        await self.send({"type": "connection_init", "payload": payload})
        return await self.receive()

    async def subscribe(self, id_: str, query: str = WORK, **variables: Any) -> None:
        await self.send(
            {"id": id_, "type": "subscribe", "payload": {"query": query, "variables": variables}}
        )

    async def closed(self, timeout_s: float = WAIT_S) -> tuple[int, str]:
        """Wait for the server to close: its close code and reason."""
        try:
            while True:
                await asyncio.wait_for(self.connection.recv(), timeout_s)
        except websockets.ConnectionClosed as closed:
            assert closed.rcvd is not None, "closed without a close frame"
            return closed.rcvd.code, closed.rcvd.reason


@asynccontextmanager
async def socket(
    server: Served, headers: dict[str, str] | None = None, protocol: str = PROTOCOL
) -> AsyncIterator[Socket]:
    """A WebSocket to ``server``'s ``/graphql`` offering ``protocol``."""
    async with websockets.connect(
        server.ws, subprotocols=[protocol], additional_headers=headers or {}
    ) as connection:
        yield Socket(connection)


async def signal(sock: Socket, id_: str, timeout_s: float = WAIT_S) -> dict[str, Any]:
    """The next ``workAvailable`` of subscription ``id_`` (its ``next`` payload's data)."""
    message = await sock.receive(timeout_s)
    assert message["type"] == "next" and message["id"] == id_, message
    assert "errors" not in message["payload"], message
    return message["payload"]["data"]["workAvailable"]


async def parts(response: httpx.Response) -> AsyncIterator[dict[str, Any]]:
    """Each ``payload`` of a multipart subscription response, until the response ends."""
    text = ""
    async for chunk in response.aiter_text():
        text += chunk
        *whole, text = text.split("--graphql")
        for part in whole:
            _, _, content = part.partition("\r\n\r\n")
            with contextlib.suppress(ValueError):
                decoded = json.loads(content)
                if "payload" in decoded:
                    yield decoded["payload"]


async def session_token(
    server: Served,
    store: ConnectorStore,
    sub: str | None = "did:key:person",
    scope: str = "service",
) -> str:
    """The token of a sign-in session for ``sub`` (None: a subject of its own) with ``scope``,
    opened on ``server`` with a fresh code, as a person's page opens one."""
    code = (await store.sign_in.issue_code(sub, scope, ttl_ms=600_000)).code
    async with httpx.AsyncClient(base_url=server.http) as http:
        response = await http.post("/auth/sign-in", json={"code": code})
    assert response.status_code == 200, response.text
    return str(response.json()["token"])


async def multipart_first(
    server: Served, body: dict[str, Any], token: str = SERVICE_TOKEN
) -> tuple[int, dict[str, Any]]:
    """``body`` POSTed to ``server`` as a subscription over HTTP (Apollo's multipart protocol,
    bearing ``token``): the response's status and its first part's ``payload``; a response
    that is not multipart (refused before any stream) gives its JSON body instead."""
    async with (
        httpx.AsyncClient(base_url=server.http, headers=bearer(token)) as http,
        http.stream("POST", "/graphql", json=body, headers={"Accept": MULTIPART}) as response,
    ):
        if not response.headers["content-type"].startswith("multipart/mixed"):
            return response.status_code, json.loads(await response.aread())
        text = ""
        chunks = response.aiter_text()
        while True:
            text += await asyncio.wait_for(anext(chunks), WAIT_S)
            for part in text.split("--graphql"):
                _, _, content = part.partition("\r\n\r\n")
                try:
                    decoded = json.loads(content)
                except ValueError:
                    continue
                if "payload" in decoded:
                    return response.status_code, decoded["payload"]
