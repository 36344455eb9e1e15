"""Times on the dashboard, in a real browser: shown in UTC, local time or relative to now, the
user's choice, kept across a reload; a time shown is typed back the same way."""

import re

from tests.ui.conftest import sign_in_link


async def test_times__local_in_new_york_shown_typed_back_and_kept(browser, server, seeded):
    context = await browser.new_context(timezone_id="America/New_York", bypass_csp=True)
    page = await context.new_page()
    try:
        await page.goto(await sign_in_link(server))
        await page.get_by_role("button", name="Sign out").wait_for()
        url = seeded.url + f"/ui#/operations?caller=did:key:worker&id={seeded.failed}"
        await page.goto(url)
        row = page.locator(f'#operations tr[data-operation="{seeded.failed}"]')
        updated = row.locator("td time").last
        utc = (await updated.inner_text()).strip()

        await page.get_by_label("Times").select_option("local")
        await page.wait_for_function(
            "([s, utc]) => (document.querySelector(s)?.textContent.trim() ?? utc) !== utc",
            arg=[f'#operations tr[data-operation="{seeded.failed}"] td:last-child time', utc],
        )
        local = (await updated.inner_text()).strip()
        assert not local.endswith("Z") and local != utc, local

        await page.get_by_label("Updated from (local time)").fill(local.replace(" ", "T"))
        await page.get_by_role("button", name="Apply").click()
        await page.wait_for_function("location.hash.includes('after_time')")
        await row.wait_for()

        await page.reload()
        assert await page.get_by_label("Times").input_value() == "local"
        await page.get_by_label("Times").select_option("relative")
        await page.wait_for_function(
            "([s]) => / ago$|^in /.test(document.querySelector(s)?.textContent.trim() ?? '')",
            arg=[f'#operations tr[data-operation="{seeded.failed}"] td:last-child time'],
        )
        assert re.search(r"ago$|^in ", (await updated.inner_text()).strip())
    finally:
        await context.close()
