"""A claim is one statement in autocommit; a wake-up is one notification per statement.

Revision ID: 0020_claims_in_one_statement
Revises: 0019_event_envelope
Create Date: 2026-12-07 18:45:00

PostgreSQL only; SQLite, whose writers take turns, changes nothing.

A claim used to lock its account's row (writing it unchanged) before it decided its lease, so
that concurrent claims of one account decided one after another, each reading what the one
before it committed: every claim of a busy account queued on one row, held across round
trips until its commit. A claim is now one statement that writes no account row that exists
(``store.claims``). One statement reads one snapshot, taken before anything it waits for, so
what a concurrent claim commits meanwhile is checked once more by
``kubun_connector_claimed_alone``, after the claim's rows are written: it takes a
transaction lock of each provider entity the claim leased in (in one order), then, with a
snapshot of its own (a ``VOLATILE`` function's), refuses the claim when the entity has an
attempted operation the statement did not see (another claim committed it since), or a key
the claim inserted has a tombstone (its operation was collected while the insert waited on
its row). Refused, the statement raises ``KC409`` and writes nothing, and the claim runs
again: its new snapshot sees what the other committed. Two claims of one entity lease one:
the later to take the entity's lock sees the earlier's commit.

The wake-up triggers of migration 0009 fired once per row written, each sending its
``pg_notify``: 50 a batch of 50 claims. They now fire once per statement, over its rows
(transition tables), and send one notification per connector written.
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0020_claims_in_one_statement"
down_revision: str | None = "0019_event_envelope"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

CLAIMED_ALONE = """
CREATE FUNCTION kubun_connector_claimed_alone(
    owners text[], connectors text[], models text[], accounts text[], sources text[],
    digests bytea[]
) RETURNS boolean LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    entity bigint;
BEGIN
    FOR entity IN
        SELECT DISTINCT hashtextextended(concat_ws(chr(31), o, c, m, a, s), 0) AS k
        FROM unnest(owners, connectors, models, accounts, sources) AS e(o, c, m, a, s)
        ORDER BY k
    LOOP
        PERFORM pg_advisory_xact_lock(entity);
    END LOOP;
    IF EXISTS (
        SELECT
        FROM unnest(owners, connectors, models, accounts, sources) AS e(o, c, m, a, s)
        JOIN kubun_connector_operation AS other
          ON other.owner_did = e.o AND other.connector_name = e.c AND other.model = e.m
         AND other.account_key = e.a AND other.source_id = e.s
        WHERE other.state = 'attempted' AND other.xmin <> pg_current_xact_id()::xid
    ) OR EXISTS (
        SELECT FROM kubun_connector_operation_tombstone WHERE key_digest = ANY (digests)
    ) THEN
        RAISE EXCEPTION 'a concurrent claim or collection changed what this claim decided'
            USING ERRCODE = 'KC409';
    END IF;
    RETURN true;
END
$$
"""

OPERATION = "kubun_connector_operation"
ACCOUNT = "kubun_connector_account"

OPERATION_FREED = """
    (was.state = 'attempted' AND now.state <> 'attempted')
    OR (now.state = 'attempted' AND (
        (was.lease_token IS NOT NULL AND now.lease_token IS NULL)
        OR now.lease_expires_at < was.lease_expires_at
        OR now.next_attempt_at IS DISTINCT FROM was.next_attempt_at
    ))
"""
ACCOUNT_EASED = """
    now.max_in_flight IS DISTINCT FROM was.max_in_flight
    OR now.throttled_until IS DISTINCT FROM was.throttled_until
"""
KEYS = {
    OPERATION: "now.caller_did = was.caller_did AND now.operation_id = was.operation_id",
    ACCOUNT: "now.connector_name = was.connector_name AND now.account_key = was.account_key",
}


def _function(name: str, written: str) -> str:
    # The transition tables have no statistics: without the setting an UPDATE of many rows
    # may pair its old and new rows by a nested loop, its cost the square of its rows.
    return f"""
CREATE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql SET enable_nestloop = off AS $$
BEGIN
    PERFORM pg_notify('kubun_connector_work', connector_name)
    FROM (SELECT DISTINCT connector_name FROM ({written}) AS written) AS connectors;
    RETURN NULL;
END
$$
"""


STATEMENT_TRIGGERS = (
    (
        "kubun_connector_operation_claimed_wakeup",
        "INSERT",
        OPERATION,
        "REFERENCING NEW TABLE AS now",
        "SELECT connector_name FROM now",
    ),
    (
        "kubun_connector_operation_freed_wakeup",
        "UPDATE",
        OPERATION,
        "REFERENCING NEW TABLE AS now OLD TABLE AS was",
        f"SELECT now.connector_name FROM now JOIN was ON {KEYS[OPERATION]} WHERE {OPERATION_FREED}",
    ),
    (
        "kubun_connector_account_eased_wakeup",
        "UPDATE",
        ACCOUNT,
        "REFERENCING NEW TABLE AS now OLD TABLE AS was",
        f"SELECT now.connector_name FROM now JOIN was ON {KEYS[ACCOUNT]} WHERE {ACCOUNT_EASED}",
    ),
)
"""Each statement trigger: its name (and its function's), the event, the table, its
transition tables and the connectors it wakes (a query over them)."""

ROW_TRIGGERS = (
    ("kubun_connector_operation_claimed_wakeup", "INSERT", OPERATION, None),
    (
        "kubun_connector_operation_freed_wakeup",
        "UPDATE",
        OPERATION,
        OPERATION_FREED.replace("was.", "OLD.").replace("now.", "NEW."),
    ),
    (
        "kubun_connector_account_eased_wakeup",
        "UPDATE",
        ACCOUNT,
        ACCOUNT_EASED.replace("was.", "OLD.").replace("now.", "NEW."),
    ),
)
"""Migration 0009's row triggers, as the downgrade puts them back."""


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(CLAIMED_ALONE)
    for name, event, table, transitions, written in STATEMENT_TRIGGERS:
        op.execute(f"DROP TRIGGER {name} ON {table}")
        op.execute(_function(name, written))
        op.execute(
            f"CREATE TRIGGER {name} AFTER {event} ON {table} {transitions} "
            f"FOR EACH STATEMENT EXECUTE FUNCTION {name}()"
        )


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for name, event, table, when in ROW_TRIGGERS:
        op.execute(f"DROP TRIGGER {name} ON {table}")
        op.execute(f"DROP FUNCTION {name}()")
        condition = "" if when is None else f"WHEN ({when})"
        op.execute(
            f"CREATE TRIGGER {name} AFTER {event} ON {table} FOR EACH ROW {condition} "
            "EXECUTE FUNCTION kubun_connector_wakeup()"
        )
    arguments = ", ".join(["text[]"] * 5 + ["bytea[]"])
    op.execute(f"DROP FUNCTION kubun_connector_claimed_alone({arguments})")
