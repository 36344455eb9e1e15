"""Automatic persisted queries: query texts by their SHA-256, shared by all instances.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30 15:45:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLE = "kubun_connector_persisted_query"


def upgrade() -> None:
    op.create_table(
        TABLE,
        sa.Column("sha256_hash", sa.Text, primary_key=True),
        sa.Column("query", sa.Text, nullable=False),
        sa.Column("created_at", sa.BigInteger, nullable=False),
    )


def downgrade() -> None:
    op.drop_table(TABLE)
