"""The operations' events carry their operation's owner, connector and account.

Revision ID: 0019_event_envelope
Revises: 0018_starve_account_due
Create Date: 2026-12-07 09:00:00

The operations' event stream and the dashboard's charts matched a filter by connector,
account or owner, and a tenant's rights (its calls and its own), through the operation's row:
once an operation was collected (its events kept), a filtered stream resumed from before its
events skipped them silently, a tenant no longer saw its own history, and narrowed charts no
longer counted it. Each event now copies those envelope fields, which never change, as it is
written (``store.events.OPERATION_MATCHED``), and its readers match its own columns
(``store.operation_match``).

The upgrade fills the events already logged from their operations, in one ``UPDATE`` (on
PostgreSQL it writes a new version of every such event: the log's size again until vacuum).
Events whose operation was collected before it have no row to read: they keep null there,
match no filter on those fields, and are seen by their caller but not by an owner that did
not call them (docs/api.md, 'History'), until the log's retention collects them.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0019_event_envelope"
down_revision: str | None = "0018_starve_account_due"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

KEY = sa.Text().with_variant(postgresql.TEXT(collation="C"), "postgresql")
EVENT = "kubun_connector_operation_event"
OPERATION = "kubun_connector_operation"
COPIED = ("owner_did", "connector_name", "account_key")


def upgrade() -> None:
    for name in COPIED:
        op.add_column(EVENT, sa.Column(name, KEY))
    event = sa.table(EVENT, *(sa.column(name) for name in ("caller_did", "operation_id", *COPIED)))
    row = sa.table(
        OPERATION, *(sa.column(name) for name in ("caller_did", "operation_id", *COPIED))
    )
    op.execute(
        sa.update(event)
        .where(
            row.c.caller_did == event.c.caller_did,
            row.c.operation_id == event.c.operation_id,
        )
        .values({name: row.c[name] for name in COPIED})
    )


def downgrade() -> None:
    # SQLite drops a column in place (3.35 and later): a batch copy of the table would lose
    # its AUTOINCREMENT, and with it the rule that an event's id is never reused.
    for name in reversed(COPIED):
        op.drop_column(EVENT, name)
