"""Frozen records the store returns, built from rows by ``from_row``.

Times are epoch milliseconds (int). JSON columns are stored as text and decoded here,
whatever the driver hands back.
"""

import json
from collections.abc import Callable
from dataclasses import dataclass, fields
from operator import attrgetter
from typing import Annotated, Any, Final, cast

from store.database import Row

ATTEMPTED: Final = "attempted"
COMMITTED: Final = "committed"
FAILED: Final = "failed"
SUPERSEDED: Final = "superseded"
OPERATION_STATES: Final = frozenset({ATTEMPTED, COMMITTED, FAILED, SUPERSEDED})
TERMINAL_STATES: Final = frozenset({COMMITTED, FAILED, SUPERSEDED})
TERMINAL_STATE_CODES: Final = {COMMITTED: 1, FAILED: 2, SUPERSEDED: 3}
"""Each terminal state's code in a tombstone's ``final_state`` (a SMALLINT: two bytes where
the state's text takes up to eleven)."""

DEFER_REASONS: Final = frozenset({"offline", "auth"})

PENDING_VERIFICATION: Final = "pending_verification"
VERIFIED: Final = "verified"
REPAIR_FAILED: Final = "repair_failed"
VERIFICATION_STATUSES: Final = frozenset({PENDING_VERIFICATION, VERIFIED, REPAIR_FAILED})


EpochMs = Annotated[int, "epoch ms"]
"""A time: milliseconds since the Unix epoch."""
JsonValue = Annotated[Any, "JSON"]
"""Any JSON value, stored as text."""


def decode_json(value: Any) -> Any:
    """Decode a JSON text column (``null``, what a claim without a ``reissueIntent`` stores,
    without the decoder); a value the driver already decoded passes through."""
    if isinstance(value, str):
        return None if value == "null" else json.loads(value)
    return value


def row_reader(
    names: tuple[str, ...], json_columns: tuple[str, ...] = ()
) -> Callable[[Row], dict[str, Any]]:
    """The values of the columns ``names`` of a row, by name, each of ``json_columns``
    decoded (``decode_json``; NULL stays None): the keyword arguments of a record's
    constructor. A row whose columns begin with ``names`` in order (a ``RETURNING`` or
    ``SELECT`` of the whole table, perhaps with a size or a prior token after it) is copied
    in one step, the columns after them left out; another is read column by column. Raises
    ``KeyError`` for a column the row lacks."""
    width = len(names)

    def read(row: Row) -> dict[str, Any]:
        values = dict(row)
        columns = tuple(values)
        if columns != names:
            if columns[:width] == names:
                for extra in columns[width:]:
                    del values[extra]
            else:
                values = {name: row[name] for name in names}
        for name in json_columns:
            value = values[name]
            if value is not None:
                values[name] = decode_json(value)
        return values

    return read


@dataclass(frozen=True, kw_only=True)
class OperationKey:
    """The key of an operation: the caller that claimed it and the caller's id of it."""

    caller_did: str
    operation_id: str


OPERATION_KEY: Final = tuple(field.name for field in fields(OperationKey))


@dataclass(frozen=True, kw_only=True)
class OperationEnvelope(OperationKey):
    """A claim's immutable envelope under its key (seed ``ClaimOperationInput`` less the
    lease and the optional values): a second claim of the key with any other envelope is a
    conflict."""

    owner_did: str
    connector_name: str
    model: str
    op: str
    account_key: str
    target: str
    source_id: str
    deterministic_event_id: str
    payload_hash: str

    def matches(self, stored: "OperationEnvelope") -> bool:
        """True when every envelope field equals the stored operation's."""
        return all(getattr(self, name) == getattr(stored, name) for name in ENVELOPE)

    @property
    def identity(self) -> "WatchIdentity":
        """The identity of the watch this operation's finalize arms."""
        return WatchIdentity.of(self)


