"""The Strawberry ``Schema``, built from the root types and the pipeline of ``server.pipeline``."""

from collections.abc import Iterable
from typing import Any, Literal

import strawberry
from graphql import GraphQLError
from strawberry.extensions import SchemaExtension
from strawberry.extensions.runner import SchemaExtensionsRunner
from strawberry.federation.schema import FederationAny
from strawberry.schema.config import StrawberryConfig
from strawberry.schema.schema import DEFAULT_ALLOWED_OPERATION_TYPES
from strawberry.tools import merge_types
from strawberry.types import ExecutionResult
from strawberry.types.graphql import OperationType
from strawberry.types.info import Info

from resolvers.batch_mutations import BatchMutation
from resolvers.context import Context
from resolvers.counts import CountsQuery
from resolvers.errors import bad_input
from resolvers.leasing import AccountsQuery, LeasingMutation
from resolvers.mutations import Mutation
from resolvers.operator import OperatorMutation, ViewerQuery
from resolvers.permissions import guard_subscriptions
from resolvers.queries import Query
from resolvers.subscriptions import Subscription
from schema.descriptions import describe
from schema.names import SeedNameConverter
from schema.operation import Operation
from schema.scalars import SCALAR_MAP
from schema.watch import Watch
from server.errors.error_codes import requested_operation_name
from server.fast_path import FastExecutor
from server.pipeline import Pipeline, PipelineRunner, pipeline_extension
from server.settings import Settings
from server.strawberry_internals import graphql_schema
from store.context import acting_as

FEDERATION_VERSION: Literal["2.7"] = "2.7"


ENTITY_TYPES = frozenset({"Operation", "Watch"})
"""The types other subgraphs may refer to by key (``_entities``)."""


class ConnectorSchema(strawberry.federation.Schema):
    """The schema, a Federation 2 subgraph (``_service``, ``_entities``); errors are logged
    by ``ErrorCodes`` (only the masked ones), not here."""

    def process_errors(self, errors: list[GraphQLError], execution_context: Any = None) -> None:
        return None

    def create_extensions_runner(
        self, execution_context: Any, extensions: list[SchemaExtension]
    ) -> SchemaExtensionsRunner:
        """The runner of the request's extensions: ``PipelineRunner`` when they are the one
        ``Pipeline`` (the API's schema has no other), else Strawberry's."""
        if len(extensions) == 1 and isinstance(extensions[0], Pipeline):
            return PipelineRunner(execution_context, extensions[0])
        return super().create_extensions_runner(execution_context, extensions)

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
        request's extensions (``requested_operation_name``), and the viewer as the actor of
        every store write it makes (``store.context.acting_as``: the event log's actor).

        A subscription is never among the ``allowed_operation_types``: its stream is not one
        result (graphql-core would run its root field as a query's and fail on the stream),
        so Strawberry raises ``InvalidOperationTypeError`` for it, which the HTTP view
        refuses with 406 (``server.graphql_view.GraphQLApp``); subscriptions run by ``stream``."""
        allowed = set(
            DEFAULT_ALLOWED_OPERATION_TYPES
            if allowed_operation_types is None
            else allowed_operation_types
        ) - {OperationType.SUBSCRIPTION}
        given = requested_operation_name.set(operation_name)
        actor = context_value.viewer.did if isinstance(context_value, Context) else None
        try:
            with acting_as(actor):
                return await super().execute(
                    query,
                    variable_values,
                    context_value,
                    root_value,
                    operation_name,
                    allowed,
                    operation_extensions,
                )
        finally:
            requested_operation_name.reset(given)

    async def stream(
        self,
        query: str | None,
        variable_values: dict[str, Any] | None = None,
        context_value: Any | None = None,
        root_value: Any | None = None,
        operation_name: str | None = None,
        operation_extensions: dict[str, Any] | None = None,
        allowed_operation_types: Iterable[OperationType] | None = None,
    ) -> Any:
        """Strawberry's ``stream`` (every operation over a WebSocket, and a subscription
        over HTTP), each operation with a context of its own (``Context.fresh``: a
        WebSocket's operations share the connection's context, never its loaders), and the
        ``operationName`` the client gave kept for the request's extensions, as ``execute``
        keeps it. It is set and not reset: the extensions run while the returned stream is
        iterated, later, in this same task (a WebSocket operation's own, or the HTTP
        request's), which serves this one operation."""
        requested_operation_name.set(operation_name)
        if isinstance(context_value, Context):
            context_value = context_value.fresh()
        return await super().stream(
            query,
            variable_values,
            context_value,
            root_value,
            operation_name,
            operation_extensions,
            allowed_operation_types,
        )

    def entities_resolver(
        self, info: Info, representations: list[FederationAny]
    ) -> list[FederationAny]:
        """Strawberry's ``_entities``, after a check of each representation: an object whose
        ``__typename`` is one of our entities, else ``BAD_USER_INPUT`` (Strawberry would fail
        on a missing or unknown type name with an internal error). The representations count
        against the request's rows (at most 1000), like every list."""
        info.context.budget.take("representations", len(representations))
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
    """The API's schema, its extensions the pipeline ``settings`` give (``server.pipeline``)."""
    settings = settings or Settings()
    schema = ConnectorSchema(
        query=merge_types("Query", (Query, AccountsQuery, ViewerQuery, CountsQuery)),
        mutation=merge_types(
            "Mutation", (Mutation, BatchMutation, LeasingMutation, OperatorMutation)
        ),
        subscription=Subscription,
        types=[Operation, Watch],
        extensions=[pipeline_extension(settings)],
        config=StrawberryConfig(name_converter=SeedNameConverter(), scalar_map=SCALAR_MAP),
        federation_version=FEDERATION_VERSION,
        execution_context_class=FastExecutor if settings.fast_path else None,
    )
    describe(graphql_schema(schema))
    guard_subscriptions(graphql_schema(schema))
    return schema
