"""The lean lane: known documents answered from the socket to the bytes in one pass.

``LeanLane`` stands in front of the Starlette app (``server.app.ConnectorApp``). A
``POST /graphql`` whose document it knows is answered here, every step once and in order:
the request id, the token (``server.auth.authenticate_request``, the one check, sessions
included), the body's size and time bounds, its JSON, the variables' size bound, the
planned operation (graphql-core's ``execute`` with the fast path's executor,
``server.fast_path``, and the root field's rule as its only resolver middleware), the
errors' codes (``server.errors.error_codes.coded``), the encoded answer with the headers
every response carries (``X-Request-ID``, the framing refused), then the request's
metrics and log line (``server.telemetry.finished``) and, at shutdown, the cut
(``server.http_server.cut_answer``). No Starlette routing, middleware, Strawberry view or
per-step pipeline object stands in between.

A document is known when the schema's own pipeline (``server.pipeline``, run through
Strawberry's public runner on an ``ExecutionContext`` of the text alone) parses and
validates it without an error, its operation is a query or a mutation, and the fast path
plans it (``server.fast_path.plan_of``: one root field, …): the worker's documents and
every other such document. What it learns is kept per text and ``operationName``.

Everything else falls through to the app, which stays the reference, before anything has
run: another path or method, a ``Content-Type`` other than JSON's, a body that is chunked,
empty, too large, late or not a JSON object of ``query``, ``operationName`` and
``variables``; a persisted query, a stream (``Accept``), a federated trace, a CORS
request (``Origin`` with ``CORS_ORIGINS`` set), a header sent twice; a token refused or a
session that cannot be read; an unknown document; variables past their size or refused
by graphql-core's coercion (no field has run). The body read so far is handed on, and
``server.request_body.RequestBody`` keeps the deadline taken from the request's head.
With a tracer (``OTEL_EXPORTER_OTLP_ENDPOINT``) or ``LEAN_LANE=false`` every request falls
through. ``tests/api/test_lean_lane.py`` sends the same requests both ways and compares
them byte for byte.
"""

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from inspect import isawaitable
from typing import Any

from graphql import (
    DocumentNode,
    FragmentDefinitionNode,
    OperationDefinitionNode,
    OperationType,
    execute,
    get_operation_ast,
)
from graphql.execution import MiddlewareManager
from starlette.requests import Request
from starlette.types import Message, Receive, Scope, Send
from strawberry.http import process_result
from strawberry.schema.schema import Schema
from strawberry.types.execution import ExecutionContext, ExecutionResult
from strawberry.types.graphql import OperationType as StrawberryOperationType

from resolvers.permissions import Authorization
from server.auth import TOKEN_UNTIL, Authenticator, Unauthenticated, authenticate_request
from server.document_cache import CACHE_ENTRIES, MAX_CACHED_QUERY_CHARS
from server.errors.error_codes import Phase, coded, requested_operation_name
from server.errors.variables import oversized_variables, refused_before_execution
from server.fast_path import plan_of
from server.graphql_view import (
    GRAPHQL_RESPONSE_JSON,
    JSON_CONTENT_TYPES,
    GraphQLApp,
    accepts_graphql_response,
    accepts_stream,
    failed_before_execution,
)
from server.http_server import SHUTDOWN_CUT, cut_answer
from server.metrics import Metrics
from server.pages import framed_headers
from server.request_body import BODY_DEADLINE
from server.responses import encode_json
from server.strawberry_internals import graphql_schema
from server.strict_json import strict_loads, unique_keys
from server.telemetry import (
    RequestInfo,
    current_request,
    finished,
    report_operation,
    valid_request_id,
)
from store.context import acting_as
from store.errors import DatabaseUnavailable

ANSWERED = (StrawberryOperationType.QUERY, StrawberryOperationType.MUTATION)
BODY_KEYS = frozenset({"query", "operationName", "variables", "extensions"})
PASSED_BY = (b"transfer-encoding", b"apollo-federation-include-trace")
"""Headers whose request the lane leaves to the app: a chunked body, a federated trace."""
JSON = b"application/json"


