"""SQLAlchemy Core tables: the single definition of the store's schema.

Every time column is epoch milliseconds in a BIGINT, except the sync state's ``last_synced_at``
(the seed's ISO-8601 text). JSON columns are text, decoded on
read (``store.records``). The alembic migrations create exactly these tables and indexes.
"""

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

metadata = sa.MetaData()

Key = sa.Text().with_variant(postgresql.TEXT(collation="C"), "postgresql")
"""A key column (DID, id, name): compared and ordered byte-wise ("C") on PostgreSQL, as on
SQLite, so every backend and the store's own merges of chunked results agree on order."""

operation = sa.Table(
    "kubun_connector_operation",
    metadata,
    sa.Column("caller_did", Key, nullable=False),
    sa.Column("operation_id", Key, nullable=False),
    sa.Column("node_key", sa.Text, nullable=False, unique=True),
    sa.Column("owner_did", Key, nullable=False),
    sa.Column("connector_name", Key, nullable=False),
    sa.Column("model", Key, nullable=False),
    sa.Column("op", sa.Text, nullable=False),
    sa.Column("account_key", Key, nullable=False),
    sa.Column("target", sa.Text, nullable=False),
    sa.Column("source_id", Key, nullable=False),
    sa.Column("deterministic_event_id", sa.Text, nullable=False),
    sa.Column("payload_hash", sa.Text, nullable=False),
    sa.Column("reissue_intent", sa.Text, nullable=False),
    sa.Column("provider_etag", sa.Text),
    sa.Column("document_id", Key),
    sa.Column("result_entity", sa.Text),
    sa.Column("state", sa.Text, nullable=False),
    sa.Column("attempts", sa.Integer, nullable=False),
    sa.Column("next_attempt_at", sa.BigInteger),
    sa.Column("defer_reason", sa.Text),
    sa.Column("last_kind", sa.Text),
    sa.Column("last_http_status", sa.Integer),
    sa.Column("last_error", sa.Text),
    sa.Column("send_marker", sa.Text),
    sa.Column("version", sa.Integer, nullable=False),
    sa.Column("incarnation", sa.Text, nullable=False),
    sa.Column("lease_token", sa.Text),
    sa.Column("lease_expires_at", sa.BigInteger),
    sa.Column("created_at", sa.BigInteger, nullable=False),
    sa.Column("updated_at", sa.BigInteger, nullable=False),
    sa.Column("reissued_from", Key),
    sa.Column("reissued_as", Key),
    sa.PrimaryKeyConstraint("caller_did", "operation_id", name="kubun_connector_operation_pkey"),
    sa.Index("kubun_connector_operation_order_idx", "created_at", "caller_did", "operation_id"),
    sa.Index("kubun_connector_operation_document_idx", "document_id", "created_at"),
    sa.Index("kubun_connector_operation_owner_idx", "owner_did", "created_at"),
    sa.Index("kubun_connector_operation_connector_state_idx", "connector_name", "state"),
    # No index holds ``updated_at``, which every write sets: an update that changes no
    # indexed column is HOT on PostgreSQL (no index entry written), given room on its page
    # (``fillfactor`` below). Deferred rows only: every query of it names a reason.
    sa.Index(
        "kubun_connector_operation_defer_idx",
        "defer_reason",
        "owner_did",
        "connector_name",
        postgresql_where=sa.text("defer_reason IS NOT NULL"),
        sqlite_where=sa.text("defer_reason IS NOT NULL"),
    ),
    # Terminal operations by state, oldest first (collection, ``store.retention``). No index
    # leads with ``state`` over live rows: without statistics SQLite takes an equality on a
    # leading column for a few rows, and would read every live row through it.
    sa.Index(
        "kubun_connector_operation_finished_idx",
        "state",
        "created_at",
        postgresql_where=sa.text("state <> 'attempted'"),
        sqlite_where=sa.text("state <> 'attempted'"),
    ),
    # The due list, in due order, over live rows only (``store.retention``): one index for
    # operations never deferred (due at creation), one for those with a next attempt.
    sa.Index(
        "kubun_connector_operation_due_new_idx",
        "created_at",
        "caller_did",
        "operation_id",
        postgresql_where=sa.text("state = 'attempted' AND next_attempt_at IS NULL"),
        sqlite_where=sa.text("state = 'attempted' AND next_attempt_at IS NULL"),
    ),
    sa.Index(
        "kubun_connector_operation_due_next_idx",
        "next_attempt_at",
        "caller_did",
        "operation_id",
        postgresql_where=sa.text("state = 'attempted' AND next_attempt_at IS NOT NULL"),
        sqlite_where=sa.text("state = 'attempted' AND next_attempt_at IS NOT NULL"),
    ),
    # Leasing (``store.lease_guards``): the live operations of one provider entity in claim
    # order (the oldest of each, and whether another holds a lease), and the live leases of
    # one account (its in-flight count).
    sa.Index(
        "kubun_connector_operation_entity_idx",
        "owner_did",
        "connector_name",
        "model",
        "account_key",
        "source_id",
        "created_at",
        "caller_did",
        "operation_id",
        postgresql_where=sa.text("state = 'attempted'"),
        sqlite_where=sa.text("state = 'attempted'"),
    ),
    # Each owner's live operations of one account in due order (``lease_operations``' fair
    # walk, account by account: a capped account's backlog is never read past), as the due
    # indexes above but per account and owner; led by the model, which no other index of
    # the live rows holds but far down (``store.leasing.WALKED_GROUP``).
    sa.Index(
        "kubun_connector_operation_account_due_new_idx",
        "model",
        "account_key",
        "connector_name",
        "owner_did",
        "created_at",
        "caller_did",
        "operation_id",
        postgresql_where=sa.text("state = 'attempted' AND next_attempt_at IS NULL"),
        sqlite_where=sa.text("state = 'attempted' AND next_attempt_at IS NULL"),
    ),
    sa.Index(
        "kubun_connector_operation_account_due_next_idx",
        "model",
        "account_key",
        "connector_name",
        "owner_did",
        "next_attempt_at",
        "caller_did",
        "operation_id",
        postgresql_where=sa.text("state = 'attempted' AND next_attempt_at IS NOT NULL"),
        sqlite_where=sa.text("state = 'attempted' AND next_attempt_at IS NOT NULL"),
    ),
    # The dashboard's counts (``store.counts``), each an index-only scan: every operation
    # by account and state, and the live ones with what decides due and in flight.
    sa.Index(
        "kubun_connector_operation_account_state_idx", "connector_name", "account_key", "state"
    ),
    sa.Index(
        "kubun_connector_operation_live_account_idx",
        "connector_name",
        "account_key",
        "next_attempt_at",
        "lease_expires_at",
        "lease_token",
        postgresql_where=sa.text("state = 'attempted'"),
        sqlite_where=sa.text("state = 'attempted'"),
    ),
    sa.Index(
        "kubun_connector_operation_leased_idx",
        "connector_name",
        "account_key",
        "lease_expires_at",
        postgresql_where=sa.text("state = 'attempted' AND lease_token IS NOT NULL"),
        sqlite_where=sa.text("state = 'attempted' AND lease_token IS NOT NULL"),
    ),
    # The next lapse of a held lease, and the leases that lapsed in a window (the work
    # timer of ``store.wakeups``).
    sa.Index(
        "kubun_connector_operation_lapse_idx",
        "lease_expires_at",
        postgresql_where=sa.text("state = 'attempted' AND lease_token IS NOT NULL"),
        sqlite_where=sa.text("state = 'attempted' AND lease_token IS NOT NULL"),
    ),
    # Half of each page kept free for the new versions of its rows' updates (HOT).
    postgresql_with={"fillfactor": 50},
)

