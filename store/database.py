"""The store's one door to the database: the only module that imports ``databases``.

``Database`` wraps a ``databases.Database`` on SQLite (aiosqlite) or PostgreSQL (asyncpg),
chosen by the URL, and gives the store three things: ``fetch_one``/``fetch_all`` that return
plain mappings, and ``write_transaction`` that takes the write lock up front (``BEGIN
IMMEDIATE`` on SQLite) so two writers never both read and then write.
"""

import asyncio
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager
from contextvars import ContextVar
from typing import Any, TypeVar

import databases
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.sql import ClauseElement

from store.errors import InvalidInput

Row = Mapping[str, Any]

IN_LIST_CHUNK = 500
_writing: ContextVar[object] = ContextVar("connector_store_writing", default=None)
_T = TypeVar("_T")


def chunked(items: Sequence[_T], size: int = IN_LIST_CHUNK) -> Iterator[Sequence[_T]]:
    """Split ``items`` into runs of at most ``size``, in order, so no IN list grows past it."""
    for start in range(0, len(items), size):
        yield items[start : start + size]


SQLITE_PREFIX = "sqlite+aiosqlite://"
POSTGRES_PREFIXES = ("postgresql+asyncpg://", "postgresql://", "postgres://")


def normalize_url(url: str) -> str:
    """Return ``url`` in the form ``databases`` expects.

    Accepts ``sqlite+aiosqlite:///path``, ``sqlite:///path`` and ``postgresql[+asyncpg]://…``.
    Raises ``InvalidInput`` (field ``DATABASE_URL``) for any other scheme.
    """
    if url.startswith("sqlite:///"):
        return SQLITE_PREFIX + url[len("sqlite://") :]
    if url.startswith(SQLITE_PREFIX):
        return url
    for prefix in POSTGRES_PREFIXES:
        if url.startswith(prefix):
            return "postgresql+asyncpg://" + url[len(prefix) :]
    raise InvalidInput(
        "DATABASE_URL", "expected sqlite+aiosqlite:///path or postgresql+asyncpg://…"
    )


class ReusedSQLiteConnections:
    """Keeps up to ``size`` idle SQLite connections open for the next statement.

    ``databases`` opens a new aiosqlite connection, with a thread of its own, for every
    statement run outside a connection block; reusing them doubles the store's throughput
    on SQLite. A connection given back inside a transaction is closed (rolling it back),
    never reused. Wraps the backend's own pool: ``acquire``/``release`` keep its shape.
    """

    def __init__(self, pool: Any, size: int) -> None:
        self._pool = pool
        self._size = size
        self._idle: list[Any] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._pool, name)

    async def acquire(self) -> Any:
        """An idle connection, or a new one."""
        if self._idle:
            return self._idle.pop()
        return await self._pool.acquire()

    async def release(self, connection: Any) -> None:
        """Keep ``connection`` for reuse, or close it (in a transaction, or too many idle)."""
        if connection.in_transaction or len(self._idle) >= self._size:
            await self._pool.release(connection)
        else:
            self._idle.append(connection)

    async def close(self) -> None:
        """Close every idle connection."""
        while self._idle:
            await self._pool.release(self._idle.pop())


class Database:
    """A connected database for the store.

    ``url``: a database URL (see ``normalize_url``). ``pool_size``: the most PostgreSQL
    connections held at once. ``busy_timeout_s``: how long a SQLite writer waits for the
    write lock before failing (seconds).
    """

    def __init__(self, url: str, *, pool_size: int = 20, busy_timeout_s: float = 30.0) -> None:
        self.url = normalize_url(url)
        self.is_postgres = self.url.startswith("postgresql")
        options: dict[str, Any] = (
            {"min_size": 1, "max_size": pool_size}
            if self.is_postgres
            else {"timeout": busy_timeout_s}
        )
        self._db = databases.Database(self.url, **options)
        self._sqlite_pool: ReusedSQLiteConnections | None = None
        self._write_lock = None if self.is_postgres else asyncio.Lock()
        if not self.is_postgres:
            backend = self._db._backend
            self._sqlite_pool = ReusedSQLiteConnections(backend._pool, size=8)  # type: ignore[attr-defined]
            backend._pool = self._sqlite_pool  # type: ignore[attr-defined]

    async def connect(self) -> None:
        """Open the pool (PostgreSQL) or check that the file opens (SQLite)."""
        await self._db.connect()

    async def disconnect(self) -> None:
        """Close every connection."""
        if self._sqlite_pool is not None:
            await self._sqlite_pool.close()
        await self._db.disconnect()

    async def fetch_one(self, query: ClauseElement) -> Row | None:
        """Run ``query`` and return its first row as a mapping, or None."""
        row = await self._db.fetch_one(query)
        return None if row is None else row._mapping

    async def fetch_all(self, query: ClauseElement) -> list[Row]:
        """Run ``query`` and return every row as a mapping."""
        return [row._mapping for row in await self._db.fetch_all(query)]

    def insert(self, table: sa.Table) -> Any:
        """An INSERT in this backend's dialect, so ``on_conflict_do_*`` is available."""
        return (postgresql.insert if self.is_postgres else sqlite.insert)(table)

    @asynccontextmanager
    async def _writer(self) -> AsyncIterator[None]:
        """On SQLite, queue this task behind the process's other writers (FIFO).

        SQLite takes one writer at a time; writers of this process wait their turn here
        instead of sleeping in SQLite's busy handler, which backs off by up to 100 ms. A
        task already inside ``write_transaction`` passes straight through. Writers of
        other processes still meet the busy timeout. On PostgreSQL: no queue.
        """
        if self._write_lock is None or _writing.get() is self:
            yield
            return
        async with self._write_lock:
            token = _writing.set(self)
            try:
                yield
            finally:
                _writing.reset(token)

    async def write_one(self, query: ClauseElement) -> Row | None:
        """Run a writing ``query`` (``… RETURNING``) and return its first row, or None."""
        async with self._writer():
            return await self.fetch_one(query)

    async def ping(self) -> None:
        """Raise if the database does not answer ``SELECT 1``."""
        await self._db.fetch_one(sa.text("SELECT 1"))

    @asynccontextmanager
    async def write_transaction(self) -> AsyncIterator[None]:
        """Run the block in one transaction on this task's connection.

        On SQLite the transaction starts with ``BEGIN IMMEDIATE``: it holds the write lock
        from its first statement, so a read-then-write inside it can never be overtaken by
        another writer (a plain ``BEGIN`` would fail with "database is locked" on its first
        write). On PostgreSQL rows are locked with ``SELECT … FOR UPDATE`` by the caller.
        Every ``fetch_*`` awaited inside the block, by this task, joins the transaction.
        """
        if self.is_postgres:
            async with self._db.transaction():
                yield
            return
        async with self._writer(), self._db.connection() as connection:
            await connection.execute("BEGIN IMMEDIATE")
            try:
                yield
            except BaseException:
                await connection.execute("ROLLBACK")
                raise
            await connection.execute("COMMIT")
