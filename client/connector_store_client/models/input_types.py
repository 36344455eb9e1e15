from typing import Any, Optional

from pydantic import Field

from .base_model import BaseModel
from .enums import DeferReason, OperationRun, OperationState


class ClaimOperationInput(BaseModel):
    """Claim an operation key once; the envelope is then immutable."""

    caller_did: str = Field(alias="callerDID")
    "The DID of the caller that claimed the operation (first half of its key)."
    operation_id: str = Field(alias="operationID")
    "The caller's id of the operation (second half of its key)."
    owner_did: str = Field(alias="ownerDID")
    "The DID of the owner of the data."
    connector_name: str = Field(alias="connectorName")
    "The connector's name (e.g. `calendar`)."
    model: str
    "The provider model of the entity (e.g. `Event`)."
    op: str
    "The kind of write, as the connector names it (e.g. `update`)."
    account_key: str = Field(alias="accountKey")
    "The provider account the entity belongs to."
    target: str
    "Where the write goes at the provider (a path or resource name)."
    source_id: str = Field(alias="sourceID")
    "The provider's id of the entity."
    deterministic_event_id: str = Field(alias="deterministicEventID")
    "An id derived from the change, the same on every retry."
    payload_hash: str = Field(alias="payloadHash")
    "A digest of the payload to write; the envelope's identity."
    lease_token: Optional[str] = Field(alias="leaseToken", default=None)
    "The lease token of the first attempt (the claim takes the lease where leasing allows it); omitted (with no expiry): the claim enqueues."
    lease_expires_at: Optional[int] = Field(alias="leaseExpiresAt", default=None)
    "When the first lease ends (epoch ms, 1,000 to 3,600,000 ms after the store's now); give this or leaseMs with a leaseToken."
    lease_ms: Optional[int] = Field(alias="leaseMs", default=None)
    "The first lease lasts this many ms from the store's now (1,000 to 3,600,000), instead of leaseExpiresAt. Omit leaseToken, leaseExpiresAt and leaseMs to enqueue: the operation is claimed unleased, due at once for leaseOperations."
    reissue_intent: Optional[Any] = Field(alias="reissueIntent", default=None)
    "What a reissue must carry (JSON), if anything."
    provider_etag: Optional[str] = Field(alias="providerEtag", default=None)
    "The provider's ETag the write starts from, if known."
    document_id: Optional[str] = Field(alias="documentID", default=None)
    "The document the entity belongs to, if known."


class ClaimOperationsInput(BaseModel):
    """Claim many operation keys, each as `claimOperation`."""

    items: list["ClaimOperationInput"]
    "1 to 500 items, each its own compare-and-set, applied as its single mutation would; a bad item, one the token may not write, or two naming the same key refuse the whole request (`extensions.field` names `items[i].<field>`) and nothing is written."


class FinalizeOperationInput(BaseModel):
    """Commit a live operation and arm the watch of its entity."""

    caller_did: str = Field(alias="callerDID")
    "The DID of the caller that claimed the operation (first half of its key)."
    operation_id: str = Field(alias="operationID")
    "The caller's id of the operation (second half of its key)."
    version: int
    "The operation's version the caller read."
    lease_token: str = Field(alias="leaseToken")
    "The lease token the caller holds: compared with the stored token, not the clock (a lapsed lease still settles until another token takes it or an operator frees it)."
    due_at: Optional[int] = Field(alias="dueAt", default=None)
    "When the armed watch's verification is due (epoch ms); give this or delayMs."
    result_entity: Optional[Any] = Field(alias="resultEntity", default=None)
    "The entity the provider returned (JSON)."
    provider_etag: Optional[str] = Field(alias="providerEtag", default=None)
    "The provider's ETag after the write, if known."
    document_id: Optional[str] = Field(alias="documentID", default=None)
    "The document id to record, when it became known."
    delay_ms: Optional[int] = Field(alias="delayMs", default=None)
    "The armed watch's verification is due this many ms after the store's now (0 to 2,147,483,647), instead of dueAt: no serverTime round trip."


