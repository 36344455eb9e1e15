"""Schema migrations: alembic, driven from code so the CLI and the tests share one path.

Migrations are serialized, so two processes migrating one database at once (two
``migrate`` commands, two replicas starting) both succeed: on PostgreSQL the migration
transaction takes an advisory lock first (see ``migrations/env.py``), on SQLite a lock file
beside the database is held for the whole upgrade. The second waits, then finds nothing to do.
"""

import sqlite3
from collections.abc import Callable
from contextlib import AbstractContextManager, closing, nullcontext
from pathlib import Path

from alembic import command
from alembic.config import Config
from filelock import FileLock

from store.driver_errors import driver_errors
from store.urls import normalize_url, sqlite_path

MIGRATIONS = Path(__file__).parent / "migrations"
POSTGRES_LOCK_KEY = 0x6B7562756E
"""The advisory lock key the migration transaction holds on PostgreSQL ("kubun")."""

LOCK_TIMEOUT_S = 300
"""The longest a migration waits for another process's migration to finish (the lock file
on SQLite, the advisory lock on PostgreSQL)."""

Announce = Callable[[str | None, str | None], None]
"""Told ``(current revision or None for a new database, head revision)`` once the migration
lock is held, before anything is created."""


def alembic_config(url: str, announce: Announce | None = None) -> Config:
    """An alembic ``Config`` for the store's migrations on ``url``."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.set_main_option("sqlalchemy.url", normalize_url(url).replace("%", "%%"))
    config.attributes["announce"] = announce
    config.attributes["postgres_lock_key"] = POSTGRES_LOCK_KEY
    config.attributes["lock_timeout_s"] = LOCK_TIMEOUT_S
    return config


def upgrade(url: str, revision: str = "head", announce: Announce | None = None) -> None:
    """Migrate the database at ``url`` to ``revision`` (the newest by default).

    Creates a SQLite file's folder when missing and puts the file in WAL mode, so readers
    never wait for a writer. ``announce`` is told where the database stands before anything
    is written. Synchronous: call it before the event loop starts, or in a worker thread.
    Raises ``InvalidInput`` for a URL the store cannot use, ``DatabaseUnavailable`` when
    the database cannot be reached (it does not exist, the server refuses, the file or its
    lock file cannot be created) and ``DatabaseBusy`` when another migration holds its lock
    for more than ``LOCK_TIMEOUT_S``.
    """
    path = sqlite_path(url)
    with driver_errors():
        lock: AbstractContextManager[object] = nullcontext()
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            lock_file = path.with_name(path.name + ".migrate-lock")
            lock_file.touch()
            lock = FileLock(lock_file, timeout=LOCK_TIMEOUT_S)
        with lock:
            command.upgrade(alembic_config(url, announce), revision)
            if path is not None:
                with closing(sqlite3.connect(path)) as connection:
                    connection.execute("PRAGMA journal_mode=WAL")
