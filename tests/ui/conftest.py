"""Browser tests of the dashboard (``make test-ui``, marker ``ui``): a real
``connector-store serve`` over seeded data, driven by Playwright in Debian's headless
Chromium (``/usr/bin/chromium``; Playwright's own browser download is never used).

Every test runs on SQLite, and on PostgreSQL when ``TEST_DATABASE_URL`` is set (as
``.ci/run`` sets it). Playwright comes from the ``ui`` extra and is imported only here, by
the fixtures, so the rest of the suite collects without it.
"""

import contextlib
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from server.sessions import ADMIN_SCOPE
from server.sessions import sign_in_link as link_to
from store import ConnectorStore
from store.database import Database
from tests.databases import PostgresRun
from tests.e2e.live import Server, live_server
from tests.tokens import SERVICE
from tests.ui.seed import Seeded, seed

CHROMIUM = Path("/usr/bin/chromium")
BACKENDS = ["sqlite"] + (["postgres"] if os.environ.get("TEST_DATABASE_URL") else [])


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.is_relative_to(Path(__file__).parent):
            item.add_marker(pytest.mark.ui)


@pytest.fixture(params=BACKENDS)
async def ui_database_url(
    request: pytest.FixtureRequest, tmp_path: Path, postgres_run: PostgresRun
) -> str:
    """A fresh database for the server: an empty SQLite file (the server migrates it) or the
    run's migrated, truncated PostgreSQL database."""
    if request.param == "sqlite":
        return f"sqlite+aiosqlite:///{tmp_path / 'ui.db'}"
    url = await postgres_run.create()
    await postgres_run.truncate()
    return url


@pytest.fixture
def server(ui_database_url: str, tmp_path: Path) -> Iterator[Server]:
    with live_server(tmp_path, ui_database_url, name="ui") as running:
        yield running


@pytest.fixture
async def seeded(server: Server) -> Seeded:
    """The server with a few operations and watches in every state the views show."""
    return await seed(server.url)


@pytest.fixture(scope="session")
async def browser() -> AsyncIterator[Any]:
    """One headless Chromium for the session."""
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: `make test-ui` installs Debian's chromium")
    from playwright.async_api import async_playwright

    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=str(CHROMIUM), args=["--no-sandbox"]
        )
        yield browser
        await browser.close()


class Requests:
    """Every request a page made (WebSocket upgrades included), by URL."""

    def __init__(self) -> None:
        self.urls: list[str] = []

    def outside(self, origin: str) -> list[str]:
        """The URLs that went anywhere but ``origin`` (``http://host:port``); the page's own
        ``data:`` URLs never leave the browser."""
        own = (origin + "/", origin.replace("http", "ws", 1) + "/", "data:")
        return [url for url in self.urls if not url.startswith(own)]


async def sign_in_link(
    server: Server, sub: str = SERVICE, scope: str = ADMIN_SCOPE, page: str = "/ui"
) -> str:
    """A fresh one-time sign-in link to ``page`` of ``server`` for ``sub`` with ``scope``, as
    ``connector-store sign-in-link`` makes one (a code written to the server's database)."""
    db = Database(server.database_url, pool_size=1)
    await db.connect()
    try:
        issued = await ConnectorStore(db).sign_in.issue_code(sub, scope, ttl_ms=600_000)
    finally:
        await db.disconnect()
    return link_to(server.url, issued.code, page)


@contextlib.asynccontextmanager
async def browsing(browser: Any, *, bypass_csp: bool = True) -> AsyncIterator[Any]:
    """A fresh browser context and page, its requests recorded (``page.requests``)."""
    # The page's Content-Security-Policy already stops any request elsewhere; the tests
    # bypass it so that such a request would be made, and recorded, and fail the test.
    # (Playwright's waits that evaluate a function need it bypassed too.)
    context = await browser.new_context(
        viewport={"width": 1280, "height": 900}, bypass_csp=bypass_csp
    )
    page = await context.new_page()
    requests = Requests()
    page.on("request", lambda request: requests.urls.append(request.url))
    page.on("websocket", lambda socket: requests.urls.append(socket.url))
    page.requests = requests
    page.set_default_timeout(10_000)
    try:
        yield page
    finally:
        await context.close()


@contextlib.asynccontextmanager
async def signed_in(
    browser: Any, server: Server, sub: str = SERVICE, scope: str = ADMIN_SCOPE
) -> AsyncIterator[Any]:
    """A fresh page (``browsing``) signed in to the dashboard as a person is: by opening a
    sign-in link for ``sub`` with ``scope``; then left on ``about:blank``, so that the test
    opens its view as a new document (the session stays in the tab)."""
    async with browsing(browser) as page:
        await page.goto(await sign_in_link(server, sub, scope))
        await page.get_by_role("button", name="Sign out").wait_for()
        await page.goto("about:blank")
        yield page


@pytest.fixture
async def page(browser: Any, server: Server, seeded: Seeded) -> AsyncIterator[Any]:
    """A page signed in as ``service`` by a sign-in link (``signed_in``)."""
    async with signed_in(browser, server) as page:
        yield page


async def focus_taken_by(group: Any) -> None:
    """Waits until the focus is inside ``group`` (a Locator): a confirmation takes it once
    rendered, and a key pressed before then goes to the page, not to it."""
    handle = await group.element_handle()
    await group.page.wait_for_function("(g) => g.contains(document.activeElement)", arg=handle)
