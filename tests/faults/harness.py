"""Real server processes and a bounded write-back worker loop over HTTP, for the fault tests.

The worker speaks the documents of ``graphql/operations/worker.graphql``: it lists due
operations, takes a lease (``acquireLease``, a fresh token per attempt), marks the send,
"sends" (records it in the ledger) and finalizes. The ledger is what the workers saw:
applied finalizes and the marks of each operation, so a test can check that every
operation was committed exactly once and that its attempts count its marked runs.
"""

import asyncio
import os
import random
import resource
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests.e2e.live import READY_TIMEOUT_S
from tests.tokens import SERVICE_TOKEN, bearer

REPO = Path(__file__).resolve().parents[2]
SERVE = Path(sys.executable).with_name("connector-store")
WORKER_DOCUMENT = (REPO / "graphql" / "operations" / "worker.graphql").read_text()
CALLER = "did:key:fault-caller"


def service_client(**options: Any) -> httpx.AsyncClient:
    """An HTTP client that sends a ``service`` token (the servers share the suite's
    ``JWT_SECRET``)."""
    return httpx.AsyncClient(headers=bearer(SERVICE_TOKEN), **options)


STARTED: list["Server"] = []
"""Every server started; ``kill_started`` (an autouse fixture's teardown) kills those left."""


def kill_started() -> None:
    while STARTED:
        STARTED.pop().kill()


