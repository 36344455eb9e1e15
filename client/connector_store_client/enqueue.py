"""``enqueue``: claims for a pool of workers, without a lease."""

from collections.abc import Sequence
from typing import Any

from connector_store_client import documents as doc
from connector_store_client.bounds import MAX_BATCH
from connector_store_client.client import Client


async def enqueue(client: Client, claims: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Claim each of ``claims`` (``ClaimOperationInput`` dicts without lease fields, any
    number: sent ``MAX_BATCH`` to a request, in order) without taking a lease: each is due
    at once for any worker's ``leaseOperations``. Safe to repeat: a claim sent twice answers
    ``OperationExists``. Returns each result in order (``__typename`` ``OperationClaimed``,
    ``OperationExists``, ``OperationConflict`` or ``OperationCollected``). A request that
    fails raises its ``ConnectorStoreError``; the requests before it are written (sending
    every claim again is safe)."""
    results: list[dict[str, Any]] = []
    items = list(claims)
    for start in range(0, len(items), MAX_BATCH):
        data = await client.execute(
            doc.CLAIM_OPERATIONS,
            {"input": {"items": items[start : start + MAX_BATCH]}},
            repeatable=True,
        )
        results += data["claimOperations"]["results"]
    return results
