"""The ``connector-store`` command: ``serve`` (migrate, then run uvicorn), ``migrate``,
``schema``, ``sql`` (write the statements' SQL files), ``collect`` (a retention backlog,
with a progress bar), ``token`` (mint a JWT for this server's settings) and ``sign-in-link``
(a one-time link that signs a browser in to the dashboard or GraphiQL: ``server.sessions``).

Mistakes in the configuration or an unusable database end the command with one line on
standard error that says what is wrong and how to fix it, and exit status 1; never a
traceback.
"""

import asyncio
import sys
from pathlib import Path
from typing import Any, NoReturn
from urllib.parse import urlsplit

import typer
from pydantic import ValidationError

from resolvers.permissions import ALL_SCOPES, METRICS_SCOPE, Viewer
from server.auth import Authenticator, AuthError, authenticator
from server.http_server import PortUnavailable, check_port, serve_http
from server.logs import configure_logging, redact
from server.sessions import ADMIN_SCOPE, sign_in_link
from server.settings import Settings
from server.sweeper import Retention, cutoffs, sweep
from server.workers import WorkersFailing, reuse_port_socket, supervise
from store import ConnectorStore
from store import validation as check
from store.database import shown_url, sqlite_path
from store.errors import DatabaseBusy, DatabaseUnavailable, InvalidInput, StoreError
from store.migrate import upgrade
from store.retention import MAX_RETAIN_S
from store.sign_in import OWN_SUBJECT
from store.tables import metadata

