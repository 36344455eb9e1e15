"""OpenTelemetry tracing, on only when ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set.

With no endpoint nothing is imported and nothing is wrapped: tracing costs nothing. With
one, ``tracer_for`` builds a tracer exporting spans over OTLP/HTTP (the ``otel`` extra:
``pip install '.[otel]'``; the exporter reads the standard ``OTEL_*`` variables), the
request middleware opens a span per request and ``trace_store`` wraps each public
coroutine of the store's parts (``store.operations.acquire_lease`` …) in a child span.
"""

import functools
import inspect
import logging
from collections.abc import Callable
from typing import Any

from store import ConnectorStore

log = logging.getLogger("connector_store.tracing")

STORE_PARTS = ("operations", "watches", "winners", "retention", "pending_auth", "sync_state")


def tracer_for(endpoint: str) -> Any:
    """A tracer exporting to ``endpoint`` over OTLP/HTTP, or None when ``endpoint`` is empty."""
    if not endpoint:
        return None
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = TracerProvider(resource=Resource.create({"service.name": "connector-store"}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    log.info("tracing: spans exported over OTLP")
    return provider.get_tracer("connector_store")


def _traced(tracer: Any, name: str, method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    async def traced(*args: Any, **kwargs: Any) -> Any:
        with tracer.start_as_current_span(name, attributes={"db.operation.name": name}):
            return await method(*args, **kwargs)

    return traced


def trace_store(store: ConnectorStore, tracer: Any) -> None:
    """Wrap every public coroutine method of ``store``'s parts, on these instances only, in a
    span named ``store.<part>.<method>``."""
    for part_name in STORE_PARTS:
        part = getattr(store, part_name)
        for name, method in inspect.getmembers(part, inspect.iscoroutinefunction):
            if not name.startswith("_"):
                setattr(part, name, _traced(tracer, f"store.{part_name}.{name}", method))
