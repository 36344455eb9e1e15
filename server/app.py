"""The Starlette application: ``/graphql``, ``/healthz``, ``/readyz``, ``/metrics`` and the
dashboard at ``/ui``."""

import asyncio
import contextlib
import dataclasses
import json
import logging
import math
import re
import time
import uuid
from collections.abc import AsyncIterator, Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any, cast

import orjson
from cross_web import HTTPException
from graphql import GraphQLError
from prometheus_client import make_asgi_app
from starlette.applications import Starlette
from starlette.datastructures import ImmutableMultiDict
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import (
    HTMLResponse,
    JSONResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import Mount, Route, WebSocketRoute
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from starlette.websockets import WebSocket, WebSocketDisconnect
from starlette.websockets import WebSocketDisconnected as WebSocketClosed
from strawberry.asgi import ASGIWebSocketAdapter, GraphQL
from strawberry.http import GraphQLHTTPResponse, GraphQLRequestData
from strawberry.http.exceptions import WebSocketDisconnected
from strawberry.http.parse_content_type import parse_content_type
from strawberry.schema import BaseSchema
from strawberry.schema.exceptions import CannotGetOperationTypeError, InvalidOperationTypeError
from strawberry.subscriptions import GRAPHQL_TRANSPORT_WS_PROTOCOL, MULTIPART_SUBSCRIPTION_PROTOCOL
from strawberry.subscriptions.protocols.graphql_transport_ws.handlers import (
    BaseGraphQLTransportWSHandler,
)
from strawberry.subscriptions.protocols.graphql_transport_ws.types import (
    ConnectionInitMessage,
    SubscribeMessage,
)
from strawberry.types.execution import ExecutionResult
from strawberry.types.graphql import OperationType

from resolvers.budget import DEFAULT_MAX_RESPONSE_BYTES, Budget
from resolvers.codes import (
    OPERATION_RESOLUTION_FAILURE,
    PERSISTED_QUERY_NOT_FOUND,
    UNAUTHENTICATED,
)
from resolvers.context import Context
from resolvers.errors import RequestError
from resolvers.loaders import Loaders
from resolvers.permissions import Viewer
from server.auth import (
    SIGN_IN_PATH,
    TOKEN_UNTIL,
    Authentication,
    Authenticator,
    Credentials,
    Unauthenticated,
    authenticator,
    live,
)
from server.graph import build_schema
from server.http_server import REFUSED_STATUS, ShutdownCut, listening
from server.live import SESSION_RECHECK_S, Hub, LiveLimits, Session, SessionCheck
from server.metrics import Metrics, metrics_endpoint, refreshing
from server.responses import (
    http_exception,
    method_not_allowed,
    request_error,
    subscription_not_acceptable,
)
from server.sessions import Sessions
from server.settings import Settings
from server.sweeper import Retention, Sweeper
from server.telemetry import RequestTelemetry, current_request
from server.tracing import trace_store, tracer_for
from store import ConnectorStore
from store.database import Database
from store.errors import DatabaseUnavailable
from store.persisted_queries import sha256_hex
from store.retention import RETAIN_FAILED_S

log = logging.getLogger("connector_store")


GRAPHIQL_ASSETS = Path(__file__).parent / "static" / "graphiql"
DASHBOARD_ASSETS = Path(__file__).parent / "static" / "ui"
SIGN_IN_ASSETS = Path(__file__).parent / "static" / "signin"
"""The pages' sign-in script (``/signin/session.js``), shared by the dashboard and GraphiQL."""
DASHBOARD_DOCUMENTS = (
    Path(__file__).resolve().parents[1] / "graphql" / "operations" / "dashboard.graphql"
)
"""The documents the dashboard sends: it loads them from the server (``/ui/dashboard.graphql``),
so they live in one file, the one the schema tests validate."""


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
    is open: once the session is signed out the connection is closed with 4403 and the
    reason, its streams with it."""

    expiry: asyncio.TimerHandle | None = None
    credentials: Credentials | None = None
    session_check: asyncio.Task[None] | None = None

    async def handle_connection_init(self, message: ConnectionInitMessage) -> None:
        payload = message.get("payload", {})
        if self.connection_init_received or not isinstance(payload, dict):
            await super().handle_connection_init(message)
            return
        view = cast(GraphQLApp, self.view)
        websocket: WebSocket = self.context.request
        authorization = connection_authorization(payload, websocket.headers)
        try:
            if authorization is None or view.authenticator is None:
                raise Unauthenticated(NO_WS_TOKEN, error=None)
            credentials = await live(
                view.authenticator.credentials(authorization), websocket.app.state.store
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
        self.context.signed_in(credentials.viewer, credentials.until)
        self.expiry = asyncio.get_running_loop().call_later(
            max(0.0, credentials.until - time.time()) + EXPIRY_CLOSE_GRACE_S,
            lambda: asyncio.ensure_future(self.expired()),
        )
        if credentials.session is not None:
            self.credentials = credentials
            self.session_check = asyncio.create_task(self.recheck_session())
        await super().handle_connection_init(message)

    async def session_ended(self) -> bool:
        """Whether the connection's session (if its token is a session's) was signed out or
        ended since it connected; when it was, the connection is closed with 4403 and the
        reason. A database that cannot answer ends nothing (checked again later)."""
        if self.credentials is None:
            return False
        try:
            await live(self.credentials, self.context.request.app.state.store)
        except DatabaseUnavailable:
            return False
        except Unauthenticated as refused:
            with contextlib.suppress(WebSocketClosed, WebSocketDisconnected):
                await self.websocket.close(code=WS_FORBIDDEN, reason=close_reason(str(refused)))
            return True
        return False

    async def recheck_session(self) -> None:
        """Check the connection's session every ``SESSION_RECHECK_S`` until it has ended."""
        while True:
            await asyncio.sleep(SESSION_RECHECK_S)
            if await self.session_ended():
                return

    async def handle_subscribe(self, message: SubscribeMessage) -> None:
        if self.connection_acknowledged and await self.session_ended():
            return
        await super().handle_subscribe(message)

    async def expired(self) -> None:
        """The token has expired: close the connection (its subscriptions end with it)."""
        with contextlib.suppress(WebSocketClosed, WebSocketDisconnected):
            await self.websocket.close(
                code=WS_FORBIDDEN, reason="the token has expired: connect again with a new one"
            )

    async def shutdown(self) -> None:
        if self.expiry is not None:
            self.expiry.cancel()
        if self.session_check is not None:
            self.session_check.cancel()
        await super().shutdown()


