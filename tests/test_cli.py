"""The ``connector-store`` command as a person runs it, in real processes: configuration
mistakes end in one or two lines and a non-zero exit, and concurrent migrations all succeed."""

import asyncio
import json
import os
import re
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import asyncpg
import pytest
from filelock import FileLock

from store.migrate import POSTGRES_LOCK_KEY
from tests.databases import as_driver, postgres_admin_url, postgres_unavailable, with_database
from tests.ports import free_port

# Real processes (a `connector-store` command or server): left out of `make test-fast`.
pytestmark = pytest.mark.slow

COMMAND = Path(sys.executable).with_name("connector-store")
TIMEOUT_S = 300
"""A bound for a busy machine, not the time a command is expected to take."""


def run(*args: str, timeout_s: float = TIMEOUT_S, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(COMMAND), *args],
        env=os.environ | env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


def start(*args: str, **env: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [str(COMMAND), *args],
        env=os.environ | env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({"DATABASE_URL": "mysql://u@h/db"}, "DATABASE_URL"),
        ({"DATABASE_URL": "sqlite+aiosqlite:///:memory:"}, "in-memory"),
        ({"PORT": "abc"}, "PORT"),
        ({"WORKERS": "0"}, "WORKERS"),
        ({"LOG_LEVEL": "bogus"}, "LOG_LEVEL"),
        ({"DATABASE_URL": "postgresql://u@h:notaport/db"}, "DATABASE_URL"),
        ({"DATABASE_URL": "postgresql://u@h/db?bogus=1"}, "bogus"),
        ({"DATABASE_URL": "postgresql+asyncpg://postgres@127.0.0.1:5432/x?sslmode=bogus"}, "ssl"),
        ({"DATABASE_URL": "postgresql+asyncpg://postgres:pw@127.0.0.1:99999/x"}, "port 99999"),
        ({"DATABASE_URL": "sqlite+aiosqlite:////proc/connector-store.db"}, "unavailable"),
        ({"DATABASE_URL": "postgresql+asyncpg://postgres@127.0.0.1:1/x"}, "unavailable"),
        (
            {"DATABASE_URL": with_database(postgres_admin_url(), "no_such_db_x")},
            "does not exist",
        ),
    ],
)
@pytest.mark.parametrize("command", ["serve", "migrate"])
def test_cli__configuration_mistake_is_one_or_two_lines_and_exit_1(tmp_path, command, env, says):
    if "no_such_db" in env.get("DATABASE_URL", ""):
        asyncio.run(require_postgres())
    done = run(command, DATA_DIR=str(tmp_path), **env)

    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert 1 <= len(lines) <= 2, done.stderr
    assert lines[0].startswith("error: ") and says in lines[0]
    assert "Traceback" not in done.stderr + done.stdout


@pytest.mark.parametrize(
    ("flags", "says"), [(["--workers", "0"], "WORKERS"), (["--port", "70000"], "PORT")]
)
def test_cli__a_bad_serve_flag_is_the_bad_setting_it_stands_for(tmp_path, flags, says):
    """``--workers`` and ``--port`` are checked as WORKERS and PORT are: one ``error:``
    line naming the setting and exit 1 (not a usage box and 2, nor a traceback)."""
    done = run("serve", *flags, DATA_DIR=str(tmp_path))

    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [done.stderr.strip()]
    assert done.stderr.startswith(f"error: bad setting: {says}: "), done.stderr
    assert not done.stdout


def test_cli__migrate_says_what_it_creates_on_a_new_database(tmp_path):
    url = f"sqlite+aiosqlite:///{tmp_path}/new.db"

    first = run("migrate", DATABASE_URL=url)
    again = run("migrate", DATABASE_URL=url)

    assert first.returncode == 0 and again.returncode == 0
    assert "new database: creating the store's tables" in first.stdout
    assert "kubun_connector_operation" in first.stdout
    assert "nothing to migrate" in again.stdout


