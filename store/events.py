"""The event log (docs/architecture.md, 'The event log'): one event per applied write of an
operation or a watch, appended by the write itself, and the readers of the log.

Appending. Every store write that changes an operation or a watch is a ``Logged`` (a
``Prepared`` single write), a ``LoggedItems`` (a batch's ``ItemStatement``) or goes through
``run_logged`` (a statement built per call): on PostgreSQL the write and its events are one
statement (a writable CTE: ``WITH changed AS (<write> RETURNING …), appended AS (INSERT INTO
<log> SELECT … FROM changed) SELECT * FROM changed``); on SQLite they are one transaction
(the write, then one ``INSERT … VALUES`` per row it returned, in one ``executemany``), sent
in one hop to the connection's thread (``Database.write_then``). Either
way an event exists exactly when its write applied: a refused write returns no row and
appends nothing. Lease renewals are not logged. The actor is ``store.context.acting_as``'s
DID (None: the system).

An event stores what its write left (``to_state``/``to_status``, the attempts, the
generation); its ``from_state``/``from_status`` is read as the previous event's of the same
row. Each row's events are numbered in the order their writes committed: an event's ``id``
is drawn when its row is already locked by its write, so after every earlier write of that
row committed.

Ordering for readers (``*_events_after``), whose position is ``(tx, id)`` (``sequence``):
- PostgreSQL: ``tx`` is the writing transaction's id (``pg_current_xact_id()``), ``id`` a
  sequence's. A transaction may commit after another that drew later ids, so a reader reads
  only events whose ``tx`` is below the safe horizon (``safe_horizon``: the oldest
  transaction of this database still running, as ``pg_snapshot_xmin`` but leaving out other
  databases'): every transaction below it has ended, and any transaction still to commit
  has an id at or above it, so it sorts after every event already read, through any server
  replica; on a standby, whose ``pg_stat_activity`` shows none of the primary's sessions,
  the horizon is ``pg_snapshot_xmin`` itself, which the standby's snapshot takes from the
  primary. The price: a long transaction in the database holds readers back (not writers)
  until it ends. Within one transaction (and one ``tx``), ids follow the statements.
- SQLite: writers are serialized (one write transaction at a time, ``BEGIN IMMEDIATE`` or
  an autocommit statement holding the write lock), so ids are drawn in commit order;
  ``tx`` is 0 and every committed event is safe to read. ``AUTOINCREMENT`` never reuses an
  id after a delete.

The ``sequence`` clients see is opaque: 32 hex digits, ``tx`` then ``id``, so sequences
sort as strings in log order.

Collecting (``collect_operation_events``, ``collect_watch_events``): each log only as a
prefix in log order, by its own age, up to the safe horizon, recording the newest position
collected (``event_collected``, which only moves forward). Collecting an operation leaves
its events. A read after a position below that frontier (of the log, or of one row's
events) raises ``EventsCollected`` (never a page across a collected gap); the head is the
newest event readable or the frontier, whichever is later, so it never moves back.
"""

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Final, TypeVar

import sqlalchemy as sa
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.functions import FunctionElement

from store import validation as check
from store.context import current_actor
from store.database import Database, Row, chunked
from store.dialects import DIALECTS, EVENT_CLOCK_POSTGRESQL, Dialect
from store.errors import EventsCollected, InvalidInput
from store.items import ItemStatement
from store.operation_match import EVENT, key_conditions
from store.pages import MAX_PAGE, read_limit
from store.records import (
    OperationEventRecord,
    OperationKey,
    WatchEventRecord,
    WatchIdentity,
)
from store.sizes import SIZE, Measured, row_bytes
from store.sqlite_steps import Steps
from store.statements import Prepared, param
from store.tables import event_collected, operation_event, watch_event
from store.tables import operation as op
from store.tables import projection_watch as watch

# Operation actions, stored lower case, shown UPPER_SNAKE by the API (``OperationAction``).
CLAIMED: Final = "claimed"
LEASED: Final = "leased"
TAKEN_OVER: Final = "taken_over"
RELEASED: Final = "released"
SEND_MARKED: Final = "send_marked"
DEFERRED: Final = "deferred"
RECORDED: Final = "recorded"
FINALIZED: Final = "finalized"
CANCELLED: Final = "cancelled"
REISSUED: Final = "reissued"
FORCE_RELEASED: Final = "force_released"
RESUMED: Final = "resumed"
OPERATION_ACTIONS: Final = (
    CLAIMED,
    LEASED,
    TAKEN_OVER,
    RELEASED,
    SEND_MARKED,
    DEFERRED,
    RECORDED,
    FINALIZED,
    CANCELLED,
    REISSUED,
    FORCE_RELEASED,
    RESUMED,
)

# Watch actions; CLAIMED, DEFERRED and RESUMED are spelled as the operations'.
OPENED: Final = "opened"
COALESCED: Final = "coalesced"
VERIFIED: Final = "verified"
PENDING: Final = "pending"
REPAIR_FAILED: Final = "repair_failed"
REARMED: Final = "rearmed"
WATCH_ACTIONS: Final = (
    OPENED,
    COALESCED,
    CLAIMED,
    DEFERRED,
    VERIFIED,
    PENDING,
    REPAIR_FAILED,
    REARMED,
    RESUMED,
)

OPERATION_ERRORS: Final = frozenset({RECORDED, DEFERRED, CANCELLED})
WATCH_ERRORS: Final = frozenset({VERIFIED, PENDING, REPAIR_FAILED})
"""The actions whose event carries the write's error message (the row's ``last_error``)."""

MAX_ERROR_BYTES: Final = 2048
"""The longest ``errorMessage``, in bytes of UTF-8."""

_Event = TypeVar("_Event", OperationEventRecord, WatchEventRecord)

