"""The Starlette application: ``/graphql``, ``/healthz`` and ``/readyz``."""

import contextlib
import json
import logging
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
from cross_web import HTTPException
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from strawberry.asgi import GraphQL
from strawberry.schema import BaseSchema

from resolvers.context import Context
from resolvers.loaders import Loaders
from resolvers.permissions import Viewer
from server.graph import build_schema
from server.settings import Settings
from server.sweeper import Sweeper
from store import ConnectorStore
from store.database import Database
from store.errors import DatabaseUnavailable

log = logging.getLogger("connector_store")


GRAPHIQL_ASSETS = Path(__file__).parent / "static" / "graphiql"


class GraphQLApp(GraphQL):
    """Strawberry's ASGI view with our request context and a GraphiQL page whose assets
    this server serves itself (at ``/graphiql``), so it works with no internet."""

    def __init__(self, schema: BaseSchema, *, graphiql: bool) -> None:
        super().__init__(schema, graphql_ide="graphiql" if graphiql else None)

    def encode_json(self, data: object) -> bytes:
        """A response body, by orjson (several times faster than ``json.dumps``); a value
        orjson refuses (an integer past 64 bits) falls back to the standard encoder."""
        try:
            return orjson.dumps(data)
        except TypeError:
            return json.dumps(data).encode()

    def parse_json(self, data: str | bytes) -> Any:
        """A JSON request body, or GET's ``variables``/``extensions``: each must be an object
        (a list is a batch, which Strawberry refuses with 400); anything else is a 400."""
        try:
            value = self.decode_json(data)
        except (ValueError, RecursionError) as error:
            raise HTTPException(400, "Unable to parse request body as JSON") from error
        if not isinstance(value, (dict, list)):
            raise HTTPException(400, "The JSON must be an object")
        return value

    def parse_query_params(self, params: Any) -> dict[str, Any]:
        """GET's parameters; ``variables=null`` or ``extensions=null`` mean absent, as in a
        POST body."""
        given = {name: value for name, value in dict(params).items() if value != "null"}
        return super().parse_query_params(given)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Strawberry's view, but a request it refuses (400, 405) gets a JSON error with a
        code, like every other error, rather than plain text."""
        if scope["type"] != "http":
            await super().__call__(scope, receive, send)
            return
        try:
            response = await self.run(Request(scope, receive))
        except HTTPException as refused:
            response = request_error(refused.status_code, refused.reason)
        await response(scope, receive, send)

    async def render_graphql_ide(self, request: Request) -> Response:
        return FileResponse(GRAPHIQL_ASSETS / "index.html", media_type="text/html")

    async def get_context(self, request: Request, response: Response) -> Context:  # type: ignore[override]
        store: ConnectorStore = request.app.state.store
        return Context(
            store=store,
            viewer=Viewer.service(),
            loaders=Loaders(store),
            request_id=request.headers.get("x-request-id") or uuid.uuid4().hex,
        )


MAX_ECHOED_CHARS = 200
MUTATION_OVER_GET = "mutations are not allowed when using GET"


def request_error(status: int, message: str) -> JSONResponse:
    """A GraphQL-shaped error response for a request refused before execution.

    A mutation sent by GET gets 405 with ``Allow: POST`` (GraphQL over HTTP); the message
    is cut to 200 characters, since some echo what the client sent.
    """
    headers = {}
    if message == MUTATION_OVER_GET:
        status, headers = 405, {"Allow": "POST"}
    code = {405: "METHOD_NOT_ALLOWED", 413: "PAYLOAD_TOO_LARGE"}.get(status, "BAD_REQUEST")
    if len(message) > MAX_ECHOED_CHARS:
        message = message[:MAX_ECHOED_CHARS] + "…"
    return JSONResponse(
        {"errors": [{"message": message, "extensions": {"code": code}}]},
        status_code=status,
        headers=headers,
    )


class BodySizeLimit:
    """Answers 413 to a request whose body is larger than ``max_bytes``."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_bytes):
            await self.too_large(scope, receive, send)
            return
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.max_bytes:
                raise BodyTooLarge
            return message

        try:
            await self.app(scope, counted, send)
        except BodyTooLarge:
            await self.too_large(scope, receive, send)

    async def too_large(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = request_error(413, f"request body is larger than {self.max_bytes} bytes")
        await response(scope, receive, send)


class BodyTooLarge(Exception):
    """Raised inside ``BodySizeLimit`` when a streamed body passes the limit."""


async def healthz(_: Request) -> Response:
    """The process is up."""
    return JSONResponse({"status": "ok"})


async def readyz(request: Request) -> Response:
    """The database answers (and, on SQLite, its file is still the one opened)."""
    try:
        await request.app.state.store.db.ping()
    except DatabaseUnavailable as error:
        log.warning("readiness check failed: %s", error)
        return JSONResponse({"status": "unavailable"}, status_code=503)
    return JSONResponse({"status": "ok"})


@contextlib.asynccontextmanager
async def sweeping(settings: Settings, store: ConnectorStore) -> AsyncIterator[Sweeper | None]:
    """Run the background sweeper for the block, unless ``SWEEPER=false``; stop it (cancel
    and wait) when the block ends."""
    if not settings.sweeper:
        log.info("sweeper: off (SWEEPER=false)")
        yield None
        return
    sweeper = Sweeper(
        store,
        interval_s=settings.sweep_interval_seconds,
        retain_ms=settings.retain_finished_seconds * 1000,
        batch=settings.sweep_batch,
    )
    sweeper.start()
    try:
        yield sweeper
    finally:
        await sweeper.stop()


def create_app(settings: Settings | None = None, store: ConnectorStore | None = None) -> Starlette:
    """The ASGI app. Given a connected ``store`` it uses it as is; otherwise it opens
    ``settings.database_url`` at start-up and closes it at shutdown (migrate first)."""
    settings = settings or Settings()

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if store is not None:
            app.state.store = store
            async with sweeping(settings, store) as app.state.sweeper:
                yield
            return
        db = Database(
            settings.database_url,
            pool_size=settings.db_pool_size,
            wait_timeout_s=settings.db_wait_timeout_seconds,
        )
        await db.connect()
        app.state.store = ConnectorStore(db)
        try:
            async with sweeping(settings, app.state.store) as app.state.sweeper:
                yield
        finally:
            await db.disconnect()

    graphql = GraphQLApp(build_schema(settings), graphiql=settings.graphiql)
    app = Starlette(
        routes=[
            Route("/graphql", graphql, methods=["GET", "POST"]),
            Route("/healthz", healthz),
            Route("/readyz", readyz),
        ],
        lifespan=lifespan,
    )
    if settings.graphiql:
        app.mount("/graphiql", StaticFiles(directory=GRAPHIQL_ASSETS), name="graphiql")
    if store is not None:
        app.state.store = store
    app.add_middleware(BodySizeLimit, max_bytes=settings.max_body_bytes)
    return app
