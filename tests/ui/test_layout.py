"""Every view of the dashboard in light and dark, at a desktop's and a phone's width: each is
its own module, follows the system's colour scheme with AA contrast, and never grows wider
than the screen. ``UI_SCREENSHOTS`` (``make screenshots``) saves each view in each."""

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.ui.conftest import sign_in_link
from tests.ui.seed import Seeded
from tests.ui.test_dashboard import screenshot
from tests.ui.test_trust import CONTRAST

PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1280, "height": 900}
AXE = Path(__file__).parent / "vendor" / "axe.min.js"
"""axe-core (npm, vendored for the tests only; never served): injected into each view."""
VIEWS = ["overview", "operations", "operation", "watch", "failures", "watches", "accounts"]


def view_url(seeded: Seeded, view: str, watch: str) -> str:
    """The address of ``view`` (``watch``: the repair-failed watch's hash)."""
    if view == "operation":
        return seeded.url + f"/ui#/operation?caller=did:key:worker&id={seeded.failed}"
    if view == "watch":
        return seeded.url + "/ui" + watch
    return seeded.url + f"/ui#/{view}"


@contextlib.asynccontextmanager
async def viewing(
    browser: Any, server: Any, viewport: dict[str, int], scheme: str
) -> AsyncIterator[Any]:
    """A signed-in page with ``viewport`` and the system's colour ``scheme``."""
    context = await browser.new_context(viewport=viewport, color_scheme=scheme, bypass_csp=True)
    page = await context.new_page()
    page.set_default_timeout(10_000)
    page.requests = []
    page.on("request", lambda request: page.requests.append(request.url))
    try:
        await page.goto(await sign_in_link(server))
        await page.get_by_role("button", name="Sign out").wait_for()
        yield page
    finally:
        await context.close()


async def opened(page: Any, url: str) -> None:
    """Open ``url`` as a new document and wait for its view's table or fields."""
    await page.goto("about:blank")
    await page.goto(url)
    await page.locator("main h2").first.wait_for()
    await page.locator("main table, main dl").first.wait_for()


async def axe_violations(page: Any) -> list[str]:
    """axe-core's violations of the page as it is (rule id, impact, the first node)."""
    await page.add_script_tag(path=str(AXE))
    found = await page.evaluate("axe.run(document).then((r) => r.violations)")
    return [f"{v['id']} ({v['impact']}): {v['nodes'][0]['html'][:120]}" for v in found]


async def watch_hash(page: Any, seeded: Seeded) -> str:
    await opened(page, seeded.url + "/ui#/failures")
    return await page.locator("#failed-watches tr[data-watch] a").first.get_attribute("href")


async def test_views__each_is_its_own_module_and_axe_finds_no_violation(browser, server, seeded):
    async with viewing(browser, server, DESKTOP, "light") as page:
        watch = await watch_hash(page, seeded)
        loaded = {url.rsplit("/", 1)[-1] for url in page.requests if "/ui/assets/views/" in url}
        widths = {}
        for view in VIEWS:
            await opened(page, view_url(seeded, view, watch))
            widths[view] = await page.evaluate("document.documentElement.scrollWidth")
            assert await axe_violations(page) == [], view
            await screenshot(page, view)
    assert all(width <= DESKTOP["width"] for width in widths.values()), widths
    assert loaded == {f"{view}.js" for view in VIEWS}, loaded


@pytest.mark.parametrize("scheme", ["light", "dark"])
async def test_phone__no_view_is_wider_than_the_screen(browser, server, seeded, scheme):
    async with viewing(browser, server, PHONE, scheme) as page:
        watch = await watch_hash(page, seeded)
        widths = {}
        for view in VIEWS:
            await opened(page, view_url(seeded, view, watch))
            widths[view] = await page.evaluate("document.documentElement.scrollWidth")
            assert await axe_violations(page) == [], (view, scheme)
            await screenshot(page, f"{view}-{scheme}-phone")
    assert all(width <= PHONE["width"] for width in widths.values()), widths


async def test_dark__every_view_is_dark_with_readable_text(browser, server, seeded):
    async with viewing(browser, server, DESKTOP, "dark") as page:
        watch = await watch_hash(page, seeded)
        for view in VIEWS:
            await opened(page, view_url(seeded, view, watch))
            background = await page.evaluate(
                "getComputedStyle(document.documentElement).background"
            )
            assert "rgb(21, 25, 29)" in background, (view, background)
            for selector in ["main h2", "main td.zero", "main .note", "main a", "main th"]:
                found = page.locator(selector)
                if await found.count():
                    ratio = await found.first.evaluate(CONTRAST)
                    assert ratio >= 4.5, (view, selector, ratio)
            assert await axe_violations(page) == [], view
            await screenshot(page, f"{view}-dark")
