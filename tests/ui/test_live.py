"""The dashboard live: writes made through the API reach an open page from its subscriptions
(graphql-transport-ws), without a reload, within 2 s."""

import asyncio
import json
from typing import Any

import httpx

from tests.tokens import bearer
from tests.ui.seed import FINALIZE, MARK, WORKER, Api, Seeded, claimed, committed

WITHIN_MS = 2_000
RECONNECTED_MS = 4_000
"""Time for the page to reconnect (its first retry waits 0.5 s), replay, and re-fetch."""
SUBSCRIBED_S = 0.5
"""How long after the indicator says "live" the test writes: the page hears of the connection
(its ack), not of the server having started each subscription on it, and a subscription
without ``after`` starts at the log's end."""


async def opened_live(page: Any, url: str) -> None:
    """Open ``url``, wait for its subscriptions, and mark the document (``unreloaded``)."""
    await page.goto(url)
    await page.locator('#live[data-live="live"]').wait_for()
    await asyncio.sleep(SUBSCRIBED_S)
    await page.evaluate("window.notReloaded = true")


async def unreloaded(page: Any) -> bool:
    return await page.evaluate("window.notReloaded === true")


async def now(api: Api) -> int:
    return (await api("{ serverTime }"))["serverTime"]


async def test_operations__one_finalized_through_the_api_shows_committed(page, seeded: Seeded):
    await opened_live(page, seeded.url + "/ui#/operations")
    await page.locator("#operations tbody tr[data-operation]").first.wait_for()

    async with httpx.AsyncClient(base_url=seeded.url, headers=bearer(seeded.token)) as http:
        api = Api(http)
        await committed(api, "op-live-new", await now(api))

    row = page.locator('#operations tr[data-operation="op-live-new"]')
    await row.locator("td[data-state]", has_text="COMMITTED").wait_for(timeout=WITHIN_MS)
    assert await unreloaded(page)


async def test_operations__a_live_re_render_keeps_the_filter_being_typed(page, seeded: Seeded):
    await opened_live(page, seeded.url + "/ui#/operations")
    await page.get_by_label("Connector").fill("cal")
    await page.get_by_label("State").select_option("FAILED")

    async with httpx.AsyncClient(base_url=seeded.url, headers=bearer(seeded.token)) as http:
        api = Api(http)
        await claimed(api, "op-while-typing", await now(api))

    await page.locator('#operations tr[data-operation="op-while-typing"]').wait_for(
        timeout=WITHIN_MS
    )
    assert await page.get_by_label("Connector").input_value() == "cal"
    assert await page.get_by_label("State").input_value() == "FAILED"


async def test_overview__counts_change_after_a_claim_through_the_api(page, seeded: Seeded):
    await opened_live(page, seeded.url + "/ui#/overview")
    cell = page.locator('[data-count="calendar/acct-1/ATTEMPTED"]')
    before = int(await cell.inner_text())
    total = int(await page.locator('[data-count="calendar/acct-1/total"]').inner_text())

    async with httpx.AsyncClient(base_url=seeded.url, headers=bearer(seeded.token)) as http:
        api = Api(http)
        await claimed(api, "op-live-claimed", await now(api))

    await page.wait_for_function(
        "([label, n]) => document.querySelector(`[data-count='${label}']`)"
        "?.textContent.trim() === String(n)",
        arg=["calendar/acct-1/ATTEMPTED", before + 1],
        timeout=WITHIN_MS,
    )
    assert int(await page.locator('[data-count="calendar/acct-1/total"]').inner_text()) == (
        total + 1
    )
    assert await unreloaded(page)


async def test_operation__its_page_follows_its_writes(page, seeded: Seeded):
    live = seeded.live[0]
    await opened_live(page, seeded.url + f"/ui#/operation?caller={WORKER}&id={live}")
    assert await page.locator('dd[data-field="state"]').inner_text() == "ATTEMPTED"

    async with httpx.AsyncClient(base_url=seeded.url, headers=bearer(seeded.token)) as http:
        api = Api(http)
        await api(
            MARK,
            input={
                "callerDID": WORKER,
                "operationID": live,
                "leaseToken": f"lease-{live}",
                "marker": "run-1",
            },
        )

    await page.locator('#operation-events tr[data-event="SEND_MARKED"]').wait_for(timeout=WITHIN_MS)
    assert await unreloaded(page)


async def test_reconnect__resumes_after_the_last_event_it_saw(page, seeded: Seeded):
    """The connection dropped (closed on both sides by a route between page and server): the
    indicator says so, the page subscribes again with ``after`` = the last sequence it saw,
    and what was written meanwhile shows."""
    sockets: list[tuple[Any, Any]] = []
    subscribed: list[dict[str, Any]] = []

    def relay(socket: Any) -> None:
        server = socket.connect_to_server()

        def from_page(message: str | bytes) -> None:
            sent = json.loads(message)
            if sent["type"] == "subscribe":
                subscribed.append(sent["payload"])
            server.send(message)

        socket.on_message(from_page)
        sockets.append((socket, server))

    await page.route_web_socket("**/graphql", relay)
    await opened_live(page, seeded.url + "/ui#/operations")
    assert subscribed[-1]["variables"]["after"] is None
    async with httpx.AsyncClient(base_url=seeded.url, headers=bearer(seeded.token)) as http:
        api = Api(http)
        given = await claimed(api, "op-resumed", await now(api))
        row = page.locator('#operations tr[data-operation="op-resumed"] td[data-state]')
        await row.filter(has_text="ATTEMPTED").wait_for(timeout=WITHIN_MS)

        socket, server = sockets[-1]
        await server.close(code=1012, reason="restarting")
        await socket.close(code=1012, reason="restarting")
        await page.locator('#live[data-live="reconnecting"]').wait_for()
        key = {"callerDID": WORKER, "operationID": "op-resumed"}
        await api(MARK, input=key | {"leaseToken": given["leaseToken"], "marker": "run-1"})
        await api(
            FINALIZE,
            input=key
            | {"version": 0, "leaseToken": given["leaseToken"], "dueAt": given["leaseExpiresAt"]},
        )

    await row.filter(has_text="COMMITTED").wait_for(timeout=RECONNECTED_MS)
    await page.locator('#live[data-live="live"]').wait_for()
    assert len(sockets) == 2
    assert subscribed[-1]["variables"]["after"] is not None
    assert await unreloaded(page)
