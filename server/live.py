"""Live updates in one process (docs/scaling.md, 'Live updates across processes'): the
subscriptions' fan-out and bounds; the resolvers read it as ``resolvers.live.LiveHub``.

``Hub`` holds this process's subscriptions. ``workAvailable`` subscribers are told which
connectors may have work that has just become leasable: from the store's wake-ups
(``store.wakeups``) and from a timer set to the next moment work comes due without a write
(``next_due_after``), re-armed after every wake-up and at least every ``recheck_ms``; the
timer runs only while someone waits for work. ``operationEvents`` and ``watchEvents``
streams each read the event log from their own position (``store.events``), a page at a
time, then wait until the log's head moves; one task per process watches the heads (on
PostgreSQL on migration 0011's ``NOTIFY`` and every ``LOG_RECHECK_S``, on SQLite every
``store.wakeups.DEFAULT_POLL_S``). Why it is built so:
docs/decisions/0007-live-hub-wakeups-timer-and-log-streams.md.

Bounds (``TOO_MANY_SUBSCRIPTIONS``): ``per_connection`` subscriptions on one connection (a
WebSocket, or one HTTP multipart request), and ``per_viewer`` in this process for one
subject (``Session.subject``: each sign-in session its own, else the token's ``sub``) on
each of two channels (``channel``): ``workAvailable``, the workers' wake-ups, and the event
streams; so however many streams a person's tab opens, a worker's ``workAvailable`` is never
refused for it. And ``queue`` items pending for one subscription: a ``workAvailable`` waiter
coalesces (a connector pending once; past ``queue`` connector names, one signal for any
connector).

A stream ends with ``UNAUTHENTICATED`` when its token expires, and within
``SESSION_RECHECK_S`` of its sign-in session's end (signed out on any process): it calls
``Session.valid`` before each item it sends and after each wait, so a flow of events never
keeps it open.
"""

import asyncio
import contextlib
import logging
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Protocol

from graphql import GraphQLError

from resolvers.codes import EVENTS_COLLECTED, TOO_MANY_SUBSCRIPTIONS
from resolvers.live import Event, ReadAfter, Session
from store import ConnectorStore, background
from store.errors import EventsCollected, InvalidInput, StoreError
from store.events import BEFORE_FIRST, position
from store.wakeups import DEFAULT_POLL_S

log = logging.getLogger("connector_store.live")

MIN_RECHECK_S = 0.02
"""The shortest pause after a wake-up before the timer looks at the database again, however
many wake-ups arrive meanwhile: under a stream of writes the timer's queries stay bounded."""
LOG_RECHECK_S = 0.25
"""PostgreSQL: how often the heads of the streamed logs are read without a notification (an
event committed while an older transaction held the safe horizon back is readable only
once that transaction ends, which notifies nobody)."""
EVENT_PAGE = 100
"""Events a stream reads from the log at a time."""
TIMER_SLACK_S = 0.001
"""Added to each timer's sleep: the event loop may wake a little early, before the store's
clock has reached the moment the timer was set to."""


@dataclass(frozen=True, slots=True)
class LiveLimits:
    """The bounds of ``Hub`` (settings ``MAX_SUBSCRIPTIONS_PER_CONNECTION``,
    ``MAX_SUBSCRIPTIONS_PER_VIEWER``, ``SUBSCRIPTION_QUEUE``, ``WAKEUP_RECHECK_MS``)."""

    per_connection: int = 100
    per_viewer: int = 1000
    queue: int = 1000
    recheck_ms: int = 1000


class Observer(Protocol):
    """What the metrics are told (``server.metrics.Metrics``)."""

    def opened(self, field: str) -> None: ...

    def closed(self, field: str) -> None: ...

    def delivered(self, field: str) -> None: ...


WORK_FIELD = "workAvailable"
"""The workers' wake-up channel: its subscriptions are counted apart from the event
streams' (``channel``), so no number of event streams refuses it."""