cli = typer.Typer(
    help="Connector write-back store: GraphQL API server.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)


def announce_migration(current: str | None, head: str | None) -> None:
    """Say what ``migrate`` is about to do, once the migration lock is held."""
    if current is None:
        tables = ", ".join(sorted(metadata.tables))
        typer.echo(f"new database: creating the store's tables ({tables}) at revision {head}")
    elif current != head:
        typer.echo(f"migrating from revision {current} to {head}")
    else:
        typer.echo(f"already at revision {head}: nothing to migrate")


def require_database_folder(settings: Settings) -> None:
    """Refuse an explicit SQLite ``DATABASE_URL`` whose folder does not exist (a typo would
    otherwise give a new, empty store); the default file's folder, ``DATA_DIR``, is made."""
    if settings.database_url == settings.default_database_url:
        return
    path = sqlite_path(settings.database_url)
    if path is not None and not path.parent.is_dir():
        fail(f"DATABASE_URL: the folder {path.parent} does not exist; create it or fix the path")


async def check_database(settings: Settings) -> None:
    """Connect to the configured database once; raises ``DatabaseUnavailable`` if it fails."""
    db = settings.database(pool_size=1, wait_timeout_s=5)
    await db.connect()
    await db.disconnect()


@cli.command()
def serve(
    host: str | None = typer.Option(None, help="Interface to bind (env HOST)."),
    port: int | None = typer.Option(None, help="Port to bind (env PORT, default 8000)."),
    migrate: bool = typer.Option(True, help="Apply migrations before serving."),
    workers: int | None = typer.Option(
        None, help="Processes serving the port (env WORKERS, default 1)."
    ),
) -> None:
    """Serve the API (GraphiQL at /graphql, the dashboard at /ui) on DATABASE_URL, migrating
    it first; print a one-time sign-in link for them (an admin's: scope service, a subject
    of its own) only on a development server's terminal (``link_withheld``), else say how to
    get one; with --workers N, in N processes (server/workers.py). --port
    and --workers stand for PORT and WORKERS and are checked as they are: a bad value is a
    bad setting."""
    from server.app import create_app

    flags: dict[str, Any] = {"port": port, "workers": workers}
    settings = Settings(**{name: value for name, value in flags.items() if value is not None})
    processes = settings.workers
    if processes > 1 and settings.metrics and settings.metrics_port is not None:
        fail(
            "--workers: METRICS_PORT is served by one process; unset it (the API port serves "
            "/metrics, summed over the workers)"
        )
    configure_logging(settings.log_level, settings.log_format)
    bind_host = host or settings.host
    bind_port = settings.port
    if not settings.jwt_secret and not settings.jwt_public_key and not is_loopback(bind_host):
        raise AuthError(
            f"serving on {bind_host} needs JWT_SECRET or JWT_PUBLIC_KEY (a generated secret "
            "is for a server on this machine only)"
        )
    check_port(bind_host, bind_port, "PORT")
    if settings.metrics and settings.metrics_port is not None:
        if settings.metrics_port == bind_port:
            raise PortUnavailable(
                f"METRICS_PORT: {bind_port} is the API's port too; unset METRICS_PORT to serve "
                "/metrics on it, or choose another"
            )
        check_port(settings.host, settings.metrics_port, "METRICS_PORT")
    require_database_folder(settings)
    auth = authenticator(settings)
    if migrate:
        upgrade(
            settings.database_url,
            announce=announce_migration,
            lock_timeout_s=settings.migrate_lock_timeout_seconds,
            connect_timeout_s=settings.db_wait_timeout_seconds,
        )
    asyncio.run(check_database(settings))
    typer.echo(f"database: {shown_url(settings.database_url)}")
    base = base_url(bind_host, bind_port)
    typer.echo(f"GraphiQL: {base}/graphql  dashboard: {base}/ui")
    announce_sign_in(settings, auth, base)
    if processes > 1:
        raise typer.Exit(supervise(settings, bind_host, bind_port, processes))
    serve_http(create_app(settings, auth=auth), settings, bind_host, bind_port)


@cli.command("serve-worker", hidden=True)
def serve_worker(
    host: str = typer.Option(..., help="Interface the supervisor serves."),
    port: int = typer.Option(..., help="Port the supervisor serves."),
) -> None:
    """One worker of ``serve --workers``: the API on the supervisor's port, beside the other
    workers (``SO_REUSEPORT``), without migrating or printing anything."""
    from server.app import create_app

    settings = Settings()
    configure_logging(settings.log_level, settings.log_format)
    app = create_app(settings, auth=authenticator(settings))
    serve_http(app, settings, host, port, sockets=[reuse_port_socket(host, port)])


def announce_sign_in(settings: Settings, auth: Authenticator, base: str) -> None:
    """Say how people sign in to the server at ``base``: with a one-time link (an admin's,
    a subject of its own) printed here when ``link_withheld`` allows, else with one
    ``connector-store sign-in-link`` prints; with ``JWT_PUBLIC_KEY``, with a token."""
    if not auth.signs:
        typer.echo(
            "auth: tokens signed by the configured JWT key are required (JWT_PUBLIC_KEY: "
            "this server signs no sessions, so no sign-in links)"
        )
        return
    withheld = link_withheld(settings, auth)
    if withheld is not None:
        typer.echo(
            "sign in: `connector-store sign-in-link` prints a one-time link where the server "
            f"runs (none is printed here: {withheld})"
        )
        return
    code = asyncio.run(issue_code(settings, None, ADMIN_SCOPE))
    typer.echo(
        f"sign in (admin; the link works once, within {minutes(settings)}; "
        "`connector-store sign-in-link` prints another):\n"
        f"  {sign_in_link(base, code)}\n"
        f"  (GraphiQL: {sign_in_link(base, code, '/graphql')})"
    )


def link_withheld(settings: Settings, auth: Authenticator) -> str | None:
    """Why ``serve`` prints no sign-in link as it starts (None: it prints one). It prints one
    only for a person at the terminal of a development server: the secret is the one the
    server made in ``DATA_DIR`` (a configured ``JWT_SECRET`` is a deployment's), the log is
    text (``LOG_FORMAT=json`` is a collector's) and standard output is a terminal (a
    journal, a container's log or a file reads a pipe or a file, and keeps it)."""
    if not auth.generated:
        return "JWT_SECRET is set, as a deployment's is"
    if settings.log_format == "json":
        return "LOG_FORMAT=json, a log collector's format"
    if not sys.stdout.isatty():
        return "standard output is not a terminal, and a log may keep it"
    return None


def is_loopback(host: str) -> bool:
    """True for an address only this machine reaches."""
    return host in ("localhost", "::1") or host.startswith("127.")


def base_url(host: str, port: int) -> str:
    """The URL a browser on this machine reaches the server at (``http://host:port``)."""
    shown = {"0.0.0.0": "127.0.0.1", "::": "[::1]", "": "127.0.0.1"}.get(host, host)
    if ":" in shown and not shown.startswith("["):
        shown = f"[{shown}]"
    return f"http://{shown}:{port}"


def minutes(settings: Settings) -> str:
    """``SIGN_IN_CODE_TTL_SECONDS`` as a person reads it: ``10 min``, ``45 s``."""
    seconds = settings.sign_in_code_ttl_seconds
    return f"{seconds // 60} min" if seconds % 60 == 0 else f"{seconds} s"


async def issue_code(settings: Settings, sub: str | None, scope: str) -> str:
    """A new sign-in code for ``sub`` (None: the session's own subject) with ``scope``, good
    for ``SIGN_IN_CODE_TTL_SECONDS``,
    written to the configured database (every server process on it accepts it)."""
    db = settings.database(pool_size=1)
    await db.connect()
    try:
        store = ConnectorStore(db)
        issued = await store.sign_in.issue_code(
            sub, scope, settings.sign_in_code_ttl_seconds * 1000
        )
    finally:
        await db.disconnect()
    return issued.code


def checked_scopes(sub: str | None, scope: str) -> list[str]:
    """``scope``'s rights, once ``sub`` (a DID; None: a sign-in's own subject) and they are
    checked: an empty or over-long ``--sub``, a scope the server does not know, and no
    ``--sub`` for rights that read only the viewer's own rows (a tenant's) end the command
    (``fail``)."""
    if sub is not None and not sub.strip():
        fail("--sub is empty: give the viewer's DID")
    try:
        if sub is not None:
            check.key("sub", sub)
    except InvalidInput as error:
        fail(f"--sub: {error}")
    scopes = scope.split()
    unknown = sorted(set(scopes) - KNOWN_SCOPES)
    if not scopes or unknown:
        fail(
            f"--scope: unknown {' '.join(unknown) or '(none given)'}; "
            f"known: {' '.join(sorted(KNOWN_SCOPES))}"
        )
    if sub is None and not Viewer.of_token(OWN_SUBJECT, scope).reads_all:
        fail(
            f"--sub: {scope!r} reads only the viewer's own rows: give the person's DID "
            "(the rows they own are theirs by it)"
        )
    return scopes


@cli.command("token")
def token_command(
    sub: str = typer.Option(..., help="The viewer's DID (the token's sub)."),
    scope: str = typer.Option(
        ..., help='Space-separated rights, e.g. "operations:read operations:write".'
    ),
    ttl: int = typer.Option(3600, min=1, help="Seconds the token stays valid."),
) -> None:
    """Print a token for SUB with SCOPE, signed with this server's JWT secret (JWT_SECRET,
    or the secret the server made in DATA_DIR: never a new one). An empty SUB or a scope
    the server does not know is refused."""
    scopes = checked_scopes(sub, scope)
    settings = Settings()
    typer.echo(authenticator(settings, create_secret=False).mint(sub, scopes, ttl))


PAGES = {"ui": "/ui", "graphiql": "/graphql"}


@cli.command("sign-in-link")
def sign_in_link_command(
    sub: str | None = typer.Option(
        None,
        help="The person's DID (the session token's sub; default: a subject of the session's "
        "own, session:<id>, which reads every row only with operator, observer or service).",
    ),
    scope: str = typer.Option(
        ADMIN_SCOPE, help='Space-separated rights, e.g. "operator" (default: service, an admin).'
    ),
    page: str = typer.Option("ui", help="The page the link opens: ui (the dashboard) or graphiql."),
    url: str | None = typer.Option(
        None,
        "--url",
        help="The server's address as the browser reaches it (default http://HOST:PORT).",
    ),
) -> None:
    """Print a fresh one-time sign-in link (alone on the last line) to the dashboard or
    GraphiQL of the server on DATABASE_URL, for SUB (default: a subject of the session's
    own) with SCOPE: it works once, within
    SIGN_IN_CODE_TTL_SECONDS; its code is in the URL's fragment, which no server logs. Needs
    the server's settings (DATABASE_URL, and JWT_SECRET or the secret in DATA_DIR)."""
    scopes = checked_scopes(sub, scope)
    if page not in PAGES:
        fail(f"--page: {page!r} is not one of {', '.join(PAGES)}")
    if url is not None and urlsplit(url).scheme not in ("http", "https"):
        fail(f"--url: {url!r} is not an http:// or https:// address")
    settings = Settings()
    require_database_folder(settings)
    if not authenticator(settings, create_secret=False).signs:
        fail("JWT_PUBLIC_KEY is set: this server signs no sessions; sign in with a token")
    code = asyncio.run(issue_code(settings, sub, " ".join(scopes)))
    typer.echo(f"works once, within {minutes(settings)}:", err=True)
    typer.echo(sign_in_link(url or base_url(settings.host, settings.port), code, PAGES[page]))


@cli.command("migrate")
def migrate_command() -> None:
    """Apply every pending migration to DATABASE_URL."""
    settings = Settings()
    configure_logging(settings.log_level, settings.log_format)
    require_database_folder(settings)
    changed: list[bool] = []

    def announce(current: str | None, head: str | None) -> None:
        changed.append(current != head)
        announce_migration(current, head)

    upgrade(
        settings.database_url,
        announce=announce,
        lock_timeout_s=settings.migrate_lock_timeout_seconds,
        connect_timeout_s=settings.db_wait_timeout_seconds,
    )
    if any(changed):
        typer.echo(f"migrated {shown_url(settings.database_url)}")


@cli.command("collect")
def collect_command(
    older_than_seconds: int | None = typer.Option(
        None,
        min=0,
        max=MAX_RETAIN_S,
        help="Collect committed and superseded operations last updated longer ago than this "
        "(default RETAIN_FINISHED_SECONDS; at most RETAIN_EVENTS_SECONDS when that is set).",
    ),
    failed_older_than_seconds: int | None = typer.Option(
        None,
        min=0,
        max=MAX_RETAIN_S,
        help="Collect failed operations last updated longer ago than this "
        "(default RETAIN_FAILED_SECONDS; at most RETAIN_EVENTS_SECONDS when that is set).",
    ),
    batch: int | None = typer.Option(
        None, min=1, max=10_000, help="Operations deleted per statement (default SWEEP_BATCH)."
    ),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="Count what would be collected; delete nothing."
    ),
) -> None:
    """Delete every finished operation older than its retention (failed ones are kept
    longer), in batches, with a progress bar, the tombstones of collected keys older than
    RETAIN_KEYS_SECONDS, the events of both logs older than RETAIN_EVENTS_SECONDS (as a
    prefix of each log; the flags never shorten it), and expired pending authorizations, by
    the sweeper's own sweep (and its lock); prints the totals. With --dry-run, prints what
    would go."""
    settings = Settings()
    require_database_folder(settings)
    retention = Retention.of(flagged(settings, older_than_seconds, failed_older_than_seconds))
    asyncio.run(collect_backlog(settings, retention, batch or settings.sweep_batch, dry_run))


