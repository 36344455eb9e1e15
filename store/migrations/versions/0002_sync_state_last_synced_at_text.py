"""Sync state: ``last_synced_at`` is the seed's ISO-8601 text, required (was BIGINT, nullable).

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30 14:30:00

No code wrote the sync state table before this revision; any row there is converted
anyway: epoch ms become ISO-8601 UTC text with milliseconds, a NULL becomes the epoch.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLE = "kubun_connector_sync_state"


def upgrade() -> None:
    op.execute(f"UPDATE {TABLE} SET last_synced_at = 0 WHERE last_synced_at IS NULL")
    if op.get_bind().dialect.name == "postgresql":
        op.alter_column(
            TABLE,
            "last_synced_at",
            type_=sa.Text(),
            existing_type=sa.BigInteger(),
            nullable=False,
            postgresql_using=(
                "to_char(to_timestamp(last_synced_at / 1000.0) AT TIME ZONE 'UTC',"
                ' \'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"\')'
            ),
        )
        return
    with op.batch_alter_table(TABLE) as batch_op:
        batch_op.alter_column(
            "last_synced_at", type_=sa.Text(), existing_type=sa.BigInteger(), nullable=False
        )
    op.execute(
        f"UPDATE {TABLE} SET last_synced_at = strftime('%Y-%m-%dT%H:%M:%fZ',"
        " CAST(last_synced_at AS INTEGER) / 1000.0, 'unixepoch')"
    )


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.alter_column(
            TABLE,
            "last_synced_at",
            type_=sa.BigInteger(),
            existing_type=sa.Text(),
            nullable=True,
            postgresql_using=("(extract(epoch from last_synced_at::timestamptz) * 1000)::bigint"),
        )
        return
    op.execute(
        f"UPDATE {TABLE} SET last_synced_at ="
        " CAST(round((julianday(last_synced_at) - 2440587.5) * 86400000) AS INTEGER)"
    )
    with op.batch_alter_table(TABLE) as batch_op:
        batch_op.alter_column(
            "last_synced_at", type_=sa.BigInteger(), existing_type=sa.Text(), nullable=True
        )
