"""What a test leaves running on the run's shared event loop and PostgreSQL database
(``nothing_left_running`` in ``tests/conftest.py`` fails the test that does)."""

import asyncio
import time

from tests.databases import PostgresRun

LEFT_GRACE_S = 2.0
"""How long what a test started may take to end once the test is over (a cancelled task
finishing its cleanup, a closed connection's server session exiting) before the test is
said to have left it running."""


async def tasks_left(
    before: set["asyncio.Task[object]"], grace_s: float = LEFT_GRACE_S
) -> list["asyncio.Task[object]"]:
    """The tasks started since ``before`` (but the caller) that have not ended within
    ``grace_s``, cancelled (and given ``grace_s`` more to end)."""
    started = asyncio.all_tasks() - before - {asyncio.current_task()}
    if not started:
        return []
    _, pending = await asyncio.wait(started, timeout=grace_s)
    for task in pending:
        task.cancel()
    if pending:
        await asyncio.wait(pending, timeout=grace_s)
    return sorted(pending, key=lambda task: task.get_name())


def describe(task: "asyncio.Task[object]") -> str:
    """``task``'s name and its coroutine's (where it was written)."""
    coroutine = task.get_coro()
    return f"task {task.get_name()}: {getattr(coroutine, '__qualname__', repr(coroutine))}"


async def sessions_left(postgres_run: PostgresRun, grace_s: float = LEFT_GRACE_S) -> list[str]:
    """The client sessions still connected to the run's database ``grace_s`` from now (a
    closed one's server process may take a moment to exit), terminated."""
    deadline = time.monotonic() + grace_s
    while sessions := await postgres_run.sessions():
        if time.monotonic() > deadline:
            await postgres_run.terminate_sessions()
            return sessions
        await asyncio.sleep(0.01)
    return []
