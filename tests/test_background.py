"""store.background: the background loops' waits and stops never drop a cancellation."""

import asyncio
from pathlib import Path

from store import background

ROOT = Path(__file__).resolve().parents[1]


def test_background__no_module_calls_asyncio_wait_for():
    # Python 3.11's wait_for drops a cancellation that meets the result it waits for.
    calling = [
        str(path.relative_to(ROOT))
        for package in ("store", "resolvers", "server", "benchmarks")
        for path in sorted((ROOT / package).rglob("*.py"))
        if "asyncio.wait_for(" in path.read_text()
    ]
    assert calling == []


async def test_background__set_within_says_whether_the_event_was_set():
    event = asyncio.Event()
    assert await background.set_within(event, 0.01) is False
    event.set()
    assert await background.set_within(event, 0.01) is True


async def test_background__a_cancellation_meeting_the_event_is_not_dropped():
    event = asyncio.Event()
    task = asyncio.create_task(background.set_within(event, 10))
    await asyncio.sleep(0)
    event.set()
    task.cancel()
    await asyncio.wait({task})
    assert task.cancelled()


async def test_background__stop_ends_each_task_and_its_caller_stays_cancellable():
    async def forever() -> None:
        await asyncio.Event().wait()

    async def deaf_once() -> None:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            await asyncio.sleep(10)

    tasks = [asyncio.create_task(forever()) for _ in range(3)]
    await asyncio.sleep(0)
    await background.stop(*tasks)
    assert all(task.cancelled() for task in tasks)

    stubborn = asyncio.create_task(deaf_once())
    await asyncio.sleep(0)
    stopping = asyncio.create_task(background.stop(stubborn))
    await asyncio.sleep(0.01)
    stopping.cancel()
    await asyncio.wait({stopping}, timeout=1)
    assert stopping.cancelled()
    stubborn.cancel()
    await asyncio.wait({stubborn})
