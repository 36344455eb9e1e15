"""The store's one door to the database: the only module that imports ``databases``.

``Database`` wraps a ``databases.Database`` on SQLite (aiosqlite) or PostgreSQL (asyncpg),
chosen by the URL, and gives the store three things: ``fetch_one``/``fetch_all`` that return
plain mappings, and ``write_transaction`` that takes the write lock up front (``BEGIN
IMMEDIATE`` on SQLite) so two writers never both read and then write.

Every database URL is parsed here, by SQLAlchemy's ``make_url``, so the server, the
migrations and the tests agree on which file or server a URL names. Driver errors become
typed store errors here, once (``translate_driver_error``).

Statements run near the driver: each statement shape is compiled once
(``CompiledStatements``); the lifecycle's hot statements are built once, at import
(``Prepared``), and cost no statement object or cache key per call. Either way the SQL and
values go straight to the driver's connection:
on PostgreSQL the asyncpg connection ``databases`` holds for the task (``raw_connection``,
so its transactions and pool stay ``databases``'), on SQLite our own aiosqlite
connections (``SQLiteConnections``), the writer queue's and the readers'.
"""

import asyncio
import os
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager, suppress
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import aiosqlite
import asyncpg
import databases
import filelock
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.dialects.postgresql import asyncpg as postgresql_asyncpg
from sqlalchemy.dialects.sqlite import aiosqlite as sqlite_aiosqlite
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError
from sqlalchemy.sql import ClauseElement

from store.errors import DatabaseBusy, DatabaseUnavailable, InvalidInput, StoreError

Row = Mapping[str, Any]


class ResultRow(dict[Any, Any]):
    """A result row: its columns by name, and by position (``row[0]``) like a record."""

    def __missing__(self, key: Any) -> Any:
        if isinstance(key, int):
            return list(self.values())[key]
        raise KeyError(key)


IN_LIST_CHUNK = 500
_writing: ContextVar[object] = ContextVar("connector_store_writing", default=None)
_holding: ContextVar[object] = ContextVar("connector_store_holding", default=None)
_sqlite_held: ContextVar[tuple[object, Any] | None] = ContextVar(
    "connector_store_sqlite_connection", default=None
)
_T = TypeVar("_T")


def chunked(items: Sequence[_T], size: int = IN_LIST_CHUNK) -> Iterator[Sequence[_T]]:
    """Split ``items`` into runs of at most ``size``, in order, so no IN list grows past it."""
    for start in range(0, len(items), size):
        yield items[start : start + size]


async def fetch_in_chunks(
    db: "Database",
    query: sa.Select[Any],
    column: sa.ColumnElement[Any],
    values: Sequence[Any] | None,
    record: Callable[[Row], _T],
    order: Callable[[_T], Any],
    limit: int | None,
) -> list[_T]:
    """``query``'s rows as records, with ``column IN values`` when ``values`` is given:
    ``IN_LIST_CHUNK`` values a statement, the chunks' records merged back into ``order``
    and cut to ``limit`` (each chunk's statement carries the limit too)."""
    if values is None:
        return [record(row) for row in await db.fetch_all(query)]
    found: list[_T] = []
    for chunk in chunked(values):
        found.extend(record(row) for row in await db.fetch_all(query.where(column.in_(chunk))))
    found.sort(key=order)
    return found if limit is None else found[:limit]


SQLITE_DRIVERS = {"sqlite": "sqlite+aiosqlite", "sqlite+aiosqlite": "sqlite+aiosqlite"}
POSTGRES_DRIVERS = {
    "postgres": "postgresql+asyncpg",
    "postgresql": "postgresql+asyncpg",
    "postgresql+asyncpg": "postgresql+asyncpg",
}
EXPECTED_URL = "expected sqlite+aiosqlite:///path/to/file.db or postgresql+asyncpg://user@host/db"


