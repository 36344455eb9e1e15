"""The Starlette application: ``/graphql``, ``/healthz``, ``/readyz``, ``/metrics`` and the
dashboard at ``/ui``."""

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from functools import partial
from typing import Any

from prometheus_client import make_asgi_app
from starlette.applications import Starlette
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import (
    RedirectResponse,
    Response,
)
from starlette.routing import Mount, Route, WebSocketRoute
from starlette.staticfiles import StaticFiles
from starlette.types import Receive, Scope, Send

from server.auth import (
    SIGN_IN_PATH,
    Authentication,
    Authenticator,
    authenticator,
)
from server.graph import build_schema
from server.graphql_view import GraphQLApp
from server.http_server import ShutdownCut, listening
from server.lean_lane import LeanLane
from server.live import Hub, LiveLimits
from server.metrics import Metrics, metrics_endpoint, refreshing
from server.pages import (
    DASHBOARD_ASSETS,
    GRAPHIQL_ASSETS,
    SIGN_IN_ASSETS,
    NoFraming,
    dashboard,
    dashboard_documents,
)
from server.request_body import RequestBody
from server.responses import (
    JsonResponse,
    http_exception,
)
from server.sessions import Sessions
from server.settings import Settings
from server.sweeper import Retention, Sweeper
from server.telemetry import RequestTelemetry
from server.tracing import trace_store, tracer_for
from store import ConnectorStore
from store.database import Database
from store.errors import DatabaseUnavailable

log = logging.getLogger("connector_store")


async def graphql_redirect(_: Request) -> Response:
    """``GET /`` leads to the API (and its GraphiQL page in a browser)."""
    return RedirectResponse("/graphql", status_code=308)


async def healthz(_: Request) -> Response:
    """The process is up."""
    return JsonResponse({"status": "ok"})


async def readyz(request: Request) -> Response:
    """The database answers (and, on SQLite, its file is still the one opened)."""
    try:
        await request.app.state.store.db.ping()
    except DatabaseUnavailable as error:
        log.warning("readiness check failed: %s", error)
        return JsonResponse({"status": "unavailable"}, status_code=503)
    return JsonResponse({"status": "ok"})


@contextlib.asynccontextmanager
async def sweeping(
    settings: Settings, store: ConnectorStore, metrics: Metrics | None = None
) -> AsyncIterator[Sweeper | None]:
    """Run the background sweeper for the block, unless ``SWEEPER=false``; stop it (cancel
    and wait) when the block ends. Each run is reported to ``metrics``."""
    if not settings.sweeper:
        log.info("sweeper: off (SWEEPER=false)")
        yield None
        return
    sweeper = Sweeper(
        store,
        interval_s=settings.sweep_interval_seconds,
        retention=Retention.of(settings),
        batch=settings.sweep_batch,
        on_result=None if metrics is None else metrics.observe_sweep,
    )
    sweeper.start()
    try:
        yield sweeper
    finally:
        await sweeper.stop()


@contextlib.asynccontextmanager
async def observing(
    settings: Settings, store: ConnectorStore, metrics: Metrics | None, tracer: Any
) -> AsyncIterator[None]:
    """Metrics and tracing for the block: the store traced when a tracer is given, the table
    gauges refreshed, and the metrics port served when ``METRICS_PORT`` is set (on this
    event loop, with the API's HTTP bounds: ``server.http_server.listening``)."""
    if tracer is not None:
        trace_store(store, tracer)
    if metrics is None:
        yield
        return
    metrics.store = store
    async with contextlib.AsyncExitStack() as stack:
        if settings.metrics_port is not None:
            await stack.enter_async_context(
                listening(
                    make_asgi_app(metrics.registry), settings, settings.host, settings.metrics_port
                )
            )
            log.info("metrics: served on %s:%d/metrics", settings.host, settings.metrics_port)
        async with refreshing(metrics, settings.metrics_refresh_seconds):
            yield


POOL_CLOSE_GRACE_S = 10.0


async def close_pool(db: Database, grace_s: float = POOL_CLOSE_GRACE_S) -> None:
    """Close the pool, waiting at most ``grace_s`` for connections in use to come back.

    A connection whose backend died in the middle of a transaction can stay checked out for
    good (``databases`` fails its rollback and never releases it); asyncpg's close would then
    wait forever, so past the grace the pool is closed by force (asyncpg terminates it when
    its close is cancelled).
    """
    try:
        async with asyncio.timeout(grace_s):
            await db.disconnect()
    except TimeoutError:
        log.warning(
            "database: pool closed by force after %s s (connections never released)", grace_s
        )
        return
    log.info("database: pool closed")


def middleware(
    settings: Settings, auth: Authenticator, metrics: Metrics | None, tracer: Any
) -> list[Middleware]:
    """The app's middleware, outermost first, each run once per request (Starlette builds
    the stack once):

    1. ``NoFraming``: every response forbids framing, whatever made it.
    2. ``RequestTelemetry``: the request id, the log line, metrics and span of every response.
    3. ``ShutdownCut``: 503 to a request still running when the shutdown's grace ends.
    4. ``CORSMiddleware``, only when ``CORS_ORIGINS`` is set.
    5. ``Authentication``: the bearer token; its viewer goes in the request's scope.
    6. ``RequestBody``: 413 past ``MAX_BODY_BYTES``, 408 past ``BODY_TIMEOUT_SECONDS``."""
    cors = (
        [
            Middleware(
                CORSMiddleware,
                allow_origins=settings.cors_origin_list,
                allow_methods=["GET", "POST"],
                allow_headers=["Authorization", "Content-Type"],
                max_age=600,
            )
        ]
        if settings.cors_origin_list
        else []
    )
    return [
        Middleware(NoFraming),
        Middleware(RequestTelemetry, metrics=metrics, tracer=tracer),
        Middleware(ShutdownCut),
        *cors,
        Middleware(Authentication, authenticator=auth),
        Middleware(
            RequestBody, max_bytes=settings.max_body_bytes, timeout_s=settings.body_timeout_seconds
        ),
    ]


