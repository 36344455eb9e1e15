"""``Client``: GraphQL over HTTP (httpx) for queries and mutations, over WebSocket
(graphql-transport-ws, the ``websockets`` package) for subscriptions."""

import asyncio
import json
import random
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import websockets
from websockets.frames import Close

from connector_store_client.errors import (
    GraphQLResponseError,
    TransportError,
    UnsendableVariables,
    error_for,
)

DEFAULT_TIMEOUT_S = 60.0
"""How long a call may take before its answer counts as lost: longer than a slow
``leaseOperations`` under load, so a busy server is not mistaken for a lost answer."""

POOL_IDLE_S = 5.0
"""How long an idle connection is kept: shorter than the server's keep-alive idle timeout
(75 s by default), so the client, not the server, closes an idle connection."""

RETRY_ATTEMPTS = 5
RETRY_BASE_S = 0.2
RETRY_MAX_S = 5.0


def backoff_s(attempt: int) -> float:
    """Seconds before retry ``attempt`` (1, 2, …): exponential from ``RETRY_BASE_S`` up to
    ``RETRY_MAX_S``, with full jitter."""
    return random.uniform(0, min(RETRY_MAX_S, RETRY_BASE_S * 2 ** (attempt - 1)))


WS_FORBIDDEN = 4403
"""The close code of a WebSocket whose token was refused or expired (or whose session was
signed out): connecting again with the same token is refused again."""


def refusal(close: Close | None) -> GraphQLResponseError | None:
    """The error of a WebSocket the server closed with a refusal (a 44xx close code: 4403
    ``UNAUTHENTICATED``, the others ``BAD_REQUEST``, the close reason as the message), which
    the same request would meet again; None for a connection that merely dropped (no close
    frame, 1000, 1001, 1006, 1011, …: subscribing again may work)."""
    if close is None or not 4400 <= close.code < 4500:
        return None
    code = "UNAUTHENTICATED" if close.code == WS_FORBIDDEN else "BAD_REQUEST"
    message = close.reason or f"the server closed the connection with {close.code}"
    return error_for([{"message": message, "extensions": {"code": code, "close": close.code}}])


class Client:
    """A connection to a connector-store server at ``url`` (``http://host:port/graphql``)
    with a bearer ``token``. ``timeout_s``: how long a call may take (``DEFAULT_TIMEOUT_S``).
    Use as an async context manager, or call ``aclose``."""

    def __init__(self, url: str, token: str | None = None, *, timeout_s: float = DEFAULT_TIMEOUT_S):
        self.url = url
        self.token = token
        headers = {} if token is None else {"Authorization": f"Bearer {token}"}
        self.http = httpx.AsyncClient(
            headers=headers,
            timeout=httpx.Timeout(timeout_s, connect=min(timeout_s, 10.0)),
            limits=httpx.Limits(keepalive_expiry=POOL_IDLE_S),
        )

    async def __aenter__(self) -> "Client":
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the HTTP connections."""
        await self.http.aclose()

    async def execute(
        self, document: str, variables: dict[str, Any] | None = None, *, repeatable: bool
    ) -> dict[str, Any]:
        """Send one operation; return its ``data``. ``repeatable``: the call is safe to send
        again after a lost answer (docs/worker-protocol.md, 'Which calls are safe to
        repeat'): a lost answer, and an error whose code says nothing was written
        (``CONFLICT``, ``SERVICE_UNAVAILABLE``), are retried up to ``RETRY_ATTEMPTS`` times
        with backoff. Raises ``GraphQLResponseError`` (by its code) or ``TransportError``."""
        attempt = 0
        while True:
            attempt += 1
            try:
                return await self._post(document, variables)
            except TransportError:
                if not repeatable or attempt >= RETRY_ATTEMPTS:
                    raise
            except GraphQLResponseError as error:
                if not (repeatable and error.repeatable) or attempt >= RETRY_ATTEMPTS:
                    raise
            await asyncio.sleep(backoff_s(attempt))

    async def _post(self, document: str, variables: dict[str, Any] | None) -> dict[str, Any]:
        try:
            # ASCII JSON: a lone surrogate in a value goes as its escape, for the server to
            # refuse naming the field (httpx's own encoding raises on it).
            body = json.dumps({"query": document, "variables": variables or {}}, allow_nan=False)
        except (TypeError, ValueError) as error:
            raise UnsendableVariables(f"the variables are not JSON: {error}") from error
        try:
            response = await self.http.post(
                self.url, content=body.encode(), headers={"Content-Type": "application/json"}
            )
        except httpx.HTTPError as error:
            raise TransportError(f"the answer was lost: {error!r}") from error
        if response.status_code >= 500:
            raise TransportError(f"HTTP {response.status_code}")
        try:
            body = response.json()
        except ValueError as error:
            raise TransportError(f"HTTP {response.status_code}: not JSON") from error
        if body.get("errors"):
            raise error_for(body["errors"])
        if response.status_code != 200:
            raise TransportError(f"HTTP {response.status_code}")
        data: dict[str, Any] = body["data"]
        return data

    def ws_url(self) -> str:
        """The WebSocket URL of the same endpoint."""
        return "ws" + self.url.removeprefix("http")

    async def subscribe(
        self, document: str, variables: dict[str, Any] | None = None
    ) -> AsyncIterator[dict[str, Any]]:
        """Each ``data`` of a subscription over graphql-transport-ws, until the server
        completes it. Raises ``GraphQLResponseError`` (by its code) for an ``error``
        message or a connection the server refused (``refusal``: a token refused, expired
        or signed out is ``UNAUTHENTICATED``), ``TransportError`` when the connection drops
        (the caller resubscribes)."""
        try:
            async with websockets.connect(
                self.ws_url(), subprotocols=[websockets.Subprotocol("graphql-transport-ws")]
            ) as socket:
                payload = {} if self.token is None else {"Authorization": f"Bearer {self.token}"}
                await socket.send(json.dumps({"type": "connection_init", "payload": payload}))
                id_ = uuid.uuid4().hex
                subscribe = {"query": document, "variables": variables or {}}
                subscribed = False
                async for raw in socket:
                    message = json.loads(raw)
                    kind = message.get("type")
                    if kind == "connection_ack" and not subscribed:
                        subscribed = True
                        await socket.send(
                            json.dumps({"id": id_, "type": "subscribe", "payload": subscribe})
                        )
                    elif kind == "ping":
                        await socket.send(json.dumps({"type": "pong"}))
                    elif kind == "next" and message.get("id") == id_:
                        if message["payload"].get("errors"):
                            raise error_for(message["payload"]["errors"])
                        yield message["payload"]["data"]
                    elif kind == "error" and message.get("id") == id_:
                        raise error_for(message["payload"])
                    elif kind == "complete" and message.get("id") == id_:
                        return
        except websockets.ConnectionClosed as error:
            refused = refusal(error.rcvd)
            if refused is not None:
                raise refused from error
            raise TransportError(f"the subscription's connection dropped: {error!r}") from error
        except (OSError, websockets.InvalidHandshake) as error:
            raise TransportError(f"the subscription's connection dropped: {error!r}") from error
        raise TransportError("the server closed the subscription's connection")
