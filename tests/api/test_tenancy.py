"""Tenancy, generated from the schema: for every root field a token for DID A (every right
but ``service``) cannot read, list, page through or write anything of DID B, and a
``service`` token can. Every root field must have a rule (resolvers/permissions.py) and a
case here, so a new field without either fails ``test_every_root_field_has_a_rule_and_a_case``.
"""

import json
from collections.abc import AsyncGenerator
from typing import Any

import pytest
import strawberry
from strawberry.schema.config import StrawberryConfig

from resolvers.permissions import (
    ALL_SCOPES,
    OBSERVER,
    OPERATOR,
    RULES,
    SERVICE,
    guard_subscriptions,
)
from server.graph import build_schema
from server.live import Hub
from server.strawberry_internals import graphql_schema
from tests.api.conftest import app_client, claim_input
from tests.factories import committed_operation
from tests.tokens import SERVICE_TOKEN, mint

A, B = "did:a", "did:b"
TENANT_SCOPES = " ".join(sorted(ALL_SCOPES - {SERVICE, OPERATOR, OBSERVER}))
TOKEN_A = mint(A, TENANT_SCOPES)
FAR = 4102444800000
IDENT_B = (
    f'{{ownerDID: "{B}", connectorName: "calendar", model: "Event", accountKey: "acct-1", '
    'sourceID: "evt-b"}'
)
OP_B = f'callerDID: "{B}", operationID: "op-b"'
CLAIM_B = (
    "{"
    + ", ".join(
        f"{name}: {json.dumps(value)}"
        for name, value in claim_input(
            callerDID=B,
            operationID="op-b",
            ownerDID=B,
            sourceID="evt-b",
            documentID="doc-b",
            leaseToken="lease-b",
            reissueIntent=None,
        ).items()
        if value is not None
    )
    + "}"
)
PENDING_B = (
    f'{{state: "state-b", codeVerifier: "verifier-b", provider: "p", ownerDID: "{B}", '
    f'createdAt: 1, redirectURL: "https://x", scopes: [], incremental: false, expiresAt: 2}}'
)
SYNC_B = f'connectorName: "calendar", ownerDID: "{B}"'
SYNCED = '"2026-11-30T14:00:00.000Z"'

