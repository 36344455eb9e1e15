"""finalize_operation_and_arm_watch: commit the operation and create or re-open its watch in
one transaction (docs/worker-protocol.md, 'An operation's life'), on both backends."""

import pytest
import sqlalchemy as sa

from store.errors import InvalidInput
from store.operations import Finalize
from store.records import WatchIdentity
from store.tables import projection_watch as watch_table
from tests.factories import (
    claimed_operation,
    committed_operation,
    identity_of,
    marked_operation,
    recorded_operation,
    reread,
)

CALLER = "did:key:caller"
DUE_MS = 60_000


async def finalize(store, record, **overrides):
    """Finalize ``record`` as it stands (its version and token), due a minute from now."""
    arguments = {
        "version": record.version,
        "lease_token": record.lease_token,
        "due_at": store.clock() + DUE_MS,
        "result_entity": {"id": "remote-1", "etag": "e1"},
    } | overrides
    return await store.operations.finalize_operation_and_arm_watch(
        Finalize(record.caller_did, record.operation_id, **arguments)
    )


async def set_watch(store, identity, **values):
    """Write watch columns directly, as a verifier would have; returns the updated rows."""
    rows = await store.db.fetch_all(
        sa.update(watch_table)
        .where(
            watch_table.c.owner_did == identity.owner_did,
            watch_table.c.connector_name == identity.connector_name,
            watch_table.c.model == identity.model,
            watch_table.c.account_key == identity.account_key,
            watch_table.c.source_id == identity.source_id,
        )
        .values(values)
        .returning(watch_table.c.source_id)
    )
    assert len(rows) == 1


async def watch_rows(store):
    return [dict(row) for row in await store.db.fetch_all(sa.select(watch_table))]


async def test_finalize__applied_commits_operation(store, clock):
    record = await marked_operation(store, "run-1", provider_etag="etag-claim")
    deferred = await store.operations.defer_operation(
        CALLER, "op-1", clock.now + 5_000, reason="offline", lease_token="lease-A"
    )
    assert deferred is not None and deferred.defer_reason == "offline"
    clock.advance(1_000)

    done = await finalize(store, deferred)

    assert done is not None
    committed = done.operation
    assert committed.state == "committed"
    assert committed.attempts == record.attempts + 1
    assert committed.version == record.version + 1
    assert committed.lease_token == record.lease_token
    assert committed.lease_expires_at == record.lease_expires_at
    assert committed.send_marker is None
    assert committed.next_attempt_at is None
    assert committed.defer_reason is None
    assert committed.result_entity == {"id": "remote-1", "etag": "e1"}
    assert committed.provider_etag == "etag-claim"
    assert committed.document_id == "doc-1"
    assert committed.updated_at == clock.now
    assert committed.created_at == record.created_at
    assert await reread(store, record) == committed


async def test_finalize__given_etag_and_document_replace_stored(store):
    record = await claimed_operation(store, provider_etag="etag-claim", document_id="doc-1")

    done = await finalize(store, record, provider_etag="etag-final", document_id="doc-2")

    assert done is not None
    assert done.operation.provider_etag == "etag-final"
    assert done.operation.document_id == "doc-2"
    assert done.watch.document_id == "doc-2"
    assert await reread(store, record) == done.operation


async def test_finalize__result_entity_omitted_stored_as_null(store):
    record = await claimed_operation(store)

    done = await finalize(store, record, result_entity=None)

    assert done is not None and done.operation.result_entity is None
    assert (await reread(store, record)).result_entity is None


async def test_finalize__lapsed_lease_same_token_applies(store, clock):
    # The CAS compares version and token; the lease's expiry is not part of it.
    record = await claimed_operation(store)
    clock.now = record.lease_expires_at + 1

    done = await finalize(store, record)

    assert done is not None and done.operation.state == "committed"


async def test_finalize__creates_watch_at_generation_one(store, clock):
    record = await claimed_operation(store)
    await store.winners.record_winner("doc-1", "winner-1")
    clock.advance(500)

    done = await finalize(store, record)

    assert done is not None
    armed = done.watch
    assert armed.identity == identity_of(record)
    assert armed.document_id == "doc-1"
    assert armed.repair_generation == 1
    assert armed.verification_status == "pending_verification"
    assert armed.verification_attempts == 0
    assert armed.observed_winner_digest == "winner-1"
    assert armed.verified_state_digest is None
    assert armed.next_attempt_at == clock.now + DUE_MS
    assert armed.claimed_until is None
    assert armed.defer_reason is None
    assert armed.created_at == armed.updated_at == clock.now
    assert await store.watches.get_watch(identity_of(record)) == armed


async def test_finalize__no_recorded_winner_observes_none(store):
    record = await claimed_operation(store)

    done = await finalize(store, record)

    assert done is not None and done.watch.observed_winner_digest is None


async def test_finalize__operation_without_document_arms_watch_without_document(store):
    record = await claimed_operation(store, document_id=None)

    done = await finalize(store, record)

    assert done is not None
    assert done.watch.document_id is None
    assert done.watch.observed_winner_digest is None


