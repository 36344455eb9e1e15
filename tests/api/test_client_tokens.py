"""The client SDK's ``Client(url, token=source)`` on both backends: a function (sync or
async) answering a token is called at start, again before the token's ``exp`` and again when
the server answers ``UNAUTHENTICATED``; the call refused is sent once more with the new
token, so a worker whose token ends mid-batch settles that batch (one send per operation)."""

import asyncio
import time

import httpx
import pytest
from connector_store_client import Client, Committed, LeasedOperation, Worker, enqueue
from connector_store_client.client import expires_at

from server.settings import Settings
from tests.api.live_client import served, session_token
from tests.api.test_client_worker_answers import BOUND_S, held, stored
from tests.api.test_client_worker_leasing import claims
from tests.tokens import SERVICE_TOKEN, bearer, mint


async def test_client__an_async_source_renews_a_token_signed_out_mid_batch(store):
    """The handler signs the worker's session out: its settle is refused
    (``UNAUTHENTICATED``), sent again with a new session's token, and applies."""
    sends: list[str] = []
    async with served(store) as app:
        tokens: list[str] = []

        async def sign_in() -> str:
            tokens.append(await session_token(app, store, "did:key:worker", "service"))
            return tokens[-1]

        async def sign_out_then_send(batch: list[LeasedOperation]) -> list[Committed]:
            async with httpx.AsyncClient(base_url=app.http, headers=bearer(tokens[-1])) as http:
                assert (await http.post("/auth/sign-out")).status_code == 200
            sends.extend(operation.operation_id for operation in batch)
            return [Committed() for _ in batch]

        async with Client(f"{app.http}/graphql", SERVICE_TOKEN) as enqueuer:
            await enqueue(enqueuer, claims(3))
        async with Client(f"{app.http}/graphql", sign_in) as client:
            assert len(tokens) == 1  # called at start
            worker = Worker(client, sign_out_then_send, connector_name="calendar")
            async with asyncio.timeout(BOUND_S):
                stats = await worker.run(until_idle=True)

    records = await stored(store, 3)
    assert sorted(sends) == ["op-0", "op-1", "op-2"]
    assert stats.committed == 3 and stats.released == 0 and held(records) == []
    assert len(tokens) >= 2 and client.token == tokens[-1]


async def test_client__a_sync_source_is_asked_again_for_a_token_past_its_exp(store):
    answers = iter([mint(ttl=-3600), SERVICE_TOKEN])
    asked: list[str] = []

    def source() -> str:
        asked.append(next(answers))
        return asked[-1]

    async with served(store) as app, Client(f"{app.http}/graphql", source) as client:
        results = await enqueue(client, claims(2))

    assert [result["__typename"] for result in results] == ["OperationClaimed"] * 2
    assert asked[-1] == SERVICE_TOKEN and len(asked) == 2


async def test_client__a_token_refused_again_after_renewal_raises(store):
    expired = mint(ttl=-3600)
    async with served(store) as app, Client(f"{app.http}/graphql", lambda: expired) as client:
        with pytest.raises(Exception, match="UNAUTHENTICATED"):
            await enqueue(client, claims(1))


@pytest.mark.slow
async def test_client__a_source_is_asked_before_its_token_expires(store):
    """Tokens that live 3 s, the server allowing no leeway: a handler that takes longer than
    one token's life still settles, the client having asked for the next before it ended."""
    minted: list[str] = []

    def source() -> str:
        minted.append(mint(ttl=3))
        return minted[-1]

    async def slow(batch: list[LeasedOperation]) -> list[Committed]:
        exp = expires_at(minted[0])
        assert exp is not None
        while exp + 1 > time.time():
            await asyncio.sleep(0.1)
        return [Committed() for _ in batch]

    settings = Settings(sweeper=False, jwt_leeway_seconds=0)
    async with served(store, settings) as app:
        async with Client(f"{app.http}/graphql", SERVICE_TOKEN) as enqueuer:
            await enqueue(enqueuer, claims(1))
        async with Client(f"{app.http}/graphql", source) as client:
            refused: list[bytes] = []

            async def note(response: httpx.Response) -> None:
                await response.aread()
                if b"UNAUTHENTICATED" in response.content:
                    refused.append(response.content)

            client.http.event_hooks["response"].append(note)
            worker = Worker(client, slow, connector_name="calendar", lease_ms=60_000)
            async with asyncio.timeout(BOUND_S):
                stats = await worker.run(until_idle=True)

    assert stats.committed == 1 and len(minted) >= 2
    assert refused == []  # renewed before the server refused any call
