"""The client SDK's ``enqueue`` on both backends: any number of claims, sent 500 to a
request in order, each answered in order; sending them all again answers
``OperationExists``."""

from connector_store_client import Client, enqueue
from connector_store_client.bounds import MAX_BATCH

from tests.api.live_client import served
from tests.api.test_client_worker_leasing import claims
from tests.tokens import SERVICE_TOKEN


async def test_enqueue__more_than_a_request_takes_goes_in_chunks_in_order(store):
    items = claims(2 * MAX_BATCH + 7)
    async with served(store) as app, Client(f"{app.http}/graphql", SERVICE_TOKEN) as client:
        sent: list[int] = []

        async def count(request: object) -> None:
            sent.append(1)

        client.http.event_hooks["request"].append(count)
        first = await enqueue(client, items)
        again = await enqueue(client, items)

    assert len(sent) == 6
    assert [result["__typename"] for result in first] == ["OperationClaimed"] * len(items)
    assert [r["operation"]["operationID"] for r in first] == [i["operationID"] for i in items]
    assert {result["__typename"] for result in again} == {"OperationExists"}
