"""The dashboard's API side: the counts it shows (``operationCounts``, ``watchCounts``), each
viewer counting only what it may read, and the page, its documents and assets served by the
server without a token (and holding none: tests/api/test_sign_in.py)."""

from server.pages import DASHBOARD_DOCUMENTS
from server.settings import Settings
from tests.api.conftest import GraphQLClient, app_client
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
