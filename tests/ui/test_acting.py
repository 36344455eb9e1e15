"""Acting from the dashboard, in a real browser: an account's cap and throttle edited where
the token may, and a destructive single-row action that asks first, saying what it risks."""

from tests.ui.test_actions import api

ACCOUNT = (
    '{ accounts(connectorName: "calendar") { edges { node { accountKey maxInFlight '
    "throttledUntil } } } serverTime }"
)


async def account(seeded, key: str) -> tuple[dict, int]:
    data = await api(seeded, ACCOUNT)
    found = [e["node"] for e in data["accounts"]["edges"] if e["node"]["accountKey"] == key]
    return found[0], data["serverTime"]


async def test_accounts__a_cap_and_a_throttle_set_from_the_page(page, seeded):
    await page.goto(seeded.url + "/ui#/accounts")
    row = page.locator('#accounts tr[data-account="calendar/acct-1"]')
    await row.wait_for()

    await row.get_by_label("Cap of calendar / acct-1").fill("3")
    await row.get_by_role("button", name="Set cap").click()
    await page.locator("#notice", has_text="calendar / acct-1: cap 3.").wait_for()
    await row.locator("[data-cap]", has_text="3").wait_for()

    await row.get_by_label("Throttle calendar / acct-1 for (seconds)").fill("120")
    await row.get_by_role("button", name="Throttle").click()
    await page.locator("#notice", has_text="calendar / acct-1 is throttled for 120 s.").wait_for()

    stored, now = await account(seeded, "acct-1")
    assert stored["maxInFlight"] == 3
    assert now + 100_000 < stored["throttledUntil"] <= now + 120_000


async def test_operation__cancel_asks_first_saying_what_it_risks(page, seeded):
    await page.goto(seeded.url + "/ui#/operation?caller=did:key:worker&id=op-live-1")
    await page.get_by_role("button", name="Cancel", exact=True).click()
    confirm = page.get_by_role("group", name="Confirm: Cancel")
    assert "Its holder's run is refused from now on." in await confirm.inner_text()
    assert await api(
        seeded, '{ operation(callerDID: "did:key:worker", operationID: "op-live-1") { state } }'
    ) == {"operation": {"state": "ATTEMPTED"}}

    await confirm.get_by_role("button", name="Confirm").click()
    await page.locator("#notice", has_text="Cancelled 1 operation.").wait_for()