account = sa.Table(
    "kubun_connector_account",
    metadata,
    sa.Column("connector_name", Key, nullable=False),
    sa.Column("account_key", Key, nullable=False),
    sa.Column("max_in_flight", sa.Integer),
    sa.Column("throttled_until", sa.BigInteger),
    sa.Column("updated_at", sa.BigInteger, nullable=False),
    sa.Column("paused_at", sa.BigInteger),
    sa.PrimaryKeyConstraint("connector_name", "account_key", name="kubun_connector_account_pkey"),
)
"""Provider accounts (``store.accounts``): the cap on live leases, the throttle and the pause
of each."""

paused_connector = sa.Table(
    "kubun_connector_paused_connector",
    metadata,
    sa.Column("connector_name", Key, primary_key=True),
    sa.Column("paused_at", sa.BigInteger, nullable=False),
)
"""Connectors paused as a whole (``store.accounts``): a row while paused."""

operation_tombstone = sa.Table(
    "kubun_connector_operation_tombstone",
    metadata,
    sa.Column("key_digest", sa.LargeBinary, nullable=False),
    sa.Column("envelope_digest", sa.LargeBinary, nullable=False),
    sa.Column("final_state", sa.SmallInteger, nullable=False),
    sa.Column("collected_at", sa.BigInteger, nullable=False),
    sa.PrimaryKeyConstraint("key_digest", name="kubun_connector_operation_tombstone_pkey"),
    # Expiry deletes by age. On PostgreSQL a BRIN index: tombstones are appended in the order
    # of collection and expire oldest first, so pages hold rows of one age, and the index
    # costs a few pages where a B-tree would cost ~22 bytes a row (benchmarks/README.md).
    sa.Index(
        "kubun_connector_operation_tombstone_collected_idx",
        "collected_at",
        postgresql_using="brin",
    ),
)
"""What a collected operation leaves under its key (``store.tombstones``): compact, since
one is kept per collected operation for ``RETAIN_KEYS_SECONDS``. ``key_digest`` is 12 bytes
of a digest of the key, ``envelope_digest`` 8 bytes of a digest of the key and envelope,
``final_state`` the terminal state's code (``store.tombstones.STATE_CODES``)."""

