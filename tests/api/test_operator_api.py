"""Operator controls and the operator and observer scopes over GraphQL (the documents of
graphql/operations/operator.graphql), on both backends: what each control did, who may use
it, what each scope reads, and bad input named."""

import pytest

from resolvers.permissions import OBSERVER, OPERATOR, RULES
from store.operations import OperationFilter
from store.operator import reissue_key
from tests.api.conftest import GraphQLClient, app_client, claim_input, error_codes
from tests.factories import claimed_operation, marked_operation, repair_failed_watch
from tests.leasing_factories import due_record, insert_operations
from tests.tokens import mint

OPERATOR_TOKEN = mint("did:key:ops", OPERATOR)
OBSERVER_TOKEN = mint("did:key:eyes", OBSERVER)
TENANT_TOKEN = mint("did:key:caller", "operations:read operations:write watches:read")
OPERATOR_MUTATIONS = {
    "pauseAccount",
    "resumeAccount",
    "cancelOperations",
    "reissueOperations",
    "rearmWatches",
    "forceReleaseLeases",
    "setAccountLimit",
    "throttleAccount",
    "liftThrottle",
}
LEASE = {"leaseToken": "worker-1", "leaseMs": 60_000, "limit": 50}


async def run(store, token, name, **variables):
    async with app_client(store, token=token) as http:
        return await GraphQLClient(http).run(name, **variables)


async def post(store, token, query, variables=None):
    async with app_client(store, token=token) as http:
        return await GraphQLClient(http).query(query, variables)


def ids(operations):
    return [operation["operationID"] for operation in operations]


# The scopes


@pytest.mark.parametrize(
    ("scope", "expected"),
    [
        (OPERATOR, OPERATOR_MUTATIONS),
        (OBSERVER, set()),
        ("operations:read", set()),
        ("service", set(RULES["Mutation"])),
    ],
)
async def test_viewer__mutations_the_scopes_permit(store, scope, expected):
    data = await run(store, mint("did:key:v", scope), "Viewer")

    viewer = data["viewer"]
    assert viewer["did"] == "did:key:v"
    assert set(viewer["mutations"]) == expected
    assert viewer["mutations"] == sorted(viewer["mutations"])


async def test_viewer__scopes_with_what_they_imply(store):
    operator = (await run(store, OPERATOR_TOKEN, "Viewer"))["viewer"]["scopes"]
    observer = (await run(store, OBSERVER_TOKEN, "Viewer"))["viewer"]["scopes"]

    assert observer == ["observer", "operations:read", "sync:read", "watches:read"]
    assert operator == ["observer", "operations:read", "operator", "sync:read", "watches:read"]


async def test_observer__reads_every_tenants_rows_without_lease_tokens(store):
    await claimed_operation(store, caller_did="did:key:a", owner_did="did:key:a")
    await repair_failed_watch(store, operation_id="op-2", source_id="evt-2")

    body = await post(
        store,
        OBSERVER_TOKEN,
        "{ operations { edges { node { callerDID leaseToken watch { ownerDID } } } } "
        'accounts(connectorName: "calendar") { edges { node { accountKey paused } } } '
        "watches { edges { node { ownerDID } } } }",
    )

    assert "errors" not in body, body
    nodes = [edge["node"] for edge in body["data"]["operations"]["edges"]]
    assert {node["callerDID"] for node in nodes} == {"did:key:a", "did:key:caller"}
    assert {node["leaseToken"] for node in nodes} == {None}
    assert [e["node"]["ownerDID"] for e in body["data"]["watches"]["edges"]] == ["did:key:owner"]
    assert body["data"]["accounts"]["edges"][0]["node"] == {"accountKey": "acct-1", "paused": False}


