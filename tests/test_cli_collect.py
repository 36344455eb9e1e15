"""``connector-store collect`` on both backends: a 10,000-operation backlog collected in
batches behind a progress bar, the total printed, live operations kept."""

import asyncio

import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

from server.cli import cli
from store.context import system_clock
from store.tables import operation_event, operation_tombstone, watch_event
from tests.factories import (
    aged_events,
    bulk_finished_operations,
    claimed_operation,
    created_pending_auth,
    pending_watch,
)

BACKLOG = 10_000
HOUR_MS = 3600 * 1000
DAY_MS = 24 * HOUR_MS


@pytest.fixture
async def backlog(store, database, clock, database_url):
    """A database holding 10,000 committed operations a day old and one live operation."""
    await bulk_finished_operations(database, BACKLOG, updated_at=clock.now - DAY_MS)
    await claimed_operation(store, lease_expires_at=0)
    return database_url


async def test_collect__backlog_collected_with_progress_bar(backlog, tmp_path, store):
    arguments = ["collect", "--older-than-seconds", "3600", "--batch", "1000"]
    env = {"DATABASE_URL": backlog, "DATA_DIR": str(tmp_path)}

    # The command runs its own event loop, so it runs in a thread beside this test's loop.
    result = await asyncio.to_thread(CliRunner().invoke, cli, arguments, env=env)

    assert result.exit_code == 0, result.output
    assert "collecting finished operations" in result.output
    assert f"collected {BACKLOG} finished operations, 0 expired pending auth" in result.output
    assert (
        await store.retention.count_finished_operations(2**53 - 1, failed_older_than=2**53 - 1) == 0
    )
    assert await store.operations.get_operation("did:key:caller", "op-1") is not None


def test_collect__batch_out_of_range_refused(tmp_path):
    result = CliRunner().invoke(
        cli,
        ["collect", "--batch", "10001"],
        env={"DATA_DIR": str(tmp_path), "DATABASE_URL": f"sqlite:///{tmp_path}/x.db"},
    )

    assert result.exit_code == 2


async def test_collect__dry_run_counts_what_would_go_and_deletes_nothing(
    backlog, tmp_path, store, database, clock
):
    await created_pending_auth(store, expires_at=0)
    # The live operation's claim, its one event, past RETAIN_EVENTS_SECONDS (30 days).
    ids = [row["id"] for row in await database.fetch_all(sa.select(operation_event.c.id))]
    assert len(ids) == 1
    await aged_events(database, operation_event, ids, by_ms=60 * DAY_MS)
    arguments = ["collect", "--older-than-seconds", "3600", "--dry-run"]
    env = {"DATABASE_URL": backlog, "DATA_DIR": str(tmp_path)}

    result = await asyncio.to_thread(CliRunner().invoke, cli, arguments, env=env)

    assert result.exit_code == 0, result.output
    assert f"would collect {BACKLOG} finished operations, 1 expired pending auth" in result.output
    assert "1 operation events, 0 watch events (dry run: nothing deleted)" in result.output
    assert await store.events.count_collectable_operation_events(0) == 1
    assert (
        await store.retention.count_finished_operations(2**53 - 1, failed_older_than=2**53 - 1)
        == BACKLOG
    )
    assert await store.retention.count_expired_pending_auth(2**53 - 1) == 1


async def test_collect__takes_the_sweepers_lock(backlog, tmp_path, store, database_url):
    """While a sweeper holds the sweep lock (PostgreSQL), collect deletes nothing and says
    so; on SQLite (one process per file) there is no lock to wait for."""
    arguments = ["collect", "--older-than-seconds", "3600"]
    env = {"DATABASE_URL": backlog, "DATA_DIR": str(tmp_path)}
    async with store.retention.exclusive_sweep() as mine:
        assert mine
        result = await asyncio.to_thread(CliRunner().invoke, cli, arguments, env=env)
    if database_url.startswith("postgresql"):
        assert result.exit_code == 1
        assert "another process is sweeping" in result.output
        assert (
            await store.retention.count_finished_operations(2**53 - 1, failed_older_than=2**53 - 1)
            == BACKLOG
        )
    else:
        assert result.exit_code == 0, result.output
        assert (
            await store.retention.count_finished_operations(2**53 - 1, failed_older_than=2**53 - 1)
            == 0
        )


