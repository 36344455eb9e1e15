"""The Overview's charts, in a real browser: throughput and failure rate per bucket from
``operationStats``, drawn as plain SVG under the page's CSP, right for the seeded data, updated
live, readable in dark mode, with no axe-core violation."""

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from tests.tokens import bearer
from tests.ui.conftest import browsing, sign_in_link
from tests.ui.seed import Api, Seeded, committed
from tests.ui.test_layout import axe_violations

BARS = "#throughput-chart rect[data-series]"


@contextlib.asynccontextmanager
async def api_of(seeded: Seeded) -> AsyncIterator[Api]:
    async with httpx.AsyncClient(base_url=seeded.url, headers=bearer(seeded.token)) as http:
        yield Api(http)


async def bars(page: Any) -> list[dict[str, Any]]:
    """Each bar drawn: its series, bucket, value and height."""
    return await page.locator(BARS).evaluate_all(
        "rects => rects.map(r => ({series: r.dataset.series, bucket: r.dataset.bucket, "
        "value: Number(r.dataset.value), height: r.height.baseVal.value}))"
    )


def total(drawn: list[dict[str, Any]], series: str) -> int:
    return sum(bar["value"] for bar in drawn if bar["series"] == series)


async def test_overview__charts_show_the_seeded_commits_failures_and_rate(page, seeded):
    await page.goto(seeded.url + "/ui#/overview")
    await page.locator(BARS).first.wait_for()

    drawn = await bars(page)
    points = await page.locator("#failure-rate-chart circle.point").evaluate_all(
        "cs => cs.map(c => ({bucket: c.dataset.bucket, rate: Number(c.dataset.rate)}))"
    )

    # Seeded: op-committed and op-repair committed, op-failed failed (seed.py).
    assert (total(drawn, "committed"), total(drawn, "failed")) == (2, 1), drawn
    assert set(bar["series"] for bar in drawn) == {"committed", "failed"}
    by_bucket: dict[str, dict[str, int]] = {}
    for bar in drawn:
        by_bucket.setdefault(bar["bucket"], {"committed": 0, "failed": 0})[bar["series"]] = bar[
            "value"
        ]
    assert {p["bucket"]: p["rate"] for p in points} == {
        bucket: counts["failed"] / (counts["committed"] + counts["failed"])
        for bucket, counts in by_bucket.items()
    }
    # One scale: each bar's height in proportion to its value, the fullest bucket's stack the
    # plot's full height.
    per_unit = {round(bar["height"] / bar["value"], 6) for bar in drawn}
    assert len(per_unit) == 1, drawn
    most = max(sum(c.values()) for c in by_bucket.values())
    plot = await page.locator("#throughput-chart line.axis").first.evaluate(
        "l => l.y2.baseVal.value - l.y1.baseVal.value"
    )
    assert per_unit.pop() * most == pytest.approx(plot)
    caption = await page.locator("#throughput-chart figcaption").inner_text()
    assert "2 committed, 1 failed" in caption, caption
    rate = await page.locator("#failure-rate-chart figcaption").inner_text()
    assert "33% of 3 finished failed" in rate, rate


async def test_overview__charts_follow_the_range_and_new_commits_live(page, seeded):
    await page.goto(seeded.url + "/ui#/overview")
    await page.locator(BARS).first.wait_for()
    buckets = page.locator("#throughput-chart").get_by_text("Last hour")
    assert await buckets.count() >= 1

    await page.get_by_label("Range").select_option("day")
    await page.locator("#throughput-chart figcaption", has_text="Last 24 hours").wait_for()
    assert total(await bars(page), "committed") == 2
    async with api_of(seeded) as api:
        now = (await api("{ serverTime }"))["serverTime"]
        await committed(api, "op-later", now)

    await page.locator("#throughput-chart figcaption", has_text="3 committed").wait_for()
    assert total(await bars(page), "committed") == 3


async def test_overview__charts_in_dark_mode_are_coloured_for_it_and_axe_clean(
    browser, server, seeded
):
    for scheme, committed_fill in (("light", "rgb(46, 125, 50)"), ("dark", "rgb(127, 220, 134)")):
        context = await browser.new_context(color_scheme=scheme, bypass_csp=True)
        page = await context.new_page()
        page.set_default_timeout(10_000)
        try:
            await page.goto(await sign_in_link(server))
            await page.get_by_role("button", name="Sign out").wait_for()
            await page.goto(seeded.url + "/ui#/overview")
            await page.locator(BARS).first.wait_for()
            fill = await page.locator(f'{BARS}[data-series="committed"]').first.evaluate(
                "r => getComputedStyle(r).fill"
            )
            assert fill == committed_fill, (scheme, fill)
            assert await axe_violations(page) == [], scheme
        finally:
            await context.close()


async def test_overview__charts_draw_under_the_pages_own_csp(browser, server, seeded):
    async with browsing(browser, bypass_csp=False) as page:
        refused: list[str] = []
        page.on("console", lambda message: refused.append(message.text))
        await page.goto(await sign_in_link(server))
        await page.get_by_role("button", name="Sign out").wait_for()
        await page.goto(seeded.url + "/ui#/overview")
        await page.locator(BARS).first.wait_for()

        assert await page.locator("#failure-rate-chart circle.point").count() >= 1
        assert not [text for text in refused if "Content Security Policy" in text], refused


async def test_overview__charts_window_ends_at_the_servers_now_whatever_the_browsers_clock(
    page, seeded
):
    async with api_of(seeded) as api:
        now = (await api("{ serverTime }"))["serverTime"]
    # A browser whose clock is two hours behind the server's: its "last hour" by its own
    # clock would hold none of the seeded commits.
    await page.clock.set_system_time(now - 2 * 3_600_000)

    await page.goto(seeded.url + "/ui#/overview")
    await page.locator(BARS).first.wait_for()

    assert (total(await bars(page), "committed"), total(await bars(page), "failed")) == (2, 1)
