"""DataLoaders in GraphQL requests, on both backends: nested fields batch one statement per nesting
level (counted), and every mutation hands the loaders the rows it wrote or clears their entries, so
a later field of the same request reads the fresh row (docs/architecture.md, 'The request path')."""

from typing import Any

import pytest

from tests.api.conftest import GraphQLClient
from tests.factories import (
    LEASE_MS,
    claimed_operation,
    claimed_watch,
    leased_operation,
    marked,
    pending_watch,
    verified_watch,
)

WHO = '{ownerDID: "did:key:owner", connectorName: "calendar", model: "Event", accountKey: "acct-1", sourceID: "evt-1"}'  # noqa: E501
OP2 = '{callerDID: "did:key:caller", operationID: "op-2"'
WATCH_FIELDS = "repairGeneration version verificationStatus claimedUntil nextAttemptAt deferReason"
OPERATION_FIELDS = (
    "operationID state leaseToken leaseExpiresAt sendMarker nextAttemptAt version attempts"
)


async def mutate(gql: GraphQLClient, document: str, **variables: Any) -> dict[str, Any]:
    body = await gql.query(document, variables or None)
    assert "errors" not in body, body
    return body["data"]


async def test_finalize_operation__two_in_one_request_see_the_second_generation(gql, store):
    # Two live leases on one entity, which no claim hands out together.
    first = await marked(store, await leased_operation(store, operation_id="op-1"))
    second = await marked(
        store, await leased_operation(store, operation_id="op-2", lease_token="lease-B")
    )
    shape = "{ watch { repairGeneration } operation { watch { repairGeneration } } }"

    data = await mutate(
        gql,
        "mutation($a: FinalizeOperationInput!, $b: FinalizeOperationInput!) {"
        f" a: finalizeOperation(input: $a) {shape} b: finalizeOperation(input: $b) {shape} }}",
        a={
            "callerDID": first.caller_did,
            "operationID": "op-1",
            "version": first.version,
            "leaseToken": "lease-A",
            "dueAt": 1,
        },
        b={
            "callerDID": second.caller_did,
            "operationID": "op-2",
            "version": second.version,
            "leaseToken": "lease-B",
            "dueAt": 1,
        },
    )

    assert data["a"] == {
        "watch": {"repairGeneration": 1},
        "operation": {"watch": {"repairGeneration": 1}},
    }
    assert data["b"] == {
        "watch": {"repairGeneration": 2},
        "operation": {"watch": {"repairGeneration": 2}},
    }


async def watch_now(gql: GraphQLClient) -> dict[str, Any]:
    data = await mutate(gql, f"{{ watch(identity: {WHO}) {{ {WATCH_FIELDS} }} }}")
    return data["watch"]


async def setup_pending(store, clock):
    await pending_watch(store)
    return {}


async def setup_due(store, clock):
    watch = await pending_watch(store)
    clock.now = watch.next_attempt_at
    return {"now": clock.now}


async def setup_claimed(store, clock):
    watch = await claimed_watch(store, clock)
    return {"claimed": watch.claimed_until}


async def setup_verified(store, clock):
    await verified_watch(store)
    return {}


async def setup_deferred(store, clock):
    watch = await claimed_watch(store, clock)
    deferred = await store.watches.defer_watch(
        watch.identity, 1, watch.claimed_until, clock.now + 10**6, "offline"
    )
    assert deferred is not None
    return {"now": clock.now}


WATCH_WRITES = {
    "armWatch": (
        setup_pending,
        "armWatch(input: {{identity: {who}, reason: MANUAL, dueAt: 1}}) {{ outcome }}",
    ),
    "claimWatchAttempt": (
        setup_due,
        "claimWatchAttempt(input: {{identity: {who}, generation: 1, leaseMs: 60000, now: {now}}})"
        " {{ applied }}",
    ),
    "deferWatch": (
        setup_claimed,
        "deferWatch(input: {{identity: {who}, generation: 1, claimedUntil: {claimed}, "
        "nextAttemptAt: 1, reason: AUTH}}) {{ applied }}",
    ),
    "recordVerification": (
        setup_pending,
        "recordVerification(input: {{identity: {who}, generation: 1, fetchedDigest: "
        '"digest-1", maxAttempts: 3, dueAt: 1}}) {{ outcome }}',
    ),
    "recordIngress": (
        setup_verified,
        'recordIngress(input: {{documentID: "doc-1", winnerDigest: "digest-2"}}) '
        "{{ results {{ outcome }} }}",
    ),
    "resumeOfflineDeferred": (
        setup_deferred,
        "resumeOfflineDeferred(input: {{now: {now}}}) {{ resumedWatches }}",
    ),
}


