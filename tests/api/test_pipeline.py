"""The GraphQL pipeline (``server/pipeline.py``): its extensions in their order, the one
Strawberry internal it relies on, and the operation name the client gave."""

from functools import partial

import strawberry
from graphql import GraphQLSchema, ValidationRule
from strawberry.extensions import AddValidationRules, MaxTokensLimiter

from resolvers.errors import CodedValidation, ErrorCodes
from resolvers.permissions import Authorization
from resolvers.strawberry_internals import graphql_schema
from server.document_cache import DocumentCache
from server.federated_tracing import FederatedTracing
from server.graph import build_schema
from server.pipeline import pipeline
from server.query_limits import QueryLimits
from server.settings import Settings
from server.telemetry import OperationTelemetry


def kinds(extensions):
    return [
        extension.func if isinstance(extension, partial) else extension for extension in extensions
    ]


def test_pipeline__order_as_its_docstring_explains():
    assert kinds(pipeline(Settings())) == [
        OperationTelemetry,
        FederatedTracing,
        ErrorCodes,
        Authorization,
        MaxTokensLimiter,
        QueryLimits,
        CodedValidation,
        DocumentCache,
    ]


def test_pipeline__no_introspection_rule_added_before_the_rules_are_coded():
    assert kinds(pipeline(Settings(introspection=False))) == [
        OperationTelemetry,
        FederatedTracing,
        ErrorCodes,
        Authorization,
        MaxTokensLimiter,
        QueryLimits,
        AddValidationRules,
        CodedValidation,
        DocumentCache,
    ]


def test_schema__runs_the_pipeline_and_nothing_else():
    schema = build_schema(Settings())
    assert [type(extension) for extension in schema.get_extensions()] == kinds(pipeline(Settings()))


def test_graphql_schema__the_schema_strawberry_validates_against():
    seen = []

    class Seen(ValidationRule):
        def __init__(self, context):
            super().__init__(context)
            seen.append(context.schema)

    @strawberry.type
    class Query:
        answer: int = 42

    schema = strawberry.Schema(Query, extensions=[partial(AddValidationRules, [Seen])])
    assert schema.execute_sync("{ answer }", root_value=Query()).data == {"answer": 42}
    assert seen == [graphql_schema(schema)]
    assert isinstance(seen[0], GraphQLSchema)


async def test_operation_name__the_first_operation_named_explicitly_runs(gql):
    document = "query Now { serverTime }\nquery Other { serverTime }"
    response = await gql.http.post("/graphql", json={"query": document, "operationName": "Now"})
    body = response.json()
    assert "errors" not in body
    assert isinstance(body["data"]["serverTime"], int)
