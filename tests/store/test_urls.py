"""store/urls.py: the one URL parser."""

from pathlib import Path

import pytest

from store.database import Database
from store.errors import InvalidInput
from store.urls import SSL_MODES, normalize_url, parse_url, sqlite_path


def test_parse_url__percent_encoded_sqlite_path_names_one_file():
    url = "sqlite+aiosqlite:////tmp/x/my%20dir/x.db"
    assert sqlite_path(url) == Path("/tmp/x/my dir/x.db")
    assert (
        normalize_url("sqlite:////tmp/x/my%20dir/x.db") == "sqlite+aiosqlite:////tmp/x/my dir/x.db"
    )


@pytest.mark.parametrize(
    "url",
    [
        "sqlite+aiosqlite:///:memory:",
        "sqlite+aiosqlite://",
        "sqlite:///file::memory:?cache=shared",
        "sqlite+aiosqlite:///x.db?mode=memory",
    ],
)
def test_parse_url__in_memory_sqlite_refused(url):
    with pytest.raises(InvalidInput) as raised:
        Database(url)
    assert raised.value.field == "DATABASE_URL"
    assert "in-memory" in raised.value.problem


def test_parse_url__libpq_sslmode_is_asyncpg_ssl():
    url = normalize_url("postgresql://u@h/db?sslmode=require")
    assert url == "postgresql+asyncpg://u@h/db?ssl=require"


@pytest.mark.parametrize(
    "url",
    [
        "mysql://u@h/db",
        "not a url",
        "redis://h",
        "postgresql://u@h:notaport/db",
        "postgresql://u@h:99999/db",
        "postgresql://u@h:0/db",
        "postgresql://u@h/db?bogus=1",
        "sqlite:///x.db?mode=ro",
    ],
)
def test_parse_url__unsupported_scheme_refused(url):
    with pytest.raises(InvalidInput) as raised:
        parse_url(url)
    assert raised.value.field == "DATABASE_URL"


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://u@h/db?sslmode=bogus",
        "postgresql+asyncpg://u@h/db?ssl=true",
        "postgresql://u@h/db?ssl=require&ssl=disable",
    ],
)
def test_parse_url__an_ssl_mode_asyncpg_does_not_take_is_refused(url):
    """Refused when parsed, naming DATABASE_URL: asyncpg would refuse it only on connecting,
    from wherever the first connection is made."""
    with pytest.raises(InvalidInput) as raised:
        parse_url(url)
    assert raised.value.field == "DATABASE_URL"
    assert "verify-full" in raised.value.problem


def test_parse_url__every_ssl_mode_is_taken():
    for mode in SSL_MODES:
        assert parse_url(f"postgresql://u@h/db?sslmode={mode}").query == {"ssl": mode}
