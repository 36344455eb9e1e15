"""The dashboard on an operator's bad day, in a real browser: a per-row action touches its
row, a bulk action runs to its end, the newest failures come first, and what a row risks is
said where it is seen."""

from tests.ui.seed import api_of, repair_failed

WATCH_STATUSES = (
    '{ watches(filter: {connectorName: "calendar", accountKey: "acct-3"}) '
    "{ edges { node { sourceID verificationStatus } } } }"
)


async def test_rearm__one_watch_of_three_siblings_touches_that_watch(page, seeded):
    async with api_of(seeded) as api:
        now = (await api("{ serverTime }"))["serverTime"]
        # Three watches of one owner, connector, model and account, none with a document.
        for n in range(3):
            await repair_failed(api, f"op-sibling-{n}", now, accountKey="acct-3", documentID=None)
    await page.goto(
        seeded.url
        + "/ui#/watch?owner=did:key:alice&connector=calendar&model=Event&account=acct-3"
        + "&source=evt-op-sibling-1"
    )

    await page.get_by_role("button", name="Re-arm").click()

    await page.locator("#notice", has_text="Re-armed 1 watch.").wait_for()
    async with api_of(seeded) as api:
        edges = (await api(WATCH_STATUSES))["watches"]["edges"]
    statuses = {e["node"]["sourceID"]: e["node"]["verificationStatus"] for e in edges}
    assert statuses == {
        "evt-op-sibling-0": "REPAIR_FAILED",
        "evt-op-sibling-1": "PENDING_VERIFICATION",
        "evt-op-sibling-2": "REPAIR_FAILED",
    }
