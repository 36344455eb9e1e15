"""The SDK's testing helper (``connector_store_client.testing``) on both backends: a
``LocalServer`` of a test's own, claims enqueued, a worker run until every operation ended
(retries waited for), outcomes read; and the example test that teaches it
(``examples/test_sdk_worker.py``) passes."""

import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from connector_store_client import Committed, LeasedOperation, Outcome, RetryAfter, Worker, enqueue
from connector_store_client.testing import LocalServer, outcome_of, work_until_finished

from tests.databases import PostgresRun
from tests.e2e.test_client_sdk import REPO, claims, sdk_env


@pytest.fixture(params=["sqlite", "postgres"])
async def local(
    request: pytest.FixtureRequest, tmp_path: Path, postgres_run: PostgresRun
) -> AsyncIterator[LocalServer]:
    url = None
    if request.param == "postgres":
        url = await postgres_run.create()
        await postgres_run.truncate()
    with LocalServer(tmp_path / "server", database_url=url) as server:
        yield server


@pytest.mark.slow
async def test_local_server__a_handler_run_until_every_operation_ended(local):
    seen: list[str] = []

    async def handle(batch: list[LeasedOperation]) -> list[Outcome]:
        outcomes: list[Outcome] = []
        for operation in batch:
            seen.append(operation.operation_id)
            if operation.operation_id == "op-1" and operation.attempts == 0:
                outcomes.append(RetryAfter(50, "transient", 503))
            elif operation.operation_id == "op-2":
                raise RuntimeError("the provider's client broke")
            else:
                outcomes.append(Committed({"id": operation.source_id}))
        return outcomes

    async with local.client() as client:
        await enqueue(client, claims(3, accounts=3))
        worker = Worker(
            client,
            handle,
            connector_name="calendar",
            batch_size=1,
            max_attempts=2,
            retry_base_ms=20,
        )
        stats = await work_until_finished(worker, timeout_s=60)
        ended = [await outcome_of(client, "did:key:caller", f"op-{n}") for n in range(3)]

    assert [(o.state.value, o.attempts) for o in ended if o is not None] == [
        ("COMMITTED", 1),
        ("COMMITTED", 2),
        ("FAILED", 2),
    ]
    assert ended[2] is not None and "the provider's client broke" in (ended[2].last_error or "")
    assert stats.committed == 2 and stats.failed == 1 and sorted(seen).count("op-2") == 2


@pytest.mark.slow
def test_the_example_handler_test_passes(tmp_path):
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    command += [str(REPO / "examples" / "test_sdk_worker.py"), "--basetemp", str(tmp_path)]
    run = subprocess.run(
        command, cwd=REPO, env=sdk_env(), capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stdout + run.stderr
