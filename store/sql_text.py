"""Every named statement's SQL, per backend, as text a reader can review.

``make sql`` (``connector-store sql``) writes one file per statement and backend,
``store/sql/<backend>/<name>.sql`` (backend: ``postgresql`` or ``sqlite``), and deletes any
other file there; ``tests/test_sql_snapshot.py`` fails when a file is stale, missing or left
over. So a change of a statement's SQL shows in review as a change of its file.

A statement's name is where it is defined:

- ``<module>.<CONSTANT>``: every module-level ``Prepared``, ``Logged``, ``LoggedItems`` and
  ``ItemStatement`` of the store's modules (found, not listed: a new one gets its file on
  the next ``make sql``);
- ``<module>.<method>.<shape>``: a statement built per shape of a call (``SHAPES``), shown
  for one representative shape, which its file's header names.

The text is the statement's own build (``Prepared.statement``), compiled by the dialect the
store runs it with (``store.urls.dialect_of``), with its parameters shown by name
(``:p_now``) where the driver gets ``$1`` (asyncpg) or ``?`` (SQLite): the header lists
PostgreSQL's numbering, and the values bound when the statement was built. Only the layout
of its whitespace differs from what the store sends (``layout``; the test checks it).
A write that is logged (``store.events``) is one statement on PostgreSQL and two on SQLite
(the write, then one event insert per written row); its file holds each in order.
"""

import ast
import functools
import importlib
import inspect
import pkgutil
import re
import textwrap
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy.sql.compiler import SQLCompiler

import store
from store.dialects import DIALECTS
from store.events import (
    EVENT_PER_ROW,
    LEASE_ACTION,
    OPERATIONS,
    PRIOR_TOKEN,
    Logged,
    LoggedItems,
    event_insert,
)
from store.items import ItemStatement
from store.leasing import (
    ALL,
    BY_OWNER,
    HEAD,
    _claim_watches,
    _prepared_lease,
    _prepared_sqlite_lease,
)
from store.statements import Prepared
from store.urls import dialect_of

BACKENDS = tuple(DIALECTS)
SQL_DIR = Path(store.__file__).parent / "sql"
"""Where the files are: ``<backend>/<name>.sql`` under it."""

_URLS = {"postgresql": "postgresql://localhost/store", "sqlite": "sqlite:///store.db"}
_SHOWN = {"postgresql": "PostgreSQL (asyncpg)", "sqlite": "SQLite (aiosqlite)"}

POSTGRESQL_ONLY = frozenset(
    {
        "batches.ENSURE_AND_LOCK_ACCOUNTS",
        "claims.CLAIMS",
        "database.CUSTOM_PLANS",
        "finalizes.FINALIZE_AND_OPEN",
        "finalizes.FINALIZE_AND_OPEN_ITEMS",
        "finalizes.FINALIZE_AND_OPEN_ITEMS_KEEPING_DOCUMENTS",
        "finalizes.FINALIZE_AND_OPEN_KEEPING_DOCUMENT",
        "operations.LOCK_ACCOUNT_OF_OPERATION",
        "retention.SWEEP_UNLOCK",
        "retention.TRY_SWEEP_LOCK",
    }
)
"""The module-level statements the store runs on PostgreSQL only (their callers ask the
dialect, ``store.dialects``): they get no SQLite file."""

SQLITE_ONLY = frozenset(
    {
        "accounts.ENSURE_ACCOUNT",
        "batches.CLAIM_OPERATIONS",
        "batches.ENSURE_ACCOUNTS",
        "operations.CLAIM",
        "batches.RECORD_OPERATIONS_KEEPING_SCHEDULE",
        "batches.RECORD_OPERATIONS_STAYING_KEEPING_SCHEDULE",
        "operations.RECORD_OPERATION_KEEPING_SCHEDULE",
        "operations.RECORD_OPERATION_STAYING_KEEPING_SCHEDULE",
    }
)
"""The module-level statements the store runs only where writers take turns
(``Dialect.one_writer``: SQLite): they get no PostgreSQL file."""

Steps = list[tuple[str, Prepared]]
"""What one named statement sends on one backend, in order: each step's description (empty
for a statement alone) and its ``Prepared``."""


