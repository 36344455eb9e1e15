"""The client SDK's ``Worker`` against a served app on both backends, given answers the server
would refuse: no handler's answer, no refused settle and no missing scope ends ``run`` or
leaves a batch leased. Messages are cut to the server's bound and delays clamped to it; a
handler's bad answer and an outcome the server still refuses are retried with a message
saying what was wrong, the rest of the batch settled; the largest ``batch_size`` the
constructor takes (what it refuses: tests/test_client_bounds.py) is one the server takes; a
tenant's token (no ``service``, no ``operator``) runs on the fallback timer and records its
429s without throttling."""

import asyncio
import logging
from typing import Any

import pytest
from connector_store_client import (
    Client,
    Committed,
    Deferred,
    Failed,
    LeasedOperation,
    Outcome,
    ProviderRetryPolicy,
    RetryAfter,
    Worker,
    enqueue,
)
from connector_store_client.bounds import MAX_BATCH, MAX_DELAY_MS, MAX_MESSAGE_BYTES
from connector_store_client.handler_errors import DEFAULT_RETRY_BASE_MS

from store import ConnectorStore
from store.accounts import MAX_RETRY_AFTER_MS
from store.records import OperationRecord
from tests.api.live_client import served
from tests.api.test_client_worker_leasing import claims
from tests.conftest import FrozenClock
from tests.tokens import SERVICE_TOKEN, mint

BOUND_S = 30.0
"""A bound on a run that should end: one that loops or hangs fails the test here."""
TENANT = "did:key:tenant"


async def stored(store: ConnectorStore, count: int, caller: str = "did:key:caller") -> list[Any]:
    """The operations ``op-0`` … of ``caller``, in order."""
    found = [await store.operations.get_operation(caller, f"op-{n}") for n in range(count)]
    assert all(record is not None for record in found)
    return found


def held(records: list[OperationRecord]) -> list[str]:
    """The ids of ``records`` still live and leased: a stranded batch (a settled operation
    keeps the token of the lease it was settled under)."""
    return [
        record.operation_id
        for record in records
        if record.state == "attempted" and record.lease_token is not None
    ]


async def run_once(store: ConnectorStore, count: int, handler: Any, **options: Any) -> Worker:
    """A worker with the service token over ``count`` enqueued operations, run until idle."""
    async with served(store) as app, Client(f"{app.http}/graphql", SERVICE_TOKEN) as client:
        await enqueue(client, claims(count))
        worker = Worker(client, handler, connector_name="calendar", concurrency=1, **options)
        async with asyncio.timeout(BOUND_S):
            await worker.run(until_idle=True)
    return worker


