"""The dashboard on an operator's bad day, in a real browser: a per-row action touches its
row, a bulk action runs to its end, the newest failures come first, and what a row risks is
said where it is seen."""

import pytest

from tests.ui.seed import api_of, claimed_many, repair_failed

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


BULK_ATTEMPTED = '{ cancellableCount(filter: {connectorName: "bulk"}) }'


@pytest.mark.slow
async def test_bulk_cancel__4000_rows_with_one_confirmation_and_its_progress(page, seeded):
    async with api_of(seeded) as api:
        now = (await api("{ serverTime }"))["serverTime"]
        ids = [f"op-bulk-{n:04}" for n in range(4000)]
        await claimed_many(api, ids, now, connectorName="bulk", accountKey="b-1")
    await page.goto(seeded.url + "/ui#/operations?state=ATTEMPTED&connector=bulk")
    await page.locator("#operations tr[data-operation]").first.wait_for()

    await page.get_by_role("button", name="Cancel the matching ATTEMPTED operations").click()
    confirm = page.get_by_role("group", name="Confirm: Cancel the matching ATTEMPTED operations")
    assert "this touches 4000 rows." in await confirm.inner_text()
    await confirm.get_by_role("button", name="Confirm").click()

    running = page.get_by_role("group", name="Running: Cancel the matching ATTEMPTED operations")
    await running.locator("progress").wait_for()
    assert " of 4000 done" in await running.inner_text()
    await page.locator("#notice", has_text="Cancelled 4000 operations.").wait_for(timeout=60_000)
    assert "still match" not in await page.locator("#notice").inner_text()
    assert await confirm.count() == 0 and await running.count() == 0
    async with api_of(seeded) as api:
        assert (await api(BULK_ATTEMPTED))["cancellableCount"] == 0


async def test_bulk_cancel__stop_ends_after_the_round_and_offers_to_go_on(page, seeded):
    async with api_of(seeded) as api:
        now = (await api("{ serverTime }"))["serverTime"]
        ids = [f"op-bulk-{n:04}" for n in range(1500)]
        await claimed_many(api, ids, now, connectorName="bulk", accountKey="b-1")
    await page.goto(seeded.url + "/ui#/operations?state=ATTEMPTED&connector=bulk")
    await page.locator("#operations tr[data-operation]").first.wait_for()
    await page.get_by_role("button", name="Cancel the matching ATTEMPTED operations").click()
    confirm = page.get_by_role("group", name="Confirm: Cancel the matching ATTEMPTED operations")
    await confirm.get_by_role("button", name="Confirm").click()

    await page.get_by_role("button", name="Stop").click()

    await page.locator("#notice", has_text="Cancelled 1000 operations. 500 still match").wait_for()
    await confirm.locator("text=this touches 500 rows.").wait_for()
    async with api_of(seeded) as api:
        assert (await api(BULK_ATTEMPTED))["cancellableCount"] == 500
    await confirm.get_by_role("button", name="Confirm").click()
    await page.locator("#notice", has_text="Cancelled 500 operations.").wait_for()
