"""Settings reach the store: ``Settings.database`` is the one place the ``DB_*`` settings
become a ``Database``."""

from pathlib import Path

import httpx
import pytest
from pydantic import ValidationError

from server.settings import Settings
from store.retention import MAX_RETAIN_S


def test_database__db_settings_reach_the_database() -> None:
    settings = Settings(
        database_url="postgresql+asyncpg://u@127.0.0.1:5432/db",
        db_pool_size=7,
        db_wait_timeout_seconds=8,
        db_lock_timeout_seconds=1.5,
        db_statement_timeout_seconds=12,
    )
    db = settings.database()
    assert (db.lock_timeout_s, db.statement_timeout_s) == (1.5, 12)


def test_database__lock_timeout_defaults_to_half_the_pool_wait() -> None:
    settings = Settings(database_url="postgresql+asyncpg://u@127.0.0.1:5432/db")
    assert settings.database().lock_timeout_s == settings.db_wait_timeout_seconds / 2
    assert settings.database(wait_timeout_s=4).lock_timeout_s == 2


@pytest.mark.parametrize(
    "setting", ["header_timeout_seconds", "body_timeout_seconds", "db_wait_timeout_seconds"]
)
@pytest.mark.parametrize("value", ["inf", "1e309", "nan"])
def test_settings__a_time_that_switches_a_bound_off_is_refused(setting, value) -> None:
    with pytest.raises(ValidationError, match=setting):
        Settings(**{setting: value})


def test_settings__lock_wait_at_or_past_the_pool_wait_is_refused() -> None:
    with pytest.raises(ValidationError, match="DB_LOCK_TIMEOUT_SECONDS"):
        Settings(db_wait_timeout_seconds=10, db_lock_timeout_seconds=10)


def test_retention__settings_reach_the_sweep(monkeypatch) -> None:
    from server.sweeper import Retention

    day = 24 * 3600
    assert Retention.of(Settings()) == Retention(
        finished_ms=7 * day * 1000,
        failed_ms=30 * day * 1000,
        keys_ms=90 * day * 1000,
        events_ms=30 * day * 1000,
    )
    monkeypatch.setenv("RETAIN_FAILED_SECONDS", "60")
    monkeypatch.setenv("RETAIN_KEYS_SECONDS", "120")
    assert Retention.of(Settings()) == Retention(
        failed_ms=60_000, keys_ms=120_000, events_ms=7 * day * 1000
    )
    monkeypatch.setenv("RETAIN_EVENTS_SECONDS", str(8 * day))
    assert Retention.of(Settings()).events_ms == 8 * day * 1000


def test_settings__events_kept_less_than_an_operation_is_refused(monkeypatch) -> None:
    monkeypatch.setenv("RETAIN_FINISHED_SECONDS", "600")
    monkeypatch.setenv("RETAIN_FAILED_SECONDS", "60")
    monkeypatch.setenv("RETAIN_EVENTS_SECONDS", "599")
    with pytest.raises(ValidationError, match="RETAIN_EVENTS_SECONDS must be at least"):
        Settings()
    monkeypatch.setenv("RETAIN_EVENTS_SECONDS", "600")
    assert Settings().events_retention_seconds == 600


def test_settings__events_kept_0_seconds_are_refused(monkeypatch) -> None:
    """Events kept 0 s would all go at each sweep, a live operation's history included:
    refused whether RETAIN_EVENTS_SECONDS says so or follows two operation retentions of 0."""
    monkeypatch.setenv("RETAIN_FINISHED_SECONDS", "0")
    monkeypatch.setenv("RETAIN_FAILED_SECONDS", "0")
    with pytest.raises(ValidationError, match="RETAIN_EVENTS_SECONDS is unset"):
        Settings()
    monkeypatch.setenv("RETAIN_EVENTS_SECONDS", "0")
    with pytest.raises(ValidationError) as refused:
        Settings()
    assert [error["loc"] for error in refused.value.errors()] == [("retain_events_seconds",)]
    monkeypatch.setenv("RETAIN_EVENTS_SECONDS", "1")
    assert Settings().events_retention_seconds == 1


CLIENT_POOL_IDLE_SECONDS = {"aiohttp": 15, "node": 5, "load balancer": 60}
"""How long common client pools keep an idle connection (aiohttp's keepalive_timeout, Node's
agent keepAliveTimeout, a cloud load balancer's idle timeout); httpx's is read from httpx."""


def test_keepalive_timeout__outlasts_common_client_pools() -> None:
    idle = max([httpx.Limits().keepalive_expiry or 0, *CLIENT_POOL_IDLE_SECONDS.values()])

    assert Settings().keepalive_timeout_seconds > idle


@pytest.mark.parametrize(
    "setting",
    [
        "RETAIN_FINISHED_SECONDS",
        "RETAIN_FAILED_SECONDS",
        "RETAIN_KEYS_SECONDS",
        "RETAIN_EVENTS_SECONDS",
    ],
)
def test_settings__a_retention_past_the_stores_clock_is_refused_naming_it(
    monkeypatch, setting
) -> None:
    """A retention whose ms the store cannot compare with its times is refused when the
    settings are read, naming the setting (not a store field the sweep would name later)."""
    for name in ("RETAIN_FINISHED_SECONDS", "RETAIN_FAILED_SECONDS", "RETAIN_EVENTS_SECONDS"):
        monkeypatch.setenv(name, str(MAX_RETAIN_S))
    assert Settings().events_retention_seconds == MAX_RETAIN_S
    monkeypatch.setenv(setting, str(MAX_RETAIN_S + 1))
    with pytest.raises(ValidationError) as refused:
        Settings()
    assert [error["loc"] for error in refused.value.errors()] == [(setting.lower(),)]


def test_configuration_doc__states_the_longest_retention() -> None:
    configuration = (Path(__file__).parent.parent / "docs" / "configuration.md").read_text()
    assert f"is at most {MAX_RETAIN_S:,}" in configuration
