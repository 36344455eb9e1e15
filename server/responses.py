"""JSON error responses for requests refused before any GraphQL runs, in the shape every
GraphQL error has: ``{"errors": [{"message": …, "extensions": {"code": …}}]}``; and the one
JSON encoder of every response body (``encode_json``, ``JsonResponse``)."""

import json
from typing import Any

import orjson
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from resolvers.codes import (
    BAD_REQUEST,
    FORBIDDEN,
    METHOD_NOT_ALLOWED,
    NOT_ACCEPTABLE,
    NOT_FOUND,
    PAYLOAD_TOO_LARGE,
    SERVICE_UNAVAILABLE,
    UNAUTHENTICATED,
)


def encode_json(data: object) -> bytes:
    """``data`` as a JSON body, by orjson (several times faster than ``json.dumps``). What
    orjson refuses (an integer past 64 bits, a string holding a lone surrogate, which a client
    may send inside JSON as ``\\udc00`` and a message may echo) goes to the standard encoder,
    which writes every character past ASCII as an escape."""
    try:
        return orjson.dumps(data)
    except TypeError:
        return json.dumps(data).encode()


class JsonResponse(JSONResponse):
    """Starlette's ``JSONResponse`` with its body by ``encode_json`` (Starlette's own encoder
    fails on a lone surrogate: a 500 for a message that echoes one)."""

    def render(self, content: Any) -> bytes:
        return encode_json(content)


MAX_ECHOED_CHARS = 200
STATUS_CODES = {
    401: UNAUTHENTICATED,
    403: FORBIDDEN,
    404: NOT_FOUND,
    405: METHOD_NOT_ALLOWED,
    406: NOT_ACCEPTABLE,
    413: PAYLOAD_TOO_LARGE,
}


def method_not_allowed(message: str) -> JSONResponse:
    """A mutation sent by GET: 405 with ``Allow: POST`` (GraphQL over HTTP)."""
    return request_error(405, message, headers={"Allow": "POST"})


SUBSCRIBE_WITH_A_STREAM = (
    "a subscription streams its results, which a single JSON answer cannot carry: subscribe "
    "over graphql-transport-ws on /graphql, or over HTTP with "
    'Accept: multipart/mixed;subscriptionSpec="1.0"'
)


def subscription_not_acceptable() -> JSONResponse:
    """A subscription sent for a single JSON answer (a POST or GET without the multipart
    ``Accept``): 406, saying how to subscribe. As a mutation by GET is refused by its method
    (405), this one is refused by what it accepts: a stream is not one of its
    representations."""
    return request_error(406, SUBSCRIBE_WITH_A_STREAM)


def request_error(
    status: int,
    message: str,
    headers: dict[str, str] | None = None,
    code: str | None = None,
    retryable: bool = False,
) -> JSONResponse:
    """A GraphQL-shaped error response for a request refused before execution, its code
    ``code`` or the HTTP status's (with ``retryable: true`` when ``retryable``); the message
    is cut to 200 characters, since some echo what the client sent."""
    code = code or STATUS_CODES.get(status, BAD_REQUEST)
    if len(message) > MAX_ECHOED_CHARS:
        message = message[:MAX_ECHOED_CHARS] + "…"
    extensions: dict[str, object] = {"code": code}
    if retryable:
        extensions["retryable"] = True
    return JsonResponse(
        {"errors": [{"message": message, "extensions": extensions}]},
        status_code=status,
        headers=headers or {},
    )


async def http_exception(request: Request, exc: Exception) -> Response:
    """Starlette's own refusals (a method a route does not take, an unknown path) in the same
    JSON shape, with the headers Starlette chose (``Allow`` on a 405)."""
    assert isinstance(exc, HTTPException), "registered for HTTPException only"
    if exc.status_code in (204, 304):
        return Response(status_code=exc.status_code, headers=exc.headers)
    return request_error(exc.status_code, exc.detail, headers=dict(exc.headers or {}))


def database_unavailable() -> JSONResponse:
    """503 ``SERVICE_UNAVAILABLE`` (retryable), for a request refused before GraphQL runs
    because the database could not serve it (a session's check, a sign-in)."""
    return request_error(
        503, "the database is unavailable", code=SERVICE_UNAVAILABLE, retryable=True
    )