async def test_collect__failed_kept_by_retain_failed_and_tombstones_expired(
    tmp_path, store, database, clock, database_url
):
    """``collect`` keeps a failed operation of the committed one's age (RETAIN_FAILED_SECONDS,
    or --failed-older-than-seconds) and deletes tombstones past RETAIN_KEYS_SECONDS. The
    command reads the system clock: the rows are a day old by it."""
    day_ago = system_clock() - DAY_MS
    for state in ["committed", "failed"]:
        await bulk_finished_operations(database, 2, day_ago, state=state, prefix=state)
    await bulk_finished_operations(database, 3, day_ago, prefix="gone")
    await store.retention.collect_finished_operations(day_ago + 1, failed_older_than=day_ago)
    await store.db.write_all(
        sa.update(operation_tombstone)
        .values(collected_at=0)
        .returning(operation_tombstone.c.collected_at)
    )
    env = {"DATABASE_URL": database_url, "DATA_DIR": str(tmp_path), "RETAIN_KEYS_SECONDS": "3600"}

    def run(*arguments: str):
        return asyncio.to_thread(CliRunner().invoke, cli, ["collect", *arguments], env=env)

    dry = await run("--older-than-seconds", "3600", "--dry-run")
    kept = await run("--older-than-seconds", "3600")
    failed = await run("--older-than-seconds", "3600", "--failed-older-than-seconds", "3600")

    assert dry.exit_code == kept.exit_code == failed.exit_code == 0, dry.output + kept.output
    assert "would collect 0 finished operations, 0 expired pending auth, 5 expired tombstones" in (
        dry.output
    )
    assert "collected 0 finished operations, 0 expired pending auth, 5 expired tombstones" in (
        kept.output
    )
    assert "collected 2 finished operations, 0 expired pending auth, 0 expired tombstones" in (
        failed.output
    )
    assert await store.retention.count_expired_tombstones(2**53 - 1) == 2


async def test_collect__an_operation_kept_longer_by_a_flag_keeps_its_events(
    tmp_path, store, database_url
):
    """``--failed-older-than-seconds`` (or ``--older-than-seconds``) past the events'
    retention would keep an operation whose history was collected: with RETAIN_EVENTS_SECONDS
    unset the events are kept as long as the longest of them; set below it, refused naming
    the flag, nothing deleted."""
    record = await claimed_operation(store)
    [claimed] = await store.events.operation_events_after(None, 10)
    # The command reads the system clock: the event is 40 days old by it.
    await store.db.write_all(
        sa.update(operation_event)
        .values(at=system_clock() - 40 * DAY_MS)
        .returning(operation_event.c.id)
    )
    env = {"DATABASE_URL": database_url, "DATA_DIR": str(tmp_path)}
    sixty_days = str(60 * 24 * 3600)

    def run(*arguments: str, **more: str):
        invoke = CliRunner().invoke
        return asyncio.to_thread(invoke, cli, ["collect", *arguments], env=env | more)

    kept = await run("--failed-older-than-seconds", sixty_days)
    refused = await run(
        "--failed-older-than-seconds", sixty_days, RETAIN_EVENTS_SECONDS=str(30 * 24 * 3600)
    )
    flag = await run("--older-than-seconds", sixty_days, RETAIN_EVENTS_SECONDS=sixty_days)

    assert kept.exit_code == 0, kept.output
    assert "0 operation events" in kept.output
    assert refused.exit_code == 1
    assert "--failed-older-than-seconds" in refused.output
    assert "RETAIN_EVENTS_SECONDS" in refused.output
    assert flag.exit_code == 0, flag.output
    assert [e.sequence for e in await store.events.operation_events_after(None, 10)] == [
        claimed.sequence
    ]
    assert await store.operations.get_operation(record.caller_did, record.operation_id)


async def test_collect__flags_of_0_collect_the_operations_and_keep_every_event(
    tmp_path, store, clock, database_url
):
    """``--older-than-seconds 0 --failed-older-than-seconds 0`` collects every finished
    operation but no event of either log: the flags never shorten the events' retention
    (RETAIN_EVENTS_SECONDS, unset: the environment's longest operation retention), so the
    history of what is kept, a live operation's included, stays whole."""
    clock.now = system_clock() - HOUR_MS
    watch = await pending_watch(store)
    live = await claimed_operation(
        store, operation_id="op-live", target="events/2", deterministic_event_id="det-2"
    )
    # The command reads the system clock: every event is an hour old by it.
    for table in (operation_event, watch_event):
        await store.db.write_all(
            sa.update(table).values(at=system_clock() - HOUR_MS).returning(table.c.id)
        )
    events = store.events
    before = [
        await events.operation_events_after(None, 100),
        await events.watch_events_after(None, 100),
    ]
    arguments = ["collect", "--older-than-seconds", "0", "--failed-older-than-seconds", "0"]
    env = {"DATABASE_URL": database_url, "DATA_DIR": str(tmp_path)}

    result = await asyncio.to_thread(CliRunner().invoke, cli, arguments, env=env)

    assert result.exit_code == 0, result.output
    assert "collected 1 finished operations" in result.output
    assert "0 operation events, 0 watch events" in result.output
    assert before[0] and before[1]
    assert [
        await events.operation_events_after(None, 100),
        await events.watch_events_after(None, 100),
    ] == before
    assert await store.operations.get_operation(live.caller_did, live.operation_id) is not None
    assert await store.watches.get_watch(watch.identity) is not None
