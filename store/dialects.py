"""Where PostgreSQL and SQLite differ: one object per backend, the store's one seam.

``Database`` picks its backend's ``Dialect`` once, from its URL (``Database.dialect``); every
other store module asks that object, never which backend it runs on
(``tests/test_dialect_seam.py`` holds them to it). A dialect builds what differs in a
statement (the insert that takes ``on_conflict_*``, a list of keys, a batch's item rows,
row locks, the bounded delete) and answers, by name, the few questions on which a store
path takes another course on one backend (``one_writer``, ``logs_in_write``, ``notifies``,
``one_process``, ``caches_plans``). A new difference is a method or property here, written
for both backends, named for what it does, not for the backend.

SQL text that differs per backend inside one construct (``store.events.current_tx``,
``store.items.unindexed``) is a SQLAlchemy construct compiled per dialect (``@compiles``),
beside its meaning; ``store/sql/<backend>/`` shows what each statement becomes.
"""

import json
from collections.abc import Mapping, Sequence
from typing import Any, Final

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

__all__ = [
    "DIALECTS",
    "EVENT_CLOCK_POSTGRESQL",
    "POSTGRESQL",
    "SQLITE",
    "Dialect",
    "PostgresDialect",
    "SqliteDialect",
    "dialect_for",
    "element_type",
]

EVENT_CLOCK_POSTGRESQL: Final = "floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint"
"""PostgreSQL's clock of the event log, in epoch ms: the statement's clock now."""


def element_type(column: sa.Column[Any]) -> sa.types.TypeEngine[Any]:
    """The plain type of a batch item's column: BIGINT or INTEGER as the column, else TEXT
    (a key column's PostgreSQL collation stays the column's, which wins the comparison)."""
    if isinstance(column.type, sa.BigInteger):
        return sa.BigInteger()
    if isinstance(column.type, sa.Integer):
        return sa.Integer()
    return sa.Text()


class Dialect:
    """What one backend does its own way. ``name`` is SQLAlchemy's name of the backend
    (``postgresql``, ``sqlite``), the key of its compiled statements and of its directory
    under ``store/sql/``."""

    name: str
    is_postgres: bool
    """For code outside the store (tests, benchmarks) that seeds or checks per backend; the
    store asks the named properties below."""

    one_writer: bool
    """The database takes one writer at a time: a write transaction holds the write lock
    from its first statement to its end (SQLite's ``BEGIN IMMEDIATE``), so a path reads
    and writes without row locks, and its writers queue in the process (``Database``'s
    gate of one). Otherwise (PostgreSQL) writers run side by side from a pool, and a path
    locks the rows it will write (``FOR UPDATE``) and checks again what a concurrent
    writer may have done."""

    pooled: bool
    """Connections come from the driver's pool (asyncpg's, through ``databases``), at most
    ``pool_size``, each with the server's timeouts set; otherwise they are the store's own
    (``store.sqlite_pool``)."""

    logs_in_write: bool
    """A write's events are appended in the write's own statement (a writable CTE,
    PostgreSQL); otherwise they follow it, one insert per written row, in the same
    transaction (SQLite, whose CTEs cannot write)."""

    notifies: bool
    """Commits can be heard (``LISTEN``/``NOTIFY``, PostgreSQL); otherwise a reader polls."""

    one_process: bool
    """One process uses the database (a SQLite file), so a process-wide lock is unneeded;
    otherwise replicas share it and take an advisory lock."""

    caches_plans: bool
    """Prepared statements get a generic plan after a few runs (PostgreSQL), which
    ``Database.custom_plans`` turns off for a block."""

    numbered_parameters: bool
    """The driver numbers its parameters (``$1``, asyncpg) rather than ``?``."""

    def insert(self, table: sa.Table) -> Any:
        """An INSERT into ``table`` in this backend's dialect, so ``on_conflict_do_*`` is
        available."""
        raise NotImplementedError

    def keys_in(
        self, table: sa.FromClause, keys: Sequence[tuple[str, str]]
    ) -> sa.ColumnElement[bool]:
        """``table``'s operation key ``(caller_did, operation_id)`` is one of ``keys``."""
        raise NotImplementedError

    def item_rows(self, columns: Mapping[str, sa.Column[Any]]) -> sa.FromClause:
        """A batch's items as a table named ``item``, a column per name of ``columns``
        typed as its column (``element_type``), read from the parameters ``item_values``
        gives."""
        raise NotImplementedError

    def item_values(
        self, names: Sequence[str], items: Sequence[Mapping[str, Any]]
    ) -> dict[str, Any]:
        """The parameters of ``item_rows`` for ``items`` (mappings holding every name of
        ``names``), so the SQL is the same whatever the number of items."""
        raise NotImplementedError

    def skip_locked(self, query: sa.Select[Any]) -> sa.Select[Any]:
        """``query`` taking the rows it reads that no one else has locked, and locking them
        until the transaction ends: concurrent callers split the rows instead of waiting."""
        raise NotImplementedError

    def locked_in_order(self, query: sa.Select[Any], *order: Any) -> sa.Select[Any]:
        """``query`` locking its rows in ``order`` before the statement writes them, so two
        writers naming the same rows in other orders wait instead of deadlocking."""
        raise NotImplementedError

    def delete_first(
        self, table: sa.Table, keys: Sequence[sa.Column[Any]], where: Any, size: int
    ) -> sa.Delete:
        """A delete of at most ``size`` rows of ``table`` matching ``where``, rows others
        hold locked left out (``skip_locked``); ``keys`` are the table's key columns."""
        raise NotImplementedError

    def event_clock(self, store_now: int) -> sa.ColumnElement[int]:
        """The clock that stamps events, in epoch ms, as an SQL value; ``store_now`` is the
        store's clock, read now."""
        raise NotImplementedError


