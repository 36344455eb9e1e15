"""``VariableBounds``: variables past a size any input takes, refused before validation."""

from collections.abc import Iterator

from strawberry.extensions import SchemaExtension

from server.errors.variables import operation_of, oversized_variables
from server.strawberry_internals import graphql_schema


class VariableBounds(SchemaExtension):
    """Refuses variables past a size any input takes (``oversized_variables``) before
    validation, as the query limits refuse a document: their errors are the request's
    (``BAD_USER_INPUT`` naming the variable and the field, no ``data``), on every path, a
    subscription's too, and nothing is coerced. Last in the pipeline, so the document
    cache's validation has run: a document it found invalid is answered with that."""

    def on_validate(self) -> Iterator[None]:
        context = self.execution_context
        operation = operation_of(context)
        if not context.pre_execution_errors and operation is not None:
            schema = graphql_schema(context.schema)
            refused = oversized_variables(schema, operation, context.variables)
            if refused:
                context.pre_execution_errors = refused
        yield
