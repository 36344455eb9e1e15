"""GraphQL over WebSocket (graphql-transport-ws): the token of ``connection_init``, the
connection closed when it expires or its session ends, every message a text frame."""

import asyncio
import contextlib
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

from graphql import GraphQLError
from starlette.websockets import WebSocket, WebSocketDisconnect
from starlette.websockets import WebSocketDisconnected as WebSocketClosed
from strawberry.asgi import ASGIWebSocketAdapter
from strawberry.http.exceptions import WebSocketDisconnected
from strawberry.subscriptions.protocols.graphql_transport_ws.handlers import (
    BaseGraphQLTransportWSHandler,
)
from strawberry.subscriptions.protocols.graphql_transport_ws.types import (
    CompleteMessage,
    ConnectionInitMessage,
    NextMessage,
    SubscribeMessage,
)

from resolvers.codes import UNAUTHENTICATED
from resolvers.context import Context
from resolvers.live import SESSION_RECHECK_S, token_expired
from server.auth import (
    Credentials,
    Unauthenticated,
    authenticate,
    live,
)
from server.live import too_many
from store.errors import DatabaseUnavailable

if TYPE_CHECKING:
    from server.graphql_view import GraphQLApp

WS_FORBIDDEN = 4403
"""graphql-transport-ws's close code for a connection refused (graphql-ws' ``Forbidden``): no
token, a token not valid, or one that has expired; the close reason says which."""
WS_UNAVAILABLE = 1011
"""The close code of a connection whose token's session could not be checked (the
database is unavailable): connect again later."""
MAX_CLOSE_REASON_BYTES = 123
"""The most a WebSocket close frame's reason may hold (RFC 6455)."""
EXPIRY_CLOSE_GRACE_S = 0.5
"""How long after a token expires its WebSocket is closed: its subscriptions' own
``UNAUTHENTICATED`` errors go out first."""
EXPIRED_REASON = "the token has expired: connect again with a new one"
"""The close reason of a connection whose token has expired."""
NO_WS_TOKEN = (
    'send a bearer token: connection_init\'s payload {"Authorization": "Bearer …"} '
    "or the upgrade's Authorization header"
)


def close_reason(text: str) -> str:
    """``text`` cut to a close frame's ``MAX_CLOSE_REASON_BYTES`` of UTF-8."""
    data = text.encode()
    if len(data) <= MAX_CLOSE_REASON_BYTES:
        return text
    return data[: MAX_CLOSE_REASON_BYTES - 3].decode(errors="ignore") + "…"


def connection_authorization(payload: Mapping[str, Any], headers: Mapping[str, str]) -> str | None:
    """A WebSocket's ``Authorization``: ``connection_init``'s payload ``Authorization`` (or
    ``authorization``) when it has one, else the upgrade request's header."""
    given = payload.get("Authorization", payload.get("authorization"))
    if given is not None:
        return given if isinstance(given, str) else ""
    return headers.get("authorization")


class TextWebSocket(ASGIWebSocketAdapter):
    """Strawberry's WebSocket adapter, every message a text frame (graphql-transport-ws
    clients read text; our JSON encoder gives bytes, which it would send as binary); a
    message sent after the connection was closed (a subscription's event racing the close
    of an expired token) is Strawberry's ``WebSocketDisconnected``, like a client gone."""

    async def send_json(self, message: Mapping[str, object]) -> None:
        encoded = self.view.encode_json(message)
        text = encoded.decode() if isinstance(encoded, bytes) else encoded
        try:
            await self.ws.send_text(text)
        except (WebSocketDisconnect, WebSocketClosed) as exc:
            raise WebSocketDisconnected from exc


