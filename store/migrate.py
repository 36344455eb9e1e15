"""Schema migrations: alembic, driven from code so the CLI and the tests share one path.

Migrations are serialized, so two processes migrating one database at once (two
``migrate`` commands, two replicas starting) both succeed: on PostgreSQL the migration
transaction takes an advisory lock first (see ``migrations/env.py``), on SQLite a lock file
beside the database is held for the whole upgrade. The second waits, then finds nothing to do.

Every wait is bounded and said: a migration that waits for a lock another process holds
(the other migration's lock, a table lock of an open transaction on PostgreSQL, SQLite's
write lock) tells ``waiting`` what it waits on, and who holds it where the database says,
and gives up after ``lock_timeout_s`` with ``DatabaseBusy`` naming it.
"""

import asyncio
import logging
import sqlite3
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from pathlib import Path

import asyncpg
import filelock
from alembic import command
from alembic.config import Config
from filelock import FileLock

from store.driver_errors import driver_errors
from store.errors import DatabaseBusy, StoreError
from store.urls import asyncpg_dsn, normalize_url, sqlite_path

MIGRATIONS = Path(__file__).parent / "migrations"
POSTGRES_LOCK_KEY = 0x6B7562756E
"""The advisory lock key the migration transaction holds on PostgreSQL ("kubun")."""

LOCK_TIMEOUT_S = 60.0
"""The longest a migration waits for a lock another process holds, by default (the
migration lock, a table's lock, SQLite's write lock; ``MIGRATE_LOCK_TIMEOUT_SECONDS``)."""

BLOCKERS_POLL_S = 0.5
"""How often, on PostgreSQL, the migration's watcher asks who blocks it."""
WATCH_CONNECT_TIMEOUT_S = 5.0
"""The longest the watcher waits for its own connection (then it reports nothing)."""

Announce = Callable[[str | None, str | None], None]
"""Told ``(current revision or None for a new database, head revision)`` once the migration
lock is held, before anything is created."""

Waiting = Callable[[str], None]
"""Told, in words, what a migration waits on (and who holds it), once per holder."""

log = logging.getLogger(__name__)

BLOCKERS = """
SELECT holder.pid, holder.application_name, holder.state,
       coalesce(extract(epoch FROM now() - holder.xact_start), 0)::int AS open_s,
       left(holder.query, 200) AS query,
       (SELECT string_agg(
                   CASE wanted.locktype
                       WHEN 'advisory' THEN 'the migration lock (advisory lock)'
                       WHEN 'relation' THEN 'table ' || wanted.relation::regclass::text
                       ELSE wanted.locktype END
                   || ' (' || wanted.mode || ')', ', ')
          FROM pg_locks wanted
         WHERE wanted.pid = waiter.pid AND NOT wanted.granted) AS waits_on
  FROM pg_stat_activity waiter
 CROSS JOIN LATERAL unnest(pg_blocking_pids(waiter.pid)) AS blocking(pid)
  JOIN pg_stat_activity holder ON holder.pid = blocking.pid
 WHERE waiter.application_name = $1
"""
"""Who blocks the migration's connection (found by its ``application_name``), and what it
waits on: one row per holder."""


def log_waiting(line: str) -> None:
    """The default ``Waiting``: a WARNING on this module's logger."""
    log.warning("%s", line)


