"""``make bench``'s load generator for the HTTP rows, lean so that it measures the server.

    .venv/bin/python -m benchmarks.load '{"scenario": "lifecycle", "port": 18931, ...}'

It runs in a process of its own, one per row and round, on uvloop: one HTTP/1.1 keep-alive
connection per worker over ``asyncio.open_connection``, each request written as one
pre-encoded byte string (the head's fixed part and each JSON body's fixed part encoded once,
the variables by orjson), each response framed by its ``Content-Length`` and its body decoded
by orjson. httpx, which the rows used before, spent as much CPU per lifecycle as the server
did, on the same two cores.

The spec (JSON): ``scenario`` (a name in ``SCENARIOS``), ``port``, ``count`` (lifecycles, or
requests for the ``*_time`` scenarios), ``connections`` (the workers, each with its own
connection), ``batch`` (lifecycles per request, default 1), optionally ``token`` (sent as
``Authorization: Bearer``) and, for the batch-1 scenarios (``lifecycle``,
``floor_lifecycle``), ``owners``: how many of the ``OWNERS`` tenants the operations are
spread over (default 1, every claim of one account). It is a measured child of
``benchmarks.cpu``: after a warm-up (one call per connection) it says it is ready, and when
told to go runs ``count`` lifecycles and prints one JSON line, ``lifecycles``, ``per_s`` and
``requests_per_lifecycle``; the CPU of its window (its own, the server's, PostgreSQL's) is
counted by whoever runs it (``benchmarks.side_by_side``).
"""

import asyncio
import itertools
import json
import secrets
import sys
import time
import zlib
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson
import uvloop

from benchmarks.cpu import done, ready

ROOT = Path(__file__).resolve().parent.parent
WORKER_DOCUMENT = (ROOT / "graphql" / "operations" / "worker.graphql").read_text()
LEASE_MS = 60_000
CALLER = "did:bench:caller"
PRECLAIM_BATCH = 500
"""Items per ``claimOperations`` request when the leasing scenario pre-claims (the most a
batch takes: docs/worker-protocol.md, 'Settling in batches')."""
OWNERS = 1_000
"""The tenants the batch rows' operations belong to, each with a provider account of its
own (issue 16's 1,000 owners). Leasing hands work out fairly across owners and walks each
owner's first few due operations: with one owner, 16 concurrent leasers would all rank the
same 50 and skip each other's locked rows, and one account would serialize every claim."""

# The batch mutations of graphql/schema.graphql, with leaner selections than
# worker.graphql's: what the next step needs, and the claim's lease expiry, which shows
# whether the claim took the claimant's lease (marks and finalizes go by the token alone, so
# they would also apply to a claim left unleased).
BATCH_DOCUMENT = """
mutation ClaimOperations($input: ClaimOperationsInput!) {
  claimOperations(input: $input) {
    results { __typename ... on OperationClaimed { operation { leaseExpiresAt } } }
  }
}
mutation MarkSendsStarted($input: MarkSendsStartedInput!) {
  markSendsStarted(input: $input) { results { applied operation { version } } }
}
mutation FinalizeOperations($input: FinalizeOperationsInput!) {
  finalizeOperations(input: $input) { results { applied } }
}
mutation LeaseOperations($input: LeaseOperationsInput!) {
  leaseOperations(input: $input) { operations { callerDID operationID } }
}
"""


class LoadError(Exception):
    """A response the scenario did not expect (a status other than 200, GraphQL errors, an
    outcome that did not apply): the row fails rather than count it."""


