"""server/workers.py: ``serve --workers 2`` in real processes: two workers serve one port,
``/metrics`` sums both, SIGTERM stops them all."""

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from server.settings import Settings
from server.workers import RESTART_DELAYS, restart_delay, stopped_within, worker_env
from tests.faults.harness import Server, kill_started
from tests.ports import free_port
from tests.tokens import SERVICE_TOKEN, bearer

# Real processes (a `connector-store` command or server): left out of `make test-fast`.
pytestmark = pytest.mark.slow

REQUESTS = 20
GIVE_UP_BOUND_S = 300.0
"""The longest ``serve`` may take to give up on workers that keep dying: its backoff's sum
and each worker's failed start, on a machine as busy as it gets."""


@pytest.fixture(autouse=True)
def no_server_left() -> Iterator[None]:
    yield
    kill_started()


def children(pid: int) -> list[int]:
    return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def wait_for(condition, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def requests_counted(server: Server) -> float:
    metrics = httpx.get(server.url + "/metrics", headers=bearer(SERVICE_TOKEN), timeout=5)
    assert metrics.status_code == 200, metrics.text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in metrics.text.splitlines()
        if line.startswith("connector_requests_total{")
    )


def test_workers__two_serve_one_port_and_metrics_sum_both(tmp_path):
    env = {"WORKERS": "2", "SWEEPER": "false", "LOG_LEVEL": "info"}
    running = Server(
        f"sqlite+aiosqlite:///{tmp_path / 'w.db'}", free_port(), tmp_path / "w.log", env
    )
    running.start()
    assert running.process is not None
    wait_for(lambda: running.output().count("Application startup complete") == 2)
    assert len(children(running.process.pid)) == 2
    # Each worker has refreshed its gauges once at start: multiprocess mode keeps every label,
    # and the labels of a connector no longer counted are set to 0, never cleared (which
    # prometheus_client warns it cannot do).
    assert "Warning" not in running.output()
    for _ in range(REQUESTS):  # each on a new connection, spread over the workers by the kernel
        response = httpx.post(
            running.url + "/graphql",
            json={"query": "{ serverTime }"},
            headers=bearer(SERVICE_TOKEN),
            timeout=5,
        )
        assert response.status_code == 200, response.text
    assert requests_counted(running) == REQUESTS
    workers = children(running.process.pid)
    running.process.send_signal(signal.SIGTERM)
    assert running.process.wait(timeout=20) == 0
    for pid in workers:
        assert (
            not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text()
        )


def test_workers__metrics_port_refused_with_several(tmp_path):
    env = {"WORKERS": "2", "METRICS_PORT": str(free_port())}
    running = Server(
        f"sqlite+aiosqlite:///{tmp_path / 'w.db'}", free_port(), tmp_path / "w.log", env
    )
    running.start()
    assert running.process is not None
    assert running.process.wait(timeout=30) == 1
    assert "error: --workers: METRICS_PORT" in running.output()


def test_workers__a_supervisor_killed_takes_its_workers_with_it(tmp_path):
    env = {"WORKERS": "2", "SWEEPER": "false", "LOG_LEVEL": "info"}
    running = Server(
        f"sqlite+aiosqlite:///{tmp_path / 'w.db'}", free_port(), tmp_path / "w.log", env
    )
    running.start()
    assert running.process is not None
    wait_for(lambda: running.output().count("Application startup complete") == 2)
    workers = children(running.process.pid)
    running.process.kill()
    running.process.wait(timeout=10)
    wait_for(lambda: not any(alive(pid) for pid in workers), timeout_s=20)


def alive(pid: int) -> bool:
    status = Path(f"/proc/{pid}/status")
    return status.exists() and "zombie" not in status.read_text()


@pytest.mark.parametrize(
    ("url", "sweeping"),
    [
        ("sqlite+aiosqlite:///store.db", [True, False, False]),
        ("postgresql+asyncpg://postgres@127.0.0.1/test", [True, True, True]),
    ],
    ids=["sqlite", "postgres"],
)
def test_worker_env__one_sweeper_on_sqlite_every_worker_under_the_lock_on_postgres(url, sweeping):
    settings = Settings(database_url=url)
    envs = [worker_env(settings, index, "/metrics-dir") for index in range(3)]
    assert [env.get("SWEEPER") != "false" for env in envs] == sweeping
    assert all(env["PROMETHEUS_MULTIPROC_DIR"] == "/metrics-dir" for env in envs)


def test_restart_delay__at_once_after_serving_doubling_with_quick_exits_then_capped():
    assert restart_delay(0) == 0
    assert [restart_delay(n) for n in range(1, 4)] == [0.5, 1.0, 2.0]
    assert restart_delay(len(RESTART_DELAYS) + 5) == RESTART_DELAYS[-1] == 30.0


def test_workers__workers_that_keep_dying_at_start_make_serve_give_up_with_one_error(tmp_path):
    """The data folder removed under a running server: workers killed then cannot start
    again (each exits at startup); the supervisor backs off, then gives up: exit 1 and one
    ``error:`` line. (The backoff's delays are ``restart_delay``'s, tested above; the wait
    here is a bound for a busy machine, not the expected time.)"""
    folder = tmp_path / "data"
    folder.mkdir()
    env = {"WORKERS": "2", "SWEEPER": "false", "LOG_LEVEL": "info"}
    running = Server(f"sqlite+aiosqlite:///{folder / 'w.db'}", free_port(), tmp_path / "w.log", env)
    running.start()
    assert running.process is not None
    wait_for(lambda: running.output().count("Application startup complete") == 2)
    shutil.rmtree(folder)
    for pid in children(running.process.pid):
        os.kill(pid, signal.SIGKILL)
    assert running.process.wait(timeout=GIVE_UP_BOUND_S) == 1, running.output()
    output = running.output()
    errors = [line for line in output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, output


def test_stopped_within__a_worker_that_ignores_sigterm_is_killed_past_the_bound(caplog):
    ignoring = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import signal, sys, time\n"
            "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
            "print('ready', flush=True)\n"
            "time.sleep(600)\n",
        ],
        stdout=subprocess.PIPE,
    )
    try:
        assert ignoring.stdout is not None and ignoring.stdout.readline() == b"ready\n"
        ignoring.send_signal(signal.SIGTERM)
        stopped_within([ignoring], 0.5)
        assert ignoring.returncode == -signal.SIGKILL
        assert f"pid {ignoring.pid}" in caplog.text
    finally:
        if ignoring.poll() is None:
            ignoring.kill()
            ignoring.wait()
        ignoring.stdout.close()