class GraphQLApp(GraphQL):
    """Strawberry's ASGI view with our request context and a GraphiQL page whose assets
    this server serves itself (at ``/graphiql``), so it works with no internet.

    Subscriptions: graphql-transport-ws on the same path (``TokenTransportWS``), and
    Apollo's multipart protocol over HTTP (``Accept: multipart/mixed;subscriptionSpec=1.0``).
    A WebSocket from any origin is accepted: its token is never a cookie, so a page of
    another site gains nothing it did not already hold."""

    websocket_adapter_class = TextWebSocket  # type: ignore[assignment]
    graphql_transport_ws_handler_class = TokenTransportWS  # type: ignore[assignment]

    def __init__(
        self,
        schema: BaseSchema,
        *,
        graphiql: bool,
        authenticator: Authenticator | None = None,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
        retain_failed_ms: int = RETAIN_FAILED_S * 1000,
        max_subscriptions_per_connection: int = 100,
        connection_init_timeout_s: float = 10.0,
    ) -> None:
        super().__init__(
            schema,
            graphql_ide="graphiql" if graphiql else None,
            subscription_protocols=(GRAPHQL_TRANSPORT_WS_PROTOCOL, MULTIPART_SUBSCRIPTION_PROTOCOL),
            connection_init_wait_timeout=timedelta(seconds=connection_init_timeout_s),
            # A backstop on every operation in flight on one WebSocket (queries too); the
            # subscriptions' own bound, with its error code, is the hub's.
            max_subscriptions_per_connection=2 * max_subscriptions_per_connection,
            allowed_origins=("*",),
        )
        self.authenticator = authenticator
        self.max_response_bytes = max_response_bytes
        self.retain_failed_ms = retain_failed_ms

    def encode_json(self, data: object) -> bytes:
        """A response body, by orjson (several times faster than ``json.dumps``); a value
        orjson refuses (an integer past 64 bits) falls back to the standard encoder."""
        try:
            return orjson.dumps(data)
        except TypeError:
            return json.dumps(data).encode()

    def decode_json(self, data: str | bytes) -> object:
        """A JSON text of a request or a WebSocket message, whose objects each name a key once.

        Raises ``NotJson`` (a ``JSONDecodeError``, so the WebSocket protocol closes as it
        does on any text that is not JSON): ``DuplicateKey`` where an object repeats a key
        (JSON leaves which of the two values counts to the parser, and a write must not
        depend on that), for ``NaN``, ``Infinity`` or a number too large for a double,
        which JSON does not have (Python's parser takes them), and for text Python cannot
        read: an integer past its digit limit, nesting past its recursion limit."""
        try:
            return strict_loads(data, object_pairs_hook=unique_keys)
        except DuplicateKey:
            # The hook sees an inner object before the parser reaches a later fault: text
            # that is not JSON at all is refused as such.
            strict_loads(data)
            raise

    def parse_json(self, data: str | bytes) -> Any:
        """A JSON request body, or GET's ``variables``/``extensions``: each must be an object
        (a list is a batch, which Strawberry refuses with 400); anything else is a 400."""
        try:
            value = self.decode_json(data)
        except NotJson as error:
            message = f"Unable to parse request body as JSON: {error.msg}"
            raise HTTPException(400, message) from error
        except json.JSONDecodeError as error:
            raise HTTPException(400, "Unable to parse request body as JSON") from error
        if not isinstance(value, (dict, list)):
            raise HTTPException(400, "The JSON must be an object")
        return value

    async def parse_http_body(self, request: Any) -> Any:
        """The request's GraphQL parameters; a POST whose body is not JSON is refused here,
        with a message that says what is expected (Strawberry's says only "unsupported"), and
        so is an ``operationName`` that is not a string."""
        if request.method != "GET":
            content_type, _ = parse_content_type(request.content_type or "")
            if content_type != "application/json":
                raise HTTPException(400, UNSUPPORTED_CONTENT_TYPE)
        data = await super().parse_http_body(request)
        name = getattr(data, "operation_name", None)
        if name is not None and not isinstance(name, str):
            raise HTTPException(400, "operationName must be a string")
        return data

    def parse_query_params(self, params: Any) -> dict[str, Any]:
        """GET's parameters; ``variables=null`` or ``extensions=null`` mean absent, as in a
        POST body. A parameter given twice is a 400, as a JSON key given twice is."""
        pairs = params.multi_items() if isinstance(params, ImmutableMultiDict) else params.items()
        given: dict[str, Any] = {}
        for name, value in pairs:
            if name in given:
                raise HTTPException(400, f"The parameter {json.dumps(name)} appears twice")
            given[name] = value
        return super().parse_query_params(
            {name: value for name, value in given.items() if value != "null"}
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Strawberry's view, but a request it refuses (400, 405; 406 for a subscription
        sent for a single answer: ``ConnectorSchema.execute``) gets a JSON error with a
        code, like every other error, rather than plain text; and the response is
        ``application/graphql-response+json`` when the client accepts it (GraphQL over HTTP),
        with 400 when the request failed before execution."""
        if scope["type"] != "http":
            await super().__call__(scope, receive, send)
            return
        request = Request(scope, receive)
        graphql_response = accepts_graphql_response(request.headers.get("accept"))
        try:
            response = await self.run(request)
        except HTTPException as refused:
            cause = refused.__cause__
            if isinstance(cause, InvalidOperationTypeError):
                response = (
                    subscription_not_acceptable()
                    if cause.operation_type is OperationType.SUBSCRIPTION
                    else method_not_allowed(refused.reason)
                )
            elif isinstance(cause, CannotGetOperationTypeError):
                # No operation of that name: a request error, in the shape and status the
                # several-operations case has (200 for application/json).
                response = request_error(
                    400 if graphql_response else 200,
                    refused.reason,
                    code=OPERATION_RESOLUTION_FAILURE,
                )
            else:
                response = request_error(refused.status_code, refused.reason)
        except PersistedQueryNotFound:
            response = JSONResponse(
                {
                    "errors": [
                        {
                            "message": "PersistedQueryNotFound",
                            "extensions": {"code": PERSISTED_QUERY_NOT_FOUND},
                        }
                    ]
                }
            )
        else:
            if graphql_response and scope.get(REQUEST_FAILED):
                response.status_code = 400
        if (
            graphql_response
            and not isinstance(response, StreamingResponse)
            and response.media_type in (None, "application/json")
        ):
            response.headers["content-type"] = GRAPHQL_RESPONSE_JSON
        await response(scope, receive, send)

    async def process_result(  # type: ignore[override]
        self, request: Request, result: ExecutionResult
    ) -> GraphQLHTTPResponse:
        """The response body; a request that failed before execution (every error a
        ``RequestError``) has no ``data`` entry, as GraphQL over HTTP says. A persisted
        query sent in full is registered here, once it parsed and validated."""
        body = await super().process_result(request, result)
        errors = result.errors or []
        to_register = request.scope.pop(TO_REGISTER, None)
        if result.data is None and errors and all(isinstance(e, RequestError) for e in errors):
            body.pop("data", None)  # type: ignore[misc]
            request.scope[REQUEST_FAILED] = True
        elif to_register is not None:
            store: ConnectorStore = request.app.state.store
            await store.persisted_queries.register(to_register)
        return body

    async def execute_single(  # type: ignore[override]
        self,
        request: Request,
        request_adapter: Any,
        sub_response: Response,
        context: Context,
        root_value: Any,
        request_data: GraphQLRequestData,
    ) -> Any:
        """Strawberry's execution, after Apollo's automatic persisted queries: a request
        with ``extensions.persistedQuery.sha256Hash`` and no query runs the registered text
        (or gets ``PERSISTED_QUERY_NOT_FOUND``); with its query, the hash must match it and
        the text is registered for every instance on the database."""
        persisted = (request_data.extensions or {}).get("persistedQuery")
        if persisted is not None:
            request_data = await self.persisted(request, request_data, persisted)
        return await super().execute_single(
            request=request,
            request_adapter=request_adapter,
            sub_response=sub_response,
            context=context,  # type: ignore[arg-type]
            root_value=root_value,
            request_data=request_data,
        )

    async def persisted(
        self, request: Request, request_data: GraphQLRequestData, persisted: Any
    ) -> GraphQLRequestData:
        """``request_data`` with the query of its persisted-query hash."""
        if not isinstance(persisted, dict) or persisted.get("version") != 1:
            raise HTTPException(400, "persistedQuery: only version 1 is supported")
        sha = persisted.get("sha256Hash")
        if not isinstance(sha, str) or not SHA256_HEX.fullmatch(sha):
            raise HTTPException(400, "persistedQuery: sha256Hash must be 64 hex digits")
        store: ConnectorStore = request.app.state.store
        if request_data.query is None:
            query = await store.persisted_queries.get(sha)
            if query is None:
                raise PersistedQueryNotFound
            return dataclasses.replace(request_data, query=query)
        if sha256_hex(request_data.query) != sha.lower():
            raise HTTPException(400, "provided sha does not match query")
        if len(request_data.query) <= MAX_PERSISTED_QUERY_CHARS:
            request.scope[TO_REGISTER] = request_data.query
        return request_data

    def should_render_graphql_ide(self, request: Any) -> bool:
        """The page only for what ``is_graphiql_page`` lets through without a token: a GET
        with a persisted query's hash (``extensions``) and no ``query`` is a request."""
        return super().should_render_graphql_ide(request) and (
            request.query_params.get("extensions") is None
        )

    async def render_graphql_ide(self, request: Request) -> Response:
        """The GraphiQL page, the same for every request: it holds no token. It signs in
        with a sign-in link's code, as the dashboard does (``server.sessions``), and loads
        nothing but this server's own scripts (``GRAPHIQL_POLICY``)."""
        return HTMLResponse(
            GRAPHIQL_PAGE.read_text(),
            headers={"Cache-Control": "no-store", "Content-Security-Policy": GRAPHIQL_POLICY},
        )

    async def get_context(self, request: Request | WebSocket, response: Any) -> Context:  # type: ignore[override]
        """The request's context; a WebSocket's stands for the connection, anonymous until
        its ``connection_init`` (``TokenTransportWS``)."""
        store: ConnectorStore = request.app.state.store
        viewer = request.scope.get("viewer") or Viewer.anonymous()
        return Context(
            store=store,
            viewer=viewer,
            loaders=Loaders(store, Budget(max_bytes=self.max_response_bytes)),
            request_id=request_id(),
            request=request,
            retain_failed_ms=self.retain_failed_ms,
            hub=getattr(request.app.state, "hub", None),
            session=Session(
                viewer,
                request.scope.get(TOKEN_UNTIL),
                check=session_check(request.scope.get("credentials"), store),
            ),
        )