LANE_STEPS = {
    "OperationTelemetry": "report_operation once the operation ran",
    "FederatedTracing": "a request asking for a trace falls through",
    "ErrorCodes": "execution errors coded by coded; several operations unnamed found invalid "
    "when learnt; variables graphql-core refused fall through",
    "Authorization": "RootRule, the root field's resolver middleware",
    "MaxTokensLimiter": "run when the document is learnt",
    "QueryLimits": "run when the document is learnt",
    "AddValidationRules": "run when the document is learnt",
    "CodedValidation": "run when the document is learnt",
    "DocumentCache": "run when the document is learnt",
    "VariableBounds": "oversized_variables on each request's variables",
}
"""What the lane does for each step of the pipeline (``server.pipeline``): its parsing and
validation steps run once per document, when it is learnt; what a step does to each
request is done here. ``tests/api/test_lean_lane.py`` fails when the pipeline holds a step
not listed."""


@dataclass(frozen=True, slots=True)
class Known:
    """A document the lane answers: parsed, validated by the pipeline, planned; ``name`` is
    the operation name the request's telemetry reports (Strawberry's: the one given, else
    the document's operation's)."""

    document: DocumentNode
    operation: OperationDefinitionNode
    name: str | None


class KnownDocuments:
    """The documents the lane answers, learnt per (text, ``operationName``) on first sight
    by running the schema's pipeline over the text (parsing, the operation's type,
    validation; nothing executes), at most ``CACHE_ENTRIES`` kept, texts up to
    ``MAX_CACHED_QUERY_CHARS`` (the document cache's bounds)."""

    def __init__(self, schema: Schema) -> None:
        self.schema = schema
        self.entries: dict[tuple[str, str | None], Known | None] = {}

    async def get(self, query: str, operation_name: str | None) -> Known | None:
        """The known document of ``query`` run as ``operation_name``, or None (the lane
        leaves it to the app)."""
        key = (query, operation_name)
        try:
            return self.entries[key]
        except KeyError:
            pass
        known = (
            await self.learn(query, operation_name)
            if len(query) <= MAX_CACHED_QUERY_CHARS
            else None
        )
        if len(self.entries) >= CACHE_ENTRIES:
            self.entries.clear()
        self.entries[key] = known
        return known

    async def learn(self, query: str, operation_name: str | None) -> Known | None:
        """Run the pipeline's operation, parsing and validation phases over ``query`` as
        the schema would (outside any request's telemetry); the document when it passes
        and the fast path plans its operation."""
        context = ExecutionContext(
            query=query,
            schema=self.schema,
            allowed_operations=ANSWERED,
            provided_operation_name=operation_name,
        )
        extensions = self.schema.get_extensions()
        for extension in extensions:
            extension.execution_context = context
        runner = self.schema.create_extensions_runner(context, extensions)
        given = requested_operation_name.set(operation_name)
        outside = current_request.set(None)
        try:
            async with runner.operation():
                async with runner.parsing():
                    pass
                if context.graphql_document is None:
                    return None
                try:
                    if context.operation_type not in ANSWERED:
                        return None
                except RuntimeError:
                    return None
                async with runner.validation():
                    pass
        finally:
            current_request.reset(outside)
            requested_operation_name.reset(given)
        document = context.graphql_document
        if context.pre_execution_errors is None or context.pre_execution_errors:
            return None
        operation = get_operation_ast(document, operation_name)
        if operation is None or operation.operation not in (
            OperationType.QUERY,
            OperationType.MUTATION,
        ):
            return None
        fragments = {
            definition.name.value: definition
            for definition in document.definitions
            if isinstance(definition, FragmentDefinitionNode)
        }
        if plan_of(graphql_schema(self.schema), operation, fragments) is None:
            return None
        return Known(document, operation, context.operation_name)


