"""The app's own CPU per ``{ serverTime }`` request, no HTTP server: what every request pays
in Starlette, the middleware, the view and the pipeline (issue 41's fixed cost).

    .venv/bin/python -m benchmarks.request_cpu [--requests 3000] [--profile [--sort tottime]]

The app (``create_app``, wrapped in ``CloseAfterEarlyAnswer`` as ``serve_http`` serves it) on
a fresh SQLite file is called directly as an ASGI app on uvloop, with the scope uvicorn
would give a POST of ``{"query": "{ serverTime }"}`` with a service token, after its
lifespan started, 200 requests of warm-up and the startup objects frozen as the server
freezes them. It prints the process's CPU per request (ms). Another checkout's figure comes
from running it there (``PYTHONPATH`` and the working folder that checkout): interleave the
two for a before and after on a shared machine. ``--profile`` runs the requests under
cProfile and prints the functions with the most time (``--sort``), which slows them about
threefold.
"""

import argparse
import asyncio
import cProfile
import os
import pstats
import tempfile
import time
from pathlib import Path
from typing import Any

import uvloop

from server.http_server import freeze_startup_objects

BODY = b'{"query": "{ serverTime }"}'


def request_scope(token: str) -> dict[str, Any]:
    """The scope uvicorn gives ``POST /graphql`` with ``BODY``."""
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.4"},
        "http_version": "1.1",
        "server": ("127.0.0.1", 8000),
        "client": ("127.0.0.1", 50000),
        "scheme": "http",
        "method": "POST",
        "root_path": "",
        "path": "/graphql",
        "raw_path": b"/graphql",
        "query_string": b"",
        "headers": [
            (b"host", b"127.0.0.1:8000"),
            (b"content-type", b"application/json"),
            (b"content-length", str(len(BODY)).encode()),
            (b"authorization", f"Bearer {token}".encode()),
        ],
        "state": {},
    }


async def request(app: Any, token: str) -> None:
    """One request; raises ``AssertionError`` unless it is answered 200."""
    sent: list[Any] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": BODY, "more_body": False}

    async def send(message: Any) -> None:
        sent.append(message)

    await app(request_scope(token), receive, send)
    assert sent[0]["status"] == 200, sent


async def measure(args: argparse.Namespace, folder: Path) -> None:
    os.environ |= {
        "DATABASE_URL": f"sqlite+aiosqlite:///{folder}/store.db",
        "JWT_SECRET": "request-cpu-" + "0" * 52,
        "SWEEPER": "false",
        "GRAPHIQL": "false",
        "LOG_LEVEL": "warning",
    }
    from server.app import create_app
    from server.auth import authenticator
    from server.http_server import CloseAfterEarlyAnswer
    from server.settings import Settings
    from store.migrate import upgrade

    settings = Settings()
    await asyncio.to_thread(upgrade, settings.database_url)
    auth = authenticator(settings)
    token = auth.mint("did:bench:caller", ["service"], 3600)
    app = CloseAfterEarlyAnswer(create_app(settings, auth=auth))
    lifespan: asyncio.Queue[dict[str, str]] = asyncio.Queue()
    started = asyncio.Event()

    async def lifespan_send(message: Any) -> None:
        if message["type"] == "lifespan.startup.complete":
            started.set()

    await lifespan.put({"type": "lifespan.startup"})
    running = asyncio.create_task(
        app(
            {"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}},
            lifespan.get,
            lifespan_send,
        )
    )
    await started.wait()
    for _ in range(200):
        await request(app, token)
    freeze_startup_objects()
    profile = cProfile.Profile() if args.profile else None
    spent = time.process_time()
    if profile is not None:
        profile.enable()
    for _ in range(args.requests):
        await request(app, token)
    if profile is not None:
        profile.disable()
    spent = time.process_time() - spent
    print(f"{1000 * spent / args.requests:.4f} ms of CPU per request (profiled: {args.profile})")
    await lifespan.put({"type": "lifespan.shutdown"})
    await running
    if profile is not None:
        pstats.Stats(profile).sort_stats(args.sort).print_stats(args.top)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--profile", action="store_true", help="under cProfile")
    parser.add_argument("--sort", default="tottime", help="cProfile's order")
    parser.add_argument("--top", type=int, default=40, help="functions printed")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        uvloop.run(measure(args, Path(folder)))


if __name__ == "__main__":
    main()
