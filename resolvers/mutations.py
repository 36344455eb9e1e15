"""The root ``Mutation``: one field per store write, each taking ``input: <Name>Input!``."""

import dataclasses
from collections.abc import Awaitable, Callable
from typing import Protocol

import strawberry

from resolvers import fields
from resolvers.context import Info
from schema.enums import ArmOutcome, OperationState, VerificationOutcome, value_of
from schema.inputs import (
    AcquireLeaseInput,
    ArmWatchInput,
    ClaimOperationInput,
    ClaimWatchAttemptInput,
    CollectFinishedOperationsInput,
    ConsumePendingAuthInput,
    CreatePendingAuthInput,
    DeferOperationInput,
    DeferWatchInput,
    DeleteExpiredPendingAuthInput,
    DeleteSyncStateInput,
    FinalizeOperationInput,
    MarkSendStartedInput,
    RecordIngressInput,
    RecordOperationInput,
    RecordVerificationInput,
    ReleaseLeaseInput,
    RenewLeaseInput,
    ResumeAuthDeferredInput,
    ResumeOfflineDeferredInput,
    SetSyncStateInput,
    UpdateSyncProgressInput,
)
from schema.operation import Operation
from schema.pending_auth import ConsumedPendingAuth, PendingAuth
from schema.results import (
    ArmWatchPayload,
    ClaimOperationResult,
    CollectFinishedOperationsPayload,
    CreatePendingAuthPayload,
    DeleteExpiredPendingAuthPayload,
    DeleteSyncStatePayload,
    FinalizeOperationPayload,
    OperationClaimed,
    OperationCollected,
    OperationConflict,
    OperationExists,
    OperationWritePayload,
    RecordIngressPayload,
    RecordVerificationPayload,
    ResumeDeferredPayload,
    SetSyncStatePayload,
    UpdateSyncProgressPayload,
    WatchWritePayload,
)
from schema.scalars import EpochMillis
from schema.sync_state import SyncState, sync_state_or_none
from store import validation as check
from store.errors import InvalidInput
from store.operations import (
    CONTESTED_SEND_MARKER,
    ClaimResult,
    Finalization,
    Finalize,
    OperationsStore,
    OperationTransition,
)
from store.records import (
    OperationClaim,
    OperationRecord,
    PendingAuthRecord,
    WatchIdentity,
    WatchRecord,
)
from store.retention import DEFAULT_COLLECT_LIMIT
from store.sync_state import SyncProgress
from store.watches import ArmResult, Resumed, VerificationResult, WatchesStore

Write = Callable[[OperationsStore], Awaitable[OperationRecord | None]]
WatchWrite = Callable[[WatchesStore], Awaitable[WatchRecord | None]]


class OperationKey(Protocol):
    """An operation's key, read-only so that a frozen record (``Finalize``) is one too."""

    @property
    def caller_did(self) -> str: ...

    @property
    def operation_id(self) -> str: ...


CLAIM_FIELDS = tuple(field.name for field in dataclasses.fields(OperationClaim))


def to_claim(input: ClaimOperationInput) -> OperationClaim:
    """The store's claim for a ``claimOperation`` input, field by field of the claim
    (``ClaimOperationInput`` mirrors it): a field the input lacks raises AttributeError."""
    return OperationClaim(**{name: getattr(input, name) for name in CLAIM_FIELDS})


FINALIZE_FIELDS = tuple(field.name for field in dataclasses.fields(Finalize))


def to_finalize(input: FinalizeOperationInput, now: int) -> Finalize:
    """The store's finalize for a ``finalizeOperation`` input, field by field of the record
    (``FinalizeOperationInput`` mirrors it), the watch due at ``dueAt`` or ``delayMs`` after
    the store's ``now`` (epoch ms): a field the input lacks raises AttributeError; both or
    neither of ``dueAt`` and ``delayMs`` raise ``InvalidInput`` naming ``dueAt``."""
    fields = {name: getattr(input, name) for name in FINALIZE_FIELDS}
    fields["due_at"] = check.at_or_delay("dueAt", input.due_at, "delayMs", input.delay_ms, now)
    return Finalize(**fields)


