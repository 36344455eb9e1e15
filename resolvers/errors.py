"""The error boundary: every GraphQL error leaves with an ``extensions.code``, decided in one
pipeline from where the error was raised and the type of what raised it.

The pipeline's order (``ErrorCodes.coded``):

1. A code given where the error was raised stays: our resolvers' ``NOT_FOUND`` and
   ``FORBIDDEN``, the limits' ``GRAPHQL_VALIDATION_FAILED``, and the codes the validation rules
   and the variable check below attach when they create their errors.
2. Raised while parsing → ``GRAPHQL_PARSE_FAILED``.
3. Raised while validating → ``GRAPHQL_VALIDATION_FAILED`` (a rule that checks argument and
   input values, ``ValuesOfCorrectTypeRule`` and ``ProvidedRequiredArgumentsRule``, tags its
   errors ``BAD_USER_INPUT`` naming the field, by the rule's class: see ``coded_rule``).
4. Raised while coercing variables → ``BAD_USER_INPUT`` naming the variable and the field
   (``check_variables``, run before execution).
5. Raised by a resolver, by the type of the exception: the store's ``InvalidInput`` →
   ``BAD_USER_INPUT`` naming the field; ``DatabaseUnavailable`` → ``SERVICE_UNAVAILABLE``
   (logged with the request id; retryable); ``CasRetriesExhausted`` → ``CONFLICT``
   (retryable); anything else is masked as ``INTERNAL_SERVER_ERROR`` and logged with the
   request id.

Errors of steps 2-4 are ``RequestError``: the request failed before execution, so the
response has no ``data`` entry (GraphQL over HTTP).
"""

import enum
import functools
import logging
from collections.abc import Iterator
from typing import Any

from graphql import (
    ArgumentNode,
    GraphQLError,
    GraphQLInputType,
    ListValueNode,
    ObjectFieldNode,
    ObjectValueNode,
    OperationDefinitionNode,
    ProvidedRequiredArgumentsRule,
    Undefined,
    ValuesOfCorrectTypeRule,
    is_non_null_type,
)
from graphql.utilities import coerce_input_value, type_from_ast, validate_input_value
from graphql.validation import ASTValidationRule
from strawberry.extensions import SchemaExtension
from strawberry.types.execution import ExecutionResult

from store.errors import CasRetriesExhausted, DatabaseBusy, DatabaseUnavailable, InvalidInput

log = logging.getLogger("connector_store.errors")

BAD_USER_INPUT = "BAD_USER_INPUT"
SERVICE_UNAVAILABLE = "SERVICE_UNAVAILABLE"
CONFLICT = "CONFLICT"
"""A decision lost its compare-and-set on every retry under contention; nothing was written
and the client may send the same request again."""
PARSE_FAILED = "GRAPHQL_PARSE_FAILED"
VALIDATION_FAILED = "GRAPHQL_VALIDATION_FAILED"
OPERATION_RESOLUTION_FAILURE = "OPERATION_RESOLUTION_FAILURE"
INPUT_VALUE_RULES: tuple[type[ASTValidationRule], ...] = (
    ValuesOfCorrectTypeRule,
    ProvidedRequiredArgumentsRule,
)
"""Validation rules whose errors are about the client's values, not the document's shape."""


class Phase(enum.Enum):
    """Where in a request an error was raised."""

    PARSE = "parse"
    VALIDATION = "validation"
    VARIABLES = "variables"
    EXECUTION = "execution"


class RequestError(GraphQLError):
    """An error that stopped the request before execution (parse, validation, variables,
    operation selection): the response carries no ``data`` entry."""


def bad_input(field: str, problem: str) -> GraphQLError:
    """A ``BAD_USER_INPUT`` error naming ``field``."""
    return GraphQLError(f"{field}: {problem}", extensions={"code": BAD_USER_INPUT, "field": field})


def not_found(message: str) -> GraphQLError:
    """A ``NOT_FOUND`` error."""
    return GraphQLError(message, extensions={"code": "NOT_FOUND"})


