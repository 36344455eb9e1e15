"""Signing in: one-time sign-in codes and the sessions they open.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-06 05:00:00

A person signs in to the dashboard or GraphiQL with a link ``connector-store serve`` (or
``connector-store sign-in-link``) prints; its code, used once, opens a session whose token the
page renews while it is open and revokes when the person signs out. Every server process on
the database must agree on both, so they live here, in one row per sign-in
(``store.sign_in``).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLE = "kubun_connector_sign_in"


def upgrade() -> None:
    op.create_table(
        TABLE,
        sa.Column("session_id", sa.Text, primary_key=True),
        sa.Column("code_hash", sa.Text, nullable=False, unique=True),
        sa.Column("sub", sa.Text, nullable=False),
        sa.Column("scope", sa.Text, nullable=False),
        sa.Column("created_at", sa.BigInteger, nullable=False),
        sa.Column("code_expires_at", sa.BigInteger, nullable=False),
        sa.Column("signed_in_at", sa.BigInteger),
        sa.Column("expires_at", sa.BigInteger),
        sa.Column("revoked_at", sa.BigInteger),
    )


def downgrade() -> None:
    op.drop_table(TABLE)
