"""The error boundary: every GraphQL error leaves with an ``extensions.code``, decided in one
place from where the error was raised and the type of what raised it.

The steps, in order (``ErrorCodes.coded``):

1. A code given where the error was raised stays: our resolvers' ``NOT_FOUND`` and
   ``FORBIDDEN``, the limits' ``GRAPHQL_VALIDATION_FAILED``, and the codes the validation rules
   and the variable check below attach when they create their errors.
2. Raised while parsing → ``GRAPHQL_PARSE_FAILED``.
3. Raised while validating → ``GRAPHQL_VALIDATION_FAILED`` (a rule that checks argument and
   input values, ``ValuesOfCorrectTypeRule`` and ``ProvidedRequiredArgumentsRule``, tags its
   errors ``BAD_USER_INPUT`` naming the field, by the rule's class: see ``coded_rule``).
4. Raised while coercing variables → ``BAD_USER_INPUT`` naming the variable and the field
   (``check_variables``, run once graphql-core refused a query's or a mutation's
   variables, and before a subscription's execution, whose stream answers with them:
   ``ErrorCodes.on_stream_result``); values past a size any input takes are refused so
   before validation (``VariableBounds``).
5. Raised by Strawberry before validation on the stream path, by the type of the exception
   (``STREAM_REFUSALS``): an unknown ``operationName`` → ``OPERATION_RESOLUTION_FAILURE``; no
   query, or a query or mutation sent as a multipart subscription → ``BAD_REQUEST``.
6. Raised by a resolver, by the type of the exception: the store's ``InvalidInput`` →
   ``BAD_USER_INPUT`` naming the field; ``EventsCollected`` (a page of events after a cursor
   whose following events were collected) → ``EVENTS_COLLECTED`` naming ``after``;
   ``DatabaseUnavailable`` → ``SERVICE_UNAVAILABLE``
   (logged with the request id; retryable); ``CasRetriesExhausted`` → ``CONFLICT``
   (retryable); anything else is masked as ``INTERNAL_SERVER_ERROR`` and logged with the
   request id.

Errors of steps 2-5 are ``RequestError``: the request failed before execution, so the
response has no ``data`` entry (GraphQL over HTTP).
"""

import enum
import functools
import logging
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any

from graphql import (
    ArgumentNode,
    DirectiveNode,
    FieldNode,
    GraphQLError,
    GraphQLInputObjectType,
    GraphQLInputType,
    ListValueNode,
    Node,
    ObjectFieldNode,
    ObjectValueNode,
    OperationDefinitionNode,
    OperationType,
    ProvidedRequiredArgumentsRule,
    Undefined,
    ValidationContext,
    ValuesOfCorrectTypeRule,
    VariableDefinitionNode,
    get_named_type,
    get_nullable_type,
    is_input_object_type,
    is_list_type,
    is_non_null_type,
    is_required_argument,
    is_required_input_field,
)
from graphql.utilities import coerce_input_value, type_from_ast, validate_input_value
from graphql.validation import ASTValidationRule
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
    NOT_FOUND,
    OPERATION_RESOLUTION_FAILURE,
    SERVICE_UNAVAILABLE,
)
from resolvers.strawberry_internals import graphql_schema
from resolvers.taking import TakesLast
from store import validation as check
from store.errors import (
    CasRetriesExhausted,
    DatabaseBusy,
    DatabaseUnavailable,
    EventsCollected,
    InvalidInput,
)
from store.items import MAX_ITEMS

log = logging.getLogger("connector_store.errors")

INPUT_VALUE_RULES: tuple[type[ASTValidationRule], ...] = (
    ValuesOfCorrectTypeRule,
    ProvidedRequiredArgumentsRule,
)
"""Validation rules whose errors are about the client's values, not the document's shape."""


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


class RequestError(GraphQLError):
    """An error that stopped the request before execution (parse, validation, variables,
    operation selection): the response carries no ``data`` entry."""


def bad_input(field: str, problem: str) -> GraphQLError:
    """A ``BAD_USER_INPUT`` error naming ``field``."""
    return GraphQLError(f"{field}: {problem}", extensions={"code": BAD_USER_INPUT, "field": field})


def not_found(message: str) -> GraphQLError:
    """A ``NOT_FOUND`` error."""
    return GraphQLError(message, extensions={"code": NOT_FOUND})