@pytest.mark.parametrize("token", [OBSERVER_TOKEN, TENANT_TOKEN], ids=["observer", "tenant"])
@pytest.mark.parametrize(
    ("name", "variables"),
    [
        ("PauseAccount", {"input": {"connectorName": "calendar"}}),
        ("ResumeAccount", {"input": {"connectorName": "calendar"}}),
        ("CancelOperations", {"input": {"filter": {"connectorName": "calendar"}}}),
        ("ReissueOperations", {"input": {"filter": {"connectorName": "calendar"}}}),
        ("RearmWatches", {"input": {"filter": {}}}),
        (
            "ForceReleaseLeases",
            {"input": {"keys": [{"callerDID": "did:key:caller", "operationID": "op-1"}]}},
        ),
    ],
)
async def test_operator_mutations__refused_to_observers_and_tenants(store, token, name, variables):
    held = await claimed_operation(store)
    async with app_client(store, token=token) as http:
        gql = GraphQLClient(http)
        document = next(text for text in gql.documents if f"mutation {name}(" in text)
        response = await http.post(
            "/graphql", json={"query": document, "operationName": name, "variables": variables}
        )

    assert error_codes(response.json()) == ["FORBIDDEN"]
    assert await store.operations.get_operation("did:key:caller", "op-1") == held


async def test_operator__writes_another_tenants_rows_only_through_its_controls(store):
    await insert_operations(store, [due_record(store, 0, caller_did="did:key:b")])
    token = mint("did:key:ops", f"{OPERATOR} operations:write")

    leased = await run(store, token, "LeaseOperations", input=LEASE)
    claimed = await post(
        store,
        token,
        "mutation($input: ClaimOperationInput!) { claimOperation(input: $input) { __typename } }",
        {"input": claim_input(callerDID="did:key:b", ownerDID="did:key:b")},
    )

    assert leased["leaseOperations"]["operations"] == []
    assert error_codes(claimed) == ["FORBIDDEN"]


# pauseAccount / resumeAccount


async def test_pause_and_resume_account__leasing_stops_and_resumes_spread(store, gql, clock):
    await insert_operations(store, [due_record(store, n) for n in range(10)])

    paused = await run(
        store,
        OPERATOR_TOKEN,
        "PauseAccount",
        input={"connectorName": "calendar", "accountKey": "acct-1"},
    )
    none = await gql.run("LeaseOperations", input=LEASE)
    due = await gql.run("DueOperations", now=clock())
    resumed = await run(
        store,
        OPERATOR_TOKEN,
        "ResumeAccount",
        input={"connectorName": "calendar", "accountKey": "acct-1", "spreadMs": 10_000},
    )
    first = await gql.run("LeaseOperations", input=LEASE)
    clock.advance(10_000)
    rest = await gql.run("LeaseOperations", input=LEASE)

    assert paused["pauseAccount"]["account"] == {
        "accountKey": "acct-1",
        "paused": True,
        "pausedAt": clock() - 10_000,
        "inFlight": 0,
    }
    assert none["leaseOperations"]["operations"] == [] and due["dueOperations"] == []
    assert resumed["resumeAccount"]["spread"] == 10
    assert resumed["resumeAccount"]["account"]["paused"] is False
    assert ids(first["leaseOperations"]["operations"]) == ["op-0"]
    assert len(rest["leaseOperations"]["operations"]) == 9


async def test_pause_account__whole_connector(store, gql):
    await claimed_operation(store)

    paused = await run(store, OPERATOR_TOKEN, "PauseAccount", input={"connectorName": "calendar"})
    listed = await run(store, OPERATOR_TOKEN, "OperatorAccounts", connectorName="calendar")
    resumed = await run(store, OPERATOR_TOKEN, "ResumeAccount", input={"connectorName": "calendar"})

    assert paused["pauseAccount"] == {
        "connectorName": "calendar",
        "connectorPaused": True,
        "account": None,
    }
    assert listed["accounts"]["edges"][0]["node"]["paused"] is True
    assert listed["accounts"]["edges"][0]["node"]["pausedAt"] is None
    assert resumed["resumeAccount"]["connectorPaused"] is False


@pytest.mark.parametrize(
    ("variables", "field"),
    [
        ({"connectorName": "calendar", "spreadMs": -1}, "spreadMs"),
        ({"connectorName": "calendar", "spreadMs": 86_400_001}, "spreadMs"),
        ({"connectorName": ""}, "connectorName"),
    ],
)
async def test_resume_account__bad_input_names_the_field(store, variables, field):
    body = await post(
        store,
        OPERATOR_TOKEN,
        "mutation($input: ResumeAccountInput!) { resumeAccount(input: $input) { spread } }",
        {"input": variables},
    )

    assert error_codes(body) == ["BAD_USER_INPUT"]
    assert body["errors"][0]["extensions"]["field"] == field


