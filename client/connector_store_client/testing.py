"""Helpers for testing a handler against a real server: ``LocalServer`` runs
``connector-store serve`` on a temporary SQLite file (the server's package installed beside
the SDK; the SDK runs its command and imports nothing of it), ``work_until_finished``
runs a ``Worker`` until every operation it may lease has finished, and ``outcome_of`` reads
how one ended. The pytest fixture
``connector_store_server`` (``connector_store_client.pytest_plugin``) wraps the first."""

import asyncio
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx

from connector_store_client import documents as doc
from connector_store_client.client import Client
from connector_store_client.models.operation_counts import OperationCounts
from connector_store_client.models.operation_outcome import (
    OperationOutcome,
    OperationOutcomeOperation,
)
from connector_store_client.settling import WorkerStats
from connector_store_client.worker import Worker

READY_TIMEOUT_S = 120.0
"""How long ``LocalServer.start`` waits for the server to answer ``/readyz``: a bound
generous enough for a busy machine, not a measure."""
STOP_TIMEOUT_S = 10.0
"""How long ``LocalServer.stop`` waits after SIGTERM before SIGKILL."""
TOKEN_TTL_S = 86_400
"""How long the token of ``LocalServer.token`` stays valid, in seconds."""
FINISHED = frozenset({"COMMITTED", "FAILED", "CANCELLED"})
"""The states an operation ends in."""


def serve_command() -> str:
    """The ``connector-store`` command: beside this Python, else on ``PATH``. Raises
    ``FileNotFoundError`` when there is none (install the server's package)."""
    beside = Path(sys.executable).with_name("connector-store")
    found = str(beside) if beside.exists() else shutil.which("connector-store")
    if found is None:
        raise FileNotFoundError("no connector-store command: install connector-store-server")
    return found


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class LocalServer:
    """A ``connector-store serve`` process of its own on 127.0.0.1 (a free port), on a
    SQLite file in ``directory`` (or ``database_url``), with a JWT secret of its own and the
    sweeper off. ``url`` is its GraphQL endpoint, ``token`` a ``service`` token (every
    right: it enqueues, works and reads every operation). Use as a context manager (sync),
    or call ``start`` and ``stop``. ``env`` adds to the server's environment."""

    def __init__(
        self,
        directory: Path,
        *,
        database_url: str | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        self.directory = Path(directory)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/graphql"
        self.log = self.directory / "connector-store.log"
        self.env = os.environ | {
            "DATABASE_URL": database_url or f"sqlite+aiosqlite:///{self.directory / 'store.db'}",
            "DATA_DIR": str(self.directory / "data"),
            "JWT_SECRET": secrets.token_hex(32),
            "SWEEPER": "false",
            "LOG_LEVEL": "warning",
        }
        self.env |= env or {}
        self.token = ""
        self.process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> "LocalServer":
        return self.start()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> "LocalServer":
        """Start the server (migrating its database) and wait until it is ready; mint
        ``token``. Raises ``RuntimeError`` with the server's output when it exits or is not
        ready within ``READY_TIMEOUT_S``."""
        command = serve_command()
        self.directory.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as output:
            self.process = subprocess.Popen(
                [command, "serve", "--host", "127.0.0.1", "--port", str(self.port)],
                cwd=self.directory,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
            )
        self._wait_ready()
        minted = subprocess.run(
            [command, "token", "--sub", "service", "--scope", "service", "--ttl", str(TOKEN_TTL_S)],
            env=self.env,
            capture_output=True,
            text=True,
            check=True,
        )
        self.token = minted.stdout.strip().splitlines()[-1]
        return self

    def _wait_ready(self) -> None:
        assert self.process is not None
        ready = self.url.removesuffix("/graphql") + "/readyz"
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the server exited {self.process.returncode}:\n{self.output()}")
            try:
                if httpx.get(ready, timeout=1.0).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"the server was not ready in {READY_TIMEOUT_S} s:\n{self.output()}")

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it lingers past ``STOP_TIMEOUT_S``."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def output(self) -> str:
        """What the server wrote (its log)."""
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def client(self, **options: Any) -> Client:
        """A ``Client`` of this server with ``token`` (``options``: ``Client``'s)."""
        return Client(self.url, self.token, **options)


async def live_count(client: Client, connector_name: str | None = None) -> int:
    """How many operations the client's token may see (of ``connector_name``; None: of
    every connector) are not finished (``FINISHED``)."""
    data = await client.execute(
        doc.OPERATION_COUNTS, {"connectorName": connector_name}, repeatable=True
    )
    counts = OperationCounts.model_validate(data).operation_counts
    return sum(row.count for row in counts if row.state.value not in FINISHED)


async def work_until_finished(
    worker: Worker, *, timeout_s: float = 60.0, poll_s: float = 0.1
) -> WorkerStats:
    """Run ``worker`` until no operation of its ``connector_name`` (None: of any) that its
    client may see is unfinished (each ``COMMITTED``, ``FAILED`` or ``CANCELLED``), waiting
    for retries to come due (give the worker a short ``retry_base_ms`` and answer short
    ``RetryAfter`` delays to keep a test quick); then stop it and return its stats. Raises
    ``TimeoutError`` past ``timeout_s`` (the worker stopped first), and what ``run``
    raises."""
    running = asyncio.create_task(worker.run())
    try:
        async with asyncio.timeout(timeout_s):
            while await live_count(worker.client, worker.connector_name):
                if running.done():
                    break
                await asyncio.sleep(poll_s)
    finally:
        worker.stop()
        stats = await running
    return stats


async def outcome_of(
    client: Client, caller_did: str, operation_id: str
) -> OperationOutcomeOperation | None:
    """The operation ``(caller_did, operation_id)`` as it stands: ``state``, ``attempts``,
    ``last_kind``, ``last_error``, ``result_entity``; None when the server holds none the
    client may see."""
    data = await client.execute(
        doc.OPERATION_OUTCOME,
        {"callerDID": caller_did, "operationID": operation_id},
        repeatable=True,
    )
    return OperationOutcome.model_validate(data).operation
