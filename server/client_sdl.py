"""The client SDL: the subgraph's SDL (``graphql/schema.graphql``) without what Apollo
Federation adds for a gateway, so a client's tools (code generators, schema linters, a
client's own schema check) read it as plain GraphQL. ``connector-store schema --client``
prints it; ``graphql/client-schema.graphql`` is its checked-in copy."""

from typing import Any

from graphql import (
    REMOVE,
    DirectiveNode,
    DocumentNode,
    FieldDefinitionNode,
    TypeDefinitionNode,
    Visitor,
    parse,
    print_ast,
    visit,
)

FEDERATION_DIRECTIVES = frozenset(
    {
        "link",
        "key",
        "shareable",
        "external",
        "requires",
        "provides",
        "tag",
        "inaccessible",
        "override",
        "composeDirective",
        "interfaceObject",
        "authenticated",
        "requiresScopes",
        "policy",
        "extends",
    }
)
"""Directives of the Federation 2 spec: a gateway reads them, a client's tools do not know
them (the subgraph SDL uses them without defining them)."""

FEDERATION_TYPES = frozenset(
    {"_Any", "_Entity", "_Service", "_FieldSet", "FieldSet", "link__Import", "link__Purpose"}
)
FEDERATION_FIELDS = frozenset({"_entities", "_service"})
"""The types and ``Query`` fields Federation adds for the gateway's entity lookups."""


class _WithoutFederation(Visitor):
    def enter_directive(self, node: DirectiveNode, *_: Any) -> object:
        return REMOVE if node.name.value in FEDERATION_DIRECTIVES else None

    def enter_field_definition(self, node: FieldDefinitionNode, *_: Any) -> object:
        return REMOVE if node.name.value in FEDERATION_FIELDS else None

    def enter(self, node: Any, *_: Any) -> object:
        if isinstance(node, TypeDefinitionNode) and node.name.value in FEDERATION_TYPES:
            return REMOVE
        return None


def client_sdl(subgraph_sdl: str) -> str:
    """``subgraph_sdl`` without the Federation directives, types and ``Query`` fields
    (``FEDERATION_DIRECTIVES``, ``FEDERATION_TYPES``, ``FEDERATION_FIELDS``), descriptions
    kept: an SDL graphql-core's ``build_schema`` reads as it is."""
    document: DocumentNode = visit(parse(subgraph_sdl), _WithoutFederation())
    return print_ast(document) + "\n"
