"""Two server processes on one database (two replicas on PostgreSQL; on SQLite, two processes
on one file, as ``serve --workers 2`` runs): a claim committed through one wakes a
``workAvailable`` subscriber of the other, and so does a write no server made (psql's or
sqlite3's): the database's triggers tell (NOTIFY on PostgreSQL, the wake-up table each process
tails on SQLite); and its event streams to an ``operationEvents`` subscriber of the other."""

import asyncio
import sqlite3
from contextlib import closing
from pathlib import Path

import asyncpg
import httpx
import pytest
import websockets

from tests.api.conftest import claim_input
from tests.api.live_client import Socket
from tests.databases import PostgresRun, as_driver
from tests.e2e.live import live_server
from tests.tokens import SERVICE_TOKEN, bearer

CLAIM = "mutation ($input: ClaimOperationInput!) { claimOperation(input: $input) { __typename } }"
RELEASE = (
    "UPDATE kubun_connector_operation SET lease_token = NULL, lease_expires_at = NULL "
    "WHERE operation_id = 'op-1'"
)


@pytest.fixture(params=["sqlite", "postgres"])
async def shared_url(request: pytest.FixtureRequest, tmp_path: Path, postgres_run: PostgresRun):
    if request.param == "sqlite":
        return f"sqlite+aiosqlite:///{tmp_path / 'shared.db'}"
    url = await postgres_run.create()
    await postgres_run.truncate()
    return url


async def write_outside(url: str, sql: str) -> None:
    """Run ``sql`` on the database as no server would: psql's or sqlite3's connection."""
    if url.startswith("sqlite"):
        with closing(sqlite3.connect(url.split(":///", 1)[1])) as connection:
            connection.execute(sql)
            connection.commit()
        return
    connection = await asyncpg.connect(as_driver(url, "postgresql"))
    try:
        await connection.execute(sql)
    finally:
        await connection.close()


async def test_a_commit_through_one_process_wakes_a_subscriber_of_the_other(
    tmp_path: Path, shared_url: str
) -> None:
    with (
        live_server(tmp_path, shared_url, name="one") as one,
        live_server(tmp_path, shared_url, name="two") as two,
    ):
        ws_url = two.url.replace("http", "ws", 1) + "/graphql"
        async with websockets.connect(ws_url, subprotocols=["graphql-transport-ws"]) as raw:
            sock = Socket(raw)
            assert await sock.init() == {"type": "connection_ack"}
            await sock.subscribe("w", connector="calendar")
            assert (await sock.receive())["payload"]["data"]["workAvailable"]

            async with httpx.AsyncClient(headers=bearer(SERVICE_TOKEN)) as http:
                answer = await http.post(
                    one.url + "/graphql",
                    json={"query": CLAIM, "variables": {"input": claim_input()}},
                )
            assert answer.json() == {"data": {"claimOperation": {"__typename": "OperationClaimed"}}}
            woken = await sock.receive()
            assert woken["payload"]["data"]["workAvailable"]["connectorName"] == "calendar"

            await write_outside(shared_url, RELEASE)
            woken = await sock.receive()
            assert woken["payload"]["data"]["workAvailable"]["connectorName"] == "calendar"


EVENTS = "subscription { operationEvents { action operation { operationID state } } }"


async def test_an_event_committed_through_one_process_streams_to_a_subscriber_of_the_other(
    tmp_path: Path, shared_url: str
) -> None:
    with (
        live_server(tmp_path, shared_url, name="one") as one,
        live_server(tmp_path, shared_url, name="two") as two,
    ):
        ws_url = two.url.replace("http", "ws", 1) + "/graphql"
        async with websockets.connect(ws_url, subprotocols=["graphql-transport-ws"]) as raw:
            sock = Socket(raw)
            assert await sock.init() == {"type": "connection_ack"}
            await sock.subscribe("e", EVENTS)
            await asyncio.sleep(0.3)

            async with httpx.AsyncClient(headers=bearer(SERVICE_TOKEN)) as http:
                answer = await http.post(
                    one.url + "/graphql",
                    json={"query": CLAIM, "variables": {"input": claim_input()}},
                )
            assert answer.json() == {"data": {"claimOperation": {"__typename": "OperationClaimed"}}}
            streamed = await sock.receive()

    assert streamed["payload"]["data"]["operationEvents"] == {
        "action": "CLAIMED",
        "operation": {"operationID": claim_input()["operationID"], "state": "ATTEMPTED"},
    }
