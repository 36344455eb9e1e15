"""Driver errors become typed store errors here, once, by the exception's type (and SQLite's
result code), never its message."""

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager

import asyncpg
import filelock

from store.errors import ClaimContended, DatabaseBusy, DatabaseUnavailable, StoreError

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
    asyncpg.exceptions.QueryCanceledError,
    asyncpg.exceptions.TransactionRollbackError,
    asyncpg.exceptions.InvalidCachedStatementError,
    asyncpg.exceptions.OutdatedSchemaCacheError,
)
"""Transient: a lock wait past ``lock_timeout``, a statement past ``statement_timeout`` (or
cancelled), a deadlock or serialization failure, and a schema change under a pooled
connection's cached statements (a rolling deploy's migration). asyncpg itself prepares a
statement again and retries it once outside a transaction; inside one the transaction is
already aborted, so only the caller can run it again: ``DatabaseBusy`` says it may, and
asyncpg has dropped the stale statements by then. Checked before ``POSTGRES_UNAVAILABLE``,
which holds their base classes (``OperatorInterventionError``, ``InternalClientError``)."""
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
    waits, statement timeouts, deadlocks, serialization failures and stale cached statements
    (``POSTGRES_BUSY``) → ``DatabaseBusy``. Follows ``orig`` and
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
        if (
            isinstance(current, asyncpg.PostgresError)
            and current.sqlstate == ClaimContended.SQLSTATE
        ):
            return ClaimContended("a concurrent claim or collection committed first")
        if isinstance(current, POSTGRES_BUSY):
            return DatabaseBusy(f"the database is busy: {current}")
        if isinstance(current, TimeoutError):  # an OSError whose text is empty
            return DatabaseUnavailable(
                "the database did not answer in time (its host accepts connections but "
                "does not reply: down, overloaded or not a database server)"
            )
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
