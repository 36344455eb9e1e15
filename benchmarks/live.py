"""``make bench``'s live-update rows (issue 18): two replicas of ``connector-store serve`` on one
PostgreSQL database, a subscriber on one, writes through the other.

    .venv/bin/python -m benchmarks.live [--commits 50] [--subscriptions 1000] [--burst 10000]

- **Replica to replica**: ``--commits`` claims, one at a time, through replica A's HTTP API;
  for each, the time from sending the claim to a ``workAvailable`` signal on a subscriber of
  replica B (an upper bound of commit → delivery: it includes the claim's own request).
- **Idle worker**: a worker subscribed on B and idle for ``IDLE_S`` seconds sends no request
  (counted by B's own ``connector_requests_total``); then ``--commits`` deferrals due
  ``DEFER_MS`` later, each found by B's timer: the time from the due moment to the signal.
- **What the triggers cost**: lifecycles/s (claim → markSendStarted → finalize, the store in
  process, 16 tasks, ``benchmarks.side_by_side``'s) on PostgreSQL and on SQLite with
  migrations 0009 to 0011 (the wake-up and event-log triggers, and the indexes of the work
  timer and the dashboard's counts) and without them (downgraded to 0008), ``ROUNDS``
  interleaved rounds, medians.
- **Many subscriptions**: ``--subscriptions`` subscriptions on B (over ``CONNECTIONS``
  WebSockets), each filtered to one of ``CONNECTORS`` connectors: B's RSS before and after;
  then a burst of ``--burst`` claims spread over those connectors through A
  (``claimOperations`` of 500): how long until every subscriber got a signal after the burst
  began, and B's RSS after.
"""

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import jwt
import websockets
from alembic import command
from sqlalchemy.engine import make_url

from benchmarks.side_by_side import (
    ROOT,
    TASKS,
    create_database,
    drop_database,
    fresh_id,
    memory_mib,
    rate,
    start,
    stop,
    store_lifecycle,
)
from store import ConnectorStore, background
from store.database import Database
from store.migrate import alembic_config, upgrade

PORTS = (18941, 18942)
ROUNDS = 3
LIFECYCLES = 2000
BEFORE_WAKEUPS = "0008"
"""The revision before migration 0009 (the wake-up triggers); 0010 (the counts' indexes) and
0011 (the event-log triggers) go with it."""
SECRET = "bench-live-secret-" + "0123456789abcdef" * 3
CONNECTORS = 100
CONNECTIONS = 10
IDLE_S = 5.0
DEFER_MS = 300
WAIT_S = 10.0
WORK = "subscription ($c: String) { workAvailable(connectorName: $c) { connectorName at } }"
CLAIM = "mutation ($input: ClaimOperationInput!) { claimOperation(input: $input) { __typename } }"
CLAIMS = (
    "mutation ($input: ClaimOperationsInput!) { claimOperations(input: $input) "
    "{ results { __typename } } }"
)
DEFER = "mutation ($input: DeferOperationInput!) { deferOperation(input: $input) { applied } }"
SERVER_TIME = "{ serverTime }"


def token() -> str:
    now = int(time.time())
    claims = {"sub": "did:bench:worker", "scope": "service", "iat": now, "exp": now + 3600}
    return jwt.encode(claims, SECRET, algorithm="HS256")


def claim(operation_id: str, connector: str, lease_token: str, expires_at: int) -> dict[str, Any]:
    return {
        "callerDID": "did:bench:worker",
        "operationID": operation_id,
        "ownerDID": "did:bench:worker",
        "connectorName": connector,
        "model": "Event",
        "op": "update",
        "accountKey": f"acct-{connector}",
        "target": "events/1",
        "sourceID": operation_id,
        "deterministicEventID": operation_id,
        "payloadHash": "sha256:bench",
        "leaseToken": lease_token,
        "leaseExpiresAt": expires_at,
    }


