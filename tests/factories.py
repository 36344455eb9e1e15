"""Test data named for the state it produces: claim → claimed operation → marked → committed."""

from dataclasses import replace
from typing import Any

from store import ConnectorStore
from store.operations import OperationClaim
from store.records import OperationRecord

LEASE_MS = 30_000


def claim(**overrides: Any) -> OperationClaim:
    """A valid claim; any field may be overridden."""
    base = OperationClaim(
        caller_did="did:key:caller",
        operation_id="op-1",
        owner_did="did:key:owner",
        connector_name="calendar",
        model="Event",
        op="update",
        account_key="acct-1",
        target="events/1",
        source_id="evt-1",
        deterministic_event_id="det-1",
        payload_hash="sha256:aaa",
        lease_token="lease-A",
        lease_expires_at=0,
        reissue_intent={"fields": ["title"]},
        document_id="doc-1",
    )
    return replace(base, **overrides)


async def claimed_operation(store: ConnectorStore, **overrides: Any) -> OperationRecord:
    """An operation just claimed, leased to ``lease-A`` for 30 s from the store's now."""
    overrides.setdefault("lease_expires_at", store.clock() + LEASE_MS)
    result = await store.operations.claim_operation(claim(**overrides))
    assert result.status == "claimed" and result.operation is not None
    return result.operation


async def marked_operation(
    store: ConnectorStore, marker: str = "run-1", **overrides: Any
) -> OperationRecord:
    """A claimed operation whose attempt ``marker`` has started sending."""
    record = await claimed_operation(store, **overrides)
    marked = await store.operations.mark_send_started(
        record.caller_did, record.operation_id, record.lease_token or "", marker
    )
    assert marked is not None
    return marked


async def committed_operation(store: ConnectorStore, **overrides: Any) -> OperationRecord:
    """An operation finalized (committed) with its watch armed."""
    record = await marked_operation(store, **overrides)
    done = await store.operations.finalize_operation_and_arm_watch(
        record.caller_did,
        record.operation_id,
        version=record.version,
        lease_token=record.lease_token or "",
        due_at=store.clock() + 60_000,
        result_entity={"id": "remote-1"},
    )
    assert done is not None
    return done.operation
