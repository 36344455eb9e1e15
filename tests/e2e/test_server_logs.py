"""The real server's output with ``LOG_FORMAT=json`` at debug level: every line is JSON, the
request's line has its fields, and neither the database password nor the Authorization
header's token appears anywhere."""

import json
from pathlib import Path

import httpx
from sqlalchemy.engine import make_url

from tests.databases import PostgresRun
from tests.faults.harness import Server
from tests.ports import free_port
from tests.tokens import mint

PASSWORD = "hunter2-db-secret"


async def test_server_output__json_lines_without_secrets(postgres_run: PostgresRun, tmp_path: Path):
    # Minted here, not at import: a full run reaches this test long after its collection.
    token = mint("did:key:logs", "operations:read", ttl=600)
    url = await postgres_run.create()
    # Trust auth accepts any password: the URL carries one the logs must never show.
    with_password = make_url(url).set(password=PASSWORD).render_as_string(hide_password=False)
    server = Server(
        with_password,
        free_port(),
        tmp_path / "server.log",
        {"LOG_FORMAT": "json", "LOG_LEVEL": "debug", "SWEEPER": "true"},
    ).start()
    try:
        server.wait_ready()
        response = httpx.post(
            server.url + "/graphql",
            json={"query": "query Now { serverTime }", "operationName": "Now"},
            headers={"Authorization": f"Bearer {token}", "X-Request-ID": "logs-1"},
        )
        assert response.headers["x-request-id"] == "logs-1"
        code = server.terminate()
    finally:
        server.kill()
    assert code in (0, -15)
    output = server.output()
    assert PASSWORD not in output
    assert token not in output
    lines = [line for line in output.splitlines() if line.startswith("{")]
    entries = [json.loads(line) for line in lines]
    [request] = [entry for entry in entries if entry.get("request_id") == "logs-1"]
    assert request["operation"] == "Now"
    assert request["outcome"] == "ok"
    assert request["viewer_did"] == "did:key:logs"
    assert any(entry["logger"].startswith("uvicorn") for entry in entries)
    # Every log record is a JSON line; only the CLI's own messages (typer.echo) are plain.
    plain = [line for line in output.splitlines() if line and not line.startswith("{")]
    assert all(
        line.startswith(
            (
                "database:",
                "new database",
                "migrating",
                "already at",
                "GraphiQL:",
                "auth:",
                # The one-time sign-in link, for the dashboard and for GraphiQL.
                "sign in",
                "  http://",
                "  (GraphiQL: http://",
            )
        )
        for line in plain
    ), plain