projection_watch = sa.Table(
    "kubun_connector_projection_watch",
    metadata,
    sa.Column("owner_did", Key, nullable=False),
    sa.Column("connector_name", Key, nullable=False),
    sa.Column("model", Key, nullable=False),
    sa.Column("account_key", Key, nullable=False),
    sa.Column("source_id", Key, nullable=False),
    sa.Column("document_id", Key),
    sa.Column("repair_generation", sa.Integer, nullable=False),
    sa.Column("verification_status", sa.Text, nullable=False),
    sa.Column("verification_attempts", sa.Integer, nullable=False),
    sa.Column("observed_winner_digest", sa.Text),
    sa.Column("verified_state_digest", sa.Text),
    sa.Column("next_attempt_at", sa.BigInteger),
    sa.Column("claimed_until", sa.BigInteger),
    sa.Column("defer_reason", sa.Text),
    sa.Column("last_error", sa.Text),
    sa.Column("version", sa.Integer, nullable=False),
    sa.Column("created_at", sa.BigInteger, nullable=False),
    sa.Column("updated_at", sa.BigInteger, nullable=False),
    sa.PrimaryKeyConstraint(
        "owner_did",
        "connector_name",
        "model",
        "account_key",
        "source_id",
        name="kubun_connector_projection_watch_pkey",
    ),
    sa.Index("kubun_connector_projection_watch_document_idx", "document_id"),
    sa.Index("kubun_connector_projection_watch_due_idx", "verification_status", "next_attempt_at"),
    sa.Index(
        "kubun_connector_projection_watch_status_idx", "connector_name", "verification_status"
    ),
    sa.Index(
        "kubun_connector_projection_watch_defer_idx", "defer_reason", "owner_did", "connector_name"
    ),
)

pending_auth = sa.Table(
    "kubun_connector_pending_auth",
    metadata,
    sa.Column("state", sa.Text, primary_key=True),
    sa.Column("code_verifier", sa.Text, nullable=False),
    sa.Column("provider", sa.Text, nullable=False),
    sa.Column("owner_did", Key, nullable=False),
    sa.Column("owner_wrappable_did", sa.Text),
    sa.Column("controller_wrappable_did", sa.Text),
    sa.Column("created_at", sa.BigInteger, nullable=False),
    sa.Column("redirect_url", sa.Text, nullable=False),
    sa.Column("scopes", sa.Text, nullable=False),
    sa.Column("is_incremental", sa.Integer, nullable=False),
    sa.Column("expires_at", sa.BigInteger, nullable=False),
    sa.Index("kubun_connector_pending_auth_expires_idx", "expires_at"),
)

sync_state = sa.Table(
    "kubun_connector_sync_state",
    metadata,
    sa.Column("connector_name", Key, nullable=False),
    sa.Column("owner_did", Key, nullable=False),
    sa.Column("checkpoint", sa.Text),
    sa.Column("recovery", sa.Text),
    sa.Column("last_synced_at", sa.Text, nullable=False),
    sa.Column("entity_count", sa.Integer, nullable=False),
    sa.Column("status", sa.Text, nullable=False),
    sa.Column("error", sa.Text),
    sa.Column("version", sa.Integer, nullable=False),
    sa.Column("incarnation", sa.Text, nullable=False),
    sa.Column("updated_at", sa.BigInteger, nullable=False),
    sa.PrimaryKeyConstraint("connector_name", "owner_did", name="kubun_connector_sync_state_pkey"),
)

document_winner = sa.Table(
    "kubun_connector_document_winner",
    metadata,
    sa.Column("document_id", Key, primary_key=True),
    sa.Column("winner_digest", sa.Text, nullable=False),
    sa.Column("updated_at", sa.BigInteger, nullable=False),
)

persisted_query = sa.Table(
    "kubun_connector_persisted_query",
    metadata,
    sa.Column("sha256_hash", sa.Text, primary_key=True),
    sa.Column("query", sa.Text, nullable=False),
    sa.Column("created_at", sa.BigInteger, nullable=False),
)
"""Automatic persisted queries: a query text under its SHA-256 (hex), shared by every server
instance on the database."""

wakeup = sa.Table(
    "kubun_connector_wakeup",
    metadata,
    sa.Column("connector_name", Key, primary_key=True),
    sa.Column("seq", sa.BigInteger, nullable=False),
    sa.Index("kubun_connector_wakeup_seq_idx", "seq"),
)
"""SQLite's wake-ups (``store.wakeups``): each connector stamped by the triggers of migration
0009 with the next sequence number when a write may have made its work leasable. PostgreSQL's
triggers send ``NOTIFY`` instead and leave this table empty."""

