"""The alembic migrations build exactly the tables of store/tables.py, on both backends."""

import asyncio
import sqlite3
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, closing
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
from store.operations import OperationFilter
from store.tables import metadata
from store.urls import sqlite_path
from tests.databases import as_driver
from tests.factories import claimed_operation, committed_operation, transition
from tests.leasing_factories import due_record, insert_operations
from tests.store.test_events import log_after

OWNER = "did:key:owner-b"


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
    assert len(collations) == 34
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


LOCKS = ["migration lock", "write lock"]
"""What another process holds while a migration runs: another migration's lock (the lock
file, the advisory lock), or what the migration's own writes need (SQLite's write lock; on
PostgreSQL a table lock of an open transaction, here on ``alembic_version``)."""
SAYS = {
    ("sqlite", "migration lock"): "held by another migration",
    ("sqlite", "write lock"): "SQLite's write lock",
    ("postgres", "migration lock"): "the migration lock (advisory lock)",
    ("postgres", "write lock"): "table alembic_version",
}


@asynccontextmanager
async def held(database_url: str, lock: str) -> AsyncIterator[int | None]:
    """Hold ``lock`` (one of ``LOCKS``) from another connection for the block; yields the
    holder's PostgreSQL pid (None on SQLite)."""
    path = sqlite_path(database_url)
    if path is not None:
        if lock == "migration lock":
            with FileLock(path.with_name(path.name + ".migrate-lock")):
                yield None
        else:
            with closing(sqlite3.connect(path, isolation_level=None)) as peer:
                peer.execute("BEGIN IMMEDIATE")
                yield None
        return
    peer = await asyncpg.connect(as_driver(database_url, "postgresql"))
    try:
        if lock == "migration lock":
            await peer.execute("SELECT pg_advisory_lock($1)", migrate.POSTGRES_LOCK_KEY)
        else:
            await peer.execute("BEGIN")
            await peer.execute("LOCK TABLE alembic_version IN ACCESS EXCLUSIVE MODE")
        yield await peer.fetchval("SELECT pg_backend_pid()")
    finally:
        await peer.close()


def backend(database_url: str) -> str:
    return "sqlite" if sqlite_path(database_url) is not None else "postgres"


async def wait_until(condition, bound_s: float = 120.0) -> None:
    deadline = time.monotonic() + bound_s
    while not condition():
        assert time.monotonic() < deadline, "the condition did not come true in time"
        await asyncio.sleep(0.05)


@pytest.mark.parametrize("lock", LOCKS)
async def test_migrations__a_lock_another_process_holds_is_waited_for_and_said(database_url, lock):
    await asyncio.to_thread(command.downgrade, alembic_config(database_url), "0010")
    said: list[str] = []
    async with held(database_url, lock) as holder:
        migrating = asyncio.create_task(
            asyncio.to_thread(upgrade, database_url, lock_timeout_s=300, waiting=said.append)
        )
        await wait_until(lambda: bool(said) or migrating.done())
        assert not migrating.done(), "the migration did not wait for the lock"
    await migrating
    assert await schema_drift(database_url) == []
    assert len(said) == 1, said
    assert SAYS[backend(database_url), lock] in said[0]
    assert "up to 300 s" in said[0]
    if holder is not None:
        assert f"pid {holder}" in said[0]


@pytest.mark.parametrize("lock", LOCKS)
async def test_migrations__a_lock_held_past_the_bound_gives_up_busy_saying_why(database_url, lock):
    await asyncio.to_thread(command.downgrade, alembic_config(database_url), "0010")
    said: list[str] = []
    started = time.monotonic()
    async with held(database_url, lock):
        with pytest.raises(DatabaseBusy, match=r"the migration gave up after 0\.5 s") as busy:
            await asyncio.to_thread(upgrade, database_url, lock_timeout_s=0.5, waiting=said.append)
    assert time.monotonic() - started < 60
    if said:  # on PostgreSQL the watcher may not have asked before the bound passed
        assert said[-1] in str(busy.value)
    if backend(database_url) == "sqlite":
        assert SAYS["sqlite", lock] in str(busy.value)
    await asyncio.to_thread(upgrade, database_url)
    assert await schema_drift(database_url) == []


async def operation_indexes(url: str) -> dict[str, str]:
    engine = create_async_engine(url, poolclass=pool.NullPool)
    query = (
        "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL"
        " AND tbl_name = 'kubun_connector_operation'"
        if backend(url) == "sqlite"
        else "SELECT indexname, indexdef FROM pg_indexes"
        " WHERE tablename = 'kubun_connector_operation'"
    )
    try:
        async with engine.connect() as connection:
            return dict((await connection.execute(text(query))).all())
    finally:
        await engine.dispose()


