"""The client SDK's ``Worker`` leasing against a served app on both backends: its lessees
send ``leaseOperations`` one at a time, and after an empty answer a lessee asks again only
once a batch has been settled since (a settle may free an account's cap; nothing else this
worker does can make work leasable)."""

from typing import Any

import httpx
from connector_store_client import Client, Committed, LeasedOperation, Worker, enqueue

from tests.api.live_client import served
from tests.tokens import SERVICE_TOKEN

LEASE = b"leaseOperations"


def claims(count: int) -> list[dict[str, Any]]:
    """``count`` claims without lease fields over 3 owners and accounts."""
    return [
        {
            "callerDID": "did:key:caller",
            "operationID": f"op-{n}",
            "ownerDID": f"did:key:owner-{n % 3}",
            "connectorName": "calendar",
            "model": "Event",
            "op": "update",
            "accountKey": f"acct-{n % 3}",
            "target": f"events/{n}",
            "sourceID": f"evt-{n}",
            "deterministicEventID": f"det-{n}",
            "payloadHash": f"sha256:{n}",
        }
        for n in range(count)
    ]


class LeaseCalls:
    """Counts the ``leaseOperations`` requests a client sends and the most in flight at once
    (httpx event hooks: sent, then answered)."""

    def __init__(self, client: Client) -> None:
        self.sent = 0
        self.in_flight = 0
        self.most_in_flight = 0
        client.http.event_hooks["request"].append(self.on_request)
        client.http.event_hooks["response"].append(self.on_response)

    async def on_request(self, request: httpx.Request) -> None:
        if LEASE in request.content:
            self.sent += 1
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)

    async def on_response(self, response: httpx.Response) -> None:
        if LEASE in response.request.content:
            self.in_flight -= 1


async def commit(batch: list[LeasedOperation]) -> list[Committed]:
    return [Committed({"id": operation.deterministic_event_id}) for operation in batch]


async def test_worker__lessees_lease_one_at_a_time_and_ask_no_more_than_settles_allow(store):
    async with served(store) as app, Client(f"{app.http}/graphql", SERVICE_TOKEN) as client:
        await enqueue(client, claims(12))
        calls = LeaseCalls(client)
        batches: list[int] = []

        async def handle(batch: list[LeasedOperation]) -> list[Committed]:
            batches.append(len(batch))
            return await commit(batch)

        worker = Worker(client, handle, connector_name="calendar", batch_size=5, concurrency=6)
        stats = await worker.run(until_idle=True)

    assert stats.committed == 12 and stats.lost == 0
    assert sorted(batches) == [2, 5, 5]
    assert calls.most_in_flight == 1
    # Each empty answer was asked after a different number of settled batches (0 to 3):
    # 6 lessees that each asked until answered nothing would send 3 + 6.
    assert calls.sent <= len(batches) + len(batches) + 1