# What A gets: "null" (the field is null or an empty list/false), "forbidden" or
# "not_found". Every document targets B's rows; {op_id}/{watch_id}/{cursor} are filled in.
QUERIES: dict[str, tuple[str, str]] = {
    "serverTime": ("{ serverTime }", "open"),
    "operationEventsHead": ("{ operationEventsHead }", "open"),
    "watchEventsHead": ("{ watchEventsHead }", "open"),
    "operation": (f"{{ operation({OP_B}) {{ operationID leaseToken }} }}", "null"),
    "operations": (
        f'{{ operations(filter: {{visibleTo: "{B}"}}) {{ edges {{ node {{ operationID }} }} }} '
        "all: operations { edges { node { operationID } } } "
        'paged: operations(after: "{cursor}") { edges { node { operationID } } } }',
        "null",
    ),
    "node": ('{ node(id: "{op_id}") { id } }', "not_found"),
    "hasNewerOperationOnDocument": (f"{{ hasNewerOperationOnDocument({OP_B}) }}", "null"),
    "dueOperations": (f"{{ dueOperations(now: {FAR}) {{ operationID }} }}", "forbidden"),
    "watch": (f"{{ watch(identity: {IDENT_B}) {{ sourceID }} }}", "null"),
    "watchByDocument": ('{ watchByDocument(documentID: "doc-b") { sourceID } }', "null"),
    "watches": (
        f'{{ watches(filter: {{ownerDID: "{B}"}}) {{ edges {{ node {{ sourceID }} }} }} '
        "all: watches { edges { node { sourceID } } } }",
        "null",
    ),
    "dueWatches": (f"{{ dueWatches(now: {FAR}) {{ sourceID }} }}", "forbidden"),
    "pendingAuth": ('{ pendingAuth(state: "state-b") { state } }', "null"),
    "syncState": (f"{{ syncState({SYNC_B}) {{ ownerDID }} }}", "null"),
    "syncStates": (
        '{ syncStates(connectorName: "calendar") { edges { node { ownerDID } } } }',
        "null",
    ),
    "accounts": (
        '{ accounts(connectorName: "calendar") { edges { node { accountKey inFlight } } } }',
        "forbidden",
    ),
    "viewer": ("{ viewer { did scopes mutations } }", "open"),
    "connectors": ("{ connectors { connectorName pausedAt } }", "forbidden"),
    "cancellableCount": (f'{{ cancellableCount(filter: {{ownerDID: "{B}"}}) }}', "forbidden"),
    "reissuableCount": (
        f'{{ reissuableCount(filter: {{ownerDID: "{B}"}}) '
        "{ remaining skipped { cancelled outcomeUnknown blocked } } }",
        "forbidden",
    ),
    "rearmableCount": (f'{{ rearmableCount(filter: {{ownerDID: "{B}"}}) }}', "forbidden"),
    # Counts name no row: A counts only its own (none), a service B's too.
    "operationCounts": ("{ operationCounts { state count } }", "null"),
    "watchCounts": ("{ watchCounts { status count } }", "null"),
    "operationStats": (
        "{ operationStats(since: 0, until: 2880000000000, bucketMs: 2000000000) { claimed } }",
        "null",
    ),
    "failureGroups": ("{ failureGroups { kind message count } }", "null"),
    "_service": ("{ _service { sdl } }", "open"),
    "_entities": (
        f'{{ _entities(representations: [{{__typename: "Operation", {OP_B}}}, '
        f'{{__typename: "Watch", {IDENT_B[1:-1]}}}]) '
        "{ ... on Operation { operationID leaseToken } ... on Watch { sourceID } } }",
        "null",
    ),
}
MUTATIONS: dict[str, tuple[str, str]] = {
    "claimOperation": (
        f"mutation {{ claimOperation(input: {CLAIM_B}) {{ __typename }} }}",
        "forbidden",
    ),
    "acquireLease": (
        f'mutation {{ acquireLease(input: {{{OP_B}, token: "t", leaseMs: 60000}}) {{ applied }} }}',
        "forbidden",
    ),
    "renewLease": (
        f'mutation {{ renewLease(input: {{{OP_B}, token: "lease-b", leaseMs: 60000}}) '
        "{ applied } }",
        "forbidden",
    ),
    "releaseLease": (
        f'mutation {{ releaseLease(input: {{{OP_B}, token: "lease-b"}}) {{ applied }} }}',
        "forbidden",
    ),
    "markSendStarted": (
        f'mutation {{ markSendStarted(input: {{{OP_B}, leaseToken: "lease-b", marker: "m"}}) '
        "{ applied } }",
        "forbidden",
    ),
    "deferOperation": (
        f"mutation {{ deferOperation(input: {{{OP_B}, nextAttemptAt: {FAR}}}) {{ applied }} }}",
        "forbidden",
    ),
    "recordOperation": (
        f"mutation {{ recordOperation(input: {{{OP_B}, fromState: ATTEMPTED, "
        'toState: FAILED, version: {version}, leaseToken: "lease-b"}) { applied } }',
        "forbidden",
    ),
    "finalizeOperation": (
        f"mutation {{ finalizeOperation(input: {{{OP_B}, version: {{version}}, "
        f'leaseToken: "lease-b", dueAt: {FAR}}}) {{ applied }} }}',
        "forbidden",
    ),
    "armWatch": (
        f"mutation {{ armWatch(input: {{identity: {IDENT_B}, reason: MANUAL, dueAt: 1}}) "
        "{ outcome } }",
        "forbidden",
    ),
    "claimWatchAttempt": (
        f"mutation {{ claimWatchAttempt(input: {{identity: {IDENT_B}, generation: 1, "
        f"leaseMs: 60000, now: {FAR}}}) {{ applied }} }}",
        "forbidden",
    ),
    "deferWatch": (
        f"mutation {{ deferWatch(input: {{identity: {IDENT_B}, generation: 1, "
        f"claimedUntil: {FAR}, nextAttemptAt: {FAR}}}) {{ applied }} }}",
        "forbidden",
    ),
    "recordVerification": (
        f"mutation {{ recordVerification(input: {{identity: {IDENT_B}, generation: 1, "
        f'maxAttempts: 3, dueAt: {FAR}, fetchedDigest: "d"}}) {{ outcome }} }}',
        "forbidden",
    ),
    "recordIngress": (
        'mutation { recordIngress(input: {documentID: "doc-b", winnerDigest: "w"}) '
        "{ results { outcome } } }",
        "forbidden",
    ),
    "resumeOfflineDeferred": (
        f"mutation {{ resumeOfflineDeferred(input: {{now: {FAR}}}) {{ resumedOperations }} }}",
        "forbidden",
    ),
    "resumeAuthDeferred": (
        f'mutation {{ resumeAuthDeferred(input: {{ownerDID: "{B}", connectorNames: '
        f'["calendar"], now: {FAR}}}) {{ resumedOperations }} }}',
        "forbidden",
    ),
    "createPendingAuth": (
        "mutation { createPendingAuth(input: "
        + PENDING_B.replace("state-b", "state-b2")
        + ") { pendingAuth { state } } }",
        "forbidden",
    ),
    "consumePendingAuth": (
        'mutation { consumePendingAuth(input: {state: "state-b"}) { codeVerifier } }',
        "null",
    ),
    "deleteExpiredPendingAuth": (
        f"mutation {{ deleteExpiredPendingAuth(input: {{cutoff: {FAR}}}) {{ deleted }} }}",
        "forbidden",
    ),
    "collectFinishedOperations": (
        f"mutation {{ collectFinishedOperations(input: {{olderThan: {FAR}}}) {{ deleted }} }}",
        "forbidden",
    ),
    "setSyncState": (
        f"mutation {{ setSyncState(input: {{{SYNC_B}, lastSyncedAt: {SYNCED}, entityCount: 9, "
        "status: ERROR}) { syncState { version } } }",
        "forbidden",
    ),
    "updateSyncProgress": (
        f"mutation {{ updateSyncProgress(input: {{{SYNC_B}, lastSyncedAt: {SYNCED}, "
        'entityCount: 9, version: 0, incarnation: "{incarnation}"}) { applied } }',
        "forbidden",
    ),
    "deleteSyncState": (
        f"mutation {{ deleteSyncState(input: {{{SYNC_B}}}) {{ deleted }} }}",
        "forbidden",
    ),
    # The batch settles: A's own item first, then B's; the whole request is refused.
    "claimOperations": (
        "mutation { claimOperations(input: {items: ["
        + CLAIM_B.replace(f'"{B}"', f'"{A}"').replace('"op-b"', '"op-a"')
        + f", {CLAIM_B}]}}) {{ results {{ __typename }} }} }}",
        "forbidden",
    ),
    "markSendsStarted": (
        f'mutation {{ markSendsStarted(input: {{items: [{{callerDID: "{A}", operationID: "op-a", '
        f'leaseToken: "l", marker: "m"}}, {{{OP_B}, leaseToken: "lease-b", marker: "m"}}]}}) '
        "{ results { applied } } }",
        "forbidden",
    ),
    "recordOperations": (
        f'mutation {{ recordOperations(input: {{items: [{{callerDID: "{A}", operationID: "op-a", '
        'fromState: ATTEMPTED, toState: FAILED, version: 0, leaseToken: "l"}, '
        f"{{{OP_B}, fromState: ATTEMPTED, "
        'toState: FAILED, version: {version}, leaseToken: "lease-b"}]}) { results { applied } } }',
        "forbidden",
    ),
    "finalizeOperations": (
        f'mutation {{ finalizeOperations(input: {{items: [{{callerDID: "{A}", '
        f'operationID: "op-a", version: 0, leaseToken: "l", dueAt: {FAR}}}, '
        f'{{{OP_B}, version: {{version}}, leaseToken: "lease-b", dueAt: {FAR}}}]}}) '
        "{ results { applied } } }",
        "forbidden",
    ),
    "recordVerifications": (
        "mutation { recordVerifications(input: {items: [{identity: "
        + IDENT_B.replace(f'"{B}"', f'"{A}"')
        + f', generation: 1, maxAttempts: 3, dueAt: {FAR}, fetchedDigest: "d"}}, '
        f"{{identity: {IDENT_B}, generation: 1, "
        f'maxAttempts: 3, dueAt: {FAR}, fetchedDigest: "d"}}]}}) {{ results {{ outcome }} }} }}',
        "forbidden",
    ),
    "leaseOperations": (
        'mutation { leaseOperations(input: {leaseToken: "t", leaseMs: 60000, limit: 50}) '
        "{ operations { operationID } } }",
        "null",
    ),
    "renewLeases": (
        f'mutation {{ renewLeases(input: {{leaseToken: "lease-b", leaseMs: 60000, '
        f"keys: [{{{OP_B}}}]}}) {{ renewed {{ operationID }} }} }}",
        "forbidden",
    ),
    "releaseLeases": (
        f'mutation {{ releaseLeases(input: {{leaseToken: "lease-b", keys: [{{{OP_B}}}]}}) '
        "{ released { operationID } } }",
        "forbidden",
    ),
    "claimWatches": (
        "mutation { claimWatches(input: {claimMs: 60000}) { watches { sourceID } } }",
        "null",
    ),
    "setAccountLimit": (
        'mutation { setAccountLimit(input: {connectorName: "calendar", accountKey: "acct-1", '
        "maxInFlight: 3}) { account { maxInFlight } } }",
        "forbidden",
    ),
    "throttleAccount": (
        'mutation { throttleAccount(input: {connectorName: "calendar", accountKey: "acct-1", '
        "retryAfterMs: 1000}) { account { throttledUntil } } }",
        "forbidden",
    ),
    "liftThrottle": (
        'mutation { liftThrottle(input: {connectorName: "calendar", accountKey: "acct-1"}) '
        "{ account { throttledUntil } } }",
        "forbidden",
    ),
    # The operator controls: refused to a tenant, whatever they name.
    "pauseAccount": (
        'mutation { pauseAccount(input: {connectorName: "calendar", accountKey: "acct-1"}) '
        "{ connectorPaused } }",
        "forbidden",
    ),
    "resumeAccount": (
        'mutation { resumeAccount(input: {connectorName: "calendar", spreadMs: 1000}) { spread } }',
        "forbidden",
    ),
    "cancelOperations": (
        f'mutation {{ cancelOperations(input: {{filter: {{callerDID: "{B}"}}}}) {{ cancelled }} }}',
        "forbidden",
    ),
    "reissueOperations": (
        f'mutation {{ reissueOperations(input: {{filter: {{callerDID: "{B}"}}}}) '
        "{ operations { operationID } } }",
        "forbidden",
    ),
    "rearmWatches": (
        f'mutation {{ rearmWatches(input: {{filter: {{ownerDID: "{B}"}}}}) {{ rearmed }} }}',
        "forbidden",
    ),
    "forceReleaseLeases": (
        f"mutation {{ forceReleaseLeases(input: {{keys: [{{{OP_B}}}]}}) "
        "{ released { operationID } } }",
        "forbidden",
    ),
}
# Subscriptions: what A gets when it subscribes (the first result of the stream).
SUBSCRIPTIONS: dict[str, tuple[str, str]] = {
    "workAvailable": ("subscription { workAvailable { connectorName } }", "forbidden"),
    # Event streams replay from the log's oldest event (``$after``): A's first is its own.
    "operationEvents": (
        "subscription($after: String) { operationEvents(after: $after) "
        "{ action operation { callerDID ownerDID } } }",
        "own",
    ),
    "watchEvents": (
        "subscription($after: String) { watchEvents(after: $after) { action watch { ownerDID } } }",
        "own",
    ),
}
COUNTS = {
    "operationCounts": "count",
    "watchCounts": "count",
    "operationStats": "claimed",
    "failureGroups": "count",
}
"""The fields that count rows, by the field of a row that holds a count."""
B_MARKERS = (B, "op-b", "evt-b", "lease-b", "state-b", "verifier-b")
CASES = (
    [("Query", name) for name in QUERIES]
    + [("Mutation", name) for name in MUTATIONS]
    + [("Subscription", name) for name in SUBSCRIPTIONS]
)
ONE_SHOT_CASES = [(kind, name) for kind, name in CASES if kind != "Subscription"]
SNAPSHOT = (
    "{ operations { edges { cursor node { id callerDID operationID state version attempts "
    "leaseToken leaseExpiresAt sendMarker nextAttemptAt updatedAt } } } "
    "watches { edges { node { id ownerDID repairGeneration verificationStatus version "
    "claimedUntil nextAttemptAt observedWinnerDigest updatedAt } } } "
    'pendingAuth(state: "state-b") { state ownerDID } '
    f"syncState({SYNC_B}) {{ version incarnation entityCount status }} "
    'syncStates(connectorName: "calendar") { edges { cursor } } }'
)