class RootRule:
    """The root field's rule (``Authorization``'s resolver middleware), the one middleware
    a known document runs; it reaches no field below the root (``server.fast_path``)."""

    def __init__(self) -> None:
        self.authorization = Authorization()

    def resolve(self, _next: Callable[..., Any], root: Any, info: Any, **kwargs: Any) -> Any:
        return self.authorization.resolve(_next, root, info, **kwargs)

    def resolves_below_root(self) -> bool:
        return False


class FallThrough(Exception):
    """The request is the app's: raised before anything of it ran."""


class LeanLane:
    """ASGI: known documents answered here (the module's docstring), every other request by
    ``app``. ``state`` is the app's (its ``store``)."""

    def __init__(
        self,
        app: Callable[[Scope, Receive, Send], Awaitable[None]],
        starlette: Any,
        schema: Schema,
        view: GraphQLApp,
        authenticator: Authenticator,
        metrics: Metrics | None,
        *,
        max_body_bytes: int,
        body_timeout_s: float,
        cors: bool,
    ) -> None:
        self.app = app
        self.starlette = starlette
        self.schema = schema
        self.graphql = graphql_schema(schema)
        self.view = view
        self.authenticator = authenticator
        self.metrics = metrics
        self.max_body_bytes = max_body_bytes
        self.body_timeout_s = body_timeout_s
        self.cors = cors
        self.known = KnownDocuments(schema)
        self.middleware = MiddlewareManager(RootRule())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != "/graphql" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        headers = dict(scope["headers"])
        length = headers.get(b"content-length")
        if (
            len(headers) != len(scope["headers"])
            or headers.get(b"content-type") not in JSON_TYPES
            or length is None
            or not length.isdigit()
            or not 0 < int(length) <= self.max_body_bytes
            or any(name in headers for name in PASSED_BY)
            or (self.cors and b"origin" in headers)
            or accepts_stream(headers.get(b"accept", b"").decode("latin-1"))
        ):
            await self.app(scope, receive, send)
            return
        received: list[Message] = []
        try:
            await self.answer(scope, receive, send, headers, received, started)
        except FallThrough:
            await self.app(scope, replaying(received, receive), send)

    async def answer(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        headers: dict[bytes, bytes],
        received: list[Message],
        started: float,
    ) -> None:
        """Answer the request, or raise ``FallThrough`` before anything of it ran (what of
        the body was read is in ``received``)."""
        store = self.starlette.state.store
        try:
            credentials = await authenticate_request(self.authenticator, scope, store)
        except (Unauthenticated, DatabaseUnavailable):
            raise FallThrough from None
        payload = strict_json(await self.body(scope, receive, received))
        query = payload.get("query")
        name = payload.get("operationName")
        variables = payload.get("variables")
        if (
            not isinstance(query, str)
            or not (name is None or isinstance(name, str))
            or not (variables is None or isinstance(variables, dict))
            or payload.get("extensions") is not None
            or not payload.keys() <= BODY_KEYS
        ):
            raise FallThrough
        known = await self.known.get(query, name)
        if known is None or oversized_variables(self.graphql, known.operation, variables):
            raise FallThrough
        given = headers.get(b"x-request-id")
        info = RequestInfo(valid_request_id(given.decode("latin-1") if given else None))
        scope["app"] = self.starlette
        scope["credentials"] = credentials
        scope["viewer"], scope[TOKEN_UNTIL] = credentials.viewer, credentials.until
        request = Request(scope, replaying(received, receive))
        task = asyncio.current_task()
        assert task is not None, "an ASGI request runs in a task"
        cut = False

        def cut_now() -> None:
            nonlocal cut
            cut = True
            task.cancel()

        scope[SHUTDOWN_CUT] = cut_now
        token = current_request.set(info)
        status, fell = 500, False
        try:
            try:
                context = await self.view.get_context(request, None)
                result = await self.run(known, name, variables, context)
                if refused_before_execution(result):
                    raise FallThrough
                errors = (
                    [coded(error, Phase.EXECUTION, info.request_id) for error in result.errors]
                    if result.errors
                    else None
                )
                report_operation(info, known.name, context, errors)
                status, body = answered(result.data, errors, headers)
                content_type = (
                    GRAPHQL_RESPONSE_JSON.encode()
                    if accepts_graphql_response(headers.get(b"accept", b"").decode("latin-1"))
                    else JSON
                )
                start = [
                    (b"content-length", str(len(body)).encode()),
                    (b"content-type", content_type),
                ]
            except asyncio.CancelledError:
                if not cut:
                    raise
                task.uncancel()
                response = cut_answer()
                status, body, start = (
                    response.status_code,
                    bytes(response.body),
                    list(response.raw_headers),
                )
            await send(
                {
                    "type": "http.response.start",
                    "status": status,
                    "headers": framed_headers(
                        [*start, (b"x-request-id", info.request_id.encode("ascii"))]
                    ),
                }
            )
            await send({"type": "http.response.body", "body": body})
        except FallThrough:
            fell = True
            raise
        finally:
            current_request.reset(token)
            if not fell:
                outcome = info.outcome or ("ok" if status < 400 else f"http_{status}")
                finished(
                    self.metrics,
                    "POST",
                    "/graphql",
                    info,
                    status,
                    outcome,
                    time.perf_counter() - started,
                )

    async def body(self, scope: Scope, receive: Receive, received: list[Message]) -> bytes:
        """The request's whole body, read by ``BODY_TIMEOUT_SECONDS`` after the lane took
        it (the deadline left in the scope for the app); ``FallThrough`` when it is late,
        the client left or it passed its declared length."""
        deadline = asyncio.get_running_loop().time() + self.body_timeout_s
        scope[BODY_DEADLINE] = deadline
        chunks = []
        while True:
            try:
                async with asyncio.timeout_at(deadline):
                    message = await receive()
            except TimeoutError:
                raise FallThrough from None
            received.append(message)
            if message["type"] != "http.request":
                raise FallThrough
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        if len(body) > self.max_body_bytes:
            raise FallThrough
        return body

    async def run(
        self,
        known: Known,
        name: str | None,
        variables: dict[str, Any] | None,
        context: Any,
    ) -> Any:
        """``known``'s operation executed as the schema's ``execute`` runs it: the fast
        path's executor, the client's ``operationName`` for the steps that read it, the
        viewer as the actor of every store write."""
        given = requested_operation_name.set(name)
        try:
            with acting_as(context.viewer.did):
                result = execute(
                    self.graphql,
                    known.document,
                    context_value=context,
                    variable_values=variables,
                    operation_name=name,
                    middleware=self.middleware,
                    executor_class=self.schema.execution_context_class,
                )
                if isawaitable(result):
                    result = await result
        finally:
            requested_operation_name.reset(given)
        return result