def alembic_config(
    url: str,
    announce: Announce | None = None,
    lock_timeout_s: float = LOCK_TIMEOUT_S,
    application_name: str | None = None,
    connect_timeout_s: float | None = None,
) -> Config:
    """An alembic ``Config`` for the store's migrations on ``url``: each lock wait bounded
    by ``lock_timeout_s``; on PostgreSQL the connection named ``application_name``, and its
    connect bounded by ``connect_timeout_s`` (None: ``lock_timeout_s``)."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.set_main_option("sqlalchemy.url", normalize_url(url).replace("%", "%%"))
    config.attributes["announce"] = announce
    config.attributes["postgres_lock_key"] = POSTGRES_LOCK_KEY
    config.attributes["lock_timeout_s"] = lock_timeout_s
    config.attributes["application_name"] = application_name
    config.attributes["connect_timeout_s"] = (
        lock_timeout_s if connect_timeout_s is None else connect_timeout_s
    )
    return config


def upgrade(
    url: str,
    revision: str = "head",
    announce: Announce | None = None,
    lock_timeout_s: float = LOCK_TIMEOUT_S,
    waiting: Waiting = log_waiting,
    connect_timeout_s: float | None = None,
) -> None:
    """Migrate the database at ``url`` to ``revision`` (the newest by default).

    Creates a SQLite file's folder when missing and puts the file in WAL mode, so readers
    never wait for a writer. ``announce`` is told where the database stands before anything
    is written. A wait for a lock another process holds is told to ``waiting`` (what it waits
    on, who holds it when the database says) and lasts at most ``lock_timeout_s`` seconds
    per lock; on PostgreSQL, its connect at most ``connect_timeout_s`` (None:
    ``lock_timeout_s``; a host that accepts and never answers). Synchronous: call it before
    the event loop starts, or in a worker thread.
    Raises ``InvalidInput`` for a URL the store cannot use, ``DatabaseUnavailable`` when
    the database cannot be reached (it does not exist, the server refuses, the file or its
    lock file cannot be created) and ``DatabaseBusy`` naming what it waited on when a lock
    stays held past ``lock_timeout_s``.
    """
    path = sqlite_path(url)
    said: list[str] = []

    def heard(line: str) -> None:
        said.append(line)
        waiting(line)

    try:
        with driver_errors():
            if path is None:
                name = f"connector-store migrate {uuid.uuid4().hex[:12]}"
                with _blockers_reported(url, name, lock_timeout_s, heard):
                    config = alembic_config(url, announce, lock_timeout_s, name, connect_timeout_s)
                    command.upgrade(config, revision)
                return
            path.parent.mkdir(parents=True, exist_ok=True)
            with _migration_file_lock(path, lock_timeout_s, heard):
                if _write_lock_held(path):
                    heard(
                        f"migration waits up to {lock_timeout_s:g} s for SQLite's write lock "
                        f"on {path}, held by another connection (a server's write or another "
                        "process)"
                    )
                command.upgrade(alembic_config(url, announce, lock_timeout_s), revision)
                with closing(sqlite3.connect(path, timeout=lock_timeout_s)) as connection:
                    connection.execute("PRAGMA journal_mode=WAL")
    except DatabaseBusy as error:
        waited = said[-1] if said else "a lock"
        raise DatabaseBusy(
            f"the migration gave up after {lock_timeout_s:g} s: {waited} ({error})"
        ) from error


@contextmanager
def _migration_file_lock(path: Path, timeout_s: float, waiting: Waiting) -> Iterator[None]:
    """Hold the lock file beside ``path`` for the block; when another migration holds it,
    say so, then wait at most ``timeout_s`` (``filelock.Timeout`` past it)."""
    lock_file = path.with_name(path.name + ".migrate-lock")
    lock_file.touch()
    lock = FileLock(lock_file, timeout=timeout_s)
    try:
        lock.acquire(timeout=0)
    except filelock.Timeout:
        waiting(
            f"migration waits up to {timeout_s:g} s for the migration lock {lock_file}, "
            "held by another migration"
        )
        lock.acquire()
    try:
        yield
    finally:
        lock.release()


def _write_lock_held(path: Path) -> bool:
    """Whether another connection holds SQLite's write lock on ``path`` now (a probe that
    takes it and lets go at once, never waiting)."""
    if not path.exists():
        return False
    with closing(sqlite3.connect(path, timeout=0, isolation_level=None)) as probe:
        try:
            probe.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as error:
            if (error.sqlite_errorcode & 0xFF) in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
                return True
            raise
        probe.execute("ROLLBACK")
        return False


@contextmanager
def _blockers_reported(
    url: str, application_name: str, lock_timeout_s: float, waiting: Waiting
) -> Iterator[None]:
    """While the block runs, a thread asks PostgreSQL every ``BLOCKERS_POLL_S`` who blocks
    the connection named ``application_name`` and tells ``waiting`` of each new holder."""
    stop = threading.Event()

    async def watch() -> None:
        connection = await asyncpg.connect(asyncpg_dsn(url), timeout=WATCH_CONNECT_TIMEOUT_S)
        try:
            told: set[tuple[int, str]] = set()
            while not stop.is_set():
                for row in await connection.fetch(BLOCKERS, application_name):
                    holder = (row["pid"], row["waits_on"] or "a lock")
                    if holder not in told:
                        told.add(holder)
                        waiting(_blocked_line(row, lock_timeout_s))
                await asyncio.sleep(BLOCKERS_POLL_S)
        finally:
            await connection.close()

    def run() -> None:
        # Only a report: a watcher that cannot connect or ask (asyncpg's InterfaceError
        # includes a connection option it refuses) leaves the migration to meet (and
        # raise) whatever stopped it.
        try:
            asyncio.run(watch())
        except (
            TimeoutError,
            asyncpg.PostgresError,
            asyncpg.InterfaceError,
            OSError,
            StoreError,
        ) as error:
            log.debug("the migration's lock watcher stopped: %r", error)

    watcher = threading.Thread(target=run, name="connector-store-migrate-watch", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        stop.set()
        watcher.join()


def _blocked_line(row: asyncpg.Record, lock_timeout_s: float) -> str:
    application = row["application_name"] or "no application name"
    return (
        f"migration waits up to {lock_timeout_s:g} s for {row['waits_on'] or 'a lock'}, "
        f"held by PostgreSQL pid {row['pid']} ({application}, {row['state']}, its "
        f"transaction open {row['open_s']} s, last statement: {row['query']!r})"
    )
