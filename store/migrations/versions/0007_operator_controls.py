"""Operator controls: paused accounts and connectors, and the links of reissued operations.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01 17:30:00

An account paused on its own keeps ``paused_at``; a connector paused as a whole has a row in
``kubun_connector_paused_connector``. A reissued operation names its original
(``reissued_from``, the original's operation id under the same caller) and the original
names it (``reissued_as``).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

KEY = sa.Text().with_variant(postgresql.TEXT(collation="C"), "postgresql")
ACCOUNT = "kubun_connector_account"
OPERATION = "kubun_connector_operation"
PAUSED_CONNECTOR = "kubun_connector_paused_connector"


def upgrade() -> None:
    op.add_column(ACCOUNT, sa.Column("paused_at", sa.BigInteger))
    op.create_table(
        PAUSED_CONNECTOR,
        sa.Column("connector_name", KEY, primary_key=True),
        sa.Column("paused_at", sa.BigInteger, nullable=False),
    )
    op.add_column(OPERATION, sa.Column("reissued_from", KEY))
    op.add_column(OPERATION, sa.Column("reissued_as", KEY))


def downgrade() -> None:
    with op.batch_alter_table(OPERATION) as batch:
        batch.drop_column("reissued_as")
        batch.drop_column("reissued_from")
    op.drop_table(PAUSED_CONNECTOR)
    with op.batch_alter_table(ACCOUNT) as batch:
        batch.drop_column("paused_at")
