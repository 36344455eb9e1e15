"""Both execution paths on one request: ``Differential`` runs graphql-core's path (the
reference), keeps what the root field's resolver (with the request's middleware) returned
or raised, completes that by the fast path's plan (``server.fast_path``), and records any
difference between the two responses, byte for byte, in ``MISMATCHES``. It answers with the
fast path's result, so a test that uses it sees the fast path's answers."""

import json
from typing import Any

from graphql import ExecutionResult
from graphql.execution import MiddlewareManager
from strawberry.schema.schema import StrawberryGraphQLCoreExecutionContext

from server.fast_path import FastExecutor

MISMATCHES: list[tuple[str, bytes, bytes]] = []
"""(operation, graphql-core's response, the fast path's) for each request they differ on."""
COMPARED: list[str] = []
"""The operation of each request both paths answered."""


def response_bytes(result: ExecutionResult) -> bytes:
    """The response body a result makes: data, then the errors as GraphQL formats them
    (``json``, which writes any integer, as the app's encoder falls back to)."""
    body: dict[str, Any] = {"data": result.data}
    if result.errors:
        body["errors"] = [error.formatted for error in result.errors]
    return json.dumps(body).encode()


class RootOutcome:
    """The outermost resolver middleware: keeps what the root field resolved to."""

    def __init__(self) -> None:
        self.value: Any = None
        self.raised: Exception | None = None

    def resolves_below_root(self) -> bool:
        return False

    def resolve(self, next_: Any, root: Any, info: Any, **args: Any) -> Any:
        if info.path.prev is not None:
            return next_(root, info, **args)
        try:
            result = next_(root, info, **args)
        except Exception as raised:
            self.raised = raised
            raise
        if info.is_awaitable(result):

            async def kept() -> Any:
                try:
                    self.value = await result
                except Exception as raised:
                    self.raised = raised
                    raise
                return self.value

            return kept()
        self.value = result
        return result


class Differential(FastExecutor):
    """``FastExecutor`` checked against graphql-core on every planned request."""

    def execute_operation(self, serially: bool | None = None) -> Any:
        plan = self.plan()
        if plan is None or self.resolves_below_root():
            return super().execute_operation(serially)
        outcome = RootOutcome()
        middlewares = (
            tuple(self.middleware_manager.middlewares or ()) if self.middleware_manager else ()
        )
        self.middleware_manager = MiddlewareManager(*middlewares, outcome)
        reference = StrawberryGraphQLCoreExecutionContext.execute_operation(self, serially)
        name = self.operation.name.value if self.operation.name else "(anonymous)"

        def compared(general: ExecutionResult) -> ExecutionResult:
            fast = self.completed(plan, outcome.value, outcome.raised)
            COMPARED.append(name)
            if response_bytes(general) != response_bytes(fast):
                MISMATCHES.append((name, response_bytes(general), response_bytes(fast)))
            return fast

        if self.is_awaitable(reference):

            async def awaited() -> ExecutionResult:
                return compared(await reference)

            return awaited()
        return compared(reference)