def root_fields(schema: strawberry.Schema) -> set[tuple[str, str]]:
    """Every (root type, field) of a schema, as clients see them."""
    graphql = graphql_schema(schema)
    fields = set()
    for root in (graphql.query_type, graphql.mutation_type, graphql.subscription_type):
        if root is not None:
            fields |= {(root.name, name) for name in root.fields}
    return fields


def missing_rules(schema: strawberry.Schema) -> set[tuple[str, str]]:
    """The root fields of ``schema`` that have no rule."""
    return {(kind, name) for kind, name in root_fields(schema) if name not in RULES[kind]}


def test_every_root_field_has_a_rule_and_a_case():
    schema = build_schema()
    assert missing_rules(schema) == set()
    assert root_fields(schema) == set(CASES)
    assert {(kind, name) for kind, rules in RULES.items() for name in rules} == set(CASES)


async def test_a_new_root_field_without_a_rule_is_refused_and_reported(store):
    @strawberry.type
    class Query:
        @strawberry.field
        def leak(self) -> str:
            return "everything"

    schema = strawberry.Schema(query=Query, extensions=build_schema().extensions)
    assert missing_rules(schema) == {("Query", "leak")}

    from resolvers.context import Context
    from resolvers.loaders import Loaders
    from resolvers.permissions import Viewer

    context = Context(store, Viewer.service(), Loaders(store), "r")
    result = await schema.execute("{ leak }", context_value=context)
    assert result.data is None
    assert [error.extensions["code"] for error in result.errors or []] == ["FORBIDDEN"]


