"""Every ``extensions.code`` an error of this API can carry, each spelled once, here.

``server/`` imports them from here (they are in ``resolvers/`` because the resolvers coin
codes too: docs/decisions/0001-layers-held-by-import-linter.md). A test fails when any other
module of ``server/``, ``resolvers/``, ``schema/`` or ``store/`` spells a code as a string
literal. Which error gets which code is decided in ``server.errors`` (GraphQL errors) and
``server.responses`` (requests refused before GraphQL runs).
"""

from typing import Final

BAD_USER_INPUT: Final = "BAD_USER_INPUT"
"""A value the client sent is refused; ``extensions.field`` names it."""
FORBIDDEN: Final = "FORBIDDEN"
"""The viewer's token lacks the right (a scope, or the row is another tenant's)."""
NOT_FOUND: Final = "NOT_FOUND"
"""A malformed or unknown Relay id; an HTTP path that does not exist."""
UNAUTHENTICATED: Final = "UNAUTHENTICATED"
"""No bearer token, or one that is not valid (HTTP 401)."""
SERVICE_UNAVAILABLE: Final = "SERVICE_UNAVAILABLE"
"""The database is unavailable or busy; ``retryable: true``."""
CONFLICT: Final = "CONFLICT"
"""A decision lost its compare-and-set on every retry under contention; nothing was written
and the client may send the same request again (``retryable: true``)."""
INTERNAL_SERVER_ERROR: Final = "INTERNAL_SERVER_ERROR"
"""Anything unexpected, masked; the log has it under the request id."""
BAD_REQUEST: Final = "BAD_REQUEST"
"""An HTTP request refused before GraphQL runs (a body that is not JSON, …)."""
PAYLOAD_TOO_LARGE: Final = "PAYLOAD_TOO_LARGE"
"""A request body over ``MAX_BODY_BYTES`` (HTTP 413)."""
RESPONSE_TOO_LARGE: Final = "RESPONSE_TOO_LARGE"
"""A list asked for after the request's answer reached ``MAX_RESPONSE_BYTES``;
``extensions.field`` names it and ``maxResponseBytes`` gives the limit. Ask for it in a
request of its own (or page on with ``after``)."""
METHOD_NOT_ALLOWED: Final = "METHOD_NOT_ALLOWED"
"""A mutation sent by GET (HTTP 405)."""
NOT_ACCEPTABLE: Final = "NOT_ACCEPTABLE"
"""A subscription sent for a single JSON answer, without ``Accept:
multipart/mixed;subscriptionSpec="1.0"`` (HTTP 406: its stream is not a representation the
request accepts). Subscribe over graphql-transport-ws on ``/graphql``, or over HTTP with that
``Accept``."""
GRAPHQL_PARSE_FAILED: Final = "GRAPHQL_PARSE_FAILED"
"""The query text is not GraphQL."""
GRAPHQL_VALIDATION_FAILED: Final = "GRAPHQL_VALIDATION_FAILED"
"""The document does not validate against the schema, or is over the query limits."""
OPERATION_RESOLUTION_FAILURE: Final = "OPERATION_RESOLUTION_FAILURE"
"""The document has no operation of the given ``operationName``, or several and no name."""
PERSISTED_QUERY_NOT_FOUND: Final = "PERSISTED_QUERY_NOT_FOUND"
"""A persisted query's hash sent alone that no query is registered under (Apollo's APQ)."""
SIGN_IN_REFUSED: Final = "SIGN_IN_REFUSED"
"""A sign-in link's code that opens no session (HTTP 400 from ``/auth/sign-in``): used
already, expired, or never issued here; the message says which. Ask for a new link."""
TOO_MANY_SUBSCRIPTIONS: Final = "TOO_MANY_SUBSCRIPTIONS"
"""A subscription past ``MAX_SUBSCRIPTIONS_PER_CONNECTION`` or ``MAX_SUBSCRIPTIONS_PER_VIEWER``
(this process's); ``extensions.limit`` gives the bound. End another one first."""
EVENTS_COLLECTED: Final = "EVENTS_COLLECTED"
"""A subscription's ``after`` is older than the oldest event the log keeps: events after it
may have been collected with their operations. Read the rows again and subscribe without
``after``."""

CODES: Final = frozenset(
    value for name, value in dict(globals()).items() if name.isupper() and isinstance(value, str)
)
"""Every code above."""
