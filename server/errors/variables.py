"""A request's variables checked against their declared types, each problem a
``BAD_USER_INPUT`` naming the variable and the innermost field."""

import functools
from collections.abc import Iterator
from typing import Any

from graphql import (
    GraphQLError,
    GraphQLInputObjectType,
    GraphQLInputType,
    OperationDefinitionNode,
    Undefined,
    VariableDefinitionNode,
    get_named_type,
    get_nullable_type,
    is_input_object_type,
    is_list_type,
    is_non_null_type,
    is_required_input_field,
)
from graphql.utilities import coerce_input_value, type_from_ast, validate_input_value

from resolvers.codes import BAD_USER_INPUT
from resolvers.errors import RequestError
from store import validation as check
from store.errors import InvalidInput
from store.items import MAX_ITEMS


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
