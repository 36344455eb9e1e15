"""What a subscription resolver needs of live updates: the connection's ``Session`` (its
viewer, when its token expires, its sign-in session's check) and ``LiveHub``, the streams a
resolver reads from. The process's hub that serves them is ``server.live.Hub``, which the
server puts in the request context; resolvers see only this interface
(docs/decisions/0001-layers-held-by-import-linter.md)."""

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

from graphql import GraphQLError

from resolvers.codes import UNAUTHENTICATED
from resolvers.permissions import Viewer
from store.records import OperationEventRecord, WatchEventRecord

SESSION_RECHECK_S = 5.0
"""How often a stream whose token is a sign-in session's checks that session again, however
many events it sends meanwhile: one signed out (on any server process) ends the stream with
``UNAUTHENTICATED`` within this long."""

SessionCheck = Callable[[], Awaitable[None]]
"""Checks a sign-in session again; raises ``UNAUTHENTICATED`` (a ``GraphQLError``) once it was
signed out or has ended."""


@dataclass
class Session:
    """The subscriptions of one connection: a WebSocket, or one HTTP request. ``viewer`` is
    its token's; ``expires_at`` (epoch seconds) when the token stops being accepted (its
    ``exp`` plus the leeway, or its session's end; None: never); ``sign_in`` the sign-in
    session the token belongs to (None: a token of no session, a worker's); ``check`` that
    session's check (None: nothing to check in the database, or the connection checks it
    itself, as a WebSocket does)."""

    viewer: Viewer
    expires_at: float | None = None
    open: int = 0
    check: SessionCheck | None = None
    sign_in: str | None = None
    check_due: float = field(default_factory=lambda: time.monotonic() + SESSION_RECHECK_S)

    @property
    def subject(self) -> tuple[str, str]:
        """Whose subscriptions these are, for the per-subject bound: the sign-in session
        (each its own, whatever its ``sub``), else the token's subject."""
        if self.sign_in is not None:
            return ("session", self.sign_in)
        return ("sub", self.viewer.did or "")

    async def valid(self) -> None:
        """Raises ``UNAUTHENTICATED`` once the token has expired, and once its sign-in
        session has ended when ``SESSION_RECHECK_S`` has passed since its last check (the
        check runs then). A stream calls it before each item it sends and after each wait
        (``wait_s``), so neither a flow of events nor silence keeps it open past either."""
        self.seconds_left()
        if self.check is not None and time.monotonic() >= self.check_due:
            self.check_due = time.monotonic() + SESSION_RECHECK_S
            await self.check()

    def wait_s(self) -> float | None:
        """How long a stream may wait for news before ``valid``: until the token expires,
        and at most until its session's next check (None: no bound); raises
        ``UNAUTHENTICATED`` once the token has expired."""
        left = self.seconds_left()
        if self.check is None:
            return left
        due = max(0.0, self.check_due - time.monotonic())
        return due if left is None else min(left, due)

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
