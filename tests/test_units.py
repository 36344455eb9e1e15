"""Pure functions: names, scalars, ids, settings."""

import pytest

from schema.names import to_graphql_name
from schema.node import decode_cursor, decode_global_id, encode_global_id, encode_opaque
from schema.scalars import parse_epoch_millis
from server.settings import Settings
from store.database import chunked, normalize_url
from store.errors import InvalidInput


@pytest.mark.parametrize(
    ("python", "graphql"),
    [
        ("caller_did", "callerDID"),
        ("operation_id", "operationID"),
        ("document_ids", "documentIDs"),
        ("owner_dids", "ownerDIDs"),
        ("redirect_url", "redirectURL"),
        ("deterministic_event_id", "deterministicEventID"),
        ("node_key", "nodeKey"),
        ("last_http_status", "lastHttpStatus"),
        ("id", "id"),
        ("server_time", "serverTime"),
    ],
)
def test_to_graphql_name(python, graphql):
    assert to_graphql_name(python) == graphql


@pytest.mark.parametrize("value", [0, 1, 4102444800000, 2**53 - 1])
def test_parse_epoch_millis__accepts(value):
    assert parse_epoch_millis(value) == value


@pytest.mark.parametrize("value", [-1, 2**53, 1.0, True, "5", None])
def test_parse_epoch_millis__refuses(value):
    with pytest.raises(ValueError):
        parse_epoch_millis(value)


def test_global_id__round_trips_and_refuses_garbage():
    gid = encode_global_id("Watch", ["a", "b/c", "é", "d", "e"])
    assert decode_global_id(gid) == ("Watch", ["a", "b/c", "é", "d", "e"])
    for garbage in ["", "!!!", "e30", encode_opaque([1, 2]), encode_opaque("x")]:
        assert decode_global_id(garbage) is None
    assert decode_cursor(encode_opaque([1, "a", "b"]), 3) == [1, "a", "b"]
    assert decode_cursor(encode_opaque([1, "a"]), 3) is None


def test_chunked__keeps_order():
    assert [list(c) for c in chunked(list(range(7)), 3)] == [[0, 1, 2], [3, 4, 5], [6]]


def test_normalize_url():
    assert normalize_url("sqlite:///x.db") == "sqlite+aiosqlite:///x.db"
    assert normalize_url("postgres://u@h/db") == "postgresql+asyncpg://u@h/db"
    with pytest.raises(InvalidInput) as refused:
        normalize_url("mysql://x")
    assert refused.value.field == "DATABASE_URL"


def test_settings__default_database_in_data_dir(monkeypatch, tmp_path):
    monkeypatch.delenv("DATABASE_URL", raising=False)
    monkeypatch.setenv("DATA_DIR", str(tmp_path))
    assert Settings().database_url == f"sqlite+aiosqlite:///{tmp_path}/connector-store.db"
