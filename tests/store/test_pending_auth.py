"""Pending auth (seed pending-auth.js) on both backends: create, get, consume once, and the
strict expiry sweep (a row whose expiresAt is before the cutoff, never at it)."""

from dataclasses import replace

import pytest

from store.errors import InvalidInput
from tests.factories import created_pending_auth, pending_auth


async def test_create_pending_auth__round_trips_every_field(store):
    record = pending_auth(owner_wrappable_did="did:key:wrap", incremental=False, scopes=[])

    created = await store.pending_auth.create_pending_auth(record)

    assert created == record
    assert await store.pending_auth.get_pending_auth("state-1") == record


async def test_create_pending_auth__incremental_and_scopes_kept(store):
    await created_pending_auth(store, state="a", incremental=True, scopes=["x", "y"])
    await created_pending_auth(store, state="b", incremental=False, scopes=["z"])

    a = await store.pending_auth.get_pending_auth("a")
    b = await store.pending_auth.get_pending_auth("b")

    assert (a.incremental, a.scopes) == (True, ["x", "y"])
    assert (b.incremental, b.scopes) == (False, ["z"])


async def test_create_pending_auth__existing_state_refused_stored_untouched(store):
    original = await created_pending_auth(store)

    with pytest.raises(InvalidInput) as raised:
        await store.pending_auth.create_pending_auth(
            pending_auth(code_verifier="attacker", redirect_url="https://evil.example/")
        )

    assert raised.value.field == "state"
    assert await store.pending_auth.get_pending_auth("state-1") == original


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"state": ""}, "state"),
        ({"code_verifier": ""}, "codeVerifier"),
        ({"provider": None}, "provider"),
        ({"owner_did": ""}, "ownerDID"),
        ({"owner_wrappable_did": ""}, "ownerWrappableDID"),
        ({"controller_wrappable_did": 5}, "controllerWrappableDID"),
        ({"created_at": -1}, "createdAt"),
        ({"redirect_url": ""}, "redirectURL"),
        ({"scopes": "calendar"}, "scopes"),
        ({"scopes": ["ok", ""]}, "scopes[1]"),
        ({"incremental": 1}, "incremental"),
        ({"expires_at": 2**53}, "expiresAt"),
    ],
)
async def test_create_pending_auth__invalid_input_refused_nothing_written(store, overrides, field):
    with pytest.raises(InvalidInput) as raised:
        await store.pending_auth.create_pending_auth(pending_auth(**overrides))

    assert raised.value.field == field
    assert await store.pending_auth.get_pending_auth("state-1") is None


async def test_get_pending_auth__absent_none(store):
    assert await store.pending_auth.get_pending_auth("nope") is None


async def test_consume_pending_auth__returns_record_once(store):
    record = await created_pending_auth(store)

    assert await store.pending_auth.consume_pending_auth("state-1") == record
    assert await store.pending_auth.consume_pending_auth("state-1") is None
    assert await store.pending_auth.get_pending_auth("state-1") is None


async def test_consume_pending_auth__other_owner_none_and_record_kept(store):
    stored = await created_pending_auth(store)

    assert await store.pending_auth.consume_pending_auth(stored.state, "did:key:other") is None
    assert await store.pending_auth.get_pending_auth(stored.state) == stored
    consumed = await store.pending_auth.consume_pending_auth(stored.state, stored.owner_did)
    assert consumed == stored


async def test_consume_pending_auth__absent_none(store):
    assert await store.pending_auth.consume_pending_auth("nope") is None


async def test_consume_pending_auth__state_recreated_after_consume(store):
    await created_pending_auth(store)
    await store.pending_auth.consume_pending_auth("state-1")

    again = await created_pending_auth(store, code_verifier="verifier-2")

    assert again.code_verifier == "verifier-2"


async def test_delete_expired_pending_auth__strict_cutoff(store):
    cutoff = 1_750_000_600_000
    await created_pending_auth(store, state="at-cutoff", expires_at=cutoff)
    await created_pending_auth(store, state="one-ms-older", expires_at=cutoff - 1)
    await created_pending_auth(store, state="later", expires_at=cutoff + 1)

    deleted = await store.pending_auth.delete_expired_pending_auth(cutoff)

    assert deleted == 1
    assert await store.pending_auth.get_pending_auth("one-ms-older") is None
    assert await store.pending_auth.get_pending_auth("at-cutoff") is not None
    assert await store.pending_auth.get_pending_auth("later") is not None


async def test_delete_expired_pending_auth__counts_every_deleted_row(store):
    for number in range(7):
        await created_pending_auth(store, state=f"s-{number}", expires_at=1_000 + number)

    assert await store.pending_auth.delete_expired_pending_auth(1_005) == 5
    assert await store.pending_auth.delete_expired_pending_auth(1_005) == 0
    assert await store.pending_auth.delete_expired_pending_auth(10**12) == 2


@pytest.mark.parametrize("cutoff", [-1, 1.5, "1", True, 2**53])
async def test_delete_expired_pending_auth__invalid_cutoff_refused(store, cutoff):
    await created_pending_auth(store, expires_at=0)

    with pytest.raises(InvalidInput) as raised:
        await store.pending_auth.delete_expired_pending_auth(cutoff)

    assert raised.value.field == "cutoff"
    assert await store.pending_auth.get_pending_auth("state-1") is not None


async def test_pending_auth__record_is_frozen(store):
    record = await created_pending_auth(store)

    with pytest.raises(AttributeError):
        record.state = "other"  # type: ignore[misc]
    assert replace(record, state="x").state == "x"
