"""Prometheus metrics: ``GET /metrics`` (or a separate port with ``METRICS_PORT``).

Each app has its own ``CollectorRegistry``, so two apps in one process (the tests) never
share counters. Counters are bumped where the work happens: the request middleware
(requests, latency), the sweeper's callback (runs, rows deleted) and the resolvers'
results (lease takeovers and contested sends the store reported). Gauges of table sizes
(operations by state, and by connector name and state; watches by connector name and
verification status; due operations and watches) are refreshed by a background task every
``METRICS_REFRESH_SECONDS``, never counted per scrape. The pool gauges read the database's
gate when scraped (no query).
"""

import asyncio
import contextlib
import logging
import os
import re
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector
from starlette.requests import Request
from starlette.responses import Response

from resolvers.permissions import METRICS_SCOPE
from server.responses import request_error
from store import ConnectorStore, background
from store.records import OPERATION_STATES as OPERATION_STATES_ALL

if TYPE_CHECKING:
    from server.sweeper import SweepResult

STOP_GRACE_S = 10.0
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
"""Set by ``serve --workers`` (``server.workers``): the folder prometheus_client's
multiprocess mode keeps every worker's values in."""

log = logging.getLogger("connector_store.metrics")

OPERATION_STATES = tuple(sorted(OPERATION_STATES_ALL))
MAX_OPERATION_NAMES = 200
"""Distinct GraphQL operation names a process labels before the rest become ``other``."""
OPERATION_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")


MAX_CONNECTOR_LABELS = 100
"""Distinct connector names labelled before the rest are summed as ``other``."""


def set_by_connector(
    gauge: Gauge, counts: dict[tuple[str, str], int], shown: set[tuple[str, str]]
) -> set[tuple[str, str]]:
    """Set ``gauge`` to ``counts`` (by connector name and a second label), the first
    ``MAX_CONNECTOR_LABELS`` names (sorted) as themselves and the rest summed as ``other``,
    and return the labels it set. Labels ``shown`` before (what the last call returned) and
    no longer counted are dropped, or set to 0 under ``serve --workers`` (prometheus_client's
    multiprocess mode keeps every label a worker wrote and cannot drop one)."""
    kept = set(sorted({connector for connector, _ in counts})[:MAX_CONNECTOR_LABELS])
    summed: dict[tuple[str, str], int] = {}
    for (connector, second), n in counts.items():
        key = (connector if connector in kept else "other", second)
        summed[key] = summed.get(key, 0) + n
    for labels in shown - summed.keys():
        if MULTIPROC_ENV in os.environ:
            gauge.labels(*labels).set(0)
        else:
            gauge.remove(*labels)
    for (connector, second), n in summed.items():
        gauge.labels(connector, second).set(n)
    return set(summed)


def metrics_allowed(request: Request) -> bool:
    """The one place ``/metrics`` is authorized: the request's token (checked by the
    authentication middleware) must hold the ``service`` or the ``metrics`` scope.
    ``METRICS_PORT`` serves the metrics on a port of their own instead, without a token."""
    viewer = request.scope.get("viewer")
    return viewer is not None and (viewer.is_service or METRICS_SCOPE in viewer.scopes)


class PoolCollector(Collector):
    """``connector_db_pool_connections``: the database gate read at each scrape (no query):
    on PostgreSQL connections in use and idle and calls waiting for one; on SQLite the
    write queue (lock held or not, writers waiting)."""

    def __init__(self, metrics: "Metrics") -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            "connector_db_pool_connections",
            "The database gate: connections in use, idle, and calls waiting for one.",
            labels=["state"],
        )
        store = self.metrics.store
        if store is not None:
            stats = store.db.pool_stats()
            family.add_metric(["in_use"], stats.in_use)
            family.add_metric(["idle"], stats.idle)
            family.add_metric(["waiting"], stats.waiting)
        yield family