class FinalizeOperationsInput(BaseModel):
    """Finalize many operations, each as `finalizeOperation`."""

    items: list["FinalizeOperationInput"]
    "1 to 500 items, each its own compare-and-set, applied as its single mutation would; a bad item, one the token may not write, or two naming the same key refuse the whole request (`extensions.field` names `items[i].<field>`) and nothing is written."


class LeaseOperationsInput(BaseModel):
    """Lease due operations: leaseMs 1,000 to 3,600,000, limit 1 to 500 (default 10), optionally of one connector and of some of its accounts (at most 500)."""

    lease_token: str = Field(alias="leaseToken")
    "The token the leases are held under."
    lease_ms: int = Field(alias="leaseMs")
    "How long each lease lasts from the store's now, in ms (1,000 to 3,600,000)."
    limit: Optional[int] = 10
    "At most this many operations (1 to 500, default 10)."
    connector_name: Optional[str] = Field(alias="connectorName", default=None)
    "Only this connector's operations; omitted: all."
    account_keys: Optional[list[str]] = Field(alias="accountKeys", default=None)
    "Only operations of these accounts (at most 500); an empty list leases nothing; omitted: all."


class MarkSendStartedInput(BaseModel):
    """Mark the current attempt as sent by the run `marker`."""

    caller_did: str = Field(alias="callerDID")
    "The DID of the caller that claimed the operation (first half of its key)."
    operation_id: str = Field(alias="operationID")
    "The caller's id of the operation (second half of its key)."
    lease_token: str = Field(alias="leaseToken")
    "The lease token the caller holds: compared with the stored token, not the clock (a lapsed lease still settles until another token takes it or an operator frees it)."
    marker: str
    "The id of the run that sends the attempt."


class MarkSendsStartedInput(BaseModel):
    """Mark many attempts as sent, each as `markSendStarted`."""

    items: list["MarkSendStartedInput"]
    "1 to 500 items, each its own compare-and-set, applied as its single mutation would; a bad item, one the token may not write, or two naming the same key refuse the whole request (`extensions.field` names `items[i].<field>`) and nothing is written."


class OperationFilter(BaseModel):
    """Which operations to list; every field given must match."""

    node_key: Optional[str] = Field(alias="nodeKey", default=None)
    "Only the operation with this node key."
    caller_did: Optional[str] = Field(alias="callerDID", default=None)
    "Only operations of this caller."
    operation_id: Optional[str] = Field(alias="operationID", default=None)
    "Only operations with this operation id."
    visible_to: Optional[str] = Field(alias="visibleTo", default=None)
    "Operations this DID called or owns."
    connector_name: Optional[str] = Field(alias="connectorName", default=None)
    "Only operations of this connector."
    states: Optional[list[OperationState]] = None
    "An empty list matches nothing."
    document_i_ds: Optional[list[str]] = Field(alias="documentIDs", default=None)
    "An empty list matches nothing."
    owner_did: Optional[str] = Field(alias="ownerDID", default=None)
    "The DID of the owner of the data."
    account_key: Optional[str] = Field(alias="accountKey", default=None)
    "The provider account the entity belongs to."
    kind: Optional[str] = None
    "Operations whose last recorded outcome had this kind."
    last_error: Optional[str] = Field(alias="lastError", default=None)
    "Operations whose last error message is exactly this (a failureGroups group's message)."
    updated_after: Optional[int] = Field(alias="updatedAfter", default=None)
    "Operations last written at or after this time."
    updated_before: Optional[int] = Field(alias="updatedBefore", default=None)
    "Operations last written before this time (not earlier than updatedAfter)."
    run: Optional[OperationRun] = None
    "Only ATTEMPTED operations that stand so now: leased, due, scheduled or deferred."
    search: Optional[str] = None
    "Operations whose operationID, target or sourceID holds this text (1 to 200 characters), in any case of its ASCII letters: a part of an id finds it."


class OperationKeyInput(BaseModel):
    """The key of an operation."""

    caller_did: str = Field(alias="callerDID")
    "The DID of the caller that claimed the operation (first half of its key)."
    operation_id: str = Field(alias="operationID")
    "The caller's id of the operation (second half of its key)."