async def test_resume_offline_deferred__one_connector(store, gql, clock):
    await insert_operations(
        store,
        [
            due_record(store, 0, defer_reason="offline", next_attempt_at=clock() + 9_000),
            due_record(
                store,
                1,
                connector_name="crm",
                defer_reason="offline",
                next_attempt_at=clock() + 9_000,
            ),
        ],
    )

    data = await gql.run("ResumeOfflineDeferred", input={"now": clock(), "connectorName": "crm"})

    assert data["resumeOfflineDeferred"]["resumedOperations"] == 1


# cancelOperations


async def test_cancel_operations__cancels_and_the_holder_is_refused(store, gql, clock):
    held = await claimed_operation(store)

    data = await run(
        store,
        OPERATOR_TOKEN,
        "CancelOperations",
        input={"filter": {"accountKey": "acct-1"}, "reason": "provider account closed"},
    )
    renewed = await gql.run(
        "RenewLease",
        input={
            "callerDID": held.caller_did,
            "operationID": held.operation_id,
            "token": "lease-A",
            "expiresAt": clock() + 60_000,
        },
    )

    assert data["cancelOperations"]["cancelled"] == 1
    assert renewed["renewLease"]["applied"] is False
    assert renewed["renewLease"]["operation"]["state"] == "FAILED"
    assert renewed["renewLease"]["operation"]["lastKind"] == "cancelled"


@pytest.mark.parametrize(
    ("variables", "field"),
    [
        ({"filter": {}}, "filter"),
        ({"filter": {"updatedAfter": 5, "updatedBefore": 4}}, "filter.updatedBefore"),
        ({"filter": {"ownerDID": ""}}, "filter.ownerDID"),
        ({"filter": {"connectorName": "calendar"}, "limit": 1001}, "limit"),
        ({"filter": {"connectorName": "calendar"}, "reason": "x" * 2049}, "reason"),
    ],
)
async def test_cancel_operations__bad_input_names_the_field(store, variables, field):
    held = await claimed_operation(store)

    body = await post(
        store,
        OPERATOR_TOKEN,
        "mutation($input: CancelOperationsInput!) "
        "{ cancelOperations(input: $input) { cancelled } }",
        {"input": variables},
    )

    assert error_codes(body) == ["BAD_USER_INPUT"]
    assert body["errors"][0]["extensions"]["field"] == field
    assert await store.operations.get_operation("did:key:caller", "op-1") == held


async def test_operations__filter_by_owner_account_kind_and_time(store, gql, clock):
    await insert_operations(
        store,
        [
            due_record(store, 0, owner_did="did:key:a", last_kind="permanent"),
            due_record(store, 1, account_key="acct-2", updated_at=clock() - 50),
        ],
    )

    async def listed(**where):
        data = await gql.run("OperationsPage", filter=where)
        return [edge["node"]["operationID"] for edge in data["operations"]["edges"]]

    assert await listed(ownerDID="did:key:a") == ["op-0"]
    assert await listed(kind="permanent") == ["op-0"]
    assert await listed(accountKey="acct-2") == ["op-1"]
    assert await listed(updatedBefore=clock()) == ["op-1"]
    assert await listed(updatedAfter=clock()) == ["op-0"]


# reissueOperations


async def test_reissue_operations__linked_both_ways_and_idempotent(store, gql):
    await insert_operations(store, [due_record(store, n, state="failed") for n in range(3)])

    first = await run(
        store, OPERATOR_TOKEN, "ReissueOperations", input={"filter": {"states": ["FAILED"]}}
    )
    again = await run(
        store, OPERATOR_TOKEN, "ReissueOperations", input={"filter": {"states": ["FAILED"]}}
    )
    original = await post(
        store,
        OPERATOR_TOKEN,
        '{ operation(callerDID: "did:key:caller", operationID: "op-0") '
        "{ state reissuedAs { operationID state reissuedFrom { operationID } } } }",
    )

    created = first["reissueOperations"]["operations"]
    assert [op["reissuedFrom"]["operationID"] for op in created] == ["op-0", "op-1", "op-2"]
    assert {op["state"] for op in created} == {"ATTEMPTED"}
    assert all(op["operationID"].startswith("reissue:") for op in created)
    assert again["reissueOperations"]["operations"] == []
    assert original["data"]["operation"] == {
        "state": "FAILED",
        "reissuedAs": {
            "operationID": created[0]["operationID"],
            "state": "ATTEMPTED",
            "reissuedFrom": {"operationID": "op-0"},
        },
    }


