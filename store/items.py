"""The items of a batch write: each checked as its single write checks it, refused as a whole.

A batch (``store.batches``) takes 1 to ``MAX_ITEMS`` items. A bad item refuses the whole
batch before anything is written, its error naming the item: ``items[3].leaseToken``.
"""

from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any, Protocol, TypeVar

import sqlalchemy as sa
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql import ClauseElement
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.functions import FunctionElement

from store import validation as check
from store.dialects import DIALECTS, Dialect
from store.errors import InvalidInput
from store.statements import Prepared
from store.validation import item_count

MAX_ITEMS = 500
"""The most items one batch takes (and the fewest is one)."""


class Inputs(Protocol):
    """An item's inputs by name: a single write's parameters, a batch's rows' columns
    (``Dialect.item_rows``), or checked values; the guarded writes are functions of them."""

    def __getitem__(self, name: str, /) -> Any: ...


class unindexed(FunctionElement[Any]):
    """A text ``column`` where no index may serve its comparison: ``+column`` on SQLite,
    ``(column || '')`` on PostgreSQL. For a guard column of a statement that finds its rows
    by a batch's keys (``UPDATE … FROM`` the items): SQLite, knowing no sizes, may otherwise
    read the table through an index on the guard (``state = 'attempted'``: every live row)
    and scan the items once per row found; PostgreSQL, on statistics older than the rows
    (a burst before ``ANALYZE``), reads every leased row through a partial index whose
    predicate the guard proves (``state = 'attempted' AND lease_token IS NOT NULL``) and
    hash-joins the items. Either cost grows with the table; so the only index left is the
    key's, one probe per item (``tests/store/test_batches.py``)."""

    inherit_cache = True
    name = "unindexed"

    def __init__(self, column: sa.ColumnElement[Any]) -> None:
        super().__init__(column)
        self.type = column.type


@compiles(unindexed)
def _unindexed(element: unindexed, compiler: SQLCompiler, **kw: Any) -> str:
    return "(" + compiler.process(element.clauses, **kw) + " || '')"


@compiles(unindexed, "sqlite")
def _unindexed_sqlite(element: unindexed, compiler: SQLCompiler, **kw: Any) -> str:
    return "+" + compiler.process(element.clauses, **kw)


_Item = TypeVar("_Item")
_Checked = TypeVar("_Checked")


def each_item(items: Sequence[_Item], check: Callable[[_Item], _Checked]) -> list[_Checked]:
    """``check`` of every item, in order. Raises ``InvalidInput`` naming ``items`` for fewer
    than one or more than ``MAX_ITEMS`` items, and the error ``check`` raised for an item
    (its type kept) with its field as ``items[i].<field>``."""
    item_count("items", items, fewest=1, most=MAX_ITEMS)
    checked = []
    for index, item in enumerate(items):
        try:
            checked.append(check(item))
        except InvalidInput as error:
            raise type(error)(f"items[{index}].{error.field}", error.problem) from error
    return checked


def refuse_repeats(keys: Sequence[Hashable], field: str, within: str = "items") -> None:
    """Raise ``InvalidInput`` naming ``<within>[j].<field>`` for the first entry whose key an
    earlier entry ``i`` already named: two writes of one row in a batch would depend on
    their order."""
    first: dict[Hashable, int] = {}
    for index, key in enumerate(keys):
        earlier = first.setdefault(key, index)
        if earlier != index:
            raise InvalidInput(
                f"{within}[{index}].{field}", f"names the same key as {within}[{earlier}]"
            )


def operation_keys(keys: Sequence[tuple[str, str]], *, fewest: int) -> list[tuple[str, str]]:
    """The checked ``(caller_did, operation_id)`` keys of a call that names operations
    (``renewLeases``, ``releaseLeases``, ``forceReleaseLeases``), in the order given.

    Raises ``InvalidInput`` naming ``keys`` for fewer than ``fewest`` or more than
    ``MAX_ITEMS``, ``keys[i].callerDID`` or ``keys[i].operationID`` for a bad value, and
    ``keys[j].operationID`` for a key an earlier one named, as a batch refuses an item
    named twice."""
    item_count("keys", keys, fewest=fewest, most=MAX_ITEMS)
    checked = [
        (check.key(f"keys[{i}].callerDID", caller), check.key(f"keys[{i}].operationID", ident))
        for i, (caller, ident) in enumerate(keys)
    ]
    refuse_repeats(checked, "operationID", "keys")
    return checked


class ItemStatement:
    """A statement over a batch's items, built once per backend at import: ``build(insert,
    rows)`` gets the backend's ``insert`` and ``Dialect.item_rows`` (one row per item, a
    column per name of ``columns``) and writes its guard as the single write does, over
    ``rows.c``.

    ``bind`` gives the statement and its parameters for a list of items (mappings holding
    every name of ``columns``), so the SQL is the same whatever the number of items: on
    PostgreSQL one array per column (``unnest``), on SQLite one JSON array of rows
    (``json_each``).

    ``lock_first``, for a write whose rows others may lock too: where writers run side by
    side (not ``Dialect.one_writer``), ``build`` gets ``lock_first(rows)`` in place of
    ``rows``, the items once the rows they write are locked in one order (so the plan's
    order of visiting them locks nothing anew).
    """

    def __init__(
        self,
        columns: Mapping[str, sa.Column[Any]],
        build: Callable[[Callable[[sa.Table], Any], sa.FromClause], ClauseElement],
        *,
        lock_first: Callable[[sa.FromClause], sa.FromClause] | None = None,
    ) -> None:
        self.columns = dict(columns)
        self._prepared = {
            name: Prepared(_for_backend(build, dialect, self.columns, lock_first))
            for name, dialect in DIALECTS.items()
        }

    def prepared(self, backend: str) -> Prepared:
        """The statement built for ``backend`` (``postgresql`` or ``sqlite``), the one
        ``bind`` gives there."""
        return self._prepared[backend]

    def bind(
        self, dialect: Dialect, items: Sequence[Mapping[str, Any]], **params: Any
    ) -> tuple[Prepared, dict[str, Any]]:
        """The statement for ``dialect``'s backend and its parameters: the items' columns
        (``Dialect.item_values``), and ``params`` by name (``p_now=…``)."""
        values = dialect.item_values(list(self.columns), items)
        return self._prepared[dialect.name], values | params


def _for_backend(
    build: Callable[[Callable[[sa.Table], Any], sa.FromClause], ClauseElement],
    dialect: Dialect,
    columns: Mapping[str, sa.Column[Any]],
    lock_first: Callable[[sa.FromClause], sa.FromClause] | None,
) -> Callable[[Callable[[sa.Table], Any]], ClauseElement]:
    def rows() -> sa.FromClause:
        items = dialect.item_rows(columns)
        if lock_first is None or dialect.one_writer:
            return items
        return lock_first(items)

    return lambda insert: build(insert, rows())
