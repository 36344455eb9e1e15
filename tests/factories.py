"""Test data named for the state it produces: claim → claimed operation → marked → committed;
watch: pending → claimed → verified or repair failed."""

from dataclasses import replace
from typing import Any

import sqlalchemy as sa

from store import ConnectorStore
from store.context import StoreContext, random_id
from store.database import Database
from store.operations import Finalize, OperationClaim, OperationTransition, claim_row
from store.records import (
    OperationRecord,
    PendingAuthRecord,
    SyncStateRecord,
    WatchIdentity,
    WatchRecord,
)
from store.sync_state import SyncProgress
from store.tables import operation, projection_watch
from store.validation import MAX_LEASE_MS, MIN_LEASE_MS
from store.watches import by_identity

LEASE_MS = 30_000


def claim(**overrides: Any) -> OperationClaim:
    """A valid claim, leased to ``lease-A`` for ``LEASE_MS`` from the store's now; any field may
    be overridden (an absolute ``lease_expires_at``, or no ``lease_token``, drops the
    ``lease_ms``)."""
    if overrides.get("lease_expires_at") is not None or overrides.get("lease_token", "") is None:
        overrides.setdefault("lease_ms", None)
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
        lease_ms=LEASE_MS,
        reissue_intent={"fields": ["title"]},
        document_id="doc-1",
    )
    return replace(base, **overrides)


async def claimed_operation(store: ConnectorStore, **overrides: Any) -> OperationRecord:
    """An operation just claimed, leased to ``lease-A`` for 30 s from the store's now where
    the lease guard allows it; else claimed unleased (no token, its lease lapsed)."""
    overrides.setdefault("lease_expires_at", store.clock() + LEASE_MS)
    expires_at = overrides["lease_expires_at"]
    if expires_at is not None and not _in_bounds(store, expires_at):
        # A lease already lapsed (or past the bound): claimed with a lease, then set so.
        overrides["lease_expires_at"] = store.clock() + LEASE_MS
    result = await store.operations.claim_operation(claim(**overrides))
    assert result.status == "claimed" and result.operation is not None
    if result.operation.lease_token is not None and expires_at != overrides["lease_expires_at"]:
        return await _expiring_at(store, result.operation, expires_at)
    return result.operation


def _in_bounds(store: ConnectorStore, expires_at: int) -> bool:
    """``expires_at`` is a deadline a lease call takes now (``validation.lease_end``)."""
    now = store.clock()
    return now + MIN_LEASE_MS <= expires_at <= now + MAX_LEASE_MS


async def _expiring_at(
    store: ConnectorStore, record: OperationRecord, expires_at: int
) -> OperationRecord:
    """``record`` with its lease's expiry written as ``expires_at``, as no call sets it: a
    lease lapsed already, for tests of what follows a lapse."""
    row = await store.db.write_one(
        sa.update(operation)
        .where(
            operation.c.caller_did == record.caller_did,
            operation.c.operation_id == record.operation_id,
        )
        .values(lease_expires_at=expires_at)
        .returning(operation)
    )
    assert row is not None
    return OperationRecord.from_row(row)


async def leased_operation(store: ConnectorStore, **overrides: Any) -> OperationRecord:
    """An operation as a claim that took its lease stores it (leased to ``lease-A`` for 30 s
    from the store's now), written directly whatever the lease guard says: for tests of
    several live operations of one provider entity, which no claim or lease hands out."""
    overrides.setdefault("lease_expires_at", store.clock() + LEASE_MS)
    expires_at = overrides["lease_expires_at"]
    if expires_at is not None:
        overrides["lease_expires_at"] = store.clock() + LEASE_MS
    fresh = claim_row(claim(**overrides), StoreContext(store.db, store.clock, random_id))
    fields = {column.name: getattr(fresh, column.name) for column in operation.columns}
    if expires_at is not None:
        fields["lease_expires_at"] = expires_at
    row = await store.db.write_one(operation.insert().values(fields).returning(operation))
    assert row is not None
    return OperationRecord.from_row(row)


async def marked(
    store: ConnectorStore, record: OperationRecord, marker: str = "run-1"
) -> OperationRecord:
    """``record`` (leased) once its attempt ``marker`` has started sending."""
    done = await store.operations.mark_send_started(
        record.caller_did, record.operation_id, record.lease_token or "", marker
    )
    assert done is not None
    return done


async def marked_operation(
    store: ConnectorStore, marker: str = "run-1", **overrides: Any
) -> OperationRecord:
    """A claimed operation whose attempt ``marker`` has started sending."""
    return await marked(store, await claimed_operation(store, **overrides), marker)


