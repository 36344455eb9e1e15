"""Waiting and stopping in the background loops (the wake-up listener, the live hub's timer
and log watcher, the sweeper, the metrics refresher).

Python 3.11's ``asyncio.wait_for`` drops a cancellation that arrives in the same turn of the
event loop as the result it waits for: the cancelled loop carries on, and whoever waits for
it to stop (the server's shutdown, the process's exit) waits for ever. These two use
``asyncio.timeout`` and ``asyncio.wait`` instead, which never drop one; no module of the
server or the benchmarks calls ``asyncio.wait_for`` (a test holds them to that).
"""

import asyncio


async def set_within(event: asyncio.Event, timeout_s: float) -> bool:
    """Wait at most ``timeout_s`` seconds for ``event``: True if it is set. A cancellation of
    the caller always propagates."""
    try:
        async with asyncio.timeout(timeout_s):
            await event.wait()
    except TimeoutError:
        return False
    return True


async def stop(*tasks: "asyncio.Task[object]") -> None:
    """Cancel ``tasks`` and wait until each has ended. What a task raised is not raised here
    (the sweeper and the metrics loop catch and log every error, the hub's tasks report
    theirs through a done callback, the wake-up listener logs the driver errors it
    expects). A cancellation of the caller while it waits propagates (the tasks are
    cancelled already)."""
    for task in tasks:
        task.cancel()
    await asyncio.wait(tasks)
