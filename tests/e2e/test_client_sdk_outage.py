"""The client SDK's worker through a real server's outage, on both backends: the server
process is stopped (SIGKILL on SQLite, SIGTERM on PostgreSQL) while the worker's settles of
finished writes are in flight, and started again on the same port and database. Every
operation ends COMMITTED with one attempt, and the handler sent each exactly once."""

import asyncio
import collections
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from connector_store_client import Client, Committed, LeasedOperation, Worker, enqueue

from tests.databases import PostgresRun
from tests.e2e.test_client_sdk import claims, states, until
from tests.faults.harness import Server
from tests.ports import free_port
from tests.tokens import SERVICE_TOKEN

OPERATIONS = 30


@pytest.fixture(params=["sqlite", "postgres"])
async def restartable(
    request: pytest.FixtureRequest, tmp_path: Path, postgres_run: PostgresRun
) -> AsyncIterator[Server]:
    """A server process that a test may stop and start again on its port and database."""
    if request.param == "sqlite":
        url = f"sqlite+aiosqlite:///{tmp_path / 'outage.db'}"
    else:
        url = await postgres_run.create()
        await postgres_run.truncate()
    server = Server(url, free_port(), tmp_path / "server.log", {"SWEEPER": "false"})
    server.start().wait_ready()
    try:
        yield server
    finally:
        server.kill()


@pytest.mark.slow
async def test_worker__a_server_restart_mid_settle_sends_each_write_once(restartable):
    server = restartable
    sigkill = server.database_url.startswith("sqlite")
    sends: collections.Counter[str] = collections.Counter()
    sent, down = asyncio.Event(), asyncio.Event()

    async def handle(batch: list[LeasedOperation]) -> list[Committed]:
        sends.update(operation.deterministic_event_id for operation in batch)
        sent.set()
        await down.wait()  # the provider took the writes; the server is gone before the settle
        return [Committed({"id": operation.deterministic_event_id}) for operation in batch]

    async with Client(server.url + "/graphql", SERVICE_TOKEN) as client:
        await enqueue(client, claims(OPERATIONS))
        worker = Worker(
            client,
            handle,
            connector_name="calendar",
            batch_size=10,
            concurrency=1,
            lease_ms=60_000,
            fallback_s=0.5,
        )
        running = asyncio.create_task(worker.run())
        try:
            await asyncio.wait_for(sent.wait(), 60)
            if sigkill:
                server.kill()
            else:
                server.terminate()
            down.set()
            await until(lambda: asyncio.sleep(0, worker.stats.resent > 0), "a settle to fail")
            await asyncio.to_thread(lambda: server.start().wait_ready(60))

            async def all_committed() -> bool:
                assert not running.done(), running.result()
                return (await states(client)).get("COMMITTED", 0) == OPERATIONS

            await until(all_committed, "every operation to be committed after the restart")
        finally:
            worker.stop()
            stats = await asyncio.wait_for(running, 60)

    assert sends == {f"det-op-{n}": 1 for n in range(OPERATIONS)}
    assert stats.committed == OPERATIONS and stats.released == 0 and stats.lost == 0
    attempts = await _attempts(server)
    assert attempts == {1: OPERATIONS}


async def _attempts(server: Server) -> collections.Counter[int]:
    async with Client(server.url + "/graphql", SERVICE_TOKEN) as client:
        data = await client.execute(
            "{ operations(first: 100) { edges { node { attempts } } } }", repeatable=True
        )
    return collections.Counter(edge["node"]["attempts"] for edge in data["operations"]["edges"])