class Metrics:
    """The server's metrics, registered in their own registry."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.operations_shown: set[tuple[str, str]] = set()
        self.watches_shown: set[tuple[str, str]] = set()
        r = self.registry
        self.requests = Counter(
            "connector_requests",
            "GraphQL requests by operation name and outcome (ok or the first error's code).",
            ["operation", "outcome"],
            registry=r,
        )
        self.latency = Histogram(
            "connector_request_duration_seconds",
            "Time to answer a GraphQL request, by operation name.",
            ["operation"],
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
            registry=r,
        )
        r.register(PoolCollector(self))
        self.operations = Gauge(
            "connector_operations",
            "Operations by state (refreshed every METRICS_REFRESH_SECONDS).",
            ["state"],
            registry=r,
            multiprocess_mode="livemostrecent",
        )
        self.connector_operations = Gauge(
            "connector_operations_by_connector",
            "Operations by connector name and state (refreshed every METRICS_REFRESH_SECONDS;"
            " past 100 connector names, the rest are summed as other).",
            ["connector", "state"],
            registry=r,
            multiprocess_mode="livemostrecent",
        )
        self.watches = Gauge(
            "connector_watches",
            "Projection watches by connector name and verification status (refreshed every"
            " METRICS_REFRESH_SECONDS; past 100 connector names, the rest are summed as other).",
            ["connector", "status"],
            registry=r,
            multiprocess_mode="livemostrecent",
        )
        self.due_operations = Gauge(
            "connector_due_operations",
            "Operations a worker may pick up now: attempted, due, lease free or lapsed.",
            registry=r,
            multiprocess_mode="livemostrecent",
        )
        self.due_watches = Gauge(
            "connector_due_watches",
            "Pending watches whose next verification is due (refreshed periodically).",
            registry=r,
            multiprocess_mode="livemostrecent",
        )
        self.refreshed = Gauge(
            "connector_table_gauges_refreshed_timestamp_seconds",
            "When the table gauges were last refreshed (0: never).",
            registry=r,
            multiprocess_mode="livemostrecent",
        )
        self.sweeps = Counter(
            "connector_sweeper_runs",
            "Sweeper runs by result: swept, skipped (another replica held the lock), failed.",
            ["result"],
            registry=r,
        )
        self.swept_rows = Counter(
            "connector_sweeper_deleted_rows",
            "Rows the sweeper deleted, by kind: operations, pending_auth, tombstones, "
            "operation_events, watch_events, sign_ins.",
            ["kind"],
            registry=r,
        )
        self.lease_takeovers = Counter(
            "connector_lease_takeovers",
            "Leases (acquireLease, each operation leaseOperations leased) that took over a "
            "lapsed run's marked send (counted attempt).",
            registry=r,
        )
        self.contested_sends = Counter(
            "connector_contested_sends",
            "markSendStarted calls that found another run's mark: the attempt is contested.",
            registry=r,
        )
        self.subscriptions = Gauge(
            "connector_subscriptions",
            "Open subscriptions, by root field (summed over the workers).",
            ["field"],
            registry=r,
            multiprocess_mode="livesum",
        )
        self.subscription_events = Counter(
            "connector_subscription_events",
            "Events delivered to subscribers, by root field.",
            ["field"],
            registry=r,
        )
        self.store: ConnectorStore | None = None
        self._names: set[str] = set()
        for state in OPERATION_STATES:
            self.operations.labels(state)
        for result in ("swept", "skipped", "failed"):
            self.sweeps.labels(result)
        for kind in ("operations", "pending_auth", "tombstones"):
            self.swept_rows.labels(kind)

    def opened(self, field: str) -> None:
        """A subscription of root field ``field`` started (``server.live.Observer``)."""
        self.subscriptions.labels(field).inc()

    def closed(self, field: str) -> None:
        """A subscription of root field ``field`` ended."""
        self.subscriptions.labels(field).dec()

    def delivered(self, field: str) -> None:
        """An event of root field ``field`` went to its subscriber."""
        self.subscription_events.labels(field).inc()

    def operation_label(self, name: str | None) -> str:
        """A bounded label for a client-chosen operation name."""
        if not name:
            return "anonymous"
        if not OPERATION_NAME.fullmatch(name):
            return "other"
        if name not in self._names:
            if len(self._names) >= MAX_OPERATION_NAMES:
                return "other"
            self._names.add(name)
        return name

    def observe_request(self, operation: str | None, outcome: str, seconds: float) -> None:
        label = self.operation_label(operation)
        self.requests.labels(label, outcome).inc()
        self.latency.labels(label).observe(seconds)

    def observe_sweep(self, result: "SweepResult | None", failed: bool = False) -> None:
        """The sweeper's callback after each run."""
        if failed:
            self.sweeps.labels("failed").inc()
        elif result is None:
            self.sweeps.labels("skipped").inc()
        else:
            self.sweeps.labels("swept").inc()
            self.swept_rows.labels("operations").inc(result.operations)
            self.swept_rows.labels("pending_auth").inc(result.pending_auth)
            self.swept_rows.labels("tombstones").inc(result.tombstones)
            self.swept_rows.labels("operation_events").inc(result.operation_events)
            self.swept_rows.labels("watch_events").inc(result.watch_events)
            self.swept_rows.labels("sign_ins").inc(result.sign_ins)

    async def refresh_tables(self) -> None:
        """Count operations by state and the due operations and watches (the store's
        ``count_backlog``: indexed queries), and operations and watches by connector name
        (``count_by_connector``: two grouping queries)."""
        assert self.store is not None
        now = self.store.clock()
        backlog = await self.store.retention.count_backlog(now)
        counts = backlog.operations_by_state
        for state in set(OPERATION_STATES) | set(counts):
            self.operations.labels(state).set(counts.get(state, 0))
        self.due_operations.set(backlog.due_operations)
        self.due_watches.set(backlog.due_watches)
        by_connector = await self.store.retention.count_by_connector()
        self.operations_shown = set_by_connector(
            self.connector_operations, by_connector.operations, self.operations_shown
        )
        self.watches_shown = set_by_connector(
            self.watches, by_connector.watches, self.watches_shown
        )
        self.refreshed.set(now / 1000)

    def exposition(self) -> bytes:
        """The metrics in Prometheus' text format; under ``serve --workers`` (prometheus_client's
        multiprocess mode, ``PROMETHEUS_MULTIPROC_DIR`` set) the counters, histograms and
        gauges of every worker, summed (gauges: the value a live worker set last), and this
        worker's pool."""
        if MULTIPROC_ENV not in os.environ:
            return generate_latest(self.registry)
        registry = CollectorRegistry()
        MultiProcessCollector(registry)
        registry.register(PoolCollector(self))
        return generate_latest(registry)


