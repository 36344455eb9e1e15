"""Statements: each compiled once per dialect, run with its values on the driver's connection.

One style, for speed: a statement whose SQL is the same on every call is built once, at
import, as a ``Prepared`` constant named for what it does (``FINALIZE``, ``CLAIM_WATCH``),
with every per-call value a named parameter (``param``: ``p_<what>``, never a column's bare
name, which SQLAlchemy reserves in VALUES and SET). Building a SQLAlchemy statement and its
cache key costs 200-300 µs a call, binding a ``Prepared`` about 1 µs (``FINALIZE``;
benchmarks/README.md measures the lifecycle with both). Only a statement whose SQL
depends on the call is built per call: optional filters, IN lists and a batch's keys,
keyset pages, the columns a decision writes (``WatchesStore._write_over``), a form that
differs by backend (``collect_finished_operations``); ``CompiledStatements`` compiles it
once per shape. A statement whose few optional parts are known flags is a ``Prepared`` per
combination of them, built on first use (``store.leasing._prepared_lease``,
``_claim_watches``): building ``leaseOperations``' statement cost about 20 ms a call. All
are built from the same guard functions (``store.operations.lease_free_or_held``,
``store.watches.due_watch``, …), which take a value or a ``param`` alike, so every guard is
written once.

Every module-level statement, and the lease and claim statements for one shape each, is
checked in as the SQL it compiles to, per backend, under ``store/sql/`` (``make sql``:
``store.sql_text``).

SQLAlchemy is used through its public API, but for one internal: ``shape_key``.
"""

from collections.abc import Callable, Hashable, Mapping
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Dialect
from sqlalchemy.sql import ClauseElement
from sqlalchemy.sql.cache_key import CacheKey
from sqlalchemy.sql.compiler import SQLCompiler

from store.dialects import DIALECTS

Processor = Callable[[Any], Any]
Bound = tuple[str, list[Any]]
"""A statement ready for the driver: its SQL in the driver's paramstyle and the positional
values."""


def param(name: str, column: sa.ColumnElement[Any]) -> sa.BindParameter[Any]:
    """A per-call value of a ``Prepared`` statement, named ``name``, of ``column``'s type."""
    return sa.bindparam(name, type_=column.type)


def shape_key(statement: ClauseElement) -> CacheKey | None:
    """The cache key of ``statement``: its ``key`` names the shape (equal for every
    statement built alike, whatever its values), its ``bindparams`` carry this call's
    values, in the order ``SQLCompiler.construct_params(extracted_parameters=…)`` takes
    them; None when the statement cannot be cached. Pass it to the compiler as ``cache_key``.

    The one place the store touches a private SQLAlchemy API:
    ``ClauseElement``'s ``_generate_cache_key()``. SQLAlchemy's public way to reuse a compiled
    shape is an ``Engine``/``Connection`` ``compiled_cache``, which runs the statement
    through SQLAlchemy's own execution; the store runs SQL on the driver's connection
    (asyncpg's, aiosqlite's) and has no SQLAlchemy connection to hand the cache to.
    ``tests/store/test_statements.py`` pins what this relies on.
    """
    return statement._generate_cache_key()


def _order(compiled: SQLCompiler, dialect: Dialect) -> list[tuple[str, Processor | None]]:
    """The positional parameters of ``compiled``, in order, each with its type's bind
    processor for ``dialect`` (None when the type needs none)."""
    order: list[tuple[str, Processor | None]] = []
    for name in compiled.positiontup or ():
        bind = compiled.binds.get(name)
        processor = (
            None if bind is None else bind.type.dialect_impl(dialect).bind_processor(dialect)
        )
        order.append((name, processor))
    return order


def _values(order: list[tuple[str, Processor | None]], params: Mapping[str, Any]) -> list[Any]:
    return [
        params[name] if processor is None else processor(params[name]) for name, processor in order
    ]


class CompiledStatements:
    """Each statement shape compiled once, for one dialect, for the statements built per call.

    ``shape_key`` names the shape and carries this call's values;
    ``SQLCompiler.construct_params(extracted_parameters=…)`` puts them in the place of the
    values the shape was compiled with. Statements whose SQL depends on their values (an
    ``IN`` list, literal-rendered parameters) or that have no shape key are compiled each
    time. At most ``size`` shapes are kept (then the cache starts over).
    """

    def __init__(self, dialect: Dialect, size: int = 2000) -> None:
        self._dialect = dialect
        self._size = size
        self._cache: dict[Hashable, tuple[SQLCompiler, list[tuple[str, Processor | None]]]] = {}

    def __call__(self, query: ClauseElement) -> Bound:
        """``query`` as SQL and positional values for this dialect's driver."""
        key = shape_key(query)
        if key is None or any(b.expanding or b.literal_execute for b in key.bindparams):
            return self._once(query)
        found = self._cache.get(key.key)
        if found is None:
            compiled = self._dialect.statement_compiler(self._dialect, query, cache_key=key)
            if compiled.post_compile_params:
                return self._once(query)
            if len(self._cache) >= self._size:
                self._cache.clear()
            found = self._cache[key.key] = (compiled, _order(compiled, self._dialect))
        compiled, order = found
        params = compiled.construct_params(extracted_parameters=key.bindparams)
        return compiled.string, _values(order, params)

    def _once(self, query: ClauseElement) -> Bound:
        compiled = query.compile(dialect=self._dialect, compile_kwargs={"render_postcompile": True})
        assert isinstance(compiled, SQLCompiler)
        return compiled.string, _values(
            _order(compiled, self._dialect), compiled.construct_params()
        )


class Prepared:
    """A statement built once, at import, and run with its values by name.

    ``build(insert)`` returns the statement, given the backend's ``insert`` (for
    ``on_conflict_*``); every per-call value in it is a ``param``. Each dialect compiles it
    once, on first use, keeping the SQL, the order of its parameters with their bind
    processors, and the values bound at build time (literals). A call then costs one lookup
    per parameter: no statement object, no cache key, no compile. ``bind`` raises
    ``KeyError`` for a per-call value missing from ``params``.
    """

    def __init__(self, build: Callable[[Callable[[sa.Table], Any]], ClauseElement]) -> None:
        self._build = build
        self._compiled: dict[
            str, tuple[str, list[tuple[str, Processor | None]], dict[str, Any]]
        ] = {}

    def statement(self, backend: str) -> ClauseElement:
        """The statement as built for ``backend`` (a dialect's name: ``postgresql`` or
        ``sqlite``), uncompiled: what ``bind`` compiles, and what ``store.sql_text`` prints."""
        return self._build(DIALECTS[backend].insert)

    def _compile(
        self, dialect: Dialect
    ) -> tuple[str, list[tuple[str, Processor | None]], dict[str, Any]]:
        compiled = self.statement(dialect.name).compile(dialect=dialect)
        assert isinstance(compiled, SQLCompiler)
        if compiled.post_compile_params:
            raise TypeError("a Prepared statement cannot expand parameters per call")
        bound = {
            name: bind.effective_value for name, bind in compiled.binds.items() if not bind.required
        }
        result = (compiled.string, _order(compiled, dialect), bound)
        self._compiled[dialect.name] = result
        return result

    def bind(self, dialect: Dialect, params: Mapping[str, Any]) -> Bound:
        """The SQL for ``dialect`` and the positional values of ``params`` (by name)."""
        found = self._compiled.get(dialect.name)
        sql, order, bound = self._compile(dialect) if found is None else found
        values = []
        for name, processor in order:
            value = params[name] if name in params else bound[name]
            values.append(value if processor is None else processor(value))
        return sql, values
