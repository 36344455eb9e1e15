"""A connector worker built on the client SDK, run as its own process by
tests/e2e/test_client_sdk.py: it writes each operation to a provider file (one JSON line per
send, keyed by the operation's deterministicEventID) and commits it.

    python tests/e2e/sdk_worker.py URL PROVIDER_FILE [--hold STARTED_FILE]

With ``--hold`` its handler writes ``STARTED_FILE`` after its first sends and then waits
forever, so the test can kill or stop it mid-batch. The token is CONNECTOR_STORE_TOKEN."""

import argparse
import asyncio
import json
import os
from pathlib import Path

from connector_store_client import Client, Committed, LeasedOperation, Worker


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("provider", type=Path)
    parser.add_argument("--hold", type=Path)
    args = parser.parse_args()

    async def handle(batch: list[LeasedOperation]) -> list[Committed]:
        with args.provider.open("a") as provider:
            for operation in batch:
                provider.write(json.dumps(operation.deterministic_event_id) + "\n")
        if args.hold is not None:
            args.hold.write_text(str(len(batch)))
            await asyncio.Event().wait()
        return [Committed({"id": op.deterministic_event_id}) for op in batch]

    async with Client(args.url, os.environ["CONNECTOR_STORE_TOKEN"]) as client:
        worker = Worker(
            client,
            handle,
            connector_name=None,
            batch_size=20,
            lease_ms=2_000,
            fallback_s=0.5,
            shutdown_grace_s=0.5,
        )
        stats = await worker.run()
    print(json.dumps(vars(stats)))


if __name__ == "__main__":
    asyncio.run(main())
