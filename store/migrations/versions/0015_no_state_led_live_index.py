"""No index leads with ``state`` over live operations.

Revision ID: 0015
Revises: 0013
Create Date: 2026-12-06 05:40:00

SQLite plans without statistics until someone runs ``ANALYZE``, and then takes an equality
on an index's leading column for a few rows: an index that leads with ``state`` looked like
the cheapest way to find the live operations of one owner, one entity or one account, and
every such read (the leasing walks, the owners' loose scan) went through every live row.
``state, next_attempt_at`` served no statement (the due walks read the partial due
indexes), so it goes; ``state, updated_at`` serves the collection of finished operations
only, so it keeps the finished ones (``state <> 'attempted'``, which that statement names).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

OPERATION = "kubun_connector_operation"
FINISHED = "kubun_connector_operation_finished_idx"
NOT_LIVE = "state <> 'attempted'"


def upgrade() -> None:
    op.drop_index("kubun_connector_operation_state_due_idx", table_name=OPERATION)
    op.drop_index(FINISHED, table_name=OPERATION)
    op.create_index(
        FINISHED,
        OPERATION,
        ["state", "updated_at"],
        postgresql_where=sa.text(NOT_LIVE),
        sqlite_where=sa.text(NOT_LIVE),
    )


def downgrade() -> None:
    op.drop_index(FINISHED, table_name=OPERATION)
    op.create_index(FINISHED, OPERATION, ["state", "updated_at"])
    op.create_index(
        "kubun_connector_operation_state_due_idx", OPERATION, ["state", "next_attempt_at"]
    )