async def committed_operation(store: ConnectorStore, **overrides: Any) -> OperationRecord:
    """An operation finalized (committed) with its watch armed."""
    record = await marked_operation(store, **overrides)
    done = await store.operations.finalize_operation_and_arm_watch(
        Finalize(
            record.caller_did,
            record.operation_id,
            version=record.version,
            lease_token=record.lease_token or "",
            due_at=store.clock() + 60_000,
            result_entity={"id": "remote-1"},
        )
    )
    assert done is not None
    return done.operation


def transition(record: OperationRecord, **overrides: Any) -> OperationTransition:
    """A ``record_operation`` input that applies to ``record`` as it stands (a retry back to
    attempted, counting the attempt); any field may be overridden."""
    base = OperationTransition(
        caller_did=record.caller_did,
        operation_id=record.operation_id,
        from_state=record.state,
        to_state="attempted",
        version=record.version,
        lease_token=record.lease_token or "",
    )
    return replace(base, **overrides)


async def recorded_operation(
    store: ConnectorStore, to_state: str, **overrides: Any
) -> OperationRecord:
    """A claimed operation moved by ``record_operation`` to ``to_state`` (failed, superseded
    or attempted again)."""
    record = await claimed_operation(store, **overrides)
    moved = await store.operations.record_operation(transition(record, to_state=to_state))
    assert moved is not None and moved.state == to_state
    return moved


async def terminal_operation(
    store: ConnectorStore, state: str, **overrides: Any
) -> OperationRecord:
    """An operation in the terminal ``state``: committed, failed or superseded."""
    if state == "committed":
        return await committed_operation(store, **overrides)
    return await recorded_operation(store, state, **overrides)


async def released_operation(store: ConnectorStore, **overrides: Any) -> OperationRecord:
    """A claimed operation whose lease was released: no token, no expiry. Released with
    the claimant's token, which also releases a claim stored unleased (it holds none)."""
    record = await claimed_operation(store, **overrides)
    released = await store.operations.release_lease(
        record.caller_did, record.operation_id, claim(**overrides).lease_token
    )
    assert released is not None and released.lease_token is None
    return released


def identity_of(record: OperationRecord) -> WatchIdentity:
    """The identity of the watch an operation's finalize arms."""
    return record.identity


async def reread(store: ConnectorStore, record: OperationRecord) -> OperationRecord | None:
    """The operation as the store holds it now, to compare with what a write returned."""
    return await store.operations.get_operation(record.caller_did, record.operation_id)


VERIFY_DUE_MS = 60_000


async def pending_watch(
    store: ConnectorStore, winner: str | None = "digest-1", **overrides: Any
) -> WatchRecord:
    """A watch just armed by finalize: generation 1, pending, observing ``winner`` (the
    document's winner recorded before the finalize), due a minute from the store's now."""
    if winner is not None:
        await store.winners.record_winner(overrides.get("document_id", "doc-1"), winner)
    operation = await committed_operation(store, **overrides)
    armed = await store.watches.get_watch(identity_of(operation))
    assert armed is not None and armed.verification_status == "pending_verification"
    return armed


async def claimed_watch(
    store: ConnectorStore, clock: Any, claim_ms: int = LEASE_MS, **overrides: Any
) -> WatchRecord:
    """A pending watch, now due (the clock moved to its due time), claimed for ``claim_ms``
    (past the bound of a claim: claimed for ``LEASE_MS``, then its end written so)."""
    armed = await pending_watch(store, **overrides)
    assert armed.next_attempt_at is not None
    clock.now = armed.next_attempt_at
    until = clock.now + claim_ms
    asked = until if _in_bounds(store, until) else clock.now + LEASE_MS
    claimed = await store.watches.claim_watch_attempt(
        armed.identity, armed.repair_generation, asked, clock.now
    )
    assert claimed is not None
    if asked == until:
        return claimed
    row = await store.db.write_one(
        sa.update(projection_watch)
        .where(by_identity(claimed.identity))
        .values(claimed_until=until)
        .returning(projection_watch)
    )
    assert row is not None
    return WatchRecord.from_row(row)


async def verified_watch(
    store: ConnectorStore, winner: str = "digest-1", **overrides: Any
) -> WatchRecord:
    """A watch whose verification fetched the document's winner ``winner``."""
    armed = await pending_watch(store, winner, **overrides)
    result = await store.watches.record_verification(
        armed.identity,
        generation=armed.repair_generation,
        fetched_digest=winner,
        max_attempts=3,
        due_at=store.clock() + VERIFY_DUE_MS,
    )
    assert result.outcome == "verified" and result.watch is not None
    return result.watch


async def repair_failed_watch(
    store: ConnectorStore, winner: str = "digest-1", **overrides: Any
) -> WatchRecord:
    """A watch whose one allowed verification fetched a digest that is not the winner."""
    armed = await pending_watch(store, winner, **overrides)
    result = await store.watches.record_verification(
        armed.identity,
        generation=armed.repair_generation,
        fetched_digest="digest-wrong",
        max_attempts=1,
        due_at=store.clock() + VERIFY_DUE_MS,
    )
    assert result.outcome == "repair_failed" and result.watch is not None
    return result.watch


