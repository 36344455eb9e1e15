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


THROTTLE = """
mutation {
  throttleAccount(input: {connectorName: "calendar", accountKey: "acct-1", retryAfterMs: 600000}) {
    account { throttledUntil }
  }
}
"""
THROTTLED = (
    '{ accounts(connectorName: "calendar") { edges { node { accountKey throttledUntil } } } }'
)


async def throttled_until(seeded, key: str) -> int | None:
    async with api_of(seeded) as api:
        edges = (await api(THROTTLED))["accounts"]["edges"]
    return next(e["node"]["throttledUntil"] for e in edges if e["node"]["accountKey"] == key)


async def test_overview__a_throttled_account_is_said_and_its_throttle_lifted(page, seeded):
    async with api_of(seeded) as api:
        await api(THROTTLE)
    await page.goto(seeded.url + "/ui#/overview")

    held = page.locator('#paused-accounts [data-throttled="calendar/acct-1"]')
    await held.locator('[data-risk="THROTTLED"]', has_text="throttled until").wait_for()
    assert "every account is leased as usual" not in await page.locator("main").inner_text()
    counts = page.locator("#operation-counts tr", has=page.locator('[data-risk="THROTTLED"]'))
    assert "acct-1" in await counts.inner_text()

    await held.get_by_role("button", name="Lift throttle").click()
    await (
        held.get_by_role("group", name="Confirm: Lift throttle")
        .get_by_role("button", name="Confirm")
        .click()
    )
    await page.locator("#notice", has_text="calendar / acct-1 is no longer throttled.").wait_for()
    assert await throttled_until(seeded, "acct-1") is None
    await page.locator("#paused-accounts", has_text="every account is leased as usual").wait_for()


async def test_accounts__a_throttle_out_of_bounds_is_refused_in_seconds(page, seeded):
    await page.goto(seeded.url + "/ui#/accounts")
    row = page.locator('#accounts tr[data-account="calendar/acct-1"]')
    field = row.get_by_label("Throttle calendar / acct-1 for (seconds)")

    for typed in ["0", "86401", "1.5", ""]:
        await field.fill(typed)
        await row.get_by_role("button", name="Throttle").click()
        notice = page.locator("#notice.error")
        await notice.wait_for()
        said = await notice.inner_text()
        assert "a whole number of seconds from 1 to 86400" in said, (typed, said)
        assert "retryAfterMs" not in said
        assert await field.get_attribute("aria-invalid") == "true"
    assert await throttled_until(seeded, "acct-1") is None


PHONE = {"width": 390, "height": 844}


async def within(locator, width: int, height: int | None = None) -> bool:
    """Whether ``locator`` is inside the screen's width (and its first ``height`` px)."""
    box = await locator.bounding_box()
    inside = box["x"] >= 0 and box["x"] + box["width"] <= width
    return inside and (height is None or box["y"] + box["height"] <= height)


async def test_phone__the_state_and_why_it_failed_are_on_the_screen(page, seeded):
    await page.set_viewport_size(PHONE)
    await page.goto(seeded.url + "/ui#/operations")
    first = page.locator("#operations tbody tr[data-operation]").first
    await first.wait_for()

    assert await within(first.locator("td[data-state]"), PHONE["width"], PHONE["height"])
    await page.get_by_text("Filter", exact=True).click()
    await page.get_by_label("Operation ID").wait_for()

    await page.goto(seeded.url + f"/ui#/operation?caller=did:key:worker&id={seeded.failed}")
    recorded = page.locator('#operation-events tr[data-event="RECORDED"]')
    await recorded.wait_for()
    for cell in ("[data-outcome]", "[data-message]"):
        await recorded.locator(cell).scroll_into_view_if_needed()
        assert await within(recorded.locator(cell), PHONE["width"]), cell


async def test_operation__a_finished_one_reads_in_words_with_its_durations(page, seeded):
    async with api_of(seeded) as api:
        await api(
            'mutation { reissueOperations(input: {filter: {operationID: "op-failed"}}) '
            "{ remaining } }"
        )
    await page.goto(seeded.url + f"/ui#/operation?caller=did:key:worker&id={seeded.failed}")
    await page.locator('dd[data-field="state"]').wait_for()

    terms = await page.locator("#op-fields + dl dt").all_inner_texts()
    assert "Last error" in terms and "lastError" not in terms, terms
    assert await page.locator('dd[data-field="leaseExpiresAt"]').count() == 0
    assert "Ran for " in await page.locator("#op-durations").inner_text()
    reissue = page.get_by_role("link", name="reissue:")
    shown = await reissue.inner_text()
    title = await reissue.locator("[title]").get_attribute("title")
    assert "…" in shown and len(shown) < 30 and title.startswith("reissue:") and len(title) == 72

    await page.goto(seeded.url + "/ui#/operations")
    await page.locator("#operations tbody tr[data-operation]").first.wait_for()
    headers = await page.locator("#operations thead th").all_inner_texts()
    assert "Claimed" in headers, headers