async def test_a_new_subscription_field_without_a_rule_is_refused_before_it_streams(store):
    started: list[bool] = []

    @strawberry.type
    class Subscription:
        @strawberry.subscription
        async def leak(self) -> AsyncGenerator[str, None]:
            started.append(True)
            yield "everything"

    @strawberry.type
    class Query:
        server_time: int = 0

    schema = strawberry.Schema(
        query=Query, subscription=Subscription, extensions=build_schema().extensions
    )
    guard_subscriptions(graphql_schema(schema))
    assert missing_rules(schema) == {("Subscription", "leak")}

    stream = await schema.subscribe("subscription { leak }", context_value=context_of(store))
    results = [result async for result in stream]
    assert [[e.extensions["code"] for e in r.errors or []] for r in results] == [["FORBIDDEN"]]
    assert started == []


async def test_a_root_type_missing_from_the_rules_is_refused(store):
    @strawberry.type
    class Query:
        @strawberry.field
        def leak(self) -> str:
            return "everything"

    schema = strawberry.Schema(
        query=Query,
        extensions=build_schema().extensions,
        config=StrawberryConfig(auto_camel_case=True),
    )
    graphql_schema(schema).query_type.name = "Reads"
    result = await schema.execute("{ leak }", context_value=context_of(store))
    assert [error.extensions["code"] for error in result.errors or []] == ["FORBIDDEN"]


