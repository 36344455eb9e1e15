"""The subscription bounds (``server.live.Hub.slot``) on a real server (uvicorn on a free
port), on both backends: a sign-in session is a subject of its own, whatever its ``sub``, so
a person's streams are bounded per session and never count against a worker's, even one
whose ``sub`` is the same; the workers' ``workAvailable`` has a budget of its own, which no
number of event streams uses up; and each bound is exact when many subscribe at once: the
Nth is accepted, the N+1st refused with ``TOO_MANY_SUBSCRIPTIONS``."""

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from resolvers.codes import TOO_MANY_SUBSCRIPTIONS
from server.settings import Settings
from store import ConnectorStore
from tests.api.conftest import error_codes
from tests.api.live_client import (
    MULTIPART,
    WAIT_S,
    Served,
    parts,
    served,
    session_token,
    socket,
)
from tests.factories import claimed_operation
from tests.tokens import SERVICE_TOKEN, bearer

pytestmark = pytest.mark.slow

BOUND = 3
"""``MAX_SUBSCRIPTIONS_PER_VIEWER`` in these tests."""
EVENTS = {"query": "subscription { operationEvents { sequence } }"}
WORK = {"query": "subscription { workAvailable { connectorName } }"}
CLAIMED = itertools.count()


def bounded(per_connection: int = 100) -> Settings:
    return Settings(
        sweeper=False,
        max_subscriptions_per_viewer=BOUND,
        max_subscriptions_per_connection=per_connection,
    )


async def until(condition: Any) -> None:
    """Wait until ``condition()`` holds (a bound against a hang, not a measure)."""
    async with asyncio.timeout(WAIT_S):
        while not condition():
            await asyncio.sleep(0.01)


def held(app: Served, channel: str) -> int:
    """The subscriptions open on ``app`` in ``channel`` (``workAvailable`` or the event
    streams), every subject's."""
    subjects = app.app.state.hub.subjects
    return sum(count for (name, *_), count in subjects.items() if name == channel)


async def subscribed(
    app: Served,
    body: dict[str, Any],
    token: str,
    first: "asyncio.Future[dict[str, Any]]",
    release: asyncio.Event,
) -> None:
    """A multipart subscription of ``body`` with ``token``: its first part's payload to
    ``first``, then held open until ``release``."""
    headers = {**bearer(token), "Accept": MULTIPART}
    try:
        async with (
            httpx.AsyncClient(base_url=app.http, timeout=WAIT_S) as http,
            http.stream("POST", "/graphql", json=body, headers=headers) as response,
        ):
            payloads = parts(response)
            first.set_result(await anext(payloads))
            await release.wait()
            await payloads.aclose()
    except Exception as error:
        if not first.done():
            first.set_exception(error)
        raise


@contextlib.asynccontextmanager
async def opened_at_once(
    app: Served, store: ConnectorStore, token: str, body: dict[str, Any], count: int
) -> AsyncIterator[list[dict[str, Any]]]:
    """``count`` multipart subscriptions of ``body`` with ``token`` sent at once, each over
    its own connection and each held open for the block: the first part of each (an event
    stream's once an operation is claimed, after every refusal has arrived and the rest
    are open). The block ends once the server has let go of all of them."""
    channel = "workAvailable" if body is WORK else "event streams"
    before = held(app, channel)
    firsts = [asyncio.get_running_loop().create_future() for _ in range(count)]
    release = asyncio.Event()
    tasks = [asyncio.create_task(subscribed(app, body, token, first, release)) for first in firsts]
    try:
        if body is EVENTS:
            await until(
                lambda: sum(f.done() for f in firsts) + held(app, channel) - before == count
            )
            number = next(CLAIMED)
            await claimed_operation(store, operation_id=f"op-{number}", source_id=f"s-{number}")
        async with asyncio.timeout(WAIT_S):
            payloads = list(await asyncio.gather(*firsts))
        yield payloads
    finally:
        release.set()
        await asyncio.gather(*tasks, return_exceptions=True)
    await until(lambda: held(app, channel) == before)


def outcomes(firsts: list[dict[str, Any]], field: str) -> tuple[int, int]:
    """How many of the first parts are items of ``field``, and how many are refusals with
    ``TOO_MANY_SUBSCRIPTIONS`` (nothing else is expected)."""
    items = [payload for payload in firsts if field in (payload.get("data") or {})]
    refused = [p for p in firsts if error_codes(p) == [TOO_MANY_SUBSCRIPTIONS]]
    assert len(items) + len(refused) == len(firsts), firsts
    return len(items), len(refused)