def session_check(credentials: Credentials | None, store: ConnectorStore) -> SessionCheck | None:
    """The check a request's streams run every ``SESSION_RECHECK_S`` when its token is a
    sign-in session's (None for any other token): ``UNAUTHENTICATED`` once the session was
    signed out or has ended; a database that cannot answer ends nothing (checked again
    later). A WebSocket checks its own session (``TokenTransportWS``) and closes with it."""
    if credentials is None or credentials.session is None:
        return None
    signed_in = credentials

    async def check() -> None:
        try:
            await live(signed_in, store)
        except DatabaseUnavailable:
            return
        except Unauthenticated as refused:
            raise GraphQLError(str(refused), extensions={"code": UNAUTHENTICATED}) from None

    return check


DASHBOARD_POLICY = (
    "default-src 'self'; connect-src 'self'; img-src 'self' data:; object-src 'none'; "
    "base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
"""The dashboard's Content-Security-Policy: the page loads and calls nothing but this server,
and no page of another site may frame it."""
GRAPHIQL_POLICY = (
    "default-src 'self'; connect-src 'self'; img-src 'self' data:; style-src 'self' "
    "'unsafe-inline'; font-src 'self' data:; object-src 'none'; base-uri 'none'; "
    "form-action 'self'; frame-ancestors 'none'"
)
"""GraphiQL's Content-Security-Policy: the dashboard's, but styles may be inline: GraphiQL's
dialogs add ``<style>`` elements of their own (react-remove-scroll). No inline script runs:
the page's own is ``/graphiql/start.js``."""
GRAPHIQL_PAGE = GRAPHIQL_ASSETS / "index.html"
NO_FRAMING = "frame-ancestors 'none'"


class NoFraming:
    """ASGI middleware: every HTTP response forbids framing, whatever made it (a page, an
    asset, an error): ``X-Frame-Options: DENY``, and ``Content-Security-Policy:
    frame-ancestors 'none'`` unless the response set a policy of its own (the pages' say
    ``frame-ancestors 'none'`` too: a test holds them to it). So no page of another site can
    put one of ours under a click of its own."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def framed(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                names = {name.lower() for name, _ in headers}
                headers.append((b"x-frame-options", b"DENY"))
                if b"content-security-policy" not in names:
                    headers.append((b"content-security-policy", NO_FRAMING.encode()))
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, framed)


async def dashboard(_: Request) -> Response:
    """The dashboard's page at ``/ui``, the same for every request: it holds no token. It
    signs in with a sign-in link's code (``server.sessions``), or a token typed in."""
    return HTMLResponse(
        (DASHBOARD_ASSETS / "index.html").read_text(),
        headers={"Cache-Control": "no-store", "Content-Security-Policy": DASHBOARD_POLICY},
    )


async def dashboard_documents(_: Request) -> Response:
    """``graphql/operations/dashboard.graphql``, the documents the dashboard sends."""
    return Response(
        DASHBOARD_DOCUMENTS.read_text(),
        media_type="application/graphql",
        headers={"Cache-Control": "no-cache"},
    )


SHA256_HEX = re.compile(r"[0-9a-fA-F]{64}")
MAX_PERSISTED_QUERY_CHARS = 64 * 1024
"""Longer texts run but are not registered (the table stays small)."""


class NotJson(json.JSONDecodeError):
    """Text Python's parser reads that JSON refuses; its ``msg`` says why."""

    def __init__(self, why: str) -> None:
        super().__init__(why, "", 0)


class DuplicateKey(NotJson):
    """Raised by ``unique_keys`` for a JSON object that names one key twice."""

    def __init__(self, key: str) -> None:
        super().__init__(f"the key {json.dumps(key)} appears twice in one object")


def not_a_number(constant: str) -> float:
    """``json.loads``' ``parse_constant``: ``NaN``, ``Infinity`` and ``-Infinity`` are not
    JSON. Raises ``NotJson``."""
    raise NotJson(f"{constant} is not a JSON number")


def finite(text: str) -> float:
    """``json.loads``' ``parse_float``: a number past a double's range (``1e999``) would
    read as infinity, which no field takes. Raises ``NotJson``."""
    number = float(text)
    if math.isinf(number):
        raise NotJson(f"{text} is too large a number")
    return number


STRICT_JSON: dict[str, Any] = {"parse_constant": not_a_number, "parse_float": finite}
"""``json.loads``' hooks that refuse what JSON does not have (``NotJson``)."""


def strict_loads(data: str | bytes, **hooks: Any) -> Any:
    """``json.loads`` with ``STRICT_JSON`` and ``hooks``. Raises ``JSONDecodeError`` (text
    that is not JSON) or ``NotJson``, also where Python cannot read the text: an integer
    past its digit limit (``ValueError``) or nesting past its recursion limit."""
    try:
        return json.loads(data, **STRICT_JSON, **hooks)
    except json.JSONDecodeError:
        raise
    except ValueError as error:
        raise NotJson("a number has more digits than this server reads") from error
    except RecursionError as error:
        raise NotJson("the JSON is nested too deeply") from error


def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """One JSON object's members as a dict (``json.loads``' ``object_pairs_hook``).

    Raises ``DuplicateKey`` where a key appears twice."""
    value = dict(pairs)
    if len(value) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise DuplicateKey(key)
            seen.add(key)
    return value


class PersistedQueryNotFound(Exception):
    """No query is registered under the hash a request sent alone."""


def request_id() -> str:
    """The request id ``RequestTelemetry`` chose (from ``X-Request-ID`` or new)."""
    info = current_request.get()
    return info.request_id if info is not None else uuid.uuid4().hex


GRAPHQL_RESPONSE_JSON = "application/graphql-response+json; charset=utf-8"
REQUEST_FAILED = "connector_store.request_failed"
TO_REGISTER = "connector_store.persisted_query_to_register"
"""Set in the ASGI scope when the request failed before execution."""
UNSUPPORTED_CONTENT_TYPE = (
    "Unsupported content type: send application/json (or use GET with query parameters)"
)


def accepts_graphql_response(accept: str | None) -> bool:
    """Whether the ``Accept`` header prefers ``application/graphql-response+json`` (listed,
    and before ``application/json`` when both are)."""
    if not accept:
        return False
    types = [part.split(";", 1)[0].strip().lower() for part in accept.split(",")]
    if "application/graphql-response+json" not in types:
        return False
    if "application/json" not in types:
        return True
    return types.index("application/graphql-response+json") < types.index("application/json")


class RequestBody:
    """Bounds a request's body, until it has all arrived (or a response has started):

    - larger than ``max_bytes`` (declared or streamed): 413;
    - not all arrived ``timeout_s`` seconds after the request's head: 408, and the
      connection is closed (``BODY_TIMEOUT_SECONDS``);
    - the client gone before it all arrived: nothing can be answered; the request is
      reported to the telemetry as status 499 (a client event, logged at INFO, never a
      500 with a traceback), or as the status the HTTP protocol answered it with before
      closing (``REFUSED_STATUS``: a body whose framing is too large). The start message is
      dropped by uvicorn, whose connection is closed (pinned by
      ``tests/test_http_server.py``'s client-gone test).
    """

    def __init__(self, app: ASGIApp, max_bytes: int, timeout_s: float) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.timeout_s = timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_bytes):
            await self.refuse(
                scope, 413, f"request body is larger than {self.max_bytes} bytes", send
            )
            return
        deadline = asyncio.get_running_loop().time() + self.timeout_s
        seen = 0
        reading = True

        async def bounded() -> Message:
            nonlocal seen, reading
            if not reading:
                return await receive()
            try:
                async with asyncio.timeout_at(deadline):
                    message = await receive()
            except TimeoutError:
                raise BodyTooSlow from None
            if message["type"] == "http.disconnect":
                raise ClientGone
            seen += len(message.get("body", b""))
            if seen > self.max_bytes:
                raise BodyTooLarge
            reading = message.get("more_body", False)
            return message

        async def answering(message: Message) -> None:
            nonlocal reading
            reading = False
            await send(message)

        try:
            await self.app(scope, bounded, answering)
        except BodyTooLarge:
            await self.refuse(
                scope, 413, f"request body is larger than {self.max_bytes} bytes", send
            )
        except BodyTooSlow:
            log.info("request body not received within %s s: 408", self.timeout_s)
            await self.refuse(
                scope,
                408,
                f"the request body did not arrive within {self.timeout_s} s",
                send,
                headers={"Connection": "close"},
            )
        except ClientGone:
            log.info("the connection closed before the whole request body arrived")
            status = scope.get(REFUSED_STATUS, CLIENT_GONE)
            await send({"type": "http.response.start", "status": status, "headers": []})

    async def refuse(
        self,
        scope: Scope,
        status: int,
        message: str,
        send: Send,
        headers: dict[str, str] | None = None,
    ) -> None:
        response = request_error(status, message, headers=headers)
        await response(scope, empty_receive, send)


