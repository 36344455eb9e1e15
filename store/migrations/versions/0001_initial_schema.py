"""The initial schema: operations, projection watches, pending auth, sync state, winners.

Revision ID: 0001
Revises:
Create Date: 2026-11-29 22:47:45.501053
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

KEY = sa.Text().with_variant(postgresql.TEXT(collation="C"), "postgresql")


def upgrade() -> None:
    op.create_table(
        "kubun_connector_document_winner",
        sa.Column("document_id", KEY, nullable=False),
        sa.Column("winner_digest", sa.Text(), nullable=False),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("document_id"),
    )
    op.create_table(
        "kubun_connector_operation",
        sa.Column("caller_did", KEY, nullable=False),
        sa.Column("operation_id", KEY, nullable=False),
        sa.Column("node_key", sa.Text(), nullable=False),
        sa.Column("owner_did", KEY, nullable=False),
        sa.Column("connector_name", KEY, nullable=False),
        sa.Column("model", KEY, nullable=False),
        sa.Column("op", sa.Text(), nullable=False),
        sa.Column("account_key", KEY, nullable=False),
        sa.Column("target", sa.Text(), nullable=False),
        sa.Column("source_id", KEY, nullable=False),
        sa.Column("deterministic_event_id", sa.Text(), nullable=False),
        sa.Column("payload_hash", sa.Text(), nullable=False),
        sa.Column("reissue_intent", sa.Text(), nullable=False),
        sa.Column("provider_etag", sa.Text(), nullable=True),
        sa.Column("document_id", KEY, nullable=True),
        sa.Column("result_entity", sa.Text(), nullable=True),
        sa.Column("state", sa.Text(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_attempt_at", sa.BigInteger(), nullable=True),
        sa.Column("defer_reason", sa.Text(), nullable=True),
        sa.Column("last_kind", sa.Text(), nullable=True),
        sa.Column("last_http_status", sa.Integer(), nullable=True),
        sa.Column("send_marker", sa.Text(), nullable=True),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("incarnation", sa.Text(), nullable=False),
        sa.Column("lease_token", sa.Text(), nullable=True),
        sa.Column("lease_expires_at", sa.BigInteger(), nullable=True),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint(
            "caller_did", "operation_id", name="kubun_connector_operation_pkey"
        ),
        sa.UniqueConstraint("node_key"),
    )
    with op.batch_alter_table("kubun_connector_operation", schema=None) as batch_op:
        batch_op.create_index(
            "kubun_connector_operation_connector_state_idx",
            ["connector_name", "state"],
            unique=False,
        )
        batch_op.create_index(
            "kubun_connector_operation_defer_idx",
            ["defer_reason", "owner_did", "connector_name"],
            unique=False,
        )
        batch_op.create_index(
            "kubun_connector_operation_document_idx", ["document_id", "created_at"], unique=False
        )
        batch_op.create_index(
            "kubun_connector_operation_finished_idx", ["state", "updated_at"], unique=False
        )
        batch_op.create_index(
            "kubun_connector_operation_order_idx",
            ["created_at", "caller_did", "operation_id"],
            unique=False,
        )
        batch_op.create_index(
            "kubun_connector_operation_owner_idx", ["owner_did", "created_at"], unique=False
        )
        batch_op.create_index(
            "kubun_connector_operation_state_due_idx", ["state", "next_attempt_at"], unique=False
        )

    op.create_table(
        "kubun_connector_pending_auth",
        sa.Column("state", sa.Text(), nullable=False),
        sa.Column("code_verifier", sa.Text(), nullable=False),
        sa.Column("provider", sa.Text(), nullable=False),
        sa.Column("owner_did", KEY, nullable=False),
        sa.Column("owner_wrappable_did", sa.Text(), nullable=True),
        sa.Column("controller_wrappable_did", sa.Text(), nullable=True),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("redirect_url", sa.Text(), nullable=False),
        sa.Column("scopes", sa.Text(), nullable=False),
        sa.Column("is_incremental", sa.Integer(), nullable=False),
        sa.Column("expires_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("state"),
    )
    with op.batch_alter_table("kubun_connector_pending_auth", schema=None) as batch_op:
        batch_op.create_index(
            "kubun_connector_pending_auth_expires_idx", ["expires_at"], unique=False
        )

    op.create_table(
        "kubun_connector_projection_watch",
        sa.Column("owner_did", KEY, nullable=False),
        sa.Column("connector_name", KEY, nullable=False),
        sa.Column("model", KEY, nullable=False),
        sa.Column("account_key", KEY, nullable=False),
        sa.Column("source_id", KEY, nullable=False),
        sa.Column("document_id", KEY, nullable=True),
        sa.Column("repair_generation", sa.Integer(), nullable=False),
        sa.Column("verification_status", sa.Text(), nullable=False),
        sa.Column("verification_attempts", sa.Integer(), nullable=False),
        sa.Column("observed_winner_digest", sa.Text(), nullable=True),
        sa.Column("verified_state_digest", sa.Text(), nullable=True),
        sa.Column("next_attempt_at", sa.BigInteger(), nullable=True),
        sa.Column("claimed_until", sa.BigInteger(), nullable=True),
        sa.Column("defer_reason", sa.Text(), nullable=True),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint(
            "owner_did",
            "connector_name",
            "model",
            "account_key",
            "source_id",
            name="kubun_connector_projection_watch_pkey",
        ),
    )
    with op.batch_alter_table("kubun_connector_projection_watch", schema=None) as batch_op:
        batch_op.create_index(
            "kubun_connector_projection_watch_defer_idx",
            ["defer_reason", "owner_did", "connector_name"],
            unique=False,
        )
        batch_op.create_index(
            "kubun_connector_projection_watch_document_idx", ["document_id"], unique=False
        )
        batch_op.create_index(
            "kubun_connector_projection_watch_due_idx",
            ["verification_status", "next_attempt_at"],
            unique=False,
        )

    op.create_table(
        "kubun_connector_sync_state",
        sa.Column("connector_name", KEY, nullable=False),
        sa.Column("owner_did", KEY, nullable=False),
        sa.Column("checkpoint", sa.Text(), nullable=True),
        sa.Column("recovery", sa.Text(), nullable=True),
        sa.Column("last_synced_at", sa.BigInteger(), nullable=True),
        sa.Column("entity_count", sa.Integer(), nullable=False),
        sa.Column("status", sa.Text(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("incarnation", sa.Text(), nullable=False),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint(
            "connector_name", "owner_did", name="kubun_connector_sync_state_pkey"
        ),
    )


def downgrade() -> None:
    op.drop_table("kubun_connector_sync_state")
    with op.batch_alter_table("kubun_connector_projection_watch", schema=None) as batch_op:
        batch_op.drop_index("kubun_connector_projection_watch_due_idx")
        batch_op.drop_index("kubun_connector_projection_watch_document_idx")
        batch_op.drop_index("kubun_connector_projection_watch_defer_idx")

    op.drop_table("kubun_connector_projection_watch")
    with op.batch_alter_table("kubun_connector_pending_auth", schema=None) as batch_op:
        batch_op.drop_index("kubun_connector_pending_auth_expires_idx")

    op.drop_table("kubun_connector_pending_auth")
    with op.batch_alter_table("kubun_connector_operation", schema=None) as batch_op:
        batch_op.drop_index("kubun_connector_operation_state_due_idx")
        batch_op.drop_index("kubun_connector_operation_owner_idx")
        batch_op.drop_index("kubun_connector_operation_order_idx")
        batch_op.drop_index("kubun_connector_operation_finished_idx")
        batch_op.drop_index("kubun_connector_operation_document_idx")
        batch_op.drop_index("kubun_connector_operation_defer_idx")
        batch_op.drop_index("kubun_connector_operation_connector_state_idx")

    op.drop_table("kubun_connector_operation")
    op.drop_table("kubun_connector_document_winner")
