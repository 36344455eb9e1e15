"""The dashboard in a real browser, on a real server: the overview's counts are the API's,
every view renders, and the page asks nothing of any host but the server.

``UI_SCREENSHOTS=<folder>`` (``make screenshots``) saves a screenshot of each view there."""

import os
from pathlib import Path
from typing import Any

import httpx

from tests.tokens import bearer
from tests.ui.seed import FAILURE, REPAIR_FAILURE, WORKER, Seeded

COUNTS = """
{
  operationCounts { connectorName accountKey state count due inFlight }
  watchCounts { connectorName status count }
}
"""


async def api_counts(seeded: Seeded) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=seeded.url, headers=bearer(seeded.token)) as http:
        body = (await http.post("/graphql", json={"query": COUNTS})).json()
    assert "errors" not in body, body
    return body["data"]


async def shown(page: Any, label: str) -> int:
    """The number in the overview's cell ``data-count=label``."""
    return int((await page.locator(f'[data-count="{label}"]').inner_text()).strip())


async def screenshot(page: Any, name: str) -> None:
    folder = os.environ.get("UI_SCREENSHOTS")
    if folder:
        await page.locator('#live[data-live="live"]').wait_for()
        Path(folder).mkdir(parents=True, exist_ok=True)
        await page.screenshot(path=str(Path(folder) / f"{name}.png"), full_page=True)


async def test_overview__counts_match_the_api(page, seeded):
    await page.goto(seeded.url + "/ui#/overview")
    await page.locator("#operation-counts tbody tr").first.wait_for()

    counts = await api_counts(seeded)

    assert counts["operationCounts"], counts
    for group in counts["operationCounts"]:
        at = f"{group['connectorName']}/{group['accountKey']}"
        assert await shown(page, f"{at}/{group['state']}") == group["count"], group
    for at in {f"{g['connectorName']}/{g['accountKey']}" for g in counts["operationCounts"]}:
        mine = [
            g for g in counts["operationCounts"] if f"{g['connectorName']}/{g['accountKey']}" == at
        ]
        assert await shown(page, f"{at}/due") == sum(g["due"] for g in mine)
        assert await shown(page, f"{at}/inFlight") == sum(g["inFlight"] for g in mine)
        assert await shown(page, f"{at}/total") == sum(g["count"] for g in mine)
    for group in counts["watchCounts"]:
        assert await shown(page, f"{group['connectorName']}/{group['status']}") == group["count"]
    await screenshot(page, "overview")


async def test_sign_in__a_token_typed_in_the_box(browser, seeded):
    context = await browser.new_context()
    page = await context.new_page()
    try:
        await page.goto(seeded.url + "/ui")
        await page.get_by_label("Bearer token", exact=False).fill(seeded.token)
        await page.get_by_role("button", name="Sign in").click()
        await page.locator("#operation-counts").wait_for()
        await page.get_by_role("button", name="Sign out").click()
        await page.get_by_role("button", name="Sign in").wait_for()
    finally:
        await context.close()


async def test_views__each_renders(page, seeded):
    url = seeded.url + "/ui"
    await page.goto(url + "#/operations")
    await page.locator("#operations tbody tr[data-operation]").first.wait_for()
    rows = await page.locator("#operations tbody tr[data-operation]").count()
    await screenshot(page, "operations")

    await page.get_by_label("State").select_option("FAILED")
    await page.get_by_role("button", name="Apply").click()
    await page.locator("#operations caption").wait_for()
    await page.wait_for_function(
        "document.querySelectorAll('#operations tbody tr[data-operation]').length === 1"
    )
    assert await page.locator("#operations td[data-state]").all_inner_texts() == ["FAILED"]

    await page.goto(url + f"#/operation?caller=did:key:worker&id={seeded.committed}")
    await page.locator('[data-field="verificationStatus"]').wait_for()
    assert await page.locator('dd[data-field="state"]').inner_text() == "COMMITTED"
    await screenshot(page, "operation")

    await page.goto(url + "#/failures")
    await page.locator(f'#failed-operations tr[data-operation="{seeded.failed}"]').wait_for()
    assert "permanent 422" in await page.locator("#failed-operations tbody").inner_text()
    assert await page.locator("#failed-watches tbody tr").count() == 1
    await screenshot(page, "failures")

    await page.goto(url + "#/accounts")
    await page.locator("#accounts tbody tr").first.wait_for()
    assert await page.locator("#accounts tbody tr").count() == 3
    await screenshot(page, "accounts")
    assert rows == 6


