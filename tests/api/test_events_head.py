"""``operationEventsHead`` / ``watchEventsHead`` on both backends: the newest ``sequence``
each log handed out (32 zeros before the first, an ``after`` every stream takes), and the
SDK's ``follow_events`` pinning "from now" with it, so a drop before its first event misses
nothing."""

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from connector_store_client import Client, TransportError, enqueue, follow_events

from store.events import BEFORE_FIRST
from tests.api.live_client import WAIT_S, served
from tests.api.test_client_worker_leasing import claims
from tests.tokens import SERVICE_TOKEN, mint

HEADS = "{ operationEventsHead watchEventsHead }"


async def test_events_head__zeros_before_the_first_event_then_the_newest(store):
    async with served(store) as app, Client(f"{app.http}/graphql", SERVICE_TOKEN) as client:
        empty = await client.execute(HEADS, repeatable=True)
        await enqueue(client, claims(2))
        grown = await client.execute(HEADS, repeatable=True)
        replayed = []
        async for data in client.subscribe(
            "subscription($after: String) { operationEvents(after: $after) "
            "{ sequence operation { operationID } } }",
            {"after": BEFORE_FIRST},
        ):
            replayed.append(data["operationEvents"])
            if len(replayed) == 2:
                break

    assert empty == {"operationEventsHead": BEFORE_FIRST, "watchEventsHead": BEFORE_FIRST}
    assert grown["watchEventsHead"] == BEFORE_FIRST
    assert [event["operation"]["operationID"] for event in replayed] == ["op-0", "op-1"]
    assert grown["operationEventsHead"] == replayed[-1]["sequence"]


async def test_events_head__needs_the_right_to_read_the_log(store):
    watcher = mint(sub="did:key:reader", scope="watches:read")
    async with served(store) as app, Client(f"{app.http}/graphql", watcher) as client:
        heads = await client.execute("{ watchEventsHead }", repeatable=True)
        try:
            await client.execute("{ operationEventsHead }", repeatable=True)
        except Exception as error:
            refused = error
    assert heads == {"watchEventsHead": BEFORE_FIRST}
    assert getattr(refused, "code", None) == "FORBIDDEN"


async def test_follow_events__a_drop_before_the_first_event_misses_nothing(store):
    async with (
        served(store) as app,
        Client(f"{app.http}/graphql", SERVICE_TOKEN) as writer,
        Client(f"{app.http}/graphql", SERVICE_TOKEN) as follower,
    ):
        await enqueue(writer, [claim | {"operationID": "before"} for claim in claims(1)])
        subscribe = follower.subscribe
        calls: list[dict[str, Any] | None] = []

        async def drops_once(
            document: str, variables: dict[str, Any] | None = None
        ) -> AsyncIterator[dict[str, Any]]:
            calls.append(variables)
            if len(calls) == 1:
                # Written while the follower reconnects, before it saw any event.
                await enqueue(writer, claims(10))
                raise TransportError("dropped by the test before the first event")
            async for data in subscribe(document, variables):
                yield data

        follower.subscribe = drops_once  # type: ignore[method-assign]
        seen: list[str] = []
        async with asyncio.timeout(WAIT_S):
            async for event in follow_events(follower, {"connectorName": "calendar"}):
                seen.append(event["operation"]["operationID"])
                if len(seen) == 10:
                    break

    assert sorted(seen) == sorted(f"op-{n}" for n in range(10))
    assert calls[0] == calls[1] and calls[0] is not None and calls[0]["after"] is not None
