"""Every error code is spelled once, in ``resolvers/codes.py``: no other module of the server
writes one as a string literal (docstrings that mention a code in a sentence are not one)."""

import ast
from pathlib import Path

from resolvers import codes
from resolvers.codes import CODES

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("server", "resolvers", "schema", "store")


def literal_codes(path: Path) -> list[tuple[int, str]]:
    """The (line, code) of every string literal in ``path`` that is exactly a code."""
    tree = ast.parse(path.read_text(), str(path))
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in CODES
    ]


def test_codes__each_spelled_as_a_literal_only_in_the_codes_module():
    defining = Path(codes.__file__).resolve()
    found = {
        str(path.relative_to(ROOT)): spelled
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        if path.resolve() != defining and (spelled := literal_codes(path))
    }
    assert found == {}


def test_codes__every_code_the_issue_lists_is_defined():
    assert {
        "BAD_USER_INPUT",
        "FORBIDDEN",
        "NOT_FOUND",
        "UNAUTHENTICATED",
        "SERVICE_UNAVAILABLE",
        "CONFLICT",
        "INTERNAL_SERVER_ERROR",
        "BAD_REQUEST",
        "PAYLOAD_TOO_LARGE",
        "METHOD_NOT_ALLOWED",
        "GRAPHQL_PARSE_FAILED",
        "GRAPHQL_VALIDATION_FAILED",
        "OPERATION_RESOLUTION_FAILURE",
        "PERSISTED_QUERY_NOT_FOUND",
    } <= CODES