@functools.cache
def coded_rule(rule: type[ASTValidationRule]) -> type[ASTValidationRule]:
    """``rule`` whose errors carry their code from the moment they are created: a value rule's
    are ``BAD_USER_INPUT`` naming the argument or input field they are about (``ValueNamer``),
    as a bad variable's are; every other rule's are ``GRAPHQL_VALIDATION_FAILED``. One class
    per rule, so the validation cache keeps hitting."""
    values = issubclass(rule, INPUT_VALUE_RULES)

    class Coded(rule):  # type: ignore[valid-type,misc]
        def __init__(self, context: Any) -> None:
            super().__init__(context)
            self.namer = ValueNamer(context)

        def enter_argument(self, node: ArgumentNode, *args: Any) -> Any:
            self.namer.enter_argument(node)
            parent = getattr(super(), "enter_argument", None)
            return parent(node, *args) if parent else None

        def leave_argument(self, node: ArgumentNode, *args: Any) -> Any:
            self.namer.leave_argument()
            parent = getattr(super(), "leave_argument", None)
            return parent(node, *args) if parent else None

        def report_error(self, error: GraphQLError) -> None:
            extensions = dict(error.extensions or {})
            if values:
                extensions["code"] = BAD_USER_INPUT
                field = self.namer.field(error.nodes[0] if error.nodes else None)
                if field is not None:
                    extensions["field"] = field
                    error = GraphQLError(
                        f"{field}: {error.message}", nodes=error.nodes, extensions=extensions
                    )
            else:
                extensions["code"] = GRAPHQL_VALIDATION_FAILED
            super().report_error(request_error(error, extensions))

    Coded.__name__ = Coded.__qualname__ = f"Coded{rule.__name__}"
    return Coded


class ValueNamer:
    """Names the argument or input field a value rule's error is about, from the error's node
    and the schema's types where the validation stands, never from the error's message:

    - a node that is an argument or an input field: its name (an unknown field);
    - a field or directive: the next of its required arguments that is not given (the rule
      reports them one error each, in the order they are defined);
    - an input object: the next of its type's required fields that is not given, likewise;
      when none is missing, the field (or argument) that holds the object;
    - any other value: the innermost input field (or else the argument) around it."""

    def __init__(self, context: ValidationContext) -> None:
        self.context = context
        self.arguments: list[tuple[ArgumentNode, GraphQLInputType | None]] = []
        self.missing: dict[int, list[str]] = {}

    def enter_argument(self, node: ArgumentNode) -> None:
        argument = self.context.get_argument()
        self.arguments.append((node, argument.type if argument is not None else None))

    def leave_argument(self) -> None:
        self.arguments.pop()

    def field(self, node: Node | None) -> str | None:
        if isinstance(node, ObjectFieldNode | ArgumentNode):
            return node.name.value
        if isinstance(node, FieldNode | DirectiveNode):
            return self.next_missing(node, self.required_arguments(node))
        if not self.arguments:
            return None
        argument, type_ = self.arguments[-1]
        found = locate(argument.value, type_, node, [argument.name.value])
        if found is None:
            return argument.name.value
        path, value_type = found
        name = field_at(path, argument.name.value)
        named = get_named_type(value_type) if value_type is not None else None
        if isinstance(node, ObjectValueNode) and is_input_object_type(named):
            given = {field.name.value for field in node.fields}
            required = [
                field_name
                for field_name, field in named.fields.items()
                if field_name not in given and is_required_input_field(field)
            ]
            missing = self.next_missing(node, required)
            return name if missing is None else field_at([*path, missing], name)
        return name

    def required_arguments(self, node: FieldNode | DirectiveNode) -> list[str]:
        """The required arguments of the field or directive ``node`` that it does not give."""
        definition = (
            self.context.get_field_def()
            if isinstance(node, FieldNode)
            else self.context.get_directive()
        )
        if definition is None:
            return []
        given = {argument.name.value for argument in node.arguments or ()}
        return [
            name
            for name, argument in definition.args.items()
            if name not in given and is_required_argument(argument)
        ]

    def next_missing(self, node: Node, missing: list[str]) -> str | None:
        """The first of ``missing`` not yet named for ``node``."""
        left = self.missing.setdefault(id(node), missing)
        return left.pop(0) if left else None


