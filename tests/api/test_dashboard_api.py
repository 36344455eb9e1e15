"""The dashboard's API side: the counts it shows (``operationCounts``, ``watchCounts``), each
viewer counting only what it may read, and the page, its documents and assets served by the
server without a token (and holding none: tests/api/test_sign_in.py)."""

from typing import Any

from server.pages import DASHBOARD_DOCUMENTS
from server.settings import Settings
from tests.api.conftest import GraphQLClient, app_client, claim_input
from tests.leasing_factories import due_record, due_watch_record, insert_operations, insert_watches
from tests.tokens import mint

COUNTS = """
query {
  operationCounts { connectorName accountKey state count due inFlight }
  watchCounts { connectorName status count }
}
"""


async def seed(store) -> None:
    now = store.clock()
    await insert_operations(
        store,
        [
            due_record(store, 0),
            due_record(store, 1, lease_token="L", lease_expires_at=now + 1_000),
            due_record(store, 2, state="failed"),
            due_record(
                store, 3, connector_name="crm", caller_did="did:key:t", owner_did="did:key:t"
            ),
        ],
    )
    await insert_watches(
        store,
        [
            due_watch_record(store, 0),
            due_watch_record(store, 1, verification_status="repair_failed"),
            due_watch_record(store, 2, connector_name="crm", owner_did="did:key:t"),
        ],
    )


async def test_counts__service_counts_every_row(store, gql):
    await seed(store)

    data = await gql.run("DashboardOverview")

    assert data["operationCounts"] == [
        {
            "connectorName": "calendar",
            "accountKey": "acct-1",
            "state": "ATTEMPTED",
            "count": 2,
            "due": 1,
            "inFlight": 1,
        },
        {
            "connectorName": "calendar",
            "accountKey": "acct-1",
            "state": "FAILED",
            "count": 1,
            "due": 0,
            "inFlight": 0,
        },
        {
            "connectorName": "crm",
            "accountKey": "acct-1",
            "state": "ATTEMPTED",
            "count": 1,
            "due": 1,
            "inFlight": 0,
        },
    ]
    assert data["watchCounts"] == [
        {"connectorName": "calendar", "status": "PENDING_VERIFICATION", "count": 1},
        {"connectorName": "calendar", "status": "REPAIR_FAILED", "count": 1},
        {"connectorName": "crm", "status": "PENDING_VERIFICATION", "count": 1},
    ]


async def test_counts__a_tenant_counts_only_its_own_rows(store):
    await seed(store)
    tenant = mint("did:key:t", "operations:read watches:read")

    async with app_client(store, token=tenant) as http:
        data = (await GraphQLClient(http).query(COUNTS))["data"]

    assert [(c["connectorName"], c["count"]) for c in data["operationCounts"]] == [("crm", 1)]
    assert [(c["connectorName"], c["count"]) for c in data["watchCounts"]] == [("crm", 1)]


async def test_counts__refused_without_the_read_rights(store):
    async with app_client(store, token=mint("did:key:t", "sync:read")) as http:
        body = await GraphQLClient(http).query(COUNTS)

    assert {e["extensions"]["code"] for e in body["errors"]} == {"FORBIDDEN"}
    assert body["data"] is None


async def test_counts__narrowed_to_a_connector(store, gql):
    await seed(store)

    data = await gql.run("DashboardOverview", connectorName="crm")

    assert {c["connectorName"] for c in data["operationCounts"] + data["watchCounts"]} == {"crm"}


async def test_dashboard__page_documents_and_assets_served_without_a_token(store):
    async with app_client(store, token=None) as http:
        page = await http.get("/ui")
        documents = await http.get("/ui/dashboard.graphql")
        script = await http.get("/ui/assets/app.js")
        library = await http.get("/ui/assets/htm-preact-standalone.module.js")
        data = await http.post("/graphql", json={"query": COUNTS})

    assert page.status_code == 200 and "/ui/assets/app.js" in page.text
    assert "default-src 'self'" in page.headers["content-security-policy"]
    assert documents.text == DASHBOARD_DOCUMENTS.read_text()
    assert script.status_code == library.status_code == 200
    assert data.status_code == 401


async def test_dashboard__off_with_its_setting(store):
    async with app_client(store, Settings(dashboard=False), token=None) as http:
        assert (await http.get("/ui")).status_code == 404
        assert (await http.get("/ui/assets/app.js")).status_code == 404