async def test_reissue_operations__a_tenant_sees_the_link_of_its_own(store):
    await insert_operations(store, [due_record(store, 0, state="failed")])
    await run(
        store,
        OPERATOR_TOKEN,
        "ReissueOperations",
        input={"filter": {"callerDID": "did:key:caller"}},
    )

    body = await post(
        store,
        TENANT_TOKEN,
        '{ operation(callerDID: "did:key:caller", operationID: "op-0") { reissuedAs { state } } }',
    )

    assert body["data"]["operation"]["reissuedAs"] == {"state": "ATTEMPTED"}


def skipped(cancelled=0, outcome_unknown=0, blocked=0):
    return {"cancelled": cancelled, "outcomeUnknown": outcome_unknown, "blocked": blocked}


async def cancelled_failures(store):
    """``op-0`` failed permanently; ``op-1`` cancelled; ``op-2`` cancelled after its send was
    marked (its outcome unknown)."""
    await insert_operations(
        store, [due_record(store, 0, state="failed", last_kind="permanent"), due_record(store, 1)]
    )
    await marked_operation(store, operation_id="op-2", source_id="evt-2")
    await store.operator.cancel_operations(OperationFilter(states=["attempted"]))


async def test_reissue_operations__risky_ones_skipped_and_counted_unless_included(store):
    await cancelled_failures(store)
    where = {"filter": {"states": ["FAILED"]}}

    default = await run(store, OPERATOR_TOKEN, "ReissueOperations", input=where)
    cancelled = await run(
        store, OPERATOR_TOKEN, "ReissueOperations", input=where | {"include": ["CANCELLED"]}
    )
    both = await run(
        store,
        OPERATOR_TOKEN,
        "ReissueOperations",
        input=where | {"include": ["CANCELLED", "OUTCOME_UNKNOWN"]},
    )

    def answer(data):
        payload = data["reissueOperations"]
        return (
            [op["reissuedFrom"]["operationID"] for op in payload["operations"]],
            payload["skipped"],
            payload["remaining"],
        )

    assert answer(default) == (["op-0"], skipped(cancelled=1, outcome_unknown=1), 0)
    assert answer(cancelled) == (["op-1"], skipped(outcome_unknown=1), 0)
    assert answer(both) == (["op-2"], skipped(), 0)


async def test_reissue_operations__a_blocked_one_counted_and_passed_over(store):
    await insert_operations(
        store,
        [
            due_record(store, 0, state="failed"),
            due_record(store, 1, state="failed"),
            due_record(store, 2, state="failed"),
            due_record(store, 9, operation_id=reissue_key("did:key:caller", "op-0")),
        ],
    )
    where = {"filter": {"states": ["FAILED"]}, "limit": 1}

    first = (await run(store, OPERATOR_TOKEN, "ReissueOperations", input=where))[
        "reissueOperations"
    ]
    second = (await run(store, OPERATOR_TOKEN, "ReissueOperations", input=where))[
        "reissueOperations"
    ]

    assert [op["reissuedFrom"]["operationID"] for op in first["operations"]] == ["op-1"]
    assert (first["skipped"], first["remaining"]) == (skipped(blocked=1), 1)
    assert [op["reissuedFrom"]["operationID"] for op in second["operations"]] == ["op-2"]
    assert (second["skipped"], second["remaining"]) == (skipped(blocked=1), 0)


async def test_cancel_operations__remaining_exact_past_the_limit(store):
    await insert_operations(store, [due_record(store, n) for n in range(5)])
    where = {"filter": {"connectorName": "calendar"}, "limit": 2}

    answers = [
        (await run(store, OPERATOR_TOKEN, "CancelOperations", input=where))["cancelOperations"]
        for _ in range(3)
    ]

    assert answers == [
        {"cancelled": 2, "remaining": 3},
        {"cancelled": 2, "remaining": 1},
        {"cancelled": 1, "remaining": 0},
    ]


# rearmWatches and forceReleaseLeases


