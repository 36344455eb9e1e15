"""What makes an operator trust the dashboard, in a real browser: stale data never looks
live, changes made elsewhere appear, times are shown and typed in one zone, labels say what
they show, bulk actions say exact counts before and what remains after, and the page stays
readable and usable from the keyboard."""

import contextlib
from collections.abc import AsyncIterator

import httpx

from tests.e2e.live import live_server
from tests.tokens import bearer, mint
from tests.ui.conftest import sign_in_link
from tests.ui.seed import Api, Seeded

EXPIRES_S = 4
"""A typed token's life in the stale-badge test: long enough to see the page go live."""


@contextlib.asynccontextmanager
async def api_of(seeded: Seeded) -> AsyncIterator[Api]:
    async with httpx.AsyncClient(base_url=seeded.url, headers=bearer(seeded.token)) as http:
        yield Api(http)


async def test_live__an_expired_token_stops_saying_live(browser, ui_database_url, tmp_path):
    # No leeway: the server ends the token's subscriptions when its ``exp`` passes.
    with live_server(tmp_path, ui_database_url, "expiry", {"JWT_LEEWAY_SECONDS": "0"}) as server:
        context = await browser.new_context()
        page = await context.new_page()
        try:
            await page.goto(server.url + "/ui")
            await page.get_by_label("Bearer token", exact=False).fill(mint(ttl=EXPIRES_S))
            await page.get_by_role("button", name="Sign in").click()
            await page.locator('#live[data-live="live"]').wait_for()

            await page.locator('#live[data-live="stopped"]').wait_for(
                timeout=(EXPIRES_S + 4) * 1000
            )
            assert "expired" in await page.locator("#live").get_attribute("title")
        finally:
            await context.close()


async def test_overview__a_pause_made_through_the_api_appears_without_a_reload(page, seeded):
    await page.goto(seeded.url + "/ui#/overview")
    await page.locator("#paused-accounts", has_text="None").wait_for()
    await page.evaluate("window.notReloaded = true")

    async with api_of(seeded) as api:
        await api(
            'mutation { pauseAccount(input: {connectorName: "calendar", accountKey: "acct-1"})'
            " { connectorPaused } }"
        )
    await page.evaluate("window.dispatchEvent(new Event('focus'))")

    await page.locator('#paused-accounts [data-paused="calendar/acct-1"]').wait_for()
    assert await page.evaluate("window.notReloaded === true")


async def test_accounts__a_paused_connector_with_no_operations_is_listed(page, seeded):
    async with api_of(seeded) as api:
        await api(
            'mutation { setAccountLimit(input: {connectorName: "mail", accountKey: "box-1", '
            "maxInFlight: 3}) { account { accountKey } } }"
        )
        await api('mutation { pauseAccount(input: {connectorName: "mail"}) { connectorPaused } }')

    await page.goto(seeded.url + "/ui#/accounts")
    row = page.locator('#accounts tr[data-account="mail/box-1"]')
    await row.wait_for()
    assert "with its connector" in await row.locator("[data-paused-state]").inner_text()
    await page.get_by_role("button", name="Resume connector mail").wait_for()

    await page.goto(seeded.url + "/ui#/overview")
    await page.locator('#paused-accounts [data-paused="mail/box-1"]').wait_for()


async def test_filters__a_shown_time_typed_back_in_new_york_finds_the_operation(
    browser, server, seeded
):
    context = await browser.new_context(timezone_id="America/New_York", bypass_csp=True)
    page = await context.new_page()
    try:
        await page.goto(await sign_in_link(server))
        await page.get_by_role("button", name="Sign out").wait_for()
        await page.goto(
            seeded.url + f"/ui#/operations?caller=did:key:worker&document=doc-{seeded.failed}"
        )
        row = page.locator(f'#operations tr[data-operation="{seeded.failed}"]')
        shown = (await row.locator("td time").last.inner_text()).strip()
        typed = shown.removesuffix("Z").replace(" ", "T")

        await page.get_by_label("Updated from").fill(typed)
        await page.get_by_role("button", name="Apply").click()
        await page.wait_for_function("location.hash.includes('after_time')")

        await row.wait_for()
    finally:
        await context.close()


