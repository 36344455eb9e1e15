"""The dashboard on an operator's bad day, in a real browser: a per-row action touches its
row, a bulk action runs to its end, the newest failures come first, and what a row risks is
said where it is seen."""

import pytest

from tests.ui.seed import MARK, api_of, claimed, claimed_many, failed, key_of, repair_failed

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


CANCEL_UNKNOWN = """
mutation { cancelOperations(input: {filter: {operationID: "op-unknown"}}) { cancelled } }
"""
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


async def test_failures__the_newest_failure_is_on_the_page_and_all_of_them_newest_first(
    page, seeded
):
    async with api_of(seeded) as api:
        now = (await api("{ serverTime }"))["serverTime"]
        for n in range(51):
            await failed(api, f"op-incident-{n:02}", now)
    await page.goto(seeded.url + "/ui#/failures")
    rows = page.locator("#failed-operations tbody tr[data-operation]")
    await rows.first.wait_for()

    shown = await rows.evaluate_all("rows => rows.map(r => r.dataset.operation)")
    assert shown[0] == "op-incident-50" and seeded.failed not in shown, shown
    await page.get_by_role("link", name="all of them").click()
    await page.locator("#operations tbody tr[data-operation]").first.wait_for()
    first = page.locator("#operations tbody tr[data-operation]").first
    assert await first.get_attribute("data-operation") == "op-incident-50"


async def test_reissue__an_unknown_outcome_says_so_and_reissues_anyway_after_its_risk(page, seeded):
    async with api_of(seeded) as api:
        now = (await api("{ serverTime }"))["serverTime"]
        given = await claimed(api, "op-unknown", now)
        await api(MARK, input=key_of(given) | {"leaseToken": given["leaseToken"], "marker": "m"})
        await api(CANCEL_UNKNOWN)
    await page.goto(seeded.url + "/ui#/operation?caller=did:key:worker&id=op-unknown")

    await page.locator('#outcome-unknown [data-risk="OUTCOME_UNKNOWN"]').wait_for()
    await page.get_by_role("button", name="Reissue anyway — may send again").click()
    confirm = page.get_by_role("group", name="Confirm: Reissue anyway — may send again")
    assert "the provider may already hold the write" in await confirm.inner_text()
    await confirm.get_by_role("button", name="Confirm").click()

    await page.locator("#notice", has_text="Reissued as ").wait_for()
    async with api_of(seeded) as api:
        data = await api(
            '{ operation(callerDID: "did:key:worker", operationID: "op-unknown") '
            "{ reissuedAs { state } } }"
        )
    assert data["operation"]["reissuedAs"] == {"state": "ATTEMPTED"}
    await page.goto(seeded.url + "/ui#/operations?state=FAILED")
    row = page.locator('#operations tr[data-operation="op-unknown"]')
    await row.locator('[data-risk="OUTCOME_UNKNOWN"]').wait_for()


async def test_tables__a_state_never_breaks_inside_its_word_on_a_desktop(page, seeded):
    async with api_of(seeded) as api:
        now = (await api("{ serverTime }"))["serverTime"]
        for n in range(3):
            await claimed(
                api,
                f"{n}" + "f" * 63,
                now,
                callerDID="did:key:" + "z" * 60,
                ownerDID="did:key:" + "y" * 60,
                connectorName="calendar-of-a-rather-long-connector-name",
                accountKey="account-with-a-long-key-0123456789",
            )
    await page.set_viewport_size({"width": 1024, "height": 800})
    await page.goto(seeded.url + "/ui#/operations")
    await page.locator("#operations tr[data-operation]").nth(4).wait_for()

    lines = await page.locator("#operations td[data-state]").evaluate_all(
        "cells => cells.map(c => { const r = document.createRange(); "
        "r.selectNodeContents(c.firstChild); return r.getClientRects().length; })"
    )
    assert set(lines) == {1}, lines
