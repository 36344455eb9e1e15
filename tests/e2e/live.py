"""A live ``connector-store serve`` on a free port in 19100-19199, and the Node harness of
``tests/node`` (installed by ``make test`` with ``npm ci``)."""

import contextlib
import os
import random
import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.test_worker_example import SERVE, Server

NODE_DIR = Path(__file__).resolve().parents[1] / "node"
PORTS = range(19100, 19200)


def free_port() -> int:
    """A free port in 19100-19199 on 127.0.0.1."""
    ports = list(PORTS)
    random.shuffle(ports)
    for port in ports:
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port in 19100-19199")


@contextlib.contextmanager
def live_server(
    tmp_path: Path, database_url: str | None = None, name: str = "server"
) -> Iterator[Server]:
    """A server on its own SQLite file (or ``database_url``), stopped when the block ends."""
    port = free_port()
    log = tmp_path / f"{name}.log"
    env = os.environ | {
        "DATABASE_URL": database_url or f"sqlite+aiosqlite:///{tmp_path / (name + '.db')}",
        "DATA_DIR": str(tmp_path / "data"),
        "SWEEPER": "false",
        "LOG_LEVEL": "warning",
    }
    with log.open("wb") as output:
        process = subprocess.Popen(
            [str(SERVE), "serve", "--host", "127.0.0.1", "--port", str(port)],
            cwd=tmp_path,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    server = Server(process, f"http://127.0.0.1:{port}", log)
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()


def node(script: str, *args: str, timeout_s: float = 60) -> subprocess.CompletedProcess[str]:
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
