"""The client SDK's ``Worker`` against a served app on both backends while the server cannot
be reached (its requests dropped by the test, past the client's own retries): a finished
outcome is kept and its settle sent again until the server takes it, never released for
another send; so is a mark; a worker stopped meanwhile waits for it (a second stop gives it
up, leaving its leases to lapse), and the leases are renewed meanwhile, so another worker
takes none of them. Each test counts the handler's sends: one per operation."""

import asyncio
import collections
from collections.abc import Iterable

import httpx
import pytest
from connector_store_client import (
    Client,
    Committed,
    LeasedOperation,
    Outcome,
    RetryAfter,
    Worker,
    enqueue,
)
from connector_store_client import client as client_module

from store import ConnectorStore
from tests.api.live_client import served
from tests.api.test_client_worker_answers import BOUND_S, held, stored
from tests.api.test_client_worker_leasing import claims
from tests.tokens import SERVICE_TOKEN


@pytest.fixture(autouse=True)
def quick_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    """The client's backoff in hundredths of the real one: the outages here are counted in
    requests, not seconds."""
    monkeypatch.setattr(client_module, "RETRY_BASE_S", 0.002)
    monkeypatch.setattr(client_module, "RETRY_MAX_S", 0.05)


class Outage:
    """Drops the requests of ``client`` that carry one of ``calls`` (their operation names)
    while ``down``, counting the dropped ones: as if the server were restarting."""

    def __init__(self, client: Client, calls: Iterable[bytes]) -> None:
        self.calls = tuple(calls)
        self.down = True
        self.dropped = 0
        self.after: int | None = None
        """Mend once this many requests were dropped (None: only ``mend()`` does)."""
        client.http.event_hooks["request"].append(self.drop)

    async def drop(self, request: httpx.Request) -> None:
        if self.down and any(call in request.content for call in self.calls):
            self.dropped += 1
            if self.after is not None and self.dropped >= self.after:
                self.down = False
            raise httpx.ConnectError("dropped by the test: the server is restarting")

    def mend(self) -> None:
        self.down = False


COMMIT = Committed()


class Sends:
    """A handler that counts its sends by operation and answers ``outcome`` for each."""

    def __init__(self, outcome: Outcome = COMMIT) -> None:
        self.outcome = outcome
        self.sent: collections.Counter[str] = collections.Counter()

    async def __call__(self, batch: list[LeasedOperation]) -> list[Outcome]:
        self.sent.update(operation.operation_id for operation in batch)
        return [self.outcome for _ in batch]


@pytest.mark.parametrize(
    ("call", "outcome", "state"),
    [
        (b"finalizeOperations", Committed({"id": "x"}), "committed"),
        (b"recordOperations", RetryAfter(60_000), "attempted"),
        (b"markSendsStarted", Committed({"id": "x"}), "committed"),
    ],
    ids=["finalize", "record", "mark"],
)
async def test_worker__a_call_lost_past_the_retries_is_sent_again_never_released(
    store: ConnectorStore, call: bytes, outcome: Outcome, state: str
):
    sends = Sends(outcome)
    async with served(store) as app, Client(f"{app.http}/graphql", SERVICE_TOKEN) as client:
        await enqueue(client, claims(3))
        outage = Outage(client, [call])
        outage.after = 8  # past the client's 5 tries: the worker's own resend takes over
        worker = Worker(client, sends, connector_name="calendar", concurrency=1)
        async with asyncio.timeout(BOUND_S):
            stats = await worker.run(until_idle=True)

    records = await stored(store, 3)
    assert outage.dropped == 8 and stats.resent >= 1
    assert sends.sent == {f"op-{n}": 1 for n in range(3)}
    assert stats.released == 0 and stats.lost == 0 and held(records) == []
    assert [(record.state, record.attempts) for record in records] == [(state, 1)] * 3


async def test_worker__stopped_while_a_settle_waits_it_settles_before_run_returns(store):
    sends = Sends()
    async with served(store) as app, Client(f"{app.http}/graphql", SERVICE_TOKEN) as client:
        await enqueue(client, claims(2))
        outage = Outage(client, [b"finalizeOperations"])
        worker = Worker(client, sends, connector_name="calendar", fallback_s=0.05)
        running = asyncio.create_task(worker.run())
        async with asyncio.timeout(BOUND_S):
            while worker.stats.resent == 0:
                await asyncio.sleep(0.02)
            worker.stop()
            await asyncio.sleep(0.2)
            assert not running.done()
            outage.mend()
            stats = await running

    records = await stored(store, 2)
    assert sends.sent == {"op-0": 1, "op-1": 1}
    assert (stats.committed, stats.released) == (2, 0) and held(records) == []
    assert {record.state for record in records} == {"committed"}


async def test_worker__stopped_twice_it_gives_the_settle_up_and_releases_nothing(store):
    sends = Sends()
    async with served(store) as app, Client(f"{app.http}/graphql", SERVICE_TOKEN) as client:
        await enqueue(client, claims(2))
        Outage(client, [b"finalizeOperations", b"releaseLeases"])
        worker = Worker(client, sends, connector_name="calendar", fallback_s=0.05)
        running = asyncio.create_task(worker.run())
        async with asyncio.timeout(BOUND_S):
            while worker.stats.resent == 0:
                await asyncio.sleep(0.02)
            worker.stop()
            worker.stop()
            stats = await running

    records = await stored(store, 2)
    assert sends.sent == {"op-0": 1, "op-1": 1}
    assert (stats.committed, stats.released) == (0, 0)
    # Still leased to the stopped worker, its send marked: whoever leases it after the
    # lease lapses counts a contested attempt.
    assert [record.state for record in records] == ["attempted"] * 2
    assert all(record.lease_token is not None for record in records)


@pytest.mark.slow
async def test_worker__renews_its_leases_while_a_settle_waits_so_no_other_takes_them(database):
    """On the real clock, leases of 2 s, the first worker's finalizes lost for well past
    that: its renewals keep the leases, so a second worker leasing all along takes none of
    them, and each write is sent once."""
    store = ConnectorStore(database)
    sends = Sends()
    async with (
        served(store) as app,
        Client(f"{app.http}/graphql", SERVICE_TOKEN) as client,
        Client(f"{app.http}/graphql", SERVICE_TOKEN) as other,
    ):
        await enqueue(client, claims(2))
        outage = Outage(client, [b"finalizeOperations"])
        first = Worker(client, sends, connector_name="calendar", lease_ms=2_000)
        running = asyncio.create_task(first.run())
        async with asyncio.timeout(BOUND_S):
            while sum(sends.sent.values()) < 2:
                await asyncio.sleep(0.02)
            second = Worker(other, sends, connector_name="calendar", fallback_s=0.05)
            competing = asyncio.create_task(second.run())
            loop = asyncio.get_running_loop()
            until = loop.time() + 5.0  # 2.5 leases long without a settle getting through
            while loop.time() < until:
                assert not competing.done() and not running.done()
                await asyncio.sleep(0.05)
            outage.mend()
            while first.stats.committed < 2:
                await asyncio.sleep(0.02)
            first.stop()
            second.stop()
            await running
            await competing

    records = await stored(store, 2)
    assert sends.sent == {"op-0": 1, "op-1": 1}
    assert {record.state for record in records} == {"committed"}
