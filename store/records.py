"""Frozen records the store returns, built from rows by ``from_row``.

Times are epoch milliseconds (int). JSON columns are stored as text and decoded here,
whatever the driver hands back.
"""

import json
from dataclasses import dataclass
from typing import Any, Final

from store.database import Row

ATTEMPTED: Final = "attempted"
COMMITTED: Final = "committed"
FAILED: Final = "failed"
SUPERSEDED: Final = "superseded"
OPERATION_STATES: Final = frozenset({ATTEMPTED, COMMITTED, FAILED, SUPERSEDED})
TERMINAL_STATES: Final = frozenset({COMMITTED, FAILED, SUPERSEDED})

DEFER_REASONS: Final = frozenset({"offline", "auth"})

PENDING_VERIFICATION: Final = "pending_verification"
VERIFIED: Final = "verified"
REPAIR_FAILED: Final = "repair_failed"
VERIFICATION_STATUSES: Final = frozenset({PENDING_VERIFICATION, VERIFIED, REPAIR_FAILED})


def decode_json(value: Any) -> Any:
    """Decode a JSON text column; a value the driver already decoded passes through."""
    return json.loads(value) if isinstance(value, str) else value


@dataclass(frozen=True, slots=True)
class OperationRecord:
    """One write-back operation envelope (a row of ``kubun_connector_operation``)."""

    caller_did: str
    operation_id: str
    node_key: str
    owner_did: str
    connector_name: str
    model: str
    op: str
    account_key: str
    target: str
    source_id: str
    deterministic_event_id: str
    payload_hash: str
    reissue_intent: Any
    provider_etag: str | None
    document_id: str | None
    result_entity: Any
    state: str
    attempts: int
    next_attempt_at: int | None
    defer_reason: str | None
    last_kind: str | None
    last_http_status: int | None
    send_marker: str | None
    version: int
    incarnation: str
    lease_token: str | None
    lease_expires_at: int | None
    created_at: int
    updated_at: int

    @classmethod
    def from_row(cls, row: Row) -> "OperationRecord":
        """Build the record from a full row, decoding the JSON columns."""
        values = {name: row[name] for name in cls.__slots__}
        values["reissue_intent"] = decode_json(values["reissue_intent"])
        values["result_entity"] = decode_json(values["result_entity"])
        return cls(**values)

    @property
    def order_key(self) -> tuple[int, str, str]:
        """The ``listTrackedOperations`` order: created_at, then caller and operation id."""
        return (self.created_at, self.caller_did, self.operation_id)


@dataclass(frozen=True, slots=True)
class WatchIdentity:
    """The key of a projection watch: one provider entity of one connector account."""

    owner_did: str
    connector_name: str
    model: str
    account_key: str
    source_id: str


@dataclass(frozen=True, slots=True)
class WatchRecord:
    """One verify/repair watch (a row of ``kubun_connector_projection_watch``)."""

    owner_did: str
    connector_name: str
    model: str
    account_key: str
    source_id: str
    document_id: str | None
    repair_generation: int
    verification_status: str
    verification_attempts: int
    observed_winner_digest: str | None
    verified_state_digest: str | None
    next_attempt_at: int | None
    claimed_until: int | None
    defer_reason: str | None
    version: int
    created_at: int
    updated_at: int

    @classmethod
    def from_row(cls, row: Row) -> "WatchRecord":
        """Build the record from a full row."""
        return cls(**{name: row[name] for name in cls.__slots__})

    @property
    def order_key(self) -> tuple[str, str, str, str, str]:
        """The order of watch lists and their keyset cursors: the identity's five parts."""
        return (
            self.owner_did,
            self.connector_name,
            self.model,
            self.account_key,
            self.source_id,
        )

    @property
    def identity(self) -> WatchIdentity:
        """The watch's key."""
        return WatchIdentity(
            self.owner_did, self.connector_name, self.model, self.account_key, self.source_id
        )


SYNC_IDLE: Final = "idle"
SYNC_STATUSES: Final = frozenset({SYNC_IDLE, "syncing", "error"})


@dataclass(frozen=True, slots=True)
class PendingAuthRecord:
    """The OAuth PKCE state kept between the authorize redirect and the callback (a row of
    ``kubun_connector_pending_auth``; the seed's ``PendingAuthRecord``).

    ``code_verifier`` is the PKCE secret. ``created_at``/``expires_at`` are epoch ms;
    ``scopes`` a list of strings (stored as JSON text); ``incremental`` a flag (stored as
    ``is_incremental`` 0/1).
    """

    state: str
    code_verifier: str
    provider: str
    owner_did: str
    owner_wrappable_did: str | None
    controller_wrappable_did: str | None
    created_at: int
    redirect_url: str
    scopes: list[str]
    incremental: bool
    expires_at: int

    @classmethod
    def from_row(cls, row: Row) -> "PendingAuthRecord":
        """Build the record from a full row: scopes decoded, ``is_incremental`` as a bool."""
        values = {name: row[name] for name in cls.__slots__ if name != "incremental"}
        values["scopes"] = list(decode_json(values["scopes"]))
        return cls(**values, incremental=row["is_incremental"] == 1)


@dataclass(frozen=True, slots=True)
class SyncStateRecord:
    """The sync checkpoint of one (connector, owner) (a row of ``kubun_connector_sync_state``).

    ``checkpoint`` and ``recovery`` are any JSON values (or None). ``last_synced_at`` is the
    seed's ISO-8601 text. ``status`` is ``idle``, ``syncing`` or ``error``. ``version`` and
    ``incarnation`` are what ``update_sync_progress`` compares; ``updated_at`` is epoch ms.
    """

    connector_name: str
    owner_did: str
    checkpoint: Any
    recovery: Any
    last_synced_at: str
    entity_count: int
    status: str
    error: str | None
    version: int
    incarnation: str
    updated_at: int

    @classmethod
    def from_row(cls, row: Row) -> "SyncStateRecord":
        """Build the record from a full row, decoding the JSON columns (NULL stays None)."""
        values = {name: row[name] for name in cls.__slots__}
        values["checkpoint"] = decode_json(values["checkpoint"])
        values["recovery"] = decode_json(values["recovery"])
        return cls(**values)
