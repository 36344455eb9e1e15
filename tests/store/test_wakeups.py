"""Wake-ups (store.wakeups) on both backends: the triggers of migration 0009 tell the listener
of every write that can make work leasable, and of no other; the timer's reads find what
becomes leasable without a write."""

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from store.wakeups import CHANNEL
from tests.databases import with_database
from tests.factories import LEASE_MS, claim, claimed_operation, released_operation, transition

QUIET_S = 0.3
"""How long a write that must wake nobody is watched for a wake-up."""


class Heard:
    """The connector names a listener was told, in order (None: any connector)."""

    def __init__(self) -> None:
        self.names: list[str | None] = []
        self.changed = asyncio.Event()

    def __call__(self, name: str | None) -> None:
        self.names.append(name)
        self.changed.set()

    async def next(self, timeout_s: float = 5.0) -> str | None:
        """The next name told (waiting for it)."""
        while not self.names:
            self.changed.clear()
            await asyncio.wait_for(self.changed.wait(), timeout_s)
        return self.names.pop(0)

    async def nothing(self) -> bool:
        """True when nothing is told within ``QUIET_S``."""
        await asyncio.sleep(QUIET_S)
        return not self.names


@asynccontextmanager
async def listening(store) -> AsyncIterator[Heard]:
    """A listener on ``store``, past its first ``None`` (told once it listens)."""
    heard = Heard()
    async with store.wakeups.listening(heard, poll_s=0.01):
        assert await heard.next() is None
        yield heard


async def test_listening__a_claim_wakes_its_connector(store):
    async with listening(store) as heard:
        await claimed_operation(store, connector_name="drive")
        assert await heard.next() == "drive"


async def test_listening__release_finish_and_defer_wake_renew_and_mark_do_not(store, clock):
    record = await claimed_operation(store)
    async with listening(store) as heard:
        renewed = await store.operations.renew_lease(
            record.caller_did, record.operation_id, "lease-A", clock() + 2 * LEASE_MS
        )
        assert renewed is not None
        marked = await store.operations.mark_send_started(
            record.caller_did, record.operation_id, "lease-A", "run-1"
        )
        assert marked is not None
        assert await heard.nothing()

        deferred = await store.operations.defer_operation(
            record.caller_did, record.operation_id, clock() + 1000, None, "lease-A"
        )
        assert deferred is not None
        assert await heard.next() == "calendar"
        failed = await store.operations.record_operation(transition(deferred, to_state="failed"))
        assert failed is not None and failed.state == "failed"
        assert await heard.next() == "calendar"
        other = await claimed_operation(store, operation_id="op-2", connector_name="drive")
        assert await heard.next() == "drive"
        released = await store.operations.release_lease(
            other.caller_did, other.operation_id, "lease-A"
        )
        assert released is not None
        assert await heard.next() == "drive"


async def test_listening__an_account_eased_wakes_a_new_cap_does_not(store):
    await store.accounts.set_account_limit("calendar", "acct-1", 1)
    async with listening(store) as heard:
        await store.accounts.set_account_limit("calendar", "acct-1", 1)
        assert await heard.nothing()
        await store.accounts.set_account_limit("calendar", "acct-1", None)
        assert await heard.next() == "calendar"


@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
async def test_listening__postgres_rolled_back_write_wakes_nobody(store, database):
    async with listening(store) as heard:
        with pytest.raises(RuntimeError):
            async with database.write_transaction():
                await store.operations.claim_operation(claim())
                raise RuntimeError("rolled back")
        assert await heard.nothing()


@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
async def test_listening__postgres_notifies_the_channel_at_commit(store, database_url):
    import asyncpg

    from store.urls import asyncpg_dsn

    connection = await asyncpg.connect(asyncpg_dsn(database_url))
    payloads: list[str] = []
    try:
        await connection.add_listener(CHANNEL, lambda *args: payloads.append(args[-1]))
        await claimed_operation(store, connector_name="crm")
        for _ in range(100):
            if payloads:
                break
            await asyncio.sleep(0.02)
    finally:
        await connection.close()
    assert payloads == ["crm"]


@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
async def test_listening__postgres_listener_reconnects_and_says_anything_may_have_changed(
    store, database_url
):
    import asyncpg

    from store.urls import asyncpg_dsn

    async with listening(store) as heard:
        admin = await asyncpg.connect(asyncpg_dsn(database_url))
        try:
            await admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE query LIKE 'LISTEN%' AND datname = current_database()"
            )
        finally:
            await admin.close()
        assert await heard.next(timeout_s=10) is None
        await claimed_operation(store, connector_name="drive")
        assert await heard.next() == "drive"


async def test_next_due_after__the_earliest_deferral_lapse_or_throttle_end(store, clock):
    now = clock()
    assert await store.wakeups.next_due_after(now) is None
    leased = await claimed_operation(store, lease_expires_at=now + 5000)
    assert await store.wakeups.next_due_after(now) == leased.lease_expires_at + 1
    other = await released_operation(store, operation_id="op-2", source_id="evt-2")
    await store.operations.defer_operation(other.caller_did, other.operation_id, now + 3000)
    assert await store.wakeups.next_due_after(now) == now + 3000
    await store.accounts.throttle_account("calendar", "acct-9", 1000)
    assert await store.wakeups.next_due_after(now) == now + 1000
    assert await store.wakeups.next_due_after(now + 1000) == now + 3000


async def test_due_between__connectors_whose_work_came_due_in_the_window(store, clock):
    now = clock()
    await claimed_operation(store, connector_name="a", lease_expires_at=now + 1000)
    deferred = await released_operation(
        store, connector_name="b", operation_id="op-b", source_id="evt-b"
    )
    await store.operations.defer_operation(deferred.caller_did, deferred.operation_id, now + 2000)
    await store.accounts.throttle_account("c", "acct-1", 3000)

    assert await store.wakeups.due_between(now, now + 999) == []
    assert await store.wakeups.due_between(now, now + 1001) == ["a"]
    assert await store.wakeups.due_between(now + 1001, now + 2000) == ["b"]
    assert await store.wakeups.due_between(now, now + 3000) == ["a", "b", "c"]
    assert await store.wakeups.due_between(now + 3000, now + 9000) == []


@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
async def test_listening__postgres_listens_on_listen_url_not_the_pool(store, database_url):
    elsewhere = with_database(database_url, "postgres")
    heard = Heard()
    async with store.wakeups.listening(heard, listen_url=elsewhere):
        assert await heard.next() is None
        await claimed_operation(store, connector_name="crm")
        assert await heard.nothing()
    async with store.wakeups.listening(heard, listen_url=database_url):
        assert await heard.next() is None
        await claimed_operation(store, operation_id="op-2", connector_name="crm")
        assert await heard.next() == "crm"