ENVELOPE: Final = tuple(
    field.name for field in fields(OperationEnvelope) if field.name not in OPERATION_KEY
)
"""The envelope fields a repeated claim must match (not the key, which it is found by)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class OperationClaim(OperationEnvelope):
    """The input of ``claim_operation`` (seed ``ClaimOperationInput``): the key, the
    envelope, the claimant's lease and the optional values (``reissue_intent`` any JSON
    value). The lease is ``lease_token`` until ``lease_expires_at`` (epoch ms) or for
    ``lease_ms`` from the store's now (one of the two); with none of the three the claim
    only enqueues: the operation is claimed unleased, due at once for ``leaseOperations``."""

    lease_token: str | None = None
    lease_expires_at: EpochMs | None = None
    lease_ms: int | None = None
    reissue_intent: JsonValue = None
    provider_etag: str | None = None
    document_id: str | None = None


@dataclass(frozen=True, kw_only=True)
class _NodeKeyed(OperationKey):
    node_key: str


@dataclass(frozen=True, slots=True, kw_only=True)
class OperationRecord(OperationEnvelope, _NodeKeyed):
    """One write-back operation envelope (a row of ``kubun_connector_operation``): the key,
    ``node_key`` (the Relay node id), the envelope, then the state. The bases order the
    fields as the table's columns: key, node key, envelope. A field with a default is what a
    fresh claim stores when the claim does not name it."""

    reissue_intent: JsonValue
    provider_etag: str | None
    document_id: str | None
    result_entity: JsonValue = None
    state: str
    attempts: int = 0
    next_attempt_at: EpochMs | None = None
    defer_reason: str | None = None
    last_kind: str | None = None
    last_http_status: int | None = None
    last_error: str | None = None
    send_marker: str | None = None
    version: int = 0
    incarnation: str
    lease_token: str | None
    lease_expires_at: EpochMs | None
    created_at: EpochMs
    updated_at: EpochMs
    reissued_from: str | None = None
    reissued_as: str | None = None

    @classmethod
    def from_row(cls, row: Row) -> "OperationRecord":
        """Build the record from a full row, decoding the JSON columns."""
        return cls(**_operation_values(row))

    @property
    def order_key(self) -> tuple[int, str, str]:
        """The ``listTrackedOperations`` order: created_at, then caller and operation id."""
        return (self.created_at, self.caller_did, self.operation_id)


OPERATION_FIELDS: Final = tuple(field.name for field in fields(OperationRecord))
"""Every field of an operation, in the table's column order."""

_operation_values = row_reader(OPERATION_FIELDS, ("reissue_intent", "result_entity"))


@dataclass(frozen=True, slots=True, kw_only=True)
class TombstoneRecord:
    """What a collected operation leaves under its key (a row of
    ``kubun_connector_operation_tombstone``, ``store.tombstones``): the digest of its key,
    the digest of its key and envelope, the terminal state it was collected in (committed,
    failed or superseded) and when it was collected (epoch ms). A claim of that key answers
    ``collected`` (or ``conflict``) until the sweeper deletes the tombstone,
    ``RETAIN_KEYS_SECONDS`` after ``collected_at``."""

    key_digest: bytes
    envelope_digest: bytes
    final_state: str
    collected_at: EpochMs

    @classmethod
    def from_row(cls, row: Row) -> "TombstoneRecord":
        """Build the record from a full row, the state's code read back as its name."""
        states = {code: state for state, code in TERMINAL_STATE_CODES.items()}
        return cls(
            key_digest=bytes(row["key_digest"]),
            envelope_digest=bytes(row["envelope_digest"]),
            final_state=states[row["final_state"]],
            collected_at=row["collected_at"],
        )


@dataclass(frozen=True)
class _WatchIdentityParts:
    owner_did: str
    connector_name: str
    model: str
    account_key: str
    source_id: str


WATCH_IDENTITY: Final = tuple(field.name for field in fields(_WatchIdentityParts))
"""The five parts of a watch's identity, in key order."""

_identity_parts = attrgetter(*WATCH_IDENTITY)


@dataclass(frozen=True, slots=True)
class WatchIdentity(_WatchIdentityParts):
    """The key of a projection watch: one provider entity of one connector account."""

    @classmethod
    def of(cls, holder: object) -> "WatchIdentity":
        """The identity named by ``holder``'s five same-named attributes: a watch, the
        operation whose finalize arms it, or an input carrying the five parts. Raises
        ``AttributeError`` when ``holder`` lacks one."""
        return cls(*_identity_parts(holder))

    @property
    def parts(self) -> tuple[str, str, str, str, str]:
        """The five parts in key order (the order of watch lists and their cursors)."""
        return cast(tuple[str, str, str, str, str], _identity_parts(self))