def too_many(limit: int, what: str, setting: str) -> GraphQLError:
    """``TOO_MANY_SUBSCRIPTIONS`` for the bound ``limit`` of ``what`` (its ``setting``)."""
    return GraphQLError(
        f"at most {limit} {what} ({setting}): end one first",
        extensions={"code": TOO_MANY_SUBSCRIPTIONS, "limit": limit},
    )


def channel(name: str) -> str:
    """The budget a subscription of root field ``name`` counts against: ``workAvailable``'s
    own, or the event streams' (``operationEvents`` and ``watchEvents`` together)."""
    return WORK_FIELD if name == WORK_FIELD else "event streams"


@dataclass(eq=False)
class WorkWaiter:
    """One ``workAvailable`` subscription: its connector (None: every connector) and the
    connector names pending, each once, at most ``limit`` of them (past it, one None: any
    connector)."""

    connector: str | None
    limit: int
    pending: dict[str | None, None] = field(default_factory=dict)
    ready: asyncio.Event = field(default_factory=asyncio.Event)

    def tell(self, name: str | None) -> None:
        """Work may be there for connector ``name`` (None: for any)."""
        if self.connector is not None:
            name = self.connector
        if name in self.pending or None in self.pending:
            return
        if name is None or len(self.pending) >= self.limit:
            self.pending.clear()
            name = None
        self.pending[name] = None
        self.ready.set()

    def take(self) -> list[str | None]:
        """The names pending, oldest first, and none pending after."""
        names = list(self.pending)
        self.pending.clear()
        self.ready.clear()
        return names


@dataclass(frozen=True, slots=True)
class EventLog:
    """One event log as the hub streams it: its subscription ``field`` and its readers in
    ``store.events``."""

    field: str
    head: Callable[[], Awaitable[str | None]]


def events_collected() -> GraphQLError:
    """The error of a stream asked to resume after events the log no longer keeps."""
    return GraphQLError(
        "events after `after` may have been collected: read the rows again and subscribe "
        "without `after`",
        extensions={"code": EVENTS_COLLECTED, "field": "after"},
    )


def caught_up(cursor: str | None, known: str | None) -> str | None:
    """A stream's position after a short page read from ``cursor``: ``known``, a head of the
    log read before that page, when it is later. The page held every event of the stream's
    filter up to that head (the safe horizon only moves forward), so the stream stands past
    the events its filter skipped, and a collection of them alone does not end it with
    ``EVENTS_COLLECTED``."""
    if known is None or (
        cursor is not None and position("after", cursor) >= position("after", known)
    ):
        return cursor
    return known


def stopped(task: "asyncio.Task[None]") -> None:
    """Log a timer that ended other than by being stopped: its waiters would wait forever."""
    if not task.cancelled() and task.exception() is not None:
        log.error("live: the work timer stopped", exc_info=task.exception())


