"""The schema explains itself: every type, field, argument, input field and enum value of the
API has a description (federation's own ``_``-prefixed machinery and the built-ins aside),
and ``EpochMillis`` says by ``@specifiedBy`` where it is defined."""

from graphql import (
    GraphQLEnumType,
    GraphQLInputObjectType,
    GraphQLInterfaceType,
    GraphQLObjectType,
    GraphQLScalarType,
)

from resolvers.strawberry_internals import graphql_schema
from server.graph import build_schema

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
