"""The dashboard at size: how long each view takes to show its content in a real browser
with 100,000 operations (and as many watches) in the store.

A database (SQLite by default, or ``--database-url``) is migrated, then seeded by
``benchmarks.seed.seed_statements`` (1 in 10 operations live, the rest committed; 1 in 10
watches pending), and 1 in 50 operations is made FAILED with one of five error messages, so
that the Failures view has groups; one watch is REPAIR_FAILED. ``connector-store serve``
serves it; Debian's Chromium (Playwright, headless) signs in with a one-time link, then
opens each view as a new document ``--rounds`` times: the time from navigation to the
view's content being shown (its heading, and its first table or fields), the median and
the worst of the rounds.

    python -m benchmarks.ui [--rows 100000] [--rounds 5] [--database-url URL]

Needs the ``ui`` extra (Playwright) and /usr/bin/chromium, as ``make test-ui`` does.
"""

import argparse
import asyncio
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import sqlalchemy as sa

from benchmarks.seed import seed_statements
from server.sessions import ADMIN_SCOPE, sign_in_link
from store import ConnectorStore
from store.database import Database
from store.migrate import upgrade

CHROMIUM = "/usr/bin/chromium"
SERVE = Path(sys.executable).with_name("connector-store")
MESSAGES = [
    "422 Unprocessable: the event ends before it starts",
    "404 Not Found: the calendar is gone",
    "403 Forbidden: the token lacks a scope",
    "400 Bad Request: the attendee list is too long",
    "409 Conflict: the ETag moved",
]
TARGET_S = 1.0
"""The target: every view shown within a second."""


def failures() -> list[str]:
    """Make 1 in 50 seeded operations FAILED (kind ``permanent``, one of ``MESSAGES``), and
    the first watch REPAIR_FAILED."""
    number = "CAST(substr(operation_id, 6) AS INTEGER)"
    cases = " ".join(f"WHEN {n} THEN '{text}'" for n, text in enumerate(MESSAGES))
    return [
        "UPDATE kubun_connector_operation SET state = 'failed', last_kind = 'permanent',"
        f" last_http_status = 422, last_error = CASE ({number} / 50) % {len(MESSAGES)}"
        f" {cases} END, next_attempt_at = NULL WHERE {number} % 50 = 7",
        "UPDATE kubun_connector_projection_watch SET verification_status = 'repair_failed',"
        " last_error = 'the provider still shows another writer''s version'"
        " WHERE source_id = 'source-1'",
        "ANALYZE",
    ]


async def seed(url: str, rows: int) -> None:
    """Migrate and seed ``url``: ``rows`` operations and watches, some of them failed."""
    await asyncio.to_thread(upgrade, url)
    db = Database(url, pool_size=1, statement_timeout_s=0)
    await db.connect()
    try:
        is_postgres = url.startswith("postgresql")
        now = int(time.time() * 1000)
        for statement in seed_statements(is_postgres, rows, now) + failures():
            await db.write_all(sa.text(statement))
    finally:
        await db.disconnect()


async def link(url: str, server: str) -> str:
    """A one-time sign-in link to the dashboard for an admin (a subject of its own)."""
    db = Database(url, pool_size=1)
    await db.connect()
    try:
        issued = await ConnectorStore(db).sign_in.issue_code(None, ADMIN_SCOPE, ttl_ms=600_000)
    finally:
        await db.disconnect()
    return sign_in_link(server, issued.code, "/ui")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def serve(url: str, folder: Path) -> tuple[subprocess.Popen[bytes], str]:
    """``connector-store serve`` on ``url``, once it answers /readyz."""
    port = free_port()
    env = os.environ | {
        "DATABASE_URL": url,
        "DATA_DIR": str(folder / "data"),
        "SWEEPER": "false",
        "LOG_LEVEL": "warning",
    }
    log = (folder / "server.log").open("wb")
    process = subprocess.Popen(
        [str(SERVE), "serve", "--host", "127.0.0.1", "--port", str(port)],
        cwd=folder,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"the server exited: {(folder / 'server.log').read_text()}")
        try:
            if httpx.get(base + "/readyz", timeout=1.0).status_code == 200:
                return process, base
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    process.kill()
    raise SystemExit("the server never became ready")


async def shown_in(page: Any, address: str) -> float:
    """Seconds from navigating to ``address`` until its view's heading and first table (or
    fields) are shown."""
    await page.goto("about:blank")
    started = time.perf_counter()
    await page.goto(address)
    await page.locator("main h2").first.wait_for()
    await page.locator("main table, main dl").first.wait_for()
    return time.perf_counter() - started


async def measure(url: str, base: str, rounds: int) -> dict[str, list[float]]:
    """Each view's times over ``rounds``, in seconds."""
    from playwright.async_api import async_playwright

    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = await (await browser.new_context(viewport={"width": 1280, "height": 900})).new_page()
        page.set_default_timeout(30_000)
        await page.goto(await link(url, base))
        await page.get_by_role("button", name="Sign out").wait_for()
        await page.goto(base + "/ui#/failures")
        watch = await page.locator("#failed-watches tr[data-watch] a").first.get_attribute("href")
        views = {
            "overview": "#/overview",
            "operations": "#/operations",
            "operations (FAILED)": "#/operations?state=FAILED",
            "operation": "#/operation?caller=did:seed:caller&id=seed-7",
            "failures": "#/failures",
            "watches": "#/watches",
            "watches (REPAIR_FAILED)": "#/watches?status=REPAIR_FAILED",
            "watch": watch,
            "accounts": "#/accounts",
        }
        times: dict[str, list[float]] = {name: [] for name in views}
        for _ in range(rounds):
            for name, where in views.items():
                times[name].append(await shown_in(page, base + "/ui" + where))
        await browser.close()
    return times


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--database-url", help="an empty PostgreSQL database to use instead")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        url = args.database_url or f"sqlite+aiosqlite:///{folder / 'ui.db'}"
        started = time.perf_counter()
        await seed(url, args.rows)
        print(
            f"seeded {args.rows:,} operations and watches in {time.perf_counter() - started:.1f} s"
        )
        process, base = serve(url, folder)
        try:
            times = await measure(url, base, args.rounds)
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(10)
    load = os.getloadavg()
    print(f"backend {url.split(':')[0]}; load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    print(f"{'view':<26}{'median ms':>10}{'worst ms':>10}")
    slow = []
    for name, seconds in times.items():
        median, worst = statistics.median(seconds), max(seconds)
        print(f"{name:<26}{median * 1000:>10.0f}{worst * 1000:>10.0f}")
        if median > TARGET_S:
            slow.append(name)
    print("every view under 1 s (median)" if not slow else f"over 1 s: {', '.join(slow)}")


if __name__ == "__main__":
    asyncio.run(main())
