"""The SQLite side of the store's connections: our own aiosqlite connections to one file.

PostgreSQL goes through ``databases``' asyncpg pool; SQLite does not, so that the writer
queue (``Database``) and the readers each hold a connection of their own.
"""

import sqlite3
from collections.abc import Awaitable, Callable
from typing import Any

import aiosqlite

WAL_AUTOCHECKPOINT_PAGES = 1000
"""A commit that leaves the write-ahead log longer than this many pages checkpoints it
(SQLite's default, set explicitly: a connection that turned it off would let the log grow)."""
WAL_SIZE_LIMIT_BYTES = 64 * 1024 * 1024
"""The size the write-ahead log is cut back to when it is reset after a checkpoint: without
``journal_size_limit`` SQLite reuses the file but never shrinks it, so one large transaction
would leave it at its largest for good."""


async def open_connection(path: str, timeout: float) -> aiosqlite.Connection:
    """An autocommit aiosqlite connection to ``path`` (``isolation_level=None``) whose busy
    timeout is ``timeout`` seconds, its write-ahead log bounded (``WAL_AUTOCHECKPOINT_PAGES``,
    ``WAL_SIZE_LIMIT_BYTES``), its rows ``sqlite3.Row`` (they carry their column names, so a
    statement's rows need no cursor)."""
    connection = await aiosqlite.connect(path, timeout=timeout, isolation_level=None)
    connection.row_factory = sqlite3.Row
    await connection.execute(f"PRAGMA wal_autocheckpoint = {WAL_AUTOCHECKPOINT_PAGES}")
    await connection.execute(f"PRAGMA journal_size_limit = {WAL_SIZE_LIMIT_BYTES}")
    return connection


class SQLiteConnections:
    """Our own aiosqlite connections to one SQLite file, kept open for the next statement.

    Opened by ``opener`` (``open_connection`` for the store; tests pass a fake), at most
    ``size`` kept idle. A connection given back inside a
    transaction is closed (rolling it back), never reused.
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