def context_of(store, viewer=None):
    from resolvers.context import Context
    from resolvers.loaders import Loaders
    from resolvers.permissions import Viewer

    return Context(store, viewer or Viewer.service(), Loaders(store), "r")


@pytest.mark.parametrize("name", SUBSCRIPTIONS)
async def test_tenant_a_subscribes_to_nothing_of_b(store, name):
    from resolvers.permissions import Viewer

    document, expected = SUBSCRIPTIONS[name]
    async with app_client(store, token=SERVICE_TOKEN) as service:
        await seed_b(service)
    await committed_operation(store, operation_id="op-a", caller_did=A, owner_did=A)
    schema = build_schema()
    tenant = Viewer.of_token(A, TENANT_SCOPES)
    context = context_of(store, tenant)
    context.hub = Hub(store)
    stream = await schema.subscribe(
        document, context_value=context, variable_values={"after": await oldest_event(store, name)}
    )
    first = await anext(aiter(stream))
    await stream.aclose()
    if expected == "forbidden":
        assert [error.extensions["code"] for error in first.errors or []] == ["FORBIDDEN"]
        assert first.data is None
        return
    assert first.errors is None and first.data is not None
    assert A in json.dumps(first.data)
    assert not any(marker in json.dumps(first.data) for marker in B_MARKERS)


