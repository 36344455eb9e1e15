"""The indexes of the dashboard's counts (``store.counts``).

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-01 17:30:00

Each count of the overview is an index-only scan over one of these: operations by
connector, account and state; the live operations of each account with the columns that
decide due and in flight (partial: the backlog only); watches by connector and status.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

OPERATION = "kubun_connector_operation"
WATCH = "kubun_connector_projection_watch"
LIVE = "state = 'attempted'"


def upgrade() -> None:
    op.create_index(
        "kubun_connector_operation_account_state_idx",
        OPERATION,
        ["connector_name", "account_key", "state"],
    )
    op.create_index(
        "kubun_connector_operation_live_account_idx",
        OPERATION,
        ["connector_name", "account_key", "next_attempt_at", "lease_expires_at", "lease_token"],
        postgresql_where=sa.text(LIVE),
        sqlite_where=sa.text(LIVE),
    )
    op.create_index(
        "kubun_connector_projection_watch_status_idx",
        WATCH,
        ["connector_name", "verification_status"],
    )


def downgrade() -> None:
    op.drop_index("kubun_connector_projection_watch_status_idx", table_name=WATCH)
    op.drop_index("kubun_connector_operation_live_account_idx", table_name=OPERATION)
    op.drop_index("kubun_connector_operation_account_state_idx", table_name=OPERATION)