@dataclass(frozen=True)
class Named:
    """A statement by name: its steps per backend it runs on, and, for one built per shape,
    which shape is shown."""

    name: str
    steps: dict[str, Steps]
    shape: str = ""


def _steps_of(value: Any, backend: str) -> Steps:
    if isinstance(value, Prepared):
        return [("", value)]
    if isinstance(value, ItemStatement):
        return [("", value.prepared(backend))]
    steps: Steps = value.statements(backend)
    return steps


def _defined_at_top(source: str) -> list[str]:
    """The names a module's source assigns at its top level (not those it imports)."""
    names = []
    for node in ast.parse(source).body:
        targets = node.targets if isinstance(node, ast.Assign) else []
        if isinstance(node, ast.AnnAssign):
            targets = [node.target]
        names += [target.id for target in targets if isinstance(target, ast.Name)]
    return names


def _module_statements() -> Iterator[Named]:
    kinds = (Prepared, Logged, LoggedItems, ItemStatement)
    for info in sorted(pkgutil.iter_modules(store.__path__), key=lambda info: info.name):
        if info.ispkg:
            continue
        module = importlib.import_module(f"{store.__name__}.{info.name}")
        for constant in _defined_at_top(inspect.getsource(module)):
            value = getattr(module, constant)
            if not isinstance(value, kinds):
                continue
            name = f"{info.name}.{constant}"
            backends = (
                ("postgresql",)
                if name in POSTGRESQL_ONLY
                else ("sqlite",)
                if name in SQLITE_ONLY
                else BACKENDS
            )
            yield Named(name, {backend: _steps_of(value, backend) for backend in backends})


LEASE_SHAPE = (
    "Built per shape of the call; shown for the API's service call: connectorName given, no "
    "callerDID (p_caller), no accountKeys (an IN list, compiled per call), maxBytes given "
    "(p_max_bytes) with the first row allowed past it. The other shapes drop or add those "
    "filters."
)
WALKS = {
    HEAD: "The head of the due order (PostgreSQL only; SQLite walks by owner).",
    BY_OWNER: "Each owner's first due operations, as deep as the call asks.",
    ALL: "Every due operation ranked at once (a tenant's call ranks so, with p_caller).",
}
CLAIM_SHAPE = (
    "Built per shape of the call; shown for the API's service call: connectorName given, no "
    "ownerDID (p_owner), maxBytes given (p_max_bytes) with the first watch allowed past it."
)


def _shapes() -> Iterator[Named]:
    """The statements built per shape of a call (``SHAPES``), each for one shape."""
    connector, caller, bounded, may_pass = True, False, True, True
    shape = (connector, caller, bounded, may_pass)
    for walk in (HEAD, BY_OWNER, ALL):
        statements = {"postgresql": [("", _prepared_lease(walk, *shape))]}
        if walk != HEAD:
            choose, write = _prepared_sqlite_lease(walk, *shape)
            statements["sqlite"] = [
                ("the chosen keys, each with the lease token it found", choose),
                ("then, in the same transaction, the update that leases them", write),
                (EVENT_PER_ROW, event_insert(OPERATIONS, LEASE_ACTION, (PRIOR_TOKEN,))),
            ]
        yield Named(f"leasing.lease_operations.{walk}", statements, f"{LEASE_SHAPE} {WALKS[walk]}")
    for head in (True, False):
        claim = _claim_watches(connector, caller, bounded, may_pass, head=head)
        yield Named(
            f"leasing.claim_watches.{'head' if head else 'all'}",
            {backend: claim.statements(backend) for backend in BACKENDS},
            CLAIM_SHAPE,
        )


SHAPES: tuple[Callable[[], Iterator[Named]], ...] = (_shapes,)
"""The sources of the statements built per shape of a call, beside the module-level ones."""


def named_statements() -> list[Named]:
    """Every named statement, by name."""
    found = list(_module_statements())
    for source in SHAPES:
        found += source()
    return sorted(found, key=lambda named: named.name)


def _values(bound: dict[str, Any]) -> list[str]:
    return [f"{name} = {value!r}" for name, value in sorted(bound.items())]