async def test_overview__the_running_work_of_one_account_from_its_in_flight_count(page, seeded):
    async with api_of(seeded) as api:
        key = {"callerDID": "did:key:worker", "operationID": "op-live-1"}
        await api(MARK, input=key | {"leaseToken": "lease-op-live-1", "marker": "worker-7/run-3"})
    await page.goto(seeded.url + "/ui#/overview")

    await page.locator('[data-count="calendar/acct-1/inFlight"] a').click()

    await page.wait_for_function("location.hash.includes('run=LEASED')")
    rows = page.locator("#operations tbody tr[data-operation]")
    await page.locator("#operations caption", has_text="Leased now").wait_for()
    await rows.first.wait_for()
    assert await rows.evaluate_all("rows => rows.map(r => r.dataset.operation)") == ["op-live-1"]
    row = rows.first
    assert await row.locator("[data-marker]").inner_text() == "worker-7/run-3"
    assert await row.locator("[data-lease-until] time").count() == 1
    assert await row.locator('[data-run="LEASED"]').count() == 1
    assert await page.get_by_label("Now").input_value() == "LEASED"


DEFER = """
mutation ($input: DeferOperationInput!) { deferOperation(input: $input) { applied } }
"""


async def test_operation__a_scheduled_retry_retried_now(page, seeded):
    async with api_of(seeded) as api:
        deferred = await api(
            DEFER,
            input={
                "callerDID": "did:key:worker",
                "operationID": seeded.due,
                "delayMs": 600_000,
                "errorMessage": "429 slow down",
            },
        )
        assert deferred["deferOperation"]["applied"]
    await page.goto(seeded.url + f"/ui#/operation?caller=did:key:worker&id={seeded.due}")
    await page.locator('#op-durations [data-run="SCHEDULED"]').wait_for()

    await page.get_by_role("button", name="Retry now").click()

    await page.locator("#notice", has_text="Due now").wait_for()
    await page.locator('#op-durations [data-run="DUE"]').wait_for()
    async with api_of(seeded) as api:
        data = await api(
            f'{{ serverTime operation(callerDID: "did:key:worker", operationID: "{seeded.due}") '
            "{ nextAttemptAt lastError } }"
        )
    assert data["operation"]["nextAttemptAt"] <= data["serverTime"]
    assert data["operation"]["lastError"] == "429 slow down"


async def test_cancel__the_reason_typed_is_in_each_operations_history(page, seeded):
    await page.goto(seeded.url + "/ui#/operations?state=ATTEMPTED&connector=calendar")
    await page.locator("#operations tr[data-operation]").first.wait_for()

    await page.get_by_label("Reason for a cancel").fill("INC-42: provider outage")
    await page.get_by_role("button", name="Cancel the matching ATTEMPTED operations").click()
    confirm = page.get_by_role("group", name="Confirm: Cancel the matching ATTEMPTED operations")
    await confirm.get_by_role("button", name="Confirm").click()
    await page.locator("#notice", has_text="Cancelled 2 operations.").wait_for()

    await page.goto(seeded.url + "/ui#/operation?caller=did:key:worker&id=op-live-1")
    cancelled = page.locator('#operation-events tr[data-event="CANCELLED"] [data-message]')
    assert "INC-42: provider outage" in await cancelled.inner_text()


async def test_operations__found_by_a_fragment_of_its_id_in_another_case(page, seeded):
    async with api_of(seeded) as api:
        now = (await api("{ serverTime }"))["serverTime"]
        await claimed(api, "reissue:7f3a9c0d2e", now, sourceID="evt-x")
    await page.goto(seeded.url + "/ui#/operations")
    await page.locator("#operations tr[data-operation]").nth(1).wait_for()

    await page.get_by_label("Search").fill("7F3A9")
    await page.get_by_role("button", name="Apply").click()

    await page.wait_for_function(
        "document.querySelectorAll('#operations tbody tr[data-operation]').length === 1"
    )
    row = page.locator("#operations tbody tr[data-operation]")
    assert await row.get_attribute("data-operation") == "reissue:7f3a9c0d2e"
    assert "1 operation match." in await page.locator("#operations-total").inner_text()
