"""Batch leasing and provider accounts over GraphQL (the documents of graphql/operations), on
both backends: the mutations' outcomes, a tenant's rights, input bounds naming the field."""

import pytest

from server.settings import Settings
from store.operations import OperationFilter
from tests.api.conftest import GraphQLClient, app_client, claim_input, error_codes
from tests.factories import claimed_operation
from tests.tokens import mint

LEASE = {"leaseToken": "worker-1", "leaseMs": 60_000}
TENANT_A = mint("did:a", "operations:read operations:write watches:read watches:write")


async def due_claims(gql: GraphQLClient, count: int, **overrides) -> None:
    """``count`` operations claimed unleased (due at once), each its own entity."""
    for n in range(count):
        data = await gql.run(
            "ClaimOperation",
            input=claim_input(
                operationID=f"op-{n}",
                sourceID=f"evt-{n}",
                leaseToken=None,
                leaseExpiresAt=None,
                **overrides,
            ),
        )
        assert data["claimOperation"]["__typename"] == "OperationClaimed"


async def test_lease_operations__leases_and_returns_lean_operations(gql, clock):
    await due_claims(gql, 3)

    data = await gql.run("LeaseOperations", input=LEASE | {"limit": 2})

    leased = data["leaseOperations"]["operations"]
    assert [op["operationID"] for op in leased] == ["op-0", "op-1"]
    assert {op["leaseExpiresAt"] for op in leased} == {clock.now + 60_000}
    again = await gql.run("LeaseOperations", input=LEASE)
    assert [op["operationID"] for op in again["leaseOperations"]["operations"]] == ["op-2"]


async def test_renew_and_release_leases__the_holder(gql, clock):
    await due_claims(gql, 2)
    await gql.run("LeaseOperations", input=LEASE)
    keys = [{"callerDID": "did:key:caller", "operationID": f"op-{n}"} for n in range(2)]
    clock.advance(1_000)

    renewed = await gql.run("RenewLeases", input=LEASE | {"keys": keys})
    stranger = await gql.run("ReleaseLeases", input={"leaseToken": "other", "keys": keys})
    released = await gql.run("ReleaseLeases", input={"leaseToken": "worker-1", "keys": keys})

    assert {op["leaseExpiresAt"] for op in renewed["renewLeases"]["renewed"]} == {
        clock.now + 60_000
    }
    assert stranger["releaseLeases"]["released"] == []
    assert [op["operationID"] for op in released["releaseLeases"]["released"]] == ["op-0", "op-1"]


async def test_account_limit_and_throttle__bind_leasing(gql, clock):
    await due_claims(gql, 4)

    limited = await gql.run(
        "SetAccountLimit",
        input={"connectorName": "calendar", "accountKey": "acct-1", "maxInFlight": 1},
    )
    leased = await gql.run("LeaseOperations", input=LEASE)
    throttled = await gql.run(
        "ThrottleAccount",
        input={"connectorName": "calendar", "accountKey": "acct-1", "retryAfterMs": 5_000},
    )
    accounts = await gql.run("Accounts", connectorName="calendar")

    assert limited["setAccountLimit"]["account"] == {
        "connectorName": "calendar",
        "accountKey": "acct-1",
        "maxInFlight": 1,
        "inFlight": 0,
        "throttledUntil": None,
    }
    assert len(leased["leaseOperations"]["operations"]) == 1
    assert throttled["throttleAccount"]["account"]["throttledUntil"] == clock.now + 5_000
    (edge,) = accounts["accounts"]["edges"]
    assert edge["node"]["inFlight"] == 1


async def test_claim_watches__claims_due_watches(gql, clock):
    claimed = await gql.run("ClaimOperation", input=claim_input(leaseExpiresAt=clock.now + 1000))
    version = claimed["claimOperation"]["operation"]["version"]
    await gql.run(
        "FinalizeOperation",
        input={"callerDID": "did:key:caller", "operationID": "op-1", "version": version}
        | {"leaseToken": "lease-A", "dueAt": clock.now},
    )

    data = await gql.run("ClaimWatches", input={"claimMs": 30_000})

    (watch,) = data["claimWatches"]["watches"]
    assert watch["claimedUntil"] == clock.now + 30_000
    assert (await gql.run("ClaimWatches", input={"claimMs": 30_000}))["claimWatches"] == {
        "watches": []
    }


async def test_lease_operations__a_tenant_leases_only_what_it_called(store, gql):
    await due_claims(gql, 2)
    await due_claims(gql, 1, callerDID="did:a", ownerDID="did:a")

    async with app_client(store, token=TENANT_A) as tenant:
        response = await tenant.post(
            "/graphql",
            json={
                "query": 'mutation { leaseOperations(input: {leaseToken: "t", leaseMs: 60000})'
                " { operations { callerDID operationID } } }"
            },
        )

    assert response.json()["data"]["leaseOperations"]["operations"] == [
        {"callerDID": "did:a", "operationID": "op-0"}
    ]


