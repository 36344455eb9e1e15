"""PostgreSQL's CPU per lifecycle at batch 1 over HTTP, backend by backend, with each of the
costs that concurrency adds taken away in turn (issue 38).

    .venv/bin/python -m benchmarks.http_pg [--lifecycles 300] [--rounds 3] [--json]

``make bench``'s batch-1 row (``server_http_1``: 16 workers, ``benchmarks/load.py``'s
``lifecycle``) against ``connector-store serve`` on a fresh database (``bench_<random>`` on
the server of ``--postgres-url``, dropped afterwards), in variants run in interleaved rounds
(medians over rounds):

- ``one account``: every claim of one owner and account (the row before issue 38's
  section of benchmarks/README.md spread it);
- ``1,000 owners``: as ``make bench`` runs the row now;
- ``no listener``: the same, the server's ``LISTEN`` connection on another database
  (``LISTEN_DATABASE_URL``), so that nothing is delivered to it;
- ``no NOTIFY``: the same, with the triggers that send ``NOTIFY`` (migrations 0009 and
  0011) disabled while the variant runs (benchmark only: no server should run so);
- ``neither``: without both;
- ``1 worker``: 1,000 owners, one worker (one request at a time).

For each: lifecycles/s; the CPU per lifecycle (``benchmarks.cpu``: run time from
``/proc``) of the pool's backends and of the listener's (the backend whose last statement
was its ``LISTEN`` or its keepalive ``SELECT 1``); and the context switches of those
backends per lifecycle (``/proc/<pid>/status``), a measure of how often they waited.
"""

import argparse
import asyncio
import json
import os
import secrets
import statistics
import sys
from pathlib import Path
from typing import Any

import asyncpg
from sqlalchemy.engine import make_url

from benchmarks.cpu import Backends, descendants, run_ns, started
from benchmarks.load import OWNERS
from benchmarks.side_by_side import (
    ROOT,
    SERVER_PORT,
    TASKS,
    create_database,
    drop_database,
    start,
    stop,
    worker_token,
)
from store.migrate import upgrade

PORT = SERVER_PORT + 10
"""The server's port (``make bench``'s, ``BENCH_PORT``, + 10)."""
NOTIFYING = [
    ("kubun_connector_operation", "kubun_connector_operation_claimed_wakeup"),
    ("kubun_connector_operation", "kubun_connector_operation_freed_wakeup"),
    ("kubun_connector_account", "kubun_connector_account_eased_wakeup"),
    ("kubun_connector_operation_event", "kubun_connector_operation_event_logged"),
    ("kubun_connector_watch_event", "kubun_connector_watch_event_logged"),
]
"""The triggers that send ``NOTIFY`` (table, trigger)."""
WARM_UP = TASKS * 10
"""Lifecycles run, unmeasured, on each server before its variants."""
VARIANTS: dict[str, dict[str, Any]] = {
    "one account": {"load": {"owners": 1}},
    f"{OWNERS:,} owners": {},
    "no listener": {"listener": False},
    "no NOTIFY": {"notify": False},
    "neither": {"listener": False, "notify": False},
    "1 worker": {"load": {"connections": 1}},
}
"""Each variant: the load's spec over ``OWNERS`` owners and 16 workers (``load``), whether
the server's listener is in the database (``listener``) and the triggers notify
(``notify``)."""