async def test_failures__the_time_column_says_last_updated_not_failed_at(page, seeded):
    await page.goto(seeded.url + "/ui#/failures")
    await page.locator("#failed-operations tr[data-operation]").first.wait_for()
    headers = await page.locator("#failed-operations thead th").all_inner_texts()
    assert "Last updated" in headers and "Failed at" not in headers
    headers = await page.locator("#failed-watches thead th").all_inner_texts()
    assert "Last updated" in headers and "Failed at" not in headers


async def test_watch__its_status_is_coloured(page, seeded):
    await page.goto(seeded.url + "/ui#/failures")
    await page.locator("#failed-watches tr[data-watch] a").click()
    status = page.locator('dd[data-field="verificationStatus"]')
    await status.wait_for()
    colour = await status.evaluate("e => getComputedStyle(e).color")
    text = await page.locator("dd[data-field=ownerDID]").evaluate("e => getComputedStyle(e).color")
    assert colour != text, colour


async def test_labels__words_and_links_are_spaced(browser, seeded, page):
    await page.goto(seeded.url + "/ui#/failures")
    await page.locator("#failed-watches tr[data-watch] a").click()
    item = page.locator('#watch-operation-links li[data-operation="op-repair"]')
    await item.wait_for()
    assert "op-repair did:key:worker COMMITTED, 1 attempt" in await item.inner_text()

    context = await browser.new_context()
    fresh = await context.new_page()
    try:
        await fresh.goto(seeded.url + "/ui")
        text = await fresh.locator("main").inner_text()
        assert "where the server runs (connector-store serve prints one too" in text, text
    finally:
        await context.close()


async def test_failures__a_long_reissue_id_does_not_widen_the_page(page, seeded):
    async with api_of(seeded) as api:
        await api(
            'mutation { reissueOperations(input: {filter: {operationID: "op-failed"}}) '
            "{ remaining } }"
        )
    await page.goto(seeded.url + "/ui#/failures")
    await page.locator("#failed-operations td a", has_text="reissue:").wait_for()
    width = await page.evaluate("document.documentElement.scrollWidth")
    assert width <= 1280, width


CONTRAST = """
(e) => {
  const rgb = (c) => c.match(/\\d+(\\.\\d+)?/g).slice(0, 3).map(Number);
  const lum = ([r, g, b]) => {
    const f = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; };
    return 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b);
  };
  let back = e;
  while (back && getComputedStyle(back).backgroundColor.match(/rgba\\(.*, 0\\)$|transparent/)) {
    back = back.parentElement;
  }
  const a = lum(rgb(getComputedStyle(e).color));
  const b = lum(rgb(back ? getComputedStyle(back).backgroundColor : "rgb(255,255,255)"));
  return (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
}
"""


async def test_overview__zero_cells_meet_aa_contrast(page, seeded):
    await page.goto(seeded.url + "/ui#/overview")
    zero = page.locator("#operation-counts td.zero").first
    await zero.wait_for()
    ratio = await zero.evaluate(CONTRAST)
    assert ratio >= 4.5, ratio


async def test_confirmation__takes_the_focus_and_escape_leaves_it(page, seeded):
    await page.goto(seeded.url + "/ui#/failures")
    button = page.get_by_role("button", name="Reissue every FAILED operation")
    await button.click()
    confirm = page.get_by_role("group", name="Confirm: Reissue every FAILED operation")
    await confirm.wait_for()
    await page.wait_for_function("document.activeElement.textContent.trim() === 'Confirm'")

    await page.keyboard.press("Escape")
    await confirm.wait_for(state="detached")
    await page.wait_for_function(
        "document.activeElement.textContent.trim() === 'Reissue every FAILED operation'"
    )


async def test_notice__a_new_action_clears_the_last_ones_message(page, seeded):
    await page.goto(seeded.url + "/ui#/accounts")
    row = page.locator('#accounts tr[data-account="calendar/acct-1"]')
    await row.get_by_role("button", name="Pause").click()
    await (
        row.get_by_role("group", name="Confirm: Pause")
        .get_by_role("button", name="Confirm")
        .click()
    )
    await page.locator("#notice", has_text="calendar / acct-1 is paused.").wait_for()

    await page.get_by_role("button", name="Pause connector calendar").click()
    await page.get_by_role("group", name="Confirm: Pause connector calendar").wait_for()
    assert await page.locator("#notice").inner_text() == ""
