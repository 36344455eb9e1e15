"""An account row for every account an operation names.

Revision ID: 0019_account_rows
Revises: 0018_starve_account_due
Create Date: 2026-12-06 15:00:00

Claims create their account's row, but operations stored before accounts had rows (or written
outside a claim) may name an account that has none. ``leaseOperations`` on PostgreSQL holds the
row of each account it sees uncapped while it leases from it, so that setting a cap waits for
it; an account without a row could not be held. This makes the missing rows (no cap, no
throttle, no pause). The downgrade keeps them: they are what a claim would have made.
"""

import time
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0019_account_rows"
down_revision: str | None = "0018_starve_account_due"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute(
        sa.text(
            "INSERT INTO kubun_connector_account (connector_name, account_key, updated_at) "
            "SELECT DISTINCT o.connector_name, o.account_key, :now "
            "FROM kubun_connector_operation o WHERE NOT EXISTS (SELECT 1 FROM "
            "kubun_connector_account a WHERE a.connector_name = o.connector_name "
            "AND a.account_key = o.account_key)"
        ).bindparams(now=int(time.time() * 1000))
    )


def downgrade() -> None:
    pass
