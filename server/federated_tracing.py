"""Federated tracing (ftv1) for a gateway: Strawberry's ``ApolloFederationTracingExtension``,
run only for service tokens that ask for a trace.

A trace carries resolver timings and the raw messages of errors, which the client may not
see otherwise, so a tenant never gets one. The request asks with Apollo's
``apollo-federation-include-trace: ftv1`` header. Every other request pays one check per field
and no coroutine: Strawberry's extension, once listed, wraps every resolver in a
coroutine whether it traces or not, so it is made and run only for a request it will trace,
through its public hooks.
"""

from collections.abc import Callable, Iterator
from typing import Any

from strawberry.extensions import SchemaExtension
from strawberry.extensions.tracing.apollo_federation import (
    FTV1_HEADER,
    FTV1_HEADER_VALUE,
    ApolloFederationTracingExtension,
)


class FederatedTracing(SchemaExtension):
    """An ftv1 trace in ``extensions.ftv1`` for a service token whose request carries
    ``apollo-federation-include-trace: ftv1``; nothing for any other request."""

    def __init__(self, *, execution_context: Any = None) -> None:
        super().__init__(execution_context=execution_context)
        self.tracing: ApolloFederationTracingExtension | None = None

    def asked(self) -> bool:
        """Whether a service viewer's request asks for a trace."""
        context = self.execution_context.context
        viewer = getattr(context, "viewer", None)
        request = getattr(context, "request", None)
        return (
            viewer is not None
            and viewer.is_service
            and request is not None
            and request.headers.get(FTV1_HEADER, "").lower() == FTV1_HEADER_VALUE
        )

    @property
    def resolves(self) -> bool:
        """Whether this request needs its ``resolve`` hook: only while it traces (read by
        ``server.pipeline.Pipeline`` once the operation has started)."""
        return self.tracing is not None

    def on_operation(self) -> Iterator[None]:
        if not self.asked():
            yield
            return
        self.tracing = ApolloFederationTracingExtension()
        self.tracing.execution_context = self.execution_context
        yield from self.tracing.on_operation()

    def resolve(
        self, _next: Callable[..., Any], root: Any, info: Any, *args: Any, **kwargs: Any
    ) -> Any:
        if self.tracing is None:
            return _next(root, info, *args, **kwargs)
        return self.tracing.resolve(_next, root, info, *args, **kwargs)

    def get_results(self) -> dict[str, Any]:
        return {} if self.tracing is None else self.tracing.get_results()
