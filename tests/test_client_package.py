"""The client SDK's parts that need no server: its documents against the client SDL, its
provider retry policy, its typed errors, and that it imports nothing of the server."""

import ast
import re
import sys
import tomllib
from pathlib import Path

import pytest
from connector_store_client import (
    EventsCollected,
    Failed,
    GraphQLResponseError,
    ProviderRetryPolicy,
    RetryAfter,
)
from connector_store_client import documents as doc
from connector_store_client.errors import error_for
from connector_store_client.outcomes import retry_after_ms
from graphql import OperationDefinitionNode, build_schema, parse, validate

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "client" / "connector_store_client"
CLIENT_SDL = ROOT / "graphql" / "client-schema.graphql"
CLIENT_DEPENDENCIES = {"httpx", "websockets", "pydantic", "pydantic_core", "connector_store_client"}


@pytest.mark.parametrize("name", sorted(doc.ALL))
def test_documents__one_operation_each_valid_against_the_client_sdl(name):
    document = parse(doc.ALL[name])
    operations = [d for d in document.definitions if isinstance(d, OperationDefinitionNode)]

    assert [operation.name.value for operation in operations if operation.name] == [name]
    assert validate(build_schema(CLIENT_SDL.read_text()), document) == []


def test_documents__leased_operations_carry_the_idempotency_key():
    assert "deterministicEventID" in doc.LEASE_OPERATIONS


PYTEST_PLUGIN = PACKAGE / "pytest_plugin.py"
"""The one module that imports pytest: pytest loads it, for a test suite that has pytest."""


def test_package__imports_only_its_dependencies_and_the_standard_library():
    imported = set()
    for path in PACKAGE.rglob("*.py"):
        if path == PYTEST_PLUGIN:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imported |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                imported.add(node.module.split(".")[0])

    assert imported - set(sys.stdlib_module_names) <= CLIENT_DEPENDENCIES
    plugin = {
        node.module.split(".")[0] if isinstance(node, ast.ImportFrom) and node.module else ""
        for node in ast.walk(ast.parse(PYTEST_PLUGIN.read_text()))
        if isinstance(node, ast.ImportFrom)
    } | {
        alias.name.split(".")[0]
        for node in ast.walk(ast.parse(PYTEST_PLUGIN.read_text()))
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    assert plugin - set(sys.stdlib_module_names) <= CLIENT_DEPENDENCIES | {"pytest"}


POLICY = ProviderRetryPolicy(base_ms=1_000, max_ms=8_000, max_attempts=4)


def test_policy__429_retries_after_its_retry_after_and_throttles_the_account():
    outcome = POLICY.outcome(429, attempts=0, retry_after="7")

    assert outcome == RetryAfter(7_000, "rate_limited", 429, None, throttle_account=True)


def test_policy__429_with_an_http_date_counts_from_now():
    assert retry_after_ms("Thu, 01 Jan 2026 00:00:30 GMT", now_s=1767225600) == 30_000
    assert retry_after_ms("Thu, 01 Jan 2026 00:00:30 GMT", now_s=1767225700) == 0
    assert retry_after_ms("soon") is None


@pytest.mark.parametrize("status", [408, 500, 502, 503])
def test_policy__timeouts_and_5xx_retry_with_backoff_within_bounds(status):
    for attempts in range(3):
        outcome = POLICY.outcome(status, attempts=attempts)
        assert isinstance(outcome, RetryAfter) and outcome.kind == "transient"
        assert 1_000 <= outcome.delay_ms <= min(8_000, 1_000 * 2**attempts)
        assert not outcome.throttle_account


@pytest.mark.parametrize("status", [400, 401, 403, 404, 409, 422])
def test_policy__other_4xx_fail(status):
    assert POLICY.outcome(status, attempts=0, message="no") == Failed("permanent", status, "no")


def test_policy__a_retryable_answer_past_max_attempts_fails():
    assert POLICY.outcome(503, attempts=3) == Failed("exhausted", 503, None)
    assert POLICY.outcome(200, attempts=0) is None


def test_errors__typed_by_extensions_code():
    collected = error_for([{"message": "gone", "extensions": {"code": "EVENTS_COLLECTED"}}])
    conflict = error_for([{"message": "lost", "extensions": {"code": "CONFLICT"}}])
    refused = error_for(
        [{"message": "bad", "extensions": {"code": "BAD_USER_INPUT", "field": "leaseMs"}}]
    )

    assert isinstance(collected, EventsCollected)
    assert isinstance(conflict, GraphQLResponseError) and conflict.repeatable
    assert (refused.code, refused.field, refused.repeatable) == ("BAD_USER_INPUT", "leaseMs", False)


def imported_modules(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    return names - set(sys.stdlib_module_names)


def test_readme_install__make_run_installs_what_the_sdk_example_imports():
    """The README's install step (`make run`, the runtime) installs the client, and the
    client's own dependencies cover what it and examples/sdk_worker.py import."""
    makefile = (ROOT / "Makefile").read_text()
    runtime = makefile.split("$(VENV)/.runtime:", 1)[1].split("\n\n", 1)[0]
    client = tomllib.loads((ROOT / "client" / "pyproject.toml").read_text())["project"]
    declared = {re.split(r"[<>=!\[ ]", name, maxsplit=1)[0] for name in client["dependencies"]}

    assert "-e ./client" in runtime
    assert imported_modules(ROOT / "examples" / "sdk_worker.py") == {"connector_store_client"}
    assert CLIENT_DEPENDENCIES - {"pydantic_core", "connector_store_client"} == declared
