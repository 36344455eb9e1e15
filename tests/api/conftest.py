"""GraphQL tests drive the real ASGI app in-process over httpx, on both backends."""

import re
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import server.graph
from server.app import create_app
from server.settings import Settings
from store import ConnectorStore
from tests.fast_path_differential import MISMATCHES, Differential
from tests.tokens import SERVICE_TOKEN, bearer

DOCUMENTS = Path(__file__).resolve().parents[2] / "graphql" / "operations"


class GraphQLClient:
    """Posts GraphQL requests to the app and returns the decoded response."""

    def __init__(self, http: httpx.AsyncClient) -> None:
        self.http = http
        self.documents = [path.read_text() for path in sorted(DOCUMENTS.glob("*.graphql"))]

    async def query(self, query: str, variables: dict[str, Any] | None = None) -> dict[str, Any]:
        """Send ``query``; assert an HTTP 200 and return the body."""
        response = await self.http.post("/graphql", json={"query": query, "variables": variables})
        assert response.status_code == 200, response.text
        return response.json()

    async def run(self, operation_name: str, **variables: Any) -> dict[str, Any]:
        """Run a named operation of graphql/operations; assert no errors; return ``data``."""
        document = next(
            text
            for text in self.documents
            if re.search(rf"^(query|mutation) {operation_name}\b", text, re.MULTILINE)
        )
        response = await self.http.post(
            "/graphql",
            json={"query": document, "operationName": operation_name, "variables": variables},
        )
        body = response.json()
        assert response.status_code == 200 and "errors" not in body, body
        return body["data"]


def app_client(
    store: ConnectorStore, settings: Settings | None = None, token: str | None = SERVICE_TOKEN
) -> httpx.AsyncClient:
    """An httpx client bound to a fresh app over ``store``, sending ``token`` (by default a
    ``service`` token; None sends none)."""
    app = create_app(settings or Settings(), store=store)
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app),
        base_url="http://test",
        headers={} if token is None else bearer(token),
    )


@pytest.fixture(autouse=True)
def both_paths(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every app of an API test answers each planned request by the fast path, checked
    against graphql-core's path on the same request (``Differential``): a test fails when
    the two responses differ by a byte."""
    monkeypatch.setattr(server.graph, "FastExecutor", Differential)
    MISMATCHES.clear()
    yield
    assert MISMATCHES == []


@pytest.fixture
async def http(store: ConnectorStore) -> AsyncIterator[httpx.AsyncClient]:
    async with app_client(store) as client:
        yield client


@pytest.fixture
def gql(http: httpx.AsyncClient) -> GraphQLClient:
    return GraphQLClient(http)


def claim_input(**overrides: Any) -> dict[str, Any]:
    """A valid ``ClaimOperationInput``, leased to ``lease-A`` for an hour (``leaseMs``, the
    longest lease) unless it names ``leaseExpiresAt`` or ``leaseMs``; any field may be
    overridden."""
    lease_end = {} if {"leaseExpiresAt", "leaseMs"} & set(overrides) else {"leaseMs": 3_600_000}
    return (
        {
            "callerDID": "did:key:caller",
            "operationID": "op-1",
            "ownerDID": "did:key:owner",
            "connectorName": "calendar",
            "model": "Event",
            "op": "update",
            "accountKey": "acct-1",
            "target": "events/1",
            "sourceID": "evt-1",
            "deterministicEventID": "det-1",
            "payloadHash": "sha256:aaa",
            "leaseToken": "lease-A",
            "documentID": "doc-1",
            "reissueIntent": {"fields": ["title"]},
        }
        | lease_end
        | overrides
    )


def error_codes(body: dict[str, Any]) -> list[str]:
    """The ``extensions.code`` of each error in a response body."""
    return [error["extensions"]["code"] for error in body.get("errors", [])]
