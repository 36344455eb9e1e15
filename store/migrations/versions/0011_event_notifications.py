"""Live event streams: PostgreSQL says, at commit, that an event log has grown.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-02 05:10:00

``operationEvents`` and ``watchEvents`` (docs/api.md, 'Live updates') stream the event logs. On
PostgreSQL a statement trigger on each log sends ``NOTIFY kubun_connector_events, '<log
table>'``, delivered at commit (not on rollback) to every replica's listener, once per log
and transaction; the listener then reads the log from where its streams stand
(``store.events``: the log is the truth, the notification a wake-up). SQLite has no
notifications: each server process reads the head of each log while someone streams it
(``server.live``), which covers the writes of every process on the file, so this
revision changes nothing there.
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

LOGS = ("kubun_connector_operation_event", "kubun_connector_watch_event")

POSTGRES_FUNCTION = """
CREATE FUNCTION kubun_connector_logged() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('kubun_connector_events', TG_TABLE_NAME);
    RETURN NULL;
END
$$
"""


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(POSTGRES_FUNCTION)
    for table in LOGS:
        op.execute(
            f"CREATE TRIGGER {table}_logged AFTER INSERT ON {table} FOR EACH STATEMENT "
            "EXECUTE FUNCTION kubun_connector_logged()"
        )


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for table in LOGS:
        op.execute(f"DROP TRIGGER {table}_logged ON {table}")
    op.execute("DROP FUNCTION kubun_connector_logged()")
