"""Driver errors become typed store errors here, once, by the exception's type (and SQLite's
result code), never its message."""

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager

import asyncpg
import filelock

from store.errors import DatabaseBusy, DatabaseUnavailable, StoreError

SQLITE_BUSY_CODES = frozenset({sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED})
SQLITE_UNAVAILABLE_CODES = frozenset(
    {
        sqlite3.SQLITE_CANTOPEN,
        sqlite3.SQLITE_IOERR,
        sqlite3.SQLITE_READONLY,
        sqlite3.SQLITE_FULL,
        sqlite3.SQLITE_NOTADB,
        sqlite3.SQLITE_CORRUPT,
    }
)
POSTGRES_BUSY = (
    asyncpg.exceptions.LockNotAvailableError,
    asyncpg.exceptions.TransactionRollbackError,
)
POSTGRES_UNAVAILABLE = (
    asyncpg.exceptions.InternalClientError,
    asyncpg.exceptions.InterfaceError,
    asyncpg.exceptions.PostgresConnectionError,
    asyncpg.exceptions.OperatorInterventionError,
    asyncpg.exceptions.InsufficientResourcesError,
    asyncpg.exceptions.InvalidCatalogNameError,
    asyncpg.exceptions.InvalidAuthorizationSpecificationError,
)


def translate_driver_error(error: BaseException) -> StoreError | None:
    """The typed store error for a driver's error, or None when it is not one we know.

    Decided by the exception's type (and SQLite's result code), never its message: refused
    or lost connections (asyncpg's ``InterfaceError`` is its error for a connection in an
    unusable state: closed, lost mid-operation), a database that does not exist or refuses
    us, a SQLite file that cannot be opened or written → ``DatabaseUnavailable``; lock
    waits, deadlocks and serialization failures → ``DatabaseBusy``. Follows ``orig`` and
    ``__cause__`` through SQLAlchemy's wrappers (as the migrations raise them).
    """
    seen: set[int] = set()
    pending: list[BaseException | None] = [error]
    while pending:
        current = pending.pop(0)
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, StoreError):
            return current
        if isinstance(current, filelock.Timeout):
            return DatabaseBusy(f"another migration holds {current.lock_file}")
        if isinstance(current, POSTGRES_BUSY):
            return DatabaseBusy(f"the database is busy: {current}")
        if isinstance(current, (*POSTGRES_UNAVAILABLE, OSError)):
            return DatabaseUnavailable(f"the database is unavailable: {current}")
        if isinstance(current, sqlite3.Error):
            code = (getattr(current, "sqlite_errorcode", None) or 0) & 0xFF
            if code in SQLITE_BUSY_CODES:
                return DatabaseBusy(f"the SQLite database is locked: {current}")
            if code in SQLITE_UNAVAILABLE_CODES:
                return DatabaseUnavailable(f"the SQLite database is unavailable: {current}")
        pending.extend([getattr(current, "orig", None), current.__cause__])
    return None


@contextmanager
def driver_errors() -> Iterator[None]:
    """Re-raise a known driver error as its typed store error (``raise … from``)."""
    try:
        yield
    except StoreError:
        raise
    except Exception as error:
        typed = translate_driver_error(error)
        if typed is None:
            raise
        raise typed from error