@pytest.mark.parametrize("name", sorted(WATCH_WRITES))
async def test_watch_loader__fresh_after_each_watch_mutation(gql, store, clock, name):
    setup, write = WATCH_WRITES[name]
    values = await setup(store, clock)
    await claimed_operation(store, operation_id="op-2", lease_expires_at=clock.now + LEASE_MS)
    nested = f"{{ operation {{ watch {{ {WATCH_FIELDS} }} }} }}"

    data = await mutate(
        gql,
        f'mutation {{ before: acquireLease(input: {OP2}, token: "lease-A", expiresAt: '
        f"{clock.now + LEASE_MS}}}) {nested} write: {write.format(who=WHO, **values)} "
        f'after: releaseLease(input: {OP2}, token: "lease-A"}}) {nested} }}',
    )

    before = data["before"]["operation"]["watch"]
    after = data["after"]["operation"]["watch"]
    assert after != before, data
    assert after == await watch_now(gql)


async def test_watch_loader__a_watch_written_then_changed_by_a_resume_is_read_fresh(
    gql, store, clock
):
    """A watch a mutation wrote and a later resume changed (a write that returns no rows,
    ``Loaders.forget_all``) is read as the resume left it, not as the first mutation wrote
    it."""
    values = await setup_claimed(store, clock)
    await claimed_operation(store, operation_id="op-2", lease_expires_at=clock.now + LEASE_MS)
    nested = "{ operation { watch { nextAttemptAt deferReason } } }"

    data = await mutate(
        gql,
        f"mutation {{ before: deferWatch(input: {{identity: {WHO}, generation: 1, "
        f"claimedUntil: {values['claimed']}, nextAttemptAt: {clock.now + 10**6}, "
        f"reason: OFFLINE}}) {{ applied }} "
        f"write: resumeOfflineDeferred(input: {{now: {clock.now}}}) {{ resumedWatches }} "
        f'after: acquireLease(input: {OP2}, token: "lease-A", expiresAt: '
        f"{clock.now + LEASE_MS}}}) {nested} }}",
    )

    assert data["before"] == {"applied": True}
    assert data["write"] == {"resumedWatches": 1}
    assert data["after"]["operation"]["watch"] == {"nextAttemptAt": clock.now, "deferReason": None}


OPERATION_WRITES = {
    "acquireLease": f'acquireLease(input: {OP2}, token: "lease-A", leaseMs: 60000}})',
    "renewLease": f'renewLease(input: {OP2}, token: "lease-A", leaseMs: 60000}})',
    "releaseLease": f'releaseLease(input: {OP2}, token: "lease-A"}})',
    "markSendStarted": f'markSendStarted(input: {OP2}, leaseToken: "lease-A", marker: "m"}})',
    "deferOperation": f'deferOperation(input: {OP2}, nextAttemptAt: 5, leaseToken: "lease-A"}})',
    "recordOperation": f"recordOperation(input: {OP2}, fromState: ATTEMPTED, toState: FAILED, "
    'version: 0, leaseToken: "lease-A"})',
    "finalizeOperation": f'finalizeOperation(input: {OP2}, version: 0, leaseToken: "lease-A", '
    "dueAt: 1})",
    "claimOperation": 'claimOperation(input: {callerDID: "did:key:caller", operationID: "op-3", '
    'ownerDID: "did:key:owner", connectorName: "calendar", model: "Event", op: "update", '
    'accountKey: "acct-1", target: "t", sourceID: "evt-1", deterministicEventID: "d3", '
    'payloadHash: "h", leaseToken: "lease-C", leaseMs: 9000})',
}


@pytest.mark.parametrize("name", sorted(OPERATION_WRITES))
async def test_watch_operations_loader__fresh_after_each_operation_mutation(gql, store, name):
    await pending_watch(store)
    await claimed_operation(store, operation_id="op-2")
    listing = f"{{ watch {{ operations {{ {OPERATION_FIELDS} }} }} }}"
    arm = f"armWatch(input: {{identity: {WHO}, reason: MANUAL, dueAt: 1}}) {listing}"
    write = OPERATION_WRITES[name]
    selection = "{ __typename }" if name == "claimOperation" else "{ applied }"

    data = await mutate(
        gql, f"mutation {{ before: {arm} write: {write} {selection} after: {arm} }}"
    )

    before = data["before"]["watch"]["operations"]
    after = data["after"]["watch"]["operations"]
    assert after != before, data
    fresh = await mutate(
        gql, f"{{ watch(identity: {WHO}) {{ operations {{ {OPERATION_FIELDS} }} }} }}"
    )
    assert after == fresh["watch"]["operations"]