class PostgresDialect(Dialect):
    """PostgreSQL through asyncpg."""

    name = "postgresql"
    is_postgres = True
    one_writer = False
    pooled = True
    logs_in_write = True
    notifies = True
    one_process = False
    caches_plans = True
    numbered_parameters = True

    def insert(self, table: sa.Table) -> Any:
        return postgresql.insert(table)

    def keys_in(
        self, table: sa.FromClause, keys: Sequence[tuple[str, str]]
    ) -> sa.ColumnElement[bool]:
        """An ``IN`` list of pairs."""
        key = sa.tuple_(table.c.caller_did, table.c.operation_id)
        return key.in_([sa.tuple_(caller, operation) for caller, operation in keys])

    def item_rows(self, columns: Mapping[str, sa.Column[Any]]) -> sa.FromClause:
        """``unnest`` of one array parameter ``b_<name>`` per column."""
        arrays = [
            sa.bindparam(f"b_{name}", type_=postgresql.ARRAY(element_type(column)))
            for name, column in columns.items()
        ]
        return (
            sa.func.unnest(*arrays)
            .table_valued(
                *(sa.column(name, element_type(column)) for name, column in columns.items())
            )
            .render_derived(name="item")
        )

    def item_values(
        self, names: Sequence[str], items: Sequence[Mapping[str, Any]]
    ) -> dict[str, Any]:
        return {f"b_{name}": [item[name] for item in items] for name in names}

    def skip_locked(self, query: sa.Select[Any]) -> sa.Select[Any]:
        """``FOR UPDATE SKIP LOCKED``."""
        return query.with_for_update(skip_locked=True)

    def locked_in_order(self, query: sa.Select[Any], *order: Any) -> sa.Select[Any]:
        """``ORDER BY … FOR UPDATE``."""
        return query.order_by(*order).with_for_update()

    def delete_first(
        self, table: sa.Table, keys: Sequence[sa.Column[Any]], where: Any, size: int
    ) -> sa.Delete:
        """``DELETE … WHERE (keys) IN (SELECT keys … LIMIT n FOR UPDATE SKIP LOCKED)``."""
        chosen = self.skip_locked(sa.select(*keys).where(where).limit(size))
        return sa.delete(table).where(sa.tuple_(*keys).in_(chosen))

    def event_clock(self, store_now: int) -> sa.ColumnElement[int]:
        """PostgreSQL's clock in the statement (``EVENT_CLOCK_POSTGRESQL``)."""
        return sa.literal_column(EVENT_CLOCK_POSTGRESQL, sa.BigInteger)