def _wrapped(prefix: str, items: list[str], width: int = 96) -> list[str]:
    """``items`` after ``prefix``, comma-separated, as comment lines of at most ``width``."""
    lines, line = [], f"-- {prefix}"
    for index, item in enumerate(items):
        piece = item + ("," if index < len(items) - 1 else "")
        if len(line) + 1 + len(piece) > width and line.strip("- "):
            lines.append(line)
            line = "--  "
        line += f" {piece}"
    return [*lines, line]


def compiled(prepared: Prepared, backend: str, *, by_name: bool) -> SQLCompiler:
    """``prepared`` compiled for ``backend`` as the store compiles it, its parameters
    shown by name (``:p_now``) when ``by_name``, else as the driver gets them."""
    options = {"paramstyle": "named"} if by_name else {}
    result = prepared.statement(backend).compile(dialect=dialect_of(_URLS[backend], **options))
    assert isinstance(result, SQLCompiler)
    return result


def _step_text(prepared: Prepared, backend: str) -> tuple[list[str], str]:
    """The header lines and the laid-out SQL of one ``Prepared`` on ``backend``."""
    shown = compiled(prepared, backend, by_name=True)
    sent = compiled(prepared, backend, by_name=False)
    header = []
    if DIALECTS[backend].numbered_parameters and sent.positiontup:
        numbered = [f"${n} {name}" for n, name in enumerate(sent.positiontup, start=1)]
        header += _wrapped("the driver's parameters:", numbered)
    bound = {
        name: bind.effective_value for bind, name in shown.bind_names.items() if not bind.required
    }
    if bound:
        header += _wrapped("bound when built:", _values(bound))
    return header, layout(shown.string)


def render(named: Named, backend: str) -> str:
    """The file of ``named`` on ``backend``: a header, then each step's SQL."""
    lines = [
        f"-- {named.name} on {_SHOWN[backend]}",
        "-- Generated by `make sql` from the statement the store builds; do not edit.",
        "-- Parameters are shown by name (:p_now); the driver gets them by position.",
    ]
    if named.shape:
        lines += [f"-- {line}" for line in textwrap.wrap(named.shape, width=93)]
    steps = named.steps[backend]
    for index, (what, prepared) in enumerate(steps, start=1):
        header, sql = _step_text(prepared, backend)
        lines.append("")
        if len(steps) > 1:
            lines.append(f"-- {index}. {what}")
        lines += header
        lines.append(f"{sql};")
    return "\n".join(lines) + "\n"


def files() -> dict[str, str]:
    """Every file ``make sql`` writes: its path under ``SQL_DIR`` and its text."""
    return dict(_files())


@functools.cache
def _files() -> dict[str, str]:
    """``files``, compiled once a process (about 3 s: the statements do not change)."""
    return {
        f"{backend}/{named.name}.sql": render(named, backend)
        for named in named_statements()
        for backend in BACKENDS
        if backend in named.steps
    }


def on_disk(root: Path = SQL_DIR) -> dict[str, str]:
    """The ``.sql`` files under ``root`` (path under it, text)."""
    return {
        path.relative_to(root).as_posix(): path.read_text(encoding="utf-8")
        for path in sorted(root.glob("*/*.sql"))
    }


def differences(root: Path = SQL_DIR) -> list[str]:
    """How the files under ``root`` differ from ``files()``: one line per path, ``stale``,
    ``missing`` or ``left over`` (none: up to date)."""
    wanted, present = files(), on_disk(root)
    found = [f"missing: {path}" for path in sorted(set(wanted) - set(present))]
    found += [f"left over: {path}" for path in sorted(set(present) - set(wanted))]
    found += [
        f"stale: {path}"
        for path in sorted(set(wanted) & set(present))
        if wanted[path] != present[path]
    ]
    return found


def write(root: Path = SQL_DIR) -> list[str]:
    """Write ``files()`` under ``root``, deleting any other ``.sql`` file there; returns the
    paths written or deleted (changed)."""
    wanted = files()
    present = on_disk(root)
    changed = []
    for path in sorted(set(present) - set(wanted)):
        (root / path).unlink()
        changed.append(path)
    for path, text in wanted.items():
        if present.get(path) != text:
            (root / path).parent.mkdir(parents=True, exist_ok=True)
            (root / path).write_text(text, encoding="utf-8")
            changed.append(path)
    return changed


