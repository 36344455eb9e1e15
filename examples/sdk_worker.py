"""A connector worker on the client SDK (``client/``), against a running connector-store server.

    .venv/bin/connector-store serve                      # in one terminal (or `make run`)
    CONNECTOR_STORE_TOKEN=… .venv/bin/python examples/sdk_worker.py --operations 20

It enqueues ``--operations`` write-backs (claims without a lease: any worker of the pool
may take them) and runs a ``Worker`` (its handler errors retried with backoff, at most
``max_attempts`` times, each batch bounded by ``handler_timeout_s``; the token from a
function, asked again before it expires) while ``follow_events`` watches them: once each has
ended (COMMITTED or FAILED) it stops the worker. No polling, no sleeps. The handler sends each
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
    events_head,
    follow_events,
)

POLICY = ProviderRetryPolicy(base_ms=200, max_ms=1_000)
PROVIDER: dict[str, dict[str, str]] = {}
FLAKY: set[str] = set()
ENDED = {"COMMITTED", "FAILED"}
CALLER = "did:key:sdk-example"


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


def token() -> str:
    """The bearer token, asked for at start and again before it expires: here the
    environment's, read anew each time (a real worker asks its identity provider)."""
    return os.environ["CONNECTOR_STORE_TOKEN"]


async def until_ended(client: Client, pending: set[str], after: str) -> None:
    """Follow this run's events until each operation of ``pending`` has ended."""
    async for event in follow_events(client, {"callerDID": CALLER}, after):
        if event["toState"] in ENDED:
            pending.discard(event["operation"]["operationID"])
        if not pending:
            return


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default="http://127.0.0.1:8000/graphql")
    parser.add_argument("--operations", type=int, default=20)
    args = parser.parse_args()
    run = uuid.uuid4().hex[:8]
    claims = [
        {
            "callerDID": CALLER,
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
    async with Client(args.url, token) as client:
        after = await events_head(client)  # before the claims: no event of theirs is missed
        await enqueue(client, claims)
        worker = Worker(
            client,
            handle,
            connector_name="calendar-sdk",
            max_attempts=5,
            retry_base_ms=200,
            handler_timeout_s=30,
        )
        working = asyncio.create_task(worker.run())
        await until_ended(client, {claim["operationID"] for claim in claims}, after)
        worker.stop()
        await working
    print(f"committed: {worker.stats.committed}/{args.operations}")
    print(f"retried: {worker.stats.retried}")
    return 0 if worker.stats.committed == args.operations else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
