"""The server's CPU per request under each ASGI server set-up (issue 41's HTTP question).

    .venv/bin/python -m benchmarks.asgi_servers [--rounds 3] [--requests 6000]
        [--lifecycles 1500] [--granian-path DIR] [--servers today,h11,...,today@DIR]

On a fresh PostgreSQL database (``bench_<random>`` on ``BENCH_POSTGRES_URL``, dropped at
the end) it serves the API in a child process once per server set-up (``SERVERS``) and
round, the set-ups interleaved within each round, and drives it with ``benchmarks.load``
(16 connections): ``{ serverTime }`` (``--requests``) and the lifecycle at batch 1
(claimOperation → markSendStarted → finalizeOperation, ``--lifecycles``). Each row's
figure is the server's CPU (its process tree, from ``/proc``: ``benchmarks.cpu``) per
request or per lifecycle, the median over the rounds, beside the requests (lifecycles) a
second. ``stock`` (stock Strawberry, ``benchmarks.stock_strawberry``, as ``make bench``
serves it) answers ``{ serverTime }`` only, for the ratio of issue 41's target;
``today@DIR`` is ``connector-store serve`` run from another checkout of the project (a
``git archive`` of the commit before a change, say), so a change's before and after
interleave in one run.

granian is not a dependency: install it apart (``pip install --target DIR granian``) and
name ``DIR`` with ``--granian-path``; without it the granian set-ups are skipped.
"""

import argparse
import asyncio
import gc
import json
import os
import secrets
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from benchmarks.cpu import Window, started
from benchmarks.side_by_side import create_database, drop_database, stop
from benchmarks.side_by_side import start as start_serving
from benchmarks.stages import bearer_token
from store.migrate import upgrade

ROOT = Path(__file__).resolve().parent.parent
PORT = 18971
CONNECTIONS = 16

SERVERS = {
    "today": "uvicorn as `connector-store serve` runs it: the bounded httptools protocol, uvloop",
    "h11": "the same with HTTP_PARSER=h11 (the bounded h11 protocol)",
    "no-headers": "today's, without uvicorn's server and date headers",
    "unbounded": "stock uvicorn (httptools, uvloop, no access log): no bounds, no early close",
    "granian": "granian 2.8, ASGI, HTTP/1.1, one worker, one runtime thread, uvloop, no access log",
    "granian-st": "the same, granian's single-threaded runtime",
    "stock": "stock Strawberry under uvicorn (httptools, uvloop, no access log)",
}
"""The set-ups: name → what runs."""


def serve(name: str, port: int) -> None:
    """The server of set-up ``name`` on ``port``, in this process."""
    if name in ("today", "h11"):
        from server.cli import main

        sys.argv = ["connector-store", "serve", "--no-migrate", "--port", str(port)]
        main()
        return
    if name.startswith("granian"):
        from granian.constants import HTTPModes, Interfaces, Loops, RuntimeModes
        from granian.server import Server

        Server(
            "benchmarks.asgi_servers:granian_app",
            port=port,
            interface=Interfaces.ASGI,
            factory=True,
            workers=1,
            runtime_threads=1,
            runtime_mode=RuntimeModes.st if name == "granian-st" else RuntimeModes.auto,
            loop=Loops.uvloop,
            http=HTTPModes.http1,
            log_access=False,
            log_level="warning",  # type: ignore[arg-type]
        ).serve()
        return
    import uvicorn

    from server.app import create_app
    from server.http_server import freeze_startup_objects, http_config
    from server.settings import Settings

    settings = Settings()
    app = create_app(settings)
    if name == "no-headers":
        config = http_config(app, settings, "127.0.0.1", port)
        config.server_header = False
        config.date_header = False
    else:
        config = uvicorn.Config(
            app, port=port, http="httptools", loop="uvloop", access_log=False, log_config=None
        )
    freeze_startup_objects()
    uvicorn.Server(config).run()


def granian_app() -> Any:
    """The app for granian's worker (its factory), the startup objects frozen as
    ``serve_http`` does."""
    from server.app import create_app
    from server.http_server import CloseAfterEarlyAnswer

    app = CloseAfterEarlyAnswer(create_app())
    gc.collect()
    gc.freeze()
    return app


