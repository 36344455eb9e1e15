"""Sync state on both backends: get, set (upsert), delete, list per connector, and the
progress CAS on version and incarnation (docs/api.md, 'OAuth state and sync checkpoints')."""

import pytest

from store.errors import InvalidInput
from tests.factories import advanced_sync_state, idle_sync_state, progress

CONNECTOR = "calendar"
OWNER = "did:key:owner"


async def cas(store, record, **overrides):
    """``update_sync_progress`` at ``record``'s version and incarnation."""
    arguments = {"version": record.version, "incarnation": record.incarnation} | overrides
    return await store.sync_state.update_sync_progress(
        CONNECTOR, OWNER, progress(checkpoint={"count": 99}, entity_count=99), **arguments
    )


async def test_get_sync_state__absent_none(store):
    assert await store.sync_state.get_sync_state(CONNECTOR, OWNER) is None


async def test_set_sync_state__new_row_version_0_fresh_incarnation(store, clock):
    created = await store.sync_state.set_sync_state(
        CONNECTOR,
        OWNER,
        progress(error="boom", recovery={"from": "c-0"}, entity_count=3),
        "error",
    )

    assert created.version == 0
    assert created.incarnation
    assert (created.status, created.error, created.recovery) == ("error", "boom", {"from": "c-0"})
    assert created.checkpoint == {"cursor": "c-1", "count": 0}
    assert created.last_synced_at == "2026-11-30T14:00:00.000Z"
    assert created.entity_count == 3
    assert created.updated_at == clock.now
    assert await store.sync_state.get_sync_state(CONNECTOR, OWNER) == created


async def test_set_sync_state__update_keeps_version_and_incarnation(store, clock):
    advanced = await advanced_sync_state(store, 2)
    clock.advance(5)

    updated = await store.sync_state.set_sync_state(
        CONNECTOR, OWNER, progress(checkpoint=None, entity_count=7), "syncing"
    )

    assert (updated.version, updated.incarnation) == (2, advanced.incarnation)
    assert (updated.status, updated.checkpoint, updated.entity_count) == ("syncing", None, 7)
    assert updated.updated_at == clock.now


async def test_set_sync_state__incarnations_differ_per_row(store):
    a = await idle_sync_state(store, owner_did="did:key:a")
    b = await idle_sync_state(store, owner_did="did:key:b")

    assert a.incarnation != b.incarnation


async def test_delete_sync_state__returns_whether_deleted(store):
    await idle_sync_state(store)

    assert await store.sync_state.delete_sync_state(CONNECTOR, OWNER) is True
    assert await store.sync_state.delete_sync_state(CONNECTOR, OWNER) is False
    assert await store.sync_state.get_sync_state(CONNECTOR, OWNER) is None


async def test_list_sync_states_for_connector__ordered_by_owner_paged(store):
    for owner in ["did:key:c", "did:key:a", "did:key:b", "did:key:d"]:
        await idle_sync_state(store, owner_did=owner)
    await idle_sync_state(store, connector_name="crm", owner_did="did:key:a")

    first = await store.sync_state.list_sync_states_for_connector(CONNECTOR, limit=3)
    rest = await store.sync_state.list_sync_states_for_connector(
        CONNECTOR, after=first[-1].owner_did, limit=3
    )

    assert [r.owner_did for r in first] == ["did:key:a", "did:key:b", "did:key:c"]
    assert [r.owner_did for r in rest] == ["did:key:d"]
    assert {r.connector_name for r in first + rest} == {CONNECTOR}
    assert await store.sync_state.list_sync_states_for_connector("drive") == []


async def test_update_sync_progress__applies_at_exact_row(store, clock):
    record = await idle_sync_state(store, error="old")
    await store.sync_state.set_sync_state(CONNECTOR, OWNER, progress(), "syncing")
    clock.advance(10)

    moved = await cas(store, record)

    assert moved is not None
    assert (moved.version, moved.incarnation) == (1, record.incarnation)
    assert moved.status == "syncing"
    assert (moved.checkpoint, moved.entity_count, moved.error) == ({"count": 99}, 99, None)
    assert moved.updated_at == clock.now


async def test_update_sync_progress__stale_version_refused(store, clock):
    record = await advanced_sync_state(store, 1)
    before = await store.sync_state.get_sync_state(CONNECTOR, OWNER)
    clock.advance(10)

    assert await cas(store, record, version=0) is None
    assert await cas(store, record, version=2) is None
    assert await store.sync_state.get_sync_state(CONNECTOR, OWNER) == before


