"""``ErrorCodes``: the step of the pipeline that gives every error its code (the steps:
``server.errors``)."""

import enum
import logging
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any

from graphql import GraphQLError, OperationDefinitionNode, OperationType
from strawberry.exceptions import MissingQueryError
from strawberry.extensions import SchemaExtension
from strawberry.schema.exceptions import CannotGetOperationTypeError, InvalidOperationTypeError
from strawberry.types.execution import ExecutionResult, PreExecutionError

from resolvers.codes import (
    BAD_REQUEST,
    BAD_USER_INPUT,
    CONFLICT,
    EVENTS_COLLECTED,
    GRAPHQL_PARSE_FAILED,
    GRAPHQL_VALIDATION_FAILED,
    INTERNAL_SERVER_ERROR,
    OPERATION_RESOLUTION_FAILURE,
    SERVICE_UNAVAILABLE,
)
from resolvers.errors import RequestError, request_error
from server.errors.variables import check_variables, operation_of, refused_before_execution
from server.strawberry_internals import graphql_schema
from store.errors import (
    CasRetriesExhausted,
    DatabaseBusy,
    DatabaseUnavailable,
    EventsCollected,
    InvalidInput,
)

log = logging.getLogger("connector_store.errors")

requested_operation_name: ContextVar[str | None] = ContextVar(
    "requested_operation_name", default=None
)
"""The ``operationName`` the client sent, set for the request by the schema's ``execute``:
Strawberry's public ``ExecutionContext.operation_name`` falls back to the first operation's
name, and the several-operations rule is about the name the client gave."""


class Phase(enum.Enum):
    """Where in a request an error was raised."""

    PARSE = "parse"
    VALIDATION = "validation"
    VARIABLES = "variables"
    EXECUTION = "execution"


def several_operations_unnamed(operation_name: str | None, document: Any) -> RequestError | None:
    """The error for a document with several operations and no ``operationName``: running
    the first one (a mutation, perhaps) is not what the client asked for."""
    if operation_name is not None or document is None:
        return None
    operations = [d for d in document.definitions if isinstance(d, OperationDefinitionNode)]
    if len(operations) < 2:
        return None
    return RequestError(
        "Must provide operationName if the document contains several operations.",
        extensions={"code": OPERATION_RESOLUTION_FAILURE},
    )


class ErrorCodes(SchemaExtension):
    """Gives every error of a result its code (the pipeline above) and masks the unexpected
    ones. It notes where each error was raised: parsing, validation, the variable check or
    execution."""

    def __init__(self, *, execution_context: Any = None) -> None:
        super().__init__(execution_context=execution_context)
        self.phases: dict[int, Phase] = {}
        self.refused_variables: list[GraphQLError] = []

    def note(self, phase: Phase) -> None:
        for error in self.execution_context.pre_execution_errors or ():
            self.phases.setdefault(id(error), phase)

    def on_parse(self) -> Iterator[None]:
        yield
        self.note(Phase.PARSE)

    def on_validate(self) -> Iterator[None]:
        context = self.execution_context
        refused = several_operations_unnamed(
            requested_operation_name.get(), context.graphql_document
        )
        if refused is not None:
            context.pre_execution_errors = [refused]
        yield
        self.note(Phase.VALIDATION)

    def on_execute(self) -> Iterator[None]:
        """Refuse a request's variables with errors that name the field
        (``check_variables``). graphql-core coerces them as execution starts; a query's or a
        mutation's are checked only once graphql-core refused them, so valid variables are
        coerced once. A subscription's are checked before: its stream answers with them
        (``on_stream_result``). Values past a size any input takes were refused before
        validation (``VariableBounds``)."""
        context = self.execution_context
        operation = operation_of(context)
        if operation is None or context.result is not None:
            yield
            return
        schema = graphql_schema(context.schema)
        if operation.operation is OperationType.SUBSCRIPTION:
            refused = check_variables(schema, operation, context.variables)
            if refused:
                self.refuse_variables(refused)
                context.result = ExecutionResult(data=None, errors=refused)
            yield
            return
        yield
        result = context.result
        if result is None or not refused_before_execution(result):
            return
        refused = check_variables(schema, operation, context.variables)
        if refused:
            self.refuse_variables(refused)
            result.errors = refused

    def refuse_variables(self, errors: list[GraphQLError]) -> None:
        for error in errors:
            self.phases[id(error)] = Phase.VARIABLES
        self.refused_variables = errors

    def on_operation(self) -> Iterator[None]:
        yield
        result = self.execution_context.result
        if result is None or not result.errors:
            return
        result.errors = [self.coded(error) for error in result.errors]

    def on_stream_result(self, result: Any) -> Iterator[None]:
        """Each result of a stream (a subscription's), coded before it is sent.

        Strawberry's subscribe path does not skip execution when ``on_execute`` has set the
        result, as its execute path does: graphql-core's ``subscribe`` coerces the variables
        the check refused once more, and its stream is then only its own refusal of them, a
        ``PreExecutionError`` whose errors carry no phase. That result answers with the
        check's errors instead (``BAD_USER_INPUT`` naming the variable and the field), as a
        query's would."""
        if self.refused_variables and isinstance(result, PreExecutionError):
            result.errors = list(self.refused_variables)
        errors = getattr(result, "errors", None)
        if errors:
            result.errors = [self.coded(error) for error in errors]
        yield

    def coded(self, error: GraphQLError) -> GraphQLError:
        """``coded`` of ``error``, raised in the phase this step noted for it."""
        return coded(
            error,
            self.phases.get(id(error), Phase.EXECUTION),
            getattr(self.execution_context.context, "request_id", None),
        )


