"""The lean lane (``server.lean_lane``) answers as the app does, byte for byte: the same
requests, in the same order, sent to an app with the lane (the default) over one fresh
database and to one without it (``LEAN_LANE=false``, the reference) over another, compared
message by message (status, every header, body), log line by log line (every field but the
duration) and in the request metrics; each on both backends. The lane must have answered
the requests it knows, and left the others to the app."""

import asyncio
import itertools
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest

from server.app import ConnectorApp, create_app
from server.lean_lane import LANE_STEPS
from server.pipeline import pipeline
from server.settings import Settings
from store import ConnectorStore
from store.database import Database
from tests.api.conftest import DOCUMENTS, claim_input
from tests.conftest import FrozenClock
from tests.databases import sqlite_copy
from tests.tokens import SERVICE_TOKEN, mint

WORKER = (Path(DOCUMENTS) / "worker.graphql").read_text()
KEY = {"callerDID": "did:key:caller", "operationID": "op-1"}
TENANT = mint(sub="did:key:caller", scope="operations:write", ttl=3600)
READER = mint(scope="operations:read", ttl=3600)
OTHER_KEY = mint(key="another-key-" + "x" * 32)
GRAPHQL_RESPONSE = "application/graphql-response+json, application/json"
MARK = {"leaseToken": "lease-A", "marker": "m"}
COUNTED = ("connector_requests_total", "connector_lease_takeovers_total", "connector_contested")


def request(
    operation: str | None,
    variables: dict[str, Any] | None = None,
    *,
    token: str | None = SERVICE_TOKEN,
    query: str = WORKER,
    accept: str | None = None,
    body: bytes | None = None,
    content_type: str = "application/json",
) -> dict[str, Any]:
    """One request of the scenario: a POST to ``/graphql`` of ``operation`` (by name) in
    ``query``, or of ``body`` as it is."""
    if body is None:
        payload: dict[str, Any] = {"query": query, "variables": variables}
        if operation is not None:
            payload["operationName"] = operation
        body = json.dumps(payload).encode()
    headers = [(b"content-type", content_type.encode()), (b"content-length", b"%d" % len(body))]
    if token is not None:
        headers.append((b"authorization", f"Bearer {token}".encode()))
    if accept is not None:
        headers.append((b"accept", accept.encode()))
    return {"headers": headers, "body": body}


def scenario(now: int) -> list[tuple[dict[str, Any], bool]]:
    """The requests, each with whether the lane answers it: the worker's lifecycle, one
    request and in batches, with GraphQL over HTTP's response type, refusals of every kind
    the lane answers, and those it leaves to the app."""
    claim = claim_input(leaseExpiresAt=now + 60_000)
    renewed = now + 9_000
    second = claim_input(operationID="op-2", leaseToken="lease-B", leaseExpiresAt=now + 60_000)
    return [
        (request("ServerTime"), True),
        (request(None, query="{ serverTime }"), True),
        (request("ClaimOperation", {"input": claim}), True),
        (request("ClaimOperation", {"input": claim}, accept=GRAPHQL_RESPONSE), True),
        (request("ClaimOperations", {"input": {"items": [second]}}), True),
        (request("GetOperation", KEY), True),
        (
            request("RenewLease", {"input": KEY | {"token": "lease-A", "expiresAt": renewed}}),
            True,
        ),
        (
            request("MarkSendStarted", {"input": KEY | {"leaseToken": "lease-A", "marker": "m"}}),
            True,
        ),
        (
            request(
                "MarkSendStarted",
                {"input": KEY | {"leaseToken": "lease-A", "marker": "m"}},
                token=READER,
            ),
            True,
        ),
        (request("MarkSendStarted", {"input": KEY | {"leaseToken": "", "marker": "m"}}), True),
        (
            request(
                "FinalizeOperation",
                {"input": KEY | {"version": 3, "leaseToken": "lease-A", "dueAt": now}},
            ),
            True,
        ),
        (
            request(
                "MarkSendsStarted",
                {
                    "input": {
                        "items": [
                            {
                                "callerDID": "did:key:caller",
                                "operationID": "op-2",
                                "leaseToken": "lease-B",
                                "marker": "m2",
                            }
                        ]
                    }
                },
                token=TENANT,
            ),
            True,
        ),
        (
            request(
                "LeaseOperations",
                {"input": {"leaseToken": "lease-L", "limit": 5, "leaseMs": 30_000}},
            ),
            True,
        ),
        (request("DueOperations", {"now": now + 120_000}, accept=GRAPHQL_RESPONSE), True),
        # Left to the app: variables graphql-core refuses, no token, a token of another
        # key, a document that does not validate, an unknown operationName, JSON with a key
        # twice, a persisted query, a body that is not JSON, a stream.
        (request("ClaimOperation", {"input": {"operationID": 7}}), False),
        (request("ClaimOperation", {"input": claim}, accept=GRAPHQL_RESPONSE, token=None), False),
        (request("ServerTime", token=OTHER_KEY), False),
        (request(None, query="{ serverTime nope }"), False),
        (request("NoSuchOperation"), False),
        (request(None, body=b'{"query": "{ serverTime }", "query": "{ serverTime }"}'), False),
        (
            request(
                None,
                body=json.dumps(
                    {"extensions": {"persistedQuery": {"version": 1, "sha256Hash": "0" * 64}}}
                ).encode(),
            ),
            False,
        ),
        (request(None, body=b"not json"), False),
        (request("ServerTime", content_type="text/plain"), False),
    ]