@functools.cache
def coded_rule(rule: type[ASTValidationRule]) -> type[ASTValidationRule]:
    """``rule`` whose errors carry their code from the moment they are created: a value rule's
    are ``BAD_USER_INPUT`` naming the innermost argument or input field they are about (as a
    bad variable's are); every other rule's are ``GRAPHQL_VALIDATION_FAILED``. One class per
    rule, so the validation cache keeps hitting."""
    values = issubclass(rule, INPUT_VALUE_RULES)

    class Coded(rule):  # type: ignore[valid-type,misc]
        def __init__(self, context: Any) -> None:
            super().__init__(context)
            self.arguments: list[ArgumentNode] = []

        def enter_argument(self, node: ArgumentNode, *args: Any) -> Any:
            self.arguments.append(node)
            parent = getattr(super(), "enter_argument", None)
            return parent(node, *args) if parent else None

        def leave_argument(self, node: ArgumentNode, *args: Any) -> Any:
            self.arguments.pop()
            parent = getattr(super(), "leave_argument", None)
            return parent(node, *args) if parent else None

        def report_error(self, error: GraphQLError) -> None:
            extensions = dict(error.extensions or {})
            if values:
                extensions["code"] = BAD_USER_INPUT
                field = required_field(error) or innermost_field(self.arguments, error)
                if field is not None:
                    extensions["field"] = field
                    error = GraphQLError(
                        f"{field}: {error.message}", nodes=error.nodes, extensions=extensions
                    )
            else:
                extensions["code"] = VALIDATION_FAILED
            super().report_error(request_error(error, extensions))

    Coded.__name__ = Coded.__qualname__ = f"Coded{rule.__name__}"
    return Coded


def required_field(error: GraphQLError) -> str | None:
    """The name of a missing required argument or input field, from the error's node."""
    node = error.nodes[0] if error.nodes else None
    if isinstance(node, ObjectFieldNode | ArgumentNode):
        return node.name.value
    message = error.message
    for opening in ("Field '", "Argument '"):
        if message.startswith(opening):
            name = message[len(opening) :].split("'", 1)[0]
            return name.rsplit(".", 1)[-1].split("(", 1)[0]
    return None


def innermost_field(arguments: list[ArgumentNode], error: GraphQLError) -> str | None:
    """The name of the innermost input field (or else the argument) around the error's
    node, found by walking the argument's value."""
    if not arguments:
        return None
    argument = arguments[-1]
    target = error.nodes[0] if error.nodes else None

    def walk(node: Any, name: str) -> str | None:
        if node is target:
            return name
        if isinstance(node, ObjectValueNode):
            for field in node.fields:
                found = walk(field.value, field.name.value)
                if found is not None:
                    return found
        elif isinstance(node, ListValueNode):
            for item in node.values:
                found = walk(item, name)
                if found is not None:
                    return found
        return None

    return walk(argument.value, argument.name.value) or argument.name.value


def request_error(error: GraphQLError, extensions: dict[str, Any]) -> RequestError:
    """``error`` as a ``RequestError`` with ``extensions``."""
    return RequestError(
        error.message,
        nodes=error.nodes,
        source=error.source,
        positions=error.positions,
        path=error.path,
        original_error=error.original_error,
        extensions=extensions,
    )


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


def check_variables(
    schema: Any, operation: OperationDefinitionNode, inputs: dict[str, Any] | None
) -> list[GraphQLError]:
    """The variables of ``operation`` checked against their declared types, each problem a
    ``BAD_USER_INPUT`` naming the variable and the innermost field (the variable itself when
    the value is not an object)."""
    inputs = inputs or {}
    errors: list[GraphQLError] = []
    for definition in operation.variable_definitions or ():
        name = definition.variable.name.value
        type_ = type_input(type_from_ast(schema, definition.type))
        if type_ is None:  # validation reports unknown types
            continue
        value = inputs.get(name, Undefined)
        if value is Undefined:
            if is_non_null_type(type_) and definition.default_value is None:
                errors.append(
                    variable_error(name, name, f"a value of type '{type_}' was not provided")
                )
            continue
        if coerce_input_value(value, type_) is not Undefined:
            continue

        def report(error: GraphQLError, path: list[str | int], name: str = name) -> None:
            fields = [part for part in path if isinstance(part, str)]
            errors.append(variable_error(name, fields[-1] if fields else name, error.message))

        validate_input_value(value, type_, report)
    return errors


