"""What a subscription resolver needs of live updates: the connection's ``Session`` (its
viewer, when its token expires, its sign-in session's check) and ``LiveHub``, the streams a
resolver reads from. The process's hub that serves them is ``server.live.Hub``, which the
server puts in the request context; resolvers see only this interface, so the layers keep
pointing down (server -> resolvers)."""

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol, TypeVar

from graphql import GraphQLError

from resolvers.codes import UNAUTHENTICATED
from resolvers.permissions import Viewer
from store.records import OperationEventRecord, WatchEventRecord

SESSION_RECHECK_S = 5.0
"""How often a stream whose token is a sign-in session's checks that session again: one
signed out (on any server process) ends the stream with ``UNAUTHENTICATED`` within this long."""

SessionCheck = Callable[[], Awaitable[None]]
"""Checks a sign-in session again; raises ``UNAUTHENTICATED`` (a ``GraphQLError``) once it was
signed out or has ended."""


@dataclass
class Session:
    """The subscriptions of one connection: a WebSocket, or one HTTP request. ``viewer`` is
    its token's; ``expires_at`` (epoch seconds) when the token stops being accepted (its
    ``exp`` plus the leeway; None: never); ``check`` the token's sign-in session's check
    (None: the token is no session's)."""

    viewer: Viewer
    expires_at: float | None = None
    open: int = 0
    check: SessionCheck | None = None

    def wait_s(self) -> float | None:
        """How long a stream may wait for news before ``still_valid``: until the token
        expires, and at most ``SESSION_RECHECK_S`` for a session's token (None: no bound);
        raises ``UNAUTHENTICATED`` once the token has expired."""
        left = self.seconds_left()
        if self.check is None:
            return left
        return SESSION_RECHECK_S if left is None else min(left, SESSION_RECHECK_S)

    async def still_valid(self) -> None:
        """After a wait of ``wait_s`` ran out: raises ``UNAUTHENTICATED`` when the token has
        expired or its session has ended, else returns (the stream waits again)."""
        self.seconds_left()
        if self.check is not None:
            await self.check()

    def seconds_left(self) -> float | None:
        """Seconds until the token expires (None: never); raises ``UNAUTHENTICATED`` once it
        has."""
        if self.expires_at is None:
            return None
        left = self.expires_at - time.time()
        if left <= 0:
            raise token_expired()
        return left


def token_expired() -> GraphQLError:
    """The error that ends a subscription whose token has expired."""
    return GraphQLError(
        "the token has expired: subscribe again with a new one",
        extensions={"code": UNAUTHENTICATED},
    )


Event = TypeVar("Event", OperationEventRecord, WatchEventRecord)
ReadAfter = Callable[[str | None, int], Awaitable[list[Event]]]
"""A stream's read of its log: the events after a position (None: from the oldest kept), at
most so many, those of its filter only; raises ``EventsCollected`` when events past the
position were collected."""


class LiveHub(Protocol):
    """The streams of this process's subscriptions (``server.live.Hub``)."""

    def events(
        self, session: Session, name: str, read: ReadAfter[Event], after: str | None
    ) -> AsyncIterator[Event]:
        """The events of log ``name`` (``"operation"`` or ``"watch"``) that ``read``
        returns, after the event ``after`` (None: from the log's head now), in log order,
        then each as it commits. Raises ``EVENTS_COLLECTED``, ``TOO_MANY_SUBSCRIPTIONS``,
        ``InvalidInput`` naming ``after``; ends with ``UNAUTHENTICATED`` when the session's
        token expires or its sign-in ends."""
        ...

    def work(
        self, session: Session, connector: str | None
    ) -> AsyncIterator[tuple[str | None, int]]:
        """``workAvailable``: ``(connector name or None for any, epoch ms)`` each time work
        may have become leasable for ``connector`` (None: any), the first at once. Raises
        ``TOO_MANY_SUBSCRIPTIONS``; ends with ``UNAUTHENTICATED`` as ``events`` does."""
        ...
