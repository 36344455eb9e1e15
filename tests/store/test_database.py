"""store/database.py: bounded waits, a database that goes away, and SQLite files named by
percent-encoded URLs; on both backends."""

import asyncio
import shutil
import socket
import sqlite3
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager

import asyncpg
import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from store import ConnectorStore, sqlite_pool
from store.database import Database
from store.errors import DatabaseBusy, DatabaseUnavailable, InvalidInput
from store.migrate import upgrade
from store.operations import Finalize
from store.records import OperationKey
from store.tables import operation_tombstone
from store.tombstones import PUT_TOMBSTONE
from store.urls import sqlite_path
from tests.databases import as_driver, postgres_admin_url
from tests.factories import claim, claimed_operation, reread


async def test_sqlite__percent_encoded_path_data_and_wal_on_the_same_file(tmp_path, clock):
    url = f"sqlite+aiosqlite:///{tmp_path}/my%20dir/x.db"
    await asyncio.to_thread(upgrade, url)
    db = Database(url)
    await db.connect()
    try:
        await claimed_operation(ConnectorStore(db, clock=clock))
    finally:
        await db.disconnect()

    assert not (tmp_path / "my%20dir").exists()
    with closing(sqlite3.connect(tmp_path / "my dir" / "x.db")) as connection:
        assert connection.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        rows = connection.execute("SELECT operation_id FROM kubun_connector_operation")
        assert rows.fetchall() == [("op-1",)]