def type_input(type_: Any) -> GraphQLInputType | None:
    """A variable's type (variables only take input types; validation checks it)."""
    return type_  # type: ignore[no-any-return]


def variable_error(variable: str, field: str, problem: str) -> RequestError:
    return RequestError(
        f"{field}: {problem} (variable '${variable}')",
        extensions={"code": BAD_USER_INPUT, "field": field, "variable": variable},
    )


class ErrorCodes(SchemaExtension):
    """Gives every error of a result its code (the pipeline above) and masks the unexpected
    ones. It notes where each error was raised: parsing, validation, the variable check or
    execution."""

    def __init__(self, *, execution_context: Any = None) -> None:
        super().__init__(execution_context=execution_context)
        self.phases: dict[int, Phase] = {}

    def note(self, phase: Phase) -> None:
        for error in self.execution_context.pre_execution_errors or ():
            self.phases.setdefault(id(error), phase)

    def on_parse(self) -> Iterator[None]:
        yield
        self.note(Phase.PARSE)

    def on_validate(self) -> Iterator[None]:
        context = self.execution_context
        # Strawberry's ``operation_name`` falls back to the first operation's; the rule is
        # about the name the client gave.
        given = getattr(context, "_provided_operation_name", context.operation_name)
        refused = several_operations_unnamed(given, context.graphql_document)
        if refused is not None:
            context.pre_execution_errors = [refused]
        yield
        self.note(Phase.VALIDATION)

    def on_execute(self) -> Iterator[None]:
        context = self.execution_context
        operation = operation_of(context)
        if operation is not None and context.result is None:
            errors = check_variables(context.schema._schema, operation, context.variables)
            if errors:
                for error in errors:
                    self.phases[id(error)] = Phase.VARIABLES
                context.result = ExecutionResult(data=None, errors=errors)
        yield

    def on_operation(self) -> Iterator[None]:
        yield
        result = self.execution_context.result
        if result is None or not result.errors:
            return
        result.errors = [self.coded(error) for error in result.errors]

    def coded(self, error: GraphQLError) -> GraphQLError:
        """A copy of ``error`` with its code (cached validation errors are shared, so never
        changed in place), or its masked stand-in. The steps in the module's order."""
        phase = self.phases.get(id(error), Phase.EXECUTION)
        original = error.original_error
        extensions = dict(error.extensions or {})
        request = phase is not Phase.EXECUTION or isinstance(error, RequestError)
        if "code" in extensions:
            pass
        elif phase is Phase.PARSE:
            extensions["code"] = PARSE_FAILED
        elif phase is Phase.VALIDATION:
            extensions["code"] = VALIDATION_FAILED
        elif phase is Phase.VARIABLES:
            extensions["code"] = BAD_USER_INPUT
        elif isinstance(original, InvalidInput):
            extensions |= {"code": BAD_USER_INPUT, "field": original.field}
        elif isinstance(original, DatabaseUnavailable):
            return self.unavailable(error, original)
        elif isinstance(original, CasRetriesExhausted):
            extensions |= {"code": CONFLICT, "retryable": True}
        else:
            return self.masked(error)
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


class CodedValidation(SchemaExtension):
    """Swaps each validation rule for its ``coded_rule``, so every validation error is born
    with its code. List it after the extensions that add rules, before ``DocumentCache``."""

    def on_validate(self) -> Iterator[None]:
        context = self.execution_context
        rules = context.validation_rules
        context.validation_rules = tuple(coded_rule(rule) for rule in rules)  # type: ignore[arg-type]
        yield


def operation_of(context: Any) -> OperationDefinitionNode | None:
    """The operation the request runs, or None when the document does not name one."""
    document = context.graphql_document
    if document is None:
        return None
    operations = [d for d in document.definitions if isinstance(d, OperationDefinitionNode)]
    if context.operation_name is None:
        return operations[0] if len(operations) == 1 else None
    for operation in operations:
        if operation.name is not None and operation.name.value == context.operation_name:
            return operation
    return None
