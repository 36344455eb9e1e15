"""The ``/graphql`` view: Strawberry's ASGI view with our request context, strict JSON,
Apollo's persisted queries, GraphQL over HTTP's response type, and a GraphiQL page of
the server's own."""

import dataclasses
import json
import re
import uuid
from datetime import timedelta
from typing import Any

from cross_web import HTTPException
from graphql import GraphQLError
from starlette.datastructures import ImmutableMultiDict
from starlette.requests import Request
from starlette.responses import (
    HTMLResponse,
    Response,
    StreamingResponse,
)
from starlette.types import Receive, Scope, Send
from starlette.websockets import WebSocket
from strawberry.asgi import GraphQL
from strawberry.http import GraphQLHTTPResponse, GraphQLRequestData
from strawberry.http.parse_content_type import parse_content_type
from strawberry.schema import BaseSchema
from strawberry.schema.exceptions import CannotGetOperationTypeError, InvalidOperationTypeError
from strawberry.subscriptions import GRAPHQL_TRANSPORT_WS_PROTOCOL, MULTIPART_SUBSCRIPTION_PROTOCOL
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
from resolvers.live import Session, SessionCheck
from resolvers.loaders import Loaders
from resolvers.permissions import Viewer
from server.auth import (
    TOKEN_UNTIL,
    Authenticator,
    Credentials,
    Unauthenticated,
    live,
)
from server.pages import GRAPHIQL_PAGE, GRAPHIQL_POLICY
from server.responses import (
    JsonResponse,
    encode_json,
    method_not_allowed,
    request_error,
    subscription_not_acceptable,
)
from server.strict_json import DuplicateKey, NotJson, strict_loads, unique_keys
from server.telemetry import current_request
from server.websocket import TextWebSocket, TokenTransportWS
from store import ConnectorStore
from store.errors import DatabaseUnavailable
from store.persisted_queries import sha256_hex
from store.retention import RETAIN_FAILED_S


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
        """A response body (``server.responses.encode_json``)."""
        return encode_json(data)

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
        so is an ``operationName`` that is not a string.

        A POST of a JSON object with a ``Content-Type`` of ``JSON_CONTENT_TYPES`` from a
        client that accepts no stream (``accepts_stream``) is read here, as Strawberry
        reads it (``request_data``), without parsing its ``Content-Type`` and ``Accept``
        headers again; any other request is Strawberry's."""
        data: Any = None
        if request.method != "GET" and request.content_type not in JSON_CONTENT_TYPES:
            content_type, _ = parse_content_type(request.content_type or "")
            if content_type != "application/json":
                raise HTTPException(400, UNSUPPORTED_CONTENT_TYPE)
        elif request.method == "POST" and not accepts_stream(request.headers.get("accept")):
            body = self.parse_json(await request.get_body())
            if isinstance(body, dict):
                data = request_data(body)
        if data is None:
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
        scope = with_stream_accept(scope)
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
            response = JsonResponse(
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
        if failed_before_execution(result.data, errors):
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
        if not isinstance(persisted, dict):
            raise HTTPException(
                400, "persistedQuery: must be an object with version 1 and sha256Hash"
            )
        if persisted.get("version") != 1:
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
        credentials: Credentials | None = request.scope.get("credentials")
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
                check=session_check(credentials, store),
                sign_in=None if credentials is None else credentials.session,
            ),
        )


def failed_before_execution(data: Any, errors: list[GraphQLError] | None) -> bool:
    """Whether a result of ``data`` and ``errors`` failed before execution (every error a
    ``RequestError``): its body has no ``data`` entry, and with GraphQL over HTTP's response
    type it is a 400 (``GraphQLApp``, ``server.lean_lane``)."""
    return data is None and bool(errors) and all(isinstance(e, RequestError) for e in errors or ())


def session_check(credentials: Credentials | None, store: ConnectorStore) -> SessionCheck | None:
    """The check a request's stream runs every ``SESSION_RECHECK_S`` (``Session.valid``) when
    its token is a sign-in session's (None for any other token): ``server.auth.live``,
    ``UNAUTHENTICATED`` once the session was signed out or has ended; a database that cannot
    answer ends nothing (checked again later). A WebSocket checks its own session
    (``TokenTransportWS``) and closes with it."""
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


