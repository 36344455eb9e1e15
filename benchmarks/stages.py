"""Where the server's CPU per lifecycle goes, stage by stage (issue 41's per-stage note).

    .venv/bin/python -m benchmarks.stages [--lifecycles 1500] [--batch-lifecycles 15000]

On a fresh PostgreSQL database (``bench_<random>`` on ``BENCH_POSTGRES_URL``, dropped at
the end) it serves the API in a child process (``serve`` below: the ``connector-store
serve`` of ``make bench``, uvicorn on uvloop, with a sampler installed) once with the fast
path for known documents (``FAST_PATH=true``) and once without, and drives it with
``benchmarks.load`` in another process: the lifecycle at batch 1 (claimOperation →
markSendStarted → finalizeOperation of ``worker.graphql``) and the leasing row at batch 50
(leaseOperations → markSendsStarted → finalizeOperations of ``BATCH_DOCUMENT``), 16
connections each. Each row runs twice: once without sampling, for the server's CPU per
lifecycle as ``make bench`` counts it (the process tree, from ``/proc``), and once sampled.

The sampler is the process's CPU-time interval timer (``ITIMER_PROF``, every
``INTERVAL_S`` of CPU asked, as often as the kernel's tick allows: every 4 ms at 250 Hz,
hence the defaults of about 1,500 samples a row): each ``SIGPROF`` hands the Python
handler the frame the main thread runs, and the sample goes to the stage of the innermost
frame on its stack that belongs to one (``PROJECT_STAGES`` and ``LIBRARY_STAGES``, by the
frame's file). A stage's milliseconds are its share of the samples times the main
thread's CPU per lifecycle in the sampled window. C code without frames of its own
(uvloop's loop and transports, asyncpg's Cython protocol, httptools, orjson) is counted to
the Python frame running when the handler runs: the next one it calls back (asyncpg's
protocol to asyncpg's ``connection.py``, a socket's read to uvicorn's protocol), or the
loop's own frame (``event loop``) when uvloop checks for signals between callbacks. The
rows also list the functions, innermost in their stage, with the most samples.
"""

import argparse
import asyncio
import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from types import CodeType, FrameType
from typing import Any

from benchmarks.cpu import Window, started
from benchmarks.side_by_side import create_database, drop_database, start, stop
from store.migrate import upgrade

ROOT = Path(__file__).resolve().parent.parent
PORT = 18961
INTERVAL_S = 0.001
CONNECTIONS = 16
BATCH = 50
TOKEN_OPTIONS = ("--sub", "did:bench:caller", "--scope", "service")

PROJECT_STAGES = (
    ("benchmarks/stages.py", "the sampler itself"),
    ("store/", "store: the project's Python"),
    ("server/fast_path.py", "fast path: plan, coercion, completion"),
    ("server/document_cache.py", "graphql-core parse/validate (+ cache)"),
    ("server/single_documents.py", "graphql-core parse/validate (+ cache)"),
    ("server/pipeline.py", "extensions / pipeline steps"),
    ("server/errors/", "extensions / pipeline steps"),
    ("server/query_limits.py", "extensions / pipeline steps"),
    ("server/tracing.py", "extensions / pipeline steps"),
    ("server/telemetry.py", "extensions / pipeline steps"),
    ("server/federated_tracing.py", "extensions / pipeline steps"),
    ("server/metrics.py", "extensions / pipeline steps"),
    ("server/logs.py", "extensions / pipeline steps"),
    ("server/graphql_view.py", "Strawberry view + request parsing"),
    ("server/request_body.py", "Strawberry view + request parsing"),
    ("server/strict_json.py", "Strawberry view + request parsing"),
    ("server/responses.py", "Strawberry view + request parsing"),
    ("server/auth.py", "auth (bearer token)"),
    ("server/sessions.py", "auth (bearer token)"),
    ("server/", "HTTP/ASGI (uvicorn, Starlette, middleware)"),
    ("resolvers/", "resolvers"),
)
"""The project's files (from the repository root) and their stages, the first match
deciding: the rest of ``server/`` (app, middleware, the bounded HTTP protocols) is HTTP."""