def locate(
    node: Any, type_: GraphQLInputType | None, target: Node | None, path: list[str | int]
) -> tuple[list[str | int], GraphQLInputType | None] | None:
    """The path (``path`` at the top: input field names and list indexes) to ``target`` in
    the value ``node`` of type ``type_``, and the type of ``target``; None when it is not
    there. ``field_at`` names the field it is at."""
    if node is target:
        return path, type_
    nullable = get_nullable_type(type_) if type_ is not None else None
    if isinstance(node, ObjectValueNode):
        fields = nullable.fields if is_input_object_type(nullable) else {}
        for field in node.fields:
            definition = fields.get(field.name.value)
            found = locate(
                field.value,
                definition.type if definition is not None else None,
                target,
                [*path, field.name.value],
            )
            if found is not None:
                return found
    elif isinstance(node, ListValueNode):
        item = nullable.of_type if is_list_type(nullable) else None
        for index, value in enumerate(node.values):
            found = locate(value, item, target, [*path, index])
            if found is not None:
                return found
    return None


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
    the value is not an object). Values past a size any input takes never reach it: they
    were refused before validation (``VariableBounds``)."""
    inputs = inputs or {}
    errors: list[GraphQLError] = []
    for name, definition, type_, value in variables_of(schema, operation, inputs):
        if value is Undefined:
            if is_non_null_type(type_) and definition.default_value is None:
                errors.append(
                    variable_error(name, name, f"a value of type '{type_}' was not provided")
                )
            continue
        if coerce_input_value(value, type_) is not Undefined:
            continue

        report = functools.partial(report_variable, errors, name, ObjectFieldNamer(value, type_))
        try:
            validate_input_value(value, type_, report)
        except _EnoughErrors:
            break
    return errors


def oversized_variables(
    schema: Any, operation: OperationDefinitionNode, inputs: dict[str, Any] | None
) -> list[GraphQLError]:
    """``check_variables``' errors about values past a size any input takes
    (``first_oversized``), one per variable, without coercing anything."""
    errors: list[GraphQLError] = []
    for name, _, type_, value in variables_of(schema, operation, inputs or {}):
        too_long = None if value is Undefined else first_oversized(value, type_)
        if too_long is not None:
            path, problem = too_long
            errors.append(variable_error(name, field_at(path, name), problem))
    return errors


class VariableBounds(SchemaExtension):
    """Refuses variables past a size any input takes (``oversized_variables``) before
    validation, as the query limits refuse a document: their errors are the request's
    (``BAD_USER_INPUT`` naming the variable and the field, no ``data``), on every path, a
    subscription's too, and nothing is coerced. Last in the pipeline, so the document
    cache's validation has run: a document it found invalid is answered with that."""

    def on_validate(self) -> Iterator[None]:
        context = self.execution_context
        operation = operation_of(context)
        if not context.pre_execution_errors and operation is not None:
            schema = graphql_schema(context.schema)
            refused = oversized_variables(schema, operation, context.variables)
            if refused:
                context.pre_execution_errors = refused
        yield


def variables_of(
    schema: Any, operation: OperationDefinitionNode, inputs: dict[str, Any]
) -> Iterator[tuple[str, VariableDefinitionNode, GraphQLInputType, Any]]:
    """Each variable ``operation`` declares: its name, definition, type and value in
    ``inputs`` (``Undefined`` when absent); a type the schema lacks is left to validation."""
    for definition in operation.variable_definitions or ():
        type_ = type_input(type_from_ast(schema, definition.type))
        if type_ is not None:
            name = definition.variable.name.value
            yield name, definition, type_, inputs.get(name, Undefined)


def refused_before_execution(result: Any) -> bool:
    """Whether ``result`` is graphql-core's refusal of a request before any field ran (its
    variables): no data, and errors without a path, which every field's error has."""
    errors = getattr(result, "errors", None) or ()
    return bool(errors) and result.data is None and all(e.path is None for e in errors)


def first_oversized(
    value: Any, type_: GraphQLInputType, path: tuple[str | int, ...] = ()
) -> tuple[list[str | int], str] | None:
    """The path of the first part of ``value`` (of type ``type_``) past a size any input of
    its type takes, and the problem, or None. Checked before coercion, which costs time in
    every item and field: 100,000 keys took seconds before the store refused them, and an
    object of 300,000 unknown fields six. Every list of input objects the schema takes is a
    batch's items or keys, at most ``store.items.MAX_ITEMS``; no list of scalars takes more
    than ``store.validation.MAX_LIST_ITEMS`` (the store checks each list's own bound after);
    an object holding more than ``MAX_VARIABLE_ERRORS`` fields its type lacks is refused by
    the first of them."""
    nullable = get_nullable_type(type_)
    if is_list_type(nullable):
        if not isinstance(value, list):
            return None
        item_type = nullable.of_type
        objects = is_input_object_type(get_named_type(item_type))
        if objects:
            try:
                check.item_count("", value, most=MAX_ITEMS)
            except InvalidInput as error:
                return list(path), error.problem
        if len(value) > check.MAX_LIST_ITEMS:
            return list(path), (
                f"holds {len(value)} items, more than any list input takes ({check.MAX_LIST_ITEMS})"
            )
        if objects or is_list_type(get_nullable_type(item_type)):
            for index, item in enumerate(value):
                found = first_oversized(item, item_type, (*path, index))
                if found is not None:
                    return found
        return None
    if is_input_object_type(nullable) and isinstance(value, dict):
        if len(value) > len(nullable.fields) + MAX_VARIABLE_ERRORS:
            unknown = next(name for name in value if name not in nullable.fields)
            return [*path, unknown], (
                f"is not a field of {nullable.name}: the object holds {len(value)} fields, "
                f"{nullable.name} has {len(nullable.fields)}"
            )
        for field_name, field_type in nested_fields(nullable):
            if field_name in value:
                found = first_oversized(value[field_name], field_type, (*path, field_name))
                if found is not None:
                    return found
    return None


