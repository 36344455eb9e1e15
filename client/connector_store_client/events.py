"""``follow_events``: an operation's events as they commit, without gaps across reconnects."""

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from connector_store_client.client import Client, backoff_s
from connector_store_client.documents import OPERATION_EVENTS, OPERATION_EVENTS_HEAD
from connector_store_client.errors import TransportError


async def events_head(client: Client) -> str:
    """The ``sequence`` of the newest operation event the server's log handed out
    (``operationEventsHead``; 32 zeros before the first): an ``after`` for ``follow_events``
    that misses nothing committed from now on, read before the writes it should see."""
    data = await client.execute(OPERATION_EVENTS_HEAD, repeatable=True)
    head: str = data["operationEventsHead"]
    return head


async def follow_events(
    client: Client,
    filter: dict[str, Any] | None = None,
    after: str | None = None,
    *,
    max_reconnects: int | None = None,
) -> AsyncIterator[dict[str, Any]]:
    """Each ``operationEvents`` event matching ``filter`` (an ``OperationFilter`` as a dict)
    after the cursor ``after`` (None: from now, pinned before the first subscribe by
    reading ``operationEventsHead``), in commit order, forever. When the connection drops it
    resubscribes with the last ``sequence`` it yielded as ``after`` (before any, the head it
    pinned), so the server replays what followed: nothing is missed or repeated. ``max_reconnects``
    (None: no bound) consecutive failed reconnects raise the last ``TransportError``. Raises
    ``EventsCollected`` when ``after`` is older than the oldest event the server keeps, and
    ``GraphQLResponseError`` for any other refusal (``UNAUTHENTICATED`` for a token refused,
    expired or signed out: a reconnect with it would be refused again)."""
    failures = 0
    while True:
        try:
            if after is None:
                after = await events_head(client)
            async for data in client.subscribe(
                OPERATION_EVENTS, {"filter": filter, "after": after}
            ):
                failures = 0
                event = data["operationEvents"]
                after = event["sequence"]
                yield event
        except TransportError:
            failures += 1
            if max_reconnects is not None and failures > max_reconnects:
                raise
            await asyncio.sleep(backoff_s(min(failures, 5)))
