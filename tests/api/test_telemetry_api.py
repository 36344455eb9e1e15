"""A request's log line (JSON and text), ``X-Request-ID`` echoed or generated, no secret in
any log line, and tracing spans for a request and its store calls."""

import io
import json
import logging
from collections.abc import Iterator

import httpx
import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from server.app import create_app
from server.logs import (
    CREDENTIAL,
    SECRET_PAIR,
    URL_PASSWORD,
    JsonFormatter,
    TextFormatter,
    configure_logging,
    quoted,
    redact,
)
from server.settings import Settings
from server.telemetry import valid_request_id
from store import ConnectorStore
from tests.api.conftest import GraphQLClient, claim_input
from tests.tokens import SERVICE_TOKEN, bearer


@pytest.fixture
def json_log() -> Iterator[io.StringIO]:
    """Everything logged during the test, as JSON lines."""
    output = io.StringIO()
    handler = logging.StreamHandler(output)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    yield output
    root.removeHandler(handler)
    root.setLevel(level)


def client(store: ConnectorStore, **kwargs: object) -> httpx.AsyncClient:
    app = create_app(Settings(sweeper=False), store=store, **kwargs)  # type: ignore[arg-type]
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app),
        base_url="http://test",
        headers=bearer(SERVICE_TOKEN),
    )


def request_lines(output: io.StringIO) -> list[dict[str, object]]:
    lines = [json.loads(line) for line in output.getvalue().splitlines()]
    return [line for line in lines if line["logger"] == "connector_store.request"]


async def test_request_log_line__has_the_fields_and_the_echoed_request_id(store, json_log):
    async with client(store) as http:
        response = await http.post(
            "/graphql",
            json={"query": "query ServerTime { serverTime }", "operationName": "ServerTime"},
            headers={"X-Request-ID": "req-42"},
        )
    assert response.headers["x-request-id"] == "req-42"
    [line] = request_lines(json_log)
    assert line["request_id"] == "req-42"
    assert line["operation"] == "ServerTime"
    assert line["viewer_did"] == "service"
    assert line["outcome"] == "ok"
    assert line["status"] == 200
    assert isinstance(line["duration_ms"], float)
    assert line["level"] == "info"


async def test_request_id__generated_when_absent_or_invalid(store, json_log):
    async with client(store) as http:
        plain = await http.post("/graphql", json={"query": "{ serverTime }"})
        too_long = await http.post(
            "/graphql", json={"query": "{ serverTime }"}, headers={"X-Request-ID": "x" * 129}
        )
        bad = await http.post(
            "/graphql", json={"query": "{ serverTime }"}, headers={"X-Request-ID": "a\tb"}
        )
        kept = await http.get("/healthz", headers={"X-Request-ID": "y" * 128})
    ids = [r.headers["x-request-id"] for r in (plain, too_long, bad)]
    assert all(len(i) == 32 for i in ids) and len(set(ids)) == 3
    assert kept.headers["x-request-id"] == "y" * 128
    assert [line["request_id"] for line in request_lines(json_log)][:3] == ids


async def test_request_log_line__carries_the_error_code_and_masked_request_id(store, json_log):
    async with client(store) as http:
        body = (await http.post("/graphql", json={"query": "{ nope }"})).json()
    assert body["errors"][0]["extensions"]["code"] == "GRAPHQL_VALIDATION_FAILED"
    [line] = request_lines(json_log)
    assert line["outcome"] == "GRAPHQL_VALIDATION_FAILED"


async def test_request_log_line__outcome_is_the_code_error_codes_gave(store, json_log):
    async with client(store) as http:
        body = (
            await http.post(
                "/graphql",
                json={
                    "query": "mutation($input: ClaimOperationInput!) "
                    "{ claimOperation(input: $input) { __typename } }",
                    "variables": {"input": claim_input(callerDID="")},
                },
            )
        ).json()
    assert body["errors"][0]["extensions"]["code"] == "BAD_USER_INPUT"
    [line] = request_lines(json_log)
    assert line["outcome"] == "BAD_USER_INPUT"


