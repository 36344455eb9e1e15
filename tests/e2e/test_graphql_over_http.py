"""The npm ``graphql-http`` audit (GraphQL over HTTP: every MUST, SHOULD and MAY) against the
live server, with a service token: every audit must be ok. The table is printed (-s)."""

import json
from pathlib import Path

from tests.e2e.live import live_server, node
from tests.tokens import SERVICE_TOKEN


def test_graphql_http_audit__every_must_and_should_ok(tmp_path: Path) -> None:
    with live_server(tmp_path) as server:
        run = node("audit.mjs", server.url + "/graphql", SERVICE_TOKEN)
    print(run.stdout)
    assert run.returncode == 0, run.stdout + run.stderr
    counts = json.loads(run.stdout.strip().splitlines()[-1])["counts"]
    for level in ("MUST", "SHOULD"):
        assert counts[level]["ok"] == counts[level]["total"] > 0, counts
