"""store/sqlite_pool.py: SQLite connection reuse, with fake connections."""

from store.sqlite_pool import SQLiteConnections, open_connection


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


# --- URLs: one parser for every use ----------------------------------------------------------


async def test_open_connection__rows_carry_their_column_names(tmp_path):
    connection = await open_connection(str(tmp_path / "rows.db"), timeout=1.0)
    try:
        rows = await connection.execute_fetchall("SELECT 1 AS one, 'two' AS two")
        assert [dict(zip(row.keys(), row, strict=True)) for row in rows] == [
            {"one": 1, "two": "two"}
        ]
    finally:
        await connection.close()