DEFAULT_EVENTS = 50
MAX_EVENTS = MAX_PAGE
MAX_COLLECT_EVENTS = 10_000
"""The most events one collect statement deletes."""


def checked_message(value: Any) -> str | None:
    """A write's ``errorMessage``: None, or text of at most ``MAX_ERROR_BYTES`` bytes of
    UTF-8. Raises ``InvalidInput`` naming ``errorMessage``."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidInput("errorMessage", "must be a string")
    if "\x00" in value:
        raise InvalidInput("errorMessage", "must not contain NUL characters")
    if len(check.storable("errorMessage", value)) > MAX_ERROR_BYTES:
        raise InvalidInput("errorMessage", f"must be at most {MAX_ERROR_BYTES} bytes of UTF-8")
    return value


class current_tx(FunctionElement[int]):
    """The log position of the writing transaction: its id on PostgreSQL, 0 on SQLite."""

    type = sa.BigInteger()
    inherit_cache = True


@compiles(current_tx, "postgresql")
def _current_tx_postgresql(element: current_tx, compiler: SQLCompiler, **kw: Any) -> str:
    return "pg_current_xact_id()::text::bigint"


@compiles(current_tx, "sqlite")
def _current_tx_sqlite(element: current_tx, compiler: SQLCompiler, **kw: Any) -> str:
    return "0"


class safe_horizon(FunctionElement[int]):
    """The ``tx`` below which every event is committed and none can still come: on
    PostgreSQL the oldest transaction still running in the reading statement's snapshot
    (``pg_snapshot_xip``), leaving out those ``pg_stat_activity`` shows running in another
    database (they cannot write this one's log), else the snapshot's ``xmax``; on SQLite 1
    (every ``tx`` is 0)."""

    type = sa.BigInteger()
    inherit_cache = True


class written_at(FunctionElement[int]):
    """When an event's write took effect, in epoch ms, given the written row's
    ``updated_at`` and the ``at`` of the newest event of its log (a scalar subquery).

    PostgreSQL: the statement's clock as the event is appended (``clock_timestamp()``,
    read after the write took its row locks; not ``now()``, the transaction's start, which
    would carry a write late in a long transaction, or one that waited for a lock, back
    before writes that took effect ahead of it). SQLite: the store's clock, as the row's
    ``updated_at``, but never before the newest event already in the log: writers hold the
    one write lock in turn, so a write whose time was read before it waited for the lock
    took effect after every event before it."""

    type = sa.BigInteger()
    inherit_cache = True


@compiles(written_at, "postgresql")
def _written_at_postgresql(element: written_at, compiler: SQLCompiler, **kw: Any) -> str:
    return EVENT_CLOCK_POSTGRESQL


@compiles(written_at, "sqlite")
def _written_at_sqlite(element: written_at, compiler: SQLCompiler, **kw: Any) -> str:
    updated_at, newest = (compiler.process(clause, **kw) for clause in element.clauses)
    return f"max({updated_at}, coalesce({newest}, {updated_at}))"


def _newest_at(table: sa.Table) -> sa.ScalarSelect[int]:
    """The ``at`` of the newest event of the log ``table`` (SQLite: the last appended)."""
    newest = table.alias("newest")
    return sa.select(newest.c.at).order_by(newest.c.id.desc()).limit(1).scalar_subquery()


@compiles(safe_horizon, "postgresql")
def _safe_horizon_postgresql(element: safe_horizon, compiler: SQLCompiler, **kw: Any) -> str:
    # ``pg_snapshot_xmin`` alone would be held back by a long transaction of any database
    # on the cluster. A session that ended since the snapshot is not left out (unknown:
    # it may have been this database's), nor one whose database is not shown.
    return (
        "coalesce((SELECT min(running) FROM pg_snapshot_xip(pg_current_snapshot()) AS running"
        " WHERE NOT EXISTS (SELECT 1 FROM pg_stat_activity AS other"
        " WHERE other.backend_xid = running::xid AND other.datname <> current_database())),"
        " pg_snapshot_xmax(pg_current_snapshot()))::text::bigint"
    )


@compiles(safe_horizon, "sqlite")
def _safe_horizon_sqlite(element: safe_horizon, compiler: SQLCompiler, **kw: Any) -> str:
    return "1"


def sequence_of(tx: int, event_id: int) -> str:
    """The ``sequence`` clients see of the event ``(tx, id)``: 32 hex digits."""
    return f"{tx:016x}{event_id:016x}"


BEFORE_FIRST = sequence_of(0, 0)
"""The position before every event: a log's head before its first event (an ``after`` that
reads a log from its start, refusing with ``EventsCollected`` once any was collected)."""

SEQUENCE = re.compile(r"[0-9a-f]{32}")
"""What ``sequence_of`` writes: 32 lower-case hex digits."""
MAX_POSITION = 2**63 - 1
"""The largest ``tx`` or ``id`` either backend stores (a signed 64-bit integer)."""


def position(field: str, sequence: Any) -> tuple[int, int]:
    """The ``(tx, id)`` of a ``sequence``. Raises ``InvalidInput`` naming ``field`` for one
    this store did not hand out (not 32 lower-case hex digits, or a half past 64 bits)."""
    if not isinstance(sequence, str) or SEQUENCE.fullmatch(sequence) is None:
        raise InvalidInput(field, "must be an event sequence")
    tx, event_id = int(sequence[:16], 16), int(sequence[16:], 16)
    if tx > MAX_POSITION or event_id > MAX_POSITION:
        raise InvalidInput(field, "must be an event sequence")
    return tx, event_id


@dataclass(frozen=True)
class PerRow:
    """An action decided for each written row by ``expression`` over its columns;
    ``with_error``: its events carry the row's ``last_error``."""

    expression: Callable[[Any], sa.ColumnElement[str]]
    with_error: bool = False


Action = str | PerRow
"""A logged write's action: one for every row, or one per row (``PerRow``)."""

