"""The validation rules, coded: each error is born with its code (``coded_rule``)."""

import functools
from typing import Any

from graphql import (
    ArgumentNode,
    DirectiveNode,
    FieldNode,
    GraphQLError,
    GraphQLInputType,
    ListValueNode,
    Node,
    ObjectFieldNode,
    ObjectValueNode,
    ProvidedRequiredArgumentsRule,
    ValidationContext,
    ValuesOfCorrectTypeRule,
    get_named_type,
    get_nullable_type,
    is_input_object_type,
    is_list_type,
    is_required_argument,
    is_required_input_field,
)
from graphql.validation import ASTValidationRule

from resolvers.codes import BAD_USER_INPUT, GRAPHQL_VALIDATION_FAILED
from resolvers.errors import request_error
from server.errors.variables import field_at

INPUT_VALUE_RULES: tuple[type[ASTValidationRule], ...] = (
    ValuesOfCorrectTypeRule,
    ProvidedRequiredArgumentsRule,
)
"""Validation rules whose errors are about the client's values, not the document's shape."""


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