@pytest.mark.parametrize("mutation", ["renewLeases", "releaseLeases"])
async def test_renew_and_release_leases__a_key_of_another_caller_refuses_the_tenant(
    store, gql, clock, mutation
):
    await due_claims(gql, 1, callerDID="did:a", ownerDID="did:a")
    async with app_client(store, token=TENANT_A) as tenant:
        lease = 'leaseOperations(input: {leaseToken: "t", leaseMs: 60000}) { operations { id } }'
        await tenant.post("/graphql", json={"query": f"mutation {{ {lease} }}"})
        before = await store.operations.get_operation("did:a", "op-0")
        clock.advance(1_000)
        ms = ", leaseMs: 60000" if mutation == "renewLeases" else ""
        keys = (
            '[{callerDID: "did:a", operationID: "op-0"}, '
            '{callerDID: "did:key:caller", operationID: "op-0"}]'
        )
        answer = "renewed { id }" if mutation == "renewLeases" else "released { id }"
        query = (
            f'mutation {{ {mutation}(input: {{leaseToken: "t"{ms}, keys: {keys}}}) '
            f"{{ {answer} }} }}"
        )
        body = (await tenant.post("/graphql", json={"query": query})).json()
    assert error_codes(body) == ["FORBIDDEN"]
    assert body["errors"][0]["extensions"]["field"] == "keys[1].callerDID"
    assert await store.operations.get_operation("did:a", "op-0") == before


@pytest.mark.parametrize(
    ("document", "field"),
    [
        (
            'leaseOperations(input: {leaseToken: "t", leaseMs: 999}) { operations { id } }',
            "leaseMs",
        ),
        (
            'leaseOperations(input: {leaseToken: "t", leaseMs: 3600001}) { operations { id } }',
            "leaseMs",
        ),
        (
            'leaseOperations(input: {leaseToken: "t", leaseMs: 1000, limit: 501}) '
            "{ operations { id } }",
            "limit",
        ),
        (
            'renewLeases(input: {leaseToken: "t", leaseMs: 0, keys: []}) { renewed { id } }',
            "leaseMs",
        ),
        (
            'renewLeases(input: {leaseToken: "t", leaseMs: 1000, keys: [{callerDID: "c", '
            'operationID: "o"}, {callerDID: "", operationID: "o"}]}) { renewed { id } }',
            "keys[1].callerDID",
        ),
        (
            'releaseLeases(input: {leaseToken: "t", keys: [{callerDID: "c", operationID: "o"}, '
            '{callerDID: "c", operationID: "o"}, {callerDID: "c"}]}) { released { id } }',
            "keys[2].operationID",
        ),
        (
            'releaseLeases(input: {leaseToken: "t", keys: [{callerDID: "c", operationID: "o"}, '
            '{callerDID: "c", operationID: ""}]}) { released { id } }',
            "keys[1].operationID",
        ),
        (
            'releaseLeases(input: {leaseToken: "t", keys: [{callerDID: "c", operationID: "o"}, '
            '{callerDID: "c", operationID: "o"}]}) { released { id } }',
            "keys[1].operationID",
        ),
        (
            'leaseOperations(input: {leaseToken: "t", leaseMs: 1000, accountKeys: ["a", ""]}) '
            "{ operations { id } }",
            "accountKeys[1]",
        ),
        (
            'leaseOperations(input: {leaseToken: "t", leaseMs: 1000, accountKeys: ["a", null]}) '
            "{ operations { id } }",
            "accountKeys[1]",
        ),
        ("claimWatches(input: {claimMs: 999}) { watches { id } }", "claimMs"),
        ("claimWatches(input: {claimMs: 1000, limit: 0}) { watches { id } }", "limit"),
        (
            'throttleAccount(input: {connectorName: "c", accountKey: "a", retryAfterMs: 0}) '
            "{ account { accountKey } }",
            "retryAfterMs",
        ),
        (
            'throttleAccount(input: {connectorName: "c", accountKey: "a", '
            "retryAfterMs: 86400001}) { account { accountKey } }",
            "retryAfterMs",
        ),
        (
            'setAccountLimit(input: {connectorName: "c", accountKey: "a", maxInFlight: -1}) '
            "{ account { accountKey } }",
            "maxInFlight",
        ),
    ],
)
async def test_leasing_mutations__bad_input_names_the_field(gql, document, field):
    body = await gql.query(f"mutation {{ {document} }}")

    assert error_codes(body) == ["BAD_USER_INPUT"]
    assert body["errors"][0]["extensions"]["field"] == field