def parse_url(url: str) -> URL:
    """``url`` parsed and put in the form the store uses (``sqlite+aiosqlite`` or
    ``postgresql+asyncpg``). Percent-escapes are decoded once, here, for every use.

    PostgreSQL URLs take one parameter, ``ssl`` (asyncpg's: ``disable``, ``prefer``,
    ``require``, ``verify-ca``, ``verify-full``); libpq's ``sslmode`` is accepted as its
    name. SQLite URLs take none. Raises ``InvalidInput`` (field ``DATABASE_URL``) for
    another scheme, a URL that does not parse (a port that is not a number included),
    another parameter, or an in-memory SQLite database (each connection would get its own,
    empty one).
    """
    try:
        parsed = make_url(url)
        parsed.port  # noqa: B018  (parsed on access: a bad port raises here)
    except (ArgumentError, ValueError) as error:
        raise InvalidInput("DATABASE_URL", f"cannot be parsed; {EXPECTED_URL}") from error
    drivername = SQLITE_DRIVERS.get(parsed.drivername) or POSTGRES_DRIVERS.get(parsed.drivername)
    if drivername is None:
        raise InvalidInput(
            "DATABASE_URL", f"{parsed.drivername!r} is not supported; {EXPECTED_URL}"
        )
    parsed = parsed.set(drivername=drivername)
    if drivername.startswith("sqlite") and _in_memory(parsed):
        raise InvalidInput(
            "DATABASE_URL",
            "an in-memory SQLite database is private to one connection and would lose every"
            " write; give a file path, e.g. sqlite+aiosqlite:///data/connector-store.db",
        )
    query = dict(parsed.query)
    if "sslmode" in query and drivername.startswith("postgresql"):
        query.setdefault("ssl", query.pop("sslmode"))
    allowed = {"ssl"} if drivername.startswith("postgresql") else set()
    unknown = sorted(set(query) - allowed)
    if unknown:
        raise InvalidInput(
            "DATABASE_URL",
            f"unknown parameter {unknown[0]!r}; "
            + (
                "PostgreSQL URLs take only ssl (or sslmode)" if allowed else "SQLite URLs take none"
            ),
        )
    return parsed.set(query=query)


def _in_memory(url: URL) -> bool:
    database = url.database or ""
    return (
        database in ("", ":memory:")
        or database.startswith("file::memory:")
        or url.query.get("mode") == "memory"
    )


def normalize_url(url: str) -> str:
    """``url`` in the form ``databases`` and SQLAlchemy expect, password included (see
    ``parse_url``; raises ``InvalidInput`` likewise)."""
    return parse_url(url).render_as_string(hide_password=False)


def shown_url(url: str) -> str:
    """``url`` with its password hidden, for logs and messages."""
    return make_url(url).render_as_string(hide_password=True)


def sqlite_path(url: str) -> Path | None:
    """The file a SQLite URL names (percent-escapes decoded), or None for PostgreSQL."""
    parsed = parse_url(url)
    if not parsed.drivername.startswith("sqlite"):
        return None
    assert parsed.database, "parse_url refuses SQLite URLs without a file"
    return Path(parsed.database)


SQLITE_BUSY_CODES = frozenset({sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED})
SQLITE_UNAVAILABLE_CODES = frozenset(
    {
        sqlite3.SQLITE_CANTOPEN,
        sqlite3.SQLITE_IOERR,
        sqlite3.SQLITE_READONLY,
        sqlite3.SQLITE_FULL,
        sqlite3.SQLITE_NOTADB,
        sqlite3.SQLITE_CORRUPT,
    }
)
POSTGRES_BUSY = (
    asyncpg.exceptions.LockNotAvailableError,
    asyncpg.exceptions.TransactionRollbackError,
)
POSTGRES_UNAVAILABLE = (
    asyncpg.exceptions.InternalClientError,
    asyncpg.exceptions.InterfaceError,
    asyncpg.exceptions.PostgresConnectionError,
    asyncpg.exceptions.OperatorInterventionError,
    asyncpg.exceptions.InsufficientResourcesError,
    asyncpg.exceptions.InvalidCatalogNameError,
    asyncpg.exceptions.InvalidAuthorizationSpecificationError,
)