class SqliteDialect(Dialect):
    """SQLite through the store's own ``sqlite3`` connections (``store.sqlite_pool``)."""

    name = "sqlite"
    is_postgres = False
    one_writer = True
    pooled = False
    logs_in_write = False
    notifies = False
    one_process = True
    caches_plans = False
    numbered_parameters = False

    def insert(self, table: sa.Table) -> Any:
        return sqlite.insert(table)

    def keys_in(
        self, table: sa.FromClause, keys: Sequence[tuple[str, str]]
    ) -> sa.ColumnElement[bool]:
        """An ``IN`` over one JSON array of the pairs (``json_each``), which SQLite answers
        with one probe of the primary key per pair where it scans the whole table for a
        list of pairs (``tests/store/test_leasing.py``)."""
        key = sa.tuple_(table.c.caller_did, table.c.operation_id)
        each = sa.func.json_each(sa.literal(json.dumps(list(keys)), sa.Text)).table_valued("value")
        parts = [
            sa.func.json_extract(each.c.value, sa.literal_column(f"'$[{index}]'"), type_=sa.Text)
            for index in (0, 1)
        ]
        return key.in_(sa.select(*parts).select_from(each))

    def item_rows(self, columns: Mapping[str, sa.Column[Any]]) -> sa.FromClause:
        """``json_each`` of the JSON array of rows ``b_rows``."""
        each = sa.func.json_each(sa.bindparam("b_rows", type_=sa.Text)).table_valued("value")
        return (
            sa.select(
                *(
                    sa.func.json_extract(
                        each.c.value, sa.literal_column(f"'$[{index}]'"), type_=element_type(column)
                    ).label(name)
                    for index, (name, column) in enumerate(columns.items())
                )
            )
            .select_from(each)
            .subquery("item")
        )

    def item_values(
        self, names: Sequence[str], items: Sequence[Mapping[str, Any]]
    ) -> dict[str, Any]:
        return {"b_rows": json.dumps([[item[name] for name in names] for item in items])}

    def skip_locked(self, query: sa.Select[Any]) -> sa.Select[Any]:
        """``query`` as it is: the write transaction holds the one write lock."""
        return query

    def locked_in_order(self, query: sa.Select[Any], *order: Any) -> sa.Select[Any]:
        """``query`` as it is: the write transaction holds the one write lock."""
        return query

    def delete_first(
        self, table: sa.Table, keys: Sequence[sa.Column[Any]], where: Any, size: int
    ) -> sa.Delete:
        """``DELETE … WHERE rowid IN (SELECT rowid … LIMIT n)``."""
        rowid: sa.ColumnElement[Any] = sa.literal_column("rowid")
        return sa.delete(table).where(
            rowid.in_(sa.select(rowid).select_from(table).where(where).limit(size))
        )

    def event_clock(self, store_now: int) -> sa.ColumnElement[int]:
        """``store_now``: SQLite stamps events with the store's clock."""
        return sa.literal(store_now, sa.BigInteger)


POSTGRESQL: Final = PostgresDialect()
SQLITE: Final = SqliteDialect()
DIALECTS: Final[Mapping[str, Dialect]] = {POSTGRESQL.name: POSTGRESQL, SQLITE.name: SQLITE}
"""Each backend's dialect by its name."""


def dialect_for(url: str) -> Dialect:
    """The dialect of the backend ``url`` names (a URL in the store's form,
    ``store.urls.normalize_url``'s)."""
    return POSTGRESQL if url.startswith("postgresql") else SQLITE