def migrate_twice_at_once(url: str) -> list[subprocess.CompletedProcess[str]]:
    processes = [start("migrate", DATABASE_URL=url) for _ in range(2)]
    results = []
    for process in processes:
        stdout, stderr = process.communicate(timeout=TIMEOUT_S)
        results.append(
            subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)
        )
    return results


def assert_one_created_both_succeeded(results: list[subprocess.CompletedProcess[str]]) -> None:
    assert [result.returncode for result in results] == [0, 0], [r.stderr for r in results]
    created = [result for result in results if "new database" in result.stdout]
    assert len(created) == 1, [result.stdout for result in results]


def test_cli__two_migrations_at_once_on_sqlite_both_succeed(tmp_path):
    for round_ in range(4):
        (tmp_path / f"round-{round_}").mkdir()  # an explicit path's folder must exist
        url = f"sqlite+aiosqlite:///{tmp_path}/round-{round_}/store.db"
        assert_one_created_both_succeeded(migrate_twice_at_once(url))


def test_cli__two_migrations_at_once_on_postgres_both_succeed():
    names = [f"connector_migrate_{uuid.uuid4().hex[:10]}" for _ in range(3)]
    asyncio.run(create_databases(names))
    try:
        for name in names:
            url = with_database(postgres_admin_url(), name)
            assert_one_created_both_succeeded(migrate_twice_at_once(url))
    finally:
        asyncio.run(drop_databases(names))


async def require_postgres() -> None:
    try:
        connection = await asyncpg.connect(postgres_admin_url(), timeout=5)
    except (OSError, asyncpg.PostgresError, TimeoutError) as error:
        postgres_unavailable(f"{type(error).__name__}: {error}")
    await connection.close()


async def create_databases(names: list[str]) -> None:
    await require_postgres()
    admin = await asyncpg.connect(postgres_admin_url())
    try:
        for name in names:
            await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()


async def drop_databases(names: list[str]) -> None:
    admin = await asyncpg.connect(postgres_admin_url())
    try:
        for name in names:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.close()


async def run_with_migration_lock_held(
    url: str, *args: str, **env: str
) -> subprocess.CompletedProcess[str]:
    """``run(*args)`` while another connection holds the migration's advisory lock on the
    PostgreSQL ``url``."""
    peer = await asyncpg.connect(as_driver(url, "postgresql"))
    try:
        await peer.execute("SELECT pg_advisory_lock($1)", POSTGRES_LOCK_KEY)
        return await asyncio.to_thread(run, *args, DATABASE_URL=url, **env)
    finally:
        await peer.close()


@pytest.mark.parametrize("command", ["migrate", "serve"])
@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_cli__a_migration_lock_held_elsewhere_is_waited_for_then_one_error_line_and_exit_1(
    tmp_path, command, backend
):
    args = [command] if command == "migrate" else [command, "--port", str(free_port())]
    env = {"MIGRATE_LOCK_TIMEOUT_SECONDS": "1", "SWEEPER": "false"}
    if backend == "sqlite":
        url = f"sqlite+aiosqlite:///{tmp_path}/locked.db"
        with FileLock(tmp_path / "locked.db.migrate-lock"):
            done = run(*args, DATABASE_URL=url, **env)
        assert "migration waits up to 1 s for the migration lock" in done.stderr, done.stderr
    else:
        name = f"connector_migrate_{uuid.uuid4().hex[:10]}"
        asyncio.run(create_databases([name]))
        url = with_database(postgres_admin_url(), name)
        try:
            done = asyncio.run(run_with_migration_lock_held(url, *args, **env))
        finally:
            asyncio.run(drop_databases([name]))
    assert done.returncode == 1, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "the migration gave up after 1 s" in errors[0], done.stderr