Values = Callable[[Any, Any, Any, bool], dict[str, Any]]
"""An event's columns, given the written row's columns (``.c`` of what the write returned),
the action (an expression), the actor (an expression) and whether the event carries the
row's ``last_error``."""


@dataclass(frozen=True)
class Log:
    """One event log: its table, the logged table, the columns of a written row its events
    read (``source``), the event's columns (``values``), what names one row (``row``) and
    the actions whose events carry the row's error message (``errors``)."""

    table: sa.Table
    logged: sa.Table
    source: tuple[str, ...]
    values: Values
    row: tuple[str, ...]
    errors: frozenset[str]


OPERATION_MATCHED: Final = ("owner_did", "connector_name", "account_key")
"""The operation's columns its every event copies besides its key: the envelope fields an
event filter or a viewer's rights match (``OperationEventFilter``), which never change, so an
event matches the same filters with or without its operation."""


def _operation_event(row: Any, action: Any, actor: Any, carries_error: bool) -> dict[str, Any]:
    return {
        "tx": current_tx(),
        "caller_did": row.caller_did,
        "operation_id": row.operation_id,
        **{name: getattr(row, name) for name in OPERATION_MATCHED},
        "at": written_at(row.updated_at, _newest_at(operation_event)),
        "action": action,
        "actor_did": actor,
        "to_state": row.state,
        "attempts": row.attempts,
        "kind": row.last_kind if carries_error else sa.null(),
        "http_status": row.last_http_status if carries_error else sa.null(),
        "message": row.last_error if carries_error else sa.null(),
    }


def _watch_event(row: Any, action: Any, actor: Any, carries_error: bool) -> dict[str, Any]:
    return {
        "tx": current_tx(),
        "owner_did": row.owner_did,
        "connector_name": row.connector_name,
        "model": row.model,
        "account_key": row.account_key,
        "source_id": row.source_id,
        "at": written_at(row.updated_at, _newest_at(watch_event)),
        "action": action,
        "actor_did": actor,
        "generation": row.repair_generation,
        "to_status": row.verification_status,
        "verification_attempts": row.verification_attempts,
        "message": row.last_error if carries_error else sa.null(),
    }


OPERATIONS = Log(
    operation_event,
    op,
    (
        "caller_did",
        "operation_id",
        *OPERATION_MATCHED,
        "updated_at",
        "state",
        "attempts",
        "last_kind",
        "last_http_status",
        "last_error",
        "lease_token",
    ),
    _operation_event,
    ("caller_did", "operation_id"),
    OPERATION_ERRORS,
)
"""The operations' log."""

WATCH_IDENTITY_COLUMNS = ("owner_did", "connector_name", "model", "account_key", "source_id")
WATCHES = Log(
    watch_event,
    watch,
    (
        *WATCH_IDENTITY_COLUMNS,
        "updated_at",
        "repair_generation",
        "verification_status",
        "verification_attempts",
        "last_error",
    ),
    _watch_event,
    WATCH_IDENTITY_COLUMNS,
    WATCH_ERRORS,
)
"""The watches' log."""

ACTOR = param("p_actor", operation_event.c.actor_did)
"""The actor of a ``Prepared`` logged write, bound by ``Logged.run``."""
PRIOR_TOKEN = sa.Column("prior_token", sa.Text)
"""The lease token a leasing write found, before it wrote (``taken_over``)."""


LEASE_ACTION = PerRow(
    lambda row: sa.case(
        (
            sa.and_(row.prior_token.is_not(None), row.prior_token != row.lease_token),
            sa.literal(TAKEN_OVER),
        ),
        else_=sa.literal(LEASED),
    )
)
"""``taken_over`` when the written row's lease was another token's before the write (the
row's ``prior_token``), else ``leased``."""

VERIFICATION_ACTION = PerRow(
    lambda row: sa.case(
        (row.verification_status == sa.literal("verified"), sa.literal(VERIFIED)),
        (row.verification_status == sa.literal("repair_failed"), sa.literal(REPAIR_FAILED)),
        else_=sa.literal(PENDING),
    ),
    with_error=True,
)
"""A verification's action by the status it left: ``verified``, ``repair_failed`` or
``pending``."""


def _event_values(log: Log, action: Action, row: Any, actor: Any) -> dict[str, Any]:
    """The event's columns for a written row whose columns are ``row`` (attributes: a
    ``FromClause``'s ``.c``, or one parameter per column)."""
    expression: sa.ColumnElement[str]
    if isinstance(action, str):
        expression, carries_error = sa.literal(action), action in log.errors
    else:
        expression, carries_error = action.expression(row), action.with_error
    return log.values(row, expression, actor, carries_error)


def _event_select(log: Log, action: Action, rows: Any, actor: Any) -> tuple[list[str], Any]:
    values = _event_values(log, action, rows.c, actor)
    names = list(values)
    return names, sa.select(*(values[name] for name in names)).select_from(rows)


def appended(log: Log, action: Action, changed: sa.CTE, actor: Any) -> sa.CTE:
    """The CTE that appends the event of each row of ``changed`` (a writable CTE returning
    at least ``log.source``) to the log (PostgreSQL): add it to the statement that reads
    ``changed`` (``add_cte``)."""
    names, events = _event_select(log, action, changed, actor)
    return sa.insert(log.table).from_select(names, events).cte(f"appended_{changed.name}")


def with_events(log: Log, action: Action, write: Any, actor: Any) -> sa.Select[Any]:
    """``write`` (returning the written rows: at least ``log.source``) and the event of
    each row it returned, as one statement (PostgreSQL): a writable CTE whose answer is
    the write's rows."""
    changed = write.cte("changed")
    return sa.select(changed).add_cte(appended(log, action, changed, actor))


def current_actor_value() -> sa.BindParameter[str]:
    """The actor (``store.context.current_actor``) as a value of a statement built per
    call."""
    return sa.literal(current_actor(), sa.Text)


