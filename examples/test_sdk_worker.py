"""Testing a handler against a real server with the SDK's testing helper: the handler of
``examples/sdk_worker.py`` commits a write, and retries one its provider answers 503 the first
time. Run it with ``.venv/bin/pytest examples/test_sdk_worker.py`` (pytest-asyncio runs the
async tests; the server's package installed beside the SDK)."""

import sdk_worker
from connector_store_client import Worker, enqueue
from connector_store_client.pytest_plugin import connector_store_server
from connector_store_client.testing import LocalServer, outcome_of, work_until_finished

__all__ = ["connector_store_server"]  # the fixture: a server of each test's own


def claim(operation_id: str) -> dict[str, str]:
    return {
        "callerDID": "did:key:handler-test",
        "operationID": operation_id,
        "ownerDID": "did:key:owner",
        "connectorName": "calendar-sdk",
        "model": "Event",
        "op": "update",
        "accountKey": "acct-0",
        "target": f"events/{operation_id}",
        "sourceID": f"evt-{operation_id}",
        "deterministicEventID": f"det-{operation_id}",
        "payloadHash": f"sha256:{operation_id}",
    }


async def test_handler__commits_and_retries_a_503_once(connector_store_server: LocalServer):
    sdk_worker.FLAKY.add("det-flaky")
    async with connector_store_server.client() as client:
        await enqueue(client, [claim("fine"), claim("flaky")])
        worker = Worker(client, sdk_worker.handle, connector_name="calendar-sdk")
        stats = await work_until_finished(worker)
        fine = await outcome_of(client, "did:key:handler-test", "fine")
        flaky = await outcome_of(client, "did:key:handler-test", "flaky")

    assert (stats.committed, stats.retried) == (2, 1)
    assert fine is not None and (fine.state.value, fine.attempts) == ("COMMITTED", 1)
    assert flaky is not None and (flaky.state.value, flaky.attempts) == ("COMMITTED", 2)
    assert flaky.result_entity == {"id": "evt-flaky"}
