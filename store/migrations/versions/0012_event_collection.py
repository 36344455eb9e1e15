"""Event logs collected as a prefix: each log's collection frontier.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-06 05:00:00

The event logs are collected only as a prefix, by age (``store.events``). The table
``kubun_connector_event_collected`` keeps, per log, the position ``(tx, id)`` of the newest
event collected from it: a reader's ``after`` below it may have missed collected events
(``EVENTS_COLLECTED``), one at or above it missed none, and the newest position ever handed
out is the log's newest event or this one, whichever is later, so it never moves back when
the newest events are collected.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "kubun_connector_event_collected",
        sa.Column("log", sa.Text, primary_key=True),
        sa.Column("tx", sa.BigInteger, nullable=False),
        sa.Column("id", sa.BigInteger, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("kubun_connector_event_collected")