async def test_update_sync_progress__stale_incarnation_refused(store, clock):
    record = await idle_sync_state(store)
    clock.advance(10)

    assert await cas(store, record, incarnation="another") is None
    assert await store.sync_state.get_sync_state(CONNECTOR, OWNER) == record


async def test_update_sync_progress__absent_row_refused(store):
    assert await cas(store, await idle_sync_state(store, owner_did="did:key:x")) is None
    assert await store.sync_state.get_sync_state(CONNECTOR, OWNER) is None


async def test_update_sync_progress__create_when_absent(store, clock):
    created = await store.sync_state.update_sync_progress(
        CONNECTOR, OWNER, progress(entity_count=4), version=None, incarnation=None
    )

    assert created is not None
    assert (created.version, created.status, created.entity_count) == (0, "idle", 4)
    assert created.incarnation
    assert await store.sync_state.get_sync_state(CONNECTOR, OWNER) == created


async def test_update_sync_progress__create_when_exists_refused(store, clock):
    record = await idle_sync_state(store)
    clock.advance(10)

    refused = await store.sync_state.update_sync_progress(
        CONNECTOR, OWNER, progress(entity_count=4), version=None, incarnation=None
    )

    assert refused is None
    assert await store.sync_state.get_sync_state(CONNECTOR, OWNER) == record


async def test_update_sync_progress__writer_before_delete_and_recreate_never_applies(store, clock):
    stale = await advanced_sync_state(store, 3)
    assert await store.sync_state.delete_sync_state(CONNECTOR, OWNER)
    recreated = await advanced_sync_state(store, 3)
    assert recreated.version == stale.version
    clock.advance(10)

    assert await cas(store, stale) is None
    assert await store.sync_state.get_sync_state(CONNECTOR, OWNER) == recreated
    assert await cas(store, recreated) is not None


@pytest.mark.parametrize(
    ("version", "incarnation", "field"),
    [
        (0, None, "incarnation"),
        (None, "inc", "version"),
        (-1, "inc", "version"),
        (True, "inc", "version"),
        (0, "", "incarnation"),
    ],
)
async def test_update_sync_progress__half_or_bad_guard_refused(store, version, incarnation, field):
    with pytest.raises(InvalidInput) as raised:
        await store.sync_state.update_sync_progress(
            CONNECTOR, OWNER, progress(), version=version, incarnation=incarnation
        )

    assert raised.value.field == field
    assert await store.sync_state.get_sync_state(CONNECTOR, OWNER) is None


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"last_synced_at": "yesterday"}, "lastSyncedAt"),
        ({"last_synced_at": "2025-01-01"}, "lastSyncedAt"),
        ({"last_synced_at": "2025-W01-1T00:00:00Z"}, "lastSyncedAt"),
        ({"last_synced_at": "2025-01-01t00:00:00Z"}, "lastSyncedAt"),
        ({"last_synced_at": "2025-01-01T00:00:00"}, "lastSyncedAt"),
        ({"last_synced_at": "2025-02-30T00:00:00Z"}, "lastSyncedAt"),
        ({"last_synced_at": ""}, "lastSyncedAt"),
        ({"last_synced_at": 1_750_000_000_000}, "lastSyncedAt"),
        ({"entity_count": -1}, "entityCount"),
        ({"entity_count": 2**31}, "entityCount"),
        ({"checkpoint": {"x": float("nan")}}, "checkpoint"),
        ({"recovery": object()}, "recovery"),
        ({"error": ""}, "error"),
    ],
)
async def test_set_sync_state__invalid_input_refused_nothing_written(store, overrides, field):
    with pytest.raises(InvalidInput) as raised:
        await store.sync_state.set_sync_state(CONNECTOR, OWNER, progress(**overrides), "idle")

    assert raised.value.field == field
    assert await store.sync_state.get_sync_state(CONNECTOR, OWNER) is None


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda s: s.set_sync_state("", OWNER, progress(), "idle"), "connectorName"),
        (lambda s: s.set_sync_state(CONNECTOR, "", progress(), "idle"), "ownerDID"),
        (lambda s: s.set_sync_state(CONNECTOR, OWNER, progress(), "IDLE"), "status"),
        (lambda s: s.get_sync_state(CONNECTOR, ""), "ownerDID"),
        (lambda s: s.delete_sync_state("", OWNER), "connectorName"),
        (lambda s: s.list_sync_states_for_connector(CONNECTOR, limit=0), "limit"),
        (lambda s: s.list_sync_states_for_connector(CONNECTOR, after=""), "after"),
    ],
)
async def test_sync_state__invalid_keys_refused(store, call, field):
    with pytest.raises(InvalidInput) as raised:
        await call(store.sync_state)

    assert raised.value.field == field