class Subscriber:
    """One graphql-transport-ws connection holding subscriptions; each signal is recorded
    with the local time it arrived."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.signals: dict[str, list[tuple[float, str | None]]] = {}
        self.arrived = asyncio.Event()

    async def __aenter__(self) -> "Subscriber":
        self.ws = await websockets.connect(self.url, subprotocols=["graphql-transport-ws"])
        await self.ws.send(
            json.dumps(
                {"type": "connection_init", "payload": {"Authorization": f"Bearer {token()}"}}
            )
        )
        assert json.loads(await self.ws.recv())["type"] == "connection_ack"
        self.reader = asyncio.create_task(self.read())
        return self

    async def __aexit__(self, *_: object) -> None:
        self.reader.cancel()
        await self.ws.close()

    async def subscribe(self, id_: str, connector: str | None) -> None:
        self.signals[id_] = []
        await self.ws.send(
            json.dumps(
                {
                    "id": id_,
                    "type": "subscribe",
                    "payload": {"query": WORK, "variables": {"c": connector}},
                }
            )
        )

    async def read(self) -> None:
        async for raw in self.ws:
            message = json.loads(raw)
            if message.get("type") == "next":
                data = message["payload"]["data"]["workAvailable"]
                self.signals[message["id"]].append((time.perf_counter(), data["connectorName"]))
                self.arrived.set()

    async def next_after(self, id_: str, since: float) -> float:
        """The arrival time of subscription ``id_``'s first signal after ``since``."""
        deadline = time.perf_counter() + WAIT_S
        while True:
            for arrived, _ in self.signals[id_]:
                if arrived >= since:
                    return arrived
            if time.perf_counter() > deadline:
                raise TimeoutError(f"no signal on {id_}")
            self.arrived.clear()
            await background.set_within(self.arrived, deadline - time.perf_counter())


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


async def requests_counted(http: httpx.AsyncClient, base: str) -> float:
    """Replica ``base``'s ``connector_requests_total``, summed (GraphQL requests answered)."""
    text = (await http.get(base + "/metrics")).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("connector_requests_total{")
    )


async def lifecycles_per_s(url: str, count: int) -> float:
    """Lifecycles per second through the store in process on ``url``, ``TASKS`` tasks."""
    db = Database(url, pool_size=TASKS)
    await db.connect()
    try:
        lifecycle = store_lifecycle(ConnectorStore(db))
        token = fresh_id("t", 0)
        measured = await rate(lambda i: lifecycle(fresh_id("op", i), token), count, TASKS)
        return measured["per_s"]
    finally:
        await db.disconnect()


async def trigger_cost(urls: dict[str, str], count: int) -> dict[str, dict[str, float]]:
    """For each backend, the median lifecycles/s with migrations 0009-0011 and without."""
    measured: dict[str, dict[str, list[float]]] = {
        backend: {"with": [], "without": []} for backend in urls
    }
    for _ in range(ROUNDS):
        for backend, url in urls.items():
            measured[backend]["with"].append(await lifecycles_per_s(url, count))
            await asyncio.to_thread(command.downgrade, alembic_config(url), BEFORE_WAKEUPS)
            measured[backend]["without"].append(await lifecycles_per_s(url, count))
            await asyncio.to_thread(upgrade, url)
    return {
        backend: {form: statistics.median(values) for form, values in forms.items()}
        for backend, forms in measured.items()
    }


