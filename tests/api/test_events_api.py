"""The event log over GraphQL, on both backends: ``Operation.events`` and ``Watch.events``
as connections (oldest first, the writer as actor), ``errorMessage`` kept as ``lastError``
and on the event (at most 2,048 bytes, else BAD_USER_INPUT naming it and nothing written),
and a tenant reading none of another tenant's events."""

from typing import Any

from store.tables import operation_event, watch_event
from tests.api.conftest import GraphQLClient, app_client, claim_input, error_codes
from tests.factories import aged_events
from tests.tokens import mint

KEY = {"callerDID": "did:key:caller", "operationID": "op-1"}
TENANT = "did:key:caller"
TENANT_SCOPES = "operations:read operations:write watches:read watches:write"
DAY_MS = 24 * 3600 * 1000


async def history(gql: GraphQLClient, **page: Any) -> dict[str, Any]:
    return (await gql.run("OperationHistory", **KEY, **page))["operation"]


def record_input(**overrides: Any) -> dict[str, Any]:
    return (
        KEY
        | {
            "fromState": "ATTEMPTED",
            "toState": "ATTEMPTED",
            "version": 0,
            "leaseToken": "lease-A",
            "kind": "transient",
            "httpStatus": 503,
        }
        | overrides
    )


async def test_operation_events__one_per_write_with_actor_and_message(store):
    async with app_client(store, token=mint(sub=TENANT, scope=TENANT_SCOPES)) as http:
        gql = GraphQLClient(http)
        await gql.run("ClaimOperation", input=claim_input(ownerDID=TENANT))
        recorded = await gql.run(
            "RecordOperation", input=record_input(errorMessage="upstream 503 ✂")
        )
        assert recorded["recordOperation"]["operation"]["lastError"] == "upstream 503 ✂"
        found = await history(gql)

    assert found["lastError"] == "upstream 503 ✂"
    nodes = [edge["node"] for edge in found["events"]["edges"]]
    assert [(n["action"], n["fromState"], n["toState"]) for n in nodes] == [
        ("CLAIMED", None, "ATTEMPTED"),
        ("RECORDED", "ATTEMPTED", "ATTEMPTED"),
    ]
    assert {n["actorDID"] for n in nodes} == {TENANT}
    assert (
        nodes[1]["kind"],
        nodes[1]["httpStatus"],
        nodes[1]["message"],
        nodes[1]["attempts"],
    ) == (
        "transient",
        503,
        "upstream 503 ✂",
        1,
    )
    assert [edge["cursor"] for edge in found["events"]["edges"]] == [n["sequence"] for n in nodes]


async def test_operation_events__pages_oldest_first(gql):
    await gql.run("ClaimOperation", input=claim_input())
    for n in range(3):
        await gql.run(
            "MarkSendStarted",
            input=KEY | {"leaseToken": "lease-A", "marker": f"run-{n}"},
        )

    first = await history(gql, first=2)
    rest = await history(gql, first=2, after=first["events"]["pageInfo"]["endCursor"])

    assert first["events"]["pageInfo"]["hasNextPage"] is True
    assert rest["events"]["pageInfo"]["hasNextPage"] is False
    actions = [e["node"]["action"] for e in first["events"]["edges"] + rest["events"]["edges"]]
    assert actions == ["CLAIMED", "SEND_MARKED", "SEND_MARKED", "SEND_MARKED"]


async def test_operation_events__first_500_is_a_page_of_its_own(gql):
    await gql.run("ClaimOperation", input=claim_input())

    page = await history(gql, first=500)

    assert [e["node"]["action"] for e in page["events"]["edges"]] == ["CLAIMED"]
    assert page["events"]["pageInfo"]["hasNextPage"] is False


async def test_operation_events__an_after_past_64_bits_is_bad_input(gql):
    await gql.run("ClaimOperation", input=claim_input())
    response = await gql.http.post(
        "/graphql",
        json={
            "query": 'query ($after: String) { operation(callerDID: "did:key:caller", '
            'operationID: "op-1") { events(after: $after) { edges { cursor } } } }',
            "variables": {"after": "f" * 32},
        },
    )

    assert error_codes(response.json()) == ["BAD_USER_INPUT"]


async def test_error_message__longer_than_2048_bytes_refused_nothing_written(gql):
    await gql.run("ClaimOperation", input=claim_input())
    too_long = "é" * 1024 + "x"
    mutations = {
        "recordOperation": ("RecordOperationInput!", record_input(errorMessage=too_long)),
        "deferOperation": (
            "DeferOperationInput!",
            KEY | {"nextAttemptAt": 1, "errorMessage": too_long},
        ),
    }
    for name, (kind, given) in mutations.items():
        body = await gql.query(
            f"mutation($input: {kind}) {{ {name}(input: $input) {{ applied }} }}",
            {"input": given},
        )
        assert error_codes(body) == ["BAD_USER_INPUT"]
        assert body["errors"][0]["extensions"]["field"] == "errorMessage"
    batch = await gql.query(
        "mutation($input: RecordOperationsInput!) { recordOperations(input: $input) "
        "{ results { applied } } }",
        {"input": {"items": [record_input(errorMessage=too_long)]}},
    )
    assert batch["errors"][0]["extensions"]["field"] == "items[0].errorMessage"

    found = await history(gql)
    assert [e["node"]["action"] for e in found["events"]["edges"]] == ["CLAIMED"]
    assert found["lastError"] is None