@dataclass(frozen=True)
class _Appender:
    """SQLite: the insert of one written row's event, a ``VALUES`` of one parameter
    ``e_<column>`` per column of the row it reads (``columns``), run once per row the write
    returned in one ``executemany``: a row's values go in as they came back, where a JSON
    array of rows read through ``json_each`` cost about 70 µs more per event."""

    columns: tuple[str, ...]
    statement: Prepared


def _appender(log: Log, action: Action, extras: Sequence[sa.Column[Any]]) -> _Appender:
    columns = {name: log.logged.c[name] for name in log.source} | {c.name: c for c in extras}
    row = SimpleNamespace(**{name: param(f"e_{name}", c) for name, c in columns.items()})
    statement = Prepared(
        lambda _: sa.insert(log.table).values(_event_values(log, action, row, ACTOR))
    )
    return _Appender(tuple(columns), statement)


def _appending(
    appender: _Appender, actor: str | None
) -> Callable[[Sequence[Row]], tuple[Prepared, list[dict[str, Any]]] | None]:
    """SQLite: the statement that appends the events of the rows a write returned, with
    the parameters of each row's run (None for no rows): ``Database.write_then``'s second
    statement. Each run's parameters are the row's columns and the actor, nothing of the
    write's own, so no name the write binds can stand in for a value of the event."""

    def then(rows: Sequence[Row]) -> tuple[Prepared, list[dict[str, Any]]] | None:
        if not rows:
            return None
        names = appender.columns
        return appender.statement, [
            {**{f"e_{name}": row[name] for name in names}, "p_actor": actor} for row in rows
        ]

    return then


WRITE_WITH_EVENTS = "the write and its events, one statement (a writable CTE)"
WRITE_ALONE = "the write"
EVENT_PER_ROW = "then, once per row the write returned (one executemany): that row's event"


class Logged:
    """A ``Prepared`` write of ``log.logged`` (``write(insert)`` returning the written rows)
    that logs ``action`` for each row it wrote. ``extras``: further columns the write
    returns that the action reads (``PRIOR_TOKEN``). ``write`` is the write alone (what
    SQLite runs before it appends; ``benchmarks/side_by_side.py`` measures the log's cost
    against it)."""

    def __init__(
        self,
        log: Log,
        action: Action,
        write: Callable[[Callable[[sa.Table], Any]], Any],
        extras: Sequence[sa.Column[Any]] = (),
    ) -> None:
        self._postgres = Prepared(lambda insert: with_events(log, action, write(insert), ACTOR))
        self.write = Prepared(write)
        self._append = _appender(log, action, extras)

    def statements(self, backend: str) -> list[tuple[str, Prepared]]:
        """What ``run`` sends on ``backend`` (``postgresql`` or ``sqlite``), in order, each
        with what it is (``store.sql_text`` prints them)."""
        if DIALECTS[backend].logs_in_write:
            return [(WRITE_WITH_EVENTS, self._postgres)]
        return [(WRITE_ALONE, self.write), (EVENT_PER_ROW, self._append.statement)]

    async def run(self, db: Database, params: Mapping[str, Any]) -> list[Row]:
        """Run the write with ``params`` (by name) and append its events; returns the
        written rows (none when a guard refused: then nothing is appended)."""
        params = {**params, "p_actor": current_actor()}
        if db.dialect.logs_in_write:
            return await db.write_prepared_all(self._postgres, params)
        return await db.write_then(self.write, params, _appending(self._append, params["p_actor"]))

    def run_steps(self, steps: Steps, params: Mapping[str, Any]) -> list[Row]:
        """SQLite: ``run`` as steps of a ``Database.write_steps`` (on the connection's
        thread): the write with ``params`` (holding ``p_actor``, the actor as the caller's
        task sees it), then its events."""
        rows = steps.fetch(self.write, params)
        follow = _appending(self._append, params["p_actor"])(rows)
        if follow is not None:
            steps.many(*follow)
        return rows

    async def run_one(self, db: Database, params: Mapping[str, Any]) -> Row | None:
        """``run`` of a write of at most one row: that row, or None."""
        rows = await self.run(db, params)
        return rows[0] if rows else None


class LoggedItems:
    """A batch write (``build(insert, rows)`` over a batch's item rows, as
    ``ItemStatement``'s, ``lock_first`` too) that logs ``action`` for each row it wrote."""

    def __init__(
        self,
        log: Log,
        action: Action,
        columns: Mapping[str, sa.Column[Any]],
        build: Callable[[Callable[[sa.Table], Any], sa.FromClause], Any],
        extras: Sequence[sa.Column[Any]] = (),
        *,
        lock_first: Callable[[sa.FromClause], sa.FromClause] | None = None,
    ) -> None:
        self._postgres = ItemStatement(
            columns,
            lambda insert, rows: with_events(log, action, build(insert, rows), ACTOR),
            lock_first=lock_first,
        )
        self._write = ItemStatement(columns, build, lock_first=lock_first)
        self._append = _appender(log, action, extras)

    def statements(self, backend: str) -> list[tuple[str, Prepared]]:
        """What ``run`` sends on ``backend`` (``postgresql`` or ``sqlite``), in order, each
        with what it is (``store.sql_text`` prints them)."""
        if DIALECTS[backend].logs_in_write:
            return [(WRITE_WITH_EVENTS, self._postgres.prepared(backend))]
        return [
            (WRITE_ALONE, self._write.prepared(backend)),
            (EVENT_PER_ROW, self._append.statement),
        ]

    def bind(
        self, dialect: Dialect, items: Sequence[Mapping[str, Any]], **params: Any
    ) -> tuple[Prepared, dict[str, Any]]:
        """The first statement ``run`` sends for ``dialect``'s backend and its parameters,
        as ``ItemStatement.bind``: the write with its events (one writable CTE) where the
        dialect ``logs_in_write`` (PostgreSQL), else the write alone (SQLite: its events
        follow in the same transaction). ``params`` must carry ``p_actor`` where the
        statement logs (``run`` sets it)."""
        statement = self._postgres if dialect.logs_in_write else self._write
        return statement.bind(dialect, items, **params)

    async def run(
        self, db: Database, items: Sequence[Mapping[str, Any]], **params: Any
    ) -> list[Row]:
        """Run the write over ``items`` with ``params`` and append its events; returns the
        written rows."""
        params["p_actor"] = current_actor()
        prepared, values = self.bind(db.dialect, items, **params)
        if db.dialect.logs_in_write:
            return await db.write_prepared_all(prepared, values)
        return await db.write_then(prepared, values, _appending(self._append, params["p_actor"]))

    def run_steps(
        self, steps: Steps, items: Sequence[Mapping[str, Any]], **params: Any
    ) -> list[Row]:
        """SQLite: ``run`` as steps of a ``Database.write_steps`` (on the connection's
        thread); ``params`` must hold ``p_actor`` (the actor as the caller's task sees it)."""
        prepared, values = self._write.bind(DIALECTS["sqlite"], items, **params)
        rows = steps.fetch(prepared, values)
        follow = _appending(self._append, params["p_actor"])(rows)
        if follow is not None:
            steps.many(*follow)
        return rows