async def test_worker__messages_are_cut_to_the_servers_bound_in_whole_characters(store):
    async def answer(batch: list[LeasedOperation]) -> list[Outcome]:
        return [
            RetryAfter(1_000, message="x" * 3_000),
            Failed(message="€" * 2_000),
            Deferred(1_000, message="a\x00b\udc80" + "é" * 2_000),
        ]

    worker = await run_once(store, 3, answer)

    retried, failed, deferred = await stored(store, 3)
    assert (worker.stats.retried, worker.stats.failed, worker.stats.deferred) == (1, 1, 1)
    assert held([retried, failed, deferred]) == []
    assert (retried.state, failed.state, deferred.state) == ("attempted", "failed", "attempted")
    assert retried.last_error == "x" * (MAX_MESSAGE_BYTES - 3) + "…"
    assert failed.last_error == "€" * ((MAX_MESSAGE_BYTES - 3) // 3) + "…"
    assert deferred.last_error.startswith("a\ufffdb\ufffdé")
    for record in (retried, failed, deferred):
        assert len(record.last_error.encode()) <= MAX_MESSAGE_BYTES


async def test_worker__a_handler_raising_a_long_message_retries_its_batch(store):
    async def answer(batch: list[LeasedOperation]) -> list[Outcome]:
        raise RuntimeError("€" * 2_000)

    worker = await run_once(store, 2, answer)

    records = await stored(store, 2)
    assert worker.stats.retried == 2 and held(records) == []
    for record in records:
        assert record.last_kind == "handler_error" and record.attempts == 1
        assert record.last_error.startswith("the handler raised RuntimeError('€€")
        assert len(record.last_error.encode()) <= MAX_MESSAGE_BYTES


async def test_worker__delays_are_clamped_to_the_servers_bounds(store, clock: FrozenClock):
    rate_limited = ProviderRetryPolicy().outcome(429, 0, retry_after="3000000")
    assert isinstance(rate_limited, RetryAfter) and rate_limited.delay_ms == 3_000_000_000

    async def answer(batch: list[LeasedOperation]) -> list[Outcome]:
        return [rate_limited]

    worker = await run_once(store, 1, answer)

    (later,) = await stored(store, 1)
    assert worker.stats.retried == 1 and held([later]) == []
    assert later.next_attempt_at == clock.now + MAX_DELAY_MS
    (account,) = [
        load.account
        for load in await store.accounts.list_accounts("calendar")
        if load.account.account_key == "acct-0"
    ]
    assert account.throttled_until == clock.now + MAX_RETRY_AFTER_MS


async def test_worker__an_answer_that_is_not_an_outcome_retries_that_operation(store):
    async def answer(batch: list[LeasedOperation]) -> list[Any]:
        return [None, Committed(), RetryAfter("soon")]  # type: ignore[arg-type]

    worker = await run_once(store, 3, answer)

    nothing, committed, unreadable = await stored(store, 3)
    assert (worker.stats.retried, worker.stats.committed) == (2, 1)
    assert held([nothing, committed, unreadable]) == []
    assert committed.state == "committed"
    assert nothing.last_kind == "handler_error"
    assert nothing.last_error == "the handler's answer: None is not an outcome"
    assert "delay_ms must be a number of ms, not 'soon'" in unreadable.last_error


@pytest.mark.parametrize("answered", [None, [Committed()]], ids=["none", "too-few"])
async def test_worker__a_batch_answer_of_the_wrong_shape_retries_the_batch(store, answered):
    async def answer(batch: list[LeasedOperation]) -> Any:
        return answered

    worker = await run_once(store, 2, answer)

    records = await stored(store, 2)
    assert worker.stats.retried == 2 and held(records) == []
    assert {record.last_kind for record in records} == {"handler_error"}
    # The first attempt's backoff: between half the base and all of it.
    for record in records:
        assert record.attempts == 1
        waited = record.next_attempt_at - store.clock()
        assert DEFAULT_RETRY_BASE_MS // 2 <= waited <= DEFAULT_RETRY_BASE_MS


async def test_worker__outcomes_the_server_refuses_are_retried_and_the_rest_settled(store):
    """A refused finalize is committed again without its result (the provider took the
    write: a retry would send it again); any other refused outcome is retried."""

    async def answer(batch: list[LeasedOperation]) -> list[Outcome]:
        return [
            Committed({"text": "a lone \udc80"}, provider_etag="v1"),
            Failed("permanent", 1_000, "no such status"),
            Committed({"id": "fine"}),
            RetryAfter(1_000, "transient", 503),
            Failed("permanent", 404),
        ]

    worker = await run_once(store, 5, answer)

    bare, odd, fine, transient, gone = await stored(store, 5)
    stats = worker.stats
    assert (stats.committed, stats.failed, stats.retried, stats.refused) == (2, 1, 2, 2)
    assert held([bare, odd, fine, transient, gone]) == []
    assert (bare.state, fine.state) == ("committed", "committed")
    assert (bare.result_entity, bare.provider_etag) == (None, None)
    assert fine.result_entity == {"id": "fine"}
    assert (transient.state, gone.state, odd.state) == ("attempted", "failed", "attempted")
    assert odd.last_kind == "handler_error"
    assert odd.last_error.startswith("recordOperations refused the handler's outcome")
    assert "items[0].httpStatus" in odd.last_error


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no text")


async def test_worker__results_the_server_would_not_take_commit_without_them(store):
    """Not JSON, NaN, past the server's 64 KiB or far past its body bound: each operation is
    committed without its result (never retried: the provider took the write), the rest of
    the batch with theirs; a message whose ``str`` raises is sent as what it is."""

    async def answer(batch: list[LeasedOperation]) -> list[Outcome]:
        return [
            Committed(object()),
            Committed({"x": float("nan")}),
            Committed("z" * 5_000_000),
            Committed({"id": "fine"}, provider_etag="v2"),
            RetryAfter(1_000, message=Unprintable()),
        ]

    worker = await run_once(store, 5, answer)

    *bare, fine, retried = await stored(store, 5)
    assert (worker.stats.committed, worker.stats.retried) == (4, 1)
    assert held([*bare, fine, retried]) == []
    assert [(r.state, r.result_entity) for r in bare] == [("committed", None)] * 3
    assert (fine.state, fine.result_entity, fine.provider_etag) == (
        "committed",
        {"id": "fine"},
        "v2",
    )
    assert retried.last_error == "<a Unprintable whose str() raised RuntimeError>"


async def test_worker__a_batch_past_the_servers_body_bound_settles_in_several_requests(store):
    """80 results of 60 KiB each (each within the server's bound, 4.8 MB together, past its
    4 MiB body): every one committed with its result."""
    blob = "r" * 60_000

    async def answer(batch: list[LeasedOperation]) -> list[Outcome]:
        return [Committed({"blob": blob, "id": op.operation_id}) for op in batch]

    worker = await run_once(store, 80, answer, batch_size=80)

    records = await stored(store, 80)
    assert worker.stats.committed == 80 and held(records) == []
    assert all(r.result_entity == {"blob": blob, "id": r.operation_id} for r in records)


async def test_worker__the_largest_batch_size_is_the_servers(store):
    worker = await run_once(store, 3, commit, batch_size=MAX_BATCH)
    assert worker.stats.committed == 3


async def test_worker__a_tenant_token_runs_on_the_fallback_timer_and_records_its_429s(
    store, caplog
):
    tenant = mint(sub=TENANT, scope="operations:read operations:write")
    rate_limited = RetryAfter(60_000, "rate_limited", 429, throttle_account=True)
    mine = [claim | {"callerDID": TENANT, "ownerDID": TENANT} for claim in claims(4)]
    seen: list[str] = []

    async def answer(batch: list[LeasedOperation]) -> list[Outcome]:
        seen.extend(operation.operation_id for operation in batch)
        return [
            rate_limited if operation.operation_id in ("op-0", "op-2") else Committed()
            for operation in batch
        ]

    caplog.set_level(logging.WARNING, "connector_store_client.worker")
    async with served(store) as app, Client(f"{app.http}/graphql", tenant) as client:
        await enqueue(client, mine[:2])
        worker = Worker(client, answer, connector_name="calendar", fallback_s=0.05)
        running = asyncio.create_task(worker.run())
        async with asyncio.timeout(BOUND_S):
            while len(seen) < 2:
                await asyncio.sleep(0.02)
            # Leased in a later round: nothing wakes the worker but its fallback timer.
            await enqueue(client, mine[2:])
            while worker.stats.committed + worker.stats.retried < 4:
                assert not running.done(), running.result()
                await asyncio.sleep(0.02)
            worker.stop()
            stats = await running

    records = await stored(store, 4, TENANT)
    assert (stats.committed, stats.retried) == (2, 2) and held(records) == []
    assert [record.state for record in records] == ["attempted", "committed"] * 2
    assert {record.last_kind for record in records[::2]} == {"rate_limited"}
    loads = await store.accounts.list_accounts("calendar")
    assert {load.account.throttled_until for load in loads} == {None}
    logged = [record.getMessage() for record in caplog.records]
    assert sum("workAvailable needs the service scope" in line for line in logged) == 1
    assert sum("throttleAccount needs the operator scope" in line for line in logged) == 1


async def commit(batch: list[LeasedOperation]) -> list[Committed]:
    return [Committed() for _ in batch]
