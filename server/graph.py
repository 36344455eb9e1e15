"""The Strawberry ``Schema``, built from the root types and the limits in ``Settings``."""

from collections.abc import Callable, Iterable
from typing import Any, Literal

import strawberry
from graphql import GraphQLError, NoSchemaIntrospectionCustomRule
from strawberry.extensions import (
    AddValidationRules,
    MaxTokensLimiter,
    SchemaExtension,
)
from strawberry.federation.schema import FederationAny
from strawberry.schema.config import StrawberryConfig
from strawberry.types import ExecutionResult
from strawberry.types.graphql import OperationType
from strawberry.types.info import Info

from resolvers.errors import CodedValidation, ErrorCodes, bad_input, requested_operation_name
from resolvers.mutations import Mutation
from resolvers.permissions import Authorization
from resolvers.queries import Query
from resolvers.strawberry_internals import graphql_schema
from schema.descriptions import describe
from schema.names import SeedNameConverter
from schema.operation import Operation
from schema.scalars import SCALAR_MAP
from schema.watch import Watch
from server.document_cache import DocumentCache
from server.federated_tracing import FederatedTracing
from server.query_limits import Limits, QueryLimits
from server.settings import Settings
from server.telemetry import OperationTelemetry

FEDERATION_VERSION: Literal["2.7"] = "2.7"


ENTITY_TYPES = frozenset({"Operation", "Watch"})
"""The types other subgraphs may refer to by key (``_entities``)."""


class ConnectorSchema(strawberry.federation.Schema):
    """The schema, a Federation 2 subgraph (``_service``, ``_entities``); errors are logged
    by ``ErrorCodes`` (only the masked ones), not here."""

    def process_errors(self, errors: list[GraphQLError], execution_context: Any = None) -> None:
        return None

    async def execute(
        self,
        query: str | None,
        variable_values: dict[str, Any] | None = None,
        context_value: Any | None = None,
        root_value: Any | None = None,
        operation_name: str | None = None,
        allowed_operation_types: Iterable[OperationType] | None = None,
        operation_extensions: dict[str, Any] | None = None,
    ) -> ExecutionResult:
        """Strawberry's ``execute``, with the ``operationName`` the client gave kept for the
        request's extensions (``requested_operation_name``)."""
        given = requested_operation_name.set(operation_name)
        try:
            return await super().execute(
                query,
                variable_values,
                context_value,
                root_value,
                operation_name,
                allowed_operation_types,
                operation_extensions,
            )
        finally:
            requested_operation_name.reset(given)

    def entities_resolver(
        self, info: Info, representations: list[FederationAny]
    ) -> list[FederationAny]:
        """Strawberry's ``_entities``, after a check of each representation: an object whose
        ``__typename`` is one of our entities, else ``BAD_USER_INPUT`` (Strawberry would fail
        on a missing or unknown type name with an internal error). The representations count
        against the request's rows (at most 1000), like every list."""
        info.context.rows.take("representations", len(representations))
        for index, representation in enumerate(representations):
            if not isinstance(representation, dict) or (
                representation.get("__typename") not in ENTITY_TYPES
            ):
                raise bad_input(
                    "representations",
                    f"item {index} must be an object whose __typename is one of "
                    f"{', '.join(sorted(ENTITY_TYPES))}",
                )
        return super().entities_resolver(info, representations)


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
        # Federated tracing: a trace in ``extensions.ftv1`` only when the request carries
        # ``apollo-federation-include-trace: ftv1`` (a gateway that reports usage).
        FederatedTracing,
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
    describe(graphql_schema(schema))
    return schema