def translate_driver_error(error: BaseException) -> StoreError | None:
    """The typed store error for a driver's error, or None when it is not one we know.

    Decided by the exception's type (and SQLite's result code), never its message: refused
    or lost connections (asyncpg's ``InterfaceError`` is its error for a connection in an
    unusable state: closed, lost mid-operation), a database that does not exist or refuses
    us, a SQLite file that cannot be opened or written → ``DatabaseUnavailable``; lock
    waits, deadlocks and serialization failures → ``DatabaseBusy``. Follows ``orig`` and
    ``__cause__`` through SQLAlchemy's wrappers (as the migrations raise them).
    """
    seen: set[int] = set()
    pending: list[BaseException | None] = [error]
    while pending:
        current = pending.pop(0)
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, StoreError):
            return current
        if isinstance(current, filelock.Timeout):
            return DatabaseBusy(f"another migration holds {current.lock_file}")
        if isinstance(current, POSTGRES_BUSY):
            return DatabaseBusy(f"the database is busy: {current}")
        if isinstance(current, (*POSTGRES_UNAVAILABLE, OSError)):
            return DatabaseUnavailable(f"the database is unavailable: {current}")
        if isinstance(current, sqlite3.Error):
            code = (getattr(current, "sqlite_errorcode", None) or 0) & 0xFF
            if code in SQLITE_BUSY_CODES:
                return DatabaseBusy(f"the SQLite database is locked: {current}")
            if code in SQLITE_UNAVAILABLE_CODES:
                return DatabaseUnavailable(f"the SQLite database is unavailable: {current}")
        pending.extend([getattr(current, "orig", None), current.__cause__])
    return None


@contextmanager
def driver_errors() -> Iterator[None]:
    """Re-raise a known driver error as its typed store error (``raise … from``)."""
    try:
        yield
    except StoreError:
        raise
    except Exception as error:
        typed = translate_driver_error(error)
        if typed is None:
            raise
        raise typed from error


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


class CompiledStatements:
    """Each statement shape compiled once, for one dialect.

    SQLAlchemy's cache key of a statement names its shape (the same for every call that
    builds the same statement with other values) and carries this call's bound values;
    ``Compiled.construct_params(extracted_parameters=…)`` puts them in the place of the
    values the shape was compiled with. Statements whose SQL depends on their values (an
    ``IN`` list, literal-rendered parameters) or that have no cache key are compiled each
    time. Returns the SQL in the driver's paramstyle and the positional values.
    """

    def __init__(self, dialect: Any, size: int = 2000) -> None:
        self._dialect = dialect
        self._size = size
        self._cache: dict[Any, Any] = {}

    def __call__(self, query: ClauseElement) -> tuple[str, list[Any]]:
        key = query._generate_cache_key()
        if key is None or any(b.expanding or b.literal_execute for b in key.bindparams):
            return self._once(query)
        compiled: Any = self._cache.get(key.key)
        if compiled is None:
            compiled = self._dialect.statement_compiler(self._dialect, query, cache_key=key)
            if compiled.post_compile_params:
                return self._once(query)
            if len(self._cache) >= self._size:
                self._cache.clear()
            self._cache[key.key] = compiled
        params = compiled.construct_params(extracted_parameters=key.bindparams)
        return compiled.string, self._values(compiled, params)

    def _once(self, query: ClauseElement) -> tuple[str, list[Any]]:
        compiled: Any = query.compile(
            dialect=self._dialect, compile_kwargs={"render_postcompile": True}
        )
        return compiled.string, self._values(compiled, compiled.construct_params())

    @staticmethod
    def _values(compiled: Any, params: Mapping[str, Any]) -> list[Any]:
        processors = compiled._bind_processors
        values = []
        for name in compiled.positiontup:
            value = params[name]
            processor = processors.get(name)
            values.append(value if processor is None else processor(value))
        return values


class Prepared:
    """A hot statement built once, at import, and run with its values by name.

    ``build(insert)`` returns the statement, given the backend's ``insert`` (for
    ``on_conflict_*``); every per-call value in it is a named ``sa.bindparam`` (name it
    apart from the columns: SQLAlchemy reserves column names in VALUES and SET). Each
    dialect builds and compiles it once, on first use, keeping the SQL, the order of its
    parameters with their bind processors, and the values bound at build time (literals).
    A call then costs one lookup per parameter: no statement object, no cache key, no
    compile. ``bind`` raises ``KeyError`` for a per-call value missing from ``params``.
    """

    def __init__(self, build: Callable[[Callable[[sa.Table], Any]], ClauseElement]) -> None:
        self._build = build
        self._compiled: dict[str, tuple[str, list[tuple[str, Any]], dict[str, Any]]] = {}

    def _compile(self, dialect: Any) -> tuple[str, list[tuple[str, Any]], dict[str, Any]]:
        insert = postgresql.insert if dialect.name == "postgresql" else sqlite.insert
        compiled: Any = self._build(insert).compile(dialect=dialect)
        if compiled.post_compile_params:
            raise TypeError("a Prepared statement cannot expand parameters per call")
        processors = compiled._bind_processors
        order = [(name, processors.get(name)) for name in compiled.positiontup]
        every = compiled.construct_params(_check=False)
        bound = {name: value for name, value in every.items() if not compiled.binds[name].required}
        result = (compiled.string, order, bound)
        self._compiled[dialect.name] = result
        return result

    def bind(self, dialect: Any, params: Mapping[str, Any]) -> tuple[str, list[Any]]:
        """The SQL for ``dialect`` and the positional values of ``params`` (by name)."""
        found = self._compiled.get(dialect.name)
        sql, order, bound = self._compile(dialect) if found is None else found
        values = []
        for name, processor in order:
            value = params[name] if name in params else bound[name]
            values.append(value if processor is None else processor(value))
        return sql, values


