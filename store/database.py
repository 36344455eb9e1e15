"""The store's one door to the database: the only module that imports ``databases``.

``Database`` wraps a ``databases.Database`` on PostgreSQL (asyncpg) or our own ``sqlite3``
connections on SQLite (``store.sqlite_pool``), chosen by the URL (``store.urls``), holds
that backend's ``Dialect`` (``store.dialects``: every difference between the backends), and
gives the store ``fetch_one``/``fetch_all`` that return plain mappings, the ``write_*``
methods that queue SQLite's writers, and ``write_transaction`` that takes the write lock up
front (``BEGIN IMMEDIATE`` on SQLite) so two writers never both read and then write.

Here live the gates (a bounded wait for a pooled connection or the SQLite write lock), the
transactions and the context variables that let a task's statements join its transaction.
Statements are compiled by ``store.statements``; driver errors become typed store errors in
``store.driver_errors``. The SQL and values go straight to the driver's connection: on
PostgreSQL the asyncpg connection ``databases`` holds for the task (``raw_connection``, so
its transactions and pool stay ``databases``'; a ``write_transaction``'s statements go to
its connection as kept for the task that opened it, without a lookup), on SQLite our own
connections, the writer queue's and the readers', each statement and the fetch of its rows
one hop to the connection's thread; a ``write_transaction``'s ``BEGIN IMMEDIATE`` goes with
its first statement, a block's ``last_statement`` takes its ``COMMIT`` with it, and
``write_then`` is a whole transaction of two statements in one hop.
"""

import asyncio
import os
import sqlite3
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager, suppress
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, TypeVar

import databases
import sqlalchemy as sa
from sqlalchemy.sql import ClauseElement

from store.dialects import Dialect, dialect_for
from store.driver_errors import driver_errors
from store.errors import DatabaseBusy, DatabaseUnavailable, InvalidInput
from store.sqlite_pool import SQLiteConnection, SQLiteConnections, open_connection, truncate_wal
from store.sqlite_steps import ResultRow, Row, Steps, end, fetched
from store.statements import CompiledStatements, Prepared
from store.urls import dialect_of, normalize_url, shown_url, sqlite_path

__all__ = [
    "IN_LIST_CHUNK",
    "Database",
    "PoolStats",
    "ResultRow",
    "Row",
    "StatementObserver",
    "chunked",
    "fetch_in_chunks",
    "normalize_url",
    "shown_url",
    "sqlite_path",
]
"""``normalize_url``, ``shown_url`` and ``sqlite_path`` are ``store.urls``'; the server and
the tests import them from here too."""

IN_LIST_CHUNK = 500
_writing: ContextVar[object] = ContextVar("connector_store_writing", default=None)
_holding: ContextVar[object] = ContextVar("connector_store_holding", default=None)
_sqlite_held: ContextVar[tuple[object, "_SQLiteTransaction"] | None] = ContextVar(
    "connector_store_sqlite_connection", default=None
)
_transaction: ContextVar[tuple["Database", object] | None] = ContextVar(
    "connector_store_transaction", default=None
)
"""The ``write_transaction`` this task is in: its database and a marker of its own."""
_pg_held: ContextVar[tuple["Database", object, Any] | None] = ContextVar(
    "connector_store_pg_transaction", default=None
)
"""On PostgreSQL, the ``write_transaction`` a task is in: its database, the task and the
asyncpg connection its statements go to straight (no gate, no ``databases`` lookup)."""
_T = TypeVar("_T")

StatementObserver = Callable[[str, Sequence[Any], object | None], None]
"""``Database.statement_observer``: called with (SQL, values, transaction or None)."""

Then = Callable[[list[Row]], tuple[Prepared, Sequence[Mapping[str, Any]]] | None]
"""``Database.write_then``'s second statement: given the first's rows, a ``Prepared`` and
the parameters by name of each of its runs (one ``executemany``), or None for none."""


@dataclass(slots=True)
class _SQLiteTransaction:
    """A ``write_transaction`` on SQLite: its connection, whether its ``BEGIN IMMEDIATE``
    has run (it goes with the block's first statement, in that hop), the writes sent
    ahead (``Database.write_ahead``) that go with the next statement, in its hop, whether
    that statement is the block's last (``Database.last_statement``: its ``COMMIT`` goes
    with it) and whether that ``COMMIT`` has run."""

    connection: SQLiteConnection
    begun: bool = False
    ahead: list[tuple[str, Sequence[Any]]] = field(default_factory=list)
    closing: bool = False
    committed: bool = False

    @property
    def pending(self) -> bool:
        """Whether the transaction has written, or holds writes not yet run."""
        return self.begun or bool(self.ahead)

    def refuse_after_commit(self) -> None:
        """Fail (``AssertionError``) once the block's last statement has committed: a
        statement, or a write sent ahead, after it would run outside the transaction or
        not at all."""
        assert not self.committed, "a statement after the block's last_statement"