async def test_migration_0018__down_and_up_over_rows_keeps_them_and_the_indexes(
    database_url, store, clock
):
    """Over a table holding live operations (new, scheduled, leased, ended): downgraded
    past 0018 the indexes are those 0017 builds, upgraded again those of the head, and
    every row is kept."""
    await insert_operations(
        store,
        [
            due_record(store, n, account_key=f"acct-{n % 3}", owner_did=f"owner-{n % 2}")
            for n in range(30)
        ],
    )
    await store.leasing.lease_operations("leaser", 30_000, limit=5)
    await store.operations.record_operation(
        transition(
            (await store.operations.list_tracked_operations(OperationFilter()))[0],
            to_state="failed",
        )
    )
    before = await store.operations.list_tracked_operations(OperationFilter())
    head = await operation_indexes(database_url)
    config = alembic_config(database_url)
    await asyncio.to_thread(command.downgrade, config, "0017_stats_event_at")
    downgraded = await operation_indexes(database_url)
    # Built again from before 0005, which made the per-owner due indexes first.
    await asyncio.to_thread(command.downgrade, config, "0004")
    await asyncio.to_thread(command.upgrade, config, "0017_stats_event_at")
    assert downgraded == await operation_indexes(database_url)
    assert downgraded != head
    await asyncio.to_thread(upgrade, database_url)
    assert await operation_indexes(database_url) == head
    assert await schema_drift(database_url) == []
    assert await store.operations.list_tracked_operations(OperationFilter()) == before


async def envelopes_of_events(url: str) -> dict[str, set[tuple[str | None, ...]]]:
    """Each operation's events' ``(owner, connector, account)``, by operation id."""
    engine = create_async_engine(url, poolclass=pool.NullPool)
    found: dict[str, set[tuple[str | None, ...]]] = {}
    try:
        async with engine.connect() as connection:
            rows = await connection.execute(
                text(
                    "SELECT operation_id, owner_did, connector_name, account_key"
                    " FROM kubun_connector_operation_event"
                )
            )
            for operation_id, *envelope in rows:
                found.setdefault(operation_id, set()).add(tuple(envelope))
    finally:
        await engine.dispose()
    return found


async def test_migration_0019__fills_the_events_logged_before_from_their_operations(
    database_url, store, clock
):
    """Events logged before 0019 get their operation's owner, connector and account; those
    of an operation collected before it keep null there: no filter on those fields matches
    them, and only their caller sees them."""
    await committed_operation(store, operation_id="op-gone", source_id="evt-gone")
    clock.advance(1)
    assert (
        await store.retention.collect_finished_operations(clock.now, failed_older_than=clock.now)
        == 1
    )
    kept = await claimed_operation(
        store, operation_id="op-kept", source_id="evt-kept", connector_name="crm", owner_did=OWNER
    )
    await store.operations.release_lease(kept.caller_did, kept.operation_id, "lease-A")
    config = alembic_config(database_url)
    await asyncio.to_thread(command.downgrade, config, "0018_starve_account_due")

    await asyncio.to_thread(upgrade, database_url)

    assert await envelopes_of_events(database_url) == {
        "op-gone": {(None, None, None)},
        "op-kept": {(OWNER, "crm", "acct-1")},
    }
    assert await schema_drift(database_url) == []
    every = await log_after(store, None, 5)
    assert [e.operation_id for e in every] == ["op-gone"] * 3 + ["op-kept"] * 2
    for narrowed in ({"connector_name": "crm"}, {"visible_to": OWNER}):
        assert await log_after(store, None, 2, **narrowed) == every[3:]
    assert await log_after(store, None, 0, connector_name="calendar") == []
    assert await log_after(store, None, 5, visible_to=kept.caller_did) == every


def test_migrations__a_lock_watcher_refused_by_asyncpg_stays_quiet(monkeypatch):
    """The watcher that reports who blocks a PostgreSQL migration is only a report: one
    asyncpg refuses to connect (a connection option it does not take) ends without a thread
    traceback, leaving the migration to meet the error."""
    escaped: list[BaseException | None] = []
    said: list[str] = []

    async def refused(*args: object, **kwargs: object) -> None:
        raise asyncpg.exceptions.ClientConfigurationError("`sslmode` parameter must be one of")

    monkeypatch.setattr(migrate.asyncpg, "connect", refused)
    monkeypatch.setattr(threading, "excepthook", lambda hook: escaped.append(hook.exc_value))
    with migrate._blockers_reported("postgresql+asyncpg://u@h/db", "app", 1.0, said.append):
        pass

    assert escaped == said == []