class RecordOperationInput(BaseModel):
    """CAS an operation from `fromState` at `version` to `toState`."""

    caller_did: str = Field(alias="callerDID")
    "The DID of the caller that claimed the operation (first half of its key)."
    operation_id: str = Field(alias="operationID")
    "The caller's id of the operation (second half of its key)."
    from_state: OperationState = Field(alias="fromState")
    "The state the operation must be in."
    to_state: OperationState = Field(alias="toState")
    "The state to move it to."
    version: int
    "The row's version, raised by each state transition (recordOperation, finalizeOperation, cancelOperations); lease, mark and defer writes leave it. Compare-and-set writes present it."
    lease_token: str = Field(alias="leaseToken")
    "The lease token the caller holds: compared with the stored token, not the clock (a lapsed lease still settles until another token takes it or an operator frees it)."
    provider_etag: Optional[str] = Field(alias="providerEtag", default=None)
    "The provider's ETag after this attempt, if known."
    count_attempt: Optional[bool] = Field(alias="countAttempt", default=None)
    "Count this attempt (default true)."
    refund_attempt: Optional[bool] = Field(alias="refundAttempt", default=None)
    "Take one counted attempt back instead of counting one (only when attempts > 0 and the marker is absent or `sendMarker`; default false)."
    send_marker: Optional[str] = Field(alias="sendMarker", default=None)
    "The run that marked the attempt, when it did."
    next_attempt_at: Optional[int] = Field(alias="nextAttemptAt", default=None)
    "When the operation is due again (epoch ms); null leaves it as is."
    delay_ms: Optional[int] = Field(alias="delayMs", default=None)
    "Due again this many ms after the store's now (0 to 2,147,483,647), instead of nextAttemptAt: no serverTime round trip."
    defer_reason: Optional[DeferReason] = Field(alias="deferReason", default=None)
    "Why it waits; null when it does not."
    kind: Optional[str] = None
    "The kind of outcome, in the worker's words (kept as `lastKind`); `cancelled` is refused: it is cancelOperations' own."
    http_status: Optional[int] = Field(alias="httpStatus", default=None)
    "The provider's HTTP status of this attempt."
    error_message: Optional[str] = Field(alias="errorMessage", default=None)
    "What went wrong, for people (at most 2,048 bytes of UTF-8; longer is BAD_USER_INPUT naming errorMessage, and nothing is written): kept on the write's event and as lastError until the next such write; null clears lastError."


class RecordOperationsInput(BaseModel):
    """Record many operations, each as `recordOperation`."""

    items: list["RecordOperationInput"]
    "1 to 500 items, each its own compare-and-set, applied as its single mutation would; a bad item, one the token may not write, or two naming the same key refuse the whole request (`extensions.field` names `items[i].<field>`) and nothing is written."


class ReleaseLeasesInput(BaseModel):
    """Release the leases of these operations that the token holds (expired or not) or where none is held."""

    lease_token: str = Field(alias="leaseToken")
    "The token that holds the leases."
    keys: list["OperationKeyInput"]
    "The operations whose leases to release (at most 500)."


class RenewLeasesInput(BaseModel):
    """Renew the leases the token holds and has not let lapse on these operations (at most 500 keys) until now + leaseMs (1,000 to 3,600,000)."""

    lease_token: str = Field(alias="leaseToken")
    "The token that holds the leases."
    lease_ms: int = Field(alias="leaseMs")
    "How long each lease lasts from the store's now, in ms (1,000 to 3,600,000)."
    keys: list["OperationKeyInput"]
    "The operations whose leases to renew (at most 500)."


class ThrottleAccountInput(BaseModel):
    """Lease nothing of an account for retryAfterMs (1 to 86,400,000) from now."""

    connector_name: str = Field(alias="connectorName")
    "The connector's name (e.g. `calendar`)."
    account_key: str = Field(alias="accountKey")
    "The provider account the entity belongs to."
    retry_after_ms: int = Field(alias="retryAfterMs")
    "How long to lease nothing, in ms from the store's now (1 to 86,400,000)."


ClaimOperationsInput.model_rebuild()
FinalizeOperationsInput.model_rebuild()
MarkSendsStartedInput.model_rebuild()
RecordOperationsInput.model_rebuild()
ReleaseLeasesInput.model_rebuild()
RenewLeasesInput.model_rebuild()
