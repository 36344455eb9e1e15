"""The hub's pure parts (resolvers.live): a workAvailable waiter coalesces what is pending,
so a reader that does not keep up costs a bounded amount, however many wake-ups arrive."""

import time

import pytest

from resolvers.codes import TOO_MANY_SUBSCRIPTIONS, UNAUTHENTICATED
from resolvers.live import Hub, LiveLimits, Session, WorkWaiter
from resolvers.permissions import Viewer


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

    async def operation_events_collected(self, after: str) -> bool:
        return False

    watch_events_collected = operation_events_collected


class FakeStore:
    """The hub needs only a clock and (unused here) the event logs' readers."""

    events = FakeEvents()

    def clock(self) -> int:
        return 1


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
    assert hub.waiters == {} and hub.viewers == {} and not hub.wanted.is_set()


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
    assert hub.viewers == {}


async def test_hub__a_subscription_ends_when_its_token_expires():
    hub = Hub(FakeStore())  # type: ignore[arg-type]
    stream = hub.work(Session(Viewer.service(), expires_at=time.time() - 1), None)
    with pytest.raises(Exception) as ended:
        await anext(stream)
    assert ended.value.extensions["code"] == UNAUTHENTICATED
