"""The graphql-core schema Strawberry builds, handed out in one place.

Strawberry builds a graphql-core ``GraphQLSchema`` from the root types and runs every request
against it, but has no public way to hand it out: it is the private ``Schema._schema``. The
document cache validates against it, ``ErrorCodes`` checks variables against its types and
``schema.descriptions.describe`` writes descriptions into it; each gets it here.
The other internals of Strawberry and graphql-core the server leans on are listed in
docs/strawberry-internals.md; ``tests/test_strawberry_internals.py`` pins each, this one
included (the object returned is the schema Strawberry validates and executes against).
"""

from graphql import GraphQLSchema
from strawberry.schema.schema import Schema


def graphql_schema(schema: Schema) -> GraphQLSchema:
    """The graphql-core schema Strawberry runs ``schema``'s requests against."""
    built: GraphQLSchema = schema._schema
    return built
