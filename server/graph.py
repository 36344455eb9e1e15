"""The Strawberry ``Schema``, built from the root types and the limits in ``Settings``."""

from collections.abc import Callable
from typing import Any, Literal

import strawberry
from graphql import GraphQLError, NoSchemaIntrospectionCustomRule
from strawberry.extensions import (
    AddValidationRules,
    MaxTokensLimiter,
    SchemaExtension,
)
from strawberry.schema.config import StrawberryConfig

from resolvers.errors import CodedValidation, ErrorCodes
from resolvers.mutations import Mutation
from resolvers.permissions import Authorization
from resolvers.queries import Query
from schema.descriptions import describe
from schema.names import SeedNameConverter
from schema.operation import Operation
from schema.scalars import SCALAR_MAP
from schema.watch import Watch
from server.document_cache import DocumentCache
from server.query_limits import Limits, QueryLimits
from server.settings import Settings
from server.telemetry import OperationTelemetry

FEDERATION_VERSION: Literal["2.7"] = "2.7"


class ConnectorSchema(strawberry.federation.Schema):
    """The schema, a Federation 2 subgraph (``_service``, ``_entities``); errors are logged
    by ``ErrorCodes`` (only the masked ones), not here."""

    def process_errors(self, errors: list[GraphQLError], execution_context: Any = None) -> None:
        return None


def build_schema(settings: Settings | None = None) -> strawberry.federation.Schema:
    """The API's schema; ``settings`` bound depth, tokens and aliases and may switch off
    introspection. The validation rules are the same classes on every request, so
    ``DocumentCache`` can reuse the validation of a document it has seen."""
    settings = settings or Settings()
    limits = Limits(
        depth=settings.max_query_depth,
        fields=settings.max_query_fields,
        aliases=settings.max_aliases,
    )
    extensions: list[Callable[[], SchemaExtension]] = [
        OperationTelemetry,
        ErrorCodes,
        Authorization,
        lambda: MaxTokensLimiter(max_token_count=settings.max_query_tokens),
        lambda: QueryLimits(limits),
    ]
    if not settings.introspection:
        extensions.append(lambda: AddValidationRules([NoSchemaIntrospectionCustomRule]))
    extensions += [CodedValidation, DocumentCache]
    schema = ConnectorSchema(
        query=Query,
        mutation=Mutation,
        types=[Operation, Watch],
        extensions=extensions,
        config=StrawberryConfig(name_converter=SeedNameConverter(), scalar_map=SCALAR_MAP),
        federation_version=FEDERATION_VERSION,
    )
    describe(schema._schema)
    return schema
