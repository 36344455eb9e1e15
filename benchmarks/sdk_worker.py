"""``make bench``'s row for the client SDK's worker (client/): ``Worker`` over HTTP, as a
connector author would run it, beside the hand-written batch path of ``benchmarks.load``
(``leased_batch``: leaseOperations → markSendsStarted → finalizeOperations on lean raw
HTTP/1.1). The same three requests per batch; the SDK adds httpx, parsing each answer into
its generated models, and its bookkeeping. Its lessees send ``leaseOperations`` one at a
time and end the run with one or two empty answers; the hand path's 16 connections lease at
once and stop when the count is done.

    .venv/bin/python -m benchmarks.sdk_worker '{"port": 18931, "token": "…", "count": 5000}'

A measured child of ``benchmarks.cpu``: it enqueues ``count`` operations (claims without
lease fields, over ``OWNERS`` tenants), says it is ready, and when told to go runs a
``Worker`` (``batch`` per lease, default 50; ``connections`` lessees, default 16) until one
round of leasing finds nothing, committing each operation, then prints ``lifecycles``,
``per_s`` and ``requests_per_lifecycle``.
"""

import json
import secrets
import sys
import time
from typing import Any

import uvloop
from connector_store_client import Client, Committed, LeasedOperation, Worker, enqueue

from benchmarks.cpu import done, ready
from benchmarks.load import CALLER, PRECLAIM_BATCH, tenant_of


def claim(operation_id: str, tenant: int) -> dict[str, Any]:
    """A claim without lease fields (it enqueues) of tenant ``tenant``'s account."""
    return {
        "callerDID": CALLER,
        "operationID": operation_id,
        "ownerDID": f"did:bench:owner-{tenant}",
        "connectorName": "bench",
        "model": "Event",
        "op": "update",
        "accountKey": f"acct-{tenant}",
        "target": f"events/{operation_id}",
        "sourceID": f"evt-{operation_id}",
        "deterministicEventID": f"det-{operation_id}",
        "payloadHash": "sha256:bench",
    }


async def commit(batch: list[LeasedOperation]) -> list[Committed]:
    """The provider took every write."""
    return [Committed({"id": operation.deterministic_event_id}) for operation in batch]


async def measure(spec: dict[str, Any]) -> None:
    """Enqueue, warm up, then time a ``Worker`` until nothing is left."""
    url = f"http://127.0.0.1:{spec['port']}/graphql"
    run_id = secrets.token_hex(4)
    async with Client(url, spec.get("token")) as client:
        ids = [f"sdk-{run_id}-{n}" for n in range(spec["count"])]
        for start in range(0, len(ids), PRECLAIM_BATCH):
            chunk = ids[start : start + PRECLAIM_BATCH]
            await enqueue(client, [claim(i, tenant_of(i)) for i in chunk])
        requests = 0

        async def count(_: Any) -> None:
            nonlocal requests
            requests += 1

        client.http.event_hooks["request"].append(count)
        worker = Worker(
            client,
            commit,
            connector_name="bench",
            batch_size=spec.get("batch", 50),
            concurrency=spec.get("connections", 16),
            lease_ms=60_000,
        )
        ready()
        started = time.perf_counter()
        stats = await worker.run(until_idle=True)
        seconds = time.perf_counter() - started
        done(
            {
                "lifecycles": stats.committed,
                "per_s": stats.committed / seconds,
                "requests_per_lifecycle": requests / max(stats.committed, 1),
            }
        )


if __name__ == "__main__":
    uvloop.run(measure(json.loads(sys.argv[1])))