async def test_failed_operation__its_page_shows_the_error_and_the_history(page, seeded):
    await page.goto(seeded.url + f"/ui#/operation?caller={WORKER}&id={seeded.failed}")
    await page.locator("#operation-events tbody tr[data-event]").first.wait_for()

    assert await page.locator('dd[data-field="state"]').inner_text() == "FAILED"
    assert FAILURE in await page.locator("#last-error").inner_text()
    assert await page.locator('dd[data-field="lastError"]').inner_text() == FAILURE
    events = page.locator("#operation-events tbody tr[data-event]")
    assert [await row.get_attribute("data-event") for row in await events.all()] == [
        "CLAIMED",
        "RECORDED",
    ]
    recorded = (await events.nth(1).locator("td").all_inner_texts())[1:]
    assert recorded == ["RECORDED", "permanent 422", FAILURE, "ATTEMPTED → FAILED", "1", "service"]

    await page.goto(seeded.url + "/ui#/failures")
    failed = page.locator(f'#failed-operations tr[data-operation="{seeded.failed}"]')
    assert await failed.locator("[data-last-error]").inner_text() == FAILURE
    assert await page.locator("#failed-watches [data-last-error]").all_inner_texts() == [
        REPAIR_FAILURE
    ]


async def test_page__no_request_to_any_host_but_the_server(page, seeded):
    for view in ("overview", "operations", "failures", "accounts"):
        # A fresh document for each view, so the wait below is answered by this view's
        # table, not the previous view's.
        await page.goto("about:blank")
        await page.goto(seeded.url + f"/ui#/{view}")
        await page.locator("main table").first.wait_for()
    await page.goto(seeded.url + f"/ui#/operation?caller=did:key:worker&id={seeded.failed}")
    await page.locator('[data-field="state"]').wait_for()
    await page.goto(seeded.url + f"/ui#/operation?caller=did:key:worker&id={seeded.committed}")
    await page.locator("#watch-link").click()
    await page.locator("#watch-events").wait_for()

    assert page.requests.urls, "no request was recorded"
    assert page.requests.outside(seeded.url) == []


async def test_repair_failed_watch__its_page_from_the_failures_shows_the_error_and_history(
    page, seeded
):
    await page.goto(seeded.url + "/ui#/failures")
    await page.locator("#failed-watches tr[data-watch] a").click()
    await page.locator("#watch-events tbody tr[data-event]").first.wait_for()

    assert await page.locator('dd[data-field="verificationStatus"]').inner_text() == "REPAIR_FAILED"
    assert REPAIR_FAILURE in await page.locator("#last-error").inner_text()
    assert await page.locator('dd[data-field="lastError"]').inner_text() == REPAIR_FAILURE
    events = page.locator("#watch-events tbody tr[data-event]")
    actions = [await row.get_attribute("data-event") for row in await events.all()]
    assert actions[0] == "OPENED" and actions[-1] == "REPAIR_FAILED", actions
    failed = (await events.nth(len(actions) - 1).locator("td").all_inner_texts())[1:]
    assert failed == [
        "REPAIR_FAILED",
        "service",
        "1",
        "PENDING_VERIFICATION → REPAIR_FAILED",
        "1",
        REPAIR_FAILURE,
    ]
    await screenshot(page, "watch")

    await page.locator('#watch-operation-links li[data-operation="op-repair"] a').click()
    await page.locator('dd[data-field="operationID"]').wait_for()
    assert await page.locator('dd[data-field="operationID"]').inner_text() == "op-repair"
    await page.locator("#watch-link").click()
    await page.locator("#watch-events tbody tr[data-event]").first.wait_for()
    assert "op-repair" in await page.locator("#watch-operation-links").inner_text()
