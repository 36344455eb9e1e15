"""graphql/client-schema.graphql is the client SDL: the served schema without Federation's
directives, types and fields, readable by graphql-core's ``build_schema`` as it is."""

from pathlib import Path

import pytest
from graphql import build_schema, find_breaking_changes, parse, validate
from typer.testing import CliRunner

from server import graph
from server.cli import cli
from server.client_sdl import (
    FEDERATION_DIRECTIVES,
    FEDERATION_FIELDS,
    FEDERATION_TYPES,
    client_sdl,
)
from server.strawberry_internals import graphql_schema

GRAPHQL = Path(__file__).resolve().parents[1] / "graphql"
CLIENT_SDL = GRAPHQL / "client-schema.graphql"


def test_client_schema__snapshot_matches_the_served_schema():
    printed = CliRunner().invoke(cli, ["schema", "--client"]).stdout
    assert printed == client_sdl(graph.build_schema().as_str())
    assert CLIENT_SDL.read_text() == printed, "stale: run `make schema` and commit it"


def test_client_schema__build_schema_reads_it_where_the_subgraph_sdl_fails():
    with pytest.raises(TypeError):
        build_schema((GRAPHQL / "schema.graphql").read_text())

    schema = build_schema(CLIENT_SDL.read_text())

    assert schema.query_type is not None and schema.subscription_type is not None
    assert not FEDERATION_TYPES & set(schema.type_map)
    assert not FEDERATION_FIELDS & set(schema.query_type.fields)


def test_client_schema__same_types_and_fields_as_served_less_federation():
    served = graphql_schema(graph.build_schema())
    client = build_schema(CLIENT_SDL.read_text())

    removed = {change.description for change in find_breaking_changes(served, client)}
    added = find_breaking_changes(client, served)

    federation = (
        {f"{name} was removed." for name in FEDERATION_TYPES & set(served.type_map)}
        | {f"Field Query.{name} was removed." for name in FEDERATION_FIELDS}
        | {
            f"Directive @{directive.name} was removed."
            for directive in served.directives
            if directive.name in FEDERATION_DIRECTIVES
        }
    )
    assert removed == federation
    assert added == []


@pytest.mark.parametrize("document", sorted((GRAPHQL / "operations").rglob("*.graphql")), ids=str)
def test_client_schema__operation_documents_valid(document):
    client = build_schema(CLIENT_SDL.read_text())
    assert validate(client, parse(document.read_text())) == []