def flagged(
    settings: Settings, older_than_seconds: int | None, failed_older_than_seconds: int | None
) -> Settings:
    """``settings`` with ``collect``'s flags in place of ``RETAIN_FINISHED_SECONDS`` and
    ``RETAIN_FAILED_SECONDS`` (None: the setting's), and the events' retention fixed: the
    flags only ever lengthen it. ``RETAIN_EVENTS_SECONDS`` set, a flag past it ends the
    command (``fail``); unset, the events are kept as long as the environment's longest
    operation retention, or a flag's when that is longer. A shorter flag collects finished
    operations sooner, never the history of the operations it keeps (live ones included)."""
    overrides = {
        "--older-than-seconds": ("retain_finished_seconds", older_than_seconds),
        "--failed-older-than-seconds": ("retain_failed_seconds", failed_older_than_seconds),
    }
    events = settings.retain_events_seconds
    longest = settings.events_retention_seconds
    for flag, (setting, seconds) in overrides.items():
        if seconds is None:
            continue
        if events is not None and seconds > events:
            fail(
                f"{flag} must be at most RETAIN_EVENTS_SECONDS ({seconds} > {events}): an "
                "operation kept longer than the events would keep a history without its start"
            )
        longest = max(longest, seconds)
        settings = settings.model_copy(update={setting: seconds})
    return settings.model_copy(update={"retain_events_seconds": longest})