class Hub:
    """This process's subscriptions and what feeds them (see the module docstring); the
    ``resolvers.live.LiveHub`` the subscription resolvers read from."""

    def __init__(
        self,
        store: ConnectorStore,
        limits: LiveLimits | None = None,
        observer: Observer | None = None,
    ) -> None:
        self.store = store
        self.limits = limits or LiveLimits()
        self.observer = observer
        self.waiters: dict[str | None, set[WorkWaiter]] = {}
        self.subjects: Counter[tuple[str, str, str]] = Counter()
        """Open subscriptions by (channel, kind of subject, subject): ``slot``'s counts."""
        self.wanted = asyncio.Event()
        self.recheck = asyncio.Event()
        events = store.events
        self.logs = {
            "operation": EventLog("operationEvents", events.operation_events_head),
            "watch": EventLog("watchEvents", events.watch_events_head),
        }
        self.streams: Counter[str] = Counter()
        self.heads: dict[str, str | None] = {}
        self.grown = {name: asyncio.Event() for name in self.logs}
        self.streaming = asyncio.Event()
        self.look = asyncio.Event()

    def logged(self, table: str | None) -> None:
        """An event log's table grew (None: either may have): read the heads of every
        streamed log now (one probe each; which table grew does not narrow them)."""
        self.look.set()

    def _moved(self, name: str) -> None:
        """Log ``name``'s head moved: wake its streams (each waits on the event it took
        before its last read, so none misses a move)."""
        moved, self.grown[name] = self.grown[name], asyncio.Event()
        moved.set()

    def wake(self, name: str | None) -> None:
        """A write may have made connector ``name``'s work leasable (None: any connector's):
        tell its waiters and those of every connector, and look at the timer again."""
        if name is None:
            targets = [waiter for group in self.waiters.values() for waiter in group]
        else:
            targets = [*self.waiters.get(name, ()), *self.waiters.get(None, ())]
        for waiter in targets:
            waiter.tell(name)
        self.recheck.set()

    @contextlib.asynccontextmanager
    async def running(self, listen_url: str | None = None) -> AsyncIterator[None]:
        """Listen for wake-ups (``store.wakeups``; ``listen_url``: PostgreSQL's direct
        connection) and run the timer, for the block."""
        async with self.store.wakeups.listening(
            self.wake, listen_url=listen_url, wanted=self.wanted, logged=self.logged
        ):
            tasks = [
                asyncio.create_task(self._timer(), name="connector-store-live-timer"),
                asyncio.create_task(self._heads(), name="connector-store-live-heads"),
            ]
            for task in tasks:
                task.add_done_callback(stopped)
            try:
                yield
            finally:
                await background.stop(*tasks)

    async def _heads(self) -> None:
        """While someone streams a log: read the head of each streamed log, wake its
        streams when it moved, then wait for a notification (PostgreSQL) or the next look
        (``LOG_RECHECK_S``; SQLite: ``DEFAULT_POLL_S``)."""
        pause = LOG_RECHECK_S if self.store.db.is_postgres else DEFAULT_POLL_S
        while True:
            await self.streaming.wait()
            self.look.clear()
            for name, event_log in self.logs.items():
                if not self.streams[name]:
                    continue
                try:
                    head = await event_log.head()
                except StoreError as error:
                    log.warning("live: the head of the %s log could not be read: %s", name, error)
                    continue
                if name not in self.heads or head != self.heads[name]:
                    self.heads[name] = head
                    self._moved(name)
            await background.set_within(self.look, pause)

    async def _timer(self) -> None:
        """While someone waits for work: tell the connectors of what became leasable since
        the last look (``due_between``), then sleep until the next such moment
        (``next_due_after``), a wake-up, or ``recheck_ms``, whichever comes first. A wake-up
        that arrives while the database is read is kept for the next round (the event is
        cleared only before the reads)."""
        checked: int | None = None
        recheck_s = self.limits.recheck_ms / 1000
        while True:
            await self.wanted.wait()
            self.recheck.clear()
            now = self.store.clock()
            delay = recheck_s
            try:
                if checked is not None and now > checked:
                    for name in await self.store.wakeups.due_between(checked, now):
                        self.wake(name)
                checked = now if checked is None or now > checked else checked
                due = await self.store.wakeups.next_due_after(now)
                if due is not None:
                    delay = min(delay, (due - now) / 1000)
            except StoreError as error:
                log.warning("live: the work timer could not read the database: %s", error)
            if await background.set_within(self.recheck, max(delay, 0) + TIMER_SLACK_S):
                await asyncio.sleep(MIN_RECHECK_S)

    @contextlib.contextmanager
    def slot(self, session: Session, name: str) -> Iterator[None]:
        """Count one subscription of field ``name`` on ``session`` for the block; raises
        ``TOO_MANY_SUBSCRIPTIONS`` past a bound: ``per_connection`` on the connection, and
        ``per_viewer`` of ``name``'s channel (``channel``) for the session's subject
        (``Session.subject``: a sign-in session, else the token's ``sub``). The check and the
        count are one step of the event loop: the bound is exact however many subscribe at
        once."""
        held = (channel(name), *session.subject)
        if session.open >= self.limits.per_connection:
            raise too_many(
                self.limits.per_connection,
                "subscriptions per connection",
                "MAX_SUBSCRIPTIONS_PER_CONNECTION",
            )
        if self.subjects[held] >= self.limits.per_viewer:
            whose = "sign-in session" if session.sign_in is not None else "token subject"
            raise too_many(
                self.limits.per_viewer,
                f"{held[0]} subscriptions per {whose}",
                "MAX_SUBSCRIPTIONS_PER_VIEWER",
            )
        session.open += 1
        self.subjects[held] += 1
        if self.observer is not None:
            self.observer.opened(name)
        try:
            yield
        finally:
            session.open -= 1
            self.subjects[held] -= 1
            if not self.subjects[held]:
                del self.subjects[held]
            if self.observer is not None:
                self.observer.closed(name)

    async def events(
        self, session: Session, name: str, read: ReadAfter[Event], after: str | None
    ) -> AsyncIterator[Event]:
        """The events of log ``name`` (``"operation"`` or ``"watch"``) that ``read`` returns
        (its filter), after the event ``after`` (None: from the log's head now, so only what
        commits from now on), in log order with no gap and no repeat, then each as it
        commits. Raises ``EVENTS_COLLECTED`` when events past ``after`` were collected (at
        the start, or later while the stream's position stands below what a collection
        reached: never a silent gap), ``TOO_MANY_SUBSCRIPTIONS`` past a bound; ends with
        ``UNAUTHENTICATED`` when the session's token expires or its sign-in ends; raises
        ``InvalidInput`` naming ``after`` for one that is not a sequence or is past the
        newest sequence the log ever handed out (from another database, or one restored
        from an older backup); one up to it stays valid when the newest events were
        collected, and ``BEFORE_FIRST`` always is (a head read before the log's first
        event)."""
        event_log = self.logs[name]
        await session.valid()
        if after is not None and after != BEFORE_FIRST:
            resume = position("after", after)
            head = await event_log.head()
            if head is None or resume > position("after", head):
                raise InvalidInput("after", "is past the newest sequence the log handed out")
        with self.slot(session, event_log.field):
            self.streams[name] += 1
            self.streaming.set()
            try:
                cursor = after if after is not None else await event_log.head()
                while True:
                    grown, known = self.grown[name], self.heads.get(name)
                    try:
                        page = await read(cursor, EVENT_PAGE)
                    except EventsCollected:
                        raise events_collected() from None
                    for event in page:
                        await session.valid()
                        cursor = event.sequence
                        if self.observer is not None:
                            self.observer.delivered(event_log.field)
                        yield event
                    if len(page) == EVENT_PAGE:
                        continue
                    cursor = caught_up(cursor, known)
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(session.wait_s()):
                            await grown.wait()
                    await session.valid()
            finally:
                self.streams[name] -= 1
                if not +self.streams:
                    self.streaming.clear()

    async def work(
        self, session: Session, connector: str | None
    ) -> AsyncIterator[tuple[str | None, int]]:
        """``workAvailable``: ``(connector name or None for any, epoch ms)`` each time work
        may have become leasable for ``connector`` (None: any connector), the first at once
        (whatever committed before the subscription started is not missed: a worker drains
        after each signal). Ends with ``UNAUTHENTICATED`` when the session's token expires or
        its sign-in ends; raises ``TOO_MANY_SUBSCRIPTIONS`` past a bound."""
        await session.valid()
        with self.slot(session, WORK_FIELD):
            waiter = WorkWaiter(connector, self.limits.queue)
            self.waiters.setdefault(connector, set()).add(waiter)
            self.wanted.set()
            waiter.tell(connector)
            try:
                while True:
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(session.wait_s()):
                            await waiter.ready.wait()
                    await session.valid()
                    for name in waiter.take():
                        await session.valid()
                        if self.observer is not None:
                            self.observer.delivered(WORK_FIELD)
                        yield name, self.store.clock()
            finally:
                group = self.waiters.get(connector, set())
                group.discard(waiter)
                if not group:
                    self.waiters.pop(connector, None)
                if not self.waiters:
                    self.wanted.clear()
