"""The client SDK (client/) against a real server on both backends: its worker commits every
operation exactly once within an account's cap, loses and doubles nothing when killed, lets
its leases go on SIGTERM; its follower misses and repeats no event across a dropped socket."""

import asyncio
import collections
import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from connector_store_client import (
    Client,
    Committed,
    LeasedOperation,
    Worker,
    enqueue,
    follow_events,
)

from tests.databases import PostgresRun
from tests.e2e.live import NODE_DIR, Server, live_server
from tests.tokens import SERVICE_TOKEN

REPO = Path(__file__).resolve().parents[2]
SDK_WORKER = Path(__file__).with_name("sdk_worker.py")
WAIT_S = 120.0


@pytest.fixture(params=["sqlite", "postgres"])
async def server(
    request: pytest.FixtureRequest, tmp_path: Path, postgres_run: PostgresRun
) -> AsyncIterator[Server]:
    if request.param == "sqlite":
        url = f"sqlite+aiosqlite:///{tmp_path / 'sdk.db'}"
    else:
        url = await postgres_run.create()
        await postgres_run.truncate()
    with live_server(tmp_path, url) as running:
        yield running


@pytest.fixture
async def client(server: Server) -> AsyncIterator[Client]:
    async with Client(server.url + "/graphql", SERVICE_TOKEN) as connected:
        yield connected


def claims(count: int, accounts: int = 3, prefix: str = "op") -> list[dict[str, Any]]:
    """``count`` claims without lease fields, spread over ``accounts`` accounts and owners
    (the n-th of account and owner ``n % accounts``)."""
    return [
        {
            "callerDID": "did:key:caller",
            "operationID": f"{prefix}-{n}",
            "ownerDID": f"did:key:owner-{n % accounts}",
            "connectorName": "calendar",
            "model": "Event",
            "op": "update",
            "accountKey": f"acct-{n % accounts}",
            "target": f"events/{n}",
            "sourceID": f"evt-{prefix}-{n}",
            "deterministicEventID": f"det-{prefix}-{n}",
            "payloadHash": f"sha256:{n}",
        }
        for n in range(count)
    ]


async def enqueue_all(client: Client, items: list[dict[str, Any]]) -> None:
    for start in range(0, len(items), 500):
        results = await enqueue(client, items[start : start + 500])
        assert {result["__typename"] for result in results} == {"OperationClaimed"}


async def states(client: Client) -> collections.Counter[str]:
    data = await client.execute("{ operationCounts { state count } }", repeatable=True)
    counts: collections.Counter[str] = collections.Counter()
    for row in data["operationCounts"]:
        counts[row["state"]] += row["count"]
    return counts


async def until(condition: Any, what: str) -> None:
    deadline = asyncio.get_running_loop().time() + WAIT_S
    while not await condition():
        assert asyncio.get_running_loop().time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.1)


def spread(items: list[dict[str, Any]], capped: str, every: int) -> list[dict[str, Any]]:
    """``items`` with every ``every``-th in account ``capped`` and the others in ``acct-1``
    and ``acct-2``: a capped account hands out at most its cap per lease, so it gets few."""
    return [
        item | {"accountKey": capped if n % every == 0 else f"acct-{1 + n % 2}"}
        for n, item in enumerate(items)
    ]


async def test_worker__600_operations_committed_once_each_within_the_cap(client):
    await committed_once_within_the_cap(client, 600, every=5)


async def committed_once_within_the_cap(client: Client, count: int, every: int) -> None:
    """``count`` operations over 3 accounts, every ``every``-th in ``acct-0`` capped at 8,
    through 4 lessees: each is sent and committed once, and ``acct-0``'s handlers never hold
    more than its cap at once."""
    cap = 8
    await client.execute(
        """mutation($input: SetAccountLimitInput!) { setAccountLimit(input: $input) {
        account { maxInFlight } } }""",
        {"input": {"connectorName": "calendar", "accountKey": "acct-0", "maxInFlight": cap}},
        repeatable=True,
    )
    items = spread(claims(count), "acct-0", every=every)
    await enqueue_all(client, items)
    sends: collections.Counter[str] = collections.Counter()
    in_handlers: collections.Counter[str] = collections.Counter()
    most: collections.Counter[str] = collections.Counter()

    async def handle(batch: list[LeasedOperation]) -> list[Committed]:
        accounts = collections.Counter(operation.account_key for operation in batch)
        in_handlers.update(accounts)
        for account in accounts:
            most[account] = max(most[account], in_handlers[account])
        await asyncio.sleep(0)
        sends.update(operation.deterministic_event_id for operation in batch)
        in_handlers.subtract(accounts)
        return [Committed({"id": operation.deterministic_event_id}) for operation in batch]

    worker = Worker(
        client, handle, connector_name=None, batch_size=250, concurrency=4, lease_ms=60_000
    )
    stats = await worker.run(until_idle=True)

    assert stats.committed == count and stats.lost == 0
    assert sends == collections.Counter(item["deterministicEventID"] for item in items)
    assert await states(client) == {"COMMITTED": count}
    assert 0 < most["acct-0"] <= cap


