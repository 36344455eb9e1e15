"""Alembic environment: runs the store's migrations on the async engine of the given URL.

On PostgreSQL the migration transaction first takes an advisory lock, so concurrent
migrations run one after the other and the later ones find nothing to do; that wait and
every lock wait of its statements (a table an open transaction holds) last at most the
caller's ``lock_timeout_s`` each (``lock_timeout``), and the connection carries the
caller's ``application_name``, by which ``store.migrate`` finds who blocks it, and its
connect lasts at most the caller's ``connect_timeout_s``. On SQLite
the wait for the write lock (the busy timeout) is bounded alike. Once the lock is held, the
caller's ``announce`` (``store.migrate``) is told the current revision.
"""

import asyncio

from alembic import context
from sqlalchemy import pool, text
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import create_async_engine

from store.tables import metadata


def run(connection: Connection) -> None:
    context.configure(connection=connection, target_metadata=metadata, render_as_batch=True)
    attributes = context.config.attributes
    with context.begin_transaction():
        if connection.dialect.name == "postgresql":
            # Bounds the wait for another migration's lock, and for each table lock the
            # migration's statements take, as the lock file's and the busy timeout do on
            # SQLite: past it, LockNotAvailableError (DatabaseBusy).
            lock_timeout_ms = round(attributes["lock_timeout_s"] * 1000)
            connection.execute(text(f"SET LOCAL lock_timeout = '{lock_timeout_ms}ms'"))
            connection.execute(
                text("SELECT pg_advisory_xact_lock(:key)"), {"key": attributes["postgres_lock_key"]}
            )
        announce = attributes.get("announce")
        if announce is not None:
            migration = context.get_context()
            head = context.script.get_current_head()
            announce(migration.get_current_revision(), head)
        context.run_migrations()


async def run_online() -> None:
    url = context.config.get_main_option("sqlalchemy.url")
    assert url, "store.migrate.alembic_config sets sqlalchemy.url"
    attributes = context.config.attributes
    # asyncpg's ``timeout`` bounds the connect; aiosqlite's is the busy timeout, a lock wait.
    postgres = url.startswith("postgresql")
    timeout = attributes["connect_timeout_s" if postgres else "lock_timeout_s"]
    connect_args: dict[str, object] = {"timeout": timeout}
    if attributes.get("application_name") is not None:
        connect_args["server_settings"] = {"application_name": attributes["application_name"]}
    engine = create_async_engine(url, poolclass=pool.NullPool, connect_args=connect_args)
    try:
        async with engine.connect() as connection:
            await connection.run_sync(run)
    finally:
        await engine.dispose()


asyncio.run(run_online())
