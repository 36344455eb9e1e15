"""The hub's pure parts (server.live): a workAvailable waiter coalesces what is pending,
so a reader that does not keep up costs a bounded amount, however many wake-ups arrive; and
its background loops stop when told, even at the moment they are woken."""

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import pytest
from graphql import GraphQLError

import resolvers.live
from resolvers.codes import TOO_MANY_SUBSCRIPTIONS, UNAUTHENTICATED
from resolvers.live import Session
from resolvers.permissions import Viewer
from server.live import Hub, LiveLimits, WorkWaiter
from store.errors import InvalidInput


def test_work_waiter__a_connector_pending_once_however_often_told():
    waiter = WorkWaiter(None, limit=10)
    for _ in range(10_000):
        waiter.tell("calendar")
        waiter.tell("drive")
    assert waiter.take() == ["calendar", "drive"]
    assert waiter.take() == [] and not waiter.ready.is_set()


def test_work_waiter__of_one_connector_hears_any_wake_up_as_its_own():
    waiter = WorkWaiter("calendar", limit=10)
    waiter.tell(None)
    waiter.tell("calendar")
    assert waiter.take() == ["calendar"]


def test_work_waiter__past_its_limit_one_signal_for_any_connector():
    waiter = WorkWaiter(None, limit=3)
    for name in ("a", "b", "c", "d", "e"):
        waiter.tell(name)
    assert waiter.take() == [None]
    waiter.tell(None)
    waiter.tell("a")
    assert waiter.take() == [None]


class FakeEvents:
    """Event logs that stay empty (these tests stream no log)."""

    async def operation_events_head(self) -> None:
        return None

    watch_events_head = operation_events_head


class FakeStore:
    """The hub needs only a clock and (unused here) the event logs' readers."""

    events = FakeEvents()

    def clock(self) -> int:
        return 1


class FakeWakeups:
    """Wake-ups that never come and a database with nothing due."""

    @contextlib.asynccontextmanager
    async def listening(self, wake: object, **_: object) -> AsyncIterator[None]:
        yield

    async def due_between(self, start: int, end: int) -> list[str]:
        return []

    async def next_due_after(self, now: int) -> None:
        return None


class FakeDatabase:
    is_postgres = False


class RunningStore(FakeStore):
    """What ``Hub.running`` needs besides: the wake-ups and the backend's kind."""

    wakeups = FakeWakeups()
    db = FakeDatabase()


async def test_hub__a_reader_that_does_not_read_keeps_one_signal_pending():
    hub = Hub(FakeStore())  # type: ignore[arg-type]
    stream = hub.work(Session(Viewer.service()), "calendar")
    assert await anext(stream) == ("calendar", 1)
    for _ in range(100_000):
        hub.wake("calendar")
    [waiter] = hub.waiters["calendar"]
    assert list(waiter.pending) == ["calendar"]
    assert await anext(stream) == ("calendar", 1)
    await stream.aclose()
    assert hub.waiters == {} and hub.subjects == {} and not hub.wanted.is_set()


async def test_hub__bounds_per_connection_and_per_viewer():
    hub = Hub(FakeStore(), LiveLimits(per_connection=1, per_viewer=2))  # type: ignore[arg-type]
    first, second = Session(Viewer.service()), Session(Viewer.service())
    streams = [hub.work(first, None), hub.work(second, None)]
    for stream in streams:
        await anext(stream)
    for session in (first, Session(Viewer.service())):
        with pytest.raises(Exception) as refused:
            await anext(hub.work(session, None))
        assert refused.value.extensions["code"] == TOO_MANY_SUBSCRIPTIONS
    for stream in streams:
        await stream.aclose()
    assert hub.subjects == {}


@pytest.mark.parametrize("kind", ["operation", "watch"])
@pytest.mark.parametrize("after", ["", "not-a-sequence", "f" * 33])
async def test_hub__an_after_that_is_no_sequence_is_refused_as_such_on_an_empty_log(kind, after):
    """An empty log has no head to compare ``after`` with: a malformed one is still refused
    as no sequence, never as one past the newest."""
    hub = Hub(FakeStore())  # type: ignore[arg-type]

    async def read(at: str | None, size: int) -> list[object]:
        return []

    with pytest.raises(InvalidInput) as refused:
        await anext(hub.events(Session(Viewer.service()), kind, read, after))  # type: ignore[arg-type]
    assert refused.value.field == "after" and "event sequence" in str(refused.value)
    assert hub.subjects == {}


async def test_hub__a_subscription_ends_when_its_token_expires():
    hub = Hub(FakeStore())  # type: ignore[arg-type]
    stream = hub.work(Session(Viewer.service(), expires_at=time.time() - 1), None)
    with pytest.raises(Exception) as ended:
        await anext(stream)
    assert ended.value.extensions["code"] == UNAUTHENTICATED


@dataclass(frozen=True)
class Event:
    sequence: str


