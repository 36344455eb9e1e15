"""Paging through operations on the dashboard, in a real browser: newest first, the total
that matches, and the first, previous, next and last pages, cursors holding both ways."""

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx

from tests.tokens import bearer
from tests.ui.seed import Api, Seeded, claimed
from tests.ui.test_layout import axe_violations

EXTRA = 120
"""Operations claimed besides the seeded six: 126 in all, more than two pages of 50."""
ROWS = "#operations tbody tr[data-operation]"


@contextlib.asynccontextmanager
async def api_of(seeded: Seeded) -> AsyncIterator[Api]:
    async with httpx.AsyncClient(base_url=seeded.url, headers=bearer(seeded.token)) as http:
        yield Api(http)


async def shown(page: Any) -> list[str]:
    return await page.locator(ROWS).evaluate_all("rows => rows.map(r => r.dataset.operation)")


async def turned(page: Any, name: str, first_row: str) -> list[str]:
    """Follow the pager's link ``name``; the page's rows once its first row is ``first_row``."""
    await page.get_by_role("navigation", name="Pages").get_by_role("link", name=name).click()
    await page.wait_for_function(
        f"document.querySelector('{ROWS}')?.dataset.operation === {first_row!r}"
    )
    return await shown(page)


async def test_operations__newest_first_with_the_total_and_every_page(page, seeded):
    async with api_of(seeded) as api:
        now = (await api("{ serverTime }"))["serverTime"]
        for index in range(EXTRA):
            await claimed(api, f"op-page-{index:03d}", now)
    newest = [f"op-page-{index:03d}" for index in reversed(range(EXTRA))]
    await page.goto(seeded.url + "/ui#/operations")
    await page.locator(ROWS).first.wait_for()

    await page.get_by_label("Order").select_option("newest")
    await page.get_by_role("button", name="Apply").click()
    await page.wait_for_function(
        f"document.querySelector('{ROWS}')?.dataset.operation === 'op-page-119'"
    )
    pager = page.get_by_role("navigation", name="Pages")

    assert await shown(page) == newest[:50]
    assert await page.locator("#operations-total").inner_text() == "126 operations match."
    assert await pager.get_by_role("link", name="Previous page").count() == 0
    assert await axe_violations(page) == []

    # The last page is the last 50 (a full page); paging back from it meets the first page
    # with what is left, and forward again retraces the same pages.
    seeded_six = {*seeded.live, seeded.committed, seeded.failed, seeded.due, "op-repair"}
    last = await turned(page, "Last page", "op-page-043")
    assert last[:44] == newest[76:] and set(last[44:]) == seeded_six
    assert await pager.get_by_role("link", name="Next page").count() == 0

    assert await turned(page, "Previous page", "op-page-093") == newest[26:76]
    assert await turned(page, "Previous page", "op-page-119") == newest[:26]
    assert await pager.get_by_role("link", name="Previous page").count() == 0
    assert await turned(page, "Next page", "op-page-093") == newest[26:76]
    assert await turned(page, "Next page", "op-page-043") == last
    assert await turned(page, "First page", "op-page-119") == newest[:50]
    assert await page.locator("#operations-total").inner_text() == "126 operations match."


async def test_operations__oldest_first_by_default_last_page_holds_the_newest(page, seeded):
    async with api_of(seeded) as api:
        now = (await api("{ serverTime }"))["serverTime"]
        for index in range(EXTRA):
            await claimed(api, f"op-page-{index:03d}", now)
    await page.goto(seeded.url + "/ui#/operations")
    await page.locator(ROWS).first.wait_for()

    last = await turned(page, "Last page", "op-page-070")

    assert last == [f"op-page-{index:03d}" for index in range(70, EXTRA)]
    assert await page.locator("#operations-total").inner_text() == "126 operations match."


async def test_operations__the_order_and_the_total_read_as_two_sentences(page, seeded):
    await page.goto(seeded.url + "/ui#/operations")
    await page.locator("#operations-total").wait_for()

    note = page.locator("p.note", has=page.locator("#operations-total"))

    assert await note.inner_text() == "Oldest first (by when each was claimed). 6 operations match."
