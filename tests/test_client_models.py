"""client/connector_store_client/models/ is what ariadne-codegen generates from the client SDL
and the SDK's operations.graphql (client/pyproject.toml's ``[tool.ariadne-codegen]``): a
test regenerates it in a temporary directory and fails when the checked-in copy differs.
ariadne-codegen runs from its own virtual environment (``make codegen``: it needs a
graphql-core older than the server's)."""

import os
import subprocess
import tomllib
from pathlib import Path

import pytest
from connector_store_client import LeasedOperation
from connector_store_client.models.finalize_operations import FinalizeOperations

# A real process (ariadne-codegen): left out of `make test-fast`.
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
CLIENT = ROOT / "client"
MODELS = CLIENT / "connector_store_client" / "models"
CODEGEN = Path(
    os.environ.get("ARIADNE_CODEGEN", ROOT / ".venv-codegen" / "bin" / "ariadne-codegen")
)


def toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return f'"{value}"'


def test_models__match_what_ariadne_codegen_generates(tmp_path):
    assert CODEGEN.exists(), f"no {CODEGEN}: run `make codegen-env`"
    config = tomllib.loads((CLIENT / "pyproject.toml").read_text())["tool"]["ariadne-codegen"]
    settings = {k: v for k, v in config.items() if not isinstance(v, dict)} | {
        "schema_path": str((CLIENT / config["schema_path"]).resolve()),
        "queries_path": str(CLIENT / config["queries_path"]),
        "target_package_path": str(tmp_path),
    }
    lines = ["[tool.ariadne-codegen]"] + [f"{k} = {toml_value(v)}" for k, v in settings.items()]
    for scalar, mapping in config["scalars"].items():
        lines += [f"[tool.ariadne-codegen.scalars.{scalar}]", f'type = "{mapping["type"]}"']
    (tmp_path / "pyproject.toml").write_text("\n".join(lines) + "\n")

    subprocess.run(
        [str(CODEGEN), "client", "--config", str(tmp_path / "pyproject.toml")],
        cwd=tmp_path,
        check=True,
        capture_output=True,
        timeout=120,
    )

    generated = {p.name: p.read_text() for p in (tmp_path / "models").glob("*.py")}
    checked_in = {p.name: p.read_text() for p in MODELS.glob("*.py")}
    assert generated == checked_in, "stale: run `make codegen` and commit client/…/models"


def test_models__parse_a_leased_operation_and_a_settle_answer():
    leased = LeasedOperation.model_validate(
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
            "documentID": None,
            "deterministicEventID": "det-1",
            "payloadHash": "sha256:1",
            "reissueIntent": {"f": 1},
            "providerEtag": None,
            "attempts": 1,
            "version": 2,
            "sendMarker": None,
            "leaseExpiresAt": 1_750_000_030_000,
        }
    )
    settled = FinalizeOperations.model_validate(
        {"finalizeOperations": {"results": [{"applied": False, "operation": None}]}}
    )

    assert leased.key == {"callerDID": "did:key:caller", "operationID": "op-1"}
    assert (leased.deterministic_event_id, leased.lease_expires_at) == ("det-1", 1_750_000_030_000)
    assert settled.finalize_operations.results[0].applied is False


def test_models__an_answer_missing_a_field_is_refused():
    with pytest.raises(ValueError, match="leaseExpiresAt"):
        LeasedOperation.model_validate({"callerDID": "did:key:caller"})
