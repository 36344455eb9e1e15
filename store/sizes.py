"""Rows measured in bytes by the database, so a list read stops at a byte allowance before
the rows past it are transferred.

A row's size is the UTF-8 bytes of its text columns (keys, JSON text, digests, messages)
plus ``ROW_OVERHEAD`` (field names, numbers and punctuation in an answer). The JSON
columns hold compact JSON with non-ASCII escaped, so their stored bytes are at least what
an answer spends on them. ``within_bytes`` wraps a list's statement so the database sends
only the rows within the allowance and one more, each with its size; ``measured`` keeps
those within it (the first row always, so a client paging on always moves forward) and
says whether any was left out.
"""

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.functions import FunctionElement

from store import validation as check
from store.database import Database, Row

ROW_OVERHEAD = 512
"""Bytes charged per row besides its text columns: an estimate of the field names, numbers
and JSON punctuation a row adds to an answer (so a list of small rows is bounded too)."""

SIZE = "row_bytes"
"""The label of a row's size in bytes, in every statement ``within_bytes`` builds."""
_THROUGH = "bytes_through"
_POSITION = "row_position"

_R = TypeVar("_R")


class OctetLength(FunctionElement[int]):
    """The bytes of a text value: ``octet_length`` on PostgreSQL; on SQLite, which lacks it
    before 3.43, the length of the value as a blob."""

    type = sa.Integer()
    inherit_cache = True


@compiles(OctetLength)
def _octet_length(element: OctetLength, compiler: SQLCompiler, **kw: Any) -> str:
    return f"octet_length({compiler.process(element.clauses, **kw)})"


@compiles(OctetLength, "sqlite")
def _octet_length_sqlite(element: OctetLength, compiler: SQLCompiler, **kw: Any) -> str:
    return f"length(CAST({compiler.process(element.clauses, **kw)} AS BLOB))"


def row_bytes(
    columns: Iterable[sa.ColumnElement[Any]],
    written: Mapping[str, Any] | None = None,
) -> sa.ColumnElement[int]:
    """A row's size in bytes: the bytes of its text ``columns`` (NULL counts 0) plus
    ``ROW_OVERHEAD``. ``written`` (column name to the value an update writes there) measures
    the row as that update leaves it, so a write bounded by bytes is bounded by what it
    returns."""
    written = written or {}
    texts = [
        sa.func.coalesce(OctetLength(written.get(column.name, column)), 0)
        for column in columns
        if isinstance(column.type, sa.Text)
    ]
    return sum(texts, sa.literal(ROW_OVERHEAD, sa.Integer))


def within_bytes(
    query: sa.Select[Any],
    order: Sequence[sa.ColumnElement[Any]],
    size: sa.ColumnElement[int],
    max_bytes: int | None,
) -> sa.Select[Any]:
    """``query`` (ordered by ``order``, which must name each row once) with each row's
    ``size`` labelled ``SIZE``, cut after the first row whose running size passes
    ``max_bytes`` (at least 1; None cuts nothing): one statement, a window sum over
    ``query``'s own order and limit, so the database reads the sizes and sends only the
    first row, the rows within ``max_bytes`` and the one after them (which tells
    ``measured`` that more follow), in ``order``."""
    if max_bytes is None:
        return query.add_columns(size.label(SIZE))
    check.count("maxBytes", max_bytes, minimum=1)
    inner = query.add_columns(
        size.label(SIZE),
        sa.func.sum(size).over(order_by=order, rows=(None, 0)).label(_THROUGH),
        sa.func.row_number().over(order_by=order).label(_POSITION),
    ).subquery()
    return (
        sa.select(*(column for column in inner.c if column.name not in (_THROUGH, _POSITION)))
        .where(sa.or_(inner.c[_POSITION] <= 2, inner.c[_THROUGH] - inner.c[SIZE] <= max_bytes))
        .order_by(inner.c[_POSITION])
    )


class Measured(list[_R]):
    """A list read's records, in order, as a list, with each one's size in bytes
    (``sizes``, as ``row_bytes`` measured it) and ``cut``: True when a byte allowance left out
    a row that matched, so more rows follow the last one kept. Read it; do not change it."""

    def __init__(self, records: Iterable[_R] = (), sizes: Iterable[int] = (), cut: bool = False):
        super().__init__(records)
        self.sizes = list(sizes)
        self.cut = cut

    def first(self, count: int) -> "Measured[_R]":
        """The first ``count`` records with their sizes (``cut`` as it was)."""
        return Measured(self[:count], self.sizes[:count], self.cut)

    @property
    def bytes(self) -> int:
        """The size of every record kept, in bytes."""
        return sum(self.sizes)


def measured(
    sized: Iterable[tuple[_R, int]], max_bytes: int | None, *, spent: int = 0
) -> Measured[_R]:
    """``sized`` (records with their sizes, in the list's order) kept while their running
    size, counted from ``spent``, stays within ``max_bytes`` (the first always, when nothing
    was spent before); None keeps every one."""
    records: list[_R] = []
    sizes: list[int] = []
    total = spent
    for record, size in sized:
        total += size
        if max_bytes is not None and (records or spent) and total > max_bytes:
            return Measured(records, sizes, cut=True)
        records.append(record)
        sizes.append(size)
    return Measured(records, sizes)


def sized_rows(rows: Iterable[Row], record: Callable[[Row], _R]) -> list[tuple[_R, int]]:
    """Rows of a statement ``within_bytes`` built (or that selects ``SIZE``) as records
    (``record(row)``) with their sizes."""
    return [(record(row), row[SIZE]) for row in rows]


async def fetch_measured(
    db: Database,
    queries: Iterable[sa.Select[Any]],
    order: Sequence[sa.ColumnElement[Any]],
    size: sa.ColumnElement[int],
    record: Callable[[Row], _R],
    max_bytes: int | None,
) -> Measured[_R]:
    """The rows of ``queries`` (one per chunk of a long key list, each ordered by ``order``
    and the chunks in that order too) as records in one measured list: each statement loads
    at most what the earlier ones left of ``max_bytes``; the first row of all is always
    kept. Once the bytes are spent the statements left are not sent (``cut``)."""
    records: list[_R] = []
    sizes: list[int] = []
    spent = 0
    for query in queries:
        if max_bytes is not None and spent >= max_bytes:
            return Measured(records, sizes, cut=True)
        left = None if max_bytes is None else max_bytes - spent
        rows = await db.fetch_all(within_bytes(query, order, size, left))
        page = measured(sized_rows(rows, record), max_bytes, spent=spent)
        records.extend(page)
        sizes.extend(page.sizes)
        spent += page.bytes
        if page.cut:
            return Measured(records, sizes, cut=True)
    return Measured(records, sizes)
