"""The SQLite side of the store's connections: our own ``sqlite3`` connections to one file,
each with the one thread that runs its statements.

PostgreSQL goes through ``databases``' asyncpg pool; SQLite does not, so that the writer
queue (``Database``) and the readers each hold a connection of their own. A connection's
``run`` hands the thread a whole piece of work (a statement and the fetch of its rows, or a
transaction: ``BEGIN IMMEDIATE``, a write, its events, ``COMMIT``), so a store call costs one
hop from the event loop; aiosqlite, which the migrations' engine uses, hops once per
statement and has no public way to run more in one.
"""

import asyncio
import sqlite3
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

_T = TypeVar("_T")

WAL_AUTOCHECKPOINT_PAGES = 1000
"""A commit that leaves the write-ahead log longer than this many pages checkpoints it
(SQLite's default, set explicitly: a connection that turned it off would let the log grow)."""
WAL_SIZE_LIMIT_BYTES = 4 * 1024 * 1024
"""The size the write-ahead log is cut back to when it is reset after a checkpoint: without
``journal_size_limit`` SQLite reuses the file but never shrinks it, so one large transaction
(or the writes behind a reader that held an old snapshot for long: no checkpoint passes it)
would leave it at its largest for good. Four autocheckpoints' worth of 4 KiB pages: the log
a busy server's writes fill between checkpoints is not cut and grown again at each one."""


class SQLiteConnection:
    """One autocommit ``sqlite3`` connection (``isolation_level=None``: each statement its
    own transaction unless a ``BEGIN`` opened one) and its thread.

    ``run(work)`` calls ``work(connection)`` on that thread and returns what it returned
    (or raises what it raised: ``sqlite3`` errors, for ``store.driver_errors``). Works run
    one at a time in the order they were handed over, and a work handed over runs even
    when its caller is cancelled meanwhile (as a statement sent to PostgreSQL does): a
    transaction's ``ROLLBACK`` or the connection's close, awaited by a task cancelled again
    in its cleanup, still happens, and never leaves SQLite's write lock held.
    """

    def __init__(self, raw: sqlite3.Connection, thread: ThreadPoolExecutor) -> None:
        self._raw = raw
        self._thread = thread

    async def run(self, work: Callable[[sqlite3.Connection], _T]) -> _T:
        """``work(connection)`` on the connection's thread; a cancellation of the caller
        stops its wait, not the work."""
        return await asyncio.shield(self._handed_over(work))

    def _handed_over(self, work: Callable[[sqlite3.Connection], _T]) -> "asyncio.Future[_T]":
        running = asyncio.wrap_future(self._thread.submit(work, self._raw))
        running.add_done_callback(_retrieved)
        return running

    @property
    def in_transaction(self) -> bool:
        """Whether a transaction is open (a ``BEGIN`` without its ``COMMIT``/``ROLLBACK``)."""
        return self._raw.in_transaction

    async def close(self) -> None:
        """Close the connection (an open transaction is rolled back) and end its thread,
        once the works handed over before have run."""
        closing = self._handed_over(sqlite3.Connection.close)
        self._thread.shutdown(wait=False)
        await asyncio.shield(closing)


def _retrieved(running: "asyncio.Future[Any]") -> None:
    """Mark what a work raised as seen: its caller may have stopped waiting for it."""
    if not running.cancelled():
        running.exception()


def _configured(path: str, timeout: float) -> sqlite3.Connection:
    raw = sqlite3.connect(path, timeout=timeout, isolation_level=None, check_same_thread=False)
    raw.execute(f"PRAGMA wal_autocheckpoint = {WAL_AUTOCHECKPOINT_PAGES}")
    raw.execute(f"PRAGMA journal_size_limit = {WAL_SIZE_LIMIT_BYTES}")
    return raw


def truncate_wal(raw: sqlite3.Connection) -> bool:
    """Checkpoint the write-ahead log and cut it to zero bytes, without waiting: the busy
    timeout is off for the one ``PRAGMA wal_checkpoint(TRUNCATE)``, so a writer or a reader
    on an old snapshot in the way makes it a partial checkpoint, at once. Whether the log
    was cut. For the idle case ``journal_size_limit`` leaves alone: the log of writes that
    stopped is cut back only by the next write's checkpoint."""
    (timeout_ms,) = raw.execute("PRAGMA busy_timeout").fetchone()
    raw.execute("PRAGMA busy_timeout = 0")
    try:
        busy, _, _ = raw.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    finally:
        raw.execute(f"PRAGMA busy_timeout = {int(timeout_ms)}")
    return not busy


async def open_connection(path: str, timeout: float) -> SQLiteConnection:
    """An autocommit connection to ``path`` whose busy timeout is ``timeout`` seconds and
    whose write-ahead log is bounded (``WAL_AUTOCHECKPOINT_PAGES``,
    ``WAL_SIZE_LIMIT_BYTES``), opened on its own thread. Raises ``sqlite3`` errors (a file
    that cannot be opened)."""
    thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="connector-store-sqlite")
    try:
        raw = await asyncio.get_running_loop().run_in_executor(thread, _configured, path, timeout)
    except BaseException:
        thread.shutdown(wait=False)
        raise
    return SQLiteConnection(raw, thread)


class SQLiteConnections:
    """Our own connections to one SQLite file, kept open for the next statement.

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
