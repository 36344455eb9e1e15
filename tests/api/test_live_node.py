"""The JS ``graphql-ws`` client (tests/node/live.mjs) against the server's graphql-transport-ws,
on both backends: a token in ``connectionParams``, signals as claims commit, operation
events resumed with ``after`` and then live, in order, a refused token closed with 4403 and
its reason, and a token that expires mid-stream ending its subscription with
``UNAUTHENTICATED`` and then the connection with 4403."""

import asyncio
import json
import os
import shutil
from typing import Any

import pytest

from resolvers.codes import UNAUTHENTICATED
from server.settings import Settings
from tests.api.live_client import served
from tests.e2e.live import NODE_DIR
from tests.factories import claimed_operation, marked
from tests.tokens import SERVICE_TOKEN, mint

# Real processes (a `connector-store` command or server): left out of `make test-fast`.
pytestmark = pytest.mark.slow

WAIT_S = 15.0


async def node_client(
    url: str,
    token: str,
    connector: str,
    count: int,
    *,
    keep: bool = False,
    query: str | None = None,
    variables: dict[str, Any] | None = None,
) -> Any:
    """live.mjs subscribed to ``connector``'s work (or to ``query`` with ``variables``) for
    ``count`` results; ``keep``: a completed subscription leaves the connection open until
    the server closes it."""
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
        env={
            **os.environ,
            **(
                {}
                if query is None
                else {"LIVE_QUERY": query, "LIVE_VARIABLES": json.dumps(variables or {})}
            ),
        },
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
        # Long enough for Node to start and subscribe on a loaded machine (it took over 2 s
        # in a loaded CI run): a token expired before connection_init is refused instead.
        process = await node_client(server.ws, mint(ttl=8), "calendar", 10, keep=True)
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


EVENTS = (
    "subscription Events($after: String) { operationEvents(after: $after) "
    "{ sequence action operation { operationID } } }"
)


async def test_graphql_ws_client__operation_events_resume_after_then_go_live(store):
    first = await claimed_operation(store, operation_id="op-1")
    [seen] = await store.events.operation_events_after(None, 1)
    await marked(store, first)
    async with served(store) as server:
        process = await node_client(
            server.ws, SERVICE_TOKEN, "-", 3, query=EVENTS, variables={"after": seen.sequence}
        )
        try:
            replayed = await line(process)
            second = await claimed_operation(store, operation_id="op-2", source_id="src-2")
            await marked(store, second)
            live = [await line(process), await line(process)]
            assert (await line(process))["closed"] == 1000
        finally:
            if process.returncode is None:
                process.kill()
            await process.wait()
    events = [result["data"]["operationEvents"] for result in [replayed, *live]]
    assert [(e["action"], e["operation"]["operationID"]) for e in events] == [
        ("SEND_MARKED", "op-1"),
        ("CLAIMED", "op-2"),
        ("SEND_MARKED", "op-2"),
    ]
    assert [e["sequence"] for e in events] == sorted({e["sequence"] for e in events})
