"""Fresh test databases on both backends: a migrated SQLite template copied per test, and one
PostgreSQL database per test process (the run's, or each pytest-xdist worker's), migrated once
and truncated before each test."""

import asyncio
import os
import shutil
import uuid
from pathlib import Path

import asyncpg
import pytest
from sqlalchemy.engine import make_url

from store import tables
from store.migrate import upgrade

DEFAULT_TEST_DATABASE_URL = "postgresql+asyncpg://postgres@127.0.0.1:5432/test"


def postgres_admin_url() -> str:
    """The server URL the PostgreSQL tests create their database on, in the form
    ``asyncpg.connect`` takes (``postgresql://``)."""
    url = os.environ.get("TEST_DATABASE_URL", DEFAULT_TEST_DATABASE_URL)
    return as_driver(url, "postgresql")


def as_driver(url: str, drivername: str) -> str:
    """``url`` with its scheme set to ``drivername`` (``postgresql`` for asyncpg itself,
    ``postgresql+asyncpg`` for the store)."""
    return make_url(url).set(drivername=drivername).render_as_string(hide_password=False)


def with_database(url: str, name: str) -> str:
    """``url`` pointing at database ``name`` instead, in the store's form."""
    return as_driver(
        make_url(url).set(database=name).render_as_string(hide_password=False), "postgresql+asyncpg"
    )


def postgres_unavailable(reason: str) -> None:
    """Skip, with the reason, or fail when ``REQUIRE_POSTGRES=1``."""
    message = f"PostgreSQL unavailable at {postgres_admin_url()}: {reason}"
    if os.environ.get("REQUIRE_POSTGRES") == "1":
        pytest.fail(message + " (REQUIRE_POSTGRES=1)", pytrace=False)
    pytest.skip(message)


class PostgresRun:
    """One database for this test process, created on first use and dropped at the end. Its
    name holds the pytest-xdist worker's id (``gw0``, ``gw1``, ...; ``main`` without xdist)
    and a random part, so that no two workers, nor two runs on one server, share one."""

    def __init__(self) -> None:
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        self.name = f"connector_test_{worker}_{uuid.uuid4().hex[:12]}"
        self.url: str | None = None
        self.error: str | None = None
        self.created = False
        self.used = False
        """Whether the database was asked for (``create``) since this was last set False."""
        self.watcher: asyncpg.Connection | None = None

    async def create(self) -> str:
        self.used = True
        if self.url is not None:
            return self.url
        if self.error is not None:
            postgres_unavailable(self.error)
        try:
            admin = await asyncpg.connect(postgres_admin_url(), timeout=5)
        except (OSError, asyncpg.PostgresError, TimeoutError) as error:
            self.error = f"{type(error).__name__}: {error}"
            postgres_unavailable(self.error)
        try:
            await admin.execute(f'CREATE DATABASE "{self.name}"')
            self.created = True
            # Commits do not wait for the disk: a test database need not survive a crash of
            # the PostgreSQL server, and on a machine whose disk flushes slowly (5-15 ms a
            # commit) the row locks of concurrent tests were held past the lock timeout.
            await admin.execute(f'ALTER DATABASE "{self.name}" SET synchronous_commit = off')
        finally:
            await admin.close()
        url = with_database(postgres_admin_url(), self.name)
        await asyncio.to_thread(upgrade, url)
        self.url = url
        return url

    async def truncate(self, restart_identity: bool = False) -> None:
        """Empty every table (and restart their sequences when ``restart_identity``)."""
        assert self.url is not None
        connection = await asyncpg.connect(as_driver(self.url, "postgresql"))
        try:
            names = ", ".join(table.name for table in tables.metadata.sorted_tables)
            restart = " RESTART IDENTITY" if restart_identity else ""
            await connection.execute(f"TRUNCATE {names}{restart}")
        finally:
            await connection.close()

    async def sessions(self) -> list[str]:
        """The client sessions connected to this run's database, each as its application
        name, state and last statement; asked on a connection of the run's own to the
        server's admin database (which is not counted, nor disturbed by a test that ends
        the sessions of the run's database)."""
        if self.watcher is None or self.watcher.is_closed():
            self.watcher = await asyncpg.connect(postgres_admin_url())
        rows = await self.watcher.fetch(
            "SELECT application_name, state, query FROM pg_stat_activity"
            " WHERE datname = $1 AND backend_type = 'client backend'",
            self.name,
        )
        return [f"{row[0] or '-'} ({row[1]}): {row[2]!r}" for row in rows]

    async def terminate_sessions(self) -> None:
        """End every client session connected to this run's database."""
        assert self.watcher is not None
        await self.watcher.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = $1 AND backend_type = 'client backend'",
            self.name,
        )

    async def drop(self) -> None:
        if self.watcher is not None:
            await self.watcher.close()
        if not self.created:
            return
        admin = await asyncpg.connect(postgres_admin_url())
        try:
            await admin.execute(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')
        finally:
            await admin.close()


def sqlite_template(folder: Path) -> Path:
    """A migrated SQLite file to copy for each test."""
    path = folder / "template.db"
    upgrade(f"sqlite+aiosqlite:///{path}")
    return path


def sqlite_copy(template: Path, folder: Path) -> str:
    """A fresh copy of the migrated template; returns its URL."""
    path = folder / "store.db"
    shutil.copyfile(template, path)
    return f"sqlite+aiosqlite:///{path}"