CLIENT_GONE = 499
"""The status a request whose client went away is counted and logged with (nginx's)."""


async def empty_receive() -> Message:
    """A response needs no request body."""
    return {"type": "http.request", "body": b"", "more_body": False}


class BodyTooLarge(Exception):
    """Raised inside ``RequestBody`` when a streamed body passes the limit."""


class BodyTooSlow(Exception):
    """Raised inside ``RequestBody`` when the body has not all arrived in time."""


class ClientGone(Exception):
    """Raised inside ``RequestBody`` when the client disconnects before its body arrived."""


async def graphql_redirect(_: Request) -> Response:
    """``GET /`` leads to the API (and its GraphiQL page in a browser)."""
    return RedirectResponse("/graphql", status_code=308)


async def healthz(_: Request) -> Response:
    """The process is up."""
    return JSONResponse({"status": "ok"})


async def readyz(request: Request) -> Response:
    """The database answers (and, on SQLite, its file is still the one opened)."""
    try:
        await request.app.state.store.db.ping()
    except DatabaseUnavailable as error:
        log.warning("readiness check failed: %s", error)
        return JSONResponse({"status": "unavailable"}, status_code=503)
    return JSONResponse({"status": "ok"})


@contextlib.asynccontextmanager
async def sweeping(
    settings: Settings, store: ConnectorStore, metrics: Metrics | None = None
) -> AsyncIterator[Sweeper | None]:
    """Run the background sweeper for the block, unless ``SWEEPER=false``; stop it (cancel
    and wait) when the block ends. Each run is reported to ``metrics``."""
    if not settings.sweeper:
        log.info("sweeper: off (SWEEPER=false)")
        yield None
        return
    sweeper = Sweeper(
        store,
        interval_s=settings.sweep_interval_seconds,
        retention=Retention.of(settings),
        batch=settings.sweep_batch,
        on_result=None if metrics is None else metrics.observe_sweep,
    )
    sweeper.start()
    try:
        yield sweeper
    finally:
        await sweeper.stop()


