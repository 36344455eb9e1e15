"""Caching the parse and validation of query texts that clients send again and again.

Workers send the same documents (the whole ``worker.graphql`` with an ``operationName``) on
every request; parsing and validating them was most of a request's time. Only texts up to
64 KiB are cached, so the caches (256 entries each) hold at most a few tens of MiB.
"""

import contextlib
from collections.abc import Iterator
from functools import lru_cache

from graphql import DocumentNode, GraphQLError, GraphQLSchema, parse
from strawberry.extensions import SchemaExtension
from strawberry.schema.schema import validate_document

from server.strawberry_internals import graphql_schema

MAX_CACHED_QUERY_CHARS = 64 * 1024
CACHE_ENTRIES = 256


@lru_cache(maxsize=CACHE_ENTRIES)
def parse_cached(query: str, max_tokens: int | None) -> DocumentNode:
    """``query`` parsed with at most ``max_tokens`` tokens; raises ``GraphQLError``."""
    return parse(query, max_tokens=max_tokens)


_validated: dict[
    tuple[int, int, tuple[type, ...]], tuple[GraphQLSchema, DocumentNode, list[GraphQLError]]
] = {}


def validate_cached(
    schema: GraphQLSchema, document: DocumentNode, rules: tuple[type, ...]
) -> list[GraphQLError]:
    """The validation errors of a cached ``document`` under ``rules``.

    Keyed by the identity of the schema and of the parsed document (``parse_cached`` hands
    out one object per text; the entry holds both, so their ids stay their own): hashing a
    document hashes its whole tree, which cost more than half a millisecond a request.
    """
    key = (id(schema), id(document), rules)
    entry = _validated.get(key)
    if entry is not None and entry[0] is schema and entry[1] is document:
        return entry[2]
    errors = validate_document(schema, document, rules)
    if len(_validated) >= CACHE_ENTRIES:
        _validated.clear()
    _validated[key] = (schema, document, errors)
    return errors


class DocumentCache(SchemaExtension):
    """Serves the parsed document and its validation from the caches above.

    A text that does not parse is left to Strawberry, which parses it again and reports the
    syntax error the usual way. The validation rules must be the same classes on every
    request for the validation cache to hit. Its place in the pipeline: ``server.pipeline``.
    """

    def on_parse(self) -> Iterator[None]:
        context = self.execution_context
        query = context.query
        if query is not None and len(query) <= MAX_CACHED_QUERY_CHARS:
            with contextlib.suppress(GraphQLError):
                context.graphql_document = parse_cached(
                    query, context.parse_options.get("max_tokens")
                )
        yield

    def on_validate(self) -> Iterator[None]:
        context = self.execution_context
        query = context.query
        if (
            context.pre_execution_errors is None
            and context.graphql_document is not None
            and query is not None
            and len(query) <= MAX_CACHED_QUERY_CHARS
        ):
            context.pre_execution_errors = validate_cached(
                graphql_schema(context.schema),
                context.graphql_document,
                tuple(context.validation_rules),
            )
        yield