@pytest.mark.parametrize(
    ("variables", "field"),
    [
        (
            {"keys": [{"callerDID": "c", "operationID": "o"}, {"callerDID": "c"}]},
            "keys[1].operationID",
        ),
        (
            {
                "keys": [
                    {"callerDID": "c", "operationID": "o"},
                    {"callerDID": 7, "operationID": "o"},
                ]
            },
            "keys[1].callerDID",
        ),
        ({"keys": [{"callerDID": "c", "operationID": ""}]}, "keys[0].operationID"),
    ],
)
async def test_renew_leases__a_bad_key_in_variables_names_its_index(gql, variables, field):
    body = await gql.query(
        "mutation($input: RenewLeasesInput!) { renewLeases(input: $input) { renewed { id } } }",
        {"input": {"leaseToken": "t", "leaseMs": 1000} | variables},
    )

    assert error_codes(body) == ["BAD_USER_INPUT"]
    assert body["errors"][0]["extensions"]["field"] == field


async def test_accounts__a_tenant_is_forbidden(store):
    async with app_client(store, token=TENANT_A) as tenant:
        response = await tenant.post(
            "/graphql", json={"query": '{ accounts(connectorName: "c") { edges { cursor } } }'}
        )

    assert error_codes(response.json()) == ["FORBIDDEN"]


BIG_INTENT = 60_000
"""Bytes of each operation's reissue intent in the byte-budget test."""
SMALL_BUDGET = 200_000
"""``MAX_RESPONSE_BYTES`` there: three such operations fit, four do not."""


async def test_lease_operations__leases_only_what_the_byte_budget_fits(store, clock):
    for n in range(10):
        await claimed_operation(
            store,
            operation_id=f"op-{n}",
            source_id=f"evt-{n}",
            reissue_intent={"blob": "x" * BIG_INTENT},
            lease_expires_at=clock.now - 1,
        )
    query = (
        "mutation($input: LeaseOperationsInput!) "
        "{ leaseOperations(input: $input) { operations { operationID reissueIntent } } }"
    )
    async with app_client(store, Settings(max_response_bytes=SMALL_BUDGET)) as client:
        response = await client.post(
            "/graphql", json={"query": query, "variables": {"input": LEASE | {"limit": 50}}}
        )

    body = response.json()
    assert "errors" not in body, body
    leased = [op["operationID"] for op in body["data"]["leaseOperations"]["operations"]]
    assert leased == ["op-0", "op-1", "op-2"]
    stored = await store.operations.list_tracked_operations(OperationFilter())
    assert sorted(r.operation_id for r in stored if r.lease_token == LEASE["leaseToken"]) == leased


TAKING_DOCUMENTS = {
    "two leaseOperations": (
        'mutation { a: leaseOperations(input: {leaseToken: "t", leaseMs: 60000, limit: 500}) '
        "{ operations { operationID } } "
        'b: leaseOperations(input: {leaseToken: "t", leaseMs: 60000, limit: 600}) '
        "{ operations { operationID } } }",
        "a",
    ),
    "a field after leaseOperations": (
        'mutation { leaseOperations(input: {leaseToken: "t", leaseMs: 60000}) '
        "{ operations { operationID } } "
        'renewLeases(input: {leaseToken: "t", leaseMs: 999, keys: []}) '
        "{ renewed { operationID } } }",
        "leaseOperations",
    ),
    "claimWatches then leaseOperations": (
        "mutation { claimWatches(input: {claimMs: 60000}) { watches { sourceID } } "
        '... on Mutation { leaseOperations(input: {leaseToken: "t", leaseMs: 60000}) '
        "{ operations { operationID } } } }",
        "claimWatches",
    ),
    "a field after claimWatches, through a fragment": (
        "mutation { ...Take __typename } "
        "fragment Take on Mutation { claimWatches(input: {claimMs: 60000}) "
        '{ watches { sourceID } } throttleAccount(input: {connectorName: "c", '
        'accountKey: "a", retryAfterMs: 0}) { account { accountKey } } }',
        "claimWatches",
    ),
}


@pytest.mark.parametrize("document", TAKING_DOCUMENTS.values(), ids=TAKING_DOCUMENTS.keys())
async def test_taking_fields__not_last_refuses_the_request_and_takes_nothing(gql, store, document):
    query, named = document
    await due_claims(gql, 3)

    body = await gql.query(query)

    assert "data" not in body
    assert error_codes(body) == ["GRAPHQL_VALIDATION_FAILED"]
    assert body["errors"][0]["message"].startswith(f"{named}: ")
    stored = await store.operations.list_tracked_operations(OperationFilter())
    assert [r.operation_id for r in stored if r.lease_token == "t"] == []


async def test_taking_fields__last_after_other_fields_answers_what_it_took(gql, store):
    await due_claims(gql, 2)

    body = await gql.query(
        'mutation { throttleAccount(input: {connectorName: "other", accountKey: "a", '
        "retryAfterMs: 1000}) { account { accountKey } } __typename "
        'leaseOperations(input: {leaseToken: "t", leaseMs: 60000}) '
        "{ operations { operationID } } __typename }"
    )

    assert "errors" not in body, body
    leased = [op["operationID"] for op in body["data"]["leaseOperations"]["operations"]]
    stored = await store.operations.list_tracked_operations(OperationFilter())
    assert (
        sorted(r.operation_id for r in stored if r.lease_token == "t")
        == leased
        == [
            "op-0",
            "op-1",
        ]
    )