SHA256_HEX = re.compile(r"[0-9a-fA-F]{64}")
MAX_PERSISTED_QUERY_CHARS = 64 * 1024
"""Longer texts run but are not registered (the table stays small)."""


class PersistedQueryNotFound(Exception):
    """No query is registered under the hash a request sent alone."""


def request_id() -> str:
    """The request id ``RequestTelemetry`` chose (from ``X-Request-ID`` or new)."""
    info = current_request.get()
    return info.request_id if info is not None else uuid.uuid4().hex


GRAPHQL_RESPONSE_JSON = "application/graphql-response+json; charset=utf-8"
REQUEST_FAILED = "connector_store.request_failed"
"""Set in the ASGI scope when the request failed before execution."""
TO_REGISTER = "connector_store.persisted_query_to_register"
"""Set in the ASGI scope to the query text of a persisted query sent with its hash the
first time: registered once the request has been answered without a request error."""
JSON_CONTENT_TYPES = frozenset({"application/json", "application/json; charset=utf-8"})
"""The ``Content-Type`` headers clients send for a JSON body, taken as they are: any other
is parsed (``parse_content_type``, which builds an ``email.message.Message``)."""
UNSUPPORTED_CONTENT_TYPE = (
    "Unsupported content type: send application/json (or use GET with query parameters)"
)


MULTIPART_SUBSCRIPTION_ACCEPT = b'multipart/mixed;subscriptionSpec="1.0"'
STREAM_TYPES = frozenset({"multipart/mixed", "text/event-stream"})


def with_stream_accept(scope: Scope) -> Scope:
    """``scope`` with ``Accept: multipart/mixed;subscriptionSpec="1.0"`` when its ``Accept``
    lists ``multipart/mixed`` and nothing but streams (urql's subscriptions send
    ``text/event-stream, multipart/mixed``): such a client takes no single JSON answer, so
    the multipart stream is the one answer it accepts. Strawberry's transport reads one
    media type with the ``subscriptionSpec`` parameter; any other ``Accept`` is left as sent."""
    accept = next((value for key, value in scope["headers"] if key == b"accept"), None)
    if accept is None:
        return scope
    types = {
        part.split(b";", 1)[0].strip().lower().decode("latin-1") for part in accept.split(b",")
    }
    if "multipart/mixed" not in types or not types <= STREAM_TYPES:
        return scope
    headers = [(key, value) for key, value in scope["headers"] if key != b"accept"]
    return dict(scope, headers=[*headers, (b"accept", MULTIPART_SUBSCRIPTION_ACCEPT)])


def accepts_stream(accept: str | None) -> bool:
    """Whether the ``Accept`` header may ask for a stream (it names ``multipart/mixed`` or
    ``text/event-stream``, in any case): Strawberry then picks the response's transport."""
    if not accept:
        return False
    lowered = accept.lower()
    return "multipart/mixed" in lowered or "text/event-stream" in lowered


def request_data(body: dict[str, Any]) -> GraphQLRequestData:
    """A JSON body's GraphQL parameters for a single answer, each checked as Strawberry's
    ``parse_http_body`` checks it (the same 400s)."""
    query = body.get("query")
    if not isinstance(query, (str, type(None))):
        raise HTTPException(
            400, "The GraphQL operation's `query` must be a string or null, if provided."
        )
    variables = body.get("variables")
    if not isinstance(variables, (dict, type(None))):
        raise HTTPException(
            400, "The GraphQL operation's `variables` must be an object or null, if provided."
        )
    extensions = body.get("extensions")
    if not isinstance(extensions, (dict, type(None))):
        raise HTTPException(
            400,
            "The GraphQL operation's `extensions` must be an object or null, if provided.",
        )
    return GraphQLRequestData(
        query=query,
        variables=variables,
        operation_name=body.get("operationName"),
        extensions=extensions,
        protocol="http",
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