async def reread_watch(store: ConnectorStore, record: WatchRecord) -> WatchRecord | None:
    """The watch as the store holds it now."""
    return await store.watches.get_watch(record.identity)


def pending_auth(**overrides: Any) -> PendingAuthRecord:
    """A valid pending authorization, created at START and expiring 10 minutes later; any
    field may be overridden."""
    base = PendingAuthRecord(
        state="state-1",
        code_verifier="verifier-secret-1",
        provider="google",
        owner_did="did:key:owner",
        owner_wrappable_did=None,
        controller_wrappable_did="did:key:controller",
        created_at=1_750_000_000_000,
        redirect_url="https://app.example/callback",
        scopes=["calendar.read", "calendar.write"],
        incremental=True,
        expires_at=1_750_000_600_000,
    )
    return replace(base, **overrides)


async def created_pending_auth(store: ConnectorStore, **overrides: Any) -> PendingAuthRecord:
    """A pending authorization stored by ``create_pending_auth``."""
    return await store.pending_auth.create_pending_auth(pending_auth(**overrides))


def progress(**overrides: Any) -> SyncProgress:
    """Valid sync progress; any field may be overridden."""
    base = SyncProgress(
        checkpoint={"cursor": "c-1", "count": 0},
        last_synced_at="2026-11-30T14:00:00.000Z",
        entity_count=0,
    )
    return replace(base, **overrides)


async def idle_sync_state(
    store: ConnectorStore,
    connector_name: str = "calendar",
    owner_did: str = "did:key:owner",
    **overrides: Any,
) -> SyncStateRecord:
    """A sync state just created by ``set_sync_state`` (status idle, version 0)."""
    return await store.sync_state.set_sync_state(
        connector_name, owner_did, progress(**overrides), "idle"
    )


async def advanced_sync_state(
    store: ConnectorStore,
    times: int,
    connector_name: str = "calendar",
    owner_did: str = "did:key:owner",
) -> SyncStateRecord:
    """A sync state advanced ``times`` times by ``update_sync_progress`` (version ``times``),
    its checkpoint's ``count`` equal to ``times``."""
    record = await idle_sync_state(store, connector_name, owner_did)
    for count in range(1, times + 1):
        moved = await store.sync_state.update_sync_progress(
            connector_name,
            owner_did,
            progress(checkpoint={"cursor": f"c-{count}", "count": count}, entity_count=count),
            version=record.version,
            incarnation=record.incarnation,
        )
        assert moved is not None
        record = moved
    return record


FINISHED_BULK_SQL = """
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {count})
INSERT INTO kubun_connector_operation (
  caller_did, operation_id, node_key, owner_did, connector_name, model, op, account_key,
  target, source_id, deterministic_event_id, payload_hash, reissue_intent, state, attempts,
  version, incarnation, created_at, updated_at)
SELECT 'did:key:{prefix}', '{prefix}-' || i, '{prefix}-node-' || i, 'did:key:owner',
  'calendar', 'Event', 'update', 'acct-1', 'events/' || i, 'evt-' || i, 'det-' || i,
  'sha256:bulk', '{{}}',
  '{state}', 1, 1, 'inc-' || i, {updated_at}, {updated_at}
FROM n
RETURNING 1
"""


async def bulk_finished_operations(
    db: Database, count: int, updated_at: int, state: str = "committed", prefix: str = "bulk"
) -> None:
    """``count`` operations in ``state``, last updated at ``updated_at``, written by one bulk
    ``INSERT … SELECT`` (seeding a backlog through the API would take minutes). Their
    caller is ``did:key:<prefix>``, their ids ``<prefix>-1`` … (``prefix``: letters only)."""
    assert prefix.isalpha() and state.isalpha()
    sql = FINISHED_BULK_SQL.format(
        count=int(count), state=state, updated_at=int(updated_at), prefix=prefix
    )
    async with db.write_transaction():
        await db.fetch_all(sa.text(sql))


EVENT_AGE_MS = 2 * 24 * 3600 * 1000
"""How far ``aged_events`` moves events back: past a retention of a day."""


async def aged_events(db: Database, table: sa.Table, ids: Any, by_ms: int = EVENT_AGE_MS) -> None:
    """Move the ``at`` of the events ``ids`` of the log ``table`` back by ``by_ms``: events
    that old on whichever clock stamped them (PostgreSQL's, or the store's on SQLite)."""
    await db.write_all(
        sa.update(table)
        .where(table.c.id.in_(list(ids)))
        .values(at=table.c.at - by_ms)
        .returning(table.c.id)
    )