@pytest.mark.parametrize("command", ["migrate", "serve"])
def test_cli__a_database_host_that_never_answers_is_one_error_line_and_exit_1(command):
    """A host that accepts the connection and never answers (going down, overloaded): the
    connect gives up within DB_WAIT_TIMEOUT_SECONDS (the migration's connection too, whose
    lock waits are bounded apart, 60 s by default) rather than asyncpg's 60 s: the command
    ends well before that."""
    args = [command] if command == "migrate" else [command, "--port", str(free_port())]
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        url = f"postgresql+asyncpg://postgres@127.0.0.1:{silent.getsockname()[1]}/x"
        done = run(*args, timeout_s=45, DATABASE_URL=url, DB_WAIT_TIMEOUT_SECONDS="1")
    assert done.returncode == 1, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "did not answer in time" in errors[0], done.stderr


@pytest.mark.parametrize("taken", ["PORT", "METRICS_PORT"])
def test_serve__port_in_use_is_one_error_line_and_exit_1_before_anything_is_printed(
    tmp_path, taken
):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        busy = holder.getsockname()[1]
        with socket.socket() as spare:
            spare.bind(("127.0.0.1", 0))
            free = spare.getsockname()[1]
        ports = (
            {"PORT": busy, "METRICS_PORT": free}
            if taken == "PORT"
            else {
                "PORT": free,
                "METRICS_PORT": busy,
            }
        )
        result = run(
            "serve",
            DATABASE_URL=f"sqlite+aiosqlite:///{tmp_path / 'ports.db'}",
            PORT=str(ports["PORT"]),
            METRICS_PORT=str(ports["METRICS_PORT"]),
        )
    assert result.returncode == 1
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ") and taken in lines[0] and str(busy) in lines[0]
    assert not (tmp_path / "ports.db").exists()


def test_serve__metrics_port_equal_to_port_is_one_error_line_before_anything_is_printed(
    tmp_path,
):
    with socket.socket() as spare:
        spare.bind(("127.0.0.1", 0))
        port = spare.getsockname()[1]
    result = run(
        "serve",
        DATABASE_URL=f"sqlite+aiosqlite:///{tmp_path / 'same.db'}",
        PORT=str(port),
        METRICS_PORT=str(port),
    )
    assert result.returncode == 1
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: METRICS_PORT"), result.stderr


def test_migrate__nothing_to_migrate_is_not_followed_by_migrated(tmp_path):
    url = f"sqlite+aiosqlite:///{tmp_path}/twice.db"
    first = run("migrate", DATABASE_URL=url)
    again = run("migrate", DATABASE_URL=url)
    assert "migrated" in first.stdout.splitlines()[-1]
    assert again.returncode == 0
    assert again.stdout.strip().splitlines() == [again.stdout.strip().splitlines()[0]]
    assert "nothing to migrate" in again.stdout and "migrated" not in again.stdout


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_migrate__alembic_logs_in_the_server_format(tmp_path, log_format):
    done = run(
        "migrate",
        DATABASE_URL=f"sqlite+aiosqlite:///{tmp_path}/logs.db",
        LOG_FORMAT=log_format,
        LOG_LEVEL="info",
    )
    lines = [line for line in done.stderr.splitlines() if "alembic" in line]
    assert lines, done.stderr
    for line in lines:
        if log_format == "json":
            assert json.loads(line)["logger"].startswith("alembic")
        else:
            assert re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ INFO +alembic", line), line


@pytest.mark.parametrize("command", ["serve", "migrate", "collect"])
def test_explicit_sqlite_path_in_a_missing_folder__refused_not_created(tmp_path, command):
    missing = tmp_path / "typo"
    done = run(command, DATABASE_URL=f"sqlite+aiosqlite:///{missing}/store.db")
    assert done.returncode == 1 and done.stdout == ""
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("error: DATABASE_URL") and str(missing) in line
    assert not missing.exists()


def test_make_run__installs_the_runtime_only_not_the_dev_toolchain(tmp_path):
    done = subprocess.run(
        ["make", "-n", "run", f"VENV={tmp_path / 'venv'}"],
        cwd=Path(__file__).resolve().parents[1],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "pip install" in done.stdout and "-e ." in done.stdout
    assert "[dev]" not in done.stdout
