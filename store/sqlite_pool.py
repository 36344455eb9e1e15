"""The SQLite side of the store's connections: our own aiosqlite connections to one file.

PostgreSQL goes through ``databases``' asyncpg pool; SQLite does not, so that the writer
queue (``Database``) and the readers each hold a connection of their own.
"""

from collections.abc import Awaitable, Callable
from typing import Any


class SQLiteConnections:
    """Our own aiosqlite connections to one SQLite file, kept open for the next statement.

    Opened with ``aiosqlite.connect`` (autocommit: ``isolation_level=None``; the busy
    timeout is ``timeout``), at most ``size`` kept idle. A connection given back inside a
    transaction is closed (rolling it back), never reused. ``opener`` makes a connection
    (tests pass a fake).
    """

    def __init__(self, opener: Callable[[], Awaitable[Any]], size: int) -> None:
        self._open = opener
        self._size = size
        self._idle: list[Any] = []

    async def acquire(self) -> Any:
        """An idle connection, or a new one."""
        if self._idle:
            return self._idle.pop()
        return await self._open()

    async def release(self, connection: Any) -> None:
        """Keep ``connection`` for reuse, or close it (in a transaction, or too many idle)."""
        if connection.in_transaction or len(self._idle) >= self._size:
            await connection.close()
        else:
            self._idle.append(connection)

    async def close(self) -> None:
        """Close every idle connection."""
        while self._idle:
            await self._idle.pop().close()