async def test_watch_operations_loader__cleared_by_resume(gql, store, clock):
    await pending_watch(store)
    operation = await claimed_operation(store, operation_id="op-2")
    deferred = await store.operations.defer_operation(
        operation.caller_did, "op-2", clock.now + 10**6, "offline", "lease-A"
    )
    assert deferred is not None
    listing = f"{{ watch {{ operations {{ {OPERATION_FIELDS} }} }} }}"
    arm = f"armWatch(input: {{identity: {WHO}, reason: MANUAL, dueAt: 1}}) {listing}"

    data = await mutate(
        gql,
        f"mutation {{ before: {arm} write: resumeOfflineDeferred(input: {{now: {clock.now}}}) "
        f"{{ resumedOperations }} after: {arm} }}",
    )

    assert data["write"] == {"resumedOperations": 1}
    [_, before] = data["before"]["watch"]["operations"]
    [_, after] = data["after"]["watch"]["operations"]
    assert before["nextAttemptAt"] == clock.now + 10**6
    assert after["nextAttemptAt"] == clock.now


async def test_watch_operations_loader__cleared_by_collect(gql, store, clock):
    await pending_watch(store)
    clock.advance(1_000)
    listing = "{ watch { operations { operationID } } }"
    arm = f"armWatch(input: {{identity: {WHO}, reason: MANUAL, dueAt: 1}}) {listing}"

    data = await mutate(
        gql,
        f"mutation {{ before: {arm} "
        f"write: collectFinishedOperations(input: {{olderThan: {clock.now}}}) {{ deleted }} "
        f"after: {arm} }}",
    )

    assert data["write"] == {"deleted": 1}
    assert data["before"]["watch"]["operations"] == [{"operationID": "op-1"}]
    assert data["after"]["watch"]["operations"] == []


FINALIZE_NESTED = (
    "mutation($input: FinalizeOperationInput!) {{ finalizeOperation(input: $input) "
    "{{ applied {nested} }} }}"
)


async def test_finalize_operation__nested_rows_it_wrote_answered_without_a_read(gql, store):
    """The operation and the watch a finalize wrote answer the fields below it (their own
    and each other's) as written: the request runs no statement more than a finalize
    selecting neither."""
    statements: dict[str, list[str]] = {}
    nested = {
        "bare": "",
        "nested": "operation { version watch { repairGeneration operations { operationID } } } "
        "watch { repairGeneration }",
    }
    for name, selection in nested.items():
        operation = await marked(
            store, await leased_operation(store, operation_id=f"op-{name}", source_id=name)
        )
        seen = statements[name] = []
        store.db.statement_observer = lambda sql, _values, _transaction, seen=seen: seen.append(sql)
        data = await mutate(
            gql,
            FINALIZE_NESTED.format(nested=selection),
            input={
                "callerDID": operation.caller_did,
                "operationID": operation.operation_id,
                "version": operation.version,
                "leaseToken": "lease-A",
                "dueAt": 1,
            },
        )
        store.db.statement_observer = None
        assert data["finalizeOperation"]["applied"] is True

    assert data["finalizeOperation"]["operation"]["watch"]["repairGeneration"] == 1
    # Watch.operations is a list no write hands over: the one read more.
    assert len(statements["nested"]) == len(statements["bare"]) + 1


# --- statements per nesting level ---------------------------------------------------------------


class StatementCounter:
    """Counts the statements the store's database runs (every read and write passes
    ``fetch_one``/``fetch_all``)."""

    def __init__(self, monkeypatch, database) -> None:
        self.count = 0
        for name in ("fetch_one", "fetch_all"):
            original = getattr(database, name)
            monkeypatch.setattr(database, name, self.counting(original))

    def counting(self, original):
        async def counted(query):
            self.count += 1
            return await original(query)

        return counted


NESTED_PAGE = (
    "{ watches(first: 50) { edges { node { sourceID operations { operationID "
    "watch { repairGeneration operations { operationID } } } } } } }"
)


@pytest.mark.parametrize("watches", [5, 50])
async def test_watches_page__nested_operations_bounded_statements(gql, store, monkeypatch, watches):
    for n in range(watches):
        await pending_watch(
            store, None, operation_id=f"op-{n}", source_id=f"evt-{n:02}", document_id=f"doc-{n}"
        )
    counter = StatementCounter(monkeypatch, store.db)

    data = await mutate(gql, NESTED_PAGE)

    edges = data["watches"]["edges"]
    assert len(edges) == watches
    assert all(len(edge["node"]["operations"]) == 1 for edge in edges)
    assert edges[-1]["node"]["operations"][0]["watch"]["operations"] == [
        {"operationID": f"op-{watches - 1}"}
    ]
    assert counter.count == 3


# --- nested lists count against the request's rows ------------------------------------------


async def test_watch_operations__nested_rows_count_against_the_request_budget(gql, store):
    await pending_watch(store, operation_id="op-final")
    for n in range(30):
        await claimed_operation(store, operation_id=f"op-{n:02}")
    nested = (
        "{ operations(first: 50) { edges { node { watch { operations { "
        "watch { operations { operationID } } } } } } } }"
    )

    response = await gql.http.post("/graphql", json={"query": nested})

    body = response.json()
    assert len(response.content) < 1_000_000
    codes = {
        (error["extensions"]["code"], error["extensions"].get("field")) for error in body["errors"]
    }
    assert codes == {("BAD_USER_INPUT", "operations")}
