"""The background sweeper (server/sweeper.py), on both backends: what one sweep deletes and
logs, its interval, the off switch, the stop at shutdown, and one sweeper at a time across
replicas on PostgreSQL."""

import asyncio
import logging

import pytest
import sqlalchemy as sa

from server.app import create_app, sweeping
from server.settings import Settings
from server.sweeper import Retention, Sweeper
from store import ConnectorStore
from store.database import Database
from store.tables import event_collected, operation_event, watch_event
from store.urls import sqlite_path
from tests.factories import (
    aged_events,
    bulk_finished_operations,
    claimed_operation,
    created_pending_auth,
    pending_watch,
)

DAY_MS = 24 * 3600 * 1000
SWEEP_LOG = "connector_store.sweeper"


def sweeper(store, *, batch=10, interval_s=60.0):
    return Sweeper(
        store,
        interval_s=interval_s,
        retention=Retention(finished_ms=DAY_MS, failed_ms=DAY_MS),
        batch=batch,
    )


def sweep_lines(caplog):
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith("sweep: deleted")]


async def test_sweep__deletes_old_finished_and_expired_in_batches_and_logs(
    store, database, clock, caplog
):
    caplog.set_level(logging.INFO, logger=SWEEP_LOG)
    await store.sign_in.issue_code("did:key:ops", "operator", ttl_ms=1)
    clock.advance(1)
    await store.sign_in.issue_code("did:key:ops", "operator", ttl_ms=1)
    await bulk_finished_operations(database, 25, updated_at=clock.now - DAY_MS - 1)
    await claimed_operation(store, lease_expires_at=0)
    await created_pending_auth(store, state="expired", expires_at=clock.now - 1)
    await created_pending_auth(store, state="at-now", expires_at=clock.now)

    result = await sweeper(store).sweep()

    assert result is not None
    assert (result.operations, result.pending_auth, result.batches) == (25, 1, 3)
    assert result.sign_ins == 1
    assert await store.operations.get_operation("did:key:caller", "op-1") is not None
    assert await store.pending_auth.get_pending_auth("at-now") is not None
    assert sweep_lines(caplog) == [
        "sweep: deleted 25 finished operations, 1 expired pending auth, 0 expired tombstones, "
        "0 operation events, 0 watch events, 1 ended sign-ins"
    ]


async def test_sweep__default_retention_keeps_a_failed_operation_the_committed_one_goes(
    store, database, clock
):
    """Of a committed and a failed operation of the same age, past RETAIN_FINISHED_SECONDS,
    the default sweep collects the committed one and keeps the failed one (the evidence of
    what went wrong) until RETAIN_FAILED_SECONDS."""
    age = 8 * DAY_MS
    for state in ["committed", "failed"]:
        await bulk_finished_operations(database, 1, clock.now - age, state=state, prefix=state)
    default = Sweeper(store, interval_s=60, retention=Retention.of(Settings()), batch=1000)

    first = await default.sweep()
    committed = await store.operations.get_operation("did:key:committed", "committed-1")
    failed = await store.operations.get_operation("did:key:failed", "failed-1")
    clock.advance(30 * DAY_MS - age)
    at_thirty_days = await default.sweep()
    clock.advance(1)
    past_thirty_days = await default.sweep()

    assert first is not None and first.operations == 1
    assert committed is None
    assert failed is not None and failed.state == "failed"
    assert at_thirty_days is not None and at_thirty_days.operations == 0
    assert past_thirty_days is not None and past_thirty_days.operations == 1
    assert await store.operations.get_operation("did:key:failed", "failed-1") is None


async def test_sweep__deletes_tombstones_past_retain_keys_in_batches(
    store, database, clock, caplog
):
    caplog.set_level(logging.INFO, logger=SWEEP_LOG)
    await bulk_finished_operations(database, 5, updated_at=clock.now - DAY_MS - 1)
    keys_ms = 90 * DAY_MS
    running = Sweeper(
        store, interval_s=60, retention=Retention(finished_ms=DAY_MS, keys_ms=keys_ms), batch=2
    )

    collected = await running.sweep()
    clock.advance(keys_ms)
    at_window_end = await running.sweep()
    clock.advance(1)
    past_window = await running.sweep()

    assert collected is not None and (collected.operations, collected.tombstones) == (5, 0)
    assert at_window_end is not None and at_window_end.tombstones == 0
    assert past_window is not None and past_window.tombstones == 5
    assert await store.retention.count_expired_tombstones(2**53 - 1) == 0
    assert sweep_lines(caplog)[-1] == (
        "sweep: deleted 0 finished operations, 0 expired pending auth, 5 expired tombstones, "
        "0 operation events, 0 watch events, 0 ended sign-ins"
    )