@pytest.mark.parametrize("name", SUBSCRIPTIONS)
async def test_a_service_token_subscribes(store, name):
    document, _ = SUBSCRIPTIONS[name]
    async with app_client(store, token=SERVICE_TOKEN) as service:
        await seed_b(service)
    await committed_operation(store, operation_id="op-a", caller_did=A, owner_did=A)
    schema = build_schema()
    context = context_of(store)
    context.hub = Hub(store)
    stream = await schema.subscribe(
        document, context_value=context, variable_values={"after": await oldest_event(store, name)}
    )
    first = await anext(aiter(stream))
    await stream.aclose()
    assert first.errors is None and first.data is not None


async def oldest_event(store, name: str) -> str | None:
    """The sequence of the oldest event of the log subscription ``name`` streams (None for
    one that streams no log)."""
    read = {
        "operationEvents": store.events.operation_events_after,
        "watchEvents": store.events.watch_events_after,
    }.get(name)
    if read is None:
        return None
    [first] = await read(None, 1)
    return first.sequence


async def seed_b(http) -> dict[str, Any]:
    """B's rows: two operations on one document (the first finalized, so its watch
    exists, then a second claimed), a third cancelled (FAILED), a sync state and a pending
    authorization."""

    async def run(document: str) -> dict[str, Any]:
        response = await http.post("/graphql", json={"query": document})
        body = response.json()
        assert "errors" not in body, body
        return body["data"]

    await run(f"mutation {{ claimOperation(input: {CLAIM_B}) {{ __typename }} }}")
    version = (await run(f"{{ operation({OP_B}) {{ version }} }}"))["operation"]["version"]
    done = await run(
        f"mutation {{ finalizeOperation(input: {{{OP_B}, version: {version}, "
        f'leaseToken: "lease-b", dueAt: 1}}) {{ applied }} }}'
    )
    assert done["finalizeOperation"]["applied"]
    second = CLAIM_B.replace('"op-b"', '"op-b2"').replace('"det-1"', '"det-2"')
    await run(f"mutation {{ claimOperation(input: {second}) {{ __typename }} }}")
    failed = (
        CLAIM_B.replace('"op-b"', '"op-b3"')
        .replace('"det-1"', '"det-3"')
        .replace('"evt-b"', '"evt-b3"')
        .replace('"doc-b"', '"doc-b3"')
    )
    await run(f"mutation {{ claimOperation(input: {failed}) {{ __typename }} }}")
    await run(
        f'mutation {{ cancelOperations(input: {{filter: {{callerDID: "{B}", '
        'operationID: "op-b3"}}) { cancelled } }'
    )
    await run(f"mutation {{ createPendingAuth(input: {PENDING_B}) {{ pendingAuth {{ state }} }} }}")
    synced = await run(
        f"mutation {{ setSyncState(input: {{{SYNC_B}, lastSyncedAt: {SYNCED}, entityCount: 1, "
        "status: IDLE}) { syncState { incarnation } } }"
    )
    snapshot = await run(SNAPSHOT)
    op_b = next(e for e in snapshot["operations"]["edges"] if e["node"]["operationID"] == "op-b2")
    return {
        "op_id": op_b["node"]["id"],
        "cursor": snapshot["operations"]["edges"][0]["cursor"],
        "version": op_b["node"]["version"],
        "incarnation": synced["setSyncState"]["syncState"]["incarnation"],
        "snapshot": snapshot,
    }


