"""Rights of the pending-auth, retention and sync-state fields (docs/rights.md, 'Who may do
what'): each needs its scope, checked before the store is touched. These run the schema with a
viewer of chosen scopes (the tenant rules are in test_tenancy.py)."""

import dataclasses

import pytest

from resolvers.context import Context
from resolvers.loaders import Loaders
from resolvers.permissions import ALL_SCOPES, Viewer
from schema.inputs import CreatePendingAuthInput, SetSyncStateInput, UpdateSyncProgressInput
from schema.pending_auth import ConsumedPendingAuth, PendingAuth
from schema.sync_state import SyncState
from server.graph import build_schema
from store.records import PendingAuthRecord, SyncStateRecord
from store.sync_state import SyncProgress

SYNCED = '"2026-11-30T14:00:00.000Z"'
FIELDS = {
    "auth:write": [
        '{ pendingAuth(state: "s") { state } }',
        'mutation { consumePendingAuth(input: {state: "s"}) { state } }',
        'mutation { createPendingAuth(input: {state: "s", codeVerifier: "v", provider: "p",'
        ' ownerDID: "did:v", createdAt: 1, redirectURL: "u", scopes: [], incremental: false,'
        " expiresAt: 2}) { pendingAuth { state } } }",
    ],
    "service": ["mutation { collectFinishedOperations(input: {olderThan: 1}) { deleted } }"],
    "sync:read": [
        '{ syncState(connectorName: "c", ownerDID: "did:v") { version } }',
        '{ syncStates(connectorName: "c") { edges { cursor } } }',
    ],
    "sync:write": [
        'mutation { setSyncState(input: {connectorName: "c", ownerDID: "did:v", lastSyncedAt: '
        + SYNCED
        + ", entityCount: 0, status: IDLE}) { syncState { version } } }",
        'mutation { updateSyncProgress(input: {connectorName: "c", ownerDID: "did:v", '
        "lastSyncedAt: " + SYNCED + ", entityCount: 0}) { applied } }",
        'mutation { deleteSyncState(input: {connectorName: "c", ownerDID: "did:v"}) { deleted } }',
    ],
}
CASES = [(scope, document) for scope, documents in FIELDS.items() for document in documents]


async def execute(store, document, scopes):
    viewer = Viewer(did="did:v", scopes=frozenset(scopes))
    context = Context(store=store, viewer=viewer, loaders=Loaders(store), request_id="test")
    return await build_schema().execute(document, context_value=context)


@pytest.mark.parametrize(("scope", "document"), CASES)
async def test_new_fields__forbidden_without_their_right(store, scope, document):
    result = await execute(store, document, ALL_SCOPES - {scope})

    assert [error.extensions["code"] for error in result.errors or []] == ["FORBIDDEN"]


@pytest.mark.parametrize(("scope", "document"), CASES)
async def test_new_fields__allowed_with_their_right_alone(store, scope, document):
    result = await execute(store, document, {scope})

    assert result.errors is None, result.errors


def names(cls):
    return {field.name for field in dataclasses.fields(cls)}


def test_field_sets__records_types_and_inputs_agree():
    record = set(PendingAuthRecord.__slots__)
    assert names(PendingAuth) == record - {"code_verifier"}
    assert names(ConsumedPendingAuth) == record
    assert names(CreatePendingAuthInput) == record

    sync = set(SyncStateRecord.__slots__)
    assert names(SyncState) == sync
    progress = names(SyncProgress)
    assert names(SetSyncStateInput) == progress | {"connector_name", "owner_did", "status"}
    assert names(UpdateSyncProgressInput) == progress | {
        "connector_name",
        "owner_did",
        "version",
        "incarnation",
    }
