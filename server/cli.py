"""The ``connector-store`` command: ``serve`` (migrate, then run uvicorn) and ``migrate``."""

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


@cli.command("schema")
def schema_command() -> None:
    """Print the schema's SDL (the contents of graphql/schema.graphql)."""
    from server.graph import build_schema

    typer.echo(build_schema().as_str())


def main() -> None:
    """Console-script entry point."""
    logging.basicConfig(level=logging.INFO)
    cli()
