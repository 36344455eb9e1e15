"""Signing in, in a real browser, under the pages' own Content-Security-Policy: a sign-in
link signs the dashboard and GraphiQL in (once: the same link again is refused, saying so);
the page renews its session; signing out revokes it and sticks across a reload."""

from typing import Any

import httpx

from tests.e2e.live import Server
from tests.tokens import bearer
from tests.ui.conftest import browsing, sign_in_link, signed_in
from tests.ui.seed import Seeded

STORED = "JSON.parse(sessionStorage.getItem('connector-store-session'))"
VIEWER = {"query": "{ viewer { did } }"}


def csp_violations(page: Any) -> list[str]:
    """The console's Content-Security-Policy complaints of ``page``, as they come."""
    seen: list[str] = []
    page.on(
        "console",
        lambda message: (
            seen.append(message.text) if "Content Security Policy" in message.text else None
        ),
    )
    return seen


async def answer(server: Server, token: str) -> int:
    async with httpx.AsyncClient(base_url=server.url) as http:
        return (await http.post("/graphql", json=VIEWER, headers=bearer(token))).status_code


async def test_sign_in__a_link_signs_the_dashboard_in_once(browser, server, seeded: Seeded):
    link = await sign_in_link(server)
    async with browsing(browser, bypass_csp=False) as page:
        violations = csp_violations(page)
        await page.goto(link)
        await page.locator("#operation-counts tbody tr").first.wait_for()
        assert "sign-in" not in page.url
        assert await page.locator("header .who .mono").inner_text() == "service"
    async with browsing(browser, bypass_csp=False) as again:
        await again.goto(link)
        refused = again.get_by_role("alert")
        await refused.wait_for()
        assert "used already" in await refused.inner_text()
        assert await again.get_by_role("button", name="Sign out").count() == 0
    assert violations == []


async def test_sign_out__revokes_the_session_and_sticks_across_a_reload(browser, server, seeded):
    async with signed_in(browser, server) as page:
        await page.goto(server.url + "/ui#/overview")
        await page.locator("#operation-counts").wait_for()
        token = (await page.evaluate(STORED))["token"]
        assert await answer(server, token) == 200
        await page.get_by_role("button", name="Sign out").click()
        await page.get_by_role("button", name="Sign in").wait_for()
        assert await answer(server, token) == 401
        await page.reload()
        await page.get_by_role("button", name="Sign in").wait_for()
        assert await page.evaluate(STORED) is None
        assert await page.locator("#operation-counts").count() == 0


async def test_renew__the_open_page_renews_its_session(browser, server, seeded):
    async with signed_in(browser, server) as page:
        await page.goto(server.url + "/ui#/overview")
        await page.locator("#operation-counts").wait_for()
        # Its renewal falls due (at half the session's life): the page renews at once.
        await page.evaluate(
            f"sessionStorage.setItem('connector-store-session', "
            f"JSON.stringify({{...{STORED}, renewAt: 0}}))"
        )
        await page.reload()
        await page.wait_for_function(f"{STORED}.renewAt > 0")
        renewed = (await page.evaluate(STORED))["token"]
        await page.locator("#operation-counts").wait_for()
        renewals = [url for url in page.requests.urls if url.endswith("/auth/renew")]
    assert len(renewals) == 1 and await answer(server, renewed) == 200


async def test_graphiql__a_link_signs_it_in_and_a_query_runs(browser, server, seeded):
    link = await sign_in_link(server, page="/graphql")
    async with browsing(browser, bypass_csp=False) as page:
        violations = csp_violations(page)
        await page.goto(link)
        await page.get_by_text("Signed in as service").wait_for()
        assert "sign-in" not in page.url
        await page.locator(".graphiql-execute-button").click()
        result = page.locator(".result-window")
        await result.filter(has_text="serverTime").wait_for()
        assert "UNAUTHENTICATED" not in await result.inner_text()
        await page.get_by_role("button", name="Sign out").click()
        await page.get_by_text("Not signed in").wait_for()
        await page.reload()
        await page.get_by_text("Not signed in").wait_for()
        assert await page.evaluate(STORED) is None
    assert violations == []
