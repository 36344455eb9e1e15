"""SQLite: several statements of one transaction run on its connection's thread in one hop
(``Database.write_steps``), each step's parameters taken from the rows the steps before it
returned, where one hop each would pay for the handover to the thread and back every time.
Here too the rows the store reads back (``ResultRow``) and the fetch that makes them."""

import sqlite3
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sqlalchemy.sql import ClauseElement

from store.statements import CompiledStatements, Prepared

Row = Mapping[str, Any]

Observe = Callable[[str, Sequence[Any]], None]
"""Told each statement (SQL, values) before it runs."""


class ResultRow(dict[Any, Any]):
    """A result row: its columns by name, and by position (``row[0]``) like a record."""

    def __missing__(self, key: Any) -> Any:
        if isinstance(key, int):
            return list(self.values())[key]
        raise KeyError(key)


def fetched(raw: sqlite3.Connection, sql: str, values: Sequence[Any], one: bool) -> list[Row]:
    """``sql`` run with ``values`` and its rows (the first only, if ``one``) as
    ``ResultRow``s, on the connection's thread; every row is fetched, so a write with
    ``RETURNING`` runs to its end."""
    cursor = raw.execute(sql, values)
    try:
        rows = cursor.fetchall()
        if not rows:
            return []
        names = [column[0] for column in cursor.description]
    finally:
        cursor.close()
    return [ResultRow(zip(names, row, strict=True)) for row in (rows[:1] if one else rows)]


def end(raw: sqlite3.Connection, statement: str) -> None:
    """``COMMIT`` or ``ROLLBACK`` the open transaction, if one is open."""
    if raw.in_transaction:
        raw.execute(statement)


class Steps:
    """The statements of one ``Database.write_steps`` transaction, run as they are called,
    on the connection's thread (never awaited): ``fetch`` a statement's rows, ``many`` a
    statement once per mapping of parameters."""

    def __init__(
        self,
        raw: sqlite3.Connection,
        dialect: Any,
        compiled: CompiledStatements,
        observe: Observe | None,
    ) -> None:
        self._raw = raw
        self._dialect = dialect
        self._compiled = compiled
        self._observe = observe

    def fetch(self, statement: Prepared | ClauseElement, params: Mapping[str, Any]) -> list[Row]:
        """Run ``statement`` (a ``Prepared`` with ``params`` by name, or a statement built per
        call, ``params`` empty) and return its rows."""
        if isinstance(statement, Prepared):
            sql, values = statement.bind(self._dialect, params)
        else:
            sql, values = self._compiled(statement)
        if self._observe is not None:
            self._observe(sql, values)
        return fetched(self._raw, sql, values, one=False)

    def many(self, statement: Prepared, runs: Sequence[Mapping[str, Any]]) -> None:
        """Run ``statement`` once per mapping of ``runs`` (one ``executemany``), its rows
        unread; nothing for no runs."""
        if not runs:
            return
        bound = [statement.bind(self._dialect, run) for run in runs]
        if self._observe is not None:
            for sql, values in bound:
                self._observe(sql, values)
        self._raw.executemany(bound[0][0], [values for _, values in bound]).close()