def switches(pid: int) -> int:
    """Context switches of process ``pid`` so far (voluntary and not), 0 once it has ended."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return 0
    return sum(int(line.split()[1]) for line in lines if "ctxt_switches" in line)


class Reading:
    """The backends serving a server and a load generator, each with its kind (``pool`` or
    ``listener``), run time in ns and context switches, at one moment."""

    def __init__(self, kinds: dict[int, str], ns: dict[int, int], switched: dict[int, int]):
        self.kinds, self.ns, self.switched = kinds, ns, switched

    @classmethod
    async def take(
        cls, backends: Backends, admin: asyncpg.Connection, roots: list[int]
    ) -> "Reading":
        pids = await backends.serving(descendants(roots))
        rows = await admin.fetch(
            "SELECT pid, query FROM pg_stat_activity WHERE pid = ANY($1::int[])", list(pids)
        )
        kinds = {
            row["pid"]: "listener"
            if row["query"].startswith("LISTEN") or row["query"] == "SELECT 1"
            else "pool"
            for row in rows
        }
        return cls(kinds, run_ns(pids), {pid: switches(pid) for pid in pids})


async def measure(
    spec: dict[str, Any], server_pid: int, backends: Backends, admin: asyncpg.Connection
) -> dict[str, float]:
    """One run of ``benchmarks.load`` with ``spec``: lifecycles/s, PostgreSQL CPU ms per
    lifecycle of the pool's backends and of the listener's, and their context switches per
    lifecycle."""
    command = [sys.executable, "-m", "benchmarks.load", json.dumps(spec)]
    async with started(command) as child:
        before = await Reading.take(backends, admin, [server_pid, child.pid])
        result = await child.go()
        after = await Reading.take(backends, admin, [server_pid, child.pid])
    lifecycles = result["lifecycles"]
    cpu = {"pool": 0.0, "listener": 0.0}
    switched = 0
    for pid, ns in after.ns.items():
        kind = after.kinds.get(pid, before.kinds.get(pid, "pool"))
        cpu[kind] += (ns - before.ns.get(pid, 0)) / 1e6 / lifecycles
        switched += after.switched[pid] - before.switched.get(pid, 0)
    return {
        "per_s": result["per_s"],
        "pool_cpu_ms": cpu["pool"],
        "listener_cpu_ms": cpu["listener"],
        "postgres_cpu_ms": cpu["pool"] + cpu["listener"],
        "switches": switched / lifecycles,
    }


async def notifying(admin: asyncpg.Connection, on: bool) -> None:
    """Enable (``on``) or disable the triggers that send ``NOTIFY``."""
    switch = "ENABLE" if on else "DISABLE"
    for table, trigger in NOTIFYING:
        await admin.execute(f"ALTER TABLE {table} {switch} TRIGGER {trigger}")


async def run(args: argparse.Namespace) -> dict[str, list[dict[str, float]]]:
    """Every variant in each of ``--rounds`` rounds: each round starts a server with its
    listener in the database and runs the variants that want one, then a server with its
    listener elsewhere for the others (one server at a time: each holds 17 connections),
    each server warmed up first (``WARM_UP``)."""
    admin_url = make_url(args.postgres_url).set(drivername="postgresql").render_as_string(False)
    name, dsn = await create_database(admin_url)
    elsewhere, elsewhere_dsn = await create_database(admin_url)
    backends = await Backends.connect(admin_url)
    if backends is None:
        raise SystemExit("PostgreSQL's backends are not processes of this machine")
    admin: asyncpg.Connection | None = None
    server = None
    try:
        url = dsn.replace("postgresql://", "postgresql+asyncpg://", 1)
        await asyncio.to_thread(upgrade, url)
        env = {
            "DATABASE_URL": url,
            "SWEEPER": "false",
            "GRAPHIQL": "false",
            "LOG_LEVEL": "warning",
            "DB_POOL_SIZE": str(TASKS),
            "JWT_SECRET": secrets.token_hex(32),
        }
        command = [str(ROOT / ".venv/bin/connector-store"), "serve", "--no-migrate"]
        token = worker_token(command, env)
        admin = await asyncpg.connect(dsn)
        measured: dict[str, list[dict[str, float]]] = {key: [] for key in VARIANTS}
        base = {
            "scenario": "lifecycle",
            "port": PORT,
            "token": token,
            "connections": TASKS,
            "owners": OWNERS,
        }
        for number in range(args.rounds):
            for listener in (True, False):
                extra = {} if listener else {"LISTEN_DATABASE_URL": elsewhere_dsn}
                server = start([*command, "--port", str(PORT)], env | extra, PORT)
                # Each pooled connection plans a statement for its values on its first five
                # calls (PostgreSQL's plan cache), then runs its generic plan: warmed past them.
                warm_up = base | {"count": WARM_UP}
                await measure(warm_up, server.pid, backends, admin)
                for key, variant in VARIANTS.items():
                    if variant.get("listener", True) != listener:
                        continue
                    await notifying(admin, variant.get("notify", True))
                    spec = base | {"count": args.lifecycles} | variant.get("load", {})
                    measured[key].append(await measure(spec, server.pid, backends, admin))
                stop(server)
                server = None
            print(f"round {number + 1}: {json.dumps(measured)}", file=sys.stderr)
        await notifying(admin, True)
        return measured
    finally:
        if server is not None:
            stop(server)
        if admin is not None:
            await admin.close()
        await backends.close()
        for database in (name, elsewhere):
            await drop_database(admin_url, database)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--lifecycles", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--postgres-url",
        default=os.environ.get("BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"),
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    measured = asyncio.run(run(args))
    print(
        f"{args.lifecycles} lifecycles a variant, median of {args.rounds} interleaved rounds;"
        f" load average {' '.join(f'{n:.1f}' for n in os.getloadavg())}\n"
    )
    print(
        "| variant | lifecycles/s | PostgreSQL CPU ms | of it the pool's | of it the listener's"
        " | context switches |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for key, rounds in measured.items():
        m = {field: statistics.median(r[field] for r in rounds) for field in rounds[0]}
        print(
            f"| {key} | {m['per_s']:.0f} | {m['postgres_cpu_ms']:.3f} | {m['pool_cpu_ms']:.3f}"
            f" | {m['listener_cpu_ms']:.3f} | {m['switches']:.1f} |"
        )
    if args.json:
        print(json.dumps(measured, indent=2))


if __name__ == "__main__":
    main()
