"""The event log of operations and watches, and the last error message of each.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-02 10:00:00

One event per applied write of an operation or a watch (``store.events``), read by row
(``…_row_idx``) and as a log in commit-safe order (``…_log_idx``: ``tx``, then ``id``).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

KEY = sa.Text().with_variant(postgresql.TEXT(collation="C"), "postgresql")
EVENT_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
OPERATION = "kubun_connector_operation"
WATCH = "kubun_connector_projection_watch"
OPERATION_EVENT = "kubun_connector_operation_event"
WATCH_EVENT = "kubun_connector_watch_event"
IDENTITY = ["owner_did", "connector_name", "model", "account_key", "source_id"]


def upgrade() -> None:
    op.add_column(OPERATION, sa.Column("last_error", sa.Text))
    op.add_column(WATCH, sa.Column("last_error", sa.Text))
    op.create_table(
        OPERATION_EVENT,
        sa.Column("id", EVENT_ID, sa.Identity(), primary_key=True),
        sa.Column("tx", sa.BigInteger, nullable=False),
        sa.Column("caller_did", KEY, nullable=False),
        sa.Column("operation_id", KEY, nullable=False),
        sa.Column("at", sa.BigInteger, nullable=False),
        sa.Column("action", sa.Text, nullable=False),
        sa.Column("actor_did", sa.Text),
        sa.Column("to_state", sa.Text, nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("kind", sa.Text),
        sa.Column("http_status", sa.Integer),
        sa.Column("message", sa.Text),
        sqlite_autoincrement=True,
    )
    op.create_index(
        "kubun_connector_operation_event_row_idx",
        OPERATION_EVENT,
        ["caller_did", "operation_id", "id"],
    )
    op.create_index("kubun_connector_operation_event_log_idx", OPERATION_EVENT, ["tx", "id"])
    op.create_table(
        WATCH_EVENT,
        sa.Column("id", EVENT_ID, sa.Identity(), primary_key=True),
        sa.Column("tx", sa.BigInteger, nullable=False),
        *(sa.Column(name, KEY, nullable=False) for name in IDENTITY),
        sa.Column("at", sa.BigInteger, nullable=False),
        sa.Column("action", sa.Text, nullable=False),
        sa.Column("actor_did", sa.Text),
        sa.Column("generation", sa.Integer, nullable=False),
        sa.Column("to_status", sa.Text, nullable=False),
        sa.Column("verification_attempts", sa.Integer, nullable=False),
        sa.Column("message", sa.Text),
        sqlite_autoincrement=True,
    )
    op.create_index("kubun_connector_watch_event_row_idx", WATCH_EVENT, [*IDENTITY, "id"])
    op.create_index("kubun_connector_watch_event_log_idx", WATCH_EVENT, ["tx", "id"])


def downgrade() -> None:
    op.drop_table(WATCH_EVENT)
    op.drop_table(OPERATION_EVENT)
    with op.batch_alter_table(WATCH) as batch:
        batch.drop_column("last_error")
    with op.batch_alter_table(OPERATION) as batch:
        batch.drop_column("last_error")
