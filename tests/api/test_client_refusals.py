"""The client SDK's subscriptions (client/connector_store_client) against a refusing server:
a WebSocket the server closes with a refusal (4403: a token refused, expired or signed out)
raises ``GraphQLResponseError`` with ``UNAUTHENTICATED`` and the server's reason, rather than
counting as a dropped connection that ``follow_events`` and the worker reconnect forever; a
``Worker`` whose token is refused stops and raises it rather than leasing again forever."""

import asyncio

import httpx
import pytest
from connector_store_client import (
    Client,
    Committed,
    GraphQLResponseError,
    LeasedOperation,
    Outcome,
    Worker,
    follow_events,
)

import server.websocket
from tests.api.live_client import served
from tests.api.test_sign_in import signed_in
from tests.factories import claimed_operation
from tests.tokens import bearer, mint

BOUND_S = 20.0
"""A bound on a refusal that comes at once (or at the server's next session check): a
follower that reconnects forever never ends and fails the test here."""


async def first_refusal(client: Client) -> GraphQLResponseError:
    with pytest.raises(GraphQLResponseError) as refused:
        async with asyncio.timeout(BOUND_S):
            async for _ in follow_events(client, after="0" * 32):
                pass
    return refused.value


async def test_follow_events__a_refused_token_raises_unauthenticated(store):
    other_key = mint(key="another-key-" + "x" * 32)
    async with served(store) as app, Client(f"{app.http}/graphql", other_key) as client:
        refused = await first_refusal(client)
    assert refused.code == "UNAUTHENTICATED" and "signature" in str(refused)


async def test_follow_events__a_session_signed_out_mid_stream_raises_unauthenticated(
    store, monkeypatch
):
    monkeypatch.setattr(server.websocket, "SESSION_RECHECK_S", 0.05)
    await claimed_operation(store)
    async with served(store) as app, httpx.AsyncClient(base_url=app.http) as http:
        token = (await signed_in(http, store))["token"]
        async with Client(f"{app.http}/graphql", token) as client:
            events = follow_events(client, after="0" * 32)
            assert (await anext(events))["sequence"]
            await http.post("/auth/sign-out", headers=bearer(token))
            with pytest.raises(GraphQLResponseError) as refused:
                async with asyncio.timeout(BOUND_S):
                    async for _ in events:
                        pass
    assert refused.value.code == "UNAUTHENTICATED" and "signed out" in str(refused.value)


async def test_worker__a_refused_token_stops_the_run_and_raises_it(store):
    async with (
        served(store) as app,
        Client(f"{app.http}/graphql", mint(scope="operations:read")) as client,
    ):
        with pytest.raises(GraphQLResponseError) as refused:
            async with asyncio.timeout(BOUND_S):
                await Worker(client, handler, connector_name="calendar", fallback_s=0.05).run()
    assert refused.value.code in {"FORBIDDEN", "UNAUTHENTICATED"}


async def handler(batch: list[LeasedOperation]) -> list[Outcome]:
    return [Committed() for _ in batch]
