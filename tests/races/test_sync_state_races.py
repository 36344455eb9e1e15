"""Sync progress raced for real: 10 clients, each in its own task (its own connection),
each looping read → recompute → CAS until its 20 increments landed. Lost updates would show
as a final count below 200."""

import asyncio

from store import ConnectorStore
from tests.factories import idle_sync_state, progress

CONNECTOR = "calendar"
OWNER = "did:key:owner"
CLIENTS = 10
INCREMENTS = 20


async def increment(store: ConnectorStore) -> int:
    """One client's increments; returns how many CAS attempts were refused."""
    refused = 0
    for _ in range(INCREMENTS):
        while True:
            current = await store.sync_state.get_sync_state(CONNECTOR, OWNER)
            assert current is not None
            count = current.checkpoint["count"] + 1
            moved = await store.sync_state.update_sync_progress(
                CONNECTOR,
                OWNER,
                progress(checkpoint={"count": count}, entity_count=count),
                version=current.version,
                incarnation=current.incarnation,
            )
            if moved is not None:
                break
            refused += 1
    return refused


async def test_update_sync_progress__ten_clients_twenty_increments_each_200(store):
    await idle_sync_state(store, checkpoint={"count": 0})

    await asyncio.gather(*(asyncio.create_task(increment(store)) for _ in range(CLIENTS)))

    final = await store.sync_state.get_sync_state(CONNECTOR, OWNER)
    assert final is not None
    assert final.checkpoint == {"count": CLIENTS * INCREMENTS}
    assert final.entity_count == CLIENTS * INCREMENTS
    assert final.version == CLIENTS * INCREMENTS


async def test_update_sync_progress__concurrent_creates_one_wins(store):
    results = await asyncio.gather(
        *(
            asyncio.create_task(
                store.sync_state.update_sync_progress(
                    CONNECTOR, OWNER, progress(), version=None, incarnation=None
                )
            )
            for _ in range(10)
        )
    )

    assert len([r for r in results if r is not None]) == 1