COUNTED_EVENTS = "action IN ('claimed', 'recorded', 'finalized', 'cancelled')"
"""The operation events the dashboard's charts count (``store.stats``), as the predicate of
their index: a statement names it as this text so PostgreSQL can prove the index covers it."""

EventId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
"""An event's number: BIGINT identity on PostgreSQL; on SQLite ``INTEGER PRIMARY KEY
AUTOINCREMENT`` (the rowid, never reused after a delete, so a reader's position stays past
every number handed out)."""

operation_event = sa.Table(
    "kubun_connector_operation_event",
    metadata,
    sa.Column("id", EventId, sa.Identity(), primary_key=True),
    sa.Column("tx", sa.BigInteger, nullable=False),
    sa.Column("caller_did", Key, nullable=False),
    sa.Column("operation_id", Key, nullable=False),
    # The operation's envelope fields that a filter or a viewer's rights match (they never
    # change), so an event matches the same filters with or without its operation. Null
    # only on events of operations collected before migration 0019 wrote them.
    sa.Column("owner_did", Key),
    sa.Column("connector_name", Key),
    sa.Column("account_key", Key),
    sa.Column("at", sa.BigInteger, nullable=False),
    sa.Column("action", sa.Text, nullable=False),
    sa.Column("actor_did", sa.Text),
    sa.Column("to_state", sa.Text, nullable=False),
    sa.Column("attempts", sa.Integer, nullable=False),
    sa.Column("kind", sa.Text),
    sa.Column("http_status", sa.Integer),
    sa.Column("message", sa.Text),
    sa.Index("kubun_connector_operation_event_row_idx", "caller_did", "operation_id", "id"),
    sa.Index("kubun_connector_operation_event_log_idx", "tx", "id"),
    # The events the dashboard's charts count, by time (``store.stats``): the outcomes and
    # claims only, so lease and send-marker events add no entry.
    sa.Index(
        "kubun_connector_operation_event_at_idx",
        "at",
        "action",
        "to_state",
        postgresql_where=sa.text(COUNTED_EVENTS),
        sqlite_where=sa.text(COUNTED_EVENTS),
    ),
    sqlite_autoincrement=True,
)
"""The operations' event log (``store.events``): one row per applied write of an operation,
with the operation's key and the envelope fields its readers filter by and its viewers' rights
read (owner, connector, account). ``tx`` orders the log for readers (``store.events``: the
writing transaction's id on PostgreSQL, 0 on SQLite)."""

watch_event = sa.Table(
    "kubun_connector_watch_event",
    metadata,
    sa.Column("id", EventId, sa.Identity(), primary_key=True),
    sa.Column("tx", sa.BigInteger, nullable=False),
    sa.Column("owner_did", Key, nullable=False),
    sa.Column("connector_name", Key, nullable=False),
    sa.Column("model", Key, nullable=False),
    sa.Column("account_key", Key, nullable=False),
    sa.Column("source_id", Key, nullable=False),
    sa.Column("at", sa.BigInteger, nullable=False),
    sa.Column("action", sa.Text, nullable=False),
    sa.Column("actor_did", sa.Text),
    sa.Column("generation", sa.Integer, nullable=False),
    sa.Column("to_status", sa.Text, nullable=False),
    sa.Column("verification_attempts", sa.Integer, nullable=False),
    sa.Column("message", sa.Text),
    sa.Index(
        "kubun_connector_watch_event_row_idx",
        "owner_did",
        "connector_name",
        "model",
        "account_key",
        "source_id",
        "id",
    ),
    sa.Index("kubun_connector_watch_event_log_idx", "tx", "id"),
    sqlite_autoincrement=True,
)
"""The watches' event log (``store.events``): one row per applied write of a watch."""

sign_in = sa.Table(
    "kubun_connector_sign_in",
    metadata,
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
"""People's sign-ins to the dashboard and GraphiQL (``store.sign_in``): a one-time code
(kept as its SHA-256 only) for ``sub`` with ``scope``, usable until ``code_expires_at``; once
used (``signed_in_at``), the session it opened, known by ``session_id``, valid until
``expires_at`` (moved on by each renewal) unless ``revoked_at`` (signed out)."""

event_collected = sa.Table(
    "kubun_connector_event_collected",
    metadata,
    sa.Column("log", sa.Text, primary_key=True),
    sa.Column("tx", sa.BigInteger, nullable=False),
    sa.Column("id", sa.BigInteger, nullable=False),
)
"""How far each event log was collected (``store.events``): per log table's name (``log``),
the position ``(tx, id)`` of the newest event collected from it. It only moves forward; a
log never collected has no row."""