@dataclass(frozen=True, slots=True)
class PoolStats:
    """``Database.pool_stats``: the gate's size and its slots in use, idle and waited for."""

    size: int
    in_use: int
    idle: int
    waiting: int


class Database:
    """A connected database for the store.

    ``url``: a database URL (see ``parse_url``; raises ``InvalidInput`` for one the store
    cannot use). ``pool_size``: the most PostgreSQL connections held at once.
    ``wait_timeout_s``: the longest a call waits, in seconds, for a pooled connection
    (PostgreSQL) or for the write lock (SQLite, in this process and across processes)
    before it fails with ``DatabaseBusy``. Every call raises ``DatabaseUnavailable`` when the
    database cannot be reached, or (SQLite) when its file was removed or replaced since
    ``connect``: nothing is read from or written to a file that is gone.
    ``statement_cache_size``: asyncpg's prepared-statement cache (None: asyncpg's default;
    0 behind pgbouncer in transaction mode). ``pool_stats`` reads the gate's counts.
    """

    def __init__(
        self,
        url: str,
        *,
        pool_size: int = 20,
        wait_timeout_s: float = 10.0,
        statement_cache_size: int | None = None,
    ) -> None:
        self.url = normalize_url(url)
        self.is_postgres = self.url.startswith("postgresql")
        self.wait_timeout_s = wait_timeout_s
        self.pool_size = pool_size
        options: dict[str, Any] = (
            {"min_size": 1, "max_size": pool_size}
            if self.is_postgres
            else {"timeout": wait_timeout_s}
        )
        if self.is_postgres and statement_cache_size is not None:
            # asyncpg's prepared-statement cache; 0 behind pgbouncer in transaction mode.
            options["statement_cache_size"] = statement_cache_size
        self._db = databases.Database(self.url, **options)
        self._sqlite_file = sqlite_path(self.url)
        self._sqlite_identity: tuple[int, int] | None = None
        self._sqlite: SQLiteConnections | None = None
        if self._sqlite_file is not None:
            path, timeout = str(self._sqlite_file), wait_timeout_s
            self._sqlite = SQLiteConnections(
                lambda: aiosqlite.connect(path, timeout=timeout, isolation_level=None),
                size=8,
            )
        self._dialect = (
            postgresql_asyncpg.dialect() if self.is_postgres else sqlite_aiosqlite.dialect()
        )
        self._compile = CompiledStatements(self._dialect)
        self._write_lock = None if self.is_postgres else asyncio.Lock()
        self._connections = asyncio.Semaphore(pool_size) if self.is_postgres else None
        self._gate_size = pool_size if self.is_postgres else 1
        self._gate_in_use = 0
        self._gate_waiting = 0

    def pool_stats(self) -> PoolStats:
        """Read-only counts of the connection gate, for metrics: on PostgreSQL the pool's
        connections in use and idle and the calls waiting for one; on SQLite the write
        queue (the lock held or not, the writers waiting)."""
        in_use = self._gate_in_use
        return PoolStats(self._gate_size, in_use, self._gate_size - in_use, self._gate_waiting)

    @asynccontextmanager
    async def _gate(self, gate: asyncio.Semaphore | asyncio.Lock, busy: str) -> AsyncIterator[None]:
        """Hold ``gate`` for the block, waiting at most ``wait_timeout_s`` for it (then
        ``DatabaseBusy`` with ``busy``), and count the holders and waiters for
        ``pool_stats``."""
        self._gate_waiting += 1
        try:
            async with asyncio.timeout(self.wait_timeout_s):
                await gate.acquire()
        except TimeoutError:
            raise DatabaseBusy(f"{busy} within {self.wait_timeout_s:g} s") from None
        finally:
            self._gate_waiting -= 1
        self._gate_in_use += 1
        try:
            yield
        finally:
            self._gate_in_use -= 1
            gate.release()

    async def connect(self) -> None:
        """Open the pool (PostgreSQL) or the file (SQLite), and check that it answers.

        Raises ``DatabaseUnavailable`` when it does not.
        """
        if self._sqlite is None:
            with driver_errors():
                await self._db.connect()
        await self.fetch_one(sa.text("SELECT 1"))
        if self._sqlite_file is not None:
            self._sqlite_identity = self._file_identity()

    async def disconnect(self) -> None:
        """Close every connection."""
        if self._sqlite is not None:
            await self._sqlite.close()
        else:
            await self._db.disconnect()

    def _file_identity(self) -> tuple[int, int]:
        """The SQLite file's (device, inode); ``DatabaseUnavailable`` when it is gone."""
        assert self._sqlite_file is not None
        try:
            stat = os.stat(self._sqlite_file)
        except OSError as error:
            raise DatabaseUnavailable(f"the SQLite file {self._sqlite_file} is gone") from error
        return (stat.st_dev, stat.st_ino)

    def _check_file(self) -> None:
        """Raise ``DatabaseUnavailable`` when the SQLite file opened at ``connect`` was
        removed or replaced: its connections would go on writing to an unlinked file."""
        if self._sqlite_identity is not None and self._file_identity() != self._sqlite_identity:
            raise DatabaseUnavailable(
                f"the SQLite file {self._sqlite_file} was replaced since the server opened it"
            )

    @asynccontextmanager
    async def _connection_slot(self) -> AsyncIterator[None]:
        """On PostgreSQL, wait at most ``wait_timeout_s`` for one of the pool's connections.

        ``databases`` waits for a pooled connection without a bound; this gate, as wide as
        the pool, bounds the wait and raises ``DatabaseBusy``. A task already holding a slot
        (inside ``write_transaction``) passes straight through. On SQLite: no gate.
        """
        holder = (self, asyncio.current_task())
        if self._connections is None or _holding.get() == holder:
            yield
            return
        async with self._gate(self._connections, "no database connection came free"):
            token = _holding.set(holder)
            try:
                yield
            finally:
                _holding.reset(token)

    async def fetch_one(self, query: ClauseElement) -> Row | None:
        """Run ``query`` and return its first row as a mapping, or None."""
        rows = await self._run(query, one=True)
        return rows[0] if rows else None

    async def fetch_all(self, query: ClauseElement) -> list[Row]:
        """Run ``query`` and return every row as a mapping."""
        return await self._run(query, one=False)

    async def _run(self, query: ClauseElement, *, one: bool) -> list[Row]:
        """Run ``query`` (compiled once per shape) on the driver's own connection: the
        task's connection of ``databases`` on PostgreSQL (its transaction, if any), ours
        on SQLite (the write transaction's, if this task is in one)."""
        sql, values = self._compile(query)
        return await self._execute(sql, values, one=one)

    async def _execute(self, sql: str, values: list[Any], *, one: bool) -> list[Row]:
        self._check_file()
        if self._sqlite is None:
            async with self._connection_slot():
                with driver_errors():
                    async with self._db.connection() as connection:
                        raw = connection.raw_connection
                        if one:
                            record = await raw.fetchrow(sql, *values)
                            return [] if record is None else [ResultRow(record.items())]
                        return [
                            ResultRow(record.items()) for record in await raw.fetch(sql, *values)
                        ]
        held = _sqlite_held.get()
        if held is not None and held[0] is self:
            return await self._sqlite_run(held[1], sql, values, one)
        with driver_errors():
            connection = await self._sqlite.acquire()
        try:
            return await self._sqlite_run(connection, sql, values, one)
        finally:
            await self._sqlite.release(connection)

    @staticmethod
    async def _sqlite_run(connection: Any, sql: str, values: list[Any], one: bool) -> list[Row]:
        with driver_errors():
            async with connection.execute(sql, values) as cursor:
                rows = await (cursor.fetchmany(1) if one else cursor.fetchall())
                if not rows:
                    return []
                names = [column[0] for column in cursor.description]
        return [ResultRow(zip(names, row, strict=True)) for row in rows]

    def insert(self, table: sa.Table) -> Any:
        """An INSERT in this backend's dialect, so ``on_conflict_do_*`` is available."""
        return (postgresql.insert if self.is_postgres else sqlite.insert)(table)

    @asynccontextmanager
    async def _writer(self) -> AsyncIterator[None]:
        """On SQLite, queue this task behind the process's other writers (FIFO).

        SQLite takes one writer at a time; writers of this process wait their turn here
        (at most ``wait_timeout_s``, then ``DatabaseBusy``) instead of sleeping in SQLite's
        busy handler, which backs off by up to 100 ms. A task already inside
        ``write_transaction`` passes straight through. Writers of other processes still
        meet the busy timeout. On PostgreSQL: no queue.
        """
        if self._write_lock is None or _writing.get() is self:
            yield
            return
        async with self._gate(self._write_lock, "the SQLite write lock did not come free"):
            token = _writing.set(self)
            try:
                yield
            finally:
                _writing.reset(token)

    async def write_one(self, query: ClauseElement) -> Row | None:
        """Run a writing ``query`` (``… RETURNING``) and return its first row, or None."""
        async with self._writer():
            return await self.fetch_one(query)

    async def write_prepared(self, statement: Prepared, params: Mapping[str, Any]) -> Row | None:
        """Run a writing ``Prepared`` statement (``… RETURNING``) with ``params`` (its
        values by name) and return its first row, or None; as ``write_one`` does."""
        sql, values = statement.bind(self._dialect, params)
        async with self._writer():
            rows = await self._execute(sql, values, one=True)
            return rows[0] if rows else None

    async def write_all(self, query: ClauseElement) -> list[Row]:
        """Run a writing ``query`` (``… RETURNING``) and return every row it returned."""
        async with self._writer():
            return await self.fetch_all(query)

    @asynccontextmanager
    async def pinned_connection(self) -> AsyncIterator[None]:
        """Run the block on one connection: every statement this task awaits in it uses
        that connection, so a session-level lock taken in the block (an advisory lock on
        PostgreSQL) lasts until the block ends; transactions opened in it run on it too.
        Raises ``DatabaseUnavailable``/``DatabaseBusy`` as ``fetch_one`` does."""
        if self._sqlite is not None:
            yield
            return
        async with self._connection_slot():
            with driver_errors():
                async with self._db.connection():
                    yield

    async def ping(self) -> None:
        """Raise ``DatabaseUnavailable`` unless the database answers ``SELECT 1`` (and, on
        SQLite, its file is still the one opened at ``connect``)."""
        await self.fetch_one(sa.text("SELECT 1"))

    @asynccontextmanager
    async def write_transaction(self) -> AsyncIterator[None]:
        """Run the block in one transaction on this task's connection.

        On SQLite the transaction starts with ``BEGIN IMMEDIATE``: it holds the write lock
        from its first statement, so a read-then-write inside it can never be overtaken by
        another writer (a plain ``BEGIN`` would fail with "database is locked" on its first
        write). On PostgreSQL rows are locked with ``SELECT … FOR UPDATE`` by the caller.
        Every ``fetch_*`` awaited inside the block, by this task, joins the transaction.
        Raises ``DatabaseUnavailable``/``DatabaseBusy`` as ``fetch_one`` does.
        """
        if self.is_postgres:
            async with self._connection_slot():
                with driver_errors():
                    async with self._db.connection() as connection:
                        transaction = connection.raw_connection.transaction()
                        await transaction.start()
                        try:
                            yield
                        except BaseException:
                            # On a connection whose backend is gone the rollback fails too;
                            # the connection block still hands it back to the pool (through
                            # ``databases``' Transaction a failed rollback kept it checked
                            # out for good, and the pool ran dry).
                            with suppress(Exception):
                                await transaction.rollback()
                            raise
                        await transaction.commit()
            return
        assert self._sqlite is not None
        held = _sqlite_held.get()
        if held is not None and held[0] is self:
            yield
            return
        self._check_file()
        async with self._writer():
            with driver_errors():
                connection = await self._sqlite.acquire()
            token = _sqlite_held.set((self, connection))
            try:
                with driver_errors():
                    await connection.execute("BEGIN IMMEDIATE")
                try:
                    yield
                except BaseException:
                    with driver_errors():
                        await connection.execute("ROLLBACK")
                    raise
                with driver_errors():
                    await connection.execute("COMMIT")
            finally:
                _sqlite_held.reset(token)
                await self._sqlite.release(connection)