async def test_finalize__same_identity_opens_next_generation(store, clock):
    first = await committed_operation(store, operation_id="op-1", document_id="doc-1")
    identity = identity_of(first)
    created = await store.watches.get_watch(identity)
    assert created is not None and created.repair_generation == 1
    await set_watch(
        store,
        identity,
        verification_status="verified",
        verification_attempts=3,
        verified_state_digest="verified-digest",
        claimed_until=clock.now + 10_000,
        defer_reason="auth",
    )
    await store.winners.record_winner("doc-2", "winner-2")
    clock.advance(2_000)
    second = await claimed_operation(store, operation_id="op-2", document_id="doc-2")

    done = await finalize(store, second)

    assert done is not None
    reopened = done.watch
    assert reopened.identity == identity
    assert reopened.repair_generation == 2
    assert reopened.verification_status == "pending_verification"
    assert reopened.verification_attempts == 0
    assert reopened.claimed_until is None
    assert reopened.defer_reason is None
    assert reopened.verified_state_digest == "verified-digest"
    assert reopened.observed_winner_digest == "winner-2"
    assert reopened.document_id == "doc-2"
    assert reopened.next_attempt_at == clock.now + DUE_MS
    assert reopened.version == created.version + 1
    assert reopened.created_at == created.created_at
    assert reopened.updated_at == clock.now
    assert await store.watches.get_watch(identity) == reopened
    assert len(await watch_rows(store)) == 1


async def test_finalize__each_opening_adds_one_generation(store):
    generations = []
    for number in range(1, 5):
        record = await claimed_operation(store, operation_id=f"op-{number}")
        done = await finalize(store, record)
        assert done is not None
        generations.append(done.watch.repair_generation)

    assert generations == [1, 2, 3, 4]


async def test_finalize__other_identity_gets_its_own_watch(store):
    await committed_operation(store, operation_id="op-1", source_id="evt-1")
    other = await claimed_operation(store, operation_id="op-2", source_id="evt-2")

    done = await finalize(store, other)

    assert done is not None
    assert done.watch.repair_generation == 1
    assert done.watch.source_id == "evt-2"
    first_watch = await store.watches.get_watch(
        WatchIdentity("did:key:owner", "calendar", "Event", "acct-1", "evt-1")
    )
    assert first_watch is not None and first_watch.repair_generation == 1
    assert len(await watch_rows(store)) == 2


@pytest.mark.parametrize("version_delta", [-1, 1])
async def test_finalize__stale_version_refused_nothing_written(store, clock, version_delta):
    record = await recorded_operation(store, "attempted")
    clock.advance(1)

    assert await finalize(store, record, version=record.version + version_delta) is None
    assert await reread(store, record) == record
    assert await watch_rows(store) == []


async def test_finalize__foreign_lease_token_refused_nothing_written(store, clock):
    record = await marked_operation(store)
    clock.advance(1)

    assert await finalize(store, record, lease_token="lease-B") is None
    assert await reread(store, record) == record
    assert await watch_rows(store) == []


async def test_finalize__released_lease_refused_nothing_written(store, clock):
    record = await claimed_operation(store)
    released = await store.operations.release_lease(CALLER, "op-1", "lease-A")
    assert released is not None
    clock.advance(1)

    assert await finalize(store, released, lease_token="lease-A") is None
    assert await reread(store, record) == released
    assert await watch_rows(store) == []


@pytest.mark.parametrize("state", ["failed", "superseded"])
async def test_finalize__not_attempted_refused_nothing_written(store, clock, state):
    record = await recorded_operation(store, state)
    clock.advance(1)

    assert await finalize(store, record) is None
    assert await reread(store, record) == record
    assert await watch_rows(store) == []


async def test_finalize__already_committed_refused_watch_untouched(store, clock):
    committed = await committed_operation(store)
    before = await watch_rows(store)
    clock.advance(1)

    assert await finalize(store, committed) is None
    assert await reread(store, committed) == committed
    assert await watch_rows(store) == before


async def test_finalize__refused_leaves_existing_watch_untouched(store, clock):
    await committed_operation(store, operation_id="op-1")
    before = await watch_rows(store)
    second = await claimed_operation(store, operation_id="op-2")
    clock.advance(1)

    assert await finalize(store, second, version=second.version + 1) is None
    assert await reread(store, second) == second
    assert await watch_rows(store) == before


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"due_at": -1}, "dueAt"),
        ({"due_at": None}, "dueAt"),
        ({"version": -1}, "version"),
        ({"lease_token": ""}, "leaseToken"),
        ({"provider_etag": ""}, "providerEtag"),
        ({"document_id": ""}, "documentID"),
        ({"result_entity": {"not": float("nan")}}, "resultEntity"),
    ],
)
async def test_finalize__invalid_input_refused_nothing_written(store, clock, overrides, field):
    record = await marked_operation(store)
    clock.advance(1)

    with pytest.raises(InvalidInput) as raised:
        await finalize(store, record, **overrides)

    assert raised.value.field == field
    assert await reread(store, record) == record
    assert await watch_rows(store) == []
