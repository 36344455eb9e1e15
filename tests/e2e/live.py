"""A live ``connector-store serve`` on a free port (``tests.ports``), and the Node harness of
``tests/node`` (installed by ``make test`` with ``npm ci``)."""

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.ports import free_port

NODE_DIR = Path(__file__).resolve().parents[1] / "node"
SERVE = Path(sys.executable).with_name("connector-store")
READY_TIMEOUT_S = 120.0
"""Bounds, not expected times: generous enough for a busy 2-core machine."""
NODE_TIMEOUT_S = 300.0
STOP_TIMEOUT_S = 10.0


@dataclass
class Server:
    """A ``connector-store serve`` process, the file its output goes to and its database."""

    process: subprocess.Popen[bytes]
    url: str
    log: Path
    database_url: str = ""

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def explain(self, worker: subprocess.CompletedProcess[str] | None = None) -> str:
        """Everything worth reading when something failed."""
        parts = []
        if worker is not None:
            parts += [
                f"worker exit code {worker.returncode}",
                f"--- worker stdout ---\n{worker.stdout}",
                f"--- worker stderr ---\n{worker.stderr}",
            ]
        parts.append(f"--- server output ---\n{self.output()}")
        return "\n".join(parts)

    def wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                pytest.fail(f"the server exited with {self.process.returncode}\n{self.explain()}")
            try:
                if httpx.get(self.url + "/readyz", timeout=1.0).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        pytest.fail(f"the server was not ready in {READY_TIMEOUT_S} s\n{self.explain()}")

    def stop(self) -> int:
        """SIGTERM, then SIGKILL if it lingers; returns the exit code.

        Uvicorn shuts down gracefully on SIGTERM, then re-raises the signal it caught, so a
        clean stop exits with -SIGTERM (143 in a shell), not 0.
        """
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode


@contextlib.contextmanager
def live_server(
    tmp_path: Path,
    database_url: str | None = None,
    name: str = "server",
    env: dict[str, str] | None = None,
) -> Iterator[Server]:
    """A server on its own SQLite file (or ``database_url``), stopped when the block ends;
    ``env`` adds to or replaces its environment (sweeper off, log level warning)."""
    assert SERVE.exists(), f"no connector-store script beside {sys.executable}"
    port = free_port()
    log = tmp_path / f"{name}.log"
    database_url = database_url or f"sqlite+aiosqlite:///{tmp_path / (name + '.db')}"
    env = (
        os.environ
        | {
            "DATABASE_URL": database_url,
            "DATA_DIR": str(tmp_path / "data"),
            "SWEEPER": "false",
            "LOG_LEVEL": "warning",
        }
        | (env or {})
    )
    with log.open("wb") as output:
        process = subprocess.Popen(
            [str(SERVE), "serve", "--host", "127.0.0.1", "--port", str(port)],
            cwd=tmp_path,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    server = Server(process, f"http://127.0.0.1:{port}", log, env["DATABASE_URL"])
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()


def node(
    script: str, *args: str, timeout_s: float = NODE_TIMEOUT_S
) -> subprocess.CompletedProcess[str]:
    """Run ``tests/node/<script>`` with Node; skips only when Node is missing."""
    binary = shutil.which("node")
    if binary is None:
        pytest.skip("node is not installed")
    if not (NODE_DIR / "node_modules").is_dir():
        pytest.fail("tests/node/node_modules is missing: run `make test` (it runs npm ci)")
    return subprocess.run(
        [binary, script, *args],
        cwd=NODE_DIR,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