def create_app(
    settings: Settings | None = None,
    store: ConnectorStore | None = None,
    tracer: Any = None,
    *,
    auth: Authenticator | None = None,
) -> "ConnectorApp":
    """The ASGI app. Given a connected ``store`` it uses it as is; otherwise it opens
    ``settings.database_url`` at start-up and closes it at shutdown (migrate first).
    ``tracer``: an OpenTelemetry tracer (default: one for ``OTEL_EXPORTER_OTLP_ENDPOINT``,
    or none).

    Every request but ``/healthz``, ``/readyz``, the pages and their assets and the sign-in
    code's exchange needs a bearer token checked by ``auth`` (by default the one
    ``settings`` describe); people sign in with a one-time link (``server.sessions``).
    Every response forbids framing (``NoFraming``)."""
    settings = settings or Settings()
    auth = auth or authenticator(settings)
    metrics = Metrics() if settings.metrics else None
    if tracer is None:
        tracer = tracer_for(settings.otel_exporter_otlp_endpoint)

    limits = LiveLimits(
        per_connection=settings.max_subscriptions_per_connection,
        per_viewer=settings.max_subscriptions_per_viewer,
        queue=settings.subscription_queue,
        recheck_ms=settings.wakeup_recheck_ms,
    )

    @contextlib.asynccontextmanager
    async def serving(app: Starlette, store: ConnectorStore) -> AsyncIterator[None]:
        app.state.store = store
        app.state.hub = Hub(store, limits, metrics)
        async with (
            observing(settings, store, metrics, tracer),
            sweeping(settings, store, metrics) as app.state.sweeper,
            app.state.hub.running(settings.listen_database_url or None),
        ):
            yield

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if store is not None:
            async with serving(app, store):
                yield
            return
        db = settings.database()
        await db.connect()
        try:
            async with serving(app, ConnectorStore(db)):
                yield
        finally:
            await close_pool(db)

    sessions = Sessions(auth, settings.session_ttl_seconds)
    graphql = GraphQLApp(
        build_schema(settings),
        graphiql=settings.graphiql,
        authenticator=auth,
        max_response_bytes=settings.max_response_bytes,
        retain_failed_ms=settings.retain_failed_seconds * 1000,
        max_subscriptions_per_connection=settings.max_subscriptions_per_connection,
        connection_init_timeout_s=settings.header_timeout_seconds,
    )
    app = ConnectorApp(
        routes=[
            Route("/", graphql_redirect),
            Route("/graphql", graphql, methods=["GET", "POST"]),
            WebSocketRoute("/graphql", graphql),
            Route("/healthz", healthz),
            Route("/readyz", readyz),
            Route(SIGN_IN_PATH, sessions.sign_in, methods=["POST"]),
            Route("/auth/renew", sessions.renew, methods=["POST"]),
            Route("/auth/sign-out", sessions.sign_out, methods=["POST"]),
            *(
                [
                    Route("/ui", dashboard),
                    Route("/ui/dashboard.graphql", dashboard_documents),
                    Mount("/ui/assets", StaticFiles(directory=DASHBOARD_ASSETS), name="ui"),
                ]
                if settings.dashboard
                else []
            ),
            *(
                [Route("/metrics", metrics_endpoint)]
                if metrics is not None and settings.metrics_port is None
                else []
            ),
        ],
        middleware=middleware(settings, auth, metrics, tracer),
        lifespan=lifespan,
        exception_handlers={StarletteHTTPException: http_exception},
    )
    if settings.graphiql:
        app.mount("/graphiql", StaticFiles(directory=GRAPHIQL_ASSETS), name="graphiql")
    if settings.graphiql or settings.dashboard:
        app.mount("/signin", StaticFiles(directory=SIGN_IN_ASSETS), name="signin")
    if store is not None:
        app.state.store = store
        app.state.hub = Hub(store, limits, metrics)
    app.state.metrics = metrics
    if settings.lean_lane and tracer is None:
        app.lane = LeanLane(
            partial(Starlette.__call__, app),
            app,
            graphql.schema,  # type: ignore[arg-type]
            graphql,
            auth,
            metrics,
            max_body_bytes=settings.max_body_bytes,
            body_timeout_s=settings.body_timeout_seconds,
            cors=bool(settings.cors_origin_list),
        )
    return app


class ConnectorApp(Starlette):
    """The Starlette app with the lean lane in front (``server.lean_lane``: known documents
    answered in one pass; every other request, and every request when ``lane`` is None,
    goes to Starlette)."""

    lane: LeanLane | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        lane = self.lane
        if lane is None:
            await super().__call__(scope, receive, send)
            return
        await lane(scope, receive, send)