async def test_watch_events__verification_message(gql, store, clock):
    await store.winners.record_winner("doc-1", "digest-1")
    await gql.run("ClaimOperation", input=claim_input())
    await gql.run(
        "FinalizeOperation",
        input=KEY | {"version": 0, "leaseToken": "lease-A", "dueAt": clock.now},
    )
    identity = {
        "ownerDID": "did:key:owner",
        "connectorName": "calendar",
        "model": "Event",
        "accountKey": "acct-1",
        "sourceID": "evt-1",
    }
    await gql.run(
        "RecordVerification",
        input={
            "identity": identity,
            "generation": 1,
            "fetchedDigest": "other",
            "maxAttempts": 3,
            "dueAt": clock.now,
            "errorMessage": "title differs",
        },
    )

    watch = (await gql.run("WatchHistory", identity=identity))["watch"]

    assert watch["lastError"] == "title differs"
    nodes = [edge["node"] for edge in watch["events"]["edges"]]
    assert [(n["action"], n["fromStatus"], n["toStatus"], n["message"]) for n in nodes] == [
        ("OPENED", None, "PENDING_VERIFICATION", None),
        ("PENDING", "PENDING_VERIFICATION", "PENDING_VERIFICATION", "title differs"),
    ]


async def test_events__a_tenant_reads_none_of_another_tenants(store, gql):
    await gql.run("ClaimOperation", input=claim_input())
    async with app_client(store, token=mint(sub="did:key:other", scope=TENANT_SCOPES)) as http:
        other = GraphQLClient(http)
        found = await other.run("OperationHistory", **KEY)
        listed = await other.query(
            "{ operations(first: 10) { edges { node { events { edges { cursor } } } } } }"
        )

    assert found["operation"] is None
    assert listed["data"]["operations"]["edges"] == []


async def test_operation_events__an_after_below_what_was_collected_is_events_collected(gql, store):
    """A page after a cursor whose following events were collected in part would skip them
    silently: it is refused with EVENTS_COLLECTED naming ``after``; a page after the newest
    event collected reads on."""
    await gql.run("ClaimOperation", input=claim_input())
    for n in range(3):
        await gql.run("MarkSendStarted", input=KEY | {"leaseToken": "lease-A", "marker": f"m{n}"})
    edges = (await history(gql))["events"]["edges"]
    cursors = [edge["cursor"] for edge in edges]
    await aged_events(store.db, operation_event, [int(c[16:], 16) for c in cursors[:2]])
    assert await store.events.collect_operation_events(DAY_MS, 10) == 2

    refused = await gql.http.post(
        "/graphql",
        json={
            "query": 'query ($after: String) { operation(callerDID: "did:key:caller", '
            'operationID: "op-1") { events(after: $after) { edges { cursor } } } }',
            "variables": {"after": cursors[0]},
        },
    )
    rest = await history(gql, after=cursors[1])

    assert error_codes(refused.json()) == ["EVENTS_COLLECTED"]
    assert refused.json()["errors"][0]["extensions"]["field"] == "after"
    assert [edge["cursor"] for edge in rest["events"]["edges"]] == cursors[2:]


async def test_watch_events__an_after_below_what_was_collected_is_events_collected(
    gql, store, clock
):
    """As the operation's: the watches log is collected oldest first, each log by itself."""
    await store.winners.record_winner("doc-1", "digest-1")
    for n in (1, 2):
        claim = {"operationID": f"op-{n}", "sourceID": f"evt-{n}", "leaseToken": f"lease-{n}"}
        await gql.run("ClaimOperation", input=claim_input(**claim))
        await gql.run(
            "FinalizeOperation",
            input={"callerDID": "did:key:caller", "operationID": f"op-{n}", "version": 0}
            | {"leaseToken": f"lease-{n}", "dueAt": clock.now},
        )
    identity = {
        "ownerDID": "did:key:owner",
        "connectorName": "calendar",
        "model": "Event",
        "accountKey": "acct-1",
        "sourceID": "evt-1",
    }
    verification = {"identity": identity, "generation": 1, "fetchedDigest": "other"}
    await gql.run("RecordVerification", input=verification | {"maxAttempts": 3, "dueAt": clock.now})
    opened = (await gql.run("WatchHistory", identity=identity))["watch"]["events"]["edges"]
    logged = await store.events.watch_events_after(None, 10)
    await aged_events(store.db, watch_event, [int(e.sequence[16:], 16) for e in logged[:2]])
    assert await store.events.collect_watch_events(DAY_MS, 10) == 2

    refused = await gql.http.post(
        "/graphql",
        json={
            "query": "query ($identity: WatchIdentityInput!, $after: String) { "
            "watch(identity: $identity) { events(after: $after) { edges { cursor } } } }",
            "variables": {"identity": identity, "after": opened[0]["cursor"]},
        },
    )
    kept = (await gql.run("WatchHistory", identity=identity))["watch"]["events"]["edges"]

    assert error_codes(refused.json()) == ["EVENTS_COLLECTED"]
    assert refused.json()["errors"][0]["extensions"]["field"] == "after"
    assert [edge["cursor"] for edge in kept] == [opened[1]["cursor"]]