LIBRARY_STAGES = (
    ("asyncpg/", "driver: asyncpg"),
    ("sqlalchemy/", "store: SQLAlchemy, databases (compile, bind, rows)"),
    ("greenlet/", "store: SQLAlchemy, databases (compile, bind, rows)"),
    ("databases/", "store: SQLAlchemy, databases (compile, bind, rows)"),
    ("graphql/language/", "graphql-core parse/validate (+ cache)"),
    ("graphql/validation/", "graphql-core parse/validate (+ cache)"),
    ("graphql/execution/", "graphql-core execution (per-field)"),
    ("graphql/", "graphql-core coercion, types"),
    ("strawberry/http/", "Strawberry view + request parsing"),
    ("strawberry/asgi/", "Strawberry view + request parsing"),
    ("strawberry/extensions/", "extensions / pipeline steps"),
    ("strawberry/", "Strawberry schema, execute, conversion"),
    ("starlette/", "HTTP/ASGI (uvicorn, Starlette, middleware)"),
    ("uvicorn/", "HTTP/ASGI (uvicorn, Starlette, middleware)"),
    ("h11/", "HTTP/ASGI (uvicorn, Starlette, middleware)"),
    ("jwt/", "auth (bearer token)"),
    ("asyncio/runners.py", "event loop"),
    ("asyncio/base_events.py", "event loop"),
    ("uvloop/", "event loop"),
)
"""Library files (by the path after ``site-packages/`` or the standard library's folder)
and their stages; a file of neither list (``asyncio``'s tasks and locks, ``json``,
``typing``) belongs to none, and the sample goes to the next frame out."""

STAGE_ORDER = (
    "HTTP/ASGI (uvicorn, Starlette, middleware)",
    "auth (bearer token)",
    "Strawberry view + request parsing",
    "graphql-core parse/validate (+ cache)",
    "extensions / pipeline steps",
    "Strawberry schema, execute, conversion",
    "fast path: plan, coercion, completion",
    "graphql-core execution (per-field)",
    "graphql-core coercion, types",
    "resolvers",
    "store: the project's Python",
    "store: SQLAlchemy, databases (compile, bind, rows)",
    "driver: asyncpg",
    "event loop",
    "the sampler itself",
    "unattributed",
)


def short_path(filename: str) -> str:
    """A file's path from the repository root, or from ``site-packages`` or the standard
    library's folder."""
    root = f"{ROOT}/"
    if filename.startswith(root):
        return filename[len(root) :]
    _, marker, tail = filename.rpartition("site-packages/")
    if not marker:
        _, marker, tail = filename.rpartition("/lib/python3")
        tail = tail.partition("/")[2]
    return tail


def stage_of_file(filename: str) -> str | None:
    """The stage of a code object's file, or None when it belongs to none."""
    path = short_path(filename)
    stages = PROJECT_STAGES if filename.startswith(f"{ROOT}/") else LIBRARY_STAGES
    return next((stage for prefix, stage in stages if path.startswith(prefix)), None)


