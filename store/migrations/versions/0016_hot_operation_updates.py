"""Updates of a live operation can be HOT: no index on a column every transition writes.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-06 05:30:00

PostgreSQL writes an update without touching any index (a HOT update) only when no indexed
column changed and the row's page has room for the new version. Every write of an operation
sets ``updated_at``, which ``kubun_connector_operation_finished_idx`` indexed, so each update
wrote a new entry into every index of the table (18). The collection of finished operations
now walks ``(state, created_at)`` over terminal rows only (an operation is created before it is
last updated, so ``created_at`` bounds the same range), and the operations table keeps half
of each page free (``fillfactor`` 50) for the new versions: marking a send is HOT, also when a
batch of 50 marks the rows its claims just packed into the same pages (at 80, a fifth free,
a quarter of those marks found room; the heap of live rows is larger, its indexes are not).
``kubun_connector_operation_defer_idx`` holds deferred rows only (every query of it names a
reason), so a claim or a finalize, which leave the reason null, writes no entry into it.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

OPERATION = "kubun_connector_operation"
FINISHED = "kubun_connector_operation_finished_idx"
DEFER = "kubun_connector_operation_defer_idx"
TERMINAL = "state <> 'attempted'"
DEFERRED = "defer_reason IS NOT NULL"
FILLFACTOR = 50


def upgrade() -> None:
    op.drop_index(FINISHED, table_name=OPERATION)
    op.create_index(
        FINISHED,
        OPERATION,
        ["state", "created_at"],
        postgresql_where=sa.text(TERMINAL),
        sqlite_where=sa.text(TERMINAL),
    )
    op.drop_index(DEFER, table_name=OPERATION)
    op.create_index(
        DEFER,
        OPERATION,
        ["defer_reason", "owner_did", "connector_name"],
        postgresql_where=sa.text(DEFERRED),
        sqlite_where=sa.text(DEFERRED),
    )
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"ALTER TABLE {OPERATION} SET (fillfactor = {FILLFACTOR})")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"ALTER TABLE {OPERATION} RESET (fillfactor)")
    op.drop_index(DEFER, table_name=OPERATION)
    op.create_index(DEFER, OPERATION, ["defer_reason", "owner_did", "connector_name"])
    op.drop_index(FINISHED, table_name=OPERATION)
    op.create_index(
        FINISHED,
        OPERATION,
        ["state", "updated_at"],
        postgresql_where=sa.text(TERMINAL),
        sqlite_where=sa.text(TERMINAL),
    )