def _begun(raw: sqlite3.Connection, transaction: _SQLiteTransaction | None) -> sqlite3.Connection:
    """``raw``, its transaction's ``BEGIN IMMEDIATE`` and the writes sent ahead run first
    if still pending (on the connection's thread)."""
    if transaction is not None:
        if not transaction.begun:
            raw.execute("BEGIN IMMEDIATE")
            transaction.begun = True
        ahead, transaction.ahead = transaction.ahead, []
        for sql, values in ahead:
            raw.execute(sql, values).close()
    return raw


def _result_rows(records: Sequence[Any]) -> list[Row]:
    """asyncpg's records as ``ResultRow``s, the column names read once for all of them."""
    if not records:
        return []
    names = tuple(records[0].keys())
    return [ResultRow(zip(names, record, strict=True)) for record in records]


async def _asyncpg_rows(raw: Any, sql: str, values: Sequence[Any], one: bool) -> list[Row]:
    """``sql`` run with ``values`` on the asyncpg connection ``raw``: its rows (the first
    only, if ``one``) as ``ResultRow``s."""
    if one:
        record = await raw.fetchrow(sql, *values)
        return [] if record is None else [ResultRow(record.items())]
    return _result_rows(await raw.fetch(sql, *values))


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
    finish: Callable[[sa.Select[Any]], sa.Select[Any]] = lambda query: query,
    *,
    descending: bool = False,
) -> list[_T]:
    """``query``'s rows as records, with ``column IN values`` when ``values`` is given:
    ``IN_LIST_CHUNK`` values a statement, the chunks' records merged back into ``order``
    (its reverse when ``descending``) and cut to ``limit`` (each chunk's statement carries
    the limit too). ``finish`` wraps each statement once its condition is complete
    (``store.sizes.within_bytes``)."""
    if values is None:
        return [record(row) for row in await db.fetch_all(finish(query))]
    found: list[_T] = []
    for chunk in chunked(values):
        statement = finish(query.where(column.in_(chunk)))
        found.extend(record(row) for row in await db.fetch_all(statement))
    found.sort(key=order, reverse=descending)
    return found if limit is None else found[:limit]


@dataclass(frozen=True, slots=True)
class PoolStats:
    """``Database.pool_stats``: the gate's size and its slots in use, idle and waited for."""

    size: int
    in_use: int
    idle: int
    waiting: int


PING = Prepared(lambda _: sa.text("SELECT 1"))
"""``ping``'s statement."""
CUSTOM_PLANS = Prepared(lambda _: sa.text("SET LOCAL plan_cache_mode = force_custom_plan"))
"""Plan each statement of this transaction with its values (PostgreSQL)."""


def _ms(seconds: float) -> int:
    """``seconds`` in whole milliseconds, at least 1 (0 would switch PostgreSQL's timeouts off)."""
    return max(1, round(seconds * 1000))