async def test_rearm_watches__counts_the_rearmed(store):
    failed = await repair_failed_watch(store)

    data = await run(
        store, OPERATOR_TOKEN, "RearmWatches", input={"filter": {"ownerDID": failed.owner_did}}
    )
    rearmed = await store.watches.get_watch(failed.identity)

    assert data["rearmWatches"] == {"rearmed": 1, "remaining": 0}
    assert rearmed is not None and rearmed.repair_generation == failed.repair_generation + 1


async def test_rearm_watches__remaining_exact_past_the_limit(store):
    for n in range(3):
        await repair_failed_watch(store, operation_id=f"op-{n}", source_id=f"evt-{n}")
    where = {"filter": {"status": "REPAIR_FAILED"}, "limit": 2}

    answers = [
        (await run(store, OPERATOR_TOKEN, "RearmWatches", input=where))["rearmWatches"]
        for _ in range(2)
    ]

    assert answers == [{"rearmed": 2, "remaining": 1}, {"rearmed": 1, "remaining": 0}]


async def test_force_release_leases__frees_and_counts_a_marked_send(store, gql, clock):
    marked = await marked_operation(store)
    key = {"callerDID": marked.caller_did, "operationID": marked.operation_id}

    data = await run(store, OPERATOR_TOKEN, "ForceReleaseLeases", input={"keys": [key]})
    mark = await gql.run(
        "MarkSendStarted", input=key | {"leaseToken": "lease-A", "marker": "run-2"}
    )

    assert data["forceReleaseLeases"]["released"] == [
        key | {"attempts": marked.attempts + 1, "sendMarker": "*abandoned*"}
    ]
    assert mark["markSendStarted"]["applied"] is False


async def test_force_release_leases__bad_key_names_its_index(store):
    body = await post(
        store,
        OPERATOR_TOKEN,
        "mutation($input: ForceReleaseLeasesInput!) "
        "{ forceReleaseLeases(input: $input) { released { operationID } } }",
        {
            "input": {
                "keys": [
                    {"callerDID": "c", "operationID": "o"},
                    {"callerDID": "", "operationID": "o"},
                ]
            }
        },
    )

    assert error_codes(body) == ["BAD_USER_INPUT"]
    assert body["errors"][0]["extensions"]["field"] == "keys[1].callerDID"


# What a bulk action would touch, asked before it; the connectors


COUNTS = """
query ($ops: OperationFilter!, $watches: WatchFilter!) {
  cancellableCount(filter: $ops)
  reissuableCount(filter: $ops) { remaining skipped { cancelled outcomeUnknown blocked } }
  rearmableCount(filter: $watches)
}
"""


async def test_bulk_counts__what_the_next_calls_would_touch_and_refused_to_observers(store):
    await insert_operations(store, [due_record(store, n) for n in range(5)])
    for n in range(3):
        await repair_failed_watch(store, operation_id=f"op-w{n}", source_id=f"evt-w{n}")
    variables = {"ops": {"connectorName": "calendar"}, "watches": {"status": "REPAIR_FAILED"}}

    before = (await post(store, OPERATOR_TOKEN, COUNTS, variables))["data"]
    cancel = {"filter": {"connectorName": "calendar"}, "limit": 2}
    cancelled = await run(store, OPERATOR_TOKEN, "CancelOperations", input=cancel)
    after = (await post(store, OPERATOR_TOKEN, COUNTS, variables))["data"]
    refused = await post(store, OBSERVER_TOKEN, COUNTS, variables)

    assert before["cancellableCount"] == 5
    assert after["cancellableCount"] == cancelled["cancelOperations"]["remaining"] == 3
    assert before["rearmableCount"] == after["rearmableCount"] == 3
    assert before["reissuableCount"]["remaining"] == 0
    assert after["reissuableCount"]["skipped"]["cancelled"] == 2
    assert set(error_codes(refused)) == {"FORBIDDEN"}


async def test_connectors__a_paused_one_without_accounts_and_one_with_accounts_only(store):
    await run(store, OPERATOR_TOKEN, "PauseAccount", input={"connectorName": "mail"})
    await store.accounts.set_account_limit("crm", "acct-9", 2)

    data = await post(store, OBSERVER_TOKEN, "{ connectors { connectorName pausedAt } }")

    listed = data["data"]["connectors"]
    assert [c["connectorName"] for c in listed] == ["crm", "mail"]
    assert listed[0]["pausedAt"] is None and listed[1]["pausedAt"] is not None
