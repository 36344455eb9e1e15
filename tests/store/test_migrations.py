"""The alembic migrations build exactly the tables of store/tables.py, on both backends."""

import asyncio
import sqlite3
import time
from contextlib import closing
from datetime import UTC, datetime

import asyncpg
import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from filelock import FileLock
from sqlalchemy import pool, text
from sqlalchemy.ext.asyncio import create_async_engine

from store import migrate
from store.errors import DatabaseBusy
from store.migrate import alembic_config, upgrade
from store.tables import metadata
from store.urls import sqlite_path
from tests.databases import as_driver


async def schema_drift(url: str) -> list:
    engine = create_async_engine(url, poolclass=pool.NullPool)
    try:
        async with engine.connect() as connection:
            return await connection.run_sync(
                lambda sync: compare_metadata(MigrationContext.configure(sync), metadata)
            )
    finally:
        await engine.dispose()


async def test_migrations__match_tables(database_url):
    assert await schema_drift(database_url) == []


async def test_migrations__head_twice_is_a_no_op(database_url):
    await asyncio.to_thread(upgrade, database_url)
    assert await schema_drift(database_url) == []


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_migrations__sqlite_file_in_wal_mode(database_url):
    path = sqlite_path(database_url)
    assert path is not None
    with closing(sqlite3.connect(path)) as connection:
        assert connection.execute("PRAGMA journal_mode").fetchone() == ("wal",)


@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
async def test_migrations__postgres_keys_collate_bytewise(database_url):
    engine = create_async_engine(database_url, poolclass=pool.NullPool)
    try:
        async with engine.connect() as connection:
            rows = await connection.execute(
                text(
                    "SELECT table_name, column_name, collation_name FROM information_schema.columns"
                    " WHERE column_name IN ('caller_did', 'operation_id', 'owner_did',"
                    " 'connector_name', 'model', 'account_key', 'source_id', 'document_id',"
                    " 'reissued_from', 'reissued_as')"
                    " AND table_name LIKE 'kubun_connector_%'"
                )
            )
            collations = {(table, column): collation for table, column, collation in rows}
    finally:
        await engine.dispose()
    assert len(collations) == 31
    assert set(collations.values()) == {"C"}


async def test_migration_0002__last_synced_at_epoch_ms_becomes_iso_text(database_url):
    table = "kubun_connector_sync_state"
    await asyncio.to_thread(command.downgrade, alembic_config(database_url), "0001")
    engine = create_async_engine(database_url, poolclass=pool.NullPool)
    try:
        async with engine.begin() as connection:
            for owner, synced in [("did:key:a", 1_750_000_000_123), ("did:key:b", None)]:
                await connection.execute(
                    text(
                        f"INSERT INTO {table} (connector_name, owner_did, last_synced_at,"
                        " entity_count, status, version, incarnation, updated_at)"
                        " VALUES ('calendar', :owner, :synced, 0, 'idle', 0, 'inc', 0)"
                    ),
                    {"owner": owner, "synced": synced},
                )
        await asyncio.to_thread(upgrade, database_url)
        async with engine.connect() as connection:
            rows = await connection.execute(
                text(f"SELECT owner_did, last_synced_at FROM {table} ORDER BY owner_did")
            )
            converted = dict(rows.all())
    finally:
        await engine.dispose()

    expected = datetime.fromtimestamp(1_750_000_000.123, UTC).isoformat(timespec="milliseconds")
    assert converted == {
        "did:key:a": expected.replace("+00:00", "Z"),
        "did:key:b": "1970-01-01T00:00:00.000Z",
    }
    assert await schema_drift(database_url) == []


async def test_migrations__another_migration_holding_the_lock_is_busy_within_the_bound(
    database_url, monkeypatch
):
    monkeypatch.setattr(migrate, "LOCK_TIMEOUT_S", 0.3)
    path = sqlite_path(database_url)
    started = time.monotonic()
    if path is not None:
        with FileLock(path.with_name(path.name + ".migrate-lock")), pytest.raises(DatabaseBusy):
            await asyncio.to_thread(upgrade, database_url)
    else:
        peer = await asyncpg.connect(as_driver(database_url, "postgresql"))
        try:
            await peer.execute("SELECT pg_advisory_lock($1)", migrate.POSTGRES_LOCK_KEY)
            with pytest.raises(DatabaseBusy):
                await asyncio.to_thread(upgrade, database_url)
        finally:
            await peer.close()
    assert time.monotonic() - started < 10
    await asyncio.to_thread(upgrade, database_url)
