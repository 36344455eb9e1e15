"""Finding operations on the dashboard, in a real browser: by operation id, and in several
states at once."""


async def test_operations__search_by_operation_id(page, seeded):
    await page.goto(seeded.url + "/ui#/operations")
    await page.locator("#operations tr[data-operation]").nth(1).wait_for()

    await page.get_by_label("Operation ID").fill(seeded.failed)
    await page.get_by_role("button", name="Apply").click()

    await page.wait_for_function(
        "document.querySelectorAll('#operations tbody tr[data-operation]').length === 1"
    )
    shown = await page.locator("#operations tbody tr[data-operation]").get_attribute(
        "data-operation"
    )
    assert shown == seeded.failed


async def test_operations__several_states_at_once(page, seeded):
    await page.goto(seeded.url + "/ui#/operations")
    await page.locator("#operations tr[data-operation]").nth(1).wait_for()

    await page.get_by_label("States").select_option(["FAILED", "COMMITTED"])
    await page.get_by_role("button", name="Apply").click()
    await page.wait_for_function("location.hash.includes('state=COMMITTED')")

    await page.wait_for_function(
        "document.querySelectorAll('#operations tbody tr[data-operation]').length === 3"
    )
    states = await page.locator("#operations td[data-state]").all_inner_texts()
    assert sorted(states) == ["COMMITTED", "COMMITTED", "FAILED"], states
    selected = await page.get_by_label("States").evaluate(
        "s => [...s.selectedOptions].map(o => o.value)"
    )
    assert selected == ["COMMITTED", "FAILED"]
