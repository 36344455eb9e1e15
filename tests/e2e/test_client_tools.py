"""JavaScript client tools against a real server, as their authors ship them: urql's HTTP
subscriptions with the ``Accept`` header urql sends (tests/node/urql-subscribe.mjs), Apollo
Client with the documents of one operation each (tests/node/apollo-client.mjs), and
graphql-codegen's typescript and typescript-operations compiled by tsc (tests/node/codegen.ts)."""

import asyncio
import json
import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from connector_store_client import Client

from server.graphql_view import MULTIPART_SUBSCRIPTION_ACCEPT, with_stream_accept
from tests.e2e.live import NODE_DIR, Server, live_server
from tests.e2e.test_client_sdk import claims, enqueue_all
from tests.tokens import SERVICE_TOKEN

WAIT_S = 120.0


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[Server]:
    with live_server(tmp_path) as running:
        yield running


def node() -> str:
    binary = shutil.which("node")
    if binary is None:
        pytest.skip("node is not installed")
    assert (NODE_DIR / "node_modules").is_dir(), "run `make node` (npm ci in tests/node)"
    return binary


async def test_urql_http_subscription__streams_events_with_urqls_own_accept(server):
    follower = await asyncio.create_subprocess_exec(
        node(),
        "urql-subscribe.mjs",
        server.url + "/graphql",
        SERVICE_TOKEN,
        "calendar",
        "5",
        cwd=NODE_DIR,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    seen: list[str] = []
    try:
        async with Client(server.url + "/graphql", SERVICE_TOKEN) as client:
            warm = 0
            while not seen:  # the stream is open once it carries an event
                await enqueue_all(client, [claims(1, prefix=f"warm{warm}")[0]])
                warm += 1
                assert follower.stdout is not None
                try:
                    line = await asyncio.wait_for(follower.stdout.readline(), 0.5)
                except TimeoutError:
                    continue
                assert line, (await follower.communicate())[1].decode()
                seen.append(json.loads(line)["operationID"])
            await enqueue_all(client, claims(4, prefix="u"))
        stdout, stderr = await asyncio.wait_for(follower.communicate(), WAIT_S)
    finally:
        if follower.returncode is None:
            follower.kill()
            await follower.wait()

    assert follower.returncode == 0, stderr.decode()
    seen += [json.loads(line)["operationID"] for line in stdout.decode().splitlines()]
    assert sorted(seen[1:]) == [f"u-{n}" for n in range(4)]


@pytest.mark.parametrize(
    ("accept", "streamed"),
    [
        (b"text/event-stream, multipart/mixed", True),
        (b"multipart/mixed", True),
        (b'multipart/mixed;subscriptionSpec="1.0", application/json', False),
        (
            b"application/graphql-response+json, application/graphql+json, application/json, "
            b"text/event-stream, multipart/mixed",
            False,
        ),
        (b"text/event-stream", False),
    ],
)
def test_with_stream_accept__only_an_accept_of_streams_alone_is_read_as_multipart(accept, streamed):
    scope = {"type": "http", "headers": [(b"host", b"x"), (b"accept", accept)]}

    headers = dict(with_stream_accept(scope)["headers"])

    assert headers[b"accept"] == (MULTIPART_SUBSCRIPTION_ACCEPT if streamed else accept)
    assert headers[b"host"] == b"x"


async def test_apollo_client__refuses_a_multi_operation_file_runs_a_single_document(server):
    done = await asyncio.create_subprocess_exec(
        node(),
        "apollo-client.mjs",
        server.url + "/graphql",
        SERVICE_TOKEN,
        cwd=NODE_DIR,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    stdout, stderr = await asyncio.wait_for(done.communicate(), WAIT_S)

    assert done.returncode == 0, stderr.decode()
    assert json.loads(stdout) == {
        "claimed": "OperationClaimed",
        "state": "ATTEMPTED",
        "multiRefused": True,
    }


async def test_graphql_codegen__typescript_and_operations_compile_with_times_as_numbers(tmp_path):
    """tests/node/codegen.ts over the client SDL and graphql/operations, then ``tsc --noEmit
    --strict`` of its output with codegen-check.ts, which reads an ``EpochMillis`` as a
    number (``unknown`` would not compile)."""
    node()
    env = os.environ | {"CODEGEN_OUT": str(tmp_path)}
    codegen = await asyncio.create_subprocess_exec(
        str(NODE_DIR / "node_modules" / ".bin" / "graphql-codegen"),
        "--config",
        "codegen.ts",
        cwd=NODE_DIR,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    output, _ = await asyncio.wait_for(codegen.communicate(), WAIT_S)
    assert codegen.returncode == 0, output.decode()
    shutil.copy(NODE_DIR / "codegen-check.ts", tmp_path)

    tsc = await asyncio.create_subprocess_exec(
        str(NODE_DIR / "node_modules" / ".bin" / "tsc"),
        *("--noEmit", "--strict", "--target", "ES2022", "--module", "ESNext"),
        *("--moduleResolution", "Bundler", "--verbatimModuleSyntax", "--skipLibCheck"),
        *(str(tmp_path / name) for name in ("types.ts", "operations.ts", "codegen-check.ts")),
        cwd=NODE_DIR,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    output, _ = await asyncio.wait_for(tsc.communicate(), WAIT_S)

    assert tsc.returncode == 0, output.decode()
    assert "EpochMillis: { input: number; output: number; }" in (tmp_path / "types.ts").read_text()