async def test_sweep__keeps_finished_within_retention(store, database, clock):
    await bulk_finished_operations(database, 5, updated_at=clock.now - DAY_MS)

    result = await sweeper(store).sweep()

    assert result is not None and result.operations == 0
    assert (
        await store.retention.count_finished_operations(
            clock.now + 1, failed_older_than=clock.now + 1
        )
        == 5
    )


async def test_sweeper__runs_on_its_interval_until_stopped(store, database, clock, caplog):
    caplog.set_level(logging.INFO, logger=SWEEP_LOG)
    running = sweeper(store, interval_s=0.001)

    running.start()
    for _ in range(500):
        if len(sweep_lines(caplog)) >= 3:
            break
        await asyncio.sleep(0.01)
    await running.stop()

    assert len(sweep_lines(caplog)) >= 3
    assert not running.running
    stopped_at = len(sweep_lines(caplog))
    await asyncio.sleep(0.05)
    assert len(sweep_lines(caplog)) == stopped_at


async def test_sweeper__error_logged_and_next_sweep_runs(store, caplog, monkeypatch):
    caplog.set_level(logging.INFO, logger=SWEEP_LOG)
    calls = 0
    original = store.pending_auth.delete_expired_pending_auth

    async def flaky(cutoff):
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("database went away")
        return await original(cutoff)

    monkeypatch.setattr(store.pending_auth, "delete_expired_pending_auth", flaky)
    running = sweeper(store, interval_s=0.001)
    running.start()
    for _ in range(500):
        if sweep_lines(caplog):
            break
        await asyncio.sleep(0.01)
    await running.stop()

    assert any("sweep failed" in r.getMessage() for r in caplog.records)
    assert sweep_lines(caplog)


async def test_sweeping__off_switch(store, caplog):
    caplog.set_level(logging.INFO, logger="connector_store")

    async with sweeping(Settings(sweeper=False), store) as running:
        assert running is None

    assert "sweeper: off (SWEEPER=false)" in caplog.text


async def test_app_lifespan__starts_sweeper_and_stops_it_on_shutdown(store, caplog):
    caplog.set_level(logging.INFO, logger=SWEEP_LOG)
    settings = Settings(sweep_interval_seconds=0.001)
    app = create_app(settings, store=store)

    async with app.router.lifespan_context(app):
        running = app.state.sweeper
        assert isinstance(running, Sweeper) and running.running
        for _ in range(500):
            if sweep_lines(caplog):
                break
            await asyncio.sleep(0.01)

    assert sweep_lines(caplog)
    assert not running.running
    assert "sweeper: stopped" in caplog.text


@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
async def test_sweep__postgres_second_replica_skips_while_one_sweeps(
    store, database, database_url, clock, caplog
):
    caplog.set_level(logging.INFO, logger=SWEEP_LOG)
    await bulk_finished_operations(database, 30, updated_at=clock.now - DAY_MS - 1)
    replica_db = Database(database_url)
    await replica_db.connect()
    try:
        replica = ConnectorStore(replica_db, clock=clock)
        first = sweeper(store, batch=10)
        second = sweeper(replica, batch=10)
        entered = asyncio.Event()
        release = asyncio.Event()
        collect = store.retention.collect_finished_operations

        async def slow_collect(older_than, limit, **cutoffs):
            entered.set()
            await release.wait()
            return await collect(older_than, limit, **cutoffs)

        store.retention.collect_finished_operations = slow_collect  # type: ignore[method-assign]
        sweeping_task = asyncio.create_task(first.sweep())
        await entered.wait()

        skipped = await second.sweep()
        release.set()
        swept = await sweeping_task
        again = await second.sweep()
    finally:
        await replica_db.disconnect()

    assert skipped is None
    assert swept is not None and swept.operations == 30
    assert "sweep: skipped, another replica is sweeping" in caplog.text
    assert again is not None and again.operations == 0