def fill(document: str, seeded: dict[str, Any]) -> str:
    for name in ("op_id", "cursor", "version", "incarnation"):
        document = document.replace("{" + name + "}", str(seeded[name]))
    return document


def is_empty(value: Any) -> bool:
    """Null, false, or a page/list/object holding nothing of B's."""
    if value is None or value is False or value == []:
        return True
    if isinstance(value, list):
        return all(is_empty(item) for item in value)
    if isinstance(value, dict):
        return all(is_empty(item) for item in value.values()) or B not in json.dumps(value)
    return False


@pytest.mark.parametrize(("kind", "name"), ONE_SHOT_CASES)
async def test_tenant_a_gets_nothing_of_b_and_writes_nothing(store, kind, name):
    document, expected = (QUERIES if kind == "Query" else MUTATIONS)[name]
    async with app_client(store) as service, app_client(store, token=TOKEN_A) as tenant:
        seeded = await seed_b(service)
        response = await tenant.post("/graphql", json={"query": fill(document, seeded)})
        after = (await service.post("/graphql", json={"query": SNAPSHOT})).json()["data"]

    body = response.json()
    codes = [error["extensions"]["code"] for error in body.get("errors", [])]
    assert response.status_code == 200
    if expected == "forbidden":
        assert codes == ["FORBIDDEN"], body
    elif expected == "not_found":
        assert codes == ["NOT_FOUND"], body
    else:
        assert codes == [], body
    if expected == "null":
        assert all(is_empty(value) for value in body["data"].values()), body
    if name in COUNTS:
        assert sum(row[COUNTS[name]] for row in body["data"][name]) == 0, body
    assert not any(marker in response.text for marker in B_MARKERS), body
    assert after == seeded["snapshot"], f"{name} as A changed B's rows"


@pytest.mark.parametrize(("kind", "name"), ONE_SHOT_CASES)
async def test_a_service_token_reaches_b(store, kind, name):
    document, expected = (QUERIES if kind == "Query" else MUTATIONS)[name]
    async with app_client(store, token=SERVICE_TOKEN) as service:
        seeded = await seed_b(service)
        response = await service.post("/graphql", json={"query": fill(document, seeded)})

    body = response.json()
    assert response.status_code == 200 and "errors" not in body, body
    if kind == "Query" and expected == "null" and name in COUNTS:
        assert sum(row[COUNTS[name]] for row in body["data"][name]) > 0, body
    elif kind == "Query" and expected == "null" and name != "hasNewerOperationOnDocument":
        assert any(marker in response.text for marker in B_MARKERS), body
    if name == "hasNewerOperationOnDocument":
        assert body["data"][name] is True
    if name == "consumePendingAuth":
        assert body["data"][name] == {"codeVerifier": "verifier-b"}


