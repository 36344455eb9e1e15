"""Settings from the environment (and a ``.env`` file), via pydantic-settings."""

from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from resolvers.budget import DEFAULT_MAX_RESPONSE_BYTES
from store.database import Database
from store.migrate import LOCK_TIMEOUT_S
from store.retention import MAX_RETAIN_S, RETAIN_FAILED_S, RETAIN_FINISHED_S, RETAIN_KEYS_S
from store.urls import MAX_PORT


class Settings(BaseSettings):
    """Every knob of the server; each field reads the environment variable of its name.

    ``DATABASE_URL`` defaults to a SQLite file in ``DATA_DIR`` (``./data``).
    """

    model_config = SettingsConfigDict(env_file=".env", extra="ignore", allow_inf_nan=False)

    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=0, le=MAX_PORT)
    workers: int = Field(
        default=1, ge=1, description="Processes serving the port (``serve --workers``)."
    )
    data_dir: Path = Path("data")
    database_url: str = ""
    db_pool_size: int = Field(default=20, ge=1)
    db_wait_timeout_seconds: float = Field(default=10.0, gt=0)
    db_lock_timeout_seconds: float | None = Field(
        default=None,
        ge=0,
        description="PostgreSQL: the longest a statement waits for a row lock (default: half "
        "of DB_WAIT_TIMEOUT_SECONDS; 0: the role's or database's own setting).",
    )
    db_statement_timeout_seconds: float = Field(
        default=30.0,
        ge=0,
        description="PostgreSQL: the longest one statement runs (0: the role's or database's "
        "own setting).",
    )
    migrate_lock_timeout_seconds: float = Field(
        default=LOCK_TIMEOUT_S,
        gt=0,
        description="The longest a migration (migrate, serve) waits for each lock another "
        "process holds (another migration's, a table's, SQLite's write lock), saying what it "
        "waits on; past it the migration gives up and the command exits 1.",
    )
    graphiql: bool = True
    dashboard: bool = True
    introspection: bool = True
    fast_path: bool = True
    lean_lane: bool = True
    max_query_depth: int = Field(default=12, ge=1)
    max_query_tokens: int = Field(default=5000, ge=1)
    max_query_fields: int = Field(default=500, ge=1)
    max_aliases: int = Field(default=30, ge=1)
    max_body_bytes: int = Field(default=4 * 1024 * 1024, ge=1024)
    max_response_bytes: int = Field(
        default=DEFAULT_MAX_RESPONSE_BYTES,
        ge=64 * 1024,
        description="Bytes of rows one request's lists may load and answer.",
    )
    max_header_bytes: int = Field(
        default=32 * 1024, ge=1024, description="Request line and headers, in bytes."
    )
    header_timeout_seconds: float = Field(
        default=10.0, gt=0, description="Time a request's line and headers may take to arrive."
    )
    body_timeout_seconds: float = Field(
        default=30.0, gt=0, description="Time a request's whole body may take to arrive."
    )
    max_body_framing_bytes: int = Field(
        default=64 * 1024,
        ge=1024,
        description="Bytes a request body's framing (chunk sizes, extensions, trailers) may "
        "add on the wire beyond the body's own.",
    )
    http_parser: Literal["httptools", "h11"] = Field(
        default="httptools",
        description="uvicorn's HTTP/1.1 parser: httptools (C) or h11 (pure Python); "
        "both with every bound above.",
    )
    keepalive_timeout_seconds: int = Field(
        default=75,
        ge=1,
        description="Time an idle connection is kept between requests: longer than a "
        "client pool keeps one idle (httpx 5 s, aiohttp 15 s, Node 5 s, a load balancer's "
        "60 s), so the client closes first and never sends on a socket the server just "
        "closed; MAX_CONNECTIONS closes the idlest when connections run short.",
    )
    max_connections: int = Field(
        default=0,
        ge=0,
        description="Open connections; past it the one idle longest is closed. "
        "0: the file-descriptor limit less a reserve.",
    )
    send_timeout_seconds: float = Field(
        default=30.0,
        gt=0,
        description="Time a client may leave its response, or its WebSocket's messages, unread.",
    )
    shutdown_grace_seconds: float = Field(
        default=10.0, gt=0, description="Time requests in flight get after SIGTERM."
    )
    log_level: Literal["critical", "error", "warning", "info", "debug", "trace"] = "info"
    sweeper: bool = Field(default=True, description="Run the background sweeper (SWEEPER).")
    sweep_interval_seconds: float = Field(default=300.0, gt=0)
    retain_finished_seconds: int = Field(
        default=RETAIN_FINISHED_S,
        ge=0,
        le=MAX_RETAIN_S,
        description="COMMITTED and SUPERSEDED operations are kept this long after their last "
        "update.",
    )
    retain_failed_seconds: int = Field(
        default=RETAIN_FAILED_S,
        ge=0,
        le=MAX_RETAIN_S,
        description="FAILED operations are kept this long after their last update.",
    )
    retain_keys_seconds: int = Field(
        default=RETAIN_KEYS_S,
        ge=0,
        le=MAX_RETAIN_S,
        description="A collected operation's tombstone (its key answers OperationCollected) "
        "is kept this long after its collection.",
    )
    retain_events_seconds: int | None = Field(
        default=None,
        ge=1,
        le=MAX_RETAIN_S,
        description="An event of either log is kept this long after its write; the logs are "
        "collected only as a prefix, oldest first. At least RETAIN_FINISHED_SECONDS and "
        "RETAIN_FAILED_SECONDS, so a kept operation's history is whole; unset: the longer "
        "of the two. Never 0, which would collect a live operation's events at each sweep.",
    )
    sweep_batch: int = Field(default=1000, ge=1, le=10_000)
    db_statement_cache_size: int | None = Field(
        default=None, ge=0, description="asyncpg's statement cache; 0 behind pgbouncer."
    )
    log_format: Literal["text", "json"] = "text"
    metrics: bool = Field(default=True, description="Serve Prometheus metrics (METRICS).")
    metrics_port: int | None = Field(
        default=None, ge=1, le=MAX_PORT, description="Serve /metrics on this port instead."
    )
    metrics_refresh_seconds: float = Field(default=15.0, gt=0)
    otel_exporter_otlp_endpoint: str = ""
    jwt_secret: SecretStr | None = Field(default=None, min_length=32)
    jwt_public_key: str = ""
    jwt_issuer: str = ""
    jwt_audience: str = ""
    jwt_leeway_seconds: float = Field(default=30.0, ge=0)
    sign_in_code_ttl_seconds: int = Field(
        default=600,
        ge=1,
        le=86_400,
        description="How long a sign-in link stays usable (once), in seconds.",
    )
    session_ttl_seconds: int = Field(
        default=900,
        ge=60,
        le=86_400,
        description="How long a person's session token is valid; the page renews it at half.",
    )
    listen_database_url: str = Field(
        default="",
        description="PostgreSQL: where each process LISTENs for wake-ups, on a connection of "
        "its own (a direct one: LISTEN does not work through pgbouncer in transaction mode); "
        "empty: DATABASE_URL.",
    )
    max_subscriptions_per_connection: int = Field(
        default=100, ge=1, description="Subscriptions open on one WebSocket (or HTTP request)."
    )
    max_subscriptions_per_viewer: int = Field(
        default=1000,
        ge=1,
        description="Subscriptions one subject (a sign-in session, else a token's sub) holds "
        "in one process, on each channel: workAvailable, and the event streams.",
    )
    subscription_queue: int = Field(
        default=1000,
        ge=1,
        description="Connector names pending for one workAvailable subscription before its "
        "signals coalesce into one for any connector.",
    )
    wakeup_recheck_ms: int = Field(
        default=1000,
        ge=10,
        le=60_000,
        description="The longest the work timer waits between two looks at the database while "
        "a worker waits (a lease taken meanwhile, which wakes nobody, lapses no sooner).",
    )
    cors_origins: str = Field(
        default="", description="Comma-separated origins allowed by CORS; empty: CORS off."
    )

    @property
    def cors_origin_list(self) -> list[str]:
        """``CORS_ORIGINS`` split on commas."""
        return [origin.strip() for origin in self.cors_origins.split(",") if origin.strip()]

    @property
    def default_database_url(self) -> str:
        """The SQLite file in ``DATA_DIR`` that ``DATABASE_URL`` defaults to."""
        return f"sqlite+aiosqlite:///{self.data_dir / 'connector-store.db'}"

    @model_validator(mode="after")
    def default_database(self) -> "Settings":
        if not self.database_url:
            self.database_url = self.default_database_url
        return self

    @model_validator(mode="after")
    def lock_wait_below_pool_wait(self) -> "Settings":
        """A lock wait past the pool wait would let calls stalled on a peer's lock hold every
        connection while a queued call gives up."""
        if (self.db_lock_timeout_seconds or 0) >= self.db_wait_timeout_seconds:
            raise ValueError(
                "DB_LOCK_TIMEOUT_SECONDS must be below DB_WAIT_TIMEOUT_SECONDS "
                f"({self.db_lock_timeout_seconds} >= {self.db_wait_timeout_seconds})"
            )
        return self

    @property
    def events_retention_seconds(self) -> int:
        """``RETAIN_EVENTS_SECONDS``, or when unset the longest operation retention."""
        longest = max(self.retain_finished_seconds, self.retain_failed_seconds)
        return longest if self.retain_events_seconds is None else self.retain_events_seconds

    @model_validator(mode="after")
    def events_outlive_operations(self) -> "Settings":
        """An event log kept less long than an operation would show a kept operation a
        history without its start; one kept 0 s would lose every event at each sweep, a live
        operation's included."""
        longest = max(self.retain_finished_seconds, self.retain_failed_seconds)
        if self.events_retention_seconds == 0:
            raise ValueError(
                "RETAIN_EVENTS_SECONDS is unset and RETAIN_FINISHED_SECONDS and "
                "RETAIN_FAILED_SECONDS are both 0: events kept 0 s would all go at each sweep, "
                "a live operation's history included; set RETAIN_EVENTS_SECONDS (1 or more)"
            )
        if self.events_retention_seconds < longest:
            raise ValueError(
                "RETAIN_EVENTS_SECONDS must be at least RETAIN_FINISHED_SECONDS and "
                f"RETAIN_FAILED_SECONDS ({self.retain_events_seconds} < {longest})"
            )
        return self

    def database(
        self, pool_size: int | None = None, wait_timeout_s: float | None = None
    ) -> Database:
        """The store's ``Database`` for these settings (not yet connected): ``DATABASE_URL``
        with the pool size, waits and timeouts of the ``DB_*`` settings, or a smaller
        ``pool_size`` / ``wait_timeout_s`` for a command's short use."""
        return Database(
            self.database_url,
            pool_size=pool_size or self.db_pool_size,
            wait_timeout_s=wait_timeout_s or self.db_wait_timeout_seconds,
            lock_timeout_s=self.db_lock_timeout_seconds,
            statement_timeout_s=self.db_statement_timeout_seconds,
            statement_cache_size=self.db_statement_cache_size,
        )