STATS_WINDOW = {"since": 0, "until": 1440 * 2_000_000_000, "bucketMs": 2_000_000_000}
"""Every time a test's events may have (the store's clock, or PostgreSQL's), in 1,440 buckets."""


def summed(buckets: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The buckets holding anything, by their counts and failure rate."""
    fields = ("claimed", "committed", "failed", "retried", "failureRate")
    return [{name: b[name] for name in fields} for b in buckets if b["claimed"] or b["failed"]]


async def finished(gql: GraphQLClient, operation_id: str, caller: str = "did:key:caller") -> None:
    """An operation claimed, then recorded failed (op ids ending in -f) or finalized."""
    claimed = await gql.run(
        "ClaimOperation",
        input=claim_input(
            callerDID=caller,
            operationID=operation_id,
            sourceID=f"evt-{operation_id}",
            documentID=f"doc-{operation_id}",
        ),
    )
    version = claimed["claimOperation"]["operation"]["version"]
    key = {"callerDID": caller, "operationID": operation_id, "version": version}
    if operation_id.endswith("-f"):
        recorded = await gql.run(
            "RecordOperation",
            input=key | {"fromState": "ATTEMPTED", "toState": "FAILED", "leaseToken": "lease-A"},
        )
        assert recorded["recordOperation"]["operation"]["state"] == "FAILED"
    else:
        await gql.run(
            "FinalizeOperation", input=key | {"leaseToken": "lease-A", "dueAt": 4102444800000}
        )


async def test_operation_stats__counts_the_claims_and_outcomes_it_was_told(gql):
    await finished(gql, "op-1")
    await finished(gql, "op-2-f")

    data = await gql.run("DashboardOperationStats", **STATS_WINDOW)

    assert summed(data["operationStats"]) == [
        {
            "claimed": 2,
            "committed": 1,
            "failed": 1,
            "retried": 0,
            "failureRate": 0.5,
        }
    ]


async def test_operation_stats__a_tenant_counts_only_its_own_operations(store, gql):
    await finished(gql, "op-1")
    await finished(gql, "op-2-f", caller="did:key:t")
    tenant = mint("did:key:t", "operations:read")

    async with app_client(store, token=tenant) as http:
        body = await GraphQLClient(http).run("DashboardOperationStats", **STATS_WINDOW)

    assert summed(body["operationStats"]) == [
        {"claimed": 1, "committed": 0, "failed": 1, "retried": 0, "failureRate": 1.0}
    ]


async def test_operation_stats__until_defaults_to_now_and_empty_buckets_read_zero(store, gql):
    now = store.clock()

    data = await gql.run("DashboardOperationStats", since=now - 3_000, bucketMs=1_000)

    assert [
        (b["start"], b["end"], b["claimed"], b["failureRate"]) for b in data["operationStats"]
    ] == [
        (now - 3_000, now - 2_000, 0, None),
        (now - 2_000, now - 1_000, 0, None),
        (now - 1_000, now, 0, None),
    ]


async def test_operation_stats__bad_input_names_the_field(gql):
    body = await gql.query("{ operationStats(since: 10, until: 5, bucketMs: 1) { start } }")

    assert body["errors"][0]["extensions"]["code"] == "BAD_USER_INPUT"
    assert body["errors"][0]["extensions"]["field"] == "until"


async def test_operation_stats__since_not_before_now_names_since_when_until_is_omitted(gql):
    body = await gql.query("{ operationStats(since: 4102444800000, bucketMs: 60000) { start } }")

    assert body["errors"][0]["extensions"]["code"] == "BAD_USER_INPUT"
    assert body["errors"][0]["extensions"]["field"] == "since"


async def test_failure_groups__count_against_the_requests_rows(gql):
    # Each alias may ask for up to 500 groups; a request's lists share MAX_ROWS_PER_REQUEST.
    aliases = " ".join(f"g{n}: failureGroups(first: 500) {{ count }}" for n in range(3))

    body = await gql.query(f"{{ {aliases} }}")

    assert body["data"] is None, body
    assert [error["extensions"]["field"] for error in body["errors"]] == ["first"]
    assert body["errors"][0]["extensions"]["code"] == "BAD_USER_INPUT"
