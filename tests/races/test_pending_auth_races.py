"""Pending auth consumed for real concurrency: 20 tasks, 20 connections, one state."""

import asyncio

from tests.factories import created_pending_auth


async def test_consume_pending_auth__twenty_concurrent_one_winner(store):
    record = await created_pending_auth(store)

    results = await asyncio.gather(
        *(
            asyncio.create_task(store.pending_auth.consume_pending_auth("state-1"))
            for _ in range(20)
        )
    )

    winners = [result for result in results if result is not None]
    assert winners == [record]
    assert results.count(None) == 19
    assert await store.pending_auth.get_pending_auth("state-1") is None
