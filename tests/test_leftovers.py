"""The guard of ``tests/conftest.py`` (``tests/leftovers.py``): a task or a PostgreSQL
session a test leaves behind is found, named and stopped; what ended is not."""

import asyncio

import asyncpg

from tests.databases import PostgresRun, as_driver
from tests.leftovers import describe, sessions_left, tasks_left

GRACE_S = 0.05


async def test_tasks_left__a_task_left_waiting_is_named_and_cancelled_one_that_ended_is_not():
    before = asyncio.all_tasks()

    async def forever() -> None:
        await asyncio.Event().wait()

    left = asyncio.create_task(forever(), name="left")
    ends = asyncio.create_task(asyncio.sleep(0), name="ends")

    assert await tasks_left(before, GRACE_S) == [left]
    assert left.cancelled()
    assert ends.done() and not ends.cancelled()
    assert describe(left) == (
        "task left: test_tasks_left__a_task_left_waiting_is_named_and_cancelled_one_that_ended"
        "_is_not.<locals>.forever"
    )


async def test_sessions_left__a_connection_left_open_is_named_and_terminated_a_closed_one_is_not(
    postgres_run: PostgresRun,
):
    url = as_driver(await postgres_run.create(), "postgresql")
    closed = await asyncpg.connect(url)
    await closed.close()
    assert await sessions_left(postgres_run, GRACE_S) == []

    left = await asyncpg.connect(url, server_settings={"application_name": "left"})
    await left.execute("SELECT 'the last statement'")
    assert await sessions_left(postgres_run, GRACE_S) == [
        "left (idle): \"SELECT 'the last statement'\""
    ]
    assert await sessions_left(postgres_run) == []
    await left.close()