class Sampler:
    """Counts ``SIGPROF`` samples by stage while recording (``SIGUSR1`` starts, clearing the
    counts; ``SIGUSR2`` stops and writes the counts and the main thread's CPU in ns to
    ``path``)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.recording = False
        self.counts: Counter[str] = Counter()
        self.functions: Counter[str] = Counter()
        self.stages: dict[CodeType, str | None] = {}
        self.started_ns = 0

    def install(self) -> None:
        signal.signal(signal.SIGPROF, self.sample)
        signal.signal(signal.SIGUSR1, self.start)
        signal.signal(signal.SIGUSR2, self.stop)
        signal.setitimer(signal.ITIMER_PROF, INTERVAL_S, INTERVAL_S)

    def sample(self, signum: int, frame: FrameType | None) -> None:
        if not self.recording:
            return
        while frame is not None:
            code = frame.f_code
            if code not in self.stages:
                self.stages[code] = stage_of_file(code.co_filename)
            stage = self.stages[code]
            if stage is not None:
                self.counts[stage] += 1
                self.functions[f"{short_path(code.co_filename)}:{code.co_name}"] += 1
                return
            frame = frame.f_back
        self.counts["unattributed"] += 1

    def start(self, signum: int, frame: FrameType | None) -> None:
        self.counts.clear()
        self.functions.clear()
        self.started_ns = time.thread_time_ns()
        self.recording = True

    def stop(self, signum: int, frame: FrameType | None) -> None:
        self.recording = False
        spent = time.thread_time_ns() - self.started_ns
        self.path.write_text(
            json.dumps(
                {"main_thread_ns": spent, "counts": self.counts, "functions": self.functions}
            )
        )


def serve(port: int) -> None:
    """The server of ``make bench`` (``connector-store serve --no-migrate``) in this process,
    with a ``Sampler`` writing to ``STAGES_OUT``."""
    from server.cli import main

    Sampler(Path(os.environ["STAGES_OUT"])).install()
    sys.argv = ["connector-store", "serve", "--no-migrate", "--port", str(port)]
    main()


def bearer_token(env: dict[str, str]) -> str:
    """A ``service`` token for the benchmark's caller, as ``make bench`` mints it."""
    minted = subprocess.run(
        [sys.executable, "-m", "server", "token", *TOKEN_OPTIONS],
        env=os.environ | env,
        check=True,
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    return minted.stdout.strip().splitlines()[-1]


async def window(
    spec: dict[str, Any], server: subprocess.Popen[bytes], out: Path | None
) -> dict[str, Any]:
    """One row (``benchmarks.load`` with ``spec``): the server's CPU per lifecycle over the
    window (ms, its process tree), and with ``out``, the sampler's counts and the main
    thread's CPU per lifecycle (ms)."""
    command = [sys.executable, "-m", "benchmarks.load", json.dumps(spec)]
    async with started(command) as child:
        if out is not None:
            out.unlink(missing_ok=True)
            server.send_signal(signal.SIGUSR1)
        cpu = Window({"server": [server.pid]}, None)
        await cpu.open()
        outcome = await child.go()
        spent = await cpu.close()
        if out is not None:
            server.send_signal(signal.SIGUSR2)
    lifecycles = outcome["lifecycles"]
    result: dict[str, Any] = {"server_ms": spent["server"]["cpu_ms"] / lifecycles}
    if out is not None:
        for _ in range(500):
            if out.exists():
                break
            await asyncio.sleep(0.01)
        sampled = json.loads(out.read_text())
        result["main_ms"] = sampled["main_thread_ns"] / 1e6 / lifecycles
        result["counts"] = sampled["counts"]
        result["functions"] = sampled["functions"]
    return result


def table(rows: dict[str, dict[str, Any]]) -> str:
    """The Markdown table of the rows: each stage's share of the samples and ms per
    lifecycle, then the CPU figures."""
    names = list(rows)
    lines = [
        "| stage | " + " | ".join(f"{name} % | ms" for name in names) + " |",
        "| --- |" + " ---: | ---: |" * len(names),
    ]
    totals = {name: sum(row["counts"].values()) for name, row in rows.items()}
    for stage in STAGE_ORDER:
        if not any(row["counts"].get(stage) for row in rows.values()):
            continue
        cells = []
        for name, row in rows.items():
            share = row["counts"].get(stage, 0) / totals[name]
            cells.append(f"{100 * share:.1f} | {share * row['main_ms']:.3f}")
        lines.append(f"| {stage} | " + " | ".join(cells) + " |")
    for label, field in (
        ("main thread CPU, sampled (ms)", "main_ms"),
        ("server CPU, sampled (ms)", "sampled_server_ms"),
        ("server CPU, not sampled (ms)", "server_ms"),
    ):
        lines.append(
            f"| {label} | " + " | ".join(f" | {row[field]:.3f}" for row in rows.values()) + " |"
        )
    lines.append("| samples | " + " | ".join(f" | {totals[n]}" for n in names) + " |")
    return "\n".join(lines)


async def main_async(args: argparse.Namespace, folder: Path) -> None:
    admin_url = args.postgres_url
    name, dsn = await create_database(admin_url)
    try:
        pg_url = dsn.replace("postgresql://", "postgresql+asyncpg://", 1)
        await asyncio.to_thread(upgrade, pg_url)
        out = folder / "samples.json"
        env = {
            "DATABASE_URL": pg_url,
            "SWEEPER": "false",
            "GRAPHIQL": "false",
            "LOG_LEVEL": "warning",
            "DB_POOL_SIZE": str(CONNECTIONS),
            "JWT_SECRET": secrets.token_hex(32),
            "STAGES_OUT": str(out),
        }
        token = bearer_token(env)
        base = {"port": PORT, "token": token, "connections": CONNECTIONS}
        specs = {
            "batch 1": base | {"scenario": "lifecycle", "count": args.lifecycles},
            "batch 50": base
            | {"scenario": "leased_batch", "count": args.batch_lifecycles, "batch": BATCH},
        }
        rows: dict[str, dict[str, Any]] = {}
        for fast_path in ("true", "false"):
            command = [sys.executable, "-m", "benchmarks.stages", "--serve", str(PORT)]
            server = start(command, env | {"FAST_PATH": fast_path}, PORT)
            try:
                for label, spec in specs.items():
                    plain = await window(spec, server, None)
                    sampled = await window(spec, server, out)
                    sampled["sampled_server_ms"] = sampled.pop("server_ms")
                    rows[f"{label}, fast path {'on' if fast_path == 'true' else 'off'}"] = (
                        plain | sampled
                    )
            finally:
                stop(server)
        print(f"load average at the end: {os.getloadavg()}")
        print(table(rows))
        for label, row in rows.items():
            total = sum(row["counts"].values())
            top = Counter(row["functions"]).most_common(args.top)
            print(f"\n{label}: the innermost stage frames with most samples")
            for function, count in top:
                print(f"  {100 * count / total:5.1f} %  {function}")
    finally:
        await drop_database(admin_url, name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lifecycles", type=int, default=1500, help="lifecycles at batch 1")
    parser.add_argument("--batch-lifecycles", type=int, default=15000, help="at batch 50")
    parser.add_argument(
        "--postgres-url",
        default=os.environ.get("BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"),
    )
    parser.add_argument("--top", type=int, default=12, help="functions shown per row")
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve is not None:
        serve(args.serve)
        return
    with tempfile.TemporaryDirectory() as folder:
        asyncio.run(main_async(args, Path(folder)))


if __name__ == "__main__":
    main()
