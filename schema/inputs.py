"""Mutation inputs (``<MutationName>Input``) and query filters, in the seed's field names."""

import strawberry

from schema.enums import (
    ArmReason,
    DeferReason,
    OperationRun,
    OperationState,
    SyncStatus,
    VerificationStatus,
)
from schema.leaf_inputs import leaf_input
from schema.records import mirrors
from schema.scalars import JSON, EpochMillis
from store.operations import Finalize
from store.records import OperationClaim, WatchIdentity


@leaf_input
@strawberry.input(description="Claim an operation key once; the envelope is then immutable.")
@mirrors(OperationClaim, defaults=True)
class ClaimOperationInput:
    pass


USE_LEASE_TOKEN = "Use leaseToken, as every other input names the lease token."
USE_LEASE_EXPIRY = "Use leaseMs (or leaseExpiresAt), as every other input names the lease's end."


@strawberry.input(
    description="Take the lease of an ATTEMPTED operation when no lease is held, the lease "
    "expired (by the store's clock), or it is already this token's, and leasing allows it."
)
class AcquireLeaseInput:
    caller_did: str
    operation_id: str
    lease_token: str | None = None
    lease_expires_at: EpochMillis | None = None
    lease_ms: int | None = None
    token: str | None = strawberry.field(default=None, deprecation_reason=USE_LEASE_TOKEN)
    expires_at: EpochMillis | None = strawberry.field(
        default=None, deprecation_reason=USE_LEASE_EXPIRY
    )


@strawberry.input(
    description="Move the lease's expiry, for the token that holds the lease (expired or not, "
    "in any state)."
)
class RenewLeaseInput:
    caller_did: str
    operation_id: str
    lease_token: str | None = None
    lease_expires_at: EpochMillis | None = None
    lease_ms: int | None = None
    token: str | None = strawberry.field(default=None, deprecation_reason=USE_LEASE_TOKEN)
    expires_at: EpochMillis | None = strawberry.field(
        default=None, deprecation_reason=USE_LEASE_EXPIRY
    )


@strawberry.input(
    description="Drop the lease, for the token that holds it (expired or not, in any state) or "
    "when no lease is held."
)
class ReleaseLeaseInput:
    caller_did: str
    operation_id: str
    lease_token: str | None = None
    token: str | None = strawberry.field(default=None, deprecation_reason=USE_LEASE_TOKEN)


@leaf_input
@strawberry.input(description="Mark the current attempt as sent by the run `marker`.")
class MarkSendStartedInput:
    caller_did: str
    operation_id: str
    lease_token: str
    marker: str


@strawberry.input(description="Reschedule a live operation whose lease is free or yours.")
class DeferOperationInput:
    caller_did: str
    operation_id: str
    next_attempt_at: EpochMillis | None = None
    delay_ms: int | None = None
    reason: DeferReason | None = None
    lease_token: str | None = None
    error_message: str | None = None


@leaf_input
@strawberry.input(description="CAS an operation from `fromState` at `version` to `toState`.")
class RecordOperationInput:
    caller_did: str
    operation_id: str
    from_state: OperationState
    to_state: OperationState
    version: int
    lease_token: str
    provider_etag: str | None = None
    count_attempt: bool | None = None
    refund_attempt: bool | None = None
    send_marker: str | None = None
    next_attempt_at: EpochMillis | None = None
    delay_ms: int | None = None
    defer_reason: DeferReason | None = None
    kind: str | None = None
    http_status: int | None = None
    error_message: str | None = None


@leaf_input
@strawberry.input(description="Commit a live operation and arm the watch of its entity.")
@mirrors(Finalize, defaults=True)
class FinalizeOperationInput:
    due_at: EpochMillis | None = None
    delay_ms: int | None = None


@strawberry.input(description="Which operations to list; every field given must match.")
class OperationFilter:
    node_key: str | None = None
    caller_did: str | None = None
    operation_id: str | None = None
    visible_to: str | None = strawberry.field(
        default=None, description="Operations this DID called or owns."
    )
    connector_name: str | None = None
    states: list[OperationState] | None = strawberry.field(
        default=None, description="An empty list matches nothing."
    )
    document_ids: list[str] | None = strawberry.field(
        default=None, description="An empty list matches nothing."
    )
    owner_did: str | None = None
    account_key: str | None = None
    kind: str | None = strawberry.field(
        default=None, description="Operations whose last recorded outcome had this kind."
    )
    last_error: str | None = strawberry.field(
        default=None,
        description="Operations whose last error message is exactly this (a failureGroups "
        "group's message).",
    )
    updated_after: EpochMillis | None = strawberry.field(
        default=None, description="Operations last written at or after this time."
    )
    updated_before: EpochMillis | None = strawberry.field(
        default=None,
        description="Operations last written before this time (not earlier than updatedAfter).",
    )
    run: OperationRun | None = strawberry.field(
        default=None,
        description="Only ATTEMPTED operations that stand so now: leased, due, scheduled or "
        "deferred.",
    )
    search: str | None = strawberry.field(
        default=None,
        description="Operations whose operationID, target or sourceID holds this text (1 to 200 "
        "characters), in any case of its ASCII letters: a part of an id finds it.",
    )


@strawberry.input(description="The key of a watch: one provider entity of one connector account.")
@mirrors(WatchIdentity)
class WatchIdentityInput:
    pass


