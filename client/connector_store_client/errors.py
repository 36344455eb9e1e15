"""The errors the client raises, by type: a GraphQL error carries its ``extensions.code``."""

from typing import Any

REPEATABLE_CODES = frozenset({"CONFLICT", "SERVICE_UNAVAILABLE"})
"""Codes of errors that wrote nothing and may be sent again as they were."""


class ConnectorStoreError(Exception):
    """Every error of this client."""


class GraphQLResponseError(ConnectorStoreError):
    """The server answered with GraphQL errors. ``code`` is the first error's
    ``extensions.code`` (e.g. ``BAD_USER_INPUT``), ``field`` its ``extensions.field`` (the
    input field refused, when one was), ``errors`` every error as the server sent it."""

    def __init__(self, errors: list[dict[str, Any]]) -> None:
        first = errors[0] if errors else {}
        extensions = first.get("extensions") or {}
        self.errors = errors
        self.code: str | None = extensions.get("code")
        self.field: str | None = extensions.get("field")
        self.extensions: dict[str, Any] = extensions
        super().__init__(f"{self.code}: {first.get('message', 'GraphQL error')}")

    @property
    def repeatable(self) -> bool:
        """True when the call wrote nothing and may be sent again (``REPEATABLE_CODES``)."""
        return self.code in REPEATABLE_CODES


class EventsCollected(GraphQLResponseError):
    """``follow_events``' ``after`` is older than the oldest event the server keeps
    (``EVENTS_COLLECTED``): the events in between are gone; start again from a fresh read."""


class UnsendableVariables(ConnectorStoreError, ValueError):
    """A call's variables that are not JSON (an object JSON cannot hold, NaN or an
    infinity): nothing was sent."""


class TransportError(ConnectorStoreError):
    """The call's answer was lost (a connection error, a timeout, an HTTP status other than
    200): whether it was applied is unknown."""


def error_for(errors: list[dict[str, Any]]) -> GraphQLResponseError:
    """The typed error for a response's ``errors``."""
    code = ((errors[0] if errors else {}).get("extensions") or {}).get("code")
    if code == "EVENTS_COLLECTED":
        return EventsCollected(errors)
    return GraphQLResponseError(errors)