@pytest.mark.parametrize(("body", "field"), [(EVENTS, "operationEvents"), (WORK, "workAvailable")])
async def test_a_sessions_bound_is_exact_when_many_subscribe_at_once(store, body, field):
    async with served(store, bounded()) as app:
        token = await session_token(app, store)
        async with opened_at_once(app, store, token, body, 3 * BOUND) as firsts:
            assert outcomes(firsts, field) == (BOUND, 2 * BOUND)


async def test_a_connections_bound_is_exact_when_many_subscribe_at_once(store):
    async with served(store, bounded(per_connection=BOUND)) as app, socket(app) as sock:
        await sock.init(await session_token(app, store))
        for id_ in range(3 * BOUND):
            await sock.subscribe(str(id_), WORK["query"])
        firsts: dict[str, dict[str, Any]] = {}
        while len(firsts) < 3 * BOUND:
            message = await sock.receive()
            if message["type"] == "next":
                firsts.setdefault(message["id"], message["payload"])
    assert outcomes(list(firsts.values()), "workAvailable") == (BOUND, 2 * BOUND)


async def test_a_burst_of_subscribes_on_one_websocket_is_refused_as_the_bound_refuses(store):
    """Subscribes sent faster than they start pass Strawberry's own bound on the operations
    in flight (twice the connection's; a worker's token: no session check between them):
    each refused one still ends as the hub refuses, a
    ``next`` carrying ``TOO_MANY_SUBSCRIPTIONS``, then ``complete``; exactly the bound is
    accepted."""
    burst = 10 * BOUND
    async with served(store, bounded(per_connection=BOUND)) as app, socket(app) as sock:
        await sock.init(SERVICE_TOKEN)
        await asyncio.gather(*(sock.subscribe(str(id_), WORK["query"]) for id_ in range(burst)))
        sent: dict[str, list[dict[str, Any]]] = {}
        settled: set[str] = set()
        while len(settled) < burst:
            message = await sock.receive()
            sent.setdefault(message["id"], []).append(message)
            accepted = message["type"] == "next" and "errors" not in message["payload"]
            if accepted or message["type"] in ("complete", "error"):
                settled.add(message["id"])
    refused = [messages for messages in sent.values() if "errors" in messages[0]["payload"]]
    assert len(sent) - len(refused) == BOUND, sent
    for messages in refused:
        assert [message["type"] for message in messages] == ["next", "complete"], messages
        assert error_codes(messages[0]["payload"]) == [TOO_MANY_SUBSCRIPTIONS], messages


async def test_a_persons_streams_never_refuse_a_workers_work_available(store):
    """A person's tab signed in with the workers' very ``sub`` (``service``) holds its
    bound of event streams and of ``workAvailable`` open: a worker's token still subscribes
    to both (the session is a subject of its own, and its streams count in their own
    channel)."""
    async with served(store, bounded()) as app:
        person = await session_token(app, store, sub="service")
        async with (
            opened_at_once(app, store, person, EVENTS, BOUND + 1) as events,
            opened_at_once(app, store, person, WORK, BOUND + 1) as work,
            opened_at_once(app, store, SERVICE_TOKEN, WORK, 1) as worker_work,
            opened_at_once(app, store, SERVICE_TOKEN, EVENTS, 1) as worker_events,
        ):
            assert outcomes(events, "operationEvents") == (BOUND, 1)
            assert outcomes(work, "workAvailable") == (BOUND, 1)
            assert outcomes(worker_work, "workAvailable") == (1, 0)
            assert outcomes(worker_events, "operationEvents") == (1, 0)


async def test_two_sessions_of_one_person_are_bounded_each_on_its_own(store):
    async with served(store, bounded()) as app:
        one = await session_token(app, store, sub="did:key:alice", scope="operator")
        other = await session_token(app, store, sub="did:key:alice", scope="operator")
        async with (
            opened_at_once(app, store, one, EVENTS, BOUND + 1) as first,
            opened_at_once(app, store, other, EVENTS, BOUND + 1) as second,
        ):
            assert outcomes(first, "operationEvents") == (BOUND, 1)
            assert outcomes(second, "operationEvents") == (BOUND, 1)