def sdk_env() -> dict[str, str]:
    """The environment of a worker process: a service token, and the SDK importable from
    this checkout (``make install`` installs it; the suite may run without)."""
    return os.environ | {
        "CONNECTOR_STORE_TOKEN": SERVICE_TOKEN,
        "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "client")]),
    }


def start_worker(server: Server, provider: Path, hold: Path | None) -> subprocess.Popen[str]:
    command = [sys.executable, str(SDK_WORKER), server.url + "/graphql", str(provider)]
    command += [] if hold is None else ["--hold", str(hold)]
    return subprocess.Popen(
        command, env=sdk_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


async def exited(process: subprocess.Popen[str]) -> tuple[int, str, str]:
    stdout, stderr = await asyncio.to_thread(process.communicate, timeout=WAIT_S)
    return process.returncode, stdout, stderr


async def test_worker__killed_mid_batch_then_restarted_loses_and_doubles_nothing(
    client, server, tmp_path
):
    await enqueue_all(client, claims(60))
    provider, started = tmp_path / "provider.jsonl", tmp_path / "started"
    killed = start_worker(server, provider, hold=started)
    await until(lambda: asyncio.sleep(0, started.exists()), "the first batch to be sent")
    killed.send_signal(signal.SIGKILL)
    await exited(killed)

    restarted = start_worker(server, provider, hold=None)
    try:
        await until(
            lambda: _committed(client, 60), "every operation to be committed after the restart"
        )
    finally:
        restarted.send_signal(signal.SIGTERM)
        code, _, stderr = await exited(restarted)
    assert code == 0, stderr

    assert await states(client) == {"COMMITTED": 60}
    sent = {json.loads(line) for line in provider.read_text().splitlines()}
    assert sent == {f"det-op-{n}" for n in range(60)}


async def _committed(client: Client, count: int) -> bool:
    return (await states(client)).get("COMMITTED", 0) == count


async def test_worker__sigterm_releases_its_leases(client, server, tmp_path):
    await enqueue_all(client, claims(30))
    provider, started = tmp_path / "provider.jsonl", tmp_path / "started"
    worker = start_worker(server, provider, hold=started)
    await until(lambda: asyncio.sleep(0, started.exists()), "the first batch to be sent")

    worker.send_signal(signal.SIGTERM)
    code, stdout, stderr = await exited(worker)

    assert code == 0, stderr
    sent = provider.read_text().splitlines()
    assert json.loads(stdout)["released"] == len(sent) > 0
    counts = await client.execute("{ operationCounts { state count inFlight } }", repeatable=True)
    assert [(row["state"], row["inFlight"]) for row in counts["operationCounts"]] == [
        ("ATTEMPTED", 0)
    ] * len(counts["operationCounts"])


class Cuttable:
    """A TCP proxy to ``upstream`` (host, port) on a free local port: ``cut()`` drops every
    connection through it, and refuses new ones until ``mend()``."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.writers: set[asyncio.StreamWriter] = set()
        self.down = False
        self.server: asyncio.Server | None = None

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._pipe, "127.0.0.1", 0)
        port: int = self.server.sockets[0].getsockname()[1]
        return port

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.down:
            writer.close()
            return
        up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        self.writers |= {writer, up_writer}

        async def copy(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
            try:
                while data := await source.read(65536):
                    sink.write(data)
                    await sink.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                sink.close()

        await asyncio.gather(copy(reader, up_writer), copy(up_reader, writer))

    def cut(self) -> None:
        self.down = True
        for writer in self.writers:
            writer.close()
        self.writers.clear()

    def mend(self) -> None:
        self.down = False

    async def aclose(self) -> None:
        self.cut()
        if self.server is not None:
            self.server.close()


async def test_follow_events__reconnect_mid_stream_misses_and_repeats_nothing(client, server):
    host, port = server.url.removeprefix("http://").split(":")
    proxy = Cuttable((host, int(port)))
    proxied = f"http://127.0.0.1:{await proxy.start()}/graphql"
    seen: list[str] = []

    async def follow() -> None:
        async with Client(proxied, SERVICE_TOKEN) as follower:
            async for event in follow_events(follower, {"connectorName": "calendar"}):
                seen.append(event["operation"]["operationID"])
                if sum(not name.startswith("warm") for name in seen) == 60:
                    return

    following = asyncio.create_task(follow())
    try:
        warm = 0
        while not seen:  # the subscription is live once it sees an event
            await enqueue_all(client, [claims(1, prefix=f"warm{warm}")[0]])
            warm += 1
            await asyncio.sleep(0.05)
        await enqueue_all(client, claims(20, prefix="a"))
        await until(lambda: asyncio.sleep(0, "a-19" in seen), "the first 20 events")
        proxy.cut()
        await enqueue_all(client, claims(20, prefix="b"))
        proxy.mend()
        await enqueue_all(client, claims(20, prefix="c"))
        await asyncio.wait_for(following, WAIT_S)
    finally:
        following.cancel()
        await proxy.aclose()

    warmed = [name for name in seen if name.startswith("warm")]
    assert warmed == [f"warm{n}-0" for n in range(warm)][-len(warmed) :]
    followed = seen[len(warmed) :]
    assert len(followed) == len(set(followed))
    assert set(followed) == {f"{p}-{n}" for p in "abc" for n in range(20)}


async def test_the_documented_sdk_worker_commits_with_a_retry(server):
    command = [sys.executable, str(REPO / "examples" / "sdk_worker.py")]
    command += ["--url", server.url + "/graphql", "--operations", "12"]
    worker = await asyncio.to_thread(
        subprocess.run, command, capture_output=True, text=True, timeout=WAIT_S, env=sdk_env()
    )

    assert worker.returncode == 0, worker.stderr
    assert worker.stdout.splitlines() == ["committed: 12/12", "retried: 1"]


async def test_node_follow_events__exact_across_a_dropped_socket(client, server):
    """tests/node/follow-events.mjs (graphql-ws, its retry off, resubscribing with after)."""
    binary = shutil.which("node")
    if binary is None:
        pytest.skip("node is not installed")
    assert (NODE_DIR / "node_modules").is_dir(), "run `make node` (npm ci in tests/node)"
    host, port = server.url.removeprefix("http://").split(":")
    proxy = Cuttable((host, int(port)))
    proxied = f"ws://127.0.0.1:{await proxy.start()}/graphql"
    follower = await asyncio.create_subprocess_exec(
        binary,
        "follow-events.mjs",
        proxied,
        SERVICE_TOKEN,
        "calendar",
        cwd=NODE_DIR,
        stdout=asyncio.subprocess.PIPE,
    )
    assert follower.stdout is not None
    seen: list[str] = []

    async def read() -> None:
        assert follower.stdout is not None
        while len([name for name in seen if not name.startswith("warm")]) < 60:
            line = await follower.stdout.readline()
            assert line, "the follower exited"
            seen.append(json.loads(line)["operationID"])

    reading = asyncio.create_task(read())
    try:
        warm = 0
        while not seen:
            await enqueue_all(client, [claims(1, prefix=f"warm{warm}")[0]])
            warm += 1
            await asyncio.sleep(0.1)
        await enqueue_all(client, claims(20, prefix="a"))
        await until(lambda: asyncio.sleep(0, "a-19" in seen), "the first 20 events")
        proxy.cut()
        await enqueue_all(client, claims(20, prefix="b"))
        proxy.mend()
        await enqueue_all(client, claims(20, prefix="c"))
        await asyncio.wait_for(reading, WAIT_S)
    finally:
        reading.cancel()
        follower.kill()
        await follower.wait()
        await proxy.aclose()

    followed = [name for name in seen if not name.startswith("warm")]
    assert len(followed) == len(set(followed))
    assert set(followed) == {f"{p}-{n}" for p in "abc" for n in range(20)}