@contextlib.asynccontextmanager
async def observing(
    settings: Settings, store: ConnectorStore, metrics: Metrics | None, tracer: Any
) -> AsyncIterator[None]:
    """Metrics and tracing for the block: the store traced when a tracer is given, the table
    gauges refreshed, and the metrics port served when ``METRICS_PORT`` is set (on this
    event loop, with the API's HTTP bounds: ``server.http_server.listening``)."""
    if tracer is not None:
        trace_store(store, tracer)
    if metrics is None:
        yield
        return
    metrics.store = store
    async with contextlib.AsyncExitStack() as stack:
        if settings.metrics_port is not None:
            await stack.enter_async_context(
                listening(
                    make_asgi_app(metrics.registry), settings, settings.host, settings.metrics_port
                )
            )
            log.info("metrics: served on %s:%d/metrics", settings.host, settings.metrics_port)
        async with refreshing(metrics, settings.metrics_refresh_seconds):
            yield


POOL_CLOSE_GRACE_S = 10.0


async def close_pool(db: Database, grace_s: float = POOL_CLOSE_GRACE_S) -> None:
    """Close the pool, waiting at most ``grace_s`` for connections in use to come back.

    A connection whose backend died in the middle of a transaction can stay checked out for
    good (``databases`` fails its rollback and never releases it); asyncpg's close would then
    wait forever, so past the grace the pool is closed by force (asyncpg terminates it when
    its close is cancelled).
    """
    try:
        async with asyncio.timeout(grace_s):
            await db.disconnect()
    except TimeoutError:
        log.warning(
            "database: pool closed by force after %s s (connections never released)", grace_s
        )
        return
    log.info("database: pool closed")