_appenders: dict[tuple[str, Action, tuple[str, ...]], _Appender] = {}


def _appender_of(log: Log, action: Action, extras: Sequence[sa.Column[Any]]) -> _Appender:
    """``_appender``, built once per log, action and extras."""
    key = (log.table.name, action, tuple(column.name for column in extras))
    appender = _appenders.get(key)
    if appender is None:
        appender = _appenders[key] = _appender(log, action, extras)
    return appender


def event_insert(log: Log, action: Action, extras: Sequence[sa.Column[Any]] = ()) -> Prepared:
    """SQLite: the insert ``append_events`` runs once per written row for ``action`` and
    ``extras`` (``store.sql_text`` prints it)."""
    return _appender_of(log, action, extras).statement


async def append_events(
    db: Database,
    log: Log,
    action: Action,
    rows: Sequence[Row],
    extras: Sequence[sa.Column[Any]] = (),
) -> None:
    """SQLite: append ``action``'s event of each of ``rows`` (written in the caller's
    transaction, each holding ``log.source`` and the ``extras`` the action reads), one
    driver call (``Database.write_many``)."""
    follow = _appending(_appender_of(log, action, extras), current_actor())(rows)
    if follow is not None:
        await db.write_many(*follow)


async def run_logged(db: Database, log: Log, action: str, write: Any) -> list[Row]:
    """Run ``write`` (a statement built for this call, returning the written rows) and
    append ``action``'s event for each row it wrote; returns the written rows."""
    if db.dialect.logs_in_write:
        return await db.write_all(with_events(log, action, write, current_actor_value()))
    appending = _appending(_appender_of(log, action, ()), current_actor())
    return await db.write_then(write, {}, appending)


# --- reading ----------------------------------------------------------------------------


def _previous(log: Log, event: Any, column: str) -> sa.ScalarSelect[Any]:
    """The ``column`` of the event before ``event`` of the same row (None for its first)."""
    earlier = log.table.alias("earlier")
    return (
        sa.select(earlier.c[column])
        .where(*(earlier.c[name] == event.c[name] for name in log.row), earlier.c.id < event.c.id)
        .order_by(earlier.c.id.desc())
        .limit(1)
        .scalar_subquery()
    )


def _operation_events(event: Any) -> sa.Select[Any]:
    return sa.select(event, _previous(OPERATIONS, event, "to_state").label("from_state"))


def _watch_events(event: Any) -> sa.Select[Any]:
    return sa.select(event, _previous(WATCHES, event, "to_status").label("from_status"))


def operation_event_record(row: Row) -> OperationEventRecord:
    """An ``OperationEventRecord`` from a read of ``operation_event`` with ``from_state``."""
    return OperationEventRecord(
        sequence=sequence_of(row["tx"], row["id"]),
        caller_did=row["caller_did"],
        operation_id=row["operation_id"],
        at=row["at"],
        action=row["action"],
        actor_did=row["actor_did"],
        from_state=row["from_state"],
        to_state=row["to_state"],
        attempts=row["attempts"],
        kind=row["kind"],
        http_status=row["http_status"],
        message=row["message"],
    )


def watch_event_record(row: Row) -> WatchEventRecord:
    """A ``WatchEventRecord`` from a read of ``watch_event`` with ``from_status``."""
    return WatchEventRecord(
        sequence=sequence_of(row["tx"], row["id"]),
        owner_did=row["owner_did"],
        connector_name=row["connector_name"],
        model=row["model"],
        account_key=row["account_key"],
        source_id=row["source_id"],
        at=row["at"],
        action=row["action"],
        actor_did=row["actor_did"],
        generation=row["generation"],
        from_status=row["from_status"],
        to_status=row["to_status"],
        verification_attempts=row["verification_attempts"],
        message=row["message"],
    )


@dataclass(frozen=True, slots=True)
class OperationEventFilter:
    """Which events ``operation_events_after`` reads; every field given must match, each by
    the event's own columns, so an event matches alike before and after its operation is
    collected: ``states`` its ``to_state``, ``kind`` its ``kind`` (the outcome it recorded),
    the others the operation's key and envelope fields it carries (``OPERATION_MATCHED``;
    ``visible_to``: its caller or owner, ``store.operation_match.visible``). An empty
    ``states`` list matches nothing."""

    caller_did: str | None = None
    operation_id: str | None = None
    owner_did: str | None = None
    visible_to: str | None = None
    connector_name: str | None = None
    account_key: str | None = None
    kind: str | None = None
    states: Sequence[str] | None = None


