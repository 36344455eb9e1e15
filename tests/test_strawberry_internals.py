"""Every internal of Strawberry and graphql-core the server leans on (docs/strawberry-internals.md),
each touched the way the code touches it: an upgrade that renames, moves or changes one fails
its test here with a message naming it, before the code that uses it fails somewhere less
clear. ``test_the_catalogue_lists_every_pin`` holds the page and this module together."""

import dataclasses
import inspect
import re
from collections.abc import AsyncGenerator, Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import Any, get_origin

import pytest
import strawberry
from cross_web import HTTPException, StarletteRequestAdapter
from graphql import (
    GraphQLError,
    GraphQLNonNull,
    GraphQLSchema,
    GraphQLString,
    ValidationRule,
    execute,
    parse,
    specified_rules,
)
from graphql.execution import Executor, get_argument_values
from graphql.execution.middleware import MiddlewareManager
from graphql.pyutils import Path as ResponsePath
from graphql.pyutils import Undefined, is_iterable
from graphql.pyutils import inspect as graphql_inspect
from graphql.utilities import validate_input_value
from starlette.requests import Request
from starlette.websockets import WebSocketDisconnect
from strawberry.asgi import ASGIWebSocketAdapter, GraphQL
from strawberry.dataloader import DataLoader, DefaultCache
from strawberry.exceptions import MissingQueryError
from strawberry.extensions import AddValidationRules, MaxTokensLimiter, SchemaExtension
from strawberry.extensions.runner import SchemaExtensionsRunner
from strawberry.extensions.tracing.apollo_federation import (
    FTV1_HEADER,
    FTV1_HEADER_VALUE,
    ApolloFederationTracingExtension,
)
from strawberry.http import GraphQLRequestData
from strawberry.http.async_base_view import AsyncBaseHTTPView
from strawberry.http.exceptions import WebSocketDisconnected
from strawberry.http.parse_content_type import parse_content_type
from strawberry.schema.config import StrawberryConfig
from strawberry.schema.exceptions import CannotGetOperationTypeError, InvalidOperationTypeError
from strawberry.schema.name_converter import NameConverter
from strawberry.schema.schema import (
    DEFAULT_ALLOWED_OPERATION_TYPES,
    StrawberryGraphQLCoreExecutionContext,
    validate_document,
)
from strawberry.subscriptions.protocols.graphql_transport_ws.handlers import (
    BaseGraphQLTransportWSHandler,
    Operation,
)
from strawberry.types.arguments import InputContext
from strawberry.types.base import (
    StrawberryList,
    StrawberryOptional,
    get_object_definition,
    has_object_definition,
)
from strawberry.types.execution import PreExecutionError
from strawberry.types.field import StrawberryField
from strawberry.types.graphql import OperationType
from strawberry.types.scalar import ScalarDefinition

from resolvers.permissions import Authorization
from schema.names import SeedNameConverter
from schema.scalars import EPOCH_MILLIS
from server.document_cache import DocumentCache
from server.errors.error_codes import STREAM_REFUSALS
from server.fast_path import STRAWBERRY_DEFINITION
from server.federated_tracing import FederatedTracing
from server.graph import ConnectorSchema
from server.graphql_view import GraphQLApp
from server.strawberry_internals import graphql_schema
from server.websocket import TextWebSocket, TokenTransportWS

CATALOGUE = Path(__file__).resolve().parents[1] / "docs" / "strawberry-internals.md"

PINS: dict[str, str] = {}
"""Each internal's name, as the catalogue spells it, and the test that pins it."""


