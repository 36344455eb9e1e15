"""Sync state over GraphQL (docs/api.md, 'OAuth state and sync checkpoints'), on both backends: the
documents of graphql/operations/sync.graphql, the CAS's refusals as data, and bad input named."""

from typing import Any

import pytest

from tests.api.conftest import GraphQLClient, error_codes

KEY = {"connectorName": "calendar", "ownerDID": "did:key:owner"}
SYNCED = "2026-11-30T14:00:00.000Z"


async def set_state(gql: GraphQLClient, **overrides: Any) -> dict[str, Any]:
    given = KEY | {"lastSyncedAt": SYNCED, "entityCount": 0, "status": "IDLE"} | overrides
    return (await gql.run("SetSyncState", input=given))["setSyncState"]["syncState"]


async def update(gql: GraphQLClient, **overrides: Any) -> dict[str, Any]:
    given = KEY | {"lastSyncedAt": SYNCED, "entityCount": 1, "checkpoint": {"n": 1}} | overrides
    return (await gql.run("UpdateSyncProgress", input=given))["updateSyncProgress"]


async def test_set_sync_state__creates_then_updates_keeping_version(gql):
    created = await set_state(gql, checkpoint={"cursor": "a"}, recovery={"r": 1}, error="e")
    assert created | {"updatedAt": 0, "incarnation": ""} == KEY | {
        "checkpoint": {"cursor": "a"},
        "lastSyncedAt": SYNCED,
        "entityCount": 0,
        "status": "IDLE",
        "error": "e",
        "recovery": {"r": 1},
        "version": 0,
        "incarnation": "",
        "updatedAt": 0,
    }

    updated = await set_state(gql, status="SYNCING", entityCount=5)

    assert (updated["version"], updated["incarnation"]) == (0, created["incarnation"])
    assert (updated["status"], updated["entityCount"], updated["error"]) == ("SYNCING", 5, None)
    stored = await gql.run("GetSyncState", **KEY)
    assert stored["syncState"] == updated


async def test_sync_state__absent_null(gql):
    assert (await gql.run("GetSyncState", **KEY))["syncState"] is None


async def test_update_sync_progress__create_apply_and_refusals(gql):
    created = await update(gql)
    assert created["applied"] is True
    assert (created["syncState"]["version"], created["syncState"]["status"]) == (0, "IDLE")
    state = created["syncState"]

    again = await update(gql, entityCount=9)
    assert again == {"applied": False, "syncState": state}

    moved = await update(
        gql, version=0, incarnation=state["incarnation"], entityCount=2, checkpoint={"n": 2}
    )
    assert moved["applied"] is True
    assert (moved["syncState"]["version"], moved["syncState"]["entityCount"]) == (1, 2)

    stale_version = await update(gql, version=0, incarnation=state["incarnation"])
    stale_incarnation = await update(gql, version=1, incarnation="another")
    assert stale_version == {"applied": False, "syncState": moved["syncState"]}
    assert stale_incarnation == {"applied": False, "syncState": moved["syncState"]}


async def test_update_sync_progress__absent_row_applied_false_null(gql):
    result = await update(gql, version=0, incarnation="gone")

    assert result == {"applied": False, "syncState": None}


async def test_update_sync_progress__stale_writer_after_recreate_refused(gql):
    old = (await update(gql))["syncState"]
    assert (await gql.run("DeleteSyncState", input=KEY))["deleteSyncState"] == {"deleted": True}
    new = (await update(gql))["syncState"]
    assert new["version"] == old["version"] and new["incarnation"] != old["incarnation"]

    stale = await update(gql, version=old["version"], incarnation=old["incarnation"])

    assert stale == {"applied": False, "syncState": new}


async def test_delete_sync_state__false_when_absent(gql):
    assert (await gql.run("DeleteSyncState", input=KEY))["deleteSyncState"] == {"deleted": False}


async def test_sync_states__pages_by_owner(gql):
    for owner in ["did:key:c", "did:key:a", "did:key:b"]:
        await set_state(gql, ownerDID=owner)
    await set_state(gql, connectorName="crm", ownerDID="did:key:z")

    first = (await gql.run("ListSyncStates", connectorName="calendar", first=2))["syncStates"]
    rest = (
        await gql.run(
            "ListSyncStates",
            connectorName="calendar",
            first=2,
            after=first["pageInfo"]["endCursor"],
        )
    )["syncStates"]

    assert [e["node"]["ownerDID"] for e in first["edges"]] == ["did:key:a", "did:key:b"]
    assert first["pageInfo"]["hasNextPage"] is True
    assert [e["node"]["ownerDID"] for e in rest["edges"]] == ["did:key:c"]
    assert rest["pageInfo"]["hasNextPage"] is False


@pytest.mark.parametrize(
    ("document", "variables", "field"),
    [
        (
            'query($after: String) { syncStates(connectorName: "calendar", after: $after) '
            "{ edges { cursor } } }",
            {"after": "not-a-cursor"},
            "after",
        ),
        (
            'query { syncStates(connectorName: "calendar", first: 0) { edges { cursor } } }',
            None,
            "first",
        ),
        (
            'query { syncState(connectorName: "", ownerDID: "x") { version } }',
            None,
            "connectorName",
        ),
    ],
)
async def test_sync_state_queries__bad_input_named(gql, document, variables, field):
    body = await gql.query(document, variables)

    assert error_codes(body) == ["BAD_USER_INPUT"]
    assert body["errors"][0]["extensions"]["field"] == field


@pytest.mark.parametrize(
    ("mutation", "overrides", "field"),
    [
        ("setSyncState", {"lastSyncedAt": "yesterday"}, "lastSyncedAt"),
        ("setSyncState", {"entityCount": -1}, "entityCount"),
        ("updateSyncProgress", {"version": 0}, "incarnation"),
        ("updateSyncProgress", {"incarnation": "x"}, "version"),
        ("updateSyncProgress", {"ownerDID": ""}, "ownerDID"),
    ],
)
async def test_sync_state_mutations__bad_input_named_nothing_written(
    gql, mutation, overrides, field
):
    input_type = mutation[0].upper() + mutation[1:] + "Input"
    given = KEY | {"lastSyncedAt": SYNCED, "entityCount": 0} | overrides
    if mutation == "setSyncState":
        given["status"] = "IDLE"
    body = await gql.query(
        f"mutation($input: {input_type}!) {{ {mutation}(input: $input) {{ __typename }} }}",
        {"input": given},
    )

    assert error_codes(body) == ["BAD_USER_INPUT"]
    assert body["errors"][0]["extensions"]["field"] == field
    assert (await gql.run("GetSyncState", **KEY))["syncState"] is None


async def test_delete_sync_state__bad_key_named(gql):
    body = await gql.query(
        'mutation { deleteSyncState(input: {connectorName: "", ownerDID: "x"}) { deleted } }'
    )

    assert error_codes(body) == ["BAD_USER_INPUT"]
    assert body["errors"][0]["extensions"]["field"] == "connectorName"
