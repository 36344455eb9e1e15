"""The error boundary: every GraphQL error leaves with an ``extensions.code``.

Store errors become ``BAD_USER_INPUT`` naming the field, ``CONFLICT`` for a decision that
lost every compare-and-set retry, or ``SERVICE_UNAVAILABLE`` when the database could not
serve the call (logged with the request id; the client may retry); errors our resolvers
raise keep their code; parse and validation errors get theirs; anything else is masked as
``INTERNAL_SERVER_ERROR`` and logged with the request id.
"""

import logging
from collections.abc import Iterator

from graphql import GraphQLError, GraphQLSyntaxError
from strawberry.extensions import SchemaExtension

from store.errors import CasRetriesExhausted, DatabaseBusy, DatabaseUnavailable, InvalidInput

log = logging.getLogger("connector_store.errors")

BAD_USER_INPUT = "BAD_USER_INPUT"
SERVICE_UNAVAILABLE = "SERVICE_UNAVAILABLE"
CONFLICT = "CONFLICT"
"""A decision lost its compare-and-set on every retry under contention; nothing was written
and the client may send the same request again."""
# graphql-core's validation errors do not say which rule raised them; these message openings
# and parts are those of bad argument and variable values (wrong type, missing, unknown
# field), which are the client's input, not a malformed document.
VALUE_PROBLEMS = (
    "Variable '$",
    "Expected value of type",
    "Int cannot represent",
    "Float cannot represent",
    "String cannot represent",
    "Boolean cannot represent",
    "ID cannot represent",
    "Enum '",
    "Value '",
)
VALUE_PROBLEM_PARTS = (
    "is required, but it was not provided",
    "was not provided.",
    "is not defined by type",
)


def bad_input(field: str, problem: str) -> GraphQLError:
    """A ``BAD_USER_INPUT`` error naming ``field``."""
    return GraphQLError(f"{field}: {problem}", extensions={"code": BAD_USER_INPUT, "field": field})


def not_found(message: str) -> GraphQLError:
    """A ``NOT_FOUND`` error."""
    return GraphQLError(message, extensions={"code": "NOT_FOUND"})


def request_error_code(error: GraphQLError) -> str:
    """The code of an error raised before any resolver ran."""
    if isinstance(error, GraphQLSyntaxError) or error.message.startswith("Syntax Error"):
        return "GRAPHQL_PARSE_FAILED"
    message = error.message
    if message.startswith(VALUE_PROBLEMS) or any(part in message for part in VALUE_PROBLEM_PARTS):
        return BAD_USER_INPUT
    return "GRAPHQL_VALIDATION_FAILED"


class ErrorCodes(SchemaExtension):
    """Gives every error of a result its code and masks the unexpected ones."""

    def on_operation(self) -> Iterator[None]:
        yield
        result = self.execution_context.result
        if result is None or not result.errors:
            return
        result.errors = [self.coded(error) for error in result.errors]

    def coded(self, error: GraphQLError) -> GraphQLError:
        """A copy of ``error`` with its code (cached validation errors are shared, so never
        changed in place), or its masked stand-in."""
        original = error.original_error
        extensions = dict(error.extensions or {})
        if isinstance(original, InvalidInput):
            extensions |= {"code": BAD_USER_INPUT, "field": original.field}
        elif isinstance(original, DatabaseUnavailable):
            return self.unavailable(error, original)
        elif isinstance(original, CasRetriesExhausted):
            extensions |= {"code": CONFLICT, "retryable": True}
        elif "code" in extensions:
            pass
        elif original is None or isinstance(original, GraphQLError):
            extensions["code"] = request_error_code(error)
        elif error.path is None and isinstance(original, ValueError):
            extensions["code"] = BAD_USER_INPUT
        else:
            return self.masked(error)
        return GraphQLError(
            error.message,
            nodes=error.nodes,
            source=error.source,
            positions=error.positions,
            path=error.path,
            original_error=original,
            extensions=extensions,
        )

    def unavailable(self, error: GraphQLError, cause: DatabaseUnavailable) -> GraphQLError:
        """The database could not serve this field: say so with a retryable code and the
        request id; the cause goes to the log, not to the client."""
        request_id = getattr(self.execution_context.context, "request_id", None)
        log.warning("database unavailable in request %s at %s: %s", request_id, error.path, cause)
        busy = isinstance(cause, DatabaseBusy)
        return GraphQLError(
            "the database is busy; retry shortly"
            if busy
            else "the database is unavailable; retry later",
            nodes=error.nodes,
            path=error.path,
            extensions={
                "code": SERVICE_UNAVAILABLE,
                "retryable": True,
                "requestId": request_id,
            },
        )

    def masked(self, error: GraphQLError) -> GraphQLError:
        """A stand-in for an unexpected error: no detail leaves the server, the log has it."""
        request_id = getattr(self.execution_context.context, "request_id", None)
        log.error(
            "unexpected error in request %s at %s",
            request_id,
            error.path,
            exc_info=error.original_error,
        )
        return GraphQLError(
            "Internal server error",
            nodes=error.nodes,
            path=error.path,
            extensions={"code": "INTERNAL_SERVER_ERROR", "requestId": request_id},
        )