def to_transition(input: RecordOperationInput, now: int) -> OperationTransition:
    """The store's transition for a ``recordOperation`` input: attempts are counted unless
    ``countAttempt`` is false, refunded only when ``refundAttempt`` is true; the next attempt
    due at ``nextAttemptAt`` or ``delayMs`` after the store's ``now`` (epoch ms; both raise
    ``InvalidInput`` naming ``nextAttemptAt``)."""
    return OperationTransition(
        caller_did=input.caller_did,
        operation_id=input.operation_id,
        from_state=input.from_state.value,
        to_state=input.to_state.value,
        version=input.version,
        lease_token=input.lease_token,
        provider_etag=input.provider_etag,
        count_attempt=input.count_attempt is not False,
        refund_attempt=input.refund_attempt is True,
        send_marker=input.send_marker,
        next_attempt_at=check.optional_at_or_delay(
            "nextAttemptAt", input.next_attempt_at, "delayMs", input.delay_ms, now
        ),
        defer_reason=value_of(input.defer_reason),
        kind=input.kind,
        http_status=input.http_status,
        error_message=input.error_message,
    )


def lease_token_of(input: AcquireLeaseInput | RenewLeaseInput | ReleaseLeaseInput) -> str:
    """The lease token a single lease input names: ``leaseToken``, or the deprecated
    ``token``. Raises ``InvalidInput`` naming ``leaseToken`` when neither is given, or both
    differ."""
    if None not in (input.lease_token, input.token) and input.lease_token != input.token:
        raise InvalidInput("leaseToken", "token (deprecated) names another lease token")
    token = input.lease_token if input.lease_token is not None else input.token
    if token is None:
        raise InvalidInput("leaseToken", "give leaseToken")
    return token


def lease_end_of(input: AcquireLeaseInput | RenewLeaseInput) -> dict[str, int | None]:
    """When a single lease input's lease ends, as the store's ``expires_at`` and
    ``lease_ms`` keywords (one of them None): ``leaseExpiresAt`` (or the deprecated
    ``expiresAt``), or ``leaseMs``; the store bounds either from its own now
    (``validation.lease_until``). Raises ``InvalidInput`` naming ``leaseMs`` when none or
    more than one is given."""
    given = [
        value
        for value in (input.lease_expires_at, input.expires_at, input.lease_ms)
        if value is not None
    ]
    if len(given) != 1:
        raise InvalidInput("leaseMs", "give exactly one of leaseMs and leaseExpiresAt")
    if input.lease_ms is not None:
        return {"expires_at": None, "lease_ms": input.lease_ms}
    return {"expires_at": given[0], "lease_ms": None}


def fresh(info: Info, *records: OperationRecord | WatchRecord | None) -> None:
    """Every mutation passes the rows it wrote (or re-read) through here, so the request's
    loaders answer them to any later field of the same request (``Loaders.remember``)."""
    info.context.loaders.remember(*records)


async def operation_at(info: Info, key: OperationKey) -> Operation | None:
    """The operation at ``key`` as it now stands, after a CAS that did not apply."""
    current = await info.context.store.operations.get_operation(key.caller_did, key.operation_id)
    fresh(info, current)
    return info.context.visible.operation(current)


async def operation_write(info: Info, key: OperationKey, write: Write) -> OperationWritePayload:
    """Run a CAS ``write`` on the operations store, and report the
    operation at ``key`` as it now stands (re-read when the CAS did not apply)."""
    record = await write(info.context.store.operations)
    if record is not None:
        fresh(info, record)
        return OperationWritePayload(applied=True, operation=info.context.visible.operation(record))
    return OperationWritePayload(applied=False, operation=await operation_at(info, key))


async def observed(
    info: Info,
    event: str,
    marker: str,
    token: str,
    write: Awaitable[OperationWritePayload],
) -> OperationWritePayload:
    """``write``'s payload; when it applied and left the operation with ``marker`` under
    ``token``'s lease, the request reports ``event`` (a lease takeover that counted an
    abandoned send, or a contested send) for the metrics."""
    payload = await write
    operation = payload.operation
    if (
        payload.applied
        and operation is not None
        and operation.record.send_marker == marker
        and operation.record.lease_token == token
    ):
        info.context.events.append(event)
    return payload