async def test_lease_token_only_to_the_caller_and_nested_fields_filtered(store):
    """Caller A, owner B (claimed by a service for them): both see the operation, only A its
    lease token; the watch A's finalize armed is B's (owner B), so null in A's finalize
    payload and under A's view of the operation; B's watch lists the operation for B."""
    token_b = mint(B, TENANT_SCOPES)
    claim = claim_input(callerDID=A, ownerDID=B, operationID="op-ab", leaseToken="lease-a")
    query = (
        f'{{ operation(callerDID: "{A}", operationID: "op-ab") '
        "{ leaseToken watch { ownerDID } } "
        "operations { edges { node { leaseToken } } } }"
    )
    async with (
        app_client(store, token=TOKEN_A) as as_a,
        app_client(store, token=token_b) as as_b,
        app_client(store) as service,
    ):
        claimed = await service.post(
            "/graphql",
            json={
                "query": "mutation($i: ClaimOperationInput!) { claimOperation(input: $i) "
                "{ __typename } }",
                "variables": {"i": claim},
            },
        )
        assert claimed.json()["data"]["claimOperation"]["__typename"] == "OperationClaimed"
        version = (
            await service.post(
                "/graphql",
                json={
                    "query": f'{{ operation(callerDID: "{A}", operationID: "op-ab") '
                    "{ version } }"
                },
            )
        ).json()["data"]["operation"]["version"]
        finalize = (
            f'mutation {{ finalizeOperation(input: {{callerDID: "{A}", operationID: "op-ab", '
            f'version: {version}, leaseToken: "lease-a", dueAt: 1}}) '
            "{ applied watch { ownerDID } } }"
        )
        finalized = (await as_a.post("/graphql", json={"query": finalize})).json()
        assert finalized == {"data": {"finalizeOperation": {"applied": True, "watch": None}}}
        seen_by = {
            who: (await client.post("/graphql", json={"query": query})).json()
            for who, client in (("a", as_a), ("b", as_b), ("service", service))
        }
        watch_ops = (
            await as_b.post(
                "/graphql",
                json={"query": "{ watches { edges { node { operations { operationID } } } } }"},
            )
        ).json()

    assert seen_by["a"]["data"]["operation"] == {"leaseToken": "lease-a", "watch": None}
    assert seen_by["b"]["data"]["operation"] == {"leaseToken": None, "watch": {"ownerDID": B}}
    assert seen_by["b"]["data"]["operations"]["edges"] == [{"node": {"leaseToken": None}}]
    assert seen_by["service"]["data"]["operation"]["leaseToken"] == "lease-a"
    [edge] = watch_ops["data"]["watches"]["edges"]
    assert edge["node"]["operations"] == [{"operationID": "op-ab"}]


async def test_claim_operation__a_tenant_cannot_claim_for_another_owner(store):
    """The owner's watch is what a finalize arms: a tenant's claim names it as the owner too,
    or it is refused and nothing is written."""
    claim = claim_input(callerDID=A, ownerDID=B, operationID="op-ab")
    async with app_client(store, token=TOKEN_A) as as_a:
        response = await as_a.post(
            "/graphql",
            json={
                "query": "mutation($i: ClaimOperationInput!) { claimOperation(input: $i) "
                "{ __typename } }",
                "variables": {"i": claim},
            },
        )
    body = response.json()
    assert body["data"] is None
    assert [error["extensions"] for error in body["errors"]] == [
        {"code": "FORBIDDEN", "field": "ownerDID"}
    ]
    assert await store.operations.get_operation(A, "op-ab") is None


async def test_a_tenant_writes_its_own_operations(store):
    """The other side of the rules: A claims and leases as caller A."""
    claim = claim_input(callerDID=A, ownerDID=A, operationID="op-a")
    async with app_client(store, token=TOKEN_A) as as_a:
        response = await as_a.post(
            "/graphql",
            json={
                "query": "mutation($i: ClaimOperationInput!) { claimOperation(input: $i) "
                "{ ... on OperationClaimed { operation { callerDID leaseToken } } } }",
                "variables": {"i": claim},
            },
        )
    assert response.json() == {
        "data": {"claimOperation": {"operation": {"callerDID": A, "leaseToken": "lease-A"}}}
    }


async def test_has_newer_operation_on_document__counts_only_the_viewers_operations(store):
    """A learns nothing of B's writes on a document id they share."""
    mine = claim_input(callerDID=A, ownerDID=A, operationID="op-a", documentID="doc-shared")
    theirs = claim_input(callerDID=B, ownerDID=B, operationID="op-b", documentID="doc-shared")
    query = f'{{ hasNewerOperationOnDocument(callerDID: "{A}", operationID: "op-a") }}'
    claim = "mutation($i: ClaimOperationInput!) { claimOperation(input: $i) { __typename } }"
    async with app_client(store, token=TOKEN_A) as as_a, app_client(store) as service:
        for document in (mine, theirs):
            await service.post("/graphql", json={"query": claim, "variables": {"i": document}})
        seen_by_a = (await as_a.post("/graphql", json={"query": query})).json()
        seen_by_service = (await service.post("/graphql", json={"query": query})).json()
    assert seen_by_a == {"data": {"hasNewerOperationOnDocument": False}}
    assert seen_by_service == {"data": {"hasNewerOperationOnDocument": True}}
