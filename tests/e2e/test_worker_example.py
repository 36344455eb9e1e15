"""End to end: the real server (uvicorn, in its own process) and the example worker against it.

Runs ``connector-store serve`` on a free port over a fresh database on each backend, waits for
``/readyz``, runs ``examples/writeback_worker.py`` (write-back, the verifier loop, then the
sync checkpoint) twice (a second run on the same database proves its ids are fresh, and its
sync checkpoint advances by compare-and-swap from the first run's), then stops the server with
SIGTERM and expects a clean exit, the sweeper having run and stopped.
"""

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.databases import PostgresRun
from tests.e2e.live import Server, live_server
from tests.tokens import SERVICE_TOKEN

REPO = Path(__file__).resolve().parents[2]
WORKER = REPO / "examples" / "writeback_worker.py"
OPERATIONS = 5


@pytest.fixture(params=["sqlite", "postgres"])
async def server_database_url(
    request: pytest.FixtureRequest, tmp_path: Path, postgres_run: PostgresRun
) -> str:
    """A fresh database for the server: an empty SQLite file path (the server migrates it) or
    the run's migrated, truncated PostgreSQL database."""
    if request.param == "sqlite":
        return f"sqlite+aiosqlite:///{tmp_path / 'e2e.db'}"
    url = await postgres_run.create()
    await postgres_run.truncate()
    return url


@pytest.fixture
def server(server_database_url: str, tmp_path: Path) -> Iterator[Server]:
    with live_server(
        tmp_path,
        server_database_url,
        env={"LOG_LEVEL": "info", "SWEEPER": "true", "SWEEP_INTERVAL_SECONDS": "0.5"},
    ) as running:
        yield running


def summary(stdout: str) -> dict[str, str]:
    """The worker's ``key: value`` summary lines."""
    lines = (line.partition(": ") for line in stdout.splitlines())
    return {key: value for key, sep, value in lines if sep}


async def run_worker(server: Server) -> subprocess.CompletedProcess[str]:
    command = [
        sys.executable,
        str(WORKER),
        "--url",
        server.url + "/graphql",
        "--operations",
        str(OPERATIONS),
    ]
    env = os.environ | {"CONNECTOR_STORE_TOKEN": SERVICE_TOKEN}
    return await asyncio.to_thread(
        subprocess.run, command, capture_output=True, text=True, timeout=120, cwd=REPO, env=env
    )


async def test_the_example_worker_writes_back_through_a_real_server(server: Server) -> None:
    runs = set()
    wake_ups = 0
    for number in range(1, 3):
        worker = await run_worker(server)
        assert worker.returncode == 0, server.explain(worker)
        result = summary(worker.stdout)
        assert result["committed"] == f"{OPERATIONS}/{OPERATIONS}", server.explain(worker)
        assert result["retries"] == "1", server.explain(worker)
        wake_ups += int(result["wake-ups waited for"])
        assert result["exists"] == "1", server.explain(worker)
        assert result["conflicts"] == "1", server.explain(worker)
        assert result["watches verified"] == str(OPERATIONS - 1), server.explain(worker)
        assert result["repairs opened by ingress"] == "2", server.explain(worker)
        assert result["watches repair failed"] == "1", server.explain(worker)
        assert int(result["verification checks"]) >= OPERATIONS + 2 * 2 + 2, server.explain(worker)
        assert result["result"] == "OK", server.explain(worker)
        assert float(result["throughput"].removesuffix(" ops/s")) > 0
        committed, version = OPERATIONS * number, number - 1
        assert result["sync"].startswith(
            f"example-calendar committed {committed}, version {version}, lastSyncedAt "
        ), server.explain(worker)
        runs.add(result["run"])
    assert len(runs) == 2
    # The worker waits on WorkAvailable rather than polling: one lease after each signal
    # (the first at once) and one more that finds nothing.
    leases = server.output().count('operation="LeaseOperations"')
    assert wake_ups >= 1 and leases <= 2 * (wake_ups + 2), server.explain()

    assert server.stop() in (0, -signal.SIGTERM), server.explain()
    output = server.output()
    assert "Application shutdown complete" in output, server.explain()
    assert "sweep: deleted 0 finished operations, 0 expired pending auth" in output, output
    assert "sweeper: stopped" in output, server.explain()
    assert "Traceback" not in output, server.explain()