async def collect_backlog(
    settings: Settings, retention: Retention, batch: int, dry_run: bool
) -> None:
    """``collect``'s work: count the backlog, then sweep it (``server.sweeper.sweep``) with a
    progress bar, or only count it."""
    db = settings.database(pool_size=2)
    await db.connect()
    try:
        store = ConnectorStore(db)
        now = store.clock()
        older_than, failed_older_than, keys_cutoff = cutoffs(retention, now)
        backlog = await store.retention.count_finished_operations(
            older_than, failed_older_than=failed_older_than
        )
        if dry_run:
            expired = await store.retention.count_expired_pending_auth(now)
            tombstones = await store.retention.count_expired_tombstones(keys_cutoff)
            events = store.events
            operation_events = await events.count_collectable_operation_events(retention.events_ms)
            watch_events = await events.count_collectable_watch_events(retention.events_ms)
            typer.echo(
                f"would collect {backlog} finished operations, {expired} expired pending auth, "
                f"{tombstones} expired tombstones, {operation_events} operation events, "
                f"{watch_events} watch events (dry run: nothing deleted)"
            )
            return
        with typer.progressbar(length=backlog, label="collecting finished operations") as bar:
            result = await sweep(store, retention=retention, batch=batch, on_batch=bar.update)
    finally:
        await db.disconnect()
    if result is None:
        fail("another process is sweeping (a server's sweeper holds the lock): try again later")
    typer.echo(
        f"collected {result.operations} finished operations, "
        f"{result.pending_auth} expired pending auth, {result.tombstones} expired tombstones, "
        f"{result.operation_events} operation events, {result.watch_events} watch events"
    )