@dataclass(frozen=True, slots=True)
class WatchEventFilter:
    """Which watches' events ``watch_events_after`` reads; every field given must match.
    ``statuses`` match the event's ``to_status``; ``owner_did``, ``connector_name``,
    ``model`` and ``account_key`` the watch's identity. An empty ``statuses`` list matches
    nothing."""

    owner_did: str | None = None
    connector_name: str | None = None
    model: str | None = None
    account_key: str | None = None
    statuses: Sequence[str] | None = None


def _identity(identity: WatchIdentity) -> tuple[str, str, str, str, str]:
    """The five parts of ``identity``, checked; raises ``InvalidInput`` naming one."""
    owner, connector, model, account, source = (
        check.key(field, value)
        for field, value in zip(
            ("ownerDID", "connectorName", "model", "accountKey", "sourceID"),
            identity.parts,
            strict=True,
        )
    )
    return owner, connector, model, account, source


def _limit(limit: Any) -> int:
    return check.count("limit", limit, minimum=1, maximum=MAX_EVENTS)


def _after_log(table: sa.Table, after: str | None) -> list[sa.ColumnElement[bool]]:
    """Readable log events past ``after``: below the safe horizon, after its position, and
    none at all once events past ``after`` were collected (the same statement reads the
    log and its frontier, so a read never returns a page with a collected gap before it:
    ``_read_after``)."""
    conditions: list[sa.ColumnElement[bool]] = [table.c.tx < safe_horizon()]
    if after is not None:
        at = sa.tuple_(*position("after", after))
        conditions.append(sa.tuple_(table.c.tx, table.c.id) > at)
        conditions.append(~sa.exists().where(*_collected_past(table, at)))
    return conditions


def _collected_past(table: sa.Table, at: sa.ColumnElement[Any]) -> list[sa.ColumnElement[bool]]:
    """``table``'s frontier row when the newest event collected from it is past ``at``."""
    mark = event_collected
    return [mark.c.log == table.name, sa.tuple_(mark.c.tx, mark.c.id) > at]


def _after_row(table: sa.Table, after: str) -> list[sa.ColumnElement[bool]]:
    """A row's events past ``after`` (by ``id``, each row's order), and none at all once
    events past ``after`` were collected (read with the frontier in one statement, as
    ``_after_log``: a page never skips a collected gap)."""
    at = position("after", after)
    return [table.c.id > at[1], ~sa.exists().where(*_collected_past(table, sa.tuple_(*at)))]


def _pages(
    log: Log,
    query: Callable[[Any], sa.Select[Any]],
    keys: Sequence[tuple[str, ...]],
    after: str | None,
    limit: int,
) -> sa.Select[Any]:
    """The first ``limit`` events after ``after`` (an event ``sequence``: by ``id``, each
    row's order) of each row at ``keys`` (``log.row``'s values), each with its size
    (``SIZE``), by row and then oldest first: one statement for every key."""
    event = log.table
    names = [event.c[name] for name in log.row]
    ranked = sa.select(
        event,
        sa.func.row_number().over(partition_by=names, order_by=event.c.id).label("place"),
    ).where(sa.tuple_(*names).in_([sa.tuple_(*key) for key in keys]))
    if after is not None:
        ranked = ranked.where(*_after_row(event, after))
    page = ranked.subquery("page")
    size = row_bytes(page.c[column.name] for column in event.c)
    chosen = query(page).add_columns(size.label(SIZE))
    # A page and one more event, which tells the caller whether more follow.
    most = read_limit(limit)
    return chosen.where(page.c.place <= most).order_by(
        *(page.c[name] for name in log.row), page.c.id
    )


def _measured(page: Sequence[tuple[_Event, int]]) -> Measured[_Event]:
    return Measured((record for record, _ in page), (size for _, size in page))