class Database:
    """A connected database for the store.

    ``url``: a database URL (see ``parse_url``; raises ``InvalidInput`` for one the store
    cannot use). ``pool_size``: the most PostgreSQL connections held at once.
    ``wait_timeout_s``: the longest a call waits, in seconds, for a pooled connection
    (PostgreSQL; each new connection's connect too, then ``DatabaseUnavailable``) or for the
    write lock (SQLite: the in-process writer queue, and the busy timeout for other
    processes' writers) before it fails with ``DatabaseBusy``.
    ``lock_timeout_s`` (PostgreSQL): the longest one statement waits for a row or table lock
    held by another session (PostgreSQL's ``lock_timeout``) before it fails with
    ``DatabaseBusy``; by default half of ``wait_timeout_s``, so calls stalled behind a stuck
    peer's lock give their connections back before a call queued for one of them gives up:
    a pool full of stalled calls does not fail an unrelated read. ``statement_timeout_s``
    (PostgreSQL): the backstop for any one statement (``statement_timeout``), also
    ``DatabaseBusy``. Both are sent as startup parameters; 0 sends none (pgbouncer refuses
    them: set them on the role or database instead, ``ALTER ROLE … SET lock_timeout``). Every
    call raises ``DatabaseUnavailable`` when the database cannot be
    reached, or (SQLite) when its file was removed or replaced since ``connect``: nothing is
    read from or written to a file that is gone. ``statement_cache_size``: asyncpg's
    prepared-statement cache (None: asyncpg's default; 0 behind pgbouncer in transaction
    mode). ``pool_stats`` reads the gate's counts. ``dialect``: the backend's ``Dialect``
    (``store.dialects``), which the store asks wherever the backends differ. Raises
    ``InvalidInput`` for a wait that is not positive or a lock or statement timeout that is
    negative.

    ``statement_observer`` (None by default; for benchmarks and tests) is called, when set,
    with ``(sql, values, transaction)`` for each statement sent to the driver, just before it
    is sent: the SQL in the driver's paramstyle, its positional values, and ``transaction``
    an opaque value that stands for the ``write_transaction`` the statement runs in (equal
    for every statement of one transaction, nested blocks included, and unequal across
    transactions) or None outside one. ``write_many`` reports each of its rows as one
    statement; transaction control (``BEGIN``, ``COMMIT``, ``ROLLBACK``) and connection resets
    are not reported. What the observer raises fails the statement's call, before it runs.
    """

    def __init__(
        self,
        url: str,
        *,
        pool_size: int = 20,
        wait_timeout_s: float = 10.0,
        lock_timeout_s: float | None = None,
        statement_timeout_s: float = 30.0,
        statement_cache_size: int | None = None,
    ) -> None:
        self.url = normalize_url(url)
        self.dialect: Dialect = dialect_for(self.url)
        self.wait_timeout_s = wait_timeout_s
        self.lock_timeout_s = wait_timeout_s / 2 if lock_timeout_s is None else lock_timeout_s
        self.statement_timeout_s = statement_timeout_s
        self.pool_size = pool_size
        if not wait_timeout_s > 0:
            raise InvalidInput(
                "waitTimeout", f"must be a positive number of seconds, not {wait_timeout_s}"
            )
        timeouts = {"lock_timeout": self.lock_timeout_s, "statement_timeout": statement_timeout_s}
        for name, seconds in timeouts.items():
            if not seconds >= 0:
                raise InvalidInput(name, f"must be 0 (not set) or more seconds, not {seconds}")
        self._pinned: set[int] = set()
        options: dict[str, Any] = (
            {
                "min_size": 1,
                "max_size": pool_size,
                # Each new connection's connect: a server that accepts and never answers
                # (a host going down, a full backlog) fails it past the wait, not after
                # asyncpg's own 60 s.
                "timeout": wait_timeout_s,
                "reset": self._reset_connection,
                "server_settings": {
                    name: f"{_ms(seconds)}ms" for name, seconds in timeouts.items() if seconds
                },
            }
            if self.dialect.pooled
            else {"timeout": wait_timeout_s}
        )
        if self.dialect.pooled and statement_cache_size is not None:
            # asyncpg's prepared-statement cache; 0 behind pgbouncer in transaction mode.
            options["statement_cache_size"] = statement_cache_size
        self._db = databases.Database(self.url, **options)
        self._sqlite_file = sqlite_path(self.url)
        self._sqlite_identity: tuple[int, int] | None = None
        self._sqlite: SQLiteConnections | None = None
        if self._sqlite_file is not None:
            path, timeout = str(self._sqlite_file), wait_timeout_s
            self._sqlite = SQLiteConnections(
                lambda: open_connection(path, timeout),
                size=8,
            )
        self._sql_dialect = dialect_of(self.url)
        self._compile = CompiledStatements(self._sql_dialect)
        self._write_lock = asyncio.Lock() if self.dialect.one_writer else None
        self._connections = asyncio.Semaphore(pool_size) if self.dialect.pooled else None
        self._gate_size = pool_size if self.dialect.pooled else 1
        self._gate_in_use = 0
        self._gate_waiting = 0
        self.statement_observer: StatementObserver | None = None

    @property
    def is_postgres(self) -> bool:
        """Whether the backend is PostgreSQL, for code outside the store that seeds or checks
        per backend (tests, benchmarks); the store asks ``dialect``."""
        return self.dialect.is_postgres

    async def _reset_connection(self, connection: Any) -> None:
        """asyncpg's ``reset`` (a public option of its pool, passed through by ``databases``)
        for a connection given back to the pool: asyncpg's own reset is a round trip
        (``RESET ALL``, ``CLOSE ALL``, advisory locks, listeners) on every release, that is
        on every store call, for session state the store leaves on no connection but one a
        ``pinned_connection`` block held (a session advisory lock, perhaps): that one gets
        asyncpg's reset query (``get_reset_query``), any other nothing. A transaction left
        open is rolled back by the pool before it calls this (pinned by
        ``tests/store/test_database.py``)."""
        pid = connection.get_server_pid()
        if pid in self._pinned:
            self._pinned.discard(pid)
            await connection.execute(connection.get_reset_query())

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
        if isinstance(gate, asyncio.Semaphore) and not gate.locked():
            # Free (a semaphore is locked while anyone waits): taken at once, no timer armed.
            await gate.acquire()
        else:
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
        await self.ping()
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

    def _observe(self, sql: str, values: Sequence[Any]) -> None:
        """Report one statement to ``statement_observer`` (set), with this task's
        transaction of this database or None."""
        assert self.statement_observer is not None
        self.statement_observer(sql, values, self._current_transaction())

    def _current_transaction(self) -> tuple["Database", object] | None:
        held = _transaction.get()
        return held if held is not None and held[0] is self else None

    async def _execute(self, sql: str, values: list[Any], *, one: bool) -> list[Row]:
        if self.statement_observer is not None:
            self._observe(sql, values)
        self._check_file()
        if self._sqlite is None:
            held = _pg_held.get()
            if held is not None and held[0] is self and held[1] is asyncio.current_task():
                with driver_errors():
                    return await _asyncpg_rows(held[2], sql, values, one)
            async with self._connection_slot():
                with driver_errors():
                    async with self._db.connection() as connection:
                        return await _asyncpg_rows(connection.raw_connection, sql, values, one)
        return await self._on_sqlite(lambda raw: fetched(raw, sql, values, one))

    async def _on_sqlite(self, work: Callable[[sqlite3.Connection], _T]) -> _T:
        """``work(connection)`` in one hop to a connection's thread: this task's
        ``write_transaction``'s (after its pending ``BEGIN IMMEDIATE``), else one of the
        pool's. Raises as ``fetch_one`` does."""
        assert self._sqlite is not None
        held = _sqlite_held.get()
        if held is not None and held[0] is self:
            transaction = held[1]
            transaction.refuse_after_commit()
            if not transaction.closing:
                with driver_errors():
                    return await transaction.connection.run(
                        lambda raw: work(_begun(raw, transaction))
                    )

            def committing(raw: sqlite3.Connection) -> _T:
                result = work(_begun(raw, transaction))
                raw.execute("COMMIT")
                transaction.committed = True
                return result

            with driver_errors():
                return await transaction.connection.run(committing)
        with driver_errors():
            connection: SQLiteConnection = await self._sqlite.acquire()
        try:
            with driver_errors():
                return await connection.run(work)
        finally:
            await self._sqlite.release(connection)

    def insert(self, table: sa.Table) -> Any:
        """An INSERT in this backend's dialect, so ``on_conflict_do_*`` is available."""
        return self.dialect.insert(table)

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
        sql, values = statement.bind(self._sql_dialect, params)
        async with self._writer():
            rows = await self._execute(sql, values, one=True)
            return rows[0] if rows else None

    async def fetch_prepared(self, statement: Prepared, params: Mapping[str, Any]) -> Row | None:
        """Run a reading ``Prepared`` statement with ``params`` (its values by name) and
        return its first row, or None; as ``fetch_one`` does."""
        sql, values = statement.bind(self._sql_dialect, params)
        rows = await self._execute(sql, values, one=True)
        return rows[0] if rows else None

    async def fetch_prepared_all(self, statement: Prepared, params: Mapping[str, Any]) -> list[Row]:
        """Run a reading ``Prepared`` statement with ``params`` and return every row."""
        sql, values = statement.bind(self._sql_dialect, params)
        return await self._execute(sql, values, one=False)

    async def write_prepared_all(self, statement: Prepared, params: Mapping[str, Any]) -> list[Row]:
        """Run a writing ``Prepared`` statement (``… RETURNING``) with ``params`` and return
        every row it returned; as ``write_all`` does."""
        sql, values = statement.bind(self._sql_dialect, params)
        async with self._writer():
            return await self._execute(sql, values, one=False)

    async def write_ahead(self, statement: Prepared, params: Mapping[str, Any]) -> None:
        """Run a writing ``Prepared`` statement with ``params`` whose rows the caller does not
        read. On SQLite inside this task's ``write_transaction`` it goes with the block's
        next statement (or its ``COMMIT``), in that hop to the connection's thread: one hop
        fewer; what it raises is raised by that statement, inside the block. Elsewhere as
        ``write_prepared``."""
        held = _sqlite_held.get()
        if self._sqlite is None or held is None or held[0] is not self:
            await self.write_prepared(statement, params)
            return
        held[1].refuse_after_commit()
        sql, values = statement.bind(self._sql_dialect, params)
        if self.statement_observer is not None:
            self._observe(sql, values)
        held[1].ahead.append((sql, values))

    async def write_many(self, statement: Prepared, rows: Sequence[Mapping[str, Any]]) -> None:
        """Run a writing ``Prepared`` statement once per mapping of ``rows`` (its values by
        name), in one driver call (asyncpg's and sqlite3's ``executemany``), on this task's
        connection (its transaction, if any); nothing is returned. For rows whose values a
        batch's arrays cannot carry on both backends (bytes: SQLite's ``json_each`` holds
        text, and this SQLite has no ``unhex``), and on SQLite for the events of rows a write
        returned (``store.events.append_events``). Raises as ``write_prepared`` does."""
        if not rows:
            return
        bound = [statement.bind(self._sql_dialect, row) for row in rows]
        sql = bound[0][0]
        values = [row_values for _, row_values in bound]
        if self.statement_observer is not None:
            for row_values in values:
                self._observe(sql, row_values)
        self._check_file()
        async with self._writer():
            if self._sqlite is None:
                async with self._connection_slot():
                    with driver_errors():
                        async with self._db.connection() as connection:
                            await connection.raw_connection.executemany(sql, values)
                return
            await self._on_sqlite(lambda raw: raw.executemany(sql, values).close())

    async def write_all(self, query: ClauseElement) -> list[Row]:
        """Run a writing ``query`` (``… RETURNING``) and return every row it returned."""
        async with self._writer():
            return await self.fetch_all(query)

    async def write_then(
        self, statement: Prepared | ClauseElement, params: Mapping[str, Any], then: Then
    ) -> list[Row]:
        """SQLite only: run a writing ``statement`` (``… RETURNING``; a ``Prepared`` with
        ``params`` by name, or a statement built per call, ``params`` empty), then the
        statement ``then`` gives for the rows it returned, once per mapping of parameters it
        gives (one ``executemany``), as one ``write_steps``; returns the first statement's
        rows. Raises as ``write_steps`` does."""

        def work(steps: Steps) -> list[Row]:
            rows = steps.fetch(statement, params)
            follow = then(rows)
            if follow is not None:
                steps.many(*follow)
            return rows

        return await self.write_steps(work)

    async def write_steps(self, work: Callable[[Steps], _T]) -> _T:
        """SQLite only: ``work`` run on the connection's thread with the ``Steps`` it runs
        its statements through, as one transaction (``BEGIN IMMEDIATE`` … ``COMMIT``, or
        this task's ``write_transaction``) in one hop; returns what ``work`` returns.
        What ``work`` raises rolls back everything it ran (a ``write_transaction`` block,
        as ever, rolls back when its error leaves it) and is raised here. Raises as
        ``fetch_one`` does."""
        assert self._sqlite is not None, "write_steps is SQLite's"
        mark = self._current_transaction() or (self, object())
        observer = self.statement_observer
        observe = None if observer is None else lambda sql, values: observer(sql, values, mark)
        self._check_file()

        def run(raw: sqlite3.Connection) -> _T:
            own = not raw.in_transaction
            if own:
                raw.execute("BEGIN IMMEDIATE")
            try:
                result = work(Steps(raw, self._sql_dialect, self._compile, observe))
                if own:
                    raw.execute("COMMIT")
            except BaseException:
                if own:
                    end(raw, "ROLLBACK")
                raise
            return result

        async with self._writer():
            return await self._on_sqlite(run)

    @contextmanager
    def last_statement(self) -> Iterator[None]:
        """Inside this task's ``write_transaction``: the statement the block awaits in here
        is the transaction's last. On SQLite its ``COMMIT`` goes with it, in its hop to the
        connection's thread (one hop fewer): once it has run, nothing the block does after
        can roll it back, and a statement or a ``write_ahead`` after it fails
        (``AssertionError``). If the statement raises, nothing has committed and the block
        rolls back as ever. A cancellation of the awaiting task does not stop a hop once
        sent (every hop runs to its end on the connection's thread), so a block cancelled
        while its last statement's hop runs may have committed, as one cancelled while any
        ``COMMIT`` is on its way may have. On PostgreSQL, or outside a transaction, the
        block as it is."""
        held = _sqlite_held.get()
        if self._sqlite is None or held is None or held[0] is not self:
            yield
            return
        held[1].closing = True
        try:
            yield
        finally:
            held[1].closing = False

    @asynccontextmanager
    async def pinned_connection(self) -> AsyncIterator[None]:
        """Run the block on one connection: every statement this task awaits in it uses
        that connection, so a session-level lock taken in the block (an advisory lock on
        PostgreSQL) lasts until the block ends, and no longer: the connection is reset when
        it goes back to the pool (``_reset_connection``); transactions opened in it run on
        it too. Raises ``DatabaseUnavailable``/``DatabaseBusy`` as ``fetch_one`` does."""
        if self._sqlite is not None:
            yield
            return
        async with self._connection_slot():
            with driver_errors():
                async with self._db.connection() as connection:
                    self._pinned.add(connection.raw_connection.get_server_pid())
                    yield

    async def truncate_wal(self) -> bool | None:
        """SQLite: checkpoint the write-ahead log and cut it to zero bytes if nothing is in
        the way (``sqlite_pool.truncate_wal``: never waits for a reader or another process's
        writer; this process's writers it queues behind, as a write). Whether it was cut;
        None on PostgreSQL. Raises ``DatabaseUnavailable`` as a write does."""
        if self._sqlite is None:
            return None
        async with self._writer():
            return await self._on_sqlite(truncate_wal)

    async def ping(self) -> None:
        """Raise ``DatabaseUnavailable`` unless the database answers ``SELECT 1`` (and, on
        SQLite, its file is still the one opened at ``connect``)."""
        await self.fetch_prepared(PING, {})

    @asynccontextmanager
    async def custom_plans(self) -> AsyncIterator[None]:
        """Run the block so that PostgreSQL plans each of its statements with that call's
        values: one transaction (``write_transaction``, joined when one is open) with
        ``plan_cache_mode = force_custom_plan`` until it ends. A prepared statement is
        otherwise planned once without its values after five runs (a generic plan), which
        can read another index than its values call for. Three more round trips; on SQLite
        the block as it is. Raises as ``write_transaction`` does."""
        if not self.dialect.caches_plans:
            yield
            return
        async with self.write_transaction():
            await self.fetch_prepared_all(CUSTOM_PLANS, {})
            yield

    @asynccontextmanager
    async def write_transaction(self) -> AsyncIterator[None]:
        """Run the block in one transaction on this task's connection.

        On SQLite the transaction starts with ``BEGIN IMMEDIATE`` (sent with the block's
        first statement, in its hop; a block that runs none sends nothing): it holds the
        write lock from its first statement, so a read-then-write inside it can never be
        overtaken by another writer (a plain ``BEGIN`` would fail with "database is locked"
        on its first write). On PostgreSQL rows are locked with ``SELECT … FOR UPDATE`` by
        the caller. Every ``fetch_*`` awaited inside the block, by this task, joins the
        transaction.
        Raises ``DatabaseUnavailable``/``DatabaseBusy`` as ``fetch_one`` does.
        """
        if self.dialect.pooled:
            async with self._connection_slot():
                with driver_errors():
                    async with self._db.connection() as connection:
                        transaction = connection.raw_connection.transaction()
                        await transaction.start()
                        outer = _transaction.get()
                        mark = _transaction.set(
                            outer if outer is not None and outer[0] is self else (self, object())
                        )
                        own = _pg_held.set(
                            (self, asyncio.current_task(), connection.raw_connection)
                        )
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
                        finally:
                            _pg_held.reset(own)
                            _transaction.reset(mark)
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
            transaction = _SQLiteTransaction(connection)
            token = _sqlite_held.set((self, transaction))
            mark = _transaction.set((self, object()))
            try:
                try:
                    yield
                except BaseException:
                    transaction.ahead.clear()
                    with driver_errors():
                        await connection.run(lambda raw: end(raw, "ROLLBACK"))
                    raise
                if transaction.pending and not transaction.committed:
                    with driver_errors():
                        await connection.run(lambda raw: end(_begun(raw, transaction), "COMMIT"))
            finally:
                _transaction.reset(mark)
                _sqlite_held.reset(token)
                await self._sqlite.release(connection)