@functools.cache
def nested_fields(type_: GraphQLInputObjectType) -> tuple[tuple[str, GraphQLInputType], ...]:
    """The fields of the input object type ``type_`` that take a list or an input object."""
    return tuple(
        (name, field.type)
        for name, field in type_.fields.items()
        if is_list_type(get_nullable_type(field.type))
        or is_input_object_type(get_named_type(field.type))
    )


def report_variable(
    errors: list[GraphQLError],
    name: str,
    named: "ObjectFieldNamer",
    error: GraphQLError,
    path: list[str | int],
) -> None:
    """Add to ``errors`` the error about variable ``name`` at ``path``, naming its field.
    Raises ``_EnoughErrors`` once ``errors`` holds ``MAX_VARIABLE_ERRORS``."""
    errors.append(variable_error(name, field_at(named.at(path), name), error.message))
    if len(errors) >= MAX_VARIABLE_ERRORS:
        raise _EnoughErrors


MAX_VARIABLE_ERRORS = 50
"""The most errors a request's variables are answered with (graphql-core's own bound on
coercion errors): a large list of bad items is refused by its first ones, not with an error
per field of each."""


class _EnoughErrors(Exception):
    """Raised by ``report_variable`` to end the check once ``MAX_VARIABLE_ERRORS`` are in."""


class ObjectFieldNamer:
    """Names the input field an error about a variable's input object is about (a required
    field missing, a field the type lacks): graphql-core reports both at the object's path,
    one error each, the missing ones in the type's order and then the unknown ones in the
    value's; so the ``n``-th error at one object's path is about its ``n``-th such field."""

    def __init__(self, value: Any, type_: GraphQLInputType) -> None:
        self.value = value
        self.type_ = type_
        self.left: dict[tuple[str | int, ...], list[str]] = {}

    def at(self, path: list[str | int]) -> list[str | int]:
        """``path`` with the field the next error there is about, when it names an object."""
        value, type_ = self.value, get_nullable_type(self.type_)
        for part in path:
            if isinstance(part, int) and is_list_type(type_) and isinstance(value, list):
                value, type_ = value[part], get_nullable_type(type_.of_type)
            elif isinstance(part, str) and is_input_object_type(type_) and part in type_.fields:
                value, type_ = value.get(part), get_nullable_type(type_.fields[part].type)
            else:
                return path
        if not (isinstance(value, dict) and is_input_object_type(type_)):
            return path
        missing = [
            field_name
            for field_name, field in type_.fields.items()
            if field_name not in value and is_required_input_field(field)
        ]
        unknown = [field_name for field_name in value if field_name not in type_.fields]
        left = self.left.setdefault(tuple(path), missing + unknown)
        return [*path, left.pop(0)] if left else path


def field_at(path: list[str | int], variable: str) -> str:
    """The field a variable's bad value is at: the innermost input field of ``path`` (the
    variable itself when there is none), with the index of its item when it is a list of
    values (``accountKeys[2]``), after the list item that holds it when there is one
    (``items[3].leaseToken``)."""
    named = [at for at, part in enumerate(path) if isinstance(part, str)]
    if not named:
        return "".join([variable, *(f"[{index}]" for index in path)])
    last = named[-1]
    name = "".join([str(path[last]), *(f"[{index}]" for index in path[last + 1 :])])
    items = [at for at in range(last) if isinstance(path[at], int)]
    if not items:
        return name
    # An item at the path's start is one of the variable's own list.
    holder = path[items[-1] - 1] if items[-1] > 0 else variable
    return f"{holder}[{path[items[-1]]}].{name}"


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
        """A copy of ``error`` with its code (cached validation errors are shared, so never
        changed in place), or its masked stand-in. The steps in the module's order."""
        phase = self.phases.get(id(error), Phase.EXECUTION)
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
            extensions={"code": INTERNAL_SERVER_ERROR, "requestId": request_id},
        )


STREAM_REFUSALS = (CannotGetOperationTypeError, InvalidOperationTypeError, MissingQueryError)
"""What Strawberry's stream path (graphql-transport-ws, multipart subscriptions) turns into an
error before validation, with the exception as its ``original_error``; its execute path raises
them to the HTTP view instead (``server.app.GraphQLApp``), which refuses an unknown
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


class CodedValidation(SchemaExtension):
    """Adds the API's own rule (``resolvers.taking.TakesLast``) to the validation rules and
    swaps each for its ``coded_rule``, so every validation error is born with its code (its
    place in the pipeline: ``server.pipeline``)."""

    def on_validate(self) -> Iterator[None]:
        context = self.execution_context
        rules = (*context.validation_rules, TakesLast)
        context.validation_rules = tuple(coded_rule(rule) for rule in rules)
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
