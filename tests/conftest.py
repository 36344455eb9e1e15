"""Fixtures: every store test runs on SQLite and on PostgreSQL, each on fresh databases."""

import asyncio
import faulthandler
import os
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from store import ConnectorStore
from store.database import Database
from tests.databases import PostgresRun, sqlite_copy, sqlite_template
from tests.leftovers import describe, sessions_left, tasks_left
from tests.tokens import TEST_JWT_SECRET

# Every app and server of the suite (in-process or spawned) checks tokens with this secret;
# tests of the other key settings override it.
os.environ["JWT_SECRET"] = TEST_JWT_SECRET
for name in ("JWT_PUBLIC_KEY", "JWT_ISSUER", "JWT_AUDIENCE", "CORS_ORIGINS"):
    os.environ.pop(name, None)

BACKENDS = ["sqlite", "postgres"]
START = 1_750_000_000_000


class FrozenClock:
    """A clock the test moves by hand; reads epoch ms."""

    def __init__(self, now: int = START) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> int:
        self.now += ms
        return self.now


@pytest.fixture(scope="session")
def sqlite_template_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return sqlite_template(tmp_path_factory.mktemp("template"))


@pytest.fixture(scope="session")
async def postgres_run() -> AsyncIterator[PostgresRun]:
    run = PostgresRun()
    yield run
    await run.drop()


@pytest.fixture(params=BACKENDS)
async def database_url(
    request: pytest.FixtureRequest,
    sqlite_template_path: Path,
    tmp_path: Path,
    postgres_run: PostgresRun,
) -> str:
    """The URL of a fresh, migrated, empty database on each backend."""
    if request.param == "sqlite":
        return sqlite_copy(sqlite_template_path, tmp_path)
    url = await postgres_run.create()
    await postgres_run.truncate()
    return url


@pytest.fixture(autouse=True)
async def nothing_left_running(postgres_run: PostgresRun) -> AsyncIterator[None]:
    """Fail the test that leaves a task running on the process's event loop, or, when it
    used the process's PostgreSQL database, a session connected to that database. Every test
    of a process (the run's, or a pytest-xdist worker's) shares one event loop and one
    database: a listener, sweeper or pool left by one test goes on, and reconnects, during
    the next ones. What was left is then stopped (tasks cancelled, sessions terminated), so
    that only the test that left it fails."""
    before = asyncio.all_tasks()
    postgres_run.used = False
    yield
    left = [describe(task) for task in await tasks_left(before)]
    if postgres_run.used:
        left += [f"PostgreSQL session {session}" for session in await sessions_left(postgres_run)]
    if left:
        pytest.fail("left running after the test:\n" + "\n".join(left), pytrace=False)


@pytest.fixture
def clock() -> FrozenClock:
    return FrozenClock()


@pytest.fixture
async def database(database_url: str) -> AsyncIterator[Database]:
    db = Database(database_url, pool_size=60)
    await db.connect()
    yield db
    await db.disconnect()


@pytest.fixture
def store(database: Database, clock: FrozenClock) -> Iterator[ConnectorStore]:
    yield ConnectorStore(database, clock=clock)


EXIT_GRACE_S = 30.0
EXIT_STATUS = pytest.StashKey[int]()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    session.config.stash[EXIT_STATUS] = int(exitstatus)


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """A test failed by ``--timeout`` can leave a thread running that the interpreter waits
    for at exit, for ever (aiosqlite's, which the migrations use, are not daemon threads):
    if the process has not exited ``EXIT_GRACE_S`` after its main thread ended, print every
    thread's stack and end it with the run's status (1 if the run passed: a hang is a
    fault). A pytest-xdist worker's main thread goes on after its run, serving the
    controller until every worker is done: the grace starts only when it ends."""
    status = config.stash.get(EXIT_STATUS, 1) or 1

    def force_exit() -> None:
        while threading.main_thread().is_alive():
            time.sleep(0.5)
        time.sleep(EXIT_GRACE_S)
        print(f"the tests' process did not exit within {EXIT_GRACE_S:g} s", file=sys.stderr)
        faulthandler.dump_traceback(sys.stderr)
        os._exit(status)

    threading.Thread(target=force_exit, name="exit-guard", daemon=True).start()
