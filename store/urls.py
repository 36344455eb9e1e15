"""Database URLs: every URL the store takes is parsed here, by SQLAlchemy's ``make_url``, so
the server, the migrations and the tests agree on which file or server a URL names."""

from pathlib import Path
from typing import Any

from sqlalchemy.engine import URL, Dialect, make_url
from sqlalchemy.exc import ArgumentError

from store.errors import InvalidInput

SQLITE_DRIVERS = {"sqlite": "sqlite+aiosqlite", "sqlite+aiosqlite": "sqlite+aiosqlite"}
POSTGRES_DRIVERS = {
    "postgres": "postgresql+asyncpg",
    "postgresql": "postgresql+asyncpg",
    "postgresql+asyncpg": "postgresql+asyncpg",
}
EXPECTED_URL = "expected sqlite+aiosqlite:///path/to/file.db or postgresql+asyncpg://user@host/db"
SSL_MODES = ("disable", "allow", "prefer", "require", "verify-ca", "verify-full")
MAX_PORT = 65535
"""The highest TCP port, for the database's and the server's own."""
"""The values of a PostgreSQL URL's ``ssl`` (asyncpg's ``sslmode`` names)."""


def parse_url(url: str) -> URL:
    """``url`` parsed and put in the form the store uses (``sqlite+aiosqlite`` or
    ``postgresql+asyncpg``). Percent-escapes are decoded once, here, for every use.

    PostgreSQL URLs take one parameter, ``ssl``, once (one of ``SSL_MODES``); libpq's
    ``sslmode`` is accepted as its name. SQLite URLs take none. Raises ``InvalidInput``
    (field ``DATABASE_URL``) for another scheme, a URL that does not parse (a port that is
    not a number included), a port past 1 to ``MAX_PORT``, another parameter, an ``ssl`` not
    in ``SSL_MODES``, or an in-memory SQLite database (each connection would get its own,
    empty one).
    """
    try:
        parsed = make_url(url)
        parsed.port  # noqa: B018  (parsed on access: a bad port raises here)
    except (ArgumentError, ValueError) as error:
        raise InvalidInput("DATABASE_URL", f"cannot be parsed; {EXPECTED_URL}") from error
    if parsed.port is not None and not 1 <= parsed.port <= MAX_PORT:
        raise InvalidInput("DATABASE_URL", f"port {parsed.port} is not 1 to {MAX_PORT}")
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
    ssl = query.get("ssl")
    if ssl is not None and ssl not in SSL_MODES:
        raise InvalidInput(
            "DATABASE_URL", f"ssl (or sslmode) {ssl!r} is not one of {', '.join(SSL_MODES)}"
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


def dialect_of(url: str, **options: Any) -> Dialect:
    """The SQLAlchemy dialect the store compiles its statements with for ``url`` (asyncpg's
    for PostgreSQL, aiosqlite's for SQLite), made with ``options`` (``paramstyle="named"``
    prints parameters by name: ``store.sql_text``)."""
    dialect: Dialect = make_url(normalize_url(url)).get_dialect()(**options)
    return dialect


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


def asyncpg_dsn(url: str) -> str:
    """A PostgreSQL ``url`` (see ``parse_url``) as the DSN ``asyncpg.connect`` takes
    (``postgresql://``, its ``ssl`` parameter as libpq's ``sslmode``); raises
    ``InvalidInput`` for a SQLite URL or one ``parse_url`` refuses."""
    parsed = parse_url(url)
    if not parsed.drivername.startswith("postgresql"):
        raise InvalidInput("LISTEN_DATABASE_URL", "must be a PostgreSQL URL")
    query = dict(parsed.query)
    if "ssl" in query:
        query["sslmode"] = query.pop("ssl")
    return parsed.set(drivername="postgresql", query=query).render_as_string(hide_password=False)
