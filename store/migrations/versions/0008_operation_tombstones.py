"""Tombstones of collected operations: a claim of a collected key answers what became of it.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01 17:30:00

One compact row per collected operation (a 12-byte key digest, an 8-byte envelope digest,
the final state's code, the time of collection), kept for ``RETAIN_KEYS_SECONDS``; expiry
finds old rows through a BRIN index on PostgreSQL (a B-tree on SQLite).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLE = "kubun_connector_operation_tombstone"


def upgrade() -> None:
    op.create_table(
        TABLE,
        sa.Column("key_digest", sa.LargeBinary, nullable=False),
        sa.Column("envelope_digest", sa.LargeBinary, nullable=False),
        sa.Column("final_state", sa.SmallInteger, nullable=False),
        sa.Column("collected_at", sa.BigInteger, nullable=False),
        sa.PrimaryKeyConstraint("key_digest", name=f"{TABLE}_pkey"),
    )
    op.create_index(f"{TABLE}_collected_idx", TABLE, ["collected_at"], postgresql_using="brin")


def downgrade() -> None:
    op.drop_table(TABLE)
