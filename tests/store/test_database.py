"""The SQLite connection reuse in store/database.py, with fake connections."""

from store.database import ReusedSQLiteConnections


class FakeConnection:
    def __init__(self, in_transaction: bool = False) -> None:
        self.in_transaction = in_transaction
        self.closed = False


class FakePool:
    def __init__(self) -> None:
        self.opened: list[FakeConnection] = []

    async def acquire(self) -> FakeConnection:
        connection = FakeConnection()
        self.opened.append(connection)
        return connection

    async def release(self, connection: FakeConnection) -> None:
        connection.closed = True


async def test_reused_connections__idle_one_is_reused():
    pool = FakePool()
    reuse = ReusedSQLiteConnections(pool, size=2)
    first = await reuse.acquire()
    await reuse.release(first)
    assert await reuse.acquire() is first
    assert len(pool.opened) == 1 and not first.closed


async def test_reused_connections__in_transaction_is_closed_not_reused():
    pool = FakePool()
    reuse = ReusedSQLiteConnections(pool, size=2)
    connection = await reuse.acquire()
    connection.in_transaction = True
    await reuse.release(connection)
    assert connection.closed
    assert await reuse.acquire() is not connection


async def test_reused_connections__idle_capped_and_closed_at_the_end():
    pool = FakePool()
    reuse = ReusedSQLiteConnections(pool, size=2)
    connections = [await reuse.acquire() for _ in range(3)]
    for connection in connections:
        await reuse.release(connection)
    assert [c.closed for c in connections] == [False, False, True]
    await reuse.close()
    assert all(c.closed for c in connections)