class Connection:
    """One HTTP/1.1 keep-alive connection to 127.0.0.1; counts the requests it sends."""

    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, headers: bytes
    ) -> None:
        self.reader = reader
        self.writer = writer
        self.headers = headers
        self.requests = 0

    @classmethod
    async def open(cls, port: int, token: str | None) -> "Connection":
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        headers = b"Host: 127.0.0.1:%d\r\n" % port
        if token is not None:
            headers += b"Authorization: Bearer %s\r\n" % token.encode()
        return cls(reader, writer, headers)

    async def post(self, path: bytes, body: bytes) -> Any:
        self.writer.write(
            b"POST %s HTTP/1.1\r\n%sContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
            % (path, self.headers, len(body), body)
        )
        return await self.response()

    async def get(self, path: bytes) -> Any:
        self.writer.write(b"GET %s HTTP/1.1\r\n%s\r\n" % (path, self.headers))
        return await self.response()

    async def response(self) -> Any:
        """The next response's JSON body; ``LoadError`` unless its status is 200."""
        head = await self.reader.readuntil(b"\r\n\r\n")
        self.requests += 1
        start = head.lower().find(b"\r\ncontent-length:")
        if start < 0:
            raise LoadError(f"a response without Content-Length: {head!r}")
        end = head.index(b"\r\n", start + 2)
        body = await self.reader.readexactly(int(head[start + 17 : end]))
        if head[9:12] != b"200":
            raise LoadError((head + body).decode(errors="replace"))
        return orjson.loads(body)

    def close(self) -> None:
        self.writer.close()


def graphql_body(document: str, operation: str | None) -> Callable[[Any], bytes]:
    """The request body of ``operation`` in ``document`` for given variables: everything but
    the variables encoded once."""
    fixed: dict[str, Any] = {"query": document}
    if operation is not None:
        fixed["operationName"] = operation
    prefix = orjson.dumps(fixed)[:-1] + b',"variables":'
    return lambda variables: prefix + orjson.dumps(variables) + b"}"


async def graphql(connection: Connection, body: bytes) -> Any:
    reply = await connection.post(b"/graphql", body)
    if reply.get("errors") or reply.get("data") is None:
        raise LoadError(reply)
    return reply["data"]


def claim_input(
    operation_id: str, token: str, lease_expires_at: int, tenant: int = 0
) -> dict[str, Any]:
    """``ClaimOperationInput`` of the benchmark's operations: the owner ``tenant`` with its
    own account, and one provider entity per operation (its own ``sourceID``), so no claim
    waits for an older operation of its entity."""
    return {
        "callerDID": CALLER,
        "operationID": operation_id,
        "ownerDID": f"did:bench:owner-{tenant}",
        "connectorName": "bench",
        "model": "CalendarEvent",
        "op": "create",
        "accountKey": f"account-{tenant}",
        "target": "calendars/primary",
        "sourceID": f"source-{operation_id}",
        "deterministicEventID": f"event-{operation_id}",
        "payloadHash": "sha256:0",
        "leaseToken": token,
        "leaseExpiresAt": lease_expires_at,
        "documentID": f"doc-{operation_id}",
    }


def tenant_of(operation_id: str) -> int:
    """The owner of a batch row's operation: one of ``OWNERS``, spread evenly."""
    return zlib.crc32(operation_id.encode()) % OWNERS


def now_ms() -> int:
    return int(time.time() * 1000)


Scenario = Callable[[Connection, int], Awaitable[int]]
"""Runs up to ``n`` lifecycles on a connection and returns how many it ran (fewer only when
the work ran out)."""


def new_ids() -> Callable[[], str]:
    """Fresh operation ids: this run's random prefix and a counter."""
    prefix, counter = secrets.token_hex(4), itertools.count()
    return lambda: f"load-{prefix}-{next(counter)}"


def lifecycle(spec: dict[str, Any]) -> Scenario:
    """Ours at batch 1: claimOperation → markSendStarted → finalizeOperation, the whole
    ``worker.graphql`` sent with an ``operationName`` as workers do; each operation of one of
    the spec's ``owners`` tenants (``tenant_of``)."""
    claim = graphql_body(WORKER_DOCUMENT, "ClaimOperation")
    mark = graphql_body(WORKER_DOCUMENT, "MarkSendStarted")
    finalize = graphql_body(WORKER_DOCUMENT, "FinalizeOperation")
    new_id = new_ids()
    owners = spec.get("owners", 1)

    async def run(connection: Connection, n: int) -> int:
        for _ in range(n):
            operation_id, token, now = new_id(), secrets.token_hex(8), now_ms()
            claimed = await graphql(
                connection,
                claim(
                    {
                        "input": claim_input(
                            operation_id, token, now + LEASE_MS, tenant_of(operation_id) % owners
                        )
                    }
                ),
            )
            if claimed["claimOperation"]["__typename"] != "OperationClaimed":
                raise LoadError(claimed)
            key = {"callerDID": CALLER, "operationID": operation_id}
            marked = await graphql(
                connection,
                mark({"input": key | {"leaseToken": token, "marker": f"run-{token}"}}),
            )
            version = marked["markSendStarted"]["operation"]["version"]
            done = await graphql(
                connection,
                finalize(
                    {
                        "input": key
                        | {
                            "version": version,
                            "leaseToken": token,
                            "dueAt": now + LEASE_MS,
                            "resultEntity": {"id": operation_id},
                            "providerEtag": "etag-1",
                        }
                    }
                ),
            )
            if not done["finalizeOperation"]["applied"]:
                raise LoadError(done)
        return n

    return run