async def watch_write(info: Info, identity: WatchIdentity, write: WatchWrite) -> WatchWritePayload:
    """Run a CAS ``write`` on the watches store, and report the watch as
    it now stands (re-read when the CAS did not apply)."""
    record = await write(info.context.store.watches)
    applied = record is not None
    if record is None:
        record = await info.context.store.watches.get_watch(identity)
    fresh(info, record)
    return WatchWritePayload(applied=applied, watch=info.context.visible.watch(record))


def claim_payload(info: Info, claim: OperationClaim, result: ClaimResult) -> ClaimOperationResult:
    """The payload of one claim's ``result``, its operation remembered by the loaders."""
    fresh(info, result.operation)
    tombstone = result.tombstone
    if result.status == "collected" and tombstone is not None:
        return OperationCollected(
            caller_did=claim.caller_did,
            operation_id=claim.operation_id,
            final_state=OperationState(tombstone.final_state),
            collected_at=EpochMillis(tombstone.collected_at),
        )
    visible = info.context.visible
    operation = None if result.status == "conflict" else visible.operation(result.operation)
    if operation is None:
        return OperationConflict(
            caller_did=claim.caller_did,
            operation_id=claim.operation_id,
            message="the key holds an operation with a different envelope"
            if tombstone is None
            else f"the key's operation was collected at {tombstone.collected_at} (epoch ms) "
            "with a different envelope",
        )
    if result.status == "claimed":
        return OperationClaimed(operation=operation)
    return OperationExists(operation=operation)


def finalize_payload(info: Info, done: Finalization) -> FinalizeOperationPayload:
    """The payload of a finalize that applied, both rows remembered by the loaders."""
    fresh(info, done.operation, done.watch)
    return FinalizeOperationPayload(
        applied=True,
        operation=info.context.visible.operation(done.operation),
        watch=info.context.visible.watch(done.watch),
    )


def verification_payload(info: Info, result: VerificationResult) -> RecordVerificationPayload:
    """The payload of one verification, its watch remembered by the loaders."""
    fresh(info, result.watch)
    return RecordVerificationPayload(
        outcome=VerificationOutcome(result.outcome),
        watch=info.context.visible.watch(result.watch),
    )


def arm_payload(info: Info, result: ArmResult) -> ArmWatchPayload:
    """The payload of one arm, its watch remembered by the request's loaders."""
    fresh(info, result.watch)
    return ArmWatchPayload(
        outcome=ArmOutcome(result.outcome), watch=info.context.visible.watch(result.watch)
    )


def resumed_payload(info: Info, resumed: Resumed) -> ResumeDeferredPayload:
    """The counts of a resume; it changed rows it did not return, so every loader forgets."""
    info.context.loaders.forget_all()
    return ResumeDeferredPayload(
        resumed_operations=resumed.operations, resumed_watches=resumed.watches
    )