class TokenTransportWS(BaseGraphQLTransportWSHandler[Context, None]):
    """graphql-transport-ws whose ``connection_init`` carries the token (its payload's
    ``Authorization``, or the upgrade's header): refused with close code 4403 and the reason
    (``close_reason``; a session's token of a session signed out or expired too:
    ``server.auth.live``), accepted with the viewer set on the connection's context; when the
    token (or its session) expires its subscriptions end with ``UNAUTHENTICATED`` and,
    ``EXPIRY_CLOSE_GRACE_S`` later, the connection is closed with 4403. A session's token is
    checked again at each ``subscribe`` and every ``SESSION_RECHECK_S`` while the connection
    is open: once the session is signed out each operation in flight ends with
    ``UNAUTHENTICATED`` and the reason (``end_operations``), then the connection is closed
    with 4403 and the reason. Every ``subscribe`` (a query or a mutation too) checks the
    token's expiry as well: one sent after it, even before the close, closes the connection
    with 4403 and runs nothing. Past Strawberry's bound on the operations in flight (twice
    ``MAX_SUBSCRIPTIONS_PER_CONNECTION``, reached by a burst of subscribes sent faster than
    they start), a ``subscribe`` is refused as the hub refuses one: a ``next`` carrying
    ``TOO_MANY_SUBSCRIPTIONS``, then ``complete``."""

    expiry: asyncio.TimerHandle | None = None
    credentials: Credentials | None = None
    session_check: asyncio.Task[None] | None = None

    async def handle_connection_init(self, message: ConnectionInitMessage) -> None:
        payload = message.get("payload", {})
        if self.connection_init_received or not isinstance(payload, dict):
            await super().handle_connection_init(message)
            return
        view = cast("GraphQLApp", self.view)
        websocket: WebSocket = self.context.request
        authorization = connection_authorization(payload, websocket.headers)
        try:
            if authorization is None or view.authenticator is None:
                raise Unauthenticated(NO_WS_TOKEN, error=None)
            credentials = await authenticate(
                view.authenticator, authorization, websocket.app.state.store
            )
        except (Unauthenticated, DatabaseUnavailable) as refused:
            self.connection_init_received = True
            if self.connection_init_timeout_task is not None:
                self.connection_init_timeout_task.cancel()
            if isinstance(refused, DatabaseUnavailable):
                code, reason = WS_UNAVAILABLE, "the database is unavailable: connect again later"
            else:
                code, reason = WS_FORBIDDEN, close_reason(str(refused))
            await self.websocket.close(code=code, reason=reason)
            return
        self.context.signed_in(credentials.viewer, credentials.until, credentials.session)
        self.expiry = asyncio.get_running_loop().call_later(
            max(0.0, credentials.until - time.time()) + EXPIRY_CLOSE_GRACE_S,
            lambda: asyncio.ensure_future(self.expired()),
        )
        self.credentials = credentials
        if credentials.session is not None:
            self.session_check = asyncio.create_task(self.recheck_session())
        await super().handle_connection_init(message)

    async def session_ended(self) -> bool:
        """Whether the connection's session (if its token is a session's) was signed out or
        ended since it connected; when it was, its operations end (``end_operations``) and
        the connection is closed with 4403 and the reason. A database that cannot answer
        ends nothing (checked again later)."""
        if self.credentials is None or self.credentials.session is None:
            return False
        try:
            await live(self.credentials, self.context.request.app.state.store)
        except DatabaseUnavailable:
            return False
        except Unauthenticated as refused:
            with contextlib.suppress(WebSocketClosed, WebSocketDisconnected):
                await self.end_operations(
                    GraphQLError(str(refused), extensions={"code": UNAUTHENTICATED})
                )
                await self.websocket.close(code=WS_FORBIDDEN, reason=close_reason(str(refused)))
            return True
        return False

    async def end_operations(self, error: GraphQLError) -> None:
        """End every operation in flight on the connection with ``error`` (its token's
        ``UNAUTHENTICATED``), as a stream whose token expired ends: each is stopped (nothing
        of it is sent after), then a ``next`` carrying the error and ``complete`` go out
        for it."""
        ended = list(self.operations)
        tasks = [operation.task for operation in self.operations.values() if operation.task]
        for operation_id in ended:
            await self.cleanup_operation(operation_id)
        for task in tasks:
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await task
        for operation_id in ended:
            await self.end_with(operation_id, error)

    async def end_with(self, operation_id: str, error: GraphQLError) -> None:
        """End operation ``operation_id`` as a stream ends on an error: a ``next`` carrying
        ``error``, then ``complete``."""
        await self.send_message(
            NextMessage(
                id=operation_id, type="next", payload={"data": None, "errors": [error.formatted]}
            )
        )
        await self.send_message(CompleteMessage(id=operation_id, type="complete"))

    async def recheck_session(self) -> None:
        """Check the connection's session every ``SESSION_RECHECK_S`` until it has ended."""
        while True:
            await asyncio.sleep(SESSION_RECHECK_S)
            if await self.session_ended():
                return

    async def handle_subscribe(self, message: SubscribeMessage) -> None:
        if self.connection_acknowledged:
            if self.credentials is not None and time.time() >= self.credentials.until:
                await self.expired()
                return
            if await self.session_ended():
                return
            if self.in_flight_full(message["id"]):
                await self.refuse_in_flight(message["id"])
                return
        await super().handle_subscribe(message)

    def in_flight_full(self, operation_id: str) -> bool:
        """Whether Strawberry would refuse a new operation ``operation_id`` for the
        operations in flight on the connection (an id in flight is its to refuse)."""
        bound = self.max_subscriptions_per_connection
        return (
            bound is not None
            and operation_id not in self.operations
            and len(self.operations) >= bound
        )

    async def refuse_in_flight(self, operation_id: str) -> None:
        """Refuse operation ``operation_id`` past the operations in flight, as the hub
        refuses a subscription past its bound: a ``next`` with ``TOO_MANY_SUBSCRIPTIONS``,
        then ``complete``."""
        bound = self.max_subscriptions_per_connection or 0
        error = too_many(
            bound,
            "operations in flight per connection",
            "twice MAX_SUBSCRIPTIONS_PER_CONNECTION",
        )
        await self.end_with(operation_id, error)

    async def expired(self) -> None:
        """The token has expired: end the operations still in flight (``end_operations``;
        its streams have ended on their own) and close the connection."""
        with contextlib.suppress(WebSocketClosed, WebSocketDisconnected):
            await self.end_operations(token_expired())
            await self.websocket.close(code=WS_FORBIDDEN, reason=EXPIRED_REASON)

    async def shutdown(self) -> None:
        if self.expiry is not None:
            self.expiry.cancel()
        if self.session_check is not None:
            self.session_check.cancel()
        await super().shutdown()