async def ever_more(after: str | None, size: int) -> list[Event]:
    """A log that always has a full page more to read (a backlog, or a steady flow)."""
    start = 0 if after is None else int(after, 16) + 1
    return [Event(f"{number:032x}") for number in range(start, start + size)]


async def past(moment: float, clock: Callable[[], float]) -> None:
    """Wait until ``clock`` reads ``moment`` or later."""
    while clock() < moment:
        await asyncio.sleep(0.01)


def streams_of(hub: Hub, session: Session) -> dict[str, AsyncIterator[object]]:
    """One stream of each kind on ``session``: an event log's, and ``workAvailable`` (kept
    busy by wake-ups: ``busy``)."""
    return {
        "events": hub.events(session, "operation", ever_more, None),
        "work": hub.work(session, None),
    }


async def busy(hub: Hub, stream: AsyncIterator[object]) -> object:
    """The stream's next item, with a wake-up waiting for every ``workAvailable``."""
    hub.wake("calendar")
    return await anext(stream)


async def test_hub__a_sign_in_sessions_event_streams_share_one_bound_work_available_its_own():
    """``operationEvents`` and ``watchEvents`` count against one bound per sign-in session,
    over every connection it opens; its ``workAvailable`` against another, and a worker's
    token of the same ``sub`` against neither."""
    hub = Hub(FakeStore(), LiveLimits(per_viewer=2))  # type: ignore[arg-type]
    person = Viewer.of_token("service", "service")

    def connection() -> Session:
        return Session(person, sign_in="session-1")

    opened = [
        hub.events(connection(), "operation", ever_more, None),
        hub.events(connection(), "watch", ever_more, None),
    ]
    for stream in opened:
        await anext(stream)
    for kind in ("operation", "watch"):
        with pytest.raises(GraphQLError) as refused:
            await anext(hub.events(connection(), kind, ever_more, None))
        assert refused.value.extensions == {"code": TOO_MANY_SUBSCRIPTIONS, "limit": 2}
        assert "sign-in session" in refused.value.message
    others = [
        hub.work(connection(), None),
        hub.events(Session(person), "operation", ever_more, None),
        hub.work(Session(person), None),
    ]
    for stream in others:
        await busy(hub, stream)
    for stream in [*opened, *others]:
        await stream.aclose()  # type: ignore[attr-defined]
    assert hub.subjects == {}


@pytest.mark.parametrize("kind", ["events", "work"])
async def test_hub__a_stream_with_ever_more_to_send_ends_when_its_token_expires(kind):
    """A stream that never waits (a backlog to replay, a steady flow) ends at its token's
    expiry, however much more it has to send."""
    hub = Hub(FakeStore())  # type: ignore[arg-type]
    session = Session(Viewer.service(), expires_at=time.time() + 0.3)
    stream = streams_of(hub, session)[kind]
    await busy(hub, stream)
    await past(session.expires_at or 0, time.time)
    with pytest.raises(GraphQLError) as ended:
        await busy(hub, stream)
    assert ended.value.extensions["code"] == UNAUTHENTICATED
    await stream.aclose()  # type: ignore[attr-defined]


@pytest.mark.parametrize("kind", ["events", "work"])
async def test_hub__a_stream_with_ever_more_to_send_checks_its_sign_in_session(kind, monkeypatch):
    """A sign-in session's stream checks the session every ``SESSION_RECHECK_S`` however
    busy it is: one signed out ends it with the check's ``UNAUTHENTICATED``."""
    monkeypatch.setattr(resolvers.live, "SESSION_RECHECK_S", 0.05)
    signed_out = asyncio.Event()

    async def check() -> None:
        if signed_out.is_set():
            raise GraphQLError("signed out", extensions={"code": UNAUTHENTICATED})

    hub = Hub(FakeStore())  # type: ignore[arg-type]
    session = Session(Viewer.service(), check=check)
    stream = streams_of(hub, session)[kind]
    for _ in range(3):
        await busy(hub, stream)
    signed_out.set()
    await past(time.monotonic() + resolvers.live.SESSION_RECHECK_S, time.monotonic)
    with pytest.raises(GraphQLError) as ended:
        await busy(hub, stream)
    assert ended.value.message == "signed out"
    await stream.aclose()  # type: ignore[attr-defined]


async def test_hub__running_ends_when_its_loops_are_stopped_as_they_are_woken():
    # Each loop is in its timed wait, then the wait's event is set and the loop cancelled in
    # the same turn of the event loop: Python 3.11's asyncio.wait_for returns the wait's
    # result and drops the cancellation, the loop goes on to wait for a subscriber that
    # will never come, and the server's shutdown (and the process's exit) waits for ever.
    hub = Hub(RunningStore())  # type: ignore[arg-type]
    async with asyncio.timeout(5):
        async with hub.running():
            hub.streams["operation"] += 1
            hub.streaming.set()
            hub.wanted.set()
            for _ in range(20):
                await asyncio.sleep(0)
            hub.streams["operation"] -= 1
            hub.streaming.clear()
            hub.wanted.clear()
            hub.look.set()
            hub.recheck.set()
