"""``benchmarks.cpu``: the CPU of a window goes to the processes it was given (and their
descendants, and the PostgreSQL backends they are connected to), never to another process.

The children burn a set amount of their own CPU inside the window and report it by their own
clock (``time.process_time``, the same run time ``/proc`` gives): each group must count at
least what its process burned and far less than what the other one did. No wall time is
asserted."""

import json
import os
import subprocess
import sys
from pathlib import Path

import asyncpg
import pytest

from benchmarks.cpu import Backends, Window, descendants, measured
from tests.databases import postgres_admin_url, postgres_unavailable

ROOT = Path(__file__).resolve().parent.parent
BURN = """
import sys, time
from benchmarks.cpu import done, ready
ready()
started = time.process_time()
while time.process_time() - started < float(sys.argv[1]) / 1000:
    pass
done({"own_ms": (time.process_time() - started) * 1000})
"""
"""A measured child burning ``argv[1]`` ms of its CPU in its window; reports what it burned."""
PARENT = """
import subprocess, sys
subprocess.run([sys.executable, "-c", sys.argv[1], sys.argv[2]], check=True)
"""
"""A child that runs ``BURN`` as its own child, the protocol passing through to it."""
QUERY = "SELECT count(*) FROM generate_series(1, 2000000)"
CONNECTED = f"""
import asyncio, sys
import asyncpg
from benchmarks.cpu import done, ready
async def main():
    connection = await asyncpg.connect(sys.argv[1])
    ready()
    await connection.fetchval({QUERY!r})
    done({{}})
    await connection.close()
asyncio.run(main())
"""
"""A measured child whose PostgreSQL backend runs a query in its window."""
SLACK_MS = 30
"""What a child may spend in its window beyond its own burn: reading its go line, printing its
result."""


def child(*args: str) -> subprocess.Popen[bytes]:
    process = subprocess.Popen(
        [sys.executable, "-c", *args], cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert process.stdout is not None
    assert process.stdout.readline() == b"ready\n"
    return process


def result(process: subprocess.Popen[bytes]) -> dict[str, float]:
    assert process.stdout is not None
    answer: dict[str, float] = json.loads(process.stdout.readline())
    return answer


def go(process: subprocess.Popen[bytes]) -> None:
    assert process.stdin is not None
    process.stdin.write(b"go\n")
    process.stdin.flush()


def finish(process: subprocess.Popen[bytes]) -> None:
    """Closes the child's stdin, which ends it, and waits for it to exit cleanly."""
    assert process.stdin is not None and process.stdout is not None
    process.stdin.close()
    assert process.wait() == 0
    process.stdout.close()


async def test_each_group_counts_its_own_process_and_not_the_other() -> None:
    light, heavy = child(BURN, "40"), child(BURN, "250")
    try:
        window = Window({"light": [light.pid], "heavy": [heavy.pid]}, None)
        await window.open()
        go(light)
        go(heavy)
        light_own, heavy_own = result(light)["own_ms"], result(heavy)["own_ms"]
        spent = await window.close()
    finally:
        finish(light)
        finish(heavy)
    assert light_own <= spent["light"]["cpu_ms"] < light_own + SLACK_MS
    assert heavy_own <= spent["heavy"]["cpu_ms"] < heavy_own + SLACK_MS
    assert spent["light"]["processes"] == spent["heavy"]["processes"] == 1


async def test_a_group_counts_the_descendants_of_its_root() -> None:
    parent = child(PARENT, BURN, "60")
    try:
        window = Window({"tree": [parent.pid]}, None)
        await window.open()
        go(parent)
        own = result(parent)["own_ms"]
        spent = await window.close()
    finally:
        finish(parent)
    assert own <= spent["tree"]["cpu_ms"] < own + SLACK_MS
    assert spent["tree"]["processes"] == 2


def test_descendants_are_the_root_and_its_children_only() -> None:
    parent = child(PARENT, BURN, "0")
    try:
        tree = descendants([parent.pid])
        other = descendants([])
    finally:
        go(parent)
        result(parent)
        finish(parent)
    assert parent.pid in tree and len(tree) == 2
    assert other == set()


async def test_measured_counts_the_child_as_client_and_the_servers_given() -> None:
    server = child(BURN, "0")
    try:
        answer, spent = await measured([sys.executable, "-c", BURN, "80"], [server.pid], None)
    finally:
        go(server)
        result(server)
        finish(server)
    assert answer["own_ms"] <= spent["client"]["cpu_ms"] < answer["own_ms"] + SLACK_MS
    # The server, waiting for its own go all along, spent next to nothing.
    assert spent["server"]["processes"] == 1
    assert spent["server"]["cpu_ms"] < SLACK_MS
    assert "postgres" not in spent


async def test_postgres_counts_the_backend_of_the_child_and_not_another() -> None:
    url = postgres_admin_url()
    try:
        # Another connection, of this process: its backend is no one's in the window.
        other = await asyncpg.connect(url, timeout=5)
    except (OSError, asyncpg.PostgresError, TimeoutError) as error:
        postgres_unavailable(f"{type(error).__name__}: {error}")
    try:
        backends = await Backends.connect(url)
        if backends is None:
            pytest.skip("PostgreSQL's backends are not processes on this machine")
        try:
            _, spent = await measured([sys.executable, "-c", CONNECTED, url], [], backends)
            assert other.get_server_pid() in await backends.serving([os.getpid()])
        finally:
            await backends.close()
    finally:
        await other.close()
    assert spent["postgres"]["processes"] == 1
    # The child's query (two million rows counted) ran in that one backend.
    assert spent["postgres"]["cpu_ms"] > 5
