"""Finding and acting on rows in a real browser: failures grouped by kind and message (a
group's operations shown, no wider than a phone, the group reissued after asking its exact
count), rows selected and acted on after asking, and the list of watches with their actions
(checked through the API)."""

from tests.ui.conftest import focus_taken_by
from tests.ui.seed import FAILURE, RECORD, Seeded, claimed, key_of
from tests.ui.test_actions import api
from tests.ui.test_charts import api_of
from tests.ui.test_layout import PHONE, axe_violations

GROUPS = "{ failureGroups { kind message count unreissued } }"


def state_of(operation_id: str) -> str:
    return (
        f'{{ operation(callerDID: "did:key:worker", operationID: "{operation_id}") '
        "{ state lastKind reissuedAs { operationID } } }"
    )


async def cancelled(seeded: Seeded, *operation_ids: str) -> None:
    """Cancel these operations through the API, with one reason: one failure group."""
    for operation_id in operation_ids:
        await api(
            seeded,
            'mutation { cancelOperations(input: {filter: {callerDID: "did:key:worker", '
            f'operationID: "{operation_id}"}}, reason: "provider gone"}}) {{ cancelled }} }}',
        )


async def test_failures__grouped_by_kind_and_message_with_their_operations(page, seeded):
    await cancelled(seeded, "op-live-1", "op-due")
    await page.goto(seeded.url + "/ui#/failures")
    rows = page.locator("#failure-groups tbody > tr[data-group]")
    await rows.first.wait_for()

    shown = [
        [await cell.inner_text() for cell in await row.locator("td").all()][:4]
        for row in await rows.all()
    ]
    groups = (await api(seeded, GROUPS))["failureGroups"]
    assert shown == [
        [g["kind"], g["message"], str(g["count"]), str(g["unreissued"])] for g in groups
    ]
    assert shown == [["cancelled", "provider gone", "2", "2"], ["permanent", FAILURE, "1", "1"]]

    show = rows.first.get_by_role("button", name="Show its operations")
    await show.click()
    detail = page.locator("#group-0 tr[data-operation]")
    await detail.first.wait_for()
    assert (
        await rows.first.get_by_role("button", name="Hide its operations").get_attribute(
            "aria-expanded"
        )
        == "true"
    )
    assert sorted(await detail.evaluate_all("rows => rows.map(r => r.dataset.operation)")) == [
        "op-due",
        "op-live-1",
    ]
    assert await axe_violations(page) == []
    await page.set_viewport_size(PHONE)
    assert await page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]


async def test_failures__a_group_without_a_kind_shows_and_reissues_only_its_own(page, seeded):
    # The seeded permanent failure's message, recorded by a worker that gave no kind: a group
    # of its own, which the filter (kind omitted: any) cannot pick out from the permanent one.
    async with api_of(seeded) as seeding:
        now = (await seeding("{ serverTime }"))["serverTime"]
        given = await claimed(seeding, "op-kindless", now)
        recorded = await seeding(
            RECORD,
            input=key_of(given)
            | {
                "fromState": "ATTEMPTED",
                "toState": "FAILED",
                "version": 0,
                "leaseToken": given["leaseToken"],
                "errorMessage": FAILURE,
            },
        )
        assert recorded["recordOperation"]["applied"]
    await page.goto(seeded.url + "/ui#/failures")
    group = page.locator("#failure-groups tbody > tr[data-group]", has_text="none")
    await group.wait_for()
    assert await group.locator("td[data-count]").inner_text() == "1"

    await group.get_by_role("button", name="Show its operations").click()
    detail = page.locator(f"#group-{await group.get_attribute('data-group')} tr[data-operation]")
    await detail.first.wait_for()

    assert await detail.evaluate_all("rows => rows.map(r => r.dataset.operation)") == [
        "op-kindless"
    ]
    assert await group.get_by_role("button", name="Reissue this group").count() == 0


async def test_failures__a_group_reissued_after_asking_its_exact_count(page, seeded):
    await page.goto(seeded.url + "/ui#/failures")
    group = page.locator('#failure-groups tr[data-kind="permanent"]')
    await group.get_by_role("button", name="Reissue this group").click()

    confirm = group.get_by_role("group", name="Confirm: Reissue this group")
    assert "this touches 1 row." in await confirm.inner_text()
    assert (await api(seeded, state_of(seeded.failed)))["operation"]["reissuedAs"] is None
    await confirm.get_by_role("button", name="Confirm").click()

    await page.locator("#notice", has_text="Reissued as reissue:").wait_for()
    await group.locator("td.num", has_text="0").wait_for()
    assert (await api(seeded, state_of(seeded.failed)))["operation"]["reissuedAs"] is not None


async def test_failures__a_cancelled_group_reissued_only_when_its_risk_is_chosen(page, seeded):
    await cancelled(seeded, "op-live-1")
    await page.goto(seeded.url + "/ui#/failures")
    group = page.locator('#failure-groups tr[data-kind="cancelled"]')
    reissue = group.get_by_role("button", name="Reissue this group")
    await reissue.click()
    confirm = group.get_by_role("group", name="Confirm: Reissue this group")
    assert "this touches 0 rows." in await confirm.inner_text()
    assert await confirm.get_by_role("button", name="Confirm").is_disabled()
    await confirm.get_by_role("button", name="Back").click()

    await page.get_by_label("cancelled ones").check()
    await reissue.click()
    assert "this touches 1 row." in await confirm.inner_text()
    assert "the provider may already hold" in await confirm.inner_text()
    await confirm.get_by_role("button", name="Confirm").click()

    await page.locator("#notice", has_text="Reissued as reissue:").wait_for()
    assert (await api(seeded, state_of("op-live-1")))["operation"]["reissuedAs"] is not None


