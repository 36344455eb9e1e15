"""Alembic environment: runs the store's migrations on the async engine of the given URL.

On PostgreSQL the migration transaction first takes an advisory lock, waiting at most
``store.migrate.LOCK_TIMEOUT_S`` for it, so concurrent migrations run one after the other
and the later ones find nothing to do. Once the lock
is held, the caller's ``announce`` (``store.migrate``) is told the current revision.
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
            # Bounds the wait for another migration's lock, as the lock file's timeout does
            # on SQLite: past it, LockNotAvailableError (DatabaseBusy).
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
    engine = create_async_engine(url, poolclass=pool.NullPool)
    try:
        async with engine.connect() as connection:
            await connection.run_sync(run)
    finally:
        await engine.dispose()


asyncio.run(run_online())
