"""Wake-ups for idle workers: the database says, at commit, which connector may have new work.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01 17:30:00

Every writer is covered (any replica, the sweeper, the CLI, a person with psql), because the
database itself tells: triggers fire where a write can make an operation leasable, that is

- a claim (an operation inserted);
- an operation leaving ``attempted`` (its entity's next operation and its account's cap are
  freed);
- a live operation whose lease was released or shortened, or whose next attempt moved;
- an account whose cap or throttle changed.

On PostgreSQL the trigger sends ``NOTIFY kubun_connector_work, '<connector name>'``, which is
delivered at commit (and not at all on rollback), once per connector and transaction. On
SQLite, which has no notifications, the trigger stamps the connector's row of
``kubun_connector_wakeup`` with the next sequence number; each server process tails that table
(``store.wakeups``). What writes nothing (a lease that lapses, a deferral that comes due, a
throttle that ends) is found by each process's timer instead.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

KEY = sa.Text().with_variant(postgresql.TEXT(collation="C"), "postgresql")
WAKEUP = "kubun_connector_wakeup"
OPERATION = "kubun_connector_operation"
ACCOUNT = "kubun_connector_account"

OPERATION_FREED = """
    (OLD.state = 'attempted' AND NEW.state <> 'attempted')
    OR (NEW.state = 'attempted' AND (
        (OLD.lease_token IS NOT NULL AND NEW.lease_token IS NULL)
        OR NEW.lease_expires_at < OLD.lease_expires_at
        OR NEW.next_attempt_at {distinct} OLD.next_attempt_at
    ))
"""
ACCOUNT_EASED = """
    NEW.max_in_flight {distinct} OLD.max_in_flight
    OR NEW.throttled_until {distinct} OLD.throttled_until
"""
TRIGGERS = (
    ("kubun_connector_operation_claimed_wakeup", "INSERT", OPERATION, None),
    ("kubun_connector_operation_freed_wakeup", "UPDATE", OPERATION, OPERATION_FREED),
    ("kubun_connector_account_eased_wakeup", "UPDATE", ACCOUNT, ACCOUNT_EASED),
)
"""Each trigger: its name, the event, the table and the condition (None: always)."""

POSTGRES_FUNCTION = """
CREATE FUNCTION kubun_connector_wakeup() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('kubun_connector_work', NEW.connector_name);
    RETURN NULL;
END
$$
"""
SQLITE_STAMP = f"""
    INSERT INTO {WAKEUP} (connector_name, seq)
    VALUES (NEW.connector_name, (SELECT coalesce(max(seq), 0) + 1 FROM {WAKEUP}))
    ON CONFLICT (connector_name) DO UPDATE SET seq = excluded.seq;
"""


def upgrade() -> None:
    op.create_table(
        WAKEUP,
        sa.Column("connector_name", KEY, primary_key=True),
        sa.Column("seq", sa.BigInteger, nullable=False),
    )
    op.create_index("kubun_connector_wakeup_seq_idx", WAKEUP, ["seq"])
    postgres = op.get_bind().dialect.name == "postgresql"
    if postgres:
        op.execute(POSTGRES_FUNCTION)
    for name, event, table, condition in TRIGGERS:
        when = ""
        if condition is not None:
            distinct = "IS DISTINCT FROM" if postgres else "IS NOT"
            when = f"WHEN ({condition.format(distinct=distinct)})"
        if postgres:
            op.execute(
                f"CREATE TRIGGER {name} AFTER {event} ON {table} FOR EACH ROW {when} "
                "EXECUTE FUNCTION kubun_connector_wakeup()"
            )
        else:
            op.execute(
                f"CREATE TRIGGER {name} AFTER {event} ON {table} FOR EACH ROW {when} "
                f"BEGIN {SQLITE_STAMP} END"
            )


def downgrade() -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    for name, _, table, _ in TRIGGERS:
        op.execute(f"DROP TRIGGER {name} ON {table}" if postgres else f"DROP TRIGGER {name}")
    if postgres:
        op.execute("DROP FUNCTION kubun_connector_wakeup()")
    op.drop_index("kubun_connector_wakeup_seq_idx", table_name=WAKEUP)
    op.drop_table(WAKEUP)