MARK = graphql_body(BATCH_DOCUMENT, "MarkSendsStarted")
FINALIZE = graphql_body(BATCH_DOCUMENT, "FinalizeOperations")
CLAIM = graphql_body(BATCH_DOCUMENT, "ClaimOperations")


async def claim_batch(connection: Connection, items: list[dict[str, Any]]) -> list[Any]:
    """``claimOperations`` of ``items``; each result's ``leaseExpiresAt``, or ``LoadError``
    unless every item was freshly claimed."""
    claimed = await graphql(connection, CLAIM({"input": {"items": items}}))
    results = claimed["claimOperations"]["results"]
    if any(result["__typename"] != "OperationClaimed" for result in results):
        raise LoadError(claimed)
    return [result["operation"]["leaseExpiresAt"] for result in results]


async def settle_batch(connection: Connection, keys: list[dict[str, str]], token: str) -> None:
    """markSendsStarted then finalizeOperations on ``keys``, all leased to ``token``."""
    marker = f"run-{token}"
    marks = [key | {"leaseToken": token, "marker": marker} for key in keys]
    marked = await graphql(connection, MARK({"input": {"items": marks}}))
    results = marked["markSendsStarted"]["results"]
    if not all(result["applied"] for result in results):
        raise LoadError(marked)
    due_at = now_ms() + LEASE_MS
    items = [
        key
        | {
            "version": result["operation"]["version"],
            "leaseToken": token,
            "dueAt": due_at,
            "resultEntity": {"id": key["operationID"]},
            "providerEtag": "etag-1",
        }
        for key, result in zip(keys, results, strict=True)
    ]
    done = await graphql(connection, FINALIZE({"input": {"items": items}}))
    if not all(result["applied"] for result in done["finalizeOperations"]["results"]):
        raise LoadError(done)


def claimed_batch(spec: dict[str, Any]) -> Scenario:
    """Ours at batch N: claimOperations (N items of ``OWNERS`` tenants, each claim taking
    the claimant's lease, or ``LoadError``) → markSendsStarted → finalizeOperations, 3
    requests per N lifecycles; ``owners`` (default all) of them, as ``lifecycle``'s."""
    new_id = new_ids()
    owners = spec.get("owners", OWNERS)

    async def run(connection: Connection, n: int) -> int:
        token = secrets.token_hex(8)
        expires = now_ms() + LEASE_MS
        ids = [new_id() for _ in range(n)]
        items = [claim_input(i, token, expires, tenant_of(i) % owners) for i in ids]
        if any(lease != expires for lease in await claim_batch(connection, items)):
            raise LoadError(f"a claim was left unleased: {ids}")
        await settle_batch(
            connection, [{"callerDID": CALLER, "operationID": i} for i in ids], token
        )
        return n

    return run


def leased_batch(spec: dict[str, Any]) -> Scenario:
    """Ours at batch N, leasing: leaseOperations(limit N) → markSendsStarted →
    finalizeOperations over operations claimed before the run with a lapsed lease (so
    unleased and due; ``preclaim_unleased``), 3 requests per N lifecycles."""
    lease = graphql_body(BATCH_DOCUMENT, "LeaseOperations")

    async def run(connection: Connection, n: int) -> int:
        token = secrets.token_hex(8)
        leased = await graphql(
            connection, lease({"input": {"leaseToken": token, "leaseMs": LEASE_MS, "limit": n}})
        )
        operations = leased["leaseOperations"]["operations"]
        if operations:
            await settle_batch(connection, operations, token)
        return len(operations)

    return run


