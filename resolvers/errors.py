"""The errors resolvers raise and the request errors the pipeline's steps make: each
carries its ``extensions.code`` from the moment it is created (the codes: ``resolvers.codes``;
the steps that give every other error its code: ``server.errors``)."""

from typing import Any

from graphql import GraphQLError

from resolvers.codes import BAD_USER_INPUT, NOT_FOUND


class RequestError(GraphQLError):
    """An error that stopped the request before execution (parse, validation, variables,
    operation selection): the response carries no ``data`` entry."""


def bad_input(field: str, problem: str) -> GraphQLError:
    """A ``BAD_USER_INPUT`` error naming ``field``."""
    return GraphQLError(f"{field}: {problem}", extensions={"code": BAD_USER_INPUT, "field": field})


def not_found(message: str) -> GraphQLError:
    """A ``NOT_FOUND`` error."""
    return GraphQLError(message, extensions={"code": NOT_FOUND})


def request_error(error: GraphQLError, extensions: dict[str, Any]) -> RequestError:
    """``error`` as a ``RequestError`` with ``extensions``."""
    return RequestError(
        error.message,
        nodes=error.nodes,
        source=error.source,
        positions=error.positions,
        path=error.path,
        original_error=error.original_error,
        extensions=extensions,
    )
