"""Property test of the live server: schemathesis (GraphQL mode) generates queries and
mutations for every root field of the introspected schema and sends them with an admin
token to ``connector-store serve`` in its own process (SQLite). No response may be a 5xx
or carry ``INTERNAL_SERVER_ERROR``. Bounded: a few examples per field and a time budget."""

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis.graphql import nodes

from tests.e2e.live import Server, live_server
from tests.tokens import SERVICE_TOKEN, bearer

EXAMPLES_PER_FIELD = 20
TIME_BUDGET_S = 90.0
MAX_EPOCH_MILLIS = 2**53 - 1

schemathesis.graphql.scalar(
    "EpochMillis",
    st.one_of(
        st.integers(0, MAX_EPOCH_MILLIS),
        st.sampled_from([0, 1, 1_750_000_000_000, 4_102_444_800_000, MAX_EPOCH_MILLIS]),
    ).map(nodes.Int),
)
schemathesis.graphql.scalar(
    "JSON",
    st.one_of(st.text(max_size=20).map(nodes.String), st.integers(-1000, 1000).map(nodes.Int)),
)


def fuzz(operation, http: httpx.Client, url: str, stats: dict, failures: list[str]) -> None:
    """Send ``EXAMPLES_PER_FIELD`` generated documents of one root field; count them and
    note every server error."""
    label = operation.label

    @given(case=operation.as_strategy())
    @settings(
        max_examples=EXAMPLES_PER_FIELD,
        deadline=None,
        database=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    def check(case) -> None:
        response = http.post(url, json={"query": case.body})
        stats["requests"] += 1
        body = response.json()
        codes = [error.get("extensions", {}).get("code") for error in body.get("errors", [])]
        stats["errors" if codes else "ok"] += 1
        if response.status_code >= 500 or "INTERNAL_SERVER_ERROR" in codes:
            failures.append(f"{label}: {response.status_code} {response.text[:300]}")

    check()


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    with live_server(tmp_path, name="fuzz") as running:
        yield running


def test_schemathesis__no_server_errors_with_an_admin_token(server: Server) -> None:
    url = server.url + "/graphql"
    schema = schemathesis.graphql.from_url(url, headers=bearer(SERVICE_TOKEN), timeout=10)
    operations = [result.ok() for result in schema.get_all_operations()]
    fields = {operation.label for operation in operations}
    assert {"Query.operations", "Mutation.claimOperation", "Query.syncStates"} <= fields
    stats = {"requests": 0, "errors": 0, "ok": 0}
    failures: list[str] = []
    started = time.monotonic()
    with httpx.Client(headers=bearer(SERVICE_TOKEN), timeout=30) as http:
        for operation in operations:
            if time.monotonic() - started > TIME_BUDGET_S:
                break

            fuzz(operation, http, url, stats, failures)
    print(
        f"schemathesis: {len(operations)} root fields, {stats['requests']} requests "
        f"({stats['ok']} without errors, {stats['errors']} with GraphQL errors) in "
        f"{time.monotonic() - started:.1f} s; server errors: {len(failures)}"
    )
    assert stats["requests"] >= len(operations)
    assert failures == [], "\n".join(failures[:20]) + "\n" + server.output()[-3000:]