async def preclaim_unleased(connection: Connection, count: int) -> None:
    """``count`` operations of ``OWNERS`` tenants claimed with a lease that has already
    lapsed: due, and free for ``leaseOperations``."""
    new_id = new_ids()
    for start in range(0, count, PRECLAIM_BATCH):
        lapsed = now_ms() - 1
        ids = [new_id() for _ in range(min(PRECLAIM_BATCH, count - start))]
        items = [claim_input(i, secrets.token_hex(8), lapsed, tenant_of(i)) for i in ids]
        await claim_batch(connection, items)


def floor_lifecycle(spec: dict[str, Any]) -> Scenario:
    """The minimal Starlette + asyncpg service: one POST per step of the store's lifecycle,
    each operation of one of the spec's ``owners`` tenants, as ``lifecycle``'s."""
    paths = [b"/step/%d" % number for number in range(spec["steps"])]
    new_id = new_ids()
    owners = spec.get("owners", 1)

    async def run(connection: Connection, n: int) -> int:
        for _ in range(n):
            operation_id = new_id()
            tenant = tenant_of(operation_id) % owners
            body = orjson.dumps(
                {"id": operation_id, "token": secrets.token_hex(8), "tenant": tenant}
            )
            for path in paths:
                reply = await connection.post(path, body)
                if reply["rows"] != 1:
                    raise LoadError(reply)
        return n

    return run


def server_time(spec: dict[str, Any]) -> Scenario:
    """``{ serverTime }`` as a POST (ours, stock Strawberry)."""
    body = orjson.dumps({"query": "{ serverTime }"})

    async def run(connection: Connection, n: int) -> int:
        for _ in range(n):
            await graphql(connection, body)
        return n

    return run


def plain_time(spec: dict[str, Any]) -> Scenario:
    """The plain Starlette JSON endpoint ``GET /time``."""

    async def run(connection: Connection, n: int) -> int:
        for _ in range(n):
            await connection.get(b"/time")
        return n

    return run


SCENARIOS: dict[str, Callable[[dict[str, Any]], Scenario]] = {
    "lifecycle": lifecycle,
    "claimed_batch": claimed_batch,
    "leased_batch": leased_batch,
    "floor_lifecycle": floor_lifecycle,
    "server_time": server_time,
    "plain_time": plain_time,
}


async def drive(scenario: Scenario, connections: list[Connection], count: int, batch: int) -> int:
    """``count`` lifecycles over the connections, each call taking up to ``batch``; returns
    how many ran."""
    remaining = count

    async def worker(connection: Connection) -> int:
        nonlocal remaining
        ran = 0
        while remaining > 0:
            take = min(batch, remaining)
            remaining -= take
            got = await scenario(connection, take)
            remaining += take - got
            if got == 0:
                break
            ran += got
        return ran

    return sum(await asyncio.gather(*(worker(connection) for connection in connections)))


async def measure(spec: dict[str, Any]) -> None:
    """Runs ``spec`` as a measured child (``benchmarks.cpu``): connects and warms up, then
    times ``count`` lifecycles in the window it is given and prints its result."""
    scenario = SCENARIOS[spec["scenario"]](spec)
    batch = spec.get("batch", 1)
    connections = [
        await Connection.open(spec["port"], spec.get("token")) for _ in range(spec["connections"])
    ]
    try:
        if spec["scenario"] == "leased_batch":
            await preclaim_unleased(connections[0], spec["count"] + len(connections))
        await asyncio.gather(*(scenario(connection, 1) for connection in connections))
        for connection in connections:
            connection.requests = 0
        ready()
        started = time.perf_counter()
        lifecycles = await drive(scenario, connections, spec["count"], batch)
        seconds = time.perf_counter() - started
        done(
            {
                "lifecycles": lifecycles,
                "per_s": lifecycles / seconds,
                "requests_per_lifecycle": sum(c.requests for c in connections) / lifecycles,
            }
        )
    finally:
        for connection in connections:
            connection.close()


if __name__ == "__main__":
    uvloop.run(measure(json.loads(sys.argv[1])))
