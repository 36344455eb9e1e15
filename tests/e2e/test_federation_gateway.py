"""Federation with the real thing: ``tests/node/gateway.mjs`` composes our live subgraph
(``_service { sdl }``, read by ``@apollo/gateway``'s ``IntrospectAndCompose``) with a small
JS subgraph that extends ``Operation`` by its key, then queries through the gateway: (a) an
``Operation`` field of ours joined with the JS subgraph's ``reviewNote``; (b) ``Operation``
references returned by the JS subgraph, resolved by the gateway through our ``_entities``
(an unknown key resolves to null). And federated tracing: with
``apollo-federation-include-trace: ftv1`` our response carries a trace Apollo's decoder reads."""

import json
from pathlib import Path

import httpx

from tests.api.conftest import claim_input
from tests.e2e.live import live_server, node
from tests.tokens import SERVICE_TOKEN, bearer

CLAIM = "mutation($input: ClaimOperationInput!) { claimOperation(input: $input) { __typename } }"


def test_gateway__joins_and_resolves_operation_references(tmp_path: Path) -> None:
    with live_server(tmp_path) as server:
        url = server.url + "/graphql"
        claimed = httpx.post(
            url,
            json={"query": CLAIM, "variables": {"input": claim_input(operationID="op-fed")}},
            headers=bearer(SERVICE_TOKEN),
        ).json()
        assert claimed == {"data": {"claimOperation": {"__typename": "OperationClaimed"}}}
        written = tmp_path / "gateway.json"
        run = node("gateway.mjs", url, str(written), SERVICE_TOKEN, "did:key:caller", "op-fed")
    assert run.returncode == 0, run.stdout + run.stderr
    result = json.loads(written.read_text())
    assert result["sdlHasKey"]
    assert result["ftv1"]["rootFields"] == ["serverTime"]
    assert result["ftv1"]["durationNs"] > 0
    assert result["joined"] == {
        "data": {
            "operation": {
                "operationID": "op-fed",
                "state": "ATTEMPTED",
                "attempts": 0,
                "reviewNote": "reviewed op-fed",
            }
        }
    }
    assert result["references"]["data"] == {
        "recentReviews": [
            {
                "id": "r1",
                "operation": {
                    "operationID": "op-fed",
                    "state": "ATTEMPTED",
                    "connectorName": "calendar",
                    "reviewNote": "reviewed op-fed",
                },
            },
            {"id": "r2", "operation": None},
        ]
    }
