"""``Client``: GraphQL over HTTP (httpx) for queries and mutations, over WebSocket
(graphql-transport-ws, the ``websockets`` package) for subscriptions."""

import asyncio
import base64
import inspect
import json
import math
import random
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
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


UNAUTHENTICATED = "UNAUTHENTICATED"
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
    code = UNAUTHENTICATED if close.code == WS_FORBIDDEN else "BAD_REQUEST"
    message = close.reason or f"the server closed the connection with {close.code}"
    return error_for([{"message": message, "extensions": {"code": code, "close": close.code}}])


TokenSource = Callable[[], str | Awaitable[str]]
"""A function (sync or async) answering a bearer token: ``Client`` calls it for a fresh one."""

RENEW_BEFORE_S = 60.0
"""How long before a token's ``exp`` a ``Client`` with a ``TokenSource`` asks it for a new
one (at most half the token's life as the client saw it, for a short-lived one)."""


def expires_at(token: str) -> float | None:
    """The ``exp`` (epoch s) of ``token`` read as a JWT without checking its signature (the
    server checks it; the client only schedules a renewal); None for a token that is not a
    JWT or has no ``exp``."""
    parts = token.split(".")
    if len(parts) != 3:
        return None
    try:
        claims = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except ValueError:
        return None
    exp = claims.get("exp") if isinstance(claims, dict) else None
    return float(exp) if isinstance(exp, int | float) and not isinstance(exp, bool) else None


class Client:
    """A connection to a connector-store server at ``url`` (``http://host:port/graphql``)
    with a bearer ``token``: a string, None (no token), or a ``TokenSource``, a function
    (sync or async) answering one. A source is called at the first call, again
    ``RENEW_BEFORE_S`` before the token's ``exp`` (read from the JWT), and again when the
    server answers ``UNAUTHENTICATED`` (HTTP, or a WebSocket closed with 4403), the call
    then sent once more with the new token: nothing ran under the refused one, so no batch
    is lost. ``timeout_s``: how long a call may take (``DEFAULT_TIMEOUT_S``). Use as an
    async context manager, or call ``aclose``. Raises ``TypeError`` for a ``token`` that
    is neither."""

    def __init__(
        self,
        url: str,
        token: str | TokenSource | None = None,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ):
        if not (token is None or isinstance(token, str) or callable(token)):
            raise TypeError(
                f"token must be a string, a function answering one, or None, not {token!r:.80}"
            )
        self.url = url
        self.source: TokenSource | None = None if token is None or isinstance(token, str) else token
        self.token: str | None = token if isinstance(token, str) else None
        """The token sent now (for a source: the one it last answered)."""
        self._renew_at = math.inf
        self._renewing = asyncio.Lock()
        self.http = httpx.AsyncClient(
            timeout=httpx.Timeout(timeout_s, connect=min(timeout_s, 10.0)),
            limits=httpx.Limits(keepalive_expiry=POOL_IDLE_S),
        )

    async def __aenter__(self) -> "Client":
        await self.current_token()
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the HTTP connections."""
        await self.http.aclose()

    async def current_token(self) -> str | None:
        """The token to send: for a source, a fresh one at first and once the one held is
        due for renewal. Raises what the source raises, and ``TypeError`` for an answer
        that is not a non-empty string."""
        if self.source is not None and (self.token is None or time.time() >= self._renew_at):
            await self.renew_token(self.token)
        return self.token

    async def renew_token(self, refused: str | None) -> bool:
        """Ask the source for a new token in place of ``refused`` (the token a refused call
        sent; None: none yet); one renewal for any number of calls refused together. False
        when there is no source (the refusal stands)."""
        if self.source is None:
            return False
        async with self._renewing:
            if self.token is not None and self.token != refused:
                return True  # another call renewed it meanwhile
            answer = self.source()
            token = await answer if inspect.isawaitable(answer) else answer
            if not isinstance(token, str) or not token:
                raise TypeError(f"the token source answered {token!r:.80}, not a token")
            now = time.time()
            exp = expires_at(token)
            self._renew_at = (
                math.inf if exp is None else exp - min(RENEW_BEFORE_S, max(exp - now, 0) / 2)
            )
            self.token = token
            return True

    async def execute(
        self, document: str, variables: dict[str, Any] | None = None, *, repeatable: bool
    ) -> dict[str, Any]:
        """Send one operation; return its ``data``. ``repeatable``: the call is safe to send
        again after a lost answer (docs/worker-protocol.md, 'Which calls are safe to
        repeat'): a lost answer, and an error whose code says nothing was written
        (``CONFLICT``, ``SERVICE_UNAVAILABLE``), are retried up to ``RETRY_ATTEMPTS`` times
        with backoff. An ``UNAUTHENTICATED`` answer with a token source is sent again once
        with a renewed token (any call: nothing ran). Raises ``GraphQLResponseError`` (by its
        code) or ``TransportError``."""
        attempt = 0
        renewed = False
        while True:
            attempt += 1
            token = await self.current_token()
            try:
                return await self._post(document, variables, token)
            except TransportError:
                if not repeatable or attempt >= RETRY_ATTEMPTS:
                    raise
            except GraphQLResponseError as error:
                if error.code == UNAUTHENTICATED and not renewed:
                    renewed = True
                    if await self.renew_token(token):
                        attempt -= 1
                        continue
                if not (repeatable and error.repeatable) or attempt >= RETRY_ATTEMPTS:
                    raise
            await asyncio.sleep(backoff_s(attempt))

    async def _post(
        self, document: str, variables: dict[str, Any] | None, token: str | None
    ) -> dict[str, Any]:
        try:
            # ASCII JSON: a lone surrogate in a value goes as its escape, for the server to
            # refuse naming the field (httpx's own encoding raises on it).
            body = json.dumps({"query": document, "variables": variables or {}}, allow_nan=False)
        except (TypeError, ValueError) as error:
            raise UnsendableVariables(f"the variables are not JSON: {error}") from error
        headers = {"Content-Type": "application/json"}
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        try:
            response = await self.http.post(self.url, content=body.encode(), headers=headers)
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
        (the caller resubscribes). With a token source, a connection refused as
        ``UNAUTHENTICATED`` renews the token and raises ``TransportError`` (subscribing again
        sends the new one); refused again with the renewed token, it raises."""
        token = await self.current_token()
        try:
            async with websockets.connect(
                self.ws_url(), subprotocols=[websockets.Subprotocol("graphql-transport-ws")]
            ) as socket:
                payload = {} if token is None else {"Authorization": f"Bearer {token}"}
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
                if refused.code == UNAUTHENTICATED and await self._renewed(token):
                    raise TransportError(f"{refused}: the token was renewed") from error
                raise refused from error
            raise TransportError(f"the subscription's connection dropped: {error!r}") from error
        except GraphQLResponseError as error:
            if error.code == UNAUTHENTICATED and await self._renewed(token):
                raise TransportError(f"{error}: the token was renewed") from error
            raise
        except (OSError, websockets.InvalidHandshake) as error:
            raise TransportError(f"the subscription's connection dropped: {error!r}") from error
        raise TransportError("the server closed the subscription's connection")

    async def _renewed(self, refused: str | None) -> bool:
        """Whether a token source answered a token other than ``refused`` (asking it for one
        unless another call did already)."""
        return await self.renew_token(refused) and self.token != refused