@dataclass(frozen=True, slots=True, kw_only=True)
class WatchRecord(_WatchIdentityParts):
    """One verify/repair watch (a row of ``kubun_connector_projection_watch``): its
    identity's five parts, then its state."""

    document_id: str | None
    repair_generation: int
    verification_status: str
    verification_attempts: int
    observed_winner_digest: str | None
    verified_state_digest: str | None
    next_attempt_at: EpochMs | None
    claimed_until: EpochMs | None
    defer_reason: str | None
    last_error: str | None = None
    version: int
    created_at: EpochMs
    updated_at: EpochMs

    @classmethod
    def from_row(cls, row: Row) -> "WatchRecord":
        """Build the record from a full row."""
        return cls(**_watch_values(row))

    @property
    def order_key(self) -> tuple[str, str, str, str, str]:
        """The order of watch lists and their keyset cursors: the identity's five parts."""
        return self.identity.parts

    @property
    def identity(self) -> WatchIdentity:
        """The watch's key."""
        return WatchIdentity.of(self)


WATCH_FIELDS: Final = tuple(field.name for field in fields(WatchRecord))
"""Every field of a watch, in the table's column order."""

_watch_values = row_reader(WATCH_FIELDS)


@dataclass(frozen=True, slots=True, kw_only=True)
class OperationEventRecord(OperationKey):
    """One event of an operation's log (``store.events``): ``sequence`` its opaque place in
    the log, ``at`` its write's time (epoch ms), ``action`` (``store.events``
    ``OPERATION_ACTIONS``), ``actor_did`` who wrote (None: the system), the state before
    (None for the claim) and after, the attempts after, and for a record its ``kind``,
    ``http_status`` and ``message`` (a deferral: its ``message``)."""

    sequence: str
    at: EpochMs
    action: str
    actor_did: str | None
    from_state: str | None
    to_state: str
    attempts: int
    kind: str | None
    http_status: int | None
    message: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class WatchEventRecord(_WatchIdentityParts):
    """One event of a watch's log (``store.events``), as ``OperationEventRecord``: the
    generation and verification status (None before the watch existed) and attempts, and a
    verification's ``message``."""

    sequence: str
    at: EpochMs
    action: str
    actor_did: str | None
    generation: int
    from_status: str | None
    to_status: str
    verification_attempts: int
    message: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class AccountRecord:
    """One provider account of a connector (a row of ``kubun_connector_account``), shared by
    every owner that names it: ``max_in_flight`` caps its live leases (None: no cap),
    ``throttled_until`` (epoch ms) stops leasing for it until then (None: never throttled),
    ``paused_at`` (epoch ms) says since when it is paused on its own (None: not paused on its
    own; its connector may still be paused as a whole). A row is created the first time a
    claim names the account, or by a limit, a throttle or a pause."""

    connector_name: str
    account_key: str
    max_in_flight: int | None = None
    throttled_until: EpochMs | None = None
    updated_at: EpochMs
    paused_at: EpochMs | None = None

    @classmethod
    def from_row(cls, row: Row) -> "AccountRecord":
        """Build the record from a full row."""
        return cls(**_account_values(row))


ACCOUNT_FIELDS: Final = tuple(field.name for field in fields(AccountRecord))
"""Every field of an account, in the table's column order."""

_account_values = row_reader(ACCOUNT_FIELDS)


@dataclass(frozen=True, slots=True, kw_only=True)
class AccountLoad:
    """An account and its live leases now (``in_flight``: attempted operations of the
    account whose lease has not lapsed), and whether it is paused (on its own or with its
    whole connector: ``paused``), as ``list_accounts`` reads them."""

    account: AccountRecord
    in_flight: int
    paused: bool = False


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
    created_at: EpochMs
    redirect_url: str
    scopes: list[str]
    incremental: bool
    expires_at: EpochMs

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
    checkpoint: JsonValue
    last_synced_at: str
    entity_count: int
    status: str
    error: str | None
    recovery: JsonValue
    version: int
    incarnation: str
    updated_at: EpochMs

    @classmethod
    def from_row(cls, row: Row) -> "SyncStateRecord":
        """Build the record from a full row, decoding the JSON columns (NULL stays None)."""
        values = {name: row[name] for name in cls.__slots__}
        values["checkpoint"] = decode_json(values["checkpoint"])
        values["recovery"] = decode_json(values["recovery"])
        return cls(**values)