@strawberry.type
class Mutation:
    @fields.mutation(
        description="Claim an operation key: claimed, exists, conflict, or collected (the "
        "key's operation was finished and collected, and its tombstone is kept for "
        "RETAIN_KEYS_SECONDS: nothing is written). A fresh claim takes "
        "the claimant's lease only where leaseOperations would lease it (its account not "
        "paused, below its cap and not throttled, no other ATTEMPTED operation of its provider "
        "entity); otherwise it is claimed unleased: no token and a lease already lapsed, due "
        "at once, for leaseOperations to hand out (the claimant's token writes nothing to it "
        "until it leases it)."
    )
    async def claim_operation(self, info: Info, input: ClaimOperationInput) -> ClaimOperationResult:
        claim = to_claim(input)
        result = await info.context.store.operations.claim_operation(claim)
        return claim_payload(info, claim, result)

    @fields.mutation(
        description="Take the lease when it is free, expired or already yours. Refused (applied: "
        "false) where leaseOperations would skip the operation: its account paused, throttled or "
        "at its cap (this operation's own lease not counted), an older operation of its provider "
        "entity still ATTEMPTED, or another of the entity holding a live lease."
    )
    async def acquire_lease(self, info: Info, input: AcquireLeaseInput) -> OperationWritePayload:
        counted = False

        async def take(operations: OperationsStore) -> OperationRecord | None:
            nonlocal counted
            taken, counted = await operations.take_lease(
                input.caller_did, input.operation_id, lease_token_of(input), **lease_end_of(input)
            )
            return taken

        payload = await operation_write(info, input, take)
        if counted:
            # A takeover that counted a lapsed run's abandoned send, as the store counted it.
            info.context.events.append("lease_takeover")
        return payload

    @fields.mutation(
        description="Move the lease's expiry; applies only for the token that holds the lease, "
        "in any state. A lapsed lease of an ATTEMPTED operation is a new lease: renewed only "
        "where the leasing guard allows it (account not paused, throttled or at its cap, no "
        "other live lease of its entity), else applied is false."
    )
    async def renew_lease(self, info: Info, input: RenewLeaseInput) -> OperationWritePayload:
        return await operation_write(
            info,
            input,
            lambda operations: operations.renew_lease(
                input.caller_did,
                input.operation_id,
                lease_token_of(input),
                **lease_end_of(input),
            ),
        )

    @fields.mutation(
        description="Drop the lease; applies for the token that holds it (expired or not), or "
        "when no lease is held."
    )
    async def release_lease(self, info: Info, input: ReleaseLeaseInput) -> OperationWritePayload:
        return await operation_write(
            info,
            input,
            lambda operations: operations.release_lease(
                input.caller_did, input.operation_id, lease_token_of(input)
            ),
        )

    @fields.mutation(
        description="Mark the attempt as sent by a run; a second run contests. Applies while "
        "the operation is ATTEMPTED and its lease is `leaseToken`'s."
    )
    async def mark_send_started(
        self, info: Info, input: MarkSendStartedInput
    ) -> OperationWritePayload:
        return await observed(
            info,
            "contested_send",
            CONTESTED_SEND_MARKER,
            input.lease_token,
            operation_write(
                info,
                input,
                lambda operations: operations.mark_send_started(
                    input.caller_did, input.operation_id, input.lease_token, input.marker
                ),
            ),
        )

    @fields.mutation(
        description="Reschedule a live operation whose lease is free (none held, or expired) "
        "or `leaseToken`'s."
    )
    async def defer_operation(
        self, info: Info, input: DeferOperationInput
    ) -> OperationWritePayload:
        return await operation_write(
            info,
            input,
            lambda operations: operations.defer_operation(
                input.caller_did,
                input.operation_id,
                check.at_or_delay(
                    "nextAttemptAt",
                    input.next_attempt_at,
                    "delayMs",
                    input.delay_ms,
                    info.context.store.clock(),
                ),
                value_of(input.reason),
                input.lease_token,
                input.error_message,
            ),
        )

    @fields.mutation(
        description="CAS an operation to another state; counts attempts. Applies when its "
        "state is `fromState`, its version `version` and its lease `leaseToken`'s."
    )
    async def record_operation(
        self, info: Info, input: RecordOperationInput
    ) -> OperationWritePayload:
        return await operation_write(
            info,
            input,
            lambda operations: operations.record_operation(
                to_transition(input, info.context.store.clock())
            ),
        )

    @fields.mutation(
        description="Commit a live operation and arm its entity's watch. Applies when it is "
        "ATTEMPTED at `version` and its lease is `leaseToken`'s."
    )
    async def finalize_operation(
        self, info: Info, input: FinalizeOperationInput
    ) -> FinalizeOperationPayload:
        final = to_finalize(input, info.context.store.clock())
        done = await info.context.store.operations.finalize_operation_and_arm_watch(final)
        if done is not None:
            return finalize_payload(info, done)
        return FinalizeOperationPayload(
            applied=False, operation=await operation_at(info, final), watch=None
        )

    @fields.mutation(
        description="Arm a watch: MANUAL opens a repair generation; INGRESS opens, coalesces "
        "or does nothing by the winner gate. Reason finalize is reserved."
    )
    async def arm_watch(self, info: Info, input: ArmWatchInput) -> ArmWatchPayload:
        result = await info.context.store.watches.arm_watch(
            WatchIdentity.of(input.identity),
            input.reason.value,
            check.at_or_delay(
                "dueAt", input.due_at, "delayMs", input.delay_ms, info.context.store.clock()
            ),
            input.triggering_winner,
        )
        return arm_payload(info, result)

    @fields.mutation(description="Claim a due verification attempt until `until`.")
    async def claim_watch_attempt(
        self, info: Info, input: ClaimWatchAttemptInput
    ) -> WatchWritePayload:
        identity = WatchIdentity.of(input.identity)
        if (input.until is None) == (input.lease_ms is None):
            raise InvalidInput("until", "give exactly one of until and leaseMs")
        return await watch_write(
            info,
            identity,
            lambda watches: watches.claim_watch_attempt(
                identity, input.generation, input.until, input.now, lease_ms=input.lease_ms
            ),
        )

    @fields.mutation(description="Reschedule a claimed verification attempt.")
    async def defer_watch(self, info: Info, input: DeferWatchInput) -> WatchWritePayload:
        identity = WatchIdentity.of(input.identity)
        return await watch_write(
            info,
            identity,
            lambda watches: watches.defer_watch(
                identity,
                input.generation,
                input.claimed_until,
                check.at_or_delay(
                    "nextAttemptAt",
                    input.next_attempt_at,
                    "delayMs",
                    input.delay_ms,
                    info.context.store.clock(),
                ),
                value_of(input.reason),
            ),
        )

    @fields.mutation(
        description="Record what the provider holds: VERIFIED, PENDING, REPAIR_FAILED, or "
        "STALE_GENERATION / STALE_CLAIM with nothing written."
    )
    async def record_verification(
        self, info: Info, input: RecordVerificationInput
    ) -> RecordVerificationPayload:
        result = await info.context.store.watches.record_verification(
            WatchIdentity.of(input.identity),
            generation=input.generation,
            fetched_digest=input.fetched_digest,
            max_attempts=input.max_attempts,
            due_at=check.at_or_delay(
                "dueAt", input.due_at, "delayMs", input.delay_ms, info.context.store.clock()
            ),
            claimed_until=input.claimed_until,
            error_message=input.error_message,
        )
        return verification_payload(info, result)

    @fields.mutation(
        description="Record a document's new winner and arm each of its watches with reason "
        "INGRESS, in one transaction."
    )
    async def record_ingress(self, info: Info, input: RecordIngressInput) -> RecordIngressPayload:
        results = await info.context.store.watches.record_ingress(
            input.document_id,
            input.winner_digest,
            check.optional_at_or_delay(
                "dueAt", input.due_at, "delayMs", input.delay_ms, info.context.store.clock()
            ),
        )
        return RecordIngressPayload(results=[arm_payload(info, result) for result in results])

    @fields.mutation(
        description="Make everything deferred OFFLINE due now, or only one connector's "
        "(`connectorName`)."
    )
    async def resume_offline_deferred(
        self, info: Info, input: ResumeOfflineDeferredInput
    ) -> ResumeDeferredPayload:
        resumed = await info.context.store.watches.resume_offline_deferred(
            input.now, input.connector_name
        )
        return resumed_payload(info, resumed)

    @fields.mutation(
        description="Make the owner's operations and watches of these connectors deferred "
        "AUTH due now."
    )
    async def resume_auth_deferred(
        self, info: Info, input: ResumeAuthDeferredInput
    ) -> ResumeDeferredPayload:
        resumed = await info.context.store.watches.resume_auth_deferred(
            input.owner_did, input.connector_names, input.now
        )
        return resumed_payload(info, resumed)

    @fields.mutation(description="Keep OAuth PKCE state; a state that exists is refused.")
    async def create_pending_auth(
        self, info: Info, input: CreatePendingAuthInput
    ) -> CreatePendingAuthPayload:
        record = await info.context.store.pending_auth.create_pending_auth(
            PendingAuthRecord(
                state=input.state,
                code_verifier=input.code_verifier,
                provider=input.provider,
                owner_did=input.owner_did,
                owner_wrappable_did=input.owner_wrappable_did,
                controller_wrappable_did=input.controller_wrappable_did,
                created_at=input.created_at,
                redirect_url=input.redirect_url,
                scopes=list(input.scopes),
                incremental=input.incremental,
                expires_at=input.expires_at,
            )
        )
        return CreatePendingAuthPayload(pending_auth=PendingAuth.from_record(record))

    @fields.mutation(
        description="Take a pending authorization once, code verifier included; null when "
        "absent, already consumed, or another owner's. An expired record is still returned "
        "(as the seed): compare its expiresAt with the time of the callback."
    )
    async def consume_pending_auth(
        self, info: Info, input: ConsumePendingAuthInput
    ) -> ConsumedPendingAuth | None:
        viewer = info.context.viewer
        record = await info.context.store.pending_auth.consume_pending_auth(
            input.state, owner_did=viewer.writes_as
        )
        return None if record is None else ConsumedPendingAuth.from_record(record)

    @fields.mutation(description="Delete pending authorizations with `expiresAt < cutoff`.")
    async def delete_expired_pending_auth(
        self, info: Info, input: DeleteExpiredPendingAuthInput
    ) -> DeleteExpiredPendingAuthPayload:
        deleted = await info.context.store.pending_auth.delete_expired_pending_auth(input.cutoff)
        return DeleteExpiredPendingAuthPayload(deleted=deleted)

    @fields.mutation(
        description="Delete at most `limit` finished (never ATTEMPTED) operations: COMMITTED "
        "and SUPERSEDED ones last updated before `olderThan`, FAILED ones before "
        "`failedOlderThan`; call again until `remaining` (how many are still past those "
        "cutoffs) is 0. Each leaves a "
        "tombstone of its key: a claim of that key answers OperationCollected (or "
        "OperationConflict) for `RETAIN_KEYS_SECONDS`. Their events stay: the event logs "
        "are collected apart, oldest first, by age (`RETAIN_EVENTS_SECONDS`)."
    )
    async def collect_finished_operations(
        self, info: Info, input: CollectFinishedOperationsInput
    ) -> CollectFinishedOperationsPayload:
        limit = DEFAULT_COLLECT_LIMIT if input.limit is None else input.limit
        store = info.context.store
        failed_older_than = (
            max(store.clock() - info.context.retain_failed_ms, 0)
            if input.failed_older_than is None
            else input.failed_older_than
        )
        deleted = await store.retention.collect_finished_operations(
            input.older_than, limit, failed_older_than=failed_older_than
        )
        info.context.loaders.forget_all()
        remaining = await store.retention.count_finished_operations(
            input.older_than, failed_older_than=failed_older_than
        )
        return CollectFinishedOperationsPayload(deleted=deleted, remaining=remaining)

    @fields.mutation(description="Create or overwrite a sync state.")
    async def set_sync_state(self, info: Info, input: SetSyncStateInput) -> SetSyncStatePayload:
        record = await info.context.store.sync_state.set_sync_state(
            input.connector_name, input.owner_did, sync_progress(input), input.status.value
        )
        return SetSyncStatePayload(sync_state=SyncState.from_record(record))

    @fields.mutation(
        description="Compare-and-swap a sync state's progress on `version` and `incarnation`; "
        "on `applied: false` re-read `syncState`, recompute and retry."
    )
    async def update_sync_progress(
        self, info: Info, input: UpdateSyncProgressInput
    ) -> UpdateSyncProgressPayload:
        store = info.context.store.sync_state
        record = await store.update_sync_progress(
            input.connector_name,
            input.owner_did,
            sync_progress(input),
            version=input.version,
            incarnation=input.incarnation,
        )
        if record is not None:
            return UpdateSyncProgressPayload(applied=True, sync_state=SyncState.from_record(record))
        current = await store.get_sync_state(input.connector_name, input.owner_did)
        return UpdateSyncProgressPayload(applied=False, sync_state=sync_state_or_none(current))

    @fields.mutation(description="Delete a sync state; a new one gets a new incarnation.")
    async def delete_sync_state(
        self, info: Info, input: DeleteSyncStateInput
    ) -> DeleteSyncStatePayload:
        deleted = await info.context.store.sync_state.delete_sync_state(
            input.connector_name, input.owner_did
        )
        return DeleteSyncStatePayload(deleted=deleted)


def sync_progress(input: SetSyncStateInput | UpdateSyncProgressInput) -> SyncProgress:
    """The store's progress fields of a sync-state input."""
    return SyncProgress(
        checkpoint=input.checkpoint,
        last_synced_at=input.last_synced_at,
        entity_count=input.entity_count,
        error=input.error,
        recovery=input.recovery,
    )