class EventsStore:
    """The readers of the event logs (the writers append through ``Logged`` and friends),
    and their collection (``collect_operation_events``, ``collect_watch_events``). ``clock``:
    the store's, which stamps events on SQLite."""

    def __init__(self, db: Database, clock: Callable[[], int]) -> None:
        self._db = db
        self._clock = clock

    async def operation_events_of(
        self, keys: Sequence[OperationKey], *, after: str | None = None, limit: int
    ) -> dict[tuple[str, str], Measured[OperationEventRecord]]:
        """``operation_events`` of each operation at ``keys`` (for DataLoaders), each page
        with its events' sizes (``store.sizes``), in one statement per 500 keys. Raises
        ``InvalidInput`` naming a key's field, ``after`` or ``limit``; ``EventsCollected``
        when events past ``after`` were collected."""
        wanted = sorted(
            {
                (
                    check.key("callerDID", key.caller_did),
                    check.key("operationID", key.operation_id),
                )
                for key in keys
            }
        )
        found: dict[tuple[str, str], list[tuple[OperationEventRecord, int]]] = {
            key: [] for key in wanted
        }
        for chunk in chunked(wanted):
            query = _pages(OPERATIONS, _operation_events, chunk, after, limit)
            for row in await self._read_after(query, operation_event, after):
                key = (row["caller_did"], row["operation_id"])
                found[key].append((operation_event_record(row), row[SIZE]))
        return {key: _measured(page) for key, page in found.items()}

    async def watch_events_of(
        self, identities: Sequence[WatchIdentity], *, after: str | None = None, limit: int
    ) -> dict[WatchIdentity, Measured[WatchEventRecord]]:
        """``watch_events`` of each watch at ``identities`` (for DataLoaders), as
        ``operation_events_of``."""
        wanted = sorted({_identity(identity) for identity in identities})
        found: dict[WatchIdentity, list[tuple[WatchEventRecord, int]]] = {
            WatchIdentity(*parts): [] for parts in wanted
        }
        for chunk in chunked(wanted):
            query = _pages(WATCHES, _watch_events, chunk, after, limit)
            for row in await self._read_after(query, watch_event, after):
                record = watch_event_record(row)
                found[WatchIdentity.of(record)].append((record, row[SIZE]))
        return {identity: _measured(page) for identity, page in found.items()}

    async def operation_events(
        self,
        key: OperationKey,
        *,
        after: str | None = None,
        limit: int = DEFAULT_EVENTS,
    ) -> list[OperationEventRecord]:
        """The events of the operation at ``key``, oldest first (in the order their writes
        committed), after the event ``after`` (a ``sequence`` of this operation's), at most
        ``limit`` (1 to 500). Raises ``InvalidInput`` naming ``after`` or ``limit``;
        ``EventsCollected`` when events past ``after`` were collected."""
        event = operation_event
        query = (
            _operation_events(event)
            .where(
                event.c.caller_did == check.key("callerDID", key.caller_did),
                event.c.operation_id == check.key("operationID", key.operation_id),
            )
            .order_by(event.c.id)
            .limit(_limit(limit))
        )
        if after is not None:
            query = query.where(*_after_row(event, after))
        return [operation_event_record(row) for row in await self._read_after(query, event, after)]

    async def watch_events(
        self,
        identity: WatchIdentity,
        *,
        after: str | None = None,
        limit: int = DEFAULT_EVENTS,
    ) -> list[WatchEventRecord]:
        """The events of the watch at ``identity``, oldest first, after the event ``after``
        (a ``sequence`` of this watch's), at most ``limit`` (1 to 500). Raises
        ``InvalidInput`` naming a part of the identity, ``after`` or ``limit``;
        ``EventsCollected`` when events past ``after`` were collected."""
        event = watch_event
        parts = dict(zip(WATCH_IDENTITY_COLUMNS, _identity(identity), strict=True))
        query = (
            _watch_events(event)
            .where(*(event.c[name] == value for name, value in parts.items()))
            .order_by(event.c.id)
            .limit(_limit(limit))
        )
        if after is not None:
            query = query.where(*_after_row(event, after))
        return [watch_event_record(row) for row in await self._read_after(query, event, after)]

    async def operation_events_after(
        self,
        after: str | None,
        limit: int = DEFAULT_EVENTS,
        filter: OperationEventFilter | None = None,
    ) -> list[OperationEventRecord]:
        """Events of the operations log after the position ``after`` (a ``sequence``; None:
        from the oldest kept), in log order, at most ``limit`` (1 to 500), only up to the
        safe horizon (the module's docstring): a reader that resumes after the last one
        returned never misses an event that commits later. ``filter`` narrows them
        (``OperationEventFilter``). Raises ``InvalidInput`` naming ``after``, ``limit`` or a
        filter field."""
        event = operation_event
        where = filter or OperationEventFilter()
        query = _operation_events(event).where(*_after_log(event, after))
        if where.states is not None:
            states = sorted(set(check.key_list("states", where.states)))
            if not states:
                return []
            query = query.where(event.c.to_state.in_(states))
        query = query.where(
            *key_conditions(
                EVENT,
                caller_did=where.caller_did,
                operation_id=where.operation_id,
                owner_did=where.owner_did,
                connector_name=where.connector_name,
                account_key=where.account_key,
                kind=where.kind,
                visible_to=where.visible_to,
            )
        )
        query = query.order_by(event.c.tx, event.c.id).limit(_limit(limit))
        return [operation_event_record(row) for row in await self._read_after(query, event, after)]

    async def watch_events_after(
        self,
        after: str | None,
        limit: int = DEFAULT_EVENTS,
        filter: WatchEventFilter | None = None,
    ) -> list[WatchEventRecord]:
        """Events of the watches log after the position ``after``, as
        ``operation_events_after`` reads the operations'. Raises ``InvalidInput`` naming
        ``after``, ``limit`` or a filter field."""
        event = watch_event
        where = filter or WatchEventFilter()
        query = _watch_events(event).where(*_after_log(event, after))
        if where.statuses is not None:
            statuses = sorted(set(check.key_list("statuses", where.statuses)))
            if not statuses:
                return []
            query = query.where(event.c.to_status.in_(statuses))
        identity_filters = {
            "ownerDID": (event.c.owner_did, where.owner_did),
            "connectorName": (event.c.connector_name, where.connector_name),
            "model": (event.c.model, where.model),
            "accountKey": (event.c.account_key, where.account_key),
        }
        for field, (column, value) in identity_filters.items():
            if value is not None:
                query = query.where(column == check.key(field, value))
        query = query.order_by(event.c.tx, event.c.id).limit(_limit(limit))
        return [watch_event_record(row) for row in await self._read_after(query, event, after)]

    async def _read_after(
        self, query: sa.Select[Any], table: sa.Table, after: str | None
    ) -> list[Row]:
        """The rows of a read of the log ``table`` after ``after`` (``_after_log``: none
        once events past ``after`` were collected). Raises ``EventsCollected`` when it read
        none and events past ``after`` are collected: read together, a page is whole, and
        an empty one is told apart from a collected gap by the frontier, which only moves
        forward."""
        rows = await self._db.fetch_all(query)
        if not rows and after is not None and await self._collected(table, after):
            raise EventsCollected(after)
        return rows

    async def operation_events_head(self) -> str | None:
        """The newest ``sequence`` the operations log ever handed out: its newest event a
        reader may read now (below the safe horizon), or the newest collected when that is
        later (so the head never moves back when the newest events are collected); None
        when there was never one. A reader that starts after it misses no event committed
        later. One statement."""
        return await self._head(operation_event)

    async def watch_events_head(self) -> str | None:
        """``operation_events_head`` for the watches log."""
        return await self._head(watch_event)

    async def _head(self, table: sa.Table) -> str | None:
        newest = (
            sa.select(table.c.tx, table.c.id)
            .where(table.c.tx < safe_horizon())
            .order_by(table.c.tx.desc(), table.c.id.desc())
            .limit(1)
            .subquery("newest")
        )
        mark = event_collected
        both = sa.union_all(
            sa.select(newest.c.tx, newest.c.id),
            sa.select(mark.c.tx, mark.c.id).where(mark.c.log == table.name),
        ).subquery("both")
        row = await self._db.fetch_one(
            sa.select(both.c.tx, both.c.id).order_by(both.c.tx.desc(), both.c.id.desc()).limit(1)
        )
        return None if row is None else sequence_of(row["tx"], row["id"])

    async def operation_events_collected(self, after: str) -> bool:
        """True when events past ``after`` (a ``sequence``) were collected from the
        operations log: ``after`` is below the newest event collected, so a reader resuming
        there would miss some (the caller answers ``EVENTS_COLLECTED``); an ``after`` at or
        above it misses none. Raises ``InvalidInput`` naming ``after``."""
        return await self._collected(operation_event, after)

    async def watch_events_collected(self, after: str) -> bool:
        """``operation_events_collected`` for the watches log."""
        return await self._collected(watch_event, after)

    async def _collected(self, table: sa.Table, after: str) -> bool:
        at = sa.tuple_(*position("after", after))
        query = sa.select(sa.exists().where(*_collected_past(table, at)).label("gone"))
        row = await self._db.fetch_one(query)
        return row is not None and bool(row["gone"])

    async def collect_operation_events(self, older_than_ms: int, limit: int) -> int:
        """Delete the oldest events of the operations log, as a prefix in log order, that
        are older than ``older_than_ms`` (by their ``at``, on the clock that stamped them:
        PostgreSQL's, or the store's on SQLite), at most ``limit`` (1 to 10,000); return
        how many went. Stops at the first event not that old, and at the safe horizon (an
        event still to commit sorts after every one collected), so what is kept is always
        the log from some event on, and the newest position collected is recorded
        (``*_events_collected``, ``*_events_head``). An operation collected earlier leaves
        its events to this. One transaction; call again until it returns less than
        ``limit``. Raises ``InvalidInput`` naming ``olderThanMs`` or ``limit``."""
        return await self._collect(operation_event, older_than_ms, limit)

    async def collect_watch_events(self, older_than_ms: int, limit: int) -> int:
        """``collect_operation_events`` for the watches log."""
        return await self._collect(watch_event, older_than_ms, limit)

    async def count_collectable_operation_events(self, older_than_ms: int) -> int:
        """How many events ``collect_operation_events(older_than_ms, …)`` would delete in
        all, batch after batch (``collect --dry-run``): the events in log order below the
        safe horizon before the first not older than ``older_than_ms``. Two index walks
        over that prefix in one statement. Raises ``InvalidInput`` naming ``olderThanMs``."""
        return await self._count_collectable(operation_event, older_than_ms)

    async def count_collectable_watch_events(self, older_than_ms: int) -> int:
        """``count_collectable_operation_events`` for the watches log."""
        return await self._count_collectable(watch_event, older_than_ms)

    def _cutoff(self, older_than_ms: int) -> sa.ColumnElement[int]:
        """The ``at`` below which an event is older than ``older_than_ms``, on the clock
        that stamps events: PostgreSQL's, in the statement, or the store's."""
        age = check.count("olderThanMs", older_than_ms, minimum=0, maximum=MAX_POSITION)
        return self._db.dialect.event_clock(self._clock()) - age

    async def _count_collectable(self, table: sa.Table, older_than_ms: int) -> int:
        readable = table.c.tx < safe_horizon()
        young = (
            sa.select(table.c.tx, table.c.id)
            .where(readable, table.c.at >= self._cutoff(older_than_ms))
            .order_by(table.c.tx, table.c.id)
            .limit(1)
            .subquery("young")
        )
        before_young = ~sa.exists().where(
            sa.tuple_(young.c.tx, young.c.id) <= sa.tuple_(table.c.tx, table.c.id)
        )
        query = sa.select(sa.func.count().label("n")).where(readable, before_young)
        row = await self._db.fetch_one(query.select_from(table))
        return 0 if row is None else int(row["n"])

    async def _collect(self, table: sa.Table, older_than_ms: int, limit: int) -> int:
        cutoff = self._cutoff(older_than_ms)
        size = check.count("limit", limit, minimum=1, maximum=MAX_COLLECT_EVENTS)
        oldest = (
            sa.select(table.c.tx, table.c.id, table.c.at)
            .where(table.c.tx < safe_horizon())
            .order_by(table.c.tx, table.c.id)
            .limit(size)
        )
        async with self._db.write_transaction():
            rows = await self._db.fetch_all(oldest.add_columns(cutoff.label("cutoff")))
            prefix = 0
            while prefix < len(rows) and rows[prefix]["at"] < rows[prefix]["cutoff"]:
                prefix += 1
            if prefix == 0:
                return 0
            last = (rows[prefix - 1]["tx"], rows[prefix - 1]["id"])
            await self._db.write_all(
                sa.delete(table)
                .where(sa.tuple_(table.c.tx, table.c.id) <= sa.tuple_(*last))
                .returning(table.c.id)
            )
            mark = event_collected
            frontier = self._db.insert(mark).values(log=table.name, tx=last[0], id=last[1])
            await self._db.write_all(
                frontier.on_conflict_do_update(
                    index_elements=[mark.c.log],
                    set_={"tx": frontier.excluded.tx, "id": frontier.excluded.id},
                    where=sa.tuple_(mark.c.tx, mark.c.id)
                    < sa.tuple_(frontier.excluded.tx, frontier.excluded.id),
                ).returning(mark.c.log)
            )
        return prefix