@cli.command("schema")
def schema_command(
    client: bool = typer.Option(
        False,
        "--client",
        help="Print the client SDL: no Federation directives, for clients' tools "
        "(the contents of graphql/client-schema.graphql).",
    ),
) -> None:
    """Print the schema's SDL (the contents of graphql/schema.graphql), or with --client the
    client SDL (graphql/client-schema.graphql)."""
    from server.client_sdl import client_sdl
    from server.graph import build_schema

    printed = build_schema().as_str()
    typer.echo(client_sdl(printed) if client else printed, nl=not client)


@cli.command("documents")
def documents_command() -> None:
    """Write each operation of graphql/operations/*.graphql as its own document,
    graphql/documents/<OperationName>.graphql, with the fragments it spreads (for clients
    that take one operation a document, as Apollo Client does), from the checkout in the
    current directory; print each file written or deleted (``make schema``)."""
    from server.single_documents import write

    for path in write(Path("graphql/operations"), Path("graphql/documents")):
        typer.echo(path)


@cli.command("sql")
def sql_command() -> None:
    """Write every named statement's SQL, per backend, under store/sql (``make sql``); print
    each file written or deleted."""
    from store import sql_text

    for path in sql_text.write():
        typer.echo(path)


SECRET_SETTINGS = frozenset({"JWT_SECRET"})
KNOWN_SCOPES = ALL_SCOPES | {METRICS_SCOPE}


def settings_problem(error: ValidationError) -> str:
    """One line per bad setting, named by its environment variable, with the value it got
    (``redact``ed: a URL's password never shown) unless it is a secret. A check of several
    settings together names them in its message and shows no value: its input is every
    setting, secrets included."""
    lines = []
    for problem in error.errors():
        variable = "_".join(str(part) for part in problem["loc"]).upper()
        if not variable:
            lines.append(f"settings: {problem['msg']}")
            continue
        shown = "hidden" if variable in SECRET_SETTINGS else redact(repr(problem.get("input")))
        lines.append(f"{variable}: {problem['msg']} (got {shown})")
    return "; ".join(lines)


def main() -> None:
    """Console-script entry point: runs the command, turning configuration and database
    errors into one line on standard error and exit status 1. Logs (alembic's included)
    go through ``configure_logging``'s one format."""
    configure_logging()
    try:
        cli()
    except ValidationError as error:
        fail(f"bad setting: {settings_problem(error)}")
    except (InvalidInput, AuthError) as error:
        fail(f"bad setting: {error}")
    except (PortUnavailable, WorkersFailing) as error:
        fail(str(error))
    except DatabaseBusy as error:
        fail(str(error))
    except DatabaseUnavailable as error:
        fail(f"{error}\n  check DATABASE_URL, that the database exists and that its server runs")
    except StoreError as error:
        fail(str(error))


def fail(message: str) -> NoReturn:
    """Print ``error: message`` (``redact``ed) on standard error and exit with status 1."""
    typer.echo(f"error: {redact(message)}", err=True)
    sys.exit(1)