async def test_operations__selected_rows_cancelled_after_asking(page, seeded):
    await page.goto(seeded.url + "/ui#/operations")
    await page.get_by_label("Select op-live-1").check()
    await page.get_by_label("Select op-due").check()
    await page.locator(".selection", has_text="2 operations selected.").wait_for()

    cancel = page.get_by_role("button", name="Cancel 2 selected ATTEMPTED operations")
    await cancel.click()
    confirm = page.get_by_role("group", name="Confirm: Cancel 2 selected ATTEMPTED operations")
    assert "this touches 2 rows." in await confirm.inner_text()
    assert "Their holders' runs are refused from now on." in await confirm.inner_text()
    await focus_taken_by(confirm)
    await page.keyboard.press("Escape")
    await cancel.wait_for()
    assert (await api(seeded, state_of("op-due")))["operation"]["state"] == "ATTEMPTED"

    await cancel.click()
    await confirm.get_by_role("button", name="Confirm").click()

    await page.locator("#notice", has_text="Cancelled 2 operations.").wait_for()
    await page.locator(".selection", has_text="None selected.").wait_for()
    states = {
        name: (await api(seeded, state_of(name)))["operation"]["state"]
        for name in ("op-live-1", "op-due", "op-live-2")
    }
    assert states == {"op-live-1": "FAILED", "op-due": "FAILED", "op-live-2": "ATTEMPTED"}


async def test_operations__select_all_selects_every_row_of_the_page(page, seeded):
    await page.goto(seeded.url + "/ui#/operations")
    boxes = page.locator("#operations tbody input[type=checkbox]")
    await boxes.first.wait_for()

    await page.get_by_role("checkbox", name="All", exact=True).check()

    count = await boxes.count()
    await page.locator(".selection", has_text=f"{count} operations selected.").wait_for()
    assert await boxes.evaluate_all("boxes => boxes.every(b => b.checked)")
    await page.get_by_role("checkbox", name="All", exact=True).uncheck()
    await page.locator(".selection", has_text="None selected.").wait_for()


async def test_failures__a_selected_failed_operation_reissued(page, seeded):
    await page.goto(seeded.url + "/ui#/failures")
    await page.get_by_label(f"Select {seeded.failed}").check()

    await page.get_by_role("button", name="Reissue 1 selected FAILED operation").click()

    await page.locator("#notice", has_text="Reissued as reissue:").wait_for()
    assert (await api(seeded, state_of(seeded.failed)))["operation"]["reissuedAs"] is not None


async def test_watches__filtered_by_status_and_re_armed(page, seeded):
    await page.goto(seeded.url + "/ui#/watches")
    await page.locator("#watches tr[data-watch]").first.wait_for()
    assert await page.locator("#watches tr[data-watch]").count() == 2

    await page.get_by_label("Status").select_option("REPAIR_FAILED")
    await page.get_by_role("button", name="Apply").click()
    await page.locator('#watches tr[data-watch="evt-op-committed"]').wait_for(state="detached")
    await page.locator('#watches tr[data-watch="evt-op-repair"]').wait_for()
    row = page.locator("#watches tr[data-watch]")
    assert await row.count() == 1
    assert await row.locator("[data-status]").inner_text() == "REPAIR_FAILED"

    await row.get_by_role("button", name="Re-arm").click()

    await page.locator("#notice", has_text="Re-armed 1 watch.").wait_for()
    await page.locator("#watches td", has_text="No watches match.").wait_for()
    data = await api(seeded, "{ watches(filter: {status: REPAIR_FAILED}) { edges { cursor } } }")
    assert data["watches"]["edges"] == []


async def test_watches__verify_again_asks_first(page, seeded):
    await page.goto(seeded.url + "/ui#/watches")
    row = page.locator('#watches tr[data-watch="evt-op-committed"]')
    verify = row.get_by_role("button", name="Verify again")
    await verify.click()
    confirm = row.get_by_role("group", name="Confirm: Verify again")
    assert "a verifier working on this one has its result refused" in await confirm.inner_text()
    await focus_taken_by(confirm)
    await page.keyboard.press("Escape")
    await verify.wait_for()
    generations = "{ watches { edges { node { sourceID repairGeneration } } } }"
    before = {
        e["node"]["sourceID"]: e["node"]["repairGeneration"]
        for e in (await api(seeded, generations))["watches"]["edges"]
    }

    await verify.click()
    await confirm.get_by_role("button", name="Confirm").click()

    await page.locator("#notice", has_text="Opened generation").wait_for()
    after = {
        e["node"]["sourceID"]: e["node"]["repairGeneration"]
        for e in (await api(seeded, generations))["watches"]["edges"]
    }
    assert after == before | {"evt-op-committed": before["evt-op-committed"] + 1}