def create_app(
    settings: Settings | None = None,
    store: ConnectorStore | None = None,
    tracer: Any = None,
    *,
    auth: Authenticator | None = None,
) -> Starlette:
    """The ASGI app. Given a connected ``store`` it uses it as is; otherwise it opens
    ``settings.database_url`` at start-up and closes it at shutdown (migrate first).
    ``tracer``: an OpenTelemetry tracer (default: one for ``OTEL_EXPORTER_OTLP_ENDPOINT``,
    or none).

    Every request but ``/healthz``, ``/readyz``, the pages and their assets and the sign-in
    code's exchange needs a bearer token checked by ``auth`` (by default the one
    ``settings`` describe); people sign in with a one-time link (``server.sessions``).
    Every response forbids framing (``NoFraming``)."""
    settings = settings or Settings()
    auth = auth or authenticator(settings)
    metrics = Metrics() if settings.metrics else None
    if tracer is None:
        tracer = tracer_for(settings.otel_exporter_otlp_endpoint)

    limits = LiveLimits(
        per_connection=settings.max_subscriptions_per_connection,
        per_viewer=settings.max_subscriptions_per_viewer,
        queue=settings.subscription_queue,
        recheck_ms=settings.wakeup_recheck_ms,
    )

    @contextlib.asynccontextmanager
    async def serving(app: Starlette, store: ConnectorStore) -> AsyncIterator[None]:
        app.state.store = store
        app.state.hub = Hub(store, limits, metrics)
        async with (
            observing(settings, store, metrics, tracer),
            sweeping(settings, store, metrics) as app.state.sweeper,
            app.state.hub.running(settings.listen_database_url or None),
        ):
            yield

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if store is not None:
            async with serving(app, store):
                yield
            return
        db = settings.database()
        await db.connect()
        try:
            async with serving(app, ConnectorStore(db)):
                yield
        finally:
            await close_pool(db)

    sessions = Sessions(auth, settings.session_ttl_seconds)
    graphql = GraphQLApp(
        build_schema(settings),
        graphiql=settings.graphiql,
        authenticator=auth,
        max_response_bytes=settings.max_response_bytes,
        retain_failed_ms=settings.retain_failed_seconds * 1000,
        max_subscriptions_per_connection=settings.max_subscriptions_per_connection,
        connection_init_timeout_s=settings.header_timeout_seconds,
    )
    app = Starlette(
        routes=[
            Route("/", graphql_redirect),
            Route("/graphql", graphql, methods=["GET", "POST"]),
            WebSocketRoute("/graphql", graphql),
            Route("/healthz", healthz),
            Route("/readyz", readyz),
            Route(SIGN_IN_PATH, sessions.sign_in, methods=["POST"]),
            Route("/auth/renew", sessions.renew, methods=["POST"]),
            Route("/auth/sign-out", sessions.sign_out, methods=["POST"]),
            *(
                [
                    Route("/ui", dashboard),
                    Route("/ui/dashboard.graphql", dashboard_documents),
                    Mount("/ui/assets", StaticFiles(directory=DASHBOARD_ASSETS), name="ui"),
                ]
                if settings.dashboard
                else []
            ),
            *(
                [Route("/metrics", metrics_endpoint)]
                if metrics is not None and settings.metrics_port is None
                else []
            ),
        ],
        lifespan=lifespan,
        exception_handlers={StarletteHTTPException: http_exception},
    )
    if settings.graphiql:
        app.mount("/graphiql", StaticFiles(directory=GRAPHIQL_ASSETS), name="graphiql")
    if settings.graphiql or settings.dashboard:
        app.mount("/signin", StaticFiles(directory=SIGN_IN_ASSETS), name="signin")
    if store is not None:
        app.state.store = store
        app.state.hub = Hub(store, limits, metrics)
    app.state.metrics = metrics
    app.add_middleware(
        RequestBody, max_bytes=settings.max_body_bytes, timeout_s=settings.body_timeout_seconds
    )
    app.add_middleware(Authentication, authenticator=auth)
    if settings.cors_origin_list:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=settings.cors_origin_list,
            allow_methods=["GET", "POST"],
            allow_headers=["Authorization", "Content-Type"],
            max_age=600,
        )
    app.add_middleware(ShutdownCut)
    app.add_middleware(RequestTelemetry, metrics=metrics, tracer=tracer)
    app.add_middleware(NoFraming)
    return app
