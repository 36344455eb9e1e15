"""Persisted queries on PostgreSQL are shared by every server instance: a query registered on
one server is a hit on another server of the same database."""

import hashlib
from pathlib import Path

import httpx

from tests.databases import PostgresRun
from tests.e2e.live import live_server
from tests.tokens import SERVICE_TOKEN, bearer

QUERY = "query SharedNow { serverTime }"
PERSISTED = {
    "persistedQuery": {"version": 1, "sha256Hash": hashlib.sha256(QUERY.encode()).hexdigest()}
}


async def test_apq__two_instances_share_registrations(postgres_run: PostgresRun, tmp_path: Path):
    url = await postgres_run.create()
    await postgres_run.truncate()
    with (
        live_server(tmp_path, url, name="one") as one,
        live_server(tmp_path, url, name="two") as two,
        httpx.Client(headers=bearer(SERVICE_TOKEN)) as http,
    ):
        miss = http.post(two.url + "/graphql", json={"extensions": PERSISTED}).json()
        assert miss["errors"][0]["extensions"]["code"] == "PERSISTED_QUERY_NOT_FOUND"
        registered = http.post(
            one.url + "/graphql", json={"query": QUERY, "extensions": PERSISTED}
        ).json()
        assert "serverTime" in registered["data"]
        hit = http.post(two.url + "/graphql", json={"extensions": PERSISTED}).json()
        assert "serverTime" in hit["data"], hit
