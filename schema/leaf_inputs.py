"""Inputs whose fields are all leaves (scalars, enums, lists of them), built from their GraphQL
value in one step.

``leaf_input`` gives such a type a ``from_input`` (Strawberry's hook on an input's
definition, ``StrawberryObjectDefinition``, one of the internals docs/strawberry-internals.md
lists) that looks the field names up once per name converter and passes each value through
as Strawberry would, graphql-core having coerced every leaf already: a list copied, an
omitted field without a default None. A batch's input, whose fields are lists of such types
(``items``), gets one from ``items_input``: each item built by its type's. Why:
docs/decisions/0005-leaf-inputs-built-in-one-step.md.
"""

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from strawberry.relay import GlobalID
from strawberry.schema.name_converter import NameConverter
from strawberry.types.arguments import InputContext
from strawberry.types.base import (
    StrawberryList,
    StrawberryMaybe,
    StrawberryOptional,
    get_object_definition,
    has_object_definition,
)
from strawberry.types.field import StrawberryField
from strawberry.types.lazy_type import LazyType

_T = TypeVar("_T")

Names = list[tuple[str, str, bool]]
"""Each field's GraphQL name, Python name, and whether its value is a list."""

Build = Callable[[type, Mapping[str, Any], InputContext], Any]
"""A ``from_input``: the class to build, its GraphQL value, the conversion's context."""

LEAF_BUILDS: dict[type, Build] = {}
"""The ``from_input`` ``leaf_input`` gave each type: it reads no more of its context than
the name converter, so ``items_input`` hands every item the batch's own context."""


class NotALeafInput(TypeError):
    """``leaf_input`` was given a type with a field that is no leaf (an input object, a lazy
    type, a ``Maybe``, a ``GlobalID``), which Strawberry's own conversion must build."""


def _is_list(field: StrawberryField, owner: str) -> bool:
    """Whether ``field``'s value is a list of leaves; raises ``NotALeafInput`` unless it is a
    leaf or a list of leaves."""
    type_ = field.type
    if isinstance(type_, StrawberryMaybe):
        raise NotALeafInput(f"{owner}.{field.python_name} is a Maybe")
    if isinstance(type_, StrawberryOptional):
        type_ = type_.of_type
    listed = isinstance(type_, StrawberryList)
    if listed:
        assert isinstance(type_, StrawberryList)
        type_ = type_.of_type
        if isinstance(type_, StrawberryOptional):
            type_ = type_.of_type
    if (
        isinstance(type_, (LazyType, StrawberryList, StrawberryMaybe))
        or type_ is GlobalID
        or has_object_definition(type_)
    ):
        raise NotALeafInput(f"{owner}.{field.python_name} is no scalar or enum")
    return listed


def leaf_input(cls: type[_T]) -> type[_T]:
    """Build the Strawberry input ``cls`` from its GraphQL value by name, each leaf as
    graphql-core coerced it. Put above ``strawberry.input``. Raises ``NotALeafInput`` for a
    field that is not a scalar, an enum, or a list of them."""
    definition = get_object_definition(cls, strict=True)
    if not definition.is_input:
        raise NotALeafInput(f"{definition.name} is no input type")
    fields = [(field, _is_list(field, definition.name)) for field in definition.fields]
    missing = dataclasses.MISSING
    implicit = {
        field.python_name: None
        for field, _ in fields
        if field.default_value is missing and field.default_factory is missing
    }
    cached: list[tuple[NameConverter, Names]] = []

    def names(converter: NameConverter) -> Names:
        if not cached or cached[0][0] is not converter:
            table = [(converter.from_field(f), f.python_name, listed) for f, listed in fields]
            cached[:] = [(converter, table)]
        return cached[0][1]

    def build(type_: type, value: Mapping[str, Any], context: InputContext) -> Any:
        kwargs: dict[str, Any] = dict(implicit)
        for graphql_name, python_name, listed in names(context.config.name_converter):
            if graphql_name in value:
                given = value[graphql_name]
                kwargs[python_name] = list(given) if listed and given is not None else given
        return type_(**kwargs)

    definition.from_input = build
    LEAF_BUILDS[cls] = build
    return cls


def items_input(cls: type[_T]) -> type[_T]:
    """Build the Strawberry input ``cls``, each of whose fields is a list of a ``leaf_input``
    type (a batch's ``items``; the list may be nullable, its items not), from its GraphQL
    value in one step: each item by its type's
    ``from_input``, as Strawberry's conversion of the list would call it. Put above
    ``strawberry.input``. Raises ``NotALeafInput`` for a field that is not such a list."""
    definition = get_object_definition(cls, strict=True)
    if not definition.is_input:
        raise NotALeafInput(f"{definition.name} is no input type")
    items: list[tuple[StrawberryField, type, Build]] = []
    for field in definition.fields:
        listed = field.type
        if isinstance(listed, StrawberryOptional):
            listed = listed.of_type
        item = listed.of_type if isinstance(listed, StrawberryList) else None
        if not isinstance(item, type) or item not in LEAF_BUILDS:
            raise NotALeafInput(f"{definition.name}.{field.python_name} is no list of leaf inputs")
        items.append((field, item, LEAF_BUILDS[item]))
    missing = dataclasses.MISSING
    implicit = {
        field.python_name: None
        for field, _, _ in items
        if field.default_value is missing and field.default_factory is missing
    }
    cached: list[tuple[NameConverter, list[tuple[str, str, type, Build]]]] = []

    def names(converter: NameConverter) -> list[tuple[str, str, type, Build]]:
        if not cached or cached[0][0] is not converter:
            table = [(converter.from_field(f), f.python_name, i, b) for f, i, b in items]
            cached[:] = [(converter, table)]
        return cached[0][1]

    def build(type_: type, value: Mapping[str, Any], context: InputContext) -> Any:
        kwargs: dict[str, Any] = dict(implicit)
        for graphql_name, python_name, item, build_item in names(context.config.name_converter):
            if graphql_name in value:
                given = value[graphql_name]
                kwargs[python_name] = (
                    None
                    if given is None
                    else [None if one is None else build_item(item, one, context) for one in given]
                )
        return type_(**kwargs)

    definition.from_input = build
    return cls