async def test_logs__no_token_or_password_in_any_line(store, json_log, caplog):
    secret_token = "eyJhbGciOiJIUzI1NiJ9.c2VjcmV0.s1gnature"
    async with client(store) as http:
        await http.post(
            "/graphql",
            json={"query": "{ serverTime }"},
            headers={"Authorization": f"Bearer {secret_token}"},
        )
    logging.getLogger("connector_store.test").warning(
        "connecting to postgresql+asyncpg://app:hunter2pw@db/prod with Bearer %s, password=s3cr3t",
        secret_token,
    )
    text = json_log.getvalue()
    assert "postgresql+asyncpg://app:***@db/prod" in text
    for secret in (secret_token, "hunter2pw", "s3cr3t"):
        assert secret not in text


def test_text_format__readable_with_the_fields():
    record = logging.LogRecord("connector_store.request", logging.INFO, "", 0, "POST", (), None)
    record.request_id = "r1"
    record.operation = "ServerTime"
    record.viewer_did = None
    line = TextFormatter().format(record)
    assert "INFO" in line and "connector_store.request: POST" in line
    assert 'request_id="r1" operation="ServerTime" viewer_did=null' in line


def test_redact__urls_and_credentials():
    assert redact("sqlite+aiosqlite:///data/x.db") == "sqlite+aiosqlite:///data/x.db"
    assert redact("postgresql://u:p@h/d") == "postgresql://u:***@h/d"
    assert redact("Authorization: Basic dXNlcjpwdw==") == "Authorization: Basic ***"


def test_valid_request_id():
    assert valid_request_id("abc-123") == "abc-123"
    assert valid_request_id("é") != "é"
    assert valid_request_id("") != ""
    assert valid_request_id(" padded ") != " padded "


async def test_tracing__spans_for_the_request_and_its_store_calls(store, clock):
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    app = create_app(Settings(sweeper=False, metrics=False), store=store, tracer=tracer)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app),
            base_url="http://test",
            headers=bearer(SERVICE_TOKEN),
        ) as http,
    ):
        await GraphQLClient(http).run("ClaimOperation", input=claim_input())
    spans = exporter.get_finished_spans()
    [request] = [span for span in spans if span.name == "POST /graphql"]
    assert request.attributes["graphql.operation.name"] == "ClaimOperation"
    assert request.attributes["http.response.status_code"] == 200
    store_spans = [span for span in spans if span.name.startswith("store.")]
    assert "store.operations.claim_operation" in [span.name for span in store_spans]
    assert all(span.parent.span_id == request.context.span_id for span in store_spans)


def test_tracing__off_without_an_endpoint():
    from server.tracing import tracer_for

    assert tracer_for("") is None


@pytest.mark.parametrize("formatter", [JsonFormatter(), TextFormatter()])
def test_redaction__a_secret_looking_field_keeps_the_line_parseable(formatter):
    record = logging.LogRecord("connector_store.request", logging.INFO, "", 0, "POST", (), None)
    record.request_id = "token=abc"
    record.operation = "password=x"
    line = formatter.format(record)
    if isinstance(formatter, JsonFormatter):
        entry = json.loads(line)
        assert (entry["request_id"], entry["operation"]) == ("token=***", "password=***")
    else:
        assert 'request_id="token=***" operation="password=***"' in line


def test_configure_logging__libraries_never_log_statements_at_debug():
    configure_logging("debug", "text")
    try:
        assert logging.getLogger("aiosqlite").getEffectiveLevel() == logging.WARNING
        assert logging.getLogger("connector_store").getEffectiveLevel() == logging.DEBUG
    finally:
        configure_logging("info", "text")


@given(
    st.one_of(
        st.none(),
        st.integers(),
        st.text(max_size=40),
        st.text(alphabet=st.sampled_from('ab"\\\t\x7f é'), max_size=8),
        st.floats(allow_nan=False),
    )
)
@example('say "hi"')
@example("a\\b")
@example("tab\there")
def test_quoted__writes_what_json_writes(value):
    assert quoted(value) == json.dumps(value, default=str)


SECRETISH = st.lists(
    st.sampled_from([*"ab :/@=\t-_.", "Bearer ", "basic ", "password", "TOKEN", "://"]),
    max_size=12,
).map("".join)


@given(SECRETISH)
def test_redact__the_precheck_skips_only_what_no_pattern_changes(text):
    full = SECRET_PAIR.sub(
        r"\1=***", CREDENTIAL.sub(r"\1 ***", URL_PASSWORD.sub(r"\g<scheme>\g<user>:***@", text))
    )
    assert redact(text) == full
