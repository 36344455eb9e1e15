"""Each owner's live operations by account in due order, for the fair lease walk.

Revision ID: 0018_starve_account_due
Revises: 0017_stats_event_at
Create Date: 2026-12-06 09:05:00

``leaseOperations`` walked each owner's due operations in due order and dropped the rows of an
account at its cap after the walk: an owner whose capped account's backlog was due first and
longer than the walk never had its open account's work reached. The walk now goes account by
account over the accounts that may lease, so the per-owner due indexes become per account and
owner (led by the model, which no other index holds but far down, then due order), replacing
them.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0018_starve_account_due"
down_revision: str | None = "0017_stats_event_at"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

OPERATION = "kubun_connector_operation"
ACCOUNT = ["model", "account_key", "connector_name", "owner_did"]
KEY = ["caller_did", "operation_id"]
LIVE_NEW = "state = 'attempted' AND next_attempt_at IS NULL"
LIVE_NEXT = "state = 'attempted' AND next_attempt_at IS NOT NULL"
INDEXES = {
    "new": (LIVE_NEW, "created_at"),
    "next": (LIVE_NEXT, "next_attempt_at"),
}


def _index(name: str, columns: list[str], where: str) -> None:
    op.create_index(
        name, OPERATION, columns, postgresql_where=sa.text(where), sqlite_where=sa.text(where)
    )


def upgrade() -> None:
    for side, (where, due) in INDEXES.items():
        _index(f"kubun_connector_operation_account_due_{side}_idx", [*ACCOUNT, due, *KEY], where)
        op.drop_index(f"kubun_connector_operation_owner_due_{side}_idx", table_name=OPERATION)


def downgrade() -> None:
    for side, (where, due) in INDEXES.items():
        _index(f"kubun_connector_operation_owner_due_{side}_idx", ["owner_did", due, *KEY], where)
        op.drop_index(f"kubun_connector_operation_account_due_{side}_idx", table_name=OPERATION)
