"""The operations' event log by time, for the dashboard's charts.

Revision ID: 0017_stats_event_at
Revises: 0016
Create Date: 2026-12-06 08:20:00

``operationStats`` counts the claims and outcomes of a time window (``store.stats``). The log
was indexed by position and by row only, so a window read the whole log. The index holds the
events of the actions the charts count (claimed, recorded, finalized, cancelled), with their
action and state, so a window without filters is an index-only scan of its own entries, and
lease, send-marker and deferral events add no entry.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0017_stats_event_at"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

EVENT = "kubun_connector_operation_event"
AT = "kubun_connector_operation_event_at_idx"
COUNTED = "action IN ('claimed', 'recorded', 'finalized', 'cancelled')"


def upgrade() -> None:
    op.create_index(
        AT,
        EVENT,
        ["at", "action", "to_state"],
        postgresql_where=sa.text(COUNTED),
        sqlite_where=sa.text(COUNTED),
    )


def downgrade() -> None:
    op.drop_index(AT, table_name=EVENT)