async def metrics_endpoint(request: Request) -> Response:
    """``GET /metrics``: the Prometheus text format; 403 when ``metrics_allowed`` refuses."""
    if not metrics_allowed(request):
        return request_error(403, "scraping /metrics needs a token with the metrics scope")
    metrics: Metrics = request.app.state.metrics
    return Response(metrics.exposition(), media_type=CONTENT_TYPE_LATEST)


@contextlib.asynccontextmanager
async def refreshing(metrics: Metrics, interval_s: float) -> AsyncIterator[None]:
    """Refresh the table gauges now and every ``interval_s`` seconds for the block.

    Stopping is cooperative, as the sweeper's: a refresh in flight finishes its query
    (cancelling one mid-query can leave a pooled connection unreleased); only one stuck
    past ``STOP_GRACE_S`` is cancelled.
    """
    stopping = asyncio.Event()

    async def loop() -> None:
        while not stopping.is_set():
            try:
                await metrics.refresh_tables()
            except Exception as error:
                log.warning("metrics: refreshing the table gauges failed: %s", error)
            await background.set_within(stopping, interval_s)

    task = asyncio.create_task(loop(), name="connector-store-metrics")
    try:
        yield
    finally:
        stopping.set()
        done, _ = await asyncio.wait({task}, timeout=STOP_GRACE_S)
        if not done:
            await background.stop(task)
