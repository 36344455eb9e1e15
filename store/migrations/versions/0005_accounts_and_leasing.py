"""Provider accounts (cap and throttle) and the indexes of batch leasing.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01 15:20:00

``leaseOperations`` walks each owner's live operations in due order and checks, for each
candidate, the older live operations of its provider entity and the live leases of its
account: each is an index range scan here.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

KEY = sa.Text().with_variant(postgresql.TEXT(collation="C"), "postgresql")
ACCOUNT = "kubun_connector_account"
OPERATION = "kubun_connector_operation"
LIVE = "state = 'attempted'"
LEASED = "state = 'attempted' AND lease_token IS NOT NULL"
LIVE_NEW = "state = 'attempted' AND next_attempt_at IS NULL"
LIVE_NEXT = "state = 'attempted' AND next_attempt_at IS NOT NULL"


def _index(name: str, columns: list[str], where: str) -> None:
    op.create_index(
        name, OPERATION, columns, postgresql_where=sa.text(where), sqlite_where=sa.text(where)
    )


def upgrade() -> None:
    op.create_table(
        ACCOUNT,
        sa.Column("connector_name", KEY, nullable=False),
        sa.Column("account_key", KEY, nullable=False),
        sa.Column("max_in_flight", sa.Integer),
        sa.Column("throttled_until", sa.BigInteger),
        sa.Column("updated_at", sa.BigInteger, nullable=False),
        sa.PrimaryKeyConstraint(
            "connector_name", "account_key", name="kubun_connector_account_pkey"
        ),
    )
    _index(
        "kubun_connector_operation_entity_idx",
        [
            "owner_did",
            "connector_name",
            "model",
            "account_key",
            "source_id",
            "created_at",
            "caller_did",
            "operation_id",
        ],
        LIVE,
    )
    _index(
        "kubun_connector_operation_owner_due_new_idx",
        ["owner_did", "created_at", "caller_did", "operation_id"],
        LIVE_NEW,
    )
    _index(
        "kubun_connector_operation_owner_due_next_idx",
        ["owner_did", "next_attempt_at", "caller_did", "operation_id"],
        LIVE_NEXT,
    )
    _index(
        "kubun_connector_operation_leased_idx",
        ["connector_name", "account_key", "lease_expires_at"],
        LEASED,
    )


def downgrade() -> None:
    op.drop_index("kubun_connector_operation_leased_idx", table_name=OPERATION)
    op.drop_index("kubun_connector_operation_owner_due_next_idx", table_name=OPERATION)
    op.drop_index("kubun_connector_operation_owner_due_new_idx", table_name=OPERATION)
    op.drop_index("kubun_connector_operation_entity_idx", table_name=OPERATION)
    op.drop_table(ACCOUNT)
