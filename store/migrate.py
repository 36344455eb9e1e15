"""Schema migrations: alembic, driven from code so the CLI and the tests share one path."""

import sqlite3
from contextlib import closing
from pathlib import Path

from alembic import command
from alembic.config import Config

from store.database import normalize_url

MIGRATIONS = Path(__file__).parent / "migrations"


def alembic_config(url: str) -> Config:
    """An alembic ``Config`` for the store's migrations on ``url``."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.set_main_option("sqlalchemy.url", normalize_url(url).replace("%", "%%"))
    return config


def upgrade(url: str, revision: str = "head") -> None:
    """Migrate the database at ``url`` to ``revision`` (the newest by default).

    Creates a SQLite file's folder when missing and puts the file in WAL mode, so readers
    never wait for a writer. Synchronous: call it before the event
    loop starts, or in a worker thread.
    """
    path = sqlite_path(url)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
    command.upgrade(alembic_config(url), revision)
    if path is not None:
        with closing(sqlite3.connect(path)) as connection:
            connection.execute("PRAGMA journal_mode=WAL")


def sqlite_path(url: str) -> Path | None:
    """The file behind a SQLite URL, or None for PostgreSQL."""
    normalized = normalize_url(url)
    if not normalized.startswith("sqlite"):
        return None
    return Path(normalized.split("///", 1)[1].split("?", 1)[0])
