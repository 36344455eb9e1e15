"""The client SDK's ``Worker`` bounds a failing handler, on both backends: each exception
counts an attempt, retried after an exponential backoff with jitter, and the
``max_attempts``-th ends the operation ``FAILED`` with the handler's error as its message; a
handler running past ``handler_timeout_s`` is cancelled, its attempt counted, and the worker
goes on with the rest."""

import asyncio
from typing import Any

from connector_store_client import Client, Committed, LeasedOperation, Outcome, Worker, enqueue

from store import ConnectorStore
from tests.api.live_client import served
from tests.api.test_client_worker_answers import BOUND_S, held, stored
from tests.api.test_client_worker_leasing import claims
from tests.conftest import FrozenClock
from tests.tokens import SERVICE_TOKEN


async def rounds(
    store: ConnectorStore, clock: FrozenClock, count: int, handler: Any, **options: Any
) -> list[Worker]:
    """One worker over 1 enqueued operation for each of ``count`` rounds, each run until
    idle, the clock moved past the longest backoff between them."""
    workers = []
    async with served(store) as app, Client(f"{app.http}/graphql", SERVICE_TOKEN) as client:
        await enqueue(client, claims(1))
        for _ in range(count):
            worker = Worker(client, handler, connector_name="calendar", **options)
            async with asyncio.timeout(BOUND_S):
                await worker.run(until_idle=True)
            workers.append(worker)
            clock.advance(options.get("retry_max_ms", 300_000))
    return workers


async def test_worker__a_handler_that_keeps_raising_ends_failed_after_max_attempts(store, clock):
    calls: list[int] = []

    async def broken(batch: list[LeasedOperation]) -> list[Outcome]:
        calls.append(batch[0].attempts)
        raise RuntimeError(f"provider client bug #{len(calls)}")

    workers = await rounds(store, clock, 4, broken, max_attempts=3, retry_max_ms=8_000)

    (record,) = await stored(store, 1)
    assert calls == [0, 1, 2]  # the fourth round finds nothing to lease
    assert [(w.stats.retried, w.stats.failed) for w in workers] == [(1, 0), (1, 0), (0, 1), (0, 0)]
    assert (record.state, record.attempts, record.last_kind) == ("failed", 3, "handler_error")
    assert record.last_error == "the handler raised RuntimeError('provider client bug #3')"
    assert held([record]) == []


async def test_worker__handler_errors_back_off_exponentially_with_jitter(store, clock):
    waits: list[int] = []

    async def broken(batch: list[LeasedOperation]) -> list[Outcome]:
        raise RuntimeError("down")

    async with served(store) as app, Client(f"{app.http}/graphql", SERVICE_TOKEN) as client:
        await enqueue(client, claims(1))
        for _ in range(5):
            worker = Worker(
                client, broken, connector_name="calendar", retry_base_ms=1_000, retry_max_ms=6_000
            )
            async with asyncio.timeout(BOUND_S):
                await worker.run(until_idle=True)
            (record,) = await stored(store, 1)
            waits.append(record.next_attempt_at - clock.now)
            clock.advance(waits[-1])

    # After attempt n: from half to all of min(6 s, 1 s · 2^(n-1)).
    for wait, ceiling in zip(waits, [1_000, 2_000, 4_000, 6_000, 6_000], strict=True):
        assert ceiling // 2 <= wait <= ceiling
    assert record.state == "attempted" and record.attempts == 5


async def test_worker__a_hung_handler_is_cancelled_and_the_rest_go_on(store):
    cancelled = asyncio.Event()

    async def hangs_on_the_first(batch: list[LeasedOperation]) -> list[Outcome]:
        if batch[0].operation_id == "op-0":
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                cancelled.set()
                raise
        return [Committed() for _ in batch]

    async with served(store) as app, Client(f"{app.http}/graphql", SERVICE_TOKEN) as client:
        await enqueue(client, claims(4))
        worker = Worker(
            client,
            hangs_on_the_first,
            connector_name="calendar",
            batch_size=1,
            concurrency=2,
            handler_timeout_s=0.5,
        )
        async with asyncio.timeout(BOUND_S):
            stats = await worker.run(until_idle=True)

    hung, *rest = await stored(store, 4)
    assert cancelled.is_set()
    assert (stats.committed, stats.retried) == (3, 1) and held([hung, *rest]) == []
    assert (hung.state, hung.attempts, hung.last_kind) == ("attempted", 1, "handler_timeout")
    assert hung.last_error == "the handler ran past handler_timeout_s (0.5 s)"
    assert {record.state for record in rest} == {"committed"}


async def test_worker__a_hung_handler_at_its_last_attempt_ends_failed(store):
    async def hangs(batch: list[LeasedOperation]) -> list[Outcome]:
        await asyncio.Event().wait()
        return []

    async with served(store) as app, Client(f"{app.http}/graphql", SERVICE_TOKEN) as client:
        await enqueue(client, claims(1))
        worker = Worker(
            client, hangs, connector_name="calendar", handler_timeout_s=0.2, max_attempts=1
        )
        async with asyncio.timeout(BOUND_S):
            stats = await worker.run(until_idle=True)

    (record,) = await stored(store, 1)
    assert stats.failed == 1
    assert (record.state, record.attempts, record.last_kind) == ("failed", 1, "handler_timeout")
