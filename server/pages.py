"""The pages: the dashboard at ``/ui``, GraphiQL's at ``/graphql`` (served by
``server.graphql_view``), their assets and policies, and ``NoFraming`` for every response."""

from pathlib import Path

from starlette.requests import Request
from starlette.responses import (
    HTMLResponse,
    Response,
)
from starlette.types import ASGIApp, Message, Receive, Scope, Send

GRAPHIQL_ASSETS = Path(__file__).parent / "static" / "graphiql"
DASHBOARD_ASSETS = Path(__file__).parent / "static" / "ui"
SIGN_IN_ASSETS = Path(__file__).parent / "static" / "signin"
"""The pages' sign-in script (``/signin/session.js``), shared by the dashboard and GraphiQL."""
DASHBOARD_DOCUMENTS = (
    Path(__file__).resolve().parents[1] / "graphql" / "operations" / "dashboard.graphql"
)
"""The documents the dashboard sends: it loads them from the server (``/ui/dashboard.graphql``),
so they live in one file, the one the schema tests validate."""


DASHBOARD_POLICY = (
    "default-src 'self'; connect-src 'self'; img-src 'self' data:; object-src 'none'; "
    "base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
"""The dashboard's Content-Security-Policy: the page loads and calls nothing but this server,
and no page of another site may frame it."""
GRAPHIQL_POLICY = (
    "default-src 'self'; connect-src 'self'; img-src 'self' data:; style-src 'self' "
    "'unsafe-inline'; font-src 'self' data:; object-src 'none'; base-uri 'none'; "
    "form-action 'self'; frame-ancestors 'none'"
)
"""GraphiQL's Content-Security-Policy: the dashboard's, but styles may be inline: GraphiQL's
dialogs add ``<style>`` elements of their own (react-remove-scroll). No inline script runs:
the page's own is ``/graphiql/start.js``."""
GRAPHIQL_PAGE = GRAPHIQL_ASSETS / "index.html"
NO_FRAMING = "frame-ancestors 'none'"
NO_FRAMING_HEADER = NO_FRAMING.encode()


class NoFraming:
    """ASGI middleware: every HTTP response forbids framing, whatever made it (a page, an
    asset, an error): ``X-Frame-Options: DENY``, and ``Content-Security-Policy:
    frame-ancestors 'none'`` unless the response set a policy of its own (the pages' say
    ``frame-ancestors 'none'`` too: a test holds them to it). So no page of another site can
    put one of ours under a click of its own."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def framed(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": framed_headers(message.get("headers", []))}
            await send(message)

        await self.app(scope, receive, framed)


def framed_headers(headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """A response's ``headers`` (raw) with the framing refused (``NoFraming``): every way a
    response is sent adds them here (``server.lean_lane`` too)."""
    framed = list(headers)
    names = {name.lower() for name, _ in framed}
    framed.append((b"x-frame-options", b"DENY"))
    if b"content-security-policy" not in names:
        framed.append((b"content-security-policy", NO_FRAMING_HEADER))
    return framed


async def dashboard(_: Request) -> Response:
    """The dashboard's page at ``/ui``, the same for every request: it holds no token. It
    signs in with a sign-in link's code (``server.sessions``), or a token typed in."""
    return HTMLResponse(
        (DASHBOARD_ASSETS / "index.html").read_text(),
        headers={"Cache-Control": "no-store", "Content-Security-Policy": DASHBOARD_POLICY},
    )


async def dashboard_documents(_: Request) -> Response:
    """``graphql/operations/dashboard.graphql``, the documents the dashboard sends."""
    return Response(
        DASHBOARD_DOCUMENTS.read_text(),
        media_type="application/graphql",
        headers={"Cache-Control": "no-cache"},
    )
