"""The schema explains itself: every type, field, argument, input field and enum value of the
API has a description (federation's own ``_``-prefixed machinery and the built-ins aside),
and ``EpochMillis`` says by ``@specifiedBy`` where it is defined."""

import re

from graphql import (
    GraphQLEnumType,
    GraphQLInputObjectType,
    GraphQLInterfaceType,
    GraphQLObjectType,
    GraphQLScalarType,
    Undefined,
)

from server.graph import build_schema
from server.strawberry_internals import graphql_schema

BUILT_IN = {"String", "Int", "Float", "Boolean", "ID"}


def undescribed() -> list[str]:
    """Every schema element without a description, as ``Type.field(arg)`` paths."""
    schema = graphql_schema(build_schema())
    missing: list[str] = []
    for name, type_ in schema.type_map.items():
        if name.startswith("_") or name in BUILT_IN or name.startswith("link__"):
            continue
        if not type_.description:
            missing.append(name)
        if isinstance(type_, GraphQLObjectType | GraphQLInterfaceType):
            for field_name, field in type_.fields.items():
                if field_name.startswith("_"):
                    continue
                if not field.description:
                    missing.append(f"{name}.{field_name}")
                missing += [
                    f"{name}.{field_name}({arg_name})"
                    for arg_name, arg in field.args.items()
                    if not arg.description
                ]
        elif isinstance(type_, GraphQLInputObjectType):
            missing += [
                f"{name}.{field_name}"
                for field_name, field in type_.fields.items()
                if not field.description
            ]
        elif isinstance(type_, GraphQLEnumType):
            missing += [
                f"{name}.{value_name}"
                for value_name, value in type_.values.items()
                if not value.description
            ]
    return missing


def test_every_schema_element_has_a_description():
    assert undescribed() == []


def test_epoch_millis__specified_by():
    epoch = graphql_schema(build_schema()).type_map["EpochMillis"]
    assert isinstance(epoch, GraphQLScalarType)
    assert epoch.specified_by_url


def stated_defaults() -> list[tuple[str, int, object]]:
    """Each argument and input field with a default in the schema whose description states
    one (``default N``): its path, the stated number and the schema's default."""
    schema = graphql_schema(build_schema())
    found: list[tuple[str, int, object]] = []

    def note(path: str, description: str | None, default: object) -> None:
        stated = re.search(r"\bdefault ([\d,]+)\b", description or "")
        if stated and default not in (Undefined, None):
            found.append((path, int(stated.group(1).replace(",", "")), default))

    for name, type_ in schema.type_map.items():
        if isinstance(type_, GraphQLObjectType | GraphQLInterfaceType):
            for field_name, field in type_.fields.items():
                for arg_name, arg in field.args.items():
                    note(f"{name}.{field_name}({arg_name})", arg.description, arg.default_value)
        elif isinstance(type_, GraphQLInputObjectType):
            for field_name, input_field in type_.fields.items():
                note(f"{name}.{field_name}", input_field.description, input_field.default_value)
    return found


def test_a_stated_default_is_the_default():
    assert stated_defaults(), "no description states a default"
    assert [
        (path, stated) for path, stated, default in stated_defaults() if stated != default
    ] == []