def coded(error: GraphQLError, phase: Phase, request_id: str | None) -> GraphQLError:
    """A copy of ``error``, raised in ``phase``, with its code (cached validation errors are
    shared, so never changed in place), or its masked stand-in (logged with ``request_id``).
    The steps in the module's order. Every path that answers a GraphQL result codes its
    errors here (``ErrorCodes``, ``server.lean_lane``)."""
    original = error.original_error
    extensions = dict(error.extensions or {})
    request = phase is not Phase.EXECUTION or isinstance(error, RequestError)
    if "code" in extensions:
        pass
    elif phase is Phase.PARSE:
        extensions["code"] = GRAPHQL_PARSE_FAILED
    elif phase is Phase.VALIDATION:
        extensions["code"] = GRAPHQL_VALIDATION_FAILED
    elif phase is Phase.VARIABLES:
        extensions["code"] = BAD_USER_INPUT
    elif isinstance(original, STREAM_REFUSALS):
        return stream_refusal(error, original)
    elif isinstance(original, InvalidInput):
        extensions |= {"code": BAD_USER_INPUT, "field": original.field}
    elif isinstance(original, EventsCollected):
        extensions |= {"code": EVENTS_COLLECTED, "field": "after"}
    elif isinstance(original, DatabaseUnavailable):
        return unavailable(error, original, request_id)
    elif isinstance(original, CasRetriesExhausted):
        extensions |= {"code": CONFLICT, "retryable": True}
    else:
        return masked(error, request_id)
    if request:
        return request_error(error, extensions)
    return GraphQLError(
        error.message,
        nodes=error.nodes,
        source=error.source,
        positions=error.positions,
        path=error.path,
        original_error=original,
        extensions=extensions,
    )


def unavailable(
    error: GraphQLError, cause: DatabaseUnavailable, request_id: str | None
) -> GraphQLError:
    """The database could not serve this field: say so with a retryable code and the
    request id; the cause goes to the log, not to the client."""
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


def masked(error: GraphQLError, request_id: str | None) -> GraphQLError:
    """A stand-in for an unexpected error: no detail leaves the server, the log has it."""
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
        extensions={"code": INTERNAL_SERVER_ERROR, "requestId": request_id},
    )


STREAM_REFUSALS = (CannotGetOperationTypeError, InvalidOperationTypeError, MissingQueryError)
"""What Strawberry's stream path (graphql-transport-ws, multipart subscriptions) turns into an
error before validation, with the exception as its ``original_error``; its execute path raises
them to the HTTP view instead (``server.graphql_view.GraphQLApp``), which refuses an unknown
``operationName`` and a missing query with the codes ``stream_refusal`` gives."""

ONLY_SUBSCRIPTIONS_STREAM = (
    'only subscriptions are served with Accept: multipart/mixed;subscriptionSpec="1.0": '
    "send a query or a mutation without it"
)
"""The message for a query or a mutation sent as a multipart subscription: Strawberry's
multipart transport takes subscriptions only (graphql-transport-ws takes every operation)."""


def stream_refusal(error: GraphQLError, cause: Exception) -> RequestError:
    """The request error for one of ``STREAM_REFUSALS``, by the type of ``cause``: an
    ``operationName`` the document lacks is ``OPERATION_RESOLUTION_FAILURE``; no query, or a
    query or mutation sent as a multipart subscription (the one transport that takes only
    subscriptions), ``BAD_REQUEST``."""
    if isinstance(cause, CannotGetOperationTypeError):
        return RequestError(error.message, extensions={"code": OPERATION_RESOLUTION_FAILURE})
    message = ONLY_SUBSCRIPTIONS_STREAM if isinstance(cause, InvalidOperationTypeError) else None
    return RequestError(message or error.message, extensions={"code": BAD_REQUEST})
