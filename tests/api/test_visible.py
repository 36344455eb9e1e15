"""The viewer-scoped reader (resolvers/visible.py): every field that returns an Operation or
a Watch (alone, listed, in a connection, payload or union) resolves through it, and it
drops what the viewer may not see."""

from typing import Annotated

import pytest
import strawberry
from graphql import GraphQLInterfaceType, GraphQLObjectType, GraphQLSchema, GraphQLUnionType
from graphql.type import get_named_type
from strawberry.schema.config import StrawberryConfig

from resolvers.context import Context
from resolvers.loaders import Loaders
from resolvers.permissions import Viewer
from resolvers.visible import SERVES
from schema.names import SeedNameConverter, to_graphql_name
from schema.scalars import SCALAR_MAP
from server.graph import build_schema
from server.strawberry_internals import graphql_schema
from store.sizes import Measured
from tests.factories import claimed_operation, committed_operation, pending_watch

TARGETS = frozenset({"Operation", "Watch"})
ROOTS = frozenset({"Query", "Mutation", "Subscription"})


def reaches(schema: GraphQLSchema, type_name: str, seen: set[str]) -> bool:
    """True when values of ``type_name`` can hold an Operation or a Watch."""
    if type_name in TARGETS:
        return True
    if type_name in seen:
        return False
    seen.add(type_name)
    kind = schema.get_type(type_name)
    if isinstance(kind, GraphQLUnionType | GraphQLInterfaceType):
        possible = schema.get_possible_types(kind)
        if any(reaches(schema, member.name, seen) for member in possible):
            return True
    if isinstance(kind, GraphQLObjectType | GraphQLInterfaceType):
        return any(
            reaches(schema, get_named_type(field.type).name, seen) for field in kind.fields.values()
        )
    return False


def resolved_fields(schema: strawberry.Schema, type_name: str) -> set[str]:
    """The GraphQL names of ``type_name``'s fields that have a resolver of their own."""
    definition = schema.get_type_by_name(type_name)
    fields = getattr(definition, "fields", [])
    return {
        field.graphql_name or to_graphql_name(field.python_name)
        for field in fields
        if field.base_resolver is not None
    }


def unserved(schema: strawberry.Schema) -> set[tuple[str, str]]:
    """Fields returning an Operation or a Watch, resolved by code (every root field, and any
    field with a resolver), that are not in ``SERVES``. A plain field of a payload or an edge
    only carries what a served field built."""
    graphql = graphql_schema(schema)
    found = set()
    for kind in graphql.type_map.values():
        if not isinstance(kind, GraphQLObjectType) or kind.name.startswith("__"):
            continue
        resolved = resolved_fields(schema, kind.name)
        for name, field in kind.fields.items():
            by_code = kind.name in ROOTS or name in resolved
            if by_code and reaches(graphql, get_named_type(field.type).name, set()):
                found.add((kind.name, name))
    return found - SERVES


def test_every_field_returning_operations_or_watches_goes_through_the_reader():
    assert unserved(build_schema()) == set()


def test_serves__names_only_fields_that_exist_and_return_them():
    schema = build_schema()
    graphql = graphql_schema(schema)
    for type_name, field_name in SERVES:
        field = graphql.get_type(type_name).fields[field_name]
        assert reaches(graphql, get_named_type(field.type).name, set()), (type_name, field_name)


def test_a_new_field_returning_an_operation_outside_the_reader_is_reported():
    from schema.operation import Operation

    @strawberry.type
    class Query:
        @strawberry.field
        def stray(self) -> list[Annotated[Operation, strawberry.lazy("schema.operation")]]:
            return []

    config = StrawberryConfig(name_converter=SeedNameConverter(), scalar_map=SCALAR_MAP)
    schema = strawberry.federation.Schema(query=Query, types=[Operation], config=config)
    assert ("Query", "stray") in unserved(schema)


def viewer_context(store, did: str, *scopes: str) -> Context:
    viewer = Viewer(did=did, scopes=frozenset(scopes))
    return Context(store=store, viewer=viewer, loaders=Loaders(store), request_id="r")


async def test_visible_operation__another_tenants_reads_none(store):
    record = await claimed_operation(store)

    assert viewer_context(store, "did:key:other").visible.operation(record) is None
    assert (
        viewer_context(store, "did:key:other").visible.operations(
            "operations", Measured([record], [1])
        )
        == []
    )


async def test_visible_operation__caller_and_owner_see_it(store):
    record = await claimed_operation(store)

    for did in ("did:key:caller", "did:key:owner"):
        seen = viewer_context(store, did).visible.operation(record)
        assert seen is not None and seen.record == record


async def test_visible_lease_token__only_the_caller_reads_it(store):
    record = await claimed_operation(store)

    assert viewer_context(store, "did:key:owner").visible.lease_token(record) is None
    assert viewer_context(store, "did:key:caller").visible.lease_token(record) == "lease-A"


async def test_visible_watch__another_tenants_reads_none(store):
    record = await pending_watch(store)

    assert viewer_context(store, "did:key:caller").visible.watch(record) is None
    assert (
        viewer_context(store, "did:key:caller").visible.watches("watches", Measured([record], [1]))
        == []
    )
    assert viewer_context(store, "did:key:owner").visible.watch(record) is not None


async def test_visible_watch_of__refused_without_watches_read(store):
    record = await committed_operation(store)

    with pytest.raises(Exception, match="watches:read"):
        await viewer_context(store, "did:key:owner").visible.watch_of(record)


async def test_visible_operations_of__drop_foreign_rows_and_count_what_they_return(store):
    record = await pending_watch(store)
    context = viewer_context(store, "did:key:caller", "operations:read")
    left = context.budget.rows_left

    seen = await context.visible.operations_of(record)

    assert [operation.record.caller_did for operation in seen] == ["did:key:caller"]
    assert context.budget.rows_left == left - 1
    foreign = viewer_context(store, "did:key:other", "operations:read")
    assert await foreign.visible.operations_of(record) == []