# --- driver errors become typed store errors, decided by type --------------------------------


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
async def test_sqlite__other_process_holding_write_lock_is_database_busy(database_url):
    db = Database(database_url, wait_timeout_s=0.2)
    await db.connect()
    path = sqlite_path(database_url)
    holder = sqlite3.connect(path, isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")
        with pytest.raises(DatabaseBusy) as raised:
            await ConnectorStore(db).winners.record_winner("doc-1", "digest-1")
        assert isinstance(raised.value.__cause__, sqlite3.OperationalError)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
        await db.disconnect()


# --- bounded waits -------------------------------------------------------------------------


async def test_wait__writer_behind_a_held_transaction_fails_busy_then_recovers(database_url):
    db = Database(database_url, pool_size=1, wait_timeout_s=0.2)
    await db.connect()
    store = ConnectorStore(db)
    holding = asyncio.Event()
    done = asyncio.Event()

    async def hold() -> None:
        async with db.write_transaction():
            await db.fetch_one(sa.text("SELECT 1"))
            holding.set()
            await done.wait()

    holder = asyncio.create_task(hold())
    try:
        await holding.wait()
        started = time.monotonic()
        with pytest.raises(DatabaseBusy):
            await store.winners.record_winner("doc-1", "digest-1")
        assert time.monotonic() - started < 5
    finally:
        done.set()
        await holder
    await store.winners.record_winner("doc-1", "digest-1")
    assert await store.winners.read_winner("doc-1") == "digest-1"
    await db.disconnect()


class PeerHoldingRowLocks:
    """Another session (another process's, on SQLite) that holds a lock on the store's rows
    and does not let go: ``FOR UPDATE`` on every operation (PostgreSQL), the write lock
    (SQLite)."""

    def __init__(self, database_url: str) -> None:
        self.url = database_url

    async def __aenter__(self) -> "PeerHoldingRowLocks":
        path = sqlite_path(self.url)
        if path is not None:
            self.sqlite = sqlite3.connect(path, isolation_level=None)
            self.sqlite.execute("BEGIN IMMEDIATE")
        else:
            self.postgres = await asyncpg.connect(as_driver(self.url, "postgresql"))
            await self.postgres.execute("BEGIN")
            await self.postgres.execute("SELECT 1 FROM kubun_connector_operation FOR UPDATE")
        return self

    async def __aexit__(self, *exc: object) -> None:
        if sqlite_path(self.url) is not None:
            self.sqlite.execute("ROLLBACK")
            self.sqlite.close()
        else:
            await self.postgres.execute("ROLLBACK")
            await self.postgres.close()


async def test_wait__calls_stalled_on_a_peers_row_lock_fail_busy_and_free_the_pool(
    database_url, clock
):
    db = Database(database_url, pool_size=2, wait_timeout_s=1.0)
    await db.connect()
    store = ConnectorStore(db, clock=clock)
    try:
        operations = [
            await claimed_operation(store, operation_id=f"op-{n}", source_id=f"evt-{n}")
            for n in range(2)
        ]
        async with PeerHoldingRowLocks(database_url):
            stalled = [
                asyncio.create_task(
                    store.operations.acquire_lease(
                        record.caller_did, record.operation_id, "lease-A", clock.now + 60_000
                    )
                )
                for record in operations
            ]
            read = await store.operations.get_operation("did:key:caller", "op-0")
            # Both end while the peer still holds its locks: refused at the wait's bound.
            results = await asyncio.gather(*stalled, return_exceptions=True)

        assert read == operations[0]
        assert [type(result) for result in results] == [DatabaseBusy, DatabaseBusy]
        assert await reread(store, operations[0]) == operations[0]
    finally:
        await db.disconnect()


@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
async def test_wait__lock_timeout_is_database_busy_by_type(database_url, clock):
    db = Database(database_url, lock_timeout_s=0.2)
    await db.connect()
    store = ConnectorStore(db, clock=clock)
    try:
        record = await claimed_operation(store)
        async with PeerHoldingRowLocks(database_url):
            started = time.monotonic()
            with pytest.raises(DatabaseBusy) as raised:
                await store.operations.acquire_lease(
                    record.caller_did, record.operation_id, "lease-A", clock.now + 60_000
                )
        assert time.monotonic() - started < 2
        assert isinstance(raised.value.__cause__, asyncpg.exceptions.LockNotAvailableError)
    finally:
        await db.disconnect()


@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
async def test_wait__statement_timeout_is_database_busy_by_type(database_url):
    db = Database(database_url, statement_timeout_s=0.2)
    await db.connect()
    try:
        started = time.monotonic()
        with pytest.raises(DatabaseBusy) as raised:
            await db.fetch_one(sa.select(sa.func.pg_sleep(5)))
        assert time.monotonic() - started < 3
        assert isinstance(raised.value.__cause__, asyncpg.exceptions.QueryCanceledError)
        assert await db.fetch_one(sa.text("SELECT 1")) is not None
    finally:
        await db.disconnect()


@pytest.mark.parametrize(
    ("field", "seconds"),
    [("lock_timeout_s", -1), ("statement_timeout_s", -1), ("wait_timeout_s", 0)],
)
def test_database__timeout_out_of_range_refused(field, seconds):
    with pytest.raises(InvalidInput):
        Database("postgresql+asyncpg://postgres@127.0.0.1/test", **{field: seconds})


@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
async def test_database__timeouts_of_zero_send_no_startup_parameter(database_url):
    """0 leaves the timeouts to the role or database (pgbouncer refuses startup
    parameters); the defaults send them."""
    shown = {}
    for name, options in {
        "zero": {"lock_timeout_s": 0, "statement_timeout_s": 0},
        "default": {},
    }.items():
        db = Database(database_url, **options)
        await db.connect()
        try:
            lock = await db.fetch_one(sa.text("SELECT current_setting('lock_timeout') AS v"))
            statement = await db.fetch_one(
                sa.text("SELECT current_setting('statement_timeout') AS v")
            )
            shown[name] = (lock["v"], statement["v"])
        finally:
            await db.disconnect()
    assert shown == {"zero": ("0", "0"), "default": ("5s", "30s")}


async def test_schema_change__under_cached_statements_a_step_in_autocommit_applies(
    database_url, clock
):
    """A finalize is one statement in autocommit: after a column's type changed under the
    pool's cached statements, the driver prepares it again and it applies on the first call
    (inside a transaction the same error is DatabaseBusy: tests/store/test_driver_errors.py)."""
    db = Database(database_url, pool_size=1)
    await db.connect()
    store = ConnectorStore(db, clock=clock)
    first = await claimed_operation(store)
    second = await claimed_operation(store, operation_id="op-2", source_id="evt-2")

    def finalize(operation_id):
        return store.operations.finalize_operation_and_arm_watch(
            Finalize("did:key:caller", operation_id, version=0, lease_token="lease-A", due_at=1)
        )

    assert await finalize("op-1")
    await change_column_type(database_url, "bigint")
    try:
        done = await finalize("op-2")
        assert done is not None and done.operation.state == "committed"
        assert first.state == second.state == "attempted"
    finally:
        await db.disconnect()
        await change_column_type(database_url, "integer")


async def change_column_type(database_url: str, to: str) -> bool:
    """Change ``last_http_status``'s type, as a rolling deploy's migration would, from another
    connection; on SQLite (no column types to change) add and drop a column instead, which
    SQLite's prepared statements absorb. True when a type changed."""
    path = sqlite_path(database_url)
    if path is not None:
        with closing(sqlite3.connect(path)) as connection:
            connection.execute("ALTER TABLE kubun_connector_operation ADD COLUMN extra TEXT")
            connection.execute("ALTER TABLE kubun_connector_operation DROP COLUMN extra")
        return False
    connection = await asyncpg.connect(as_driver(database_url, "postgresql"))
    try:
        await connection.execute(
            f"ALTER TABLE kubun_connector_operation ALTER COLUMN last_http_status TYPE {to}"
        )
    finally:
        await connection.close()
    return True


# --- a database that goes away -------------------------------------------------------------


async def test_sqlite__folder_deleted_while_serving_refuses_reads_writes_and_ping(tmp_path, clock):
    url = f"sqlite+aiosqlite:///{tmp_path}/data/store.db"
    await asyncio.to_thread(upgrade, url)
    db = Database(url)
    await db.connect()
    store = ConnectorStore(db, clock=clock)
    try:
        await claimed_operation(store)
        shutil.rmtree(tmp_path / "data")

        with pytest.raises(DatabaseUnavailable):
            await db.ping()
        with pytest.raises(DatabaseUnavailable):
            await store.operations.get_operation("did:key:caller", "op-1")
        with pytest.raises(DatabaseUnavailable):
            await store.operations.claim_operation(claim(operation_id="op-2"))
        with pytest.raises(DatabaseUnavailable):
            async with db.write_transaction():
                pass
    finally:
        await db.disconnect()


@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
async def test_postgres__a_task_started_in_a_write_transaction_runs_outside_it(database_url):
    """The block's own statements run on its connection; a task it starts gets a
    connection of its own, outside the transaction, as it does outside any block."""
    db = Database(database_url, pool_size=2)
    await db.connect()
    pid = sa.text("SELECT pg_backend_pid() AS pid, txid_current_if_assigned() AS tx")
    try:
        async with db.write_transaction():
            await db.fetch_one(sa.text("SELECT txid_current()"))
            own = await db.fetch_one(pid)
            started = await asyncio.create_task(db.fetch_one(pid))
        assert own is not None and started is not None
        assert own["tx"] is not None
        assert started["pid"] != own["pid"]
        assert started["tx"] is None
    finally:
        await db.disconnect()


@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
async def test_postgres__connection_terminated_mid_transaction_is_unavailable(database_url):
    db = Database(database_url, pool_size=2)
    await db.connect()
    try:
        with pytest.raises(DatabaseUnavailable) as raised:
            async with db.write_transaction():
                row = await db.fetch_one(sa.text("SELECT pg_backend_pid()"))
                assert row is not None
                await terminate_backend(row[0])
                await db.fetch_one(sa.text("SELECT 1"))
        assert raised.value.__cause__ is not None
        # The next request (its own task, as in the server) gets a fresh connection.
        await asyncio.create_task(db.ping())
    finally:
        await db.disconnect()


async def terminate_backend(pid: int) -> None:
    """End the connection served by backend ``pid`` and wait until it is gone. Only that one:
    asyncpg's pool connects again at once to keep its minimum size, so ending every
    connection to the database until none is left may never end (the pool's own
    reconnection, not something left by an earlier test, kept a run waiting)."""
    admin = await asyncpg.connect(postgres_admin_url())
    try:
        assert await admin.fetchval("SELECT pg_terminate_backend($1)", pid)
        while await admin.fetchval("SELECT count(*) FROM pg_stat_activity WHERE pid = $1", pid):
            await asyncio.sleep(0.01)
    finally:
        await admin.close()


# --- files on disk stay bounded ------------------------------------------------------------

WAL_BOUND_BYTES = 4 * 1024 * 1024
"""What the write-ahead log must come back under once nothing holds it open."""


async def written(store: ConnectorStore, db: Database, first: int, rows: int = 1000) -> int:
    """Write ``rows`` winners (about 450 bytes each) in one transaction; the next index."""
    async with db.write_transaction():
        for n in range(first, first + rows):
            await store.winners.record_winner(f"doc-{n}", "d" * 400)
    return first + rows


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
async def test_sqlite__wal_grown_behind_a_long_reader_shrinks_back_once_it_ends_and_writes_go_on(
    database_url,
):
    db = Database(database_url)
    await db.connect()
    store = ConnectorStore(db)
    path = sqlite_path(database_url)
    assert path is not None
    wal = path.with_name(path.name + "-wal")
    try:
        with closing(sqlite3.connect(path, isolation_level=None)) as reader:
            reader.execute("BEGIN")
            reader.execute("SELECT count(*) FROM kubun_connector_document_winner").fetchone()
            n = 0
            while wal.stat().st_size <= 3 * WAL_BOUND_BYTES:  # no checkpoint passes the reader
                n = await written(store, db, n)
            reader.execute("COMMIT")
        deadline = time.monotonic() + 120
        while wal.stat().st_size > WAL_BOUND_BYTES:
            assert time.monotonic() < deadline, f"the WAL stayed at {wal.stat().st_size} bytes"
            n = await written(store, db, n, rows=50)
    finally:
        await db.disconnect()


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
async def test_sqlite__truncate_wal_cuts_it_to_zero_and_never_waits_for_a_reader(database_url):
    db = Database(database_url, wait_timeout_s=300)
    await db.connect()
    store = ConnectorStore(db)
    path = sqlite_path(database_url)
    assert path is not None
    wal = path.with_name(path.name + "-wal")
    try:
        await written(store, db, 0)
        with closing(sqlite3.connect(path, isolation_level=None)) as reader:
            reader.execute("BEGIN")
            reader.execute("SELECT count(*) FROM kubun_connector_document_winner").fetchone()
            await written(store, db, 1000)
            # The reader's snapshot is in the way: a partial checkpoint, at once (the busy
            # timeout of 300 s is not waited out).
            assert await db.truncate_wal() is False
            assert wal.stat().st_size > 0
            reader.execute("COMMIT")
        assert await db.truncate_wal() is True
        assert wal.stat().st_size == 0
        await written(store, db, 2000)
        assert await store.winners.read_winner("doc-2999") == "d" * 400
    finally:
        await db.disconnect()


@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
async def test_postgres__truncate_wal_is_none(database):
    assert await database.truncate_wal() is None


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
async def test_sqlite__wal_cut_back_after_a_large_transaction(database_url, monkeypatch):
    monkeypatch.setattr(sqlite_pool, "WAL_AUTOCHECKPOINT_PAGES", 100)
    monkeypatch.setattr(sqlite_pool, "WAL_SIZE_LIMIT_BYTES", 256 * 1024)
    db = Database(database_url)
    await db.connect()
    store = ConnectorStore(db)
    path = sqlite_path(database_url)
    assert path is not None
    wal = path.with_name(path.name + "-wal")
    try:
        async with db.write_transaction():
            for n in range(4000):
                await store.winners.record_winner(f"doc-{n}", "d" * 400)
        assert wal.stat().st_size > 1024 * 1024
        for n in range(3):
            await store.winners.record_winner(f"doc-{n}", "small")

        assert wal.stat().st_size <= 256 * 1024
    finally:
        await db.disconnect()


# --- the pool's reset ----------------------------------------------------------------------


async def last_query(database_url: str) -> str:
    """The last statement of the one other session on the database of ``database_url``."""
    admin = await asyncpg.connect(postgres_admin_url())
    try:
        return await admin.fetchval(
            "SELECT query FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()",
            make_url(database_url).database,
        )
    finally:
        await admin.close()


@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
async def test_pool_reset__a_plain_call_gives_its_connection_back_with_no_round_trip(
    database_url,
):
    db = Database(database_url, pool_size=1)
    await db.connect()
    try:
        await db.fetch_one(sa.text("SELECT 'the store call' AS marker"))
        assert await last_query(database_url) == "SELECT 'the store call' AS marker"
    finally:
        await db.disconnect()


@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
async def test_pool_reset__a_pinned_blocks_session_lock_ends_with_the_block(database_url):
    db = Database(database_url, pool_size=1)
    await db.connect()
    admin = await asyncpg.connect(as_driver(database_url, "postgresql"))
    try:
        async with db.pinned_connection():
            await db.fetch_one(sa.text("SELECT pg_advisory_lock(4242)"))
            assert not await admin.fetchval("SELECT pg_try_advisory_lock(4242)")
        assert await admin.fetchval("SELECT pg_try_advisory_lock(4242)")
    finally:
        await admin.close()
        await db.disconnect()


@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
async def test_pool_reset__asyncpg_rolls_back_an_open_transaction_before_a_custom_reset(
    database_url,
):
    """What ``Database._reset_connection`` relies on: asyncpg's pool ends a transaction left
    open before it calls the pool's ``reset``."""
    in_transaction: list[bool] = []

    async def reset(connection: asyncpg.Connection) -> None:
        in_transaction.append(connection.is_in_transaction())

    pool = await asyncpg.create_pool(
        as_driver(database_url, "postgresql"), min_size=1, max_size=1, reset=reset
    )
    try:
        async with pool.acquire() as connection:
            await connection.execute("BEGIN")
            assert connection.is_in_transaction()
        assert in_transaction == [False]
    finally:
        await pool.close()


async def test_write_many__one_call_joins_the_transaction_and_rolls_back_with_it(database):
    """``write_many`` runs its rows on the transaction's connection: rolled back with it,
    committed with it, bytes kept as bytes on both backends."""
    rows = [
        {
            "p_key_digest": bytes([number]) * 12,
            "p_envelope_digest": bytes([number]) * 8,
            "p_final_state": 1,
            "p_collected_at": number,
        }
        for number in range(3)
    ]
    with pytest.raises(RuntimeError):
        async with database.write_transaction():
            await database.write_many(PUT_TOMBSTONE, rows)
            raise RuntimeError("roll back")
    assert await database.fetch_all(sa.select(operation_tombstone)) == []

    async with database.write_transaction():
        await database.write_many(PUT_TOMBSTONE, rows)
    await database.write_many(PUT_TOMBSTONE, [])

    stored = await database.fetch_all(
        sa.select(operation_tombstone).order_by(operation_tombstone.c.collected_at)
    )
    assert [bytes(row["key_digest"]) for row in stored] == [row["p_key_digest"] for row in rows]


async def test_statement_observer__sees_each_statement_with_its_transaction(database):
    """``statement_observer`` gets each statement's SQL and values before the driver runs
    it, with one value per ``write_transaction`` (nested blocks join it) and None outside
    one; ``write_many`` reports each row; unset, nothing is reported."""
    seen = []
    database.statement_observer = lambda sql, values, tx: seen.append((sql, list(values), tx))
    tombstone = {"p_envelope_digest": b"e" * 8, "p_final_state": 1, "p_collected_at": 1}
    try:
        await database.fetch_one(sa.select(sa.literal(1)))
        async with database.write_transaction():
            await database.fetch_one(sa.select(sa.literal(2)))
            async with database.write_transaction():
                await database.fetch_one(sa.select(sa.literal(3)))
        async with database.write_transaction():
            await database.fetch_one(sa.select(sa.literal(4)))
        await database.write_many(
            PUT_TOMBSTONE, [tombstone | {"p_key_digest": bytes([n]) * 12} for n in range(2)]
        )
    finally:
        database.statement_observer = None
    await database.fetch_one(sa.select(sa.literal(5)))

    selects, puts = seen[:4], seen[4:]
    assert [values for _, values, _ in selects] == [[1], [2], [3], [4]]
    outside, first, nested, second = (tx for _, _, tx in selects)
    assert outside is None and first is not None and second is not None
    assert nested == first and second != first
    assert [(sql, tx) for sql, _, tx in puts] == [(puts[0][0], None)] * 2
    assert operation_tombstone.name in puts[0][0]
    assert [bytes([n]) * 12 in values for n, (_, values, _) in enumerate(puts)] == [True, True]


# --- SQLite: a write and the statement that follows it, one transaction in one hop ---------


def tombstone_of(n: int) -> dict[str, object]:
    return {
        "p_key_digest": bytes([n]) * 12,
        "p_envelope_digest": b"e" * 8,
        "p_final_state": 1,
        "p_collected_at": n,
    }


async def tombstones_kept(database: Database) -> list[int]:
    rows = await database.fetch_all(
        sa.select(operation_tombstone.c.collected_at).order_by(operation_tombstone.c.collected_at)
    )
    return [row["collected_at"] for row in rows]


class Refused(Exception):
    """Raised by a test where a statement would follow, or in a block."""


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
async def test_write_then__both_statements_commit_and_a_failing_second_writes_nothing(database):
    def refuse(rows: object) -> None:
        raise Refused

    with pytest.raises(Refused):
        await database.write_then(PUT_TOMBSTONE, tombstone_of(1), refuse)
    assert await tombstones_kept(database) == []

    seen = []
    database.statement_observer = lambda sql, values, tx: seen.append(tx)
    try:
        await database.write_then(
            PUT_TOMBSTONE, tombstone_of(2), lambda rows: (PUT_TOMBSTONE, [tombstone_of(3)])
        )
    finally:
        database.statement_observer = None
    assert await tombstones_kept(database) == [2, 3]
    assert len(seen) == 2 and seen[0] is not None and seen[0] == seen[1]


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
async def test_write_then__joins_the_write_transaction_it_runs_in(database):
    with pytest.raises(Refused):
        async with database.write_transaction():
            await database.write_then(
                PUT_TOMBSTONE, tombstone_of(1), lambda rows: (PUT_TOMBSTONE, [tombstone_of(2)])
            )
            assert await tombstones_kept(database) == [1, 2]
            raise Refused
    assert await tombstones_kept(database) == []


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
async def test_sqlite__a_write_transaction_that_runs_no_statement_leaves_nothing_open(database):
    async with database.write_transaction():
        pass
    with pytest.raises(Refused):
        async with database.write_transaction():
            raise Refused
    async with database.write_transaction():
        await database.write_prepared(PUT_TOMBSTONE, tombstone_of(4))
    assert await tombstones_kept(database) == [4]


def counting_hops(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """The works handed to a SQLite connection's thread from now on (one per hop), until
    ``monkeypatch.undo()``."""
    hops: list[object] = []
    run = sqlite_pool.SQLiteConnection.run

    async def counted(self, work):
        hops.append(work)
        return await run(self, work)

    monkeypatch.setattr(sqlite_pool.SQLiteConnection, "run", counted)
    return hops


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
async def test_sqlite__a_logged_write_and_its_event_are_one_hop_to_the_connection(
    database, clock, monkeypatch
):
    store = ConnectorStore(database, clock=clock)
    record = await claimed_operation(store)
    hops = counting_hops(monkeypatch)
    marked = await store.operations.mark_send_started(
        record.caller_did, record.operation_id, "lease-A", "run-1"
    )
    monkeypatch.undo()

    assert marked is not None and len(hops) == 1
    events = await store.events.operation_events(
        OperationKey(caller_did=record.caller_did, operation_id=record.operation_id)
    )
    assert [event.action for event in events][-1] == "send_marked"


async def test_write_ahead__commits_and_rolls_back_with_its_block_and_is_seen_by_the_next(
    database,
):
    with pytest.raises(Refused):
        async with database.write_transaction():
            await database.write_ahead(PUT_TOMBSTONE, tombstone_of(1))
            raise Refused
    async with database.write_transaction():
        await database.write_ahead(PUT_TOMBSTONE, tombstone_of(2))
    async with database.write_transaction():
        await database.write_ahead(PUT_TOMBSTONE, tombstone_of(3))
        assert await tombstones_kept(database) == [2, 3]
    await database.write_ahead(PUT_TOMBSTONE, tombstone_of(4))
    assert await tombstones_kept(database) == [2, 3, 4]


async def test_write_ahead__a_failing_write_fails_its_block_and_writes_nothing(database):
    broken = tombstone_of(1) | {"p_final_state": None}
    with pytest.raises((sqlite3.IntegrityError, asyncpg.NotNullViolationError)):
        async with database.write_transaction():
            await database.write_prepared(PUT_TOMBSTONE, tombstone_of(2))
            await database.write_ahead(PUT_TOMBSTONE, broken)
            await database.write_prepared(PUT_TOMBSTONE, tombstone_of(3))
    assert await tombstones_kept(database) == []


async def test_last_statement__commits_with_its_block_and_a_failing_one_writes_nothing(database):
    async with database.write_transaction():
        await database.write_prepared(PUT_TOMBSTONE, tombstone_of(1))
        with database.last_statement():
            await database.write_prepared(PUT_TOMBSTONE, tombstone_of(2))
    broken = tombstone_of(4) | {"p_final_state": None}
    with pytest.raises((sqlite3.IntegrityError, asyncpg.NotNullViolationError)):
        async with database.write_transaction():
            await database.write_prepared(PUT_TOMBSTONE, tombstone_of(3))
            with database.last_statement():
                await database.write_prepared(PUT_TOMBSTONE, broken)
    assert await tombstones_kept(database) == [1, 2]


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
async def test_sqlite__last_statement_sends_the_commit_with_it_and_refuses_a_later_one(
    database, monkeypatch
):
    hops = counting_hops(monkeypatch)
    async with database.write_transaction():
        await database.write_ahead(PUT_TOMBSTONE, tombstone_of(1))
        with database.last_statement():
            await database.write_prepared(PUT_TOMBSTONE, tombstone_of(2))
    monkeypatch.undo()
    assert len(hops) == 1
    assert await tombstones_kept(database) == [1, 2]

    with pytest.raises(AssertionError, match="after the block's last_statement"):
        async with database.write_transaction():
            with database.last_statement():
                await database.write_prepared(PUT_TOMBSTONE, tombstone_of(3))
            await database.write_prepared(PUT_TOMBSTONE, tombstone_of(4))
    assert await tombstones_kept(database) == [1, 2, 3]


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
async def test_sqlite__a_write_ahead_after_the_last_statement_is_refused_not_dropped(database):
    with pytest.raises(AssertionError, match="after the block's last_statement"):
        async with database.write_transaction():
            with database.last_statement():
                await database.write_prepared(PUT_TOMBSTONE, tombstone_of(1))
            await database.write_ahead(PUT_TOMBSTONE, tombstone_of(2))
    assert await tombstones_kept(database) == [1]


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
async def test_sqlite__a_claim_is_one_hop_with_its_account_and_commit(database, clock, monkeypatch):
    store = ConnectorStore(database, clock=clock)
    hops = counting_hops(monkeypatch)
    result = await store.operations.claim_operation(claim())
    monkeypatch.undo()

    assert result.status == "claimed"
    # BEGIN, the account, the insert (its tombstone guard inside) with its event, COMMIT.
    assert len(hops) == 1
    accounts = await store.accounts.list_accounts("calendar")
    assert [load.account.account_key for load in accounts] == ["acct-1"]


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
async def test_sqlite__a_finalize_is_one_hop_its_commit_with_the_watch(
    database, clock, monkeypatch
):
    store = ConnectorStore(database, clock=clock)
    record = await claimed_operation(store)
    hops = counting_hops(monkeypatch)
    done = await store.operations.finalize_operation_and_arm_watch(
        Finalize(
            record.caller_did,
            record.operation_id,
            version=record.version,
            lease_token="lease-A",
            due_at=clock.now + 1000,
            result_entity={"id": "e-1"},
        )
    )
    monkeypatch.undo()

    assert done is not None and done.watch.repair_generation == 1
    # The finalize with its event, the watch reading the winner with its event, and COMMIT.
    assert len(hops) == 1
    assert (await reread(store, record)).state == "committed"


@pytest.mark.parametrize("cancels", [1, 2, 3, 5])
@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
async def test_sqlite__a_write_transaction_cancelled_in_its_cleanup_still_frees_the_write_lock(
    database, database_url, cancels
):
    # Each cancellation after the first lands in the block's cleanup (its ROLLBACK, then the
    # close of its connection): work handed to a connection's thread runs all the same.
    inside = asyncio.Event()

    async def writer() -> None:
        async with database.write_transaction():
            await database.write_prepared(PUT_TOMBSTONE, tombstone_of(1))
            inside.set()
            await asyncio.sleep(10)

    task = asyncio.create_task(writer())
    await inside.wait()
    for _ in range(cancels):
        task.cancel()
        await asyncio.sleep(0)
    await asyncio.wait({task}, timeout=5)
    assert task.done()
    await asyncio.sleep(0.2)

    other = sqlite3.connect(sqlite_path(database_url), timeout=0, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
        other.execute("ROLLBACK")
    finally:
        other.close()
    await database.write_prepared(PUT_TOMBSTONE, tombstone_of(2))
    assert await tombstones_kept(database) == [2]


@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
async def test_custom_plans__the_block_plans_each_statement_with_its_values(database):
    async with database.custom_plans():
        inside = await database.fetch_one(sa.text("SHOW plan_cache_mode"))
        async with database.custom_plans():
            nested = await database.fetch_one(sa.text("SHOW plan_cache_mode"))
    after = await database.fetch_one(sa.text("SHOW plan_cache_mode"))

    assert inside["plan_cache_mode"] == nested["plan_cache_mode"] == "force_custom_plan"
    assert after["plan_cache_mode"] == "auto"


# --- connecting ------------------------------------------------------------------------------


@contextmanager
def silent_server() -> Iterator[int]:
    """A port of 127.0.0.1 whose connections are accepted (by the kernel's backlog) and
    never answered: a database host that hangs rather than refuses."""
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen(8)
        yield int(listening.getsockname()[1])


async def test_connect__a_server_that_never_answers_is_unavailable_past_the_wait():
    with silent_server() as port:
        db = Database(f"postgresql+asyncpg://postgres@127.0.0.1:{port}/x", wait_timeout_s=0.5)
        started = time.monotonic()
        with pytest.raises(DatabaseUnavailable):
            await db.connect()
    # asyncpg's own connect timeout is 60 s: well past this bound for a busy machine.
    assert time.monotonic() - started < 30
