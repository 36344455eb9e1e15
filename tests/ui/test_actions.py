"""Operator actions on the dashboard, in a real browser: shown only to a token that may use
them, asking first when they touch more than one row, and doing what they say (checked
through the API)."""

from typing import Any

import httpx

from tests.tokens import bearer
from tests.ui.conftest import signed_in
from tests.ui.seed import Seeded

LEASE = """
mutation {
  leaseOperations(input: {leaseToken: "probe", leaseMs: 60000, connectorName: "calendar"}) {
    operations { operationID accountKey }
  }
}
"""
STATES = (
    '{ operations(filter: {connectorName: "calendar"}) '
    "{ edges { node { operationID state lastKind } } } }"
)


async def api(seeded: Seeded, query: str) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=seeded.url, headers=bearer(seeded.token)) as http:
        body = (await http.post("/graphql", json={"query": query})).json()
    assert "errors" not in body, body
    return body["data"]


async def due_ids(seeded: Seeded) -> set[str]:
    now = (await api(seeded, "{ serverTime }"))["serverTime"]
    data = await api(seeded, f"{{ dueOperations(now: {now}) {{ operationID }} }}")
    return {op["operationID"] for op in data["dueOperations"]}


async def test_pause__from_the_page_asks_first_then_stops_leasing_for_the_account(page, seeded):
    assert seeded.due in await due_ids(seeded)
    await page.goto(seeded.url + "/ui#/accounts")
    row = page.locator('#accounts tr[data-account="calendar/acct-1"]')

    await row.get_by_role("button", name="Pause").click()
    confirm = row.get_by_role("group", name="Confirm: Pause")
    assert "Nothing of calendar / acct-1 is leased until it is resumed" in (
        await confirm.inner_text()
    )
    assert seeded.due in await due_ids(seeded)
    await confirm.get_by_role("button", name="Confirm").click()
    await page.locator("#notice", has_text="calendar / acct-1 is paused.").wait_for()

    leased = (await api(seeded, LEASE))["leaseOperations"]["operations"]
    assert leased == []
    assert seeded.due not in await due_ids(seeded)
    assert "since" in await row.locator("[data-paused-state]").inner_text()
    await page.goto(seeded.url + "/ui#/overview")
    await page.locator('#paused-accounts [data-paused="calendar/acct-1"]').wait_for()


async def test_cancel__a_filter_touching_two_rows_asks_first_then_says_what_it_did(page, seeded):
    await page.goto(seeded.url + "/ui#/operations?state=ATTEMPTED&connector=calendar")
    await page.locator("#operations tr[data-operation]").nth(1).wait_for()

    await page.get_by_role("button", name="Cancel the matching ATTEMPTED operations").click()
    confirm = page.get_by_role("group", name="Confirm: Cancel the matching ATTEMPTED operations")
    assert "this touches 2 rows" in await confirm.inner_text()
    await confirm.get_by_role("button", name="Confirm").click()
    await page.locator("#notice", has_text="Cancelled 2 operations.").wait_for()

    states = {
        edge["node"]["operationID"]: (edge["node"]["state"], edge["node"]["lastKind"])
        for edge in (await api(seeded, STATES))["operations"]["edges"]
    }
    assert states["op-live-1"] == states[seeded.due] == ("FAILED", "cancelled")


async def test_observer__sees_no_action_buttons_nor_their_controls(browser, server, seeded):
    views = [
        "overview",
        "operations?state=ATTEMPTED&connector=calendar",
        "failures",
        "accounts",
        f"operation?caller=did:key:worker&id={seeded.due}",
        f"operation?caller=did:key:worker&id={seeded.failed}",
    ]
    seen: dict[str, dict[str, int]] = {}
    inputs: dict[str, dict[str, int]] = {}
    for who, sub, scope in [
        ("service", "service", "service"),
        ("observer", "did:key:obs", "observer"),
    ]:
        async with signed_in(browser, server, sub, scope) as page:
            await page.goto(seeded.url + "/ui")
            await page.locator("header .who .mono").wait_for()  # the viewer has loaded
            for view in views:
                # A fresh document for each view: after a change of the hash alone, the
                # previous view's heading and table still answer the waits below.
                await page.goto("about:blank")
                await page.goto(seeded.url + f"/ui#/{view}")
                await page.locator("main h2").first.wait_for()
                await page.locator("main table, main dl").first.wait_for()
                seen.setdefault(who, {})[view] = await page.locator("button.action").count()
                # Controls that only feed an action: row checkboxes, the spread, a cap.
                controls = page.locator("main input[type=checkbox], main input[type=number]")
                inputs.setdefault(who, {})[view] = await controls.count()

    assert all(seen["service"][view] > 0 for view in views if view != "overview"), seen
    assert seen["observer"] == dict.fromkeys(views, 0), seen
    assert inputs["service"]["accounts"] > 0 and inputs["service"]["failures"] > 0, inputs
    assert inputs["observer"] == dict.fromkeys(views, 0), inputs


async def test_operator_reissue_all__skips_the_cancelled_and_says_so(page, seeded):
    await api(
        seeded,
        'mutation { cancelOperations(input: {filter: {operationID: "op-live-1"}}) { cancelled } }',
    )
    await page.goto(seeded.url + "/ui#/failures")
    await page.locator("#failed-operations tr[data-operation]").nth(1).wait_for()

    await page.get_by_role("button", name="Reissue every FAILED operation").click()
    confirm = page.get_by_role("group", name="Confirm: Reissue every FAILED operation")
    await confirm.get_by_role("button", name="Confirm").click()
    notice = page.locator("#notice", has_text="Not reissued: 1 cancelled.")
    await notice.wait_for()

    reissued = await api(
        seeded,
        '{ a: operation(callerDID: "did:key:worker", operationID: "op-failed") '
        "{ reissuedAs { operationID } } "
        'b: operation(callerDID: "did:key:worker", operationID: "op-live-1") '
        "{ reissuedAs { operationID } } }",
    )
    assert reissued["b"]["reissuedAs"] is None
    made = reissued["a"]["reissuedAs"]["operationID"]
    assert await notice.inner_text() == f"Reissued as {made}. Not reissued: 1 cancelled."