async def window(spec: dict[str, Any], pid: int) -> dict[str, float]:
    """One row: the server's CPU (ms) per unit and the units a second."""
    command = [sys.executable, "-m", "benchmarks.load", json.dumps(spec)]
    async with started(command) as child:
        cpu = Window({"server": [pid]}, None)
        await cpu.open()
        result = await child.go()
        spent = await cpu.close()
    units = result["lifecycles"]
    return {"server_ms": spent["server"]["cpu_ms"] / units, "per_s": result["per_s"]}


async def main_async(args: argparse.Namespace) -> None:
    admin_url = args.postgres_url
    name, dsn = await create_database(admin_url)
    servers = [s for s in args.servers.split(",") if args.granian_path or "granian" not in s]
    try:
        pg_url = dsn.replace("postgresql://", "postgresql+asyncpg://", 1)
        await asyncio.to_thread(upgrade, pg_url)
        env = {
            "DATABASE_URL": pg_url,
            "SWEEPER": "false",
            "GRAPHIQL": "false",
            "LOG_LEVEL": "warning",
            "DB_POOL_SIZE": str(CONNECTIONS),
            "JWT_SECRET": secrets.token_hex(32),
        }
        token = bearer_token(env)
        if args.granian_path:
            env["PYTHONPATH"] = os.pathsep.join([str(ROOT), args.granian_path])
        base = {"port": PORT, "token": token, "connections": CONNECTIONS}
        specs = {
            "serverTime": base | {"scenario": "server_time", "count": args.requests},
            "lifecycle": base | {"scenario": "lifecycle", "count": args.lifecycles},
        }
        rounds: dict[str, dict[str, list[dict[str, float]]]] = {
            server: {row: [] for row in specs} for server in servers
        }
        for round_ in range(args.rounds):
            for server in servers:
                process = start(server, env)
                try:
                    for row, spec in specs.items():
                        if server == "stock" and row != "serverTime":
                            continue
                        measure = await window(spec, process.pid)
                        rounds[server][row].append(measure)
                        print(round_, server, row, measure, os.getloadavg(), flush=True)
                finally:
                    stop(process)
        print(f"load average at the end: {os.getloadavg()}")
        print(table(rounds))
    finally:
        await drop_database(admin_url, name)


def command_of(server: str) -> tuple[list[str], Path]:
    """The command that serves set-up ``server`` on ``PORT``, and the folder it runs in."""
    if server == "stock":
        uvicorn = [sys.executable, "-m", "uvicorn", "--log-level", "warning", "--no-access-log"]
        return [*uvicorn, "benchmarks.stock_strawberry:app", "--port", str(PORT)], ROOT
    if server.startswith("today@"):
        serve = ["-m", "server", "serve", "--no-migrate", "--port", str(PORT)]
        return [sys.executable, *serve], Path(server.removeprefix("today@"))
    return [sys.executable, "-m", "benchmarks.asgi_servers", "--serve", server], ROOT


def start(server: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """Set-up ``server`` serving, once it answers HTTP."""
    command, folder = command_of(server)
    env = env | {"HTTP_PARSER": "h11" if server == "h11" else "httptools"}
    if folder != ROOT:
        env["PYTHONPATH"] = str(folder)
    return start_serving(command, env, PORT, cwd=folder)


def table(rounds: dict[str, dict[str, list[dict[str, float]]]]) -> str:
    """The Markdown table: per set-up, each row's median server CPU and rate."""
    lines = [
        "| server | `{ serverTime }` server CPU ms/request | requests/s "
        "| lifecycle server CPU ms | lifecycles/s |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for server, rows in rounds.items():
        cells = []
        for measures in rows.values():
            if not measures:
                cells += ["", ""]
                continue
            cells.append(f"{statistics.median(m['server_ms'] for m in measures):.3f}")
            cells.append(f"{statistics.median(m['per_s'] for m in measures):.0f}")
        said = SERVERS.get(server, "`connector-store serve` from " + server.partition("@")[2])
        lines.append(f"| {server.partition('@')[0]}: {said} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=6000, help="{ serverTime } per round")
    parser.add_argument("--lifecycles", type=int, default=1500, help="at batch 1, per round")
    parser.add_argument("--servers", default=",".join(SERVERS))
    parser.add_argument("--granian-path", help="a folder granian is installed in")
    parser.add_argument(
        "--postgres-url",
        default=os.environ.get("BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"),
    )
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve is not None:
        serve(args.serve, PORT)
        return
    asyncio.run(main_async(args))


if __name__ == "__main__":
    main()