# --- layout -------------------------------------------------------------------------------

_TOKEN = re.compile(
    r"""'(?:[^']|'')*'      # a string literal
    | "(?:[^"]|"")*"        # a quoted identifier
    | \s+
    | [(),]
    | [A-Za-z_][A-Za-z0-9_$]*
    | .""",
    re.VERBOSE | re.DOTALL,
)
_QUERIES = {"SELECT", "WITH", "INSERT", "UPDATE", "DELETE", "VALUES"}
_CLAUSES = {
    *_QUERIES,
    "FROM",
    "WHERE",
    "GROUP",
    "HAVING",
    "ORDER",
    "LIMIT",
    "OFFSET",
    "UNION",
    "EXCEPT",
    "INTERSECT",
    "RETURNING",
    "SET",
    "JOIN",
    "LEFT",
    "FULL",
    "INNER",
    "CROSS",
    "FOR",
    "ON",
}
_JOINED = {"LEFT", "FULL", "INNER", "CROSS", "OUTER", "FOR", "DO", "KEY", "UNION", "NO"}
"""Words after which a clause's word goes on: ``LEFT OUTER JOIN``, ``FOR UPDATE``."""
_LISTS = {"SELECT", "RETURNING", "SET", "WITH"}
"""Clauses whose items go one a line."""


@dataclass
class _Level:
    """An open parenthesis (or ``CASE``): a query's (its lines indented) or an
    expression's (kept on its line), and the clause it is in."""

    query: bool
    indent: int = 0
    """A query's: its clauses' indent; the line it opened on is one less."""
    clause: str = ""
    case: bool = False


def layout(sql: str) -> str:
    """``sql`` with its whitespace laid out for reading, and nothing else changed: each
    clause on its own line, a subquery indented in its parentheses, the items of a select
    list, ``SET``, ``RETURNING`` and ``WITH`` one a line, and ``AND``/``OR`` of a query's
    conditions one a line. An expression's parentheses stay on their line.

    Written here, not taken from a formatter: a formatter parses and prints SQL again, and
    the text must stay the statement the store sends, up to whitespace."""
    tokens = _TOKEN.findall(sql)
    significant = [t for t in tokens if not t.isspace()]
    levels = [_Level(query=True)]
    out: list[str] = []
    previous = ""
    spaced = False
    indent = 0

    def newline(extra: int = 0, query: _Level | None = None) -> None:
        nonlocal indent
        if query is None:
            query = next(level for level in reversed(levels) if level.query)
        if out and out[-1].startswith("\n"):
            out.pop()
        indent = query.indent + extra
        out.append("\n" + "  " * indent)

    position = 0
    for token in tokens:
        if token.isspace():
            spaced = True
            continue
        position += 1
        following = significant[position] if position < len(significant) else ""
        word = token.upper() if token[0].isalpha() or token[0] == "_" else ""
        level = levels[-1]
        broke = False
        if token == ")":
            closed = levels.pop()
            if closed.query:
                newline(-1, closed)
                broke = True
        elif (
            word in _CLAUSES
            and level.query
            and previous != "."
            and previous.upper() not in _JOINED
            and not (word == "ON" and following.lower() != "conflict")
        ):
            level.clause = word
            if out:
                newline()
                broke = True
        elif word in {"AND", "OR"} and level.query and level.clause in {"WHERE", "ON", "HAVING"}:
            newline(1)
            broke = True
        if not broke and spaced and out and not out[-1].startswith("\n"):
            out.append(" ")
        out.append(token)
        spaced = False
        if token == "(":
            opens_query = following.upper() in _QUERIES
            levels.append(_Level(query=opens_query, indent=indent + 1))
            if opens_query:
                newline()
        elif word == "CASE":
            levels.append(_Level(query=False, case=True))
        elif word == "END" and level.case:
            levels.pop()
        elif token == "," and level.query and level.clause in _LISTS:
            newline(0 if level.clause == "WITH" else 1)
        previous = token
    text = "".join(out)
    return "\n".join(line.rstrip() for line in text.split("\n"))
