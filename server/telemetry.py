"""Request telemetry: the request id, one log line per request, metrics and tracing spans.

``RequestTelemetry`` (ASGI middleware) picks the request id (the client's ``X-Request-ID``
when it is 1 to 128 printable ASCII characters, else a new one), echoes it in the
response's ``X-Request-ID``, times the request and, when it ends, logs one line with the
request id, GraphQL operation name, viewer DID, status, outcome and duration, and
observes the request in the metrics. ``OperationTelemetry`` (a schema extension) tells it
the operation name, the viewer and the outcome (``ok`` or the first error's code), and the
store events the resolvers reported (lease takeovers, contested sends).
"""

import logging
import time
import uuid
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from strawberry.extensions import SchemaExtension

from resolvers.codes import INTERNAL_SERVER_ERROR
from server.metrics import Metrics

log = logging.getLogger("connector_store.request")

MAX_REQUEST_ID_CHARS = 128
QUIET_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})
"""Probes and scrapes: logged at debug level only."""


@dataclass
class RequestInfo:
    """What one request's telemetry gathers while it runs."""

    request_id: str
    operation: str | None = None
    viewer_did: str | None = None
    outcome: str | None = None
    events: list[str] = field(default_factory=list)


current_request: ContextVar[RequestInfo | None] = ContextVar("current_request", default=None)


def valid_request_id(given: str | None) -> str:
    """``given`` when it is 1 to 128 printable ASCII characters, else a new id."""
    if (
        given
        and len(given) <= MAX_REQUEST_ID_CHARS
        and given.isascii()
        and given.isprintable()
        and given.strip() == given
    ):
        return given
    return uuid.uuid4().hex


class RequestTelemetry:
    """ASGI middleware: request id, the request's log line, its metrics and its span."""

    def __init__(self, app: Any, metrics: Metrics | None, tracer: Any = None) -> None:
        self.app = app
        self.metrics = metrics
        self.tracer = tracer

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        given = headers.get(b"x-request-id")
        info = RequestInfo(valid_request_id(given.decode("latin-1") if given else None))
        token = current_request.set(info)
        status = 500
        started = time.perf_counter()

        async def send_with_id(message: Any) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message = dict(message)
                message["headers"] = [
                    *message.get("headers", []),
                    (b"x-request-id", info.request_id.encode("ascii")),
                ]
            await send(message)

        span_context = (
            self.tracer.start_as_current_span(
                f"{scope['method']} {scope['path']}",
                attributes={
                    "http.request.method": scope["method"],
                    "url.path": scope["path"],
                    "connector.request_id": info.request_id,
                },
            )
            if self.tracer is not None
            else None
        )
        span = span_context.__enter__() if span_context is not None else None
        try:
            await self.app(scope, receive, send_with_id)
        finally:
            seconds = time.perf_counter() - started
            current_request.reset(token)
            outcome = info.outcome or ("ok" if status < 400 else f"http_{status}")
            if span is not None:
                span.set_attribute("http.response.status_code", status)
                span.set_attribute("connector.outcome", outcome)
                if info.operation:
                    span.set_attribute("graphql.operation.name", info.operation)
            if span_context is not None:
                span_context.__exit__(None, None, None)
            finished(self.metrics, scope["method"], scope["path"], info, status, outcome, seconds)


def finished(
    metrics: Metrics | None,
    method: str,
    path: str,
    info: RequestInfo,
    status: int,
    outcome: str,
    seconds: float,
) -> None:
    """A request answered with ``status`` after ``seconds``: counted in ``metrics`` (a
    ``/graphql`` request, with its store events) and logged in one line. Every way a request
    is answered ends here (``RequestTelemetry``, ``server.lean_lane``)."""
    if metrics is not None and path == "/graphql":
        metrics.observe_request(info.operation, outcome, seconds)
        for event in info.events:
            if event == "lease_takeover":
                metrics.lease_takeovers.inc()
            elif event == "contested_send":
                metrics.contested_sends.inc()
    level = logging.DEBUG if path in QUIET_PATHS else logging.INFO
    if not log.isEnabledFor(level):
        return
    log.log(
        level,
        "%s %s %d %s %.1f ms",
        method,
        path,
        status,
        outcome,
        seconds * 1000,
        extra={
            "request_id": info.request_id,
            "operation": info.operation,
            "viewer_did": info.viewer_did,
            "method": method,
            "path": path,
            "status": status,
            "outcome": outcome,
            "duration_ms": round(seconds * 1000, 3),
        },
    )


def report_operation(
    info: RequestInfo, operation: str | None, context: Any, errors: list[Any] | None
) -> None:
    """Tell the request's telemetry ``info`` its operation name, the viewer and store events
    of its ``context``, and its outcome: ``ok``, or the first of ``errors``' code."""
    info.operation = operation
    viewer = getattr(context, "viewer", None)
    info.viewer_did = getattr(viewer, "did", None)
    info.events.extend(getattr(context, "events", ()))
    if errors:
        code = (errors[0].extensions or {}).get("code")
        info.outcome = str(code or INTERNAL_SERVER_ERROR)
    else:
        info.outcome = "ok"


class OperationTelemetry(SchemaExtension):
    """Tells the request's telemetry its operation name, viewer, outcome and store events
    (its place in the pipeline: ``server.pipeline``)."""

    def on_operation(self) -> Iterator[None]:
        yield
        info = current_request.get()
        if info is None:
            return
        result = self.execution_context.result
        report_operation(
            info,
            self.execution_context.operation_name,
            self.execution_context.context,
            None if result is None else result.errors,
        )
