"""Benchmarks of the write-back lifecycle: claim -> markSendStarted -> finalize.

    .venv/bin/python -m benchmarks.run [--backend sqlite|postgres|both] [--operations N]

On each backend, on a fresh database (a temporary SQLite file; a temporary PostgreSQL
database ``bench_<random>`` on the local server, dropped afterwards), it measures:

- the store, called directly: lifecycles per second run one after another, and run by 20
  concurrent asyncio tasks; the p50/p95 latency of ``claim_operation`` in both runs;
- the ASGI app in process (``httpx.ASGITransport``, no sockets): the same lifecycle as three
  GraphQL mutations (the documents of ``graphql/operations/worker.graphql``), sequentially
  and with 20 concurrent tasks;
- the peak resident set size of the process.

With ``--backend both`` each backend runs in its own child process, so each peak RSS is its
own. Prints a Markdown table (and, with ``--json``, the raw numbers).
"""

import argparse
import asyncio
import json
import os
import platform
import resource
import secrets
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg
import httpx
from sqlalchemy.engine import make_url

from server.app import create_app
from server.settings import Settings
from store import ConnectorStore
from store.database import Database
from store.migrate import upgrade
from store.operations import OperationClaim

DOCUMENTS = Path(__file__).resolve().parent.parent / "graphql" / "operations" / "worker.graphql"
DEFAULT_POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/test"
CONCURRENCY = 20
WARMUP = 20
LEASE_MS = 60_000

Lifecycle = Callable[[str], Awaitable[float]]
"""Runs one lifecycle on a fresh operation id; returns the claim's latency in seconds."""

ROWS = [
    ("store_seq", "store: lifecycles/s, sequential", "{:.0f}"),
    ("store_conc", f"store: lifecycles/s, {CONCURRENCY} concurrent tasks", "{:.0f}"),
    ("claim_p50_seq", "store: claim_operation p50 ms, sequential", "{:.2f}"),
    ("claim_p95_seq", "store: claim_operation p95 ms, sequential", "{:.2f}"),
    ("claim_p50_conc", f"store: claim_operation p50 ms, {CONCURRENCY} tasks", "{:.2f}"),
    ("claim_p95_conc", f"store: claim_operation p95 ms, {CONCURRENCY} tasks", "{:.2f}"),
    ("graphql_seq", "GraphQL (ASGI in process): lifecycles/s, sequential", "{:.0f}"),
    ("graphql_conc", f"GraphQL (ASGI in process): lifecycles/s, {CONCURRENCY} tasks", "{:.0f}"),
    ("peak_rss_mb", "peak RSS, MiB", "{:.0f}"),
]


@dataclass
class Measured:
    per_second: float
    claim_latencies: list[float]


def claim_for(operation_id: str, lease_token: str, now: int) -> OperationClaim:
    return OperationClaim(
        caller_did="did:bench:caller",
        operation_id=operation_id,
        owner_did="did:bench:owner",
        connector_name="bench",
        model="CalendarEvent",
        op="create",
        account_key="account",
        target="calendars/primary",
        source_id=f"source-{operation_id}",
        deterministic_event_id=f"event-{operation_id}",
        payload_hash="sha256:0",
        lease_token=lease_token,
        lease_expires_at=now + LEASE_MS,
        document_id=f"doc-{operation_id}",
    )


def store_lifecycle(store: ConnectorStore) -> Lifecycle:
    operations = store.operations

    async def lifecycle(operation_id: str) -> float:
        token = secrets.token_hex(8)
        started = time.perf_counter()
        claimed = await operations.claim_operation(claim_for(operation_id, token, store.clock()))
        latency = time.perf_counter() - started
        assert claimed.status == "claimed", claimed
        marked = await operations.mark_send_started(
            "did:bench:caller", operation_id, token, f"run-{token}"
        )
        assert marked is not None
        done = await operations.finalize_operation_and_arm_watch(
            "did:bench:caller",
            operation_id,
            version=marked.version,
            lease_token=token,
            due_at=store.clock() + LEASE_MS,
            result_entity={"id": operation_id},
            provider_etag="etag-1",
        )
        assert done is not None and done.operation.state == "committed"
        return latency

    return lifecycle