def pins(*internals: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Registers the test as the pin of ``internals`` (the catalogue's names)."""

    def register(test: Callable[..., Any]) -> Callable[..., Any]:
        for internal in internals:
            PINS[internal] = test.__name__
        return test

    return register


@contextmanager
def leaning_on(internal: str) -> Iterator[None]:
    """Turns any failure of the block into one naming ``internal`` and the catalogue."""
    try:
        yield
    except Exception as error:
        pytest.fail(
            f"{internal} changed ({type(error).__name__}: {error}): the server leans on it "
            f"as docs/strawberry-internals.md says; adapt the code that uses it",
            pytrace=True,
        )


def parameters(function: Callable[..., Any]) -> list[str]:
    return [name for name in inspect.signature(function).parameters if name != "self"]


@strawberry.type
class Query:
    a: str = "a"
    b: str = "b"


def toy_schema(*extensions: Any, **kwargs: Any) -> strawberry.Schema:
    return strawberry.Schema(Query, extensions=list(extensions), **kwargs)


# Strawberry


@pins("Schema._schema")
def test_schema__private_schema_is_what_strawberry_validates_against():
    seen = []

    class Seen(ValidationRule):
        def __init__(self, context):
            super().__init__(context)
            seen.append(context.schema)

    with leaning_on("Schema._schema"):
        schema = toy_schema(partial(AddValidationRules, [Seen]))
        assert schema.execute_sync("{ a }", root_value=Query()).data == {"a": "a"}
        assert isinstance(schema._schema, GraphQLSchema)
        assert seen == [schema._schema] and graphql_schema(schema) is schema._schema


@pins("SchemaExtension._implements_resolve")
def test_schema_extension__implements_resolve_tells_who_has_a_resolve_hook():
    with leaning_on("SchemaExtension._implements_resolve"):
        assert Authorization._implements_resolve() is True
        assert FederatedTracing._implements_resolve() is True
        assert DocumentCache._implements_resolve() is False


@pins(
    "Schema.create_extensions_runner",
    "SchemaExtensionsRunner",
    "SchemaExtension.on_stream_result",
)
def test_extensions_runner__made_per_request_its_phases_entered_in_order():
    entered = []

    class Recording(SchemaExtensionsRunner):
        def operation(self):
            entered.append("operation")
            return super().operation()

        def parsing(self):
            entered.append("parsing")
            return super().parsing()

        def validation(self):
            entered.append("validation")
            return super().validation()

        def executing(self):
            entered.append("executing")
            return super().executing()

    class Schema(strawberry.Schema):
        def create_extensions_runner(self, execution_context, extensions):
            return Recording(execution_context, extensions)

    with leaning_on("Schema.create_extensions_runner"):
        assert parameters(strawberry.Schema.create_extensions_runner) == [
            "execution_context",
            "extensions",
        ]
    with leaning_on("SchemaExtensionsRunner"):
        assert parameters(SchemaExtensionsRunner.__init__) == ["execution_context", "extensions"]
        assert callable(SchemaExtensionsRunner.on_stream_result)
        result = Schema(Query).execute_sync("{ a }", root_value=Query())
        assert result.data == {"a": "a"}
        assert entered == ["operation", "parsing", "validation", "executing"]
    with leaning_on("SchemaExtension.on_stream_result"):
        assert parameters(SchemaExtension.on_stream_result) == ["result"]


@pins("ExecutionContext.graphql_document", "ExecutionContext.pre_execution_errors")
def test_execution_context__a_document_or_errors_set_by_an_extension_are_kept():
    rules_ran = []

    class Ran(ValidationRule):
        def __init__(self, context):
            super().__init__(context)
            rules_ran.append(True)

    class SetsDocument(SchemaExtension):
        def on_parse(self):
            self.execution_context.graphql_document = parse("{ b }")
            yield

    class SetsErrors(SchemaExtension):
        def on_validate(self):
            self.execution_context.pre_execution_errors = [GraphQLError("refused")]
            yield

    with leaning_on("ExecutionContext.graphql_document"):
        result = toy_schema(SetsDocument).execute_sync("{ a }", root_value=Query())
        assert result.data == {"b": "b"}, "Strawberry parsed the query again"
    with leaning_on("ExecutionContext.pre_execution_errors"):
        schema = toy_schema(SetsErrors, partial(AddValidationRules, [Ran]))
        result = schema.execute_sync("{ a }", root_value=Query())
        assert [error.message for error in result.errors or ()] == ["refused"]
        assert rules_ran == [], "Strawberry validated though the errors were set"


@pins("ExecutionContext.parse_options", "ExecutionContext.validation_rules")
def test_execution_context__parse_options_and_validation_rules_as_the_steps_use_them():
    seen: dict[str, Any] = {}
    rules_ran = []

    class Extra(ValidationRule):
        def __init__(self, context):
            super().__init__(context)
            rules_ran.append(True)

    class Reads(SchemaExtension):
        def on_parse(self):
            seen["max_tokens"] = self.execution_context.parse_options.get("max_tokens")
            yield

        def on_validate(self):
            context = self.execution_context
            context.validation_rules = (*tuple(context.validation_rules), Extra)
            yield

    schema = toy_schema(partial(MaxTokensLimiter, max_token_count=77), Reads)
    with leaning_on("ExecutionContext.parse_options"):
        assert schema.execute_sync("{ a }", root_value=Query()).errors is None
        assert seen["max_tokens"] == 77
    with leaning_on("ExecutionContext.validation_rules"):
        assert rules_ran == [True]


@pins("validate_document")
def test_validate_document__the_errors_of_a_document_under_rules():
    schema = toy_schema()
    with leaning_on("validate_document"):
        assert parameters(validate_document) == ["schema", "document", "validation_rules"]
        rules = tuple(specified_rules)
        assert validate_document(schema._schema, parse("{ a }"), rules) == []
        errors = validate_document(schema._schema, parse("{ nope }"), rules)
        assert errors and all(isinstance(error, GraphQLError) for error in errors)


@pins("DEFAULT_ALLOWED_OPERATION_TYPES")
def test_default_allowed_operation_types__every_operation_type():
    with leaning_on("DEFAULT_ALLOWED_OPERATION_TYPES"):
        assert set(DEFAULT_ALLOWED_OPERATION_TYPES) == {
            OperationType.QUERY,
            OperationType.MUTATION,
            OperationType.SUBSCRIPTION,
        }


@pins("Schema.execute", "Schema.stream")
def test_schema__execute_and_stream_take_their_arguments_in_this_order():
    with leaning_on("Schema.execute"):
        assert (
            parameters(strawberry.Schema.execute)
            == parameters(ConnectorSchema.execute)
            == [
                "query",
                "variable_values",
                "context_value",
                "root_value",
                "operation_name",
                "allowed_operation_types",
                "operation_extensions",
            ]
        )
    with leaning_on("Schema.stream"):
        assert (
            parameters(strawberry.Schema.stream)
            == parameters(ConnectorSchema.stream)
            == [
                "query",
                "variable_values",
                "context_value",
                "root_value",
                "operation_name",
                "operation_extensions",
                "allowed_operation_types",
            ]
        )


@pins("StrawberryGraphQLCoreExecutionContext", "MiddlewareManager.middlewares")
def test_execution_context_class__strawberrys_executor_extended_its_middleware_the_extensions():
    seen: dict[str, Any] = {}

    class Resolves(SchemaExtension):
        def resolve(self, _next, root, info, *args, **kwargs):
            return _next(root, info, *args, **kwargs)

    class Extended(StrawberryGraphQLCoreExecutionContext):
        def execute_operation(self, serially=None):
            seen["middlewares"] = list(self.middleware_manager.middlewares)
            return super().execute_operation(serially)

    with leaning_on("StrawberryGraphQLCoreExecutionContext"):
        assert issubclass(StrawberryGraphQLCoreExecutionContext, Executor)
        schema = toy_schema(Resolves, execution_context_class=Extended)
        assert schema.execute_sync("{ a }", root_value=Query()).data == {"a": "a"}
    with leaning_on("MiddlewareManager.middlewares"):
        assert [type(middleware) for middleware in seen["middlewares"]] == [Resolves]


@pins("StrawberryObjectDefinition.from_input", "InputContext.config")
def test_from_input__builds_an_input_from_its_graphql_value_by_name():
    calls = []

    @strawberry.input
    class Given:
        caller_did: str

    def build(type_, value, context):
        calls.append((type_, dict(value), context))
        return type_(caller_did=value["callerDID"])

    with leaning_on("StrawberryObjectDefinition.from_input"):
        get_object_definition(Given, strict=True).from_input = build

    @strawberry.type
    class Echo:
        @strawberry.field
        def echo(self, given: Given) -> str:
            return given.caller_did

    converter = SeedNameConverter()
    schema = strawberry.Schema(Echo, config=StrawberryConfig(name_converter=converter))
    with leaning_on("StrawberryObjectDefinition.from_input"):
        result = schema.execute_sync('{ echo(given: {callerDID: "did:x"}) }')
        assert result.data == {"echo": "did:x"}, result.errors
        assert [(kind, value) for kind, value, _ in calls] == [(Given, {"callerDID": "did:x"})]
    with leaning_on("InputContext.config"):
        context = calls[0][2]
        assert isinstance(context, InputContext)
        assert context.config.name_converter is converter


@pins("StrawberryObjectDefinition fields", "NameConverter.from_field")
def test_type_definitions__what_leaf_inputs_reads_of_an_input():
    @strawberry.input
    class Batch:
        ids: list[str | None]
        limit: int | None = None

    with leaning_on("StrawberryObjectDefinition fields"):
        definition = get_object_definition(Batch, strict=True)
        assert definition.is_input and has_object_definition(Batch)
        ids, limit = definition.fields
        assert isinstance(ids, StrawberryField) and ids.python_name == "ids"
        assert isinstance(ids.type, StrawberryList)
        assert isinstance(ids.type.of_type, StrawberryOptional)
        assert isinstance(limit.type, StrawberryOptional) and limit.type.of_type is int
        assert ids.default_value is dataclasses.MISSING
        assert ids.default_factory is dataclasses.MISSING
        assert limit.default_value is None
    with leaning_on("NameConverter.from_field"):
        assert SeedNameConverter().from_field(ids) == "ids"


@pins("NameConverter.apply_naming_config")
def test_name_converter__apply_naming_config_names_every_field():
    @strawberry.type
    class Named:
        caller_did: str = "x"

    with leaning_on("NameConverter.apply_naming_config"):
        assert parameters(NameConverter.apply_naming_config) == ["name"]
        schema = strawberry.Schema(
            Named, config=StrawberryConfig(name_converter=SeedNameConverter())
        )
        assert "callerDID" in schema._schema.query_type.fields


@pins("GraphQLField.extensions['strawberry-definition']")
def test_graphql_field__carries_its_strawberry_field():
    @strawberry.type
    class Fields:
        plain: str = "p"

        @strawberry.field
        def computed(self) -> str:
            return "c"

        @strawberry.field
        async def awaited(self) -> str:
            return "a"

    with leaning_on("GraphQLField.extensions['strawberry-definition']"):
        fields = strawberry.Schema(Fields)._schema.query_type.fields
        plain = fields["plain"].extensions[STRAWBERRY_DEFINITION]
        assert isinstance(plain, StrawberryField)
        assert plain.base_resolver is None and plain.python_name == "plain"
        assert plain.extensions == [] and plain.permission_classes == []
        computed = fields["computed"].extensions[STRAWBERRY_DEFINITION].base_resolver
        assert computed is not None and computed.is_async is False
        awaited = fields["awaited"].extensions[STRAWBERRY_DEFINITION].base_resolver
        assert awaited is not None and awaited.is_async is True


@pins("ScalarDefinition")
def test_scalar__strawberry_scalar_is_a_scalar_definition():
    with leaning_on("ScalarDefinition"):
        assert isinstance(EPOCH_MILLIS, ScalarDefinition)


@pins("Schema.entities_resolver")
def test_federation_schema__entities_resolver_takes_info_and_representations():
    with leaning_on("Schema.entities_resolver"):
        assert parameters(strawberry.federation.Schema.entities_resolver) == [
            "info",
            "representations",
        ]


@pins("PreExecutionError")
async def test_pre_execution_error__a_subscriptions_refused_variables():
    @strawberry.type
    class Counting:
        @strawberry.subscription
        async def count(self, n: int) -> AsyncGenerator[int, None]:
            yield n

    schema = strawberry.Schema(Query, subscription=Counting)
    document = "subscription($n: Int!) { count(n: $n) }"
    with leaning_on("PreExecutionError"):
        stream = await schema.subscribe(document, variable_values={"n": "x"})
        results = [result async for result in stream]
        assert len(results) == 1 and isinstance(results[0], PreExecutionError)
        assert results[0].errors and all(error.path is None for error in results[0].errors)


@pins(
    "AsyncBaseHTTPView.execute_single",
    "AsyncBaseHTTPView.parse_http_body",
    "BaseView.parse_query_params",
    "AsyncBaseHTTPView.run",
    "GraphQLRequestData",
)
def test_view__the_methods_graphql_app_overrides_and_calls():
    with leaning_on("AsyncBaseHTTPView.execute_single"):
        assert (
            parameters(AsyncBaseHTTPView.execute_single)
            == parameters(GraphQLApp.execute_single)
            == [
                "request",
                "request_adapter",
                "sub_response",
                "context",
                "root_value",
                "request_data",
            ]
        )
    with leaning_on("AsyncBaseHTTPView.parse_http_body"):
        assert parameters(AsyncBaseHTTPView.parse_http_body) == ["request"]
        assert GraphQL.request_adapter_class is StarletteRequestAdapter
        for attribute in ("method", "content_type", "headers", "get_body"):
            assert hasattr(StarletteRequestAdapter, attribute), attribute
    with leaning_on("BaseView.parse_query_params"):
        assert parameters(GraphQL.parse_query_params) == ["params"]
    with leaning_on("AsyncBaseHTTPView.run"):
        assert parameters(GraphQL.run)[:1] == ["request"]
    with leaning_on("GraphQLRequestData"):
        assert [field.name for field in dataclasses.fields(GraphQLRequestData)] == [
            "query",
            "variables",
            "operation_name",
            "extensions",
            "protocol",
        ]


def request_for(query: str, method: str = "GET", operation_name: str | None = None) -> Request:
    params = f"query={query}" + (f"&operationName={operation_name}" if operation_name else "")
    scope = {
        "type": "http",
        "method": method,
        "path": "/graphql",
        "query_string": params.encode(),
        "headers": [(b"accept", b"application/json")],
    }
    return Request(scope)


@pins("InvalidOperationTypeError", "CannotGetOperationTypeError")
async def test_view__refusals_carry_strawberrys_error_as_their_cause():
    @strawberry.type
    class Mutation:
        @strawberry.mutation
        def touch(self) -> str:
            return "t"

    view = GraphQL(strawberry.Schema(Query, mutation=Mutation))
    with leaning_on("InvalidOperationTypeError"):
        with pytest.raises(HTTPException) as refused:
            await view.run(request_for("mutation{touch}"))
        cause = refused.value.__cause__
        assert isinstance(cause, InvalidOperationTypeError)
        assert cause.operation_type is OperationType.MUTATION
    with leaning_on("CannotGetOperationTypeError"):
        with pytest.raises(HTTPException) as refused:
            await view.run(request_for("query A {a}", operation_name="B"))
        assert isinstance(refused.value.__cause__, CannotGetOperationTypeError)


@pins("parse_content_type")
def test_parse_content_type__a_mime_type_and_its_parameters():
    with leaning_on("parse_content_type"):
        assert parse_content_type("application/json; charset=utf-8") == (
            "application/json",
            {"charset": "utf-8"},
        )


@pins("GraphQL.websocket_adapter_class", "ASGIWebSocketAdapter")
def test_websocket_adapter__the_class_the_view_makes_and_what_ours_reads():
    with leaning_on("GraphQL.websocket_adapter_class"):
        assert GraphQL.websocket_adapter_class is ASGIWebSocketAdapter
        assert GraphQLApp.websocket_adapter_class is TextWebSocket
    with leaning_on("ASGIWebSocketAdapter"):
        assert parameters(ASGIWebSocketAdapter.__init__) == ["view", "request", "response"]
        adapter = ASGIWebSocketAdapter(view=GraphQL(toy_schema()), request=None, response="ws")
        assert adapter.ws == "ws" and isinstance(adapter.view, GraphQL)
        assert parameters(ASGIWebSocketAdapter.send_json) == ["message"]


@pins("GraphQL.graphql_transport_ws_handler_class", "BaseGraphQLTransportWSHandler")
def test_transport_ws_handler__the_state_and_hooks_token_transport_ws_uses():
    with leaning_on("GraphQL.graphql_transport_ws_handler_class"):
        handler_class = GraphQL.graphql_transport_ws_handler_class
        assert (get_origin(handler_class) or handler_class) is BaseGraphQLTransportWSHandler
        assert GraphQLApp.graphql_transport_ws_handler_class is TokenTransportWS
    with leaning_on("BaseGraphQLTransportWSHandler"):
        handler = BaseGraphQLTransportWSHandler(
            view=None,
            websocket=None,
            context="context",
            root_value=None,
            schema=toy_schema(),
            connection_init_wait_timeout=timedelta(seconds=1),
        )
        assert handler.context == "context" and handler.websocket is None and handler.view is None
        assert handler.connection_init_received is False
        assert handler.connection_acknowledged is False
        assert handler.connection_init_timeout_task is None
        assert handler.operations == {} and handler.max_subscriptions_per_connection is None
        assert "task" in Operation.__slots__
        for hook, arguments in (
            ("handle_connection_init", ["message"]),
            ("handle_subscribe", ["message"]),
            ("shutdown", []),
            ("send_message", ["message"]),
            ("cleanup_operation", ["operation_id"]),
        ):
            method = getattr(BaseGraphQLTransportWSHandler, hook)
            assert inspect.iscoroutinefunction(method) and parameters(method) == arguments, hook


@pins("ApolloFederationTracingExtension")
def test_federation_tracing__the_extension_federated_tracing_drives_by_hand():
    with leaning_on("ApolloFederationTracingExtension"):
        assert (FTV1_HEADER, FTV1_HEADER_VALUE) == ("apollo-federation-include-trace", "ftv1")
        assert inspect.isgeneratorfunction(ApolloFederationTracingExtension.on_operation)
        assert ApolloFederationTracingExtension._implements_resolve()
        assert callable(ApolloFederationTracingExtension.get_results)


@pins("MissingQueryError", "stream refusals")
async def test_stream__refusals_before_validation_carry_strawberrys_exception():
    @strawberry.type
    class Counting:
        @strawberry.subscription
        async def count(self) -> AsyncGenerator[int, None]:
            yield 1

    schema = strawberry.Schema(Query, subscription=Counting)

    async def first_error_cause(query: str | None, name: str | None = None) -> Any:
        stream = await schema.subscribe(query, operation_name=name)
        async for result in stream:
            assert isinstance(result, PreExecutionError) and result.errors
            return result.errors[0].original_error
        return None

    with leaning_on("MissingQueryError"):
        assert isinstance(await first_error_cause(None), MissingQueryError)
    with leaning_on("stream refusals"):
        unknown = await first_error_cause("subscription A { count }", "B")
        assert isinstance(unknown, CannotGetOperationTypeError)
        assert set(STREAM_REFUSALS) == {
            CannotGetOperationTypeError,
            InvalidOperationTypeError,
            MissingQueryError,
        }


@pins("DefaultCache.cache_map")
async def test_dataloader__its_default_cache_holds_what_it_loaded():
    async def load(keys):
        return list(keys)

    with leaning_on("DefaultCache.cache_map"):
        cache: DefaultCache[str, str] = DefaultCache()
        loader = DataLoader(load_fn=load, cache_map=cache)
        assert not cache.cache_map
        assert await loader.load("k") == "k"
        assert list(cache.cache_map) == ["k"]
        loader.clear("k")
        assert not cache.cache_map


@pins("WebSocketDisconnected")
async def test_websocket_adapter__a_closed_socket_is_websocket_disconnected():
    class Closed:
        async def send_text(self, text):
            raise WebSocketDisconnect(1000)

        async def send_bytes(self, data):
            raise WebSocketDisconnect(1000)

    with leaning_on("WebSocketDisconnected"):
        adapter = ASGIWebSocketAdapter(view=GraphQL(toy_schema()), request=None, response=Closed())
        with pytest.raises(WebSocketDisconnected):
            await adapter.send_json({"type": "ping"})


# graphql-core


@pins(
    "Executor.execute_operation",
    "Executor attributes",
    "Executor.build_resolve_info",
    "MiddlewareManager.get_field_resolver",
)
def test_graphql_core_execution_context__what_the_fast_path_reads_and_overrides():
    seen: dict[str, Any] = {}

    class Recording(Executor):
        def execute_operation(self, serially=None):
            seen["attributes"] = {
                name: getattr(self, name)
                for name in (
                    "operation",
                    "fragment_definitions",
                    "middleware_manager",
                    "field_resolver",
                    "type_resolver",
                    "variable_values",
                    "root_value",
                    "schema",
                    "is_awaitable",
                )
            }
            query_type = self.schema.query_type
            field = query_type.fields["a"]
            path = ResponsePath(None, "a", query_type.name)
            nodes = [self.operation.selection_set.selections[0]]
            seen["info"] = self.build_resolve_info(field, nodes, query_type, path)
            seen["resolver"] = self.middleware_manager.get_field_resolver(self.field_resolver)
            return super().execute_operation(serially)

    def middleware(_next, root, info, **kwargs):
        return _next(root, info, **kwargs)

    schema = toy_schema()._schema
    with leaning_on("Executor.execute_operation"):
        assert parameters(Executor.execute_operation) == ["serially"]
        result = execute(
            schema,
            parse("{ a }"),
            root_value=Query(),
            middleware=[middleware],
            executor_class=Recording,
        )
        assert result.data == {"a": "a"} and "attributes" in seen
    with leaning_on("Executor attributes"):
        attributes = seen["attributes"]
        assert attributes["operation"].operation.value == "query"
        assert attributes["fragment_definitions"] == {}
        assert isinstance(attributes["middleware_manager"], MiddlewareManager)
        assert callable(attributes["field_resolver"]) and callable(attributes["type_resolver"])
        assert attributes["variable_values"] is not None
        assert isinstance(attributes["root_value"], Query)
        assert attributes["schema"] is schema and callable(attributes["is_awaitable"])
    with leaning_on("Executor.build_resolve_info"):
        assert parameters(Executor.build_resolve_info) == [
            "field_def",
            "field_nodes",
            "parent_type",
            "path",
        ]
        assert seen["info"].field_name == "a" and seen["info"].path.as_list() == ["a"]
    with leaning_on("MiddlewareManager.get_field_resolver"):
        assert callable(seen["resolver"])


@pins("graphql.pyutils")
def test_pyutils__path_undefined_inspect_is_iterable():
    with leaning_on("graphql.pyutils"):
        path = ResponsePath(None, "operations", "Query").add_key(0, None).add_key("id", "Node")
        assert path.as_list() == ["operations", 0, "id"]
        assert Undefined is not None and not Undefined
        assert graphql_inspect("x") == "'x'"
        assert is_iterable([1]) and not is_iterable("text")


@pins("get_argument_values")
def test_get_argument_values__a_fields_arguments_from_its_node_and_variables():
    seen: dict[str, Any] = {}

    @strawberry.type
    class Arguments:
        @strawberry.field
        def echo(self, text: str) -> str:
            return text

    class Reading(Executor):
        def execute_operation(self, serially=None):
            definition = self.schema.query_type.fields["echo"]
            node = self.operation.selection_set.selections[0]
            seen["args"] = get_argument_values(definition, node, self.variable_values)
            return super().execute_operation(serially)

    schema = strawberry.Schema(Arguments)._schema
    document = parse("query($t: String!) { echo(text: $t) }")
    with leaning_on("get_argument_values"):
        result = execute(
            schema,
            document,
            root_value=Arguments(),
            variable_values={"t": "hi"},
            executor_class=Reading,
        )
        assert result.data == {"echo": "hi"}
        assert seen["args"] == {"text": "hi"}


@pins("validate_input_value")
def test_validate_input_value__reports_each_problem_with_its_path():
    problems = []
    with leaning_on("validate_input_value"):
        validate_input_value(
            None, GraphQLNonNull(GraphQLString), lambda *args: problems.append(args)
        )
        assert problems, "no problem reported for null in a non-null input"


@pins("variable refusal shape")
def test_variables_refused__no_data_and_errors_without_a_path():
    schema = toy_schema()._schema
    with leaning_on("variable refusal shape"):
        result = execute(schema, parse("query($n: Int!) { a }"), variable_values={"n": "x"})
        assert result.data is None and result.errors
        assert all(error.path is None for error in result.errors)


def catalogue_names() -> set[str]:
    """The internals the catalogue's table lists (its first column, backticked)."""
    rows = re.findall(r"^\| `([^`]+)` \|", CATALOGUE.read_text(), re.M)
    return set(rows)


def test_the_catalogue_lists_every_pin():
    """docs/strawberry-internals.md lists exactly the internals pinned here, each with its
    test's name."""
    text = CATALOGUE.read_text()
    assert catalogue_names() == set(PINS)
    missing = [test for internal, test in PINS.items() if test not in text]
    assert missing == []