async def run(args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    admin_url = make_url(args.postgres_url).set(drivername="postgresql").render_as_string(False)
    name, dsn = await create_database(admin_url)
    processes: list[subprocess.Popen[bytes]] = []
    try:
        url = dsn.replace("postgresql://", "postgresql+asyncpg://", 1)
        await asyncio.to_thread(upgrade, url)
        sqlite_url = f"sqlite+aiosqlite:///{folder / 'live.db'}"
        await asyncio.to_thread(upgrade, sqlite_url)
        cost = await trigger_cost({"postgres": url, "sqlite": sqlite_url}, args.lifecycles)
        env = {
            "DATABASE_URL": url,
            "JWT_SECRET": SECRET,
            "SWEEPER": "false",
            "LOG_LEVEL": "warning",
            "MAX_SUBSCRIPTIONS_PER_VIEWER": str(args.subscriptions + 10),
            "MAX_SUBSCRIPTIONS_PER_CONNECTION": str(args.subscriptions),
        }
        serve = str(Path(sys.executable).with_name("connector-store"))
        for port in PORTS:
            command = [serve, "serve", "--no-migrate", "--host", "127.0.0.1", "--port", str(port)]
            processes.append(start(command, env, port))
        a, b = (f"http://127.0.0.1:{port}" for port in PORTS)
        b_ws = f"ws://127.0.0.1:{PORTS[1]}/graphql"
        headers = {"Authorization": f"Bearer {token()}"}
        async with httpx.AsyncClient(headers=headers, timeout=60) as http:
            results = await measure(args, http, a, b, b_ws, processes[1].pid)
        return results | {"trigger_cost": cost}
    finally:
        for process in processes:
            stop(process)
        await drop_database(admin_url, name)


async def graphql(http: httpx.AsyncClient, base: str, query: str, **variables: Any) -> Any:
    body = await http.post(base + "/graphql", json={"query": query, "variables": variables})
    answer = body.json()
    if "errors" in answer:
        raise SystemExit(f"{query[:40]}: {answer['errors']}")
    return answer["data"]


async def measure(
    args: argparse.Namespace, http: httpx.AsyncClient, a: str, b: str, b_ws: str, b_pid: int
) -> dict[str, Any]:
    results: dict[str, Any] = {}
    async with Subscriber(b_ws) as worker:
        await worker.subscribe("w", "live")
        await worker.next_after("w", 0)

        latencies, answered = [], []
        for i in range(args.commits):
            await asyncio.sleep(0.02)
            now = (await graphql(http, a, SERVER_TIME))["serverTime"]
            sent = time.perf_counter()
            await graphql(http, a, CLAIM, input=claim(f"r-{i}", "live", f"l-{i}", now + 60_000))
            done = time.perf_counter()
            arrived = await worker.next_after("w", sent)
            latencies.append((arrived - sent) * 1000)
            answered.append(max(0.0, arrived - done) * 1000)
        results["replica_ms"] = {
            "p50": statistics.median(latencies),
            "p95": percentile(latencies, 0.95),
            "after_answer_p50": statistics.median(answered),
            "after_answer_p95": percentile(answered, 0.95),
        }

        before = await requests_counted(http, b)
        signals_before = len(worker.signals["w"])
        await asyncio.sleep(IDLE_S)
        after = await requests_counted(http, b)
        results["idle"] = {
            "seconds": IDLE_S,
            "requests_per_s": (after - before) / IDLE_S,
            "signals": len(worker.signals["w"]) - signals_before,
        }

        wakes = []
        for i in range(args.commits):
            now = (await graphql(http, a, SERVER_TIME))["serverTime"]
            lease = f"d-{i}"
            await graphql(http, a, CLAIM, input=claim(f"d-{i}", "live", lease, now + 60_000))
            due = (await graphql(http, a, SERVER_TIME))["serverTime"] + DEFER_MS
            deferral = {
                "callerDID": "did:bench:worker",
                "operationID": f"d-{i}",
                "nextAttemptAt": due,
                "leaseToken": lease,
            }
            await graphql(http, a, DEFER, input=deferral)
            due_local = time.perf_counter() + (due - int(time.time() * 1000)) / 1000
            await asyncio.sleep(max(0.0, due_local - time.perf_counter() - 0.05))
            wakes.append((await worker.next_after("w", due_local) - due_local) * 1000)
        results["timer_ms"] = {"p50": statistics.median(wakes), "p95": percentile(wakes, 0.95)}

    rss_before = memory_mib(b_pid)["VmRSS"]
    subscribers = [Subscriber(b_ws) for _ in range(CONNECTIONS)]
    for subscriber in subscribers:
        await subscriber.__aenter__()
    try:
        for index in range(args.subscriptions):
            subscriber = subscribers[index % CONNECTIONS]
            await subscriber.subscribe(f"s{index}", f"c{index % CONNECTORS}")
        for index in range(args.subscriptions):
            await subscribers[index % CONNECTIONS].next_after(f"s{index}", 0)
        await asyncio.sleep(1)
        rss_open = memory_mib(b_pid)["VmRSS"]

        now = (await graphql(http, a, SERVER_TIME))["serverTime"]
        started = time.perf_counter()
        for first in range(0, args.burst, 500):
            items = [
                claim(f"b-{i}", f"c{i % CONNECTORS}", f"bl-{i}", now + 60_000)
                for i in range(first, min(first + 500, args.burst))
            ]
            await graphql(http, a, CLAIMS, input={"items": items})
        claimed = time.perf_counter()
        reached = [
            await subscribers[index % CONNECTIONS].next_after(f"s{index}", started)
            for index in range(args.subscriptions)
        ]
        signals = sum(
            sum(1 for arrived, _ in subscriber.signals[id_] if arrived >= started)
            for subscriber in subscribers
            for id_ in subscriber.signals
        )
        results["many"] = {
            "subscriptions": args.subscriptions,
            "connectors": CONNECTORS,
            "rss_before_mib": rss_before,
            "rss_open_mib": rss_open,
            "rss_after_burst_mib": memory_mib(b_pid)["VmRSS"],
            "burst": args.burst,
            "burst_claim_s": claimed - started,
            "all_reached_s": max(reached) - started,
            "reached": len(reached),
            "signals": signals,
        }
    finally:
        for subscriber in subscribers:
            await subscriber.__aexit__()
    return results


def report(results: dict[str, Any], args: argparse.Namespace) -> str:
    replica, timer, idle, many = (
        results["replica_ms"],
        results["timer_ms"],
        results["idle"],
        results["many"],
    )
    added = many["rss_open_mib"] - many["rss_before_mib"]
    cost = results["trigger_cost"]
    return "\n".join(
        [
            f"Live updates: two replicas on one PostgreSQL, {os.cpu_count()} CPUs",
            "",
            "| row | measured | target |",
            "| --- | ---: | --- |",
            f"| claim sent to A → workAvailable on B, p50 / p95 ms ({args.commits} commits)"
            f" | {replica['p50']:.1f} / {replica['p95']:.1f} | ≤ 20 / ≤ 100 |",
            "| the same, from A's answer (the commit done) → the signal on B, p50 / p95 ms"
            f" | {replica['after_answer_p50']:.1f} / {replica['after_answer_p95']:.1f} | |",
            f"| idle worker: requests/s over {idle['seconds']:.0f} s (signals)"
            f" | {idle['requests_per_s']:.1f} ({idle['signals']}) | 0 |",
            f"| deferral due → signal (B's timer), p50 / p95 ms ({args.commits})"
            f" | {timer['p50']:.1f} / {timer['p95']:.1f} | p95 ≤ 100 |",
            f"| {many['subscriptions']:,} subscriptions over {many['connectors']} connectors:"
            f" RSS added (MiB) | {added:.1f} ({many['rss_before_mib']:.0f} →"
            f" {many['rss_open_mib']:.0f}) | ≤ 100 |",
            f"| burst of {many['burst']:,} claims over those connectors: subscribers reached"
            f" / time to the last (s) | {many['reached']:,} / {many['all_reached_s']:.2f}"
            f" (claims took {many['burst_claim_s']:.2f}; {many['signals']:,} signals,"
            f" RSS after {many['rss_after_burst_mib']:.0f} MiB) | every one |",
            *(
                f"| lifecycles/s in process on {backend}, {TASKS} tasks, with / without the"
                f" migrations 0009-0011 | {forms['with']:.0f} / {forms['without']:.0f}"
                f" ({forms['with'] / forms['without']:.2f}) | |"
                for backend, forms in cost.items()
            ),
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--commits", type=int, default=50)
    parser.add_argument("--subscriptions", type=int, default=1000)
    parser.add_argument("--burst", type=int, default=10_000)
    parser.add_argument("--lifecycles", type=int, default=LIFECYCLES)
    parser.add_argument(
        "--postgres-url",
        default=os.environ.get("BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"),
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    os.chdir(ROOT)
    with tempfile.TemporaryDirectory(prefix="bench-live-") as folder:
        results = asyncio.run(run(args, Path(folder)))
    print(report(results, args))
    if args.json:
        print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