def graphql_lifecycle(client: httpx.AsyncClient, store: ConnectorStore) -> Lifecycle:
    documents = DOCUMENTS.read_text()

    async def call(name: str, **variables: Any) -> dict[str, Any]:
        payload = {"query": documents, "operationName": name, "variables": variables}
        response = await client.post("/graphql", json=payload)
        body = response.json()
        assert response.status_code == 200 and not body.get("errors"), body
        return body["data"]

    async def lifecycle(operation_id: str) -> float:
        token = secrets.token_hex(8)
        claim = claim_for(operation_id, token, store.clock())
        claimed = await call(
            "ClaimOperation",
            input={
                "callerDID": claim.caller_did,
                "operationID": claim.operation_id,
                "ownerDID": claim.owner_did,
                "connectorName": claim.connector_name,
                "model": claim.model,
                "op": claim.op,
                "accountKey": claim.account_key,
                "target": claim.target,
                "sourceID": claim.source_id,
                "deterministicEventID": claim.deterministic_event_id,
                "payloadHash": claim.payload_hash,
                "leaseToken": claim.lease_token,
                "leaseExpiresAt": claim.lease_expires_at,
                "documentID": claim.document_id,
            },
        )
        assert claimed["claimOperation"]["__typename"] == "OperationClaimed", claimed
        key = {"callerDID": claim.caller_did, "operationID": operation_id}
        marked = await call(
            "MarkSendStarted", input=key | {"leaseToken": token, "marker": f"run-{token}"}
        )
        version = marked["markSendStarted"]["operation"]["version"]
        done = await call(
            "FinalizeOperation",
            input=key
            | {
                "version": version,
                "leaseToken": token,
                "dueAt": store.clock() + LEASE_MS,
                "resultEntity": {"id": operation_id},
                "providerEtag": "etag-1",
            },
        )
        assert done["finalizeOperation"]["applied"], done
        return 0.0

    return lifecycle


async def measure(lifecycle: Lifecycle, prefix: str, count: int, concurrency: int) -> Measured:
    """Run ``count`` lifecycles over ``concurrency`` tasks (after a short warm-up)."""
    for i in range(WARMUP):
        await lifecycle(f"{prefix}-warmup-{i}")
    ids = iter(range(count))
    latencies: list[float] = []

    async def task() -> None:
        for i in ids:
            latencies.append(await lifecycle(f"{prefix}-{i}"))

    started = time.perf_counter()
    await asyncio.gather(*(task() for _ in range(concurrency)))
    elapsed = time.perf_counter() - started
    return Measured(count / elapsed, latencies)


def percentile_ms(latencies: list[float], pct: int) -> float:
    return statistics.quantiles(latencies, n=100, method="inclusive")[pct - 1] * 1000


