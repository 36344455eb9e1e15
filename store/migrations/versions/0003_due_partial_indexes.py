"""Partial indexes for the due operations: live operations, in due order.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30 15:05:00

``dueOperations`` walks these in due order and stops at its limit, so its cost does not
grow with the operations already finished.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

OPERATION = "kubun_connector_operation"
LIVE_NEW = "state = 'attempted' AND next_attempt_at IS NULL"
LIVE_NEXT = "state = 'attempted' AND next_attempt_at IS NOT NULL"


def _index(name: str, table: str, columns: list[str], where: str) -> None:
    op.create_index(
        name,
        table,
        columns,
        postgresql_where=sa.text(where),
        sqlite_where=sa.text(where),
    )


def upgrade() -> None:
    _index(
        "kubun_connector_operation_due_new_idx",
        OPERATION,
        ["created_at", "caller_did", "operation_id"],
        LIVE_NEW,
    )
    _index(
        "kubun_connector_operation_due_next_idx",
        OPERATION,
        ["next_attempt_at", "caller_did", "operation_id"],
        LIVE_NEXT,
    )


def downgrade() -> None:
    op.drop_index("kubun_connector_operation_due_next_idx", table_name=OPERATION)
    op.drop_index("kubun_connector_operation_due_new_idx", table_name=OPERATION)