JSON_TYPES = frozenset(content_type.encode() for content_type in JSON_CONTENT_TYPES)


def strict_json(body: bytes) -> dict[str, Any]:
    """The request body as a JSON object (the view's strict reading); ``FallThrough`` for
    anything else (the app answers it)."""
    try:
        payload = strict_loads(body, object_pairs_hook=unique_keys)
    except (ValueError, RecursionError):
        raise FallThrough from None
    if not isinstance(payload, dict):
        raise FallThrough
    return payload


def answered(data: Any, errors: list[Any] | None, headers: dict[bytes, bytes]) -> tuple[int, bytes]:
    """The status and body of a result (Strawberry's ``process_result``; no ``data`` and,
    with GraphQL over HTTP's response type, 400, when it failed before execution, as
    ``GraphQLApp`` answers)."""
    body = dict(process_result(ExecutionResult(data=data, errors=errors)))
    failed = failed_before_execution(data, errors)
    if failed:
        body.pop("data", None)
    graphql_response = accepts_graphql_response(headers.get(b"accept", b"").decode("latin-1"))
    return (400 if failed and graphql_response else 200), encode_json(body)


def replaying(received: list[Message], receive: Receive) -> Receive:
    """``receive`` after the messages ``received`` already, in order."""
    pending = list(received)

    async def replay() -> Message:
        if pending:
            return pending.pop(0)
        return await receive()

    return replay