async def bench_database(url: str, count: int) -> dict[str, float]:
    """Every measurement on the migrated, empty database at ``url``."""
    db = Database(url, pool_size=CONCURRENCY + 5)
    await db.connect()
    try:
        store = ConnectorStore(db)
        results: dict[str, float] = {}
        for name, concurrency in (("seq", 1), ("conc", CONCURRENCY)):
            measured = await measure(store_lifecycle(store), f"store-{name}", count, concurrency)
            results[f"store_{name}"] = measured.per_second
            results[f"claim_p50_{name}"] = percentile_ms(measured.claim_latencies, 50)
            results[f"claim_p95_{name}"] = percentile_ms(measured.claim_latencies, 95)

        app = create_app(Settings(database_url=url, graphiql=False), store=store)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://bench") as client:
            for name, concurrency in (("seq", 1), ("conc", CONCURRENCY)):
                lifecycle = graphql_lifecycle(client, store)
                measured = await measure(lifecycle, f"graphql-{name}", count, concurrency)
                results[f"graphql_{name}"] = measured.per_second
    finally:
        await db.disconnect()
    results["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return results


async def bench_sqlite(count: int) -> tuple[dict[str, float], str]:
    with tempfile.TemporaryDirectory(prefix="bench-") as folder:
        url = f"sqlite+aiosqlite:///{Path(folder) / 'bench.db'}"
        await asyncio.to_thread(upgrade, url)
        return await bench_database(url, count), f"SQLite {sqlite3.sqlite_version} (WAL)"


async def bench_postgres(count: int, admin_url: str) -> tuple[dict[str, float], str]:
    admin_url = make_url(admin_url).set(drivername="postgresql").render_as_string(False)
    name = f"bench_{secrets.token_hex(6)}"
    admin = await asyncpg.connect(admin_url, timeout=5)
    try:
        version = await admin.fetchval("SHOW server_version")
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    store_url = make_url(admin_url).set(drivername="postgresql+asyncpg", database=name)
    url = store_url.render_as_string(hide_password=False)
    try:
        await asyncio.to_thread(upgrade, url)
        return await bench_database(url, count), f"PostgreSQL {version.split()[0]}"
    finally:
        admin = await asyncpg.connect(admin_url, timeout=5)
        try:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await admin.close()


def run_backend(backend: str, count: int, postgres_url: str) -> dict[str, Any]:
    if backend == "sqlite":
        results, label = asyncio.run(bench_sqlite(count))
    else:
        results, label = asyncio.run(bench_postgres(count, postgres_url))
    return {"backend": backend, "label": label, "results": results}


def run_in_child(backend: str, count: int, postgres_url: str) -> dict[str, Any]:
    """One backend in a fresh interpreter, so its peak RSS is its own."""
    command = [sys.executable, "-m", "benchmarks.run", "--backend", backend, "--json-only"]
    command += ["--operations", str(count), "--postgres-url", postgres_url]
    root = Path(__file__).resolve().parent.parent
    done = subprocess.run(command, cwd=root, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.stderr.write(done.stderr)
        raise SystemExit(f"the {backend} benchmark failed (exit {done.returncode})")
    return json.loads(done.stdout)


def table(runs: list[dict[str, Any]]) -> str:
    header = "| measure | " + " | ".join(run["label"] for run in runs) + " |"
    lines = [header, "| --- |" + " ---: |" * len(runs)]
    for key, title, spec in ROWS:
        cells = " | ".join(spec.format(run["results"][key]) for run in runs)
        lines.append(f"| {title} | {cells} |")
    return "\n".join(lines)


def environment(count: int, elapsed: float) -> str:
    return (
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {os.cpu_count()} CPUs "
        f"({platform.machine()}, {platform.system()} {platform.release()}), "
        f"Python {platform.python_version()}, {count} operations per row "
        f"(+{WARMUP} warm-up), total {elapsed:.0f} s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--backend", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--operations", type=int, default=300, help="lifecycles per row")
    parser.add_argument(
        "--postgres-url",
        default=os.environ.get("BENCH_POSTGRES_URL", DEFAULT_POSTGRES_URL),
        help="a database on the server to create the temporary one on (env BENCH_POSTGRES_URL)",
    )
    parser.add_argument("--json", action="store_true", help="print the raw numbers too")
    parser.add_argument("--json-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.operations < CONCURRENCY:
        parser.error(f"--operations must be at least {CONCURRENCY}")

    started = time.perf_counter()
    if args.backend == "both":
        runs = [run_in_child(name, args.operations, args.postgres_url) for name in BACKENDS]
    else:
        runs = [run_backend(args.backend, args.operations, args.postgres_url)]
    if args.json_only:
        print(json.dumps(runs[0]))
        return
    print(environment(args.operations, time.perf_counter() - started))
    print()
    print(table(runs))
    if args.json:
        print()
        print(json.dumps(runs, indent=2))


BACKENDS = ("sqlite", "postgres")

if __name__ == "__main__":
    main()
