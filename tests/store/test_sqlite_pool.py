"""store/sqlite_pool.py: SQLite connection reuse, with fake connections."""

import asyncio
import threading

from store.sqlite_pool import WAL_SIZE_LIMIT_BYTES, SQLiteConnections, open_connection


class FakeConnection:
    def __init__(self, in_transaction: bool = False) -> None:
        self.in_transaction = in_transaction
        self.closed = False

    async def close(self) -> None:
        self.closed = True


class FakePool:
    def __init__(self) -> None:
        self.opened: list[FakeConnection] = []

    async def open(self) -> FakeConnection:
        connection = FakeConnection()
        self.opened.append(connection)
        return connection


async def test_reused_connections__idle_one_is_reused():
    pool = FakePool()
    reuse = SQLiteConnections(pool.open, size=2)
    first = await reuse.acquire()
    await reuse.release(first)
    assert await reuse.acquire() is first
    assert len(pool.opened) == 1 and not first.closed


async def test_reused_connections__in_transaction_is_closed_not_reused():
    pool = FakePool()
    reuse = SQLiteConnections(pool.open, size=2)
    connection = await reuse.acquire()
    connection.in_transaction = True
    await reuse.release(connection)
    assert connection.closed
    assert await reuse.acquire() is not connection


async def test_reused_connections__idle_capped_and_closed_at_the_end():
    pool = FakePool()
    reuse = SQLiteConnections(pool.open, size=2)
    connections = [await reuse.acquire() for _ in range(3)]
    for connection in connections:
        await reuse.release(connection)
    assert [c.closed for c in connections] == [False, False, True]
    await reuse.close()
    assert all(c.closed for c in connections)


async def test_open_connection__runs_each_work_on_its_one_thread_in_order_until_closed(tmp_path):
    connection = await open_connection(str(tmp_path / "rows.db"), timeout=1.0)
    ran: list[tuple[int, int]] = []
    try:
        await asyncio.gather(
            *(
                connection.run(lambda _, n=n: ran.append((n, threading.get_ident())))
                for n in range(50)
            )
        )
        assert [n for n, _ in ran] == list(range(50))
        assert len({thread for _, thread in ran}) == 1
        assert ran[0][1] != threading.get_ident()
        limit = await connection.run(
            lambda raw: raw.execute("PRAGMA journal_size_limit").fetchone()[0]
        )
        assert limit == WAL_SIZE_LIMIT_BYTES
        await connection.run(lambda raw: raw.execute("BEGIN IMMEDIATE"))
        assert connection.in_transaction
    finally:
        await connection.close()
    for thread in threading.enumerate():
        if thread.ident == ran[0][1]:
            thread.join(5)
            assert not thread.is_alive()
