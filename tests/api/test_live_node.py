"""The JS ``graphql-ws`` client (tests/node/live.mjs) against the server's graphql-transport-ws,
on both backends: a token in ``connectionParams``, signals as claims commit, a refused
token closed with 4403 and its reason, and a token that expires mid-stream ending its
subscription with ``UNAUTHENTICATED`` and then the connection with 4403."""

import asyncio
import json
import shutil
from typing import Any

import pytest

from resolvers.codes import UNAUTHENTICATED
from server.settings import Settings
from tests.api.live_client import served
from tests.e2e.live import NODE_DIR
from tests.factories import claimed_operation
from tests.tokens import SERVICE_TOKEN, mint

WAIT_S = 15.0


async def node_client(
    url: str, token: str, connector: str, count: int, *, keep: bool = False
) -> Any:
    """live.mjs subscribed to ``connector``'s work for ``count`` results; ``keep``: a completed
    subscription leaves the connection open until the server closes it."""
    binary = shutil.which("node")
    if binary is None:
        pytest.skip("node is not installed")
    if not (NODE_DIR / "node_modules" / "graphql-ws").is_dir():
        pytest.fail("tests/node/node_modules lacks graphql-ws: run `make node`")
    return await asyncio.create_subprocess_exec(
        binary,
        "live.mjs",
        url,
        token,
        connector,
        str(count),
        *(["keep"] if keep else []),
        cwd=NODE_DIR,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


async def line(process: Any) -> dict[str, Any]:
    raw = await asyncio.wait_for(process.stdout.readline(), WAIT_S)
    if not raw:
        stderr = await process.stderr.read()
        pytest.fail(f"the node client ended: {stderr.decode()}")
    return json.loads(raw)


async def test_graphql_ws_client__signals_as_claims_commit(store):
    async with served(store) as server:
        process = await node_client(server.ws, SERVICE_TOKEN, "calendar", 2)
        try:
            first = await line(process)
            assert first["data"]["workAvailable"]["connectorName"] == "calendar"
            await claimed_operation(store)
            second = await line(process)
            assert second == {
                "data": {"workAvailable": {"connectorName": "calendar", "at": store.clock()}}
            }
            assert (await line(process))["closed"] == 1000
        finally:
            if process.returncode is None:
                process.kill()
            await process.wait()


async def test_graphql_ws_client__a_refused_token_is_closed_4403_with_its_reason(store):
    async with served(store) as server:
        process = await node_client(server.ws, "not-a-jwt", "calendar", 1)
        try:
            closed = await line(process)
        finally:
            if process.returncode is None:
                process.kill()
            await process.wait()
    assert closed["closed"] == 4403
    assert "not a well-formed JWT" in closed["reason"]


async def test_graphql_ws_client__an_expiring_token_ends_the_stream_then_closes_4403(store):
    settings = Settings(sweeper=False, jwt_leeway_seconds=0)
    async with served(store, settings) as server:
        process = await node_client(server.ws, mint(ttl=2), "calendar", 10, keep=True)
        try:
            first = await line(process)
            assert first["data"]["workAvailable"]["connectorName"] == "calendar"
            ended = await line(process)
            assert await line(process) == {"complete": True}
            closed = await line(process)
        finally:
            if process.returncode is None:
                process.kill()
            await process.wait()
    assert [error["extensions"]["code"] for error in ended["errors"]] == [UNAUTHENTICATED]
    assert closed["closed"] == 4403
    assert "expired" in closed["reason"]
