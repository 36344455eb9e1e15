"""The ``connector-store`` command: ``serve`` (migrate, then run uvicorn), ``migrate`` and
``collect`` (a retention backlog, with a progress bar)."""

import asyncio
import logging

import typer
import uvicorn
from sqlalchemy.engine import make_url

from server.settings import Settings
from store.migrate import upgrade

cli = typer.Typer(help="Connector write-back store: GraphQL API server.", no_args_is_help=True)


def shown(url: str) -> str:
    """``url`` with its password hidden, for logs."""
    return make_url(url).render_as_string(hide_password=True)


@cli.command()
def serve(
    host: str | None = typer.Option(None, help="Interface to bind (env HOST)."),
    port: int | None = typer.Option(None, help="Port to bind (env PORT, default 8000)."),
    migrate: bool = typer.Option(True, help="Apply migrations before serving."),
) -> None:
    """Serve the API (GraphiQL at /graphql) on DATABASE_URL, migrating it first."""
    from server.app import create_app

    settings = Settings()
    if migrate:
        upgrade(settings.database_url)
    typer.echo(f"database: {shown(settings.database_url)}")
    uvicorn.run(
        create_app(settings),
        host=host or settings.host,
        port=settings.port if port is None else port,
        log_level=settings.log_level,
    )


@cli.command("migrate")
def migrate_command() -> None:
    """Apply every pending migration to DATABASE_URL."""
    settings = Settings()
    upgrade(settings.database_url)
    typer.echo(f"migrated {shown(settings.database_url)}")


@cli.command("collect")
def collect_command(
    older_than_seconds: int | None = typer.Option(
        None,
        min=0,
        help="Collect finished operations last updated longer ago than this "
        "(default RETAIN_FINISHED_SECONDS).",
    ),
    batch: int | None = typer.Option(
        None, min=1, max=10_000, help="Operations deleted per statement (default SWEEP_BATCH)."
    ),
) -> None:
    """Delete every finished operation older than the retention, in batches, with a progress
    bar, and expired pending authorizations; prints the totals."""
    settings = Settings()
    retain_ms = 1000 * (
        settings.retain_finished_seconds if older_than_seconds is None else older_than_seconds
    )
    asyncio.run(collect_backlog(settings, retain_ms, batch or settings.sweep_batch))


async def collect_backlog(settings: Settings, retain_ms: int, batch: int) -> None:
    """``collect``'s work: count the backlog, then collect it batch by batch."""
    from store import ConnectorStore
    from store.database import Database

    db = Database(settings.database_url, pool_size=2)
    await db.connect()
    try:
        store = ConnectorStore(db)
        now = store.clock()
        older_than = max(now - retain_ms, 0)
        backlog = await store.retention.count_finished_operations(older_than)
        total = 0
        with typer.progressbar(length=backlog, label="collecting finished operations") as bar:
            while True:
                deleted = await store.retention.collect_finished_operations(older_than, batch)
                total += deleted
                bar.update(deleted)
                if deleted < batch:
                    break
        expired = await store.pending_auth.delete_expired_pending_auth(now)
    finally:
        await db.disconnect()
    typer.echo(f"collected {total} finished operations, {expired} expired pending auth")


@cli.command("schema")
def schema_command() -> None:
    """Print the schema's SDL (the contents of graphql/schema.graphql)."""
    from server.graph import build_schema

    typer.echo(build_schema().as_str())


def main() -> None:
    """Console-script entry point."""
    logging.basicConfig(level=logging.INFO)
    cli()
