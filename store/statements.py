"""Statements: compiled once, run with their values on the driver's own connection."""

from collections.abc import Callable, Mapping
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.sql import ClauseElement


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