async def sent(app: ConnectorApp, number: int, given: dict[str, Any]) -> list[dict[str, Any]]:
    """The ASGI messages ``app`` sends in answer to request ``number`` of the scenario."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/graphql",
        "raw_path": b"/graphql",
        "query_string": b"",
        "root_path": "",
        "headers": [*given["headers"], (b"x-request-id", b"req-%d" % number)],
        "client": ("127.0.0.1", 50000),
        "server": ("test", 80),
    }
    messages: list[dict[str, Any]] = []
    bodies = [{"type": "http.request", "body": given["body"], "more_body": False}]

    async def receive() -> dict[str, Any]:
        if bodies:
            return bodies.pop(0)
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    async def send(message: dict[str, Any]) -> None:
        messages.append(message)

    await app(scope, receive, send)
    return messages


class Lines(logging.Handler):
    """The request log lines: every field of each, but the duration."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[dict[str, Any]] = []

    def emit(self, record: logging.LogRecord) -> None:
        fields = ("request_id", "operation", "viewer_did", "method", "path", "status", "outcome")
        self.lines.append(
            {"level": record.levelname} | {name: getattr(record, name) for name in fields}
        )


@pytest.fixture
def request_lines() -> Iterator[Lines]:
    handler = Lines()
    logger = logging.getLogger("connector_store.request")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    yield handler
    logger.removeHandler(handler)
    logger.setLevel(level)


def request_metrics(app: ConnectorApp) -> list[str]:
    """The request counters of ``app``'s metrics (their latencies left out)."""
    text = generate_latest(app.state.metrics.registry).decode()
    return [
        line
        for line in text.splitlines()
        if line.startswith(
            (
                "connector_requests_total",
                "connector_lease_takeovers_total",
                "connector_contested_sends_total",
            )
        )
        or ("_count{" in line and "request" in line)
    ]


async def answers(
    store: ConnectorStore, lean: bool, lines: Lines
) -> tuple[list[Any], list[Any], list[str], list[bool]]:
    """Each request's messages, the log lines, the request metrics, and for each request
    whether the app behind the lane answered it."""
    app = create_app(Settings(sweeper=False, metrics=True, lean_lane=lean), store=store)
    assert (app.lane is not None) is lean, "LEAN_LANE turns the lane on and off"
    fell: list[bool] = []
    if app.lane is not None:
        behind = app.lane.app

        async def noted(scope: Any, receive: Any, send: Any) -> None:
            fell[-1] = True
            await behind(scope, receive, send)

        app.lane.app = noted
    lines.lines.clear()
    messages = []
    for number, (given, _) in enumerate(scenario(store.clock())):
        fell.append(False)
        messages.append(await sent(app, number, given))
    return messages, list(lines.lines), request_metrics(app), fell


def minted(database: Database) -> ConnectorStore:
    """A store over ``database`` whose clock starts where every test's does and whose node
    keys are counted, so the same requests make the same rows on both passes."""
    numbers = itertools.count(1)
    return ConnectorStore(database, clock=FrozenClock(), new_id=lambda: f"node-{next(numbers)}")


async def test_lean_lane__answers_as_the_app_byte_for_byte(
    database, database_url, sqlite_template_path, tmp_path, postgres_run, request_lines
):
    lean = await answers(minted(database), True, request_lines)
    if database_url.startswith("sqlite"):
        folder = tmp_path / "reference"
        folder.mkdir()
        reference_db = Database(sqlite_copy(sqlite_template_path, folder), pool_size=4)
        await reference_db.connect()
    else:
        await postgres_run.truncate(restart_identity=True)
        reference_db = database
    try:
        reference = await answers(minted(reference_db), False, request_lines)
    finally:
        if reference_db is not database:
            await reference_db.disconnect()
    expected = [not answered for _, answered in scenario(FrozenClock().now)]
    assert lean[3] == expected, "the lane answered the requests it knows, and no other"
    for number, (ours, theirs) in enumerate(zip(lean[0], reference[0], strict=True)):
        assert ours == theirs, f"request {number}"
    assert lean[1] == reference[1]
    assert lean[2] == reference[2]


def test_pipeline__every_step_was_reviewed_for_the_lane():
    """A step added to the pipeline fails this until ``server.lean_lane.LANE_STEPS`` says
    what the lane does for it (the lane runs the pipeline only when it learns a document)."""
    steps = {
        getattr(step, "func", step).__name__
        for introspection in (True, False)
        for step in pipeline(Settings(introspection=introspection))
    }
    assert steps == set(LANE_STEPS)