@strawberry.input(description="Which watches to list; every field given must match.")
class WatchFilter:
    document_ids: list[str] | None = strawberry.field(
        default=None, description="An empty list matches nothing."
    )
    owner_did: str | None = None
    connector_name: str | None = None
    model: str | None = None
    status: VerificationStatus | None = None
    due_before: EpochMillis | None = strawberry.field(
        default=None, description="Watches whose nextAttemptAt is set and earlier than this."
    )
    account_key: str | None = None
    updated_after: EpochMillis | None = strawberry.field(
        default=None, description="Watches last written at or after this time."
    )
    updated_before: EpochMillis | None = strawberry.field(
        default=None,
        description="Watches last written before this time (not earlier than updatedAfter).",
    )
    source_id: str | None = strawberry.field(
        default=None,
        description="Only watches of this provider entity (with ownerDID, connectorName, "
        "model and accountKey: one watch).",
    )


@strawberry.input(
    description="Arm a watch. MANUAL always opens a repair generation; INGRESS opens (from "
    "VERIFIED or REPAIR_FAILED) or coalesces (PENDING_VERIFICATION) only when "
    "`triggeringWinner` is the document's current winner and differs from both watermarks."
)
class ArmWatchInput:
    identity: WatchIdentityInput
    reason: ArmReason
    due_at: EpochMillis | None = None
    delay_ms: int | None = None
    triggering_winner: str | None = None


@strawberry.input(
    description="Claim a verification attempt until `until` (or for `leaseMs`): applies when "
    "the watch is pending at `generation`, due, and unclaimed or its claim lapsed, at `now` "
    "or the store's clock, whichever is earlier (`now` omitted: the store's clock)."
)
class ClaimWatchAttemptInput:
    identity: WatchIdentityInput
    generation: int
    until: EpochMillis | None = None
    lease_ms: int | None = None
    now: EpochMillis | None = None


@strawberry.input(
    description="Reschedule a claimed attempt: applies when the watch is pending at "
    "`generation` and claimed until exactly `claimedUntil`; drops the claim."
)
class DeferWatchInput:
    identity: WatchIdentityInput
    generation: int
    claimed_until: EpochMillis
    next_attempt_at: EpochMillis | None = None
    delay_ms: int | None = None
    reason: DeferReason | None = None


@strawberry.input(
    description="Record what a verifier fetched from the provider for `generation`. "
    "`claimedUntil` omitted skips the claim gate; `dueAt` is when a mismatch below "
    "`maxAttempts` (at least 1) is due again."
)
class RecordVerificationInput:
    identity: WatchIdentityInput
    generation: int
    fetched_digest: str | None
    max_attempts: int
    due_at: EpochMillis | None = None
    delay_ms: int | None = None
    claimed_until: EpochMillis | None = None
    error_message: str | None = None


@strawberry.input(
    description="New ingress: the document's new winner, recorded, and every watch of the "
    "document armed with reason INGRESS, due at `dueAt` (default: now)."
)
class RecordIngressInput:
    document_id: str
    winner_digest: str
    due_at: EpochMillis | None = None
    delay_ms: int | None = None


@strawberry.input(description="Make every operation and watch deferred OFFLINE due at `now`.")
class ResumeOfflineDeferredInput:
    now: EpochMillis
    connector_name: str | None = strawberry.field(
        default=None, description="Only this connector's operations and watches; omitted: all."
    )


@strawberry.input(
    description="Make the owner's operations and watches of these connectors deferred AUTH "
    "due at `now`."
)
class ResumeAuthDeferredInput:
    owner_did: str
    connector_names: list[str]
    now: EpochMillis


@strawberry.input(description="Keep OAuth PKCE state until the callback consumes it.")
class CreatePendingAuthInput:
    state: str
    code_verifier: str
    provider: str
    owner_did: str
    created_at: EpochMillis
    redirect_url: str
    scopes: list[str]
    incremental: bool
    expires_at: EpochMillis
    owner_wrappable_did: str | None = None
    controller_wrappable_did: str | None = None


@strawberry.input(description="The OAuth `state` a callback received.")
class ConsumePendingAuthInput:
    state: str


@strawberry.input(description="Delete pending authorizations with `expiresAt < cutoff`.")
class DeleteExpiredPendingAuthInput:
    cutoff: EpochMillis


@strawberry.input(
    description="Delete finished operations past their retention: COMMITTED and SUPERSEDED "
    "ones last updated before `olderThan`, FAILED ones before `failedOlderThan`."
)
class CollectFinishedOperationsInput:
    older_than: EpochMillis
    failed_older_than: EpochMillis | None = None
    limit: int | None = strawberry.field(
        default=None, description="At most this many (1 to 10,000, default 1000)."
    )


@strawberry.input(description="Create or overwrite a sync state (version and incarnation kept).")
class SetSyncStateInput:
    connector_name: str
    owner_did: str
    last_synced_at: str
    entity_count: int
    status: SyncStatus
    checkpoint: JSON | None = None
    error: str | None = None
    recovery: JSON | None = None


@strawberry.input(
    description="Compare-and-swap the sync progress: `version` and `incarnation` as read "
    "(both null: create the state only when none exists)."
)
class UpdateSyncProgressInput:
    connector_name: str
    owner_did: str
    last_synced_at: str
    entity_count: int
    version: int | None = None
    incarnation: str | None = None
    checkpoint: JSON | None = None
    error: str | None = None
    recovery: JSON | None = None


@strawberry.input(description="Delete a sync state.")
class DeleteSyncStateInput:
    connector_name: str
    owner_did: str