async def test_sweeper__stop_mid_sweep_ends_after_current_batch(store, database, clock, caplog):
    caplog.set_level(logging.INFO, logger=SWEEP_LOG)
    await bulk_finished_operations(database, 30, updated_at=clock.now - DAY_MS - 1)
    running = sweeper(store, batch=10)
    collect = store.retention.collect_finished_operations
    stopping: list[asyncio.Task[None]] = []

    async def collect_then_stop(older_than, limit, **cutoffs):
        if not stopping:
            stopping.append(asyncio.create_task(running.stop()))
        return await collect(older_than, limit, **cutoffs)

    store.retention.collect_finished_operations = collect_then_stop  # type: ignore[method-assign]
    running.start()
    while not stopping:
        await asyncio.sleep(0.001)
    await stopping[0]

    assert not running.running
    assert (
        await store.retention.count_finished_operations(clock.now, failed_older_than=clock.now)
        == 20
    )
    assert sweep_lines(caplog) == [
        "sweep: deleted 10 finished operations, 0 expired pending auth, 0 expired tombstones, "
        "0 operation events, 0 watch events, 0 ended sign-ins"
    ]
    assert "cancelling" not in caplog.text


async def test_sweeper__start_logs_its_interval_and_retention_in_human_units(store, caplog):
    caplog.set_level(logging.INFO, logger=SWEEP_LOG)
    sweeper = Sweeper(store, interval_s=300, retention=Retention(), batch=1000)
    sweeper.start()
    await sweeper.stop()
    [started] = [
        r.getMessage() for r in caplog.records if "finished operations kept" in r.getMessage()
    ]
    assert started == (
        "sweeper: every 5 minutes, finished operations kept 7 days (failed 30 days), "
        "tombstones of their keys 90 days, events 30 days, batches of 1000"
    )
    assert str(7 * DAY_MS) not in started


async def event_ids(database, table):
    rows = await database.fetch_all(sa.select(table.c.id).order_by(table.c.tx, table.c.id))
    return [row["id"] for row in rows]


async def test_sweep__collects_both_event_logs_by_age_as_a_prefix_in_batches(
    store, database, clock, caplog
):
    """Watch events are collected as operation events are: the oldest first, in batches,
    up to the first event younger than RETAIN_EVENTS_SECONDS (an older one after it stays,
    so what is kept is the log from some event on)."""
    caplog.set_level(logging.INFO, logger=SWEEP_LOG)
    for n in range(5):
        await pending_watch(store, operation_id=f"op-{n}", source_id=f"evt-{n}")
    watches = await event_ids(database, watch_event)
    operations = await event_ids(database, operation_event)
    assert len(watches) == 5 and len(operations) > 5
    await aged_events(database, watch_event, [i for i in watches if i != watches[3]])
    await aged_events(database, operation_event, operations[:-1])

    result = await Sweeper(
        store,
        interval_s=60,
        retention=Retention(finished_ms=DAY_MS, failed_ms=DAY_MS, events_ms=DAY_MS),
        batch=2,
    ).sweep()

    assert result is not None
    assert (result.operation_events, result.watch_events) == (len(operations) - 1, 3)
    assert await event_ids(database, watch_event) == watches[3:]
    assert await event_ids(database, operation_event) == operations[-1:]
    frontier = await database.fetch_all(
        sa.select(event_collected.c.log, event_collected.c.id).order_by(event_collected.c.log)
    )
    assert [(row["log"], row["id"]) for row in frontier] == [
        (operation_event.name, operations[-2]),
        (watch_event.name, watches[2]),
    ]
    assert sweep_lines(caplog)[-1].endswith(
        f"{len(operations) - 1} operation events, 3 watch events, 0 ended sign-ins"
    )


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
async def test_sweep__sqlite_cuts_the_write_ahead_log_to_zero(store, database, clock):
    await bulk_finished_operations(database, 25, updated_at=clock.now - DAY_MS - 1)
    path = sqlite_path(database.url)
    assert path is not None
    wal = path.with_name(path.name + "-wal")
    assert wal.stat().st_size > 0

    await sweeper(store).sweep()

    assert wal.stat().st_size == 0
