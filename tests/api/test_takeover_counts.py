"""``connector_lease_takeovers_total`` counts exactly the takeovers ``acquireLease`` counted, on
both backends: a lapsed lease whose send was already counted as abandoned, taken again by its
own token, counts nothing more."""

from tests.api.conftest import GraphQLClient, claim_input
from tests.api.test_metrics_api import app, running, samples, value

__all__ = ["app", "running"]

KEY = {"callerDID": "did:key:caller", "operationID": "op-1"}


async def test_metrics__acquire_lease_counts_its_takeover_once(app, running, clock):
    gql = GraphQLClient(running)
    await gql.run("ClaimOperation", input=claim_input(leaseExpiresAt=clock.now + 1_000))
    await gql.run("MarkSendStarted", input=KEY | {"leaseToken": "lease-A", "marker": "run-1"})
    clock.advance(2_000)

    for _ in range(3):
        taken = await gql.run(
            "AcquireLease", input=KEY | {"leaseToken": "lease-B", "leaseMs": 9_000}
        )
        assert taken["acquireLease"]["applied"] is True

    parsed = samples((await running.get("/metrics")).text)
    assert value(parsed, "connector_lease_takeovers_total") == 1
