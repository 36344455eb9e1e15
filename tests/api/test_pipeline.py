"""The GraphQL pipeline: the one Strawberry internal it relies on, and the operation name the
client gave."""

from functools import partial

import strawberry
from graphql import GraphQLSchema, ValidationRule
from strawberry.extensions import AddValidationRules

from resolvers.strawberry_internals import graphql_schema


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