@dataclass
class Server:
    """A ``connector-store serve`` process on ``port``; its output goes to ``log``."""

    database_url: str
    port: int
    log: Path
    env: dict[str, str]
    migrate: bool = True
    nofile: int | None = None
    """The process's file-descriptor limit (RLIMIT_NOFILE), when given."""
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> "Server":
        env = (
            os.environ
            | {
                "DATABASE_URL": self.database_url,
                "LOG_LEVEL": "warning",
                "DB_WAIT_TIMEOUT_SECONDS": "5",
            }
            | self.env
        )
        command = [str(SERVE), "serve", "--host", "127.0.0.1", "--port", str(self.port)]
        if not self.migrate:
            command.append("--no-migrate")
        STARTED.append(self)
        with self.log.open("ab") as output:
            self.process = subprocess.Popen(
                command,
                cwd=self.log.parent,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                preexec_fn=None if self.nofile is None else self.limit_files,
            )
        return self

    def limit_files(self) -> None:
        assert self.nofile is not None
        resource.setrlimit(resource.RLIMIT_NOFILE, (self.nofile, self.nofile))

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        assert self.process is not None
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"server exited {self.process.returncode}\n{self.output()}")
            try:
                if httpx.get(self.url + "/readyz", timeout=1.0).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        raise AssertionError(f"server not ready in {timeout_s} s\n{self.output()}")

    def kill(self) -> None:
        """SIGKILL, no grace."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def terminate(self, timeout_s: float = 20.0) -> int:
        """SIGTERM, then SIGKILL if it lingers; the exit code."""
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode


@dataclass
class Ledger:
    """What the workers saw."""

    finalized: Counter[str] = field(default_factory=Counter)
    marks: defaultdict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    takeovers: int = 0
    deaths: int = 0
    transport_errors: int = 0
    error_codes: Counter[str] = field(default_factory=Counter)
    requests: int = 0


class WorkerDied(Exception):
    """A simulated crash of a worker in the middle of an operation."""


async def call(
    http: httpx.AsyncClient, url: str, name: str, ledger: Ledger, **variables: Any
) -> dict[str, Any] | None:
    """Run ``name``; the data, or None when the request failed (transport or error code)."""
    ledger.requests += 1
    try:
        response = await http.post(
            url + "/graphql",
            json={"query": WORKER_DOCUMENT, "operationName": name, "variables": variables},
            timeout=10.0,
        )
    except httpx.TransportError:
        ledger.transport_errors += 1
        return None
    try:
        body = response.json()
    except ValueError:
        ledger.error_codes[f"http_{response.status_code}"] += 1
        return None
    if body.get("errors"):
        for error in body["errors"]:
            ledger.error_codes[(error.get("extensions") or {}).get("code", "?")] += 1
        return None
    return body["data"]


def now_ms() -> int:
    return int(time.time() * 1000)


async def seed(urls: list[str], count: int, prefix: str, ledger: Ledger) -> list[str]:
    """Claim ``count`` operations, due now, their claim leases already lapsed."""
    ids = [f"{prefix}-{i:05d}" for i in range(count)]
    semaphore = asyncio.Semaphore(16)
    async with service_client() as http:

        async def claim(index: int, operation_id: str) -> None:
            async with semaphore:
                for _ in range(20):
                    data = await call(
                        http,
                        urls[index % len(urls)],
                        "ClaimOperation",
                        ledger,
                        input={
                            "callerDID": CALLER,
                            "operationID": operation_id,
                            "ownerDID": "did:key:fault-owner",
                            "connectorName": "faults",
                            "model": "Event",
                            "op": "update",
                            "accountKey": "acct",
                            "target": f"events/{operation_id}",
                            "sourceID": operation_id,
                            "deterministicEventID": f"det-{operation_id}",
                            "payloadHash": "sha256:x",
                            "leaseToken": None,
                            "leaseExpiresAt": None,
                            "documentID": f"doc-{operation_id}",
                            "reissueIntent": {"fields": ["title"]},
                        },
                    )
                    if data is not None:
                        return
                    await asyncio.sleep(0.2)
                raise AssertionError(f"could not claim {operation_id}")

        await asyncio.gather(*(claim(i, op) for i, op in enumerate(ids)))
    return ids


@dataclass
class WorkerPlan:
    lease_ms: int = 1500
    death_rate: float = 0.0
    """Chance that a worker dies after taking a lease (half before marking, half after)."""
    deadline: float = 0.0
    batch: int = 20


async def worker(
    name: str, urls: list[str], ledger: Ledger, plan: WorkerPlan, stop: asyncio.Event
) -> None:
    """A bounded worker loop: runs until ``stop`` or the deadline; a simulated death ends
    this run and a new run (fresh tokens and markers) starts in its place."""
    rng = random.Random(name)
    async with service_client() as http:
        run = 0
        while not stop.is_set() and time.monotonic() < plan.deadline:
            run += 1
            try:
                await worker_run(f"{name}.{run}", urls, ledger, plan, stop, rng, http)
            except WorkerDied:
                ledger.deaths += 1


async def worker_run(
    run: str,
    urls: list[str],
    ledger: Ledger,
    plan: WorkerPlan,
    stop: asyncio.Event,
    rng: random.Random,
    http: httpx.AsyncClient,
) -> None:
    url = rng.choice(urls)
    while not stop.is_set() and time.monotonic() < plan.deadline:
        due = await call(http, url, "DueOperations", ledger, now=now_ms(), limit=plan.batch)
        if due is None:
            await asyncio.sleep(0.2)
            url = rng.choice(urls)
            continue
        operations = due["dueOperations"]
        if not operations:
            await asyncio.sleep(0.1)
            continue
        rng.shuffle(operations)
        for operation in operations[:3]:
            await process(run, url, operation["operationID"], ledger, plan, rng, http)


async def process(
    run: str,
    url: str,
    operation_id: str,
    ledger: Ledger,
    plan: WorkerPlan,
    rng: random.Random,
    http: httpx.AsyncClient,
) -> None:
    key = {"callerDID": CALLER, "operationID": operation_id}
    token = f"{run}-{uuid.uuid4().hex[:8]}"
    data = await call(
        http,
        url,
        "AcquireLease",
        ledger,
        input=key | {"token": token, "leaseMs": plan.lease_ms},
    )
    if data is None or not data["acquireLease"]["applied"]:
        return
    if data["acquireLease"]["operation"]["sendMarker"] in ("*abandoned*",):
        ledger.takeovers += 1
    dies = rng.random() < plan.death_rate
    if dies and rng.random() < 0.5:
        raise WorkerDied
    data = await call(
        http, url, "MarkSendStarted", ledger, input=key | {"leaseToken": token, "marker": run}
    )
    if data is None or not data["markSendStarted"]["applied"]:
        return
    ledger.marks[operation_id].add(run)
    if dies:
        raise WorkerDied
    version = data["markSendStarted"]["operation"]["version"]
    data = await call(
        http,
        url,
        "FinalizeOperation",
        ledger,
        input=key | {"version": version, "leaseToken": token, "dueAt": now_ms()},
    )
    if data is not None and data["finalizeOperation"]["applied"]:
        ledger.finalized[operation_id] += 1


async def run_workers(
    urls: list[str], ledger: Ledger, plan: WorkerPlan, count: int = 16
) -> tuple[asyncio.Event, list[asyncio.Task[None]]]:
    stop = asyncio.Event()
    tasks = [
        asyncio.create_task(worker(f"w{i:02d}", urls, ledger, plan, stop)) for i in range(count)
    ]
    return stop, tasks


async def operations_state(urls: list[str], ids: list[str]) -> dict[str, dict[str, Any]]:
    """Every operation as the server has it now."""
    ledger = Ledger()
    result: dict[str, dict[str, Any]] = {}
    semaphore = asyncio.Semaphore(16)
    async with service_client() as http:

        async def get(operation_id: str) -> None:
            async with semaphore:
                for _ in range(20):
                    data = await call(
                        http,
                        urls[0],
                        "GetOperation",
                        ledger,
                        callerDID=CALLER,
                        operationID=operation_id,
                    )
                    if data is not None:
                        result[operation_id] = data["operation"]
                        return
                    await asyncio.sleep(0.2)

        await asyncio.gather(*(get(op) for op in ids))
    return result


async def wait_all_committed(urls: list[str], ids: list[str], timeout_s: float) -> dict[str, Any]:
    """Poll until every operation is committed or ``timeout_s`` passes; the last states."""
    deadline = time.monotonic() + timeout_s
    states: dict[str, Any] = {}
    while time.monotonic() < deadline:
        async with service_client() as http:
            ledger = Ledger()
            due = await call(http, urls[0], "DueOperations", ledger, now=now_ms() + 10**7, limit=1)
        if due is not None and not due["dueOperations"]:
            break
        await asyncio.sleep(0.5)
    states = await operations_state(urls, ids)
    return states


def check_exactly_once(
    ids: list[str], states: dict[str, Any], ledger: Ledger
) -> tuple[dict[str, int], list[tuple[str, int, int]]]:
    """Every operation committed, none finalized twice, attempts equal to its marked runs
    (a run whose finalize answer was lost may leave one fewer observed); the counts."""
    not_committed = [op for op in ids if states.get(op, {}).get("state") != "COMMITTED"]
    assert not not_committed, f"{len(not_committed)} not committed, e.g. {not_committed[:3]}"
    twice = [op for op, n in ledger.finalized.items() if n > 1]
    assert not twice, f"finalized twice: {twice[:5]}"
    mismatched = [
        (op, states[op]["attempts"], len(ledger.marks[op]))
        for op in ids
        if states[op]["attempts"] != len(ledger.marks[op])
    ]
    attempts = sum(states[op]["attempts"] for op in ids)
    return {
        "operations": len(ids),
        "committed": len(ids) - len(not_committed),
        "finalize_applied_seen": sum(ledger.finalized.values()),
        "attempts_total": attempts,
        "marked_runs_total": sum(len(ledger.marks[op]) for op in ids),
        "attempts_mismatched": len(mismatched),
        "takeovers_seen": ledger.takeovers,
        "worker_deaths": ledger.deaths,
        "requests": ledger.requests,
        "transport_errors": ledger.transport_errors,
        **{f"error_{code}": n for code, n in sorted(ledger.error_codes.items())},
    }, mismatched
