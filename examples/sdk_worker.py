"""A connector worker on the client SDK (``client/``), against a running connector-store server.

    .venv/bin/connector-store serve                      # in one terminal (or `make run`)
    CONNECTOR_STORE_TOKEN=… .venv/bin/python examples/sdk_worker.py --operations 20

It enqueues ``--operations`` write-backs (claims without a lease: any worker of the pool
may take them), then runs a ``Worker`` until nothing is left to lease. The handler sends each
leased operation to the provider keyed by its ``deterministicEventID`` (the provider's
idempotency key; here a dict standing in for a calendar API), and answers an outcome per
operation: ``Committed`` with the provider's entity, or what ``ProviderRetryPolicy`` makes
of the provider's error (a 429 retries after its Retry-After and throttles the account, a
5xx retries with backoff, another 4xx fails). One write answers 503 the first time, so the
run shows a retry. It prints ``committed: N/N`` and exits 1 when any operation did not end
COMMITTED.
"""

import argparse
import asyncio
import os
import sys
import uuid

from connector_store_client import (
    Client,
    Committed,
    LeasedOperation,
    Outcome,
    ProviderRetryPolicy,
    Worker,
    enqueue,
)

POLICY = ProviderRetryPolicy(base_ms=200, max_ms=1_000)
PROVIDER: dict[str, dict[str, str]] = {}
FLAKY: set[str] = set()
ROUNDS = 60
"""Rounds of leasing until idle, half a second apart: a retry comes due within a second."""


async def send(operation: LeasedOperation) -> Outcome:
    """One write to the provider; a repeat with the same idempotency key updates in place."""
    if operation.deterministic_event_id in FLAKY:
        FLAKY.discard(operation.deterministic_event_id)
        return (
            POLICY.outcome(503, operation.attempts, message="provider unavailable") or Committed()
        )
    PROVIDER[operation.deterministic_event_id] = {"id": operation.source_id}
    return Committed(PROVIDER[operation.deterministic_event_id])


async def handle(batch: list[LeasedOperation]) -> list[Outcome]:
    return list(await asyncio.gather(*(send(operation) for operation in batch)))


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default="http://127.0.0.1:8000/graphql")
    parser.add_argument("--operations", type=int, default=20)
    args = parser.parse_args()
    run = uuid.uuid4().hex[:8]
    claims = [
        {
            "callerDID": "did:key:sdk-example",
            "operationID": f"{run}-{n}",
            "ownerDID": f"did:key:owner-{n % 3}",
            "connectorName": "calendar-sdk",
            "model": "Event",
            "op": "update",
            "accountKey": f"acct-{n % 3}",
            "target": f"events/{run}-{n}",
            "sourceID": f"evt-{run}-{n}",
            "deterministicEventID": f"{run}-{n}",
            "payloadHash": f"sha256:{run}-{n}",
        }
        for n in range(args.operations)
    ]
    FLAKY.add(claims[0]["deterministicEventID"])
    async with Client(args.url, os.environ.get("CONNECTOR_STORE_TOKEN")) as client:
        await enqueue(client, claims)
        worker = Worker(client, handle, connector_name="calendar-sdk", fallback_s=0.5)
        for _ in range(ROUNDS):
            await worker.run(until_idle=True)
            if worker.stats.committed + worker.stats.failed >= args.operations:
                break
            await asyncio.sleep(0.5)
    print(f"committed: {worker.stats.committed}/{args.operations}")
    print(f"retried: {worker.stats.retried}")
    return 0 if worker.stats.committed == args.operations else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
