"""``GET /metrics`` after a scripted workload, parsed with ``prometheus_client.parser``: the
counters equal what the workload did, on both backends."""

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from server.app import create_app
from server.metrics import MAX_CONNECTOR_LABELS, Metrics, set_by_connector
from server.settings import Settings
from server.sweeper import SweepResult
from store import ConnectorStore
from tests.api.conftest import GraphQLClient, claim_input
from tests.factories import claimed_operation, pending_watch, verified_watch
from tests.tokens import SERVICE_TOKEN, bearer, mint


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of an exposition, keyed by name and sorted labels."""
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(parsed: dict[Any, float], name: str, **labels: str) -> float:
    return parsed.get((name, tuple(sorted(labels.items()))), 0.0)


@pytest.fixture
async def app(store: ConnectorStore) -> Any:
    """The app, with its lifespan not yet running."""
    settings = Settings(sweep_interval_seconds=3600, metrics_refresh_seconds=3600)
    return create_app(settings, store=store)


@pytest.fixture
async def running(app: Any) -> AsyncIterator[httpx.AsyncClient]:
    """A client of ``app`` with its lifespan running (metrics refresher and sweeper)."""
    async with app.router.lifespan_context(app), client_of(app) as http:
        yield http


def client_of(app: Any, token: str | None = SERVICE_TOKEN) -> httpx.AsyncClient:
    """A client of ``app`` sending ``token`` (None: no token)."""
    headers = {} if token is None else bearer(token)
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://test", headers=headers
    )


async def test_metrics__counters_equal_the_scripted_workload(app, running, store, clock):
    gql = GraphQLClient(running)
    key = {"callerDID": "did:key:caller", "operationID": "op-1"}
    # Three claims: op-1 and op-3 with a lease that lapses, op-2 held far ahead.
    await gql.run("ClaimOperation", input=claim_input(leaseExpiresAt=clock.now + 1_000))
    await gql.run(
        "ClaimOperation",
        input=claim_input(operationID="op-2", sourceID="evt-2", deterministicEventID="d2"),
    )
    await gql.run(
        "ClaimOperation",
        input=claim_input(
            operationID="op-3",
            sourceID="evt-3",
            deterministicEventID="d3",
            leaseExpiresAt=clock.now + 1_000,
        ),
    )
    # One request refused with BAD_USER_INPUT.
    bad = await running.post(
        "/graphql",
        json={"query": "query Bad { dueOperations(now: 1, limit: 0) { id } }"},
    )
    assert bad.json()["errors"][0]["extensions"]["code"] == "BAD_USER_INPUT"
    # A marked run lapses; lease-B takes over (one takeover), then marks: contested (one).
    await gql.run("MarkSendStarted", input=key | {"leaseToken": "lease-A", "marker": "run-1"})
    clock.advance(2_000)
    taken = await gql.run(
        "AcquireLease", input=key | {"token": "lease-B", "expiresAt": clock.now + 3_600_000}
    )
    assert taken["acquireLease"]["operation"]["attempts"] == 1
    marked = await gql.run(
        "MarkSendStarted", input=key | {"leaseToken": "lease-B", "marker": "run-2"}
    )
    assert marked["markSendStarted"]["operation"]["sendMarker"] == "*contested*"
    # A takeover of op-3, whose run never marked, is no counted takeover.
    await gql.run(
        "AcquireLease",
        input={"callerDID": "did:key:caller", "operationID": "op-3", "token": "lease-C"}
        | {"expiresAt": clock.now + 1_000},
    )
    clock.advance(1_001)  # op-3's lease lapses: it is due again

    app_metrics = app.state.metrics
    await app_metrics.refresh_tables()
    sweeps = ("connector_sweeper_runs_total", {"result": "swept"})
    for _ in range(100):  # the sweeper's first run, at start
        if (app_metrics.registry.get_sample_value(*sweeps) or 0) >= 1:
            break
        await asyncio.sleep(0.05)
    response = await running.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    parsed = samples(response.text)

    requests = "connector_requests_total"
    assert value(parsed, requests, operation="ClaimOperation", outcome="ok") == 3
    assert value(parsed, requests, operation="Bad", outcome="BAD_USER_INPUT") == 1
    assert value(parsed, requests, operation="MarkSendStarted", outcome="ok") == 2
    assert value(parsed, requests, operation="AcquireLease", outcome="ok") == 2
    total = sum(v for (name, _), v in parsed.items() if name == requests)
    assert total == 8
    latency = "connector_request_duration_seconds_count"
    assert value(parsed, latency, operation="ClaimOperation") == 3
    assert value(parsed, "connector_lease_takeovers_total") == 1
    assert value(parsed, "connector_contested_sends_total") == 1
    assert value(parsed, "connector_operations", state="attempted") == 3
    assert value(parsed, "connector_operations", state="committed") == 0
    assert value(parsed, "connector_due_operations") == 1  # op-3: its lease lapsed
    assert value(parsed, "connector_due_watches") == 0
    assert value(parsed, "connector_sweeper_runs_total", result="swept") == 1
    assert value(parsed, "connector_sweeper_deleted_rows_total", kind="operations") == 0
    assert value(parsed, "connector_sweeper_deleted_rows_total", kind="tombstones") == 0
    assert value(parsed, "connector_db_pool_connections", state="waiting") == 0
    in_use = value(parsed, "connector_db_pool_connections", state="in_use")
    idle = value(parsed, "connector_db_pool_connections", state="idle")
    assert in_use == 0 and idle == store.db.pool_size if store.db.is_postgres else idle == 1


async def test_metrics__switched_off(store):
    app = create_app(Settings(metrics=False, sweeper=False), store=store)
    async with client_of(app) as http:
        assert (await http.get("/metrics")).status_code == 404


@pytest.mark.parametrize(
    ("token", "status"),
    [
        (None, 401),
        (mint("did:key:tenant", "operations:read watches:read"), 403),
        (mint("did:key:prometheus", "metrics"), 200),
        (SERVICE_TOKEN, 200),
    ],
)
async def test_metrics__need_a_token_with_the_metrics_or_service_scope(store, token, status):
    app = create_app(Settings(sweeper=False), store=store)
    async with client_of(app, token) as http:
        response = await http.get("/metrics")
    assert response.status_code == status
    if status != 200:
        code = {401: "UNAUTHENTICATED", 403: "FORBIDDEN"}[status]
        assert response.json()["errors"][0]["extensions"]["code"] == code


async def test_metrics__on_a_separate_port_with_metrics_port(store):
    from tests.ports import free_port

    port = free_port()
    app = create_app(Settings(sweeper=False, metrics_port=port), store=store)
    async with app.router.lifespan_context(app), client_of(app) as http:
        await http.post("/graphql", json={"query": "query T { serverTime }"})
        assert (await http.get("/metrics")).status_code == 404
        async with httpx.AsyncClient() as direct:
            response = await direct.get(f"http://127.0.0.1:{port}/metrics")
    parsed = samples(response.text)
    assert value(parsed, "connector_requests_total", operation="T", outcome="ok") == 1


async def test_pool_stats__count_the_slots_in_use_and_the_waiters(database_url):
    from store.database import Database

    db = Database(database_url, pool_size=1, wait_timeout_s=5)
    await db.connect()
    try:
        assert db.pool_stats().in_use == 0 and db.pool_stats().waiting == 0
        if not db.is_postgres:
            return  # SQLite: the write queue, covered by the workload test's idle == 1
        release = asyncio.Event()

        async def hold() -> None:
            async with db.pinned_connection():
                await release.wait()

        holder = asyncio.create_task(hold())
        await asyncio.sleep(0.05)
        waiter = asyncio.create_task(db.ping())
        await asyncio.sleep(0.05)
        stats = db.pool_stats()
        assert (stats.size, stats.in_use, stats.idle, stats.waiting) == (1, 1, 0, 1)
        release.set()
        await asyncio.gather(holder, waiter)
        assert db.pool_stats().in_use == 0
    finally:
        await db.disconnect()


async def test_metrics__operations_by_connector_and_watches_by_status(app, running, store):
    await pending_watch(store, operation_id="op-p", source_id="src-p", document_id="doc-p")
    await verified_watch(store, operation_id="op-v", source_id="src-v", document_id="doc-v")
    await claimed_operation(store, operation_id="op-d", connector_name="drive", source_id="src-d")
    app_metrics = app.state.metrics
    await app_metrics.refresh_tables()
    parsed = samples((await running.get("/metrics")).text)

    by_connector = "connector_operations_by_connector"
    assert value(parsed, by_connector, connector="calendar", state="committed") == 2
    assert value(parsed, by_connector, connector="drive", state="attempted") == 1
    assert value(parsed, by_connector, connector="drive", state="committed") == 0
    watches = "connector_watches"
    assert value(parsed, watches, connector="calendar", status="pending_verification") == 1
    assert value(parsed, watches, connector="calendar", status="verified") == 1
    assert sum(v for (name, _), v in parsed.items() if name == watches) == 2


def test_set_by_connector__past_the_label_limit_the_rest_are_summed_as_other():
    gauge_metrics = Metrics()
    counts = {(f"c{i:03d}", "attempted"): 1 for i in range(MAX_CONNECTOR_LABELS + 5)}
    set_by_connector(gauge_metrics.connector_operations, counts, set())
    parsed = samples(gauge_metrics.exposition().decode())
    by_connector = "connector_operations_by_connector"
    assert value(parsed, by_connector, connector="other", state="attempted") == 5
    assert value(parsed, by_connector, connector="c000", state="attempted") == 1
    assert len([key for key in parsed if key[0] == by_connector]) == MAX_CONNECTOR_LABELS + 1


def test_set_by_connector__a_connector_no_longer_counted_is_dropped():
    gauge_metrics = Metrics()
    gauge = gauge_metrics.connector_operations
    shown = set_by_connector(gauge, {("drive", "attempted"): 2, ("mail", "attempted"): 1}, set())
    set_by_connector(gauge, {("mail", "attempted"): 3}, shown)

    parsed = samples(gauge_metrics.exposition().decode())
    by_connector = "connector_operations_by_connector"
    assert [
        (dict(labels)["connector"], v)
        for (name, labels), v in parsed.items()
        if name == by_connector
    ] == [("mail", 3)]


def test_observe_sweep__counts_each_kind_of_deleted_row() -> None:
    metrics = Metrics()

    metrics.observe_sweep(
        SweepResult(operations=3, pending_auth=1, batches=1, tombstones=2, sign_ins=4)
    )

    deleted = {
        kind: metrics.registry.get_sample_value(
            "connector_sweeper_deleted_rows_total", {"kind": kind}
        )
        for kind in ("operations", "pending_auth", "tombstones", "sign_ins")
    }
    assert deleted == {"operations": 3, "pending_auth": 1, "tombstones": 2, "sign_ins": 4}


async def test_metrics__lease_operations_counts_its_takeovers_of_marked_sends(app, running, clock):
    """leaseOperations counts an abandoned send as acquireLease does: of two lapsed leases it
    takes over, the one whose run marked a send is one takeover; the other is none."""
    gql = GraphQLClient(running)
    for operation_id, source_id in [("op-1", "evt-1"), ("op-2", "evt-2")]:
        await gql.run(
            "ClaimOperation",
            input=claim_input(
                operationID=operation_id,
                sourceID=source_id,
                deterministicEventID=f"det-{operation_id}",
                leaseExpiresAt=clock.now + 1_000,
            ),
        )
    marked = {"callerDID": "did:key:caller", "operationID": "op-1", "leaseToken": "lease-A"}
    await gql.run("MarkSendStarted", input=marked | {"marker": "run-1"})
    clock.advance(2_000)

    leased = await gql.run(
        "LeaseOperations", input={"leaseToken": "lease-B", "leaseMs": 60_000, "limit": 10}
    )

    attempts = {o["operationID"]: o["attempts"] for o in leased["leaseOperations"]["operations"]}
    assert attempts == {"op-1": 1, "op-2": 0}
    parsed = samples((await running.get("/metrics")).text)
    assert value(parsed, "connector_lease_takeovers_total") == 1
