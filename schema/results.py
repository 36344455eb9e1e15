"""Mutation payloads and unions: expected outcomes are data, not errors."""

from typing import Annotated

import strawberry

from schema.enums import ArmOutcome, OperationState, VerificationOutcome
from schema.operation import Operation
from schema.pending_auth import PendingAuth
from schema.scalars import EpochMillis
from schema.sync_state import SyncState
from schema.watch import Watch


@strawberry.type(description="The key was free: this claim created the operation.")
class OperationClaimed:
    operation: Operation


@strawberry.type(description="The same envelope was claimed before: the stored operation.")
class OperationExists:
    operation: Operation


@strawberry.type(description="The key holds a different envelope; nothing was written.")
class OperationConflict:
    caller_did: str
    operation_id: str
    message: str


@strawberry.type(
    description="The same envelope was claimed before, and its operation was finished and "
    "collected: nothing was written, the write is not to be sent again. Answered while the "
    "key's tombstone is kept (`RETAIN_KEYS_SECONDS` from `collectedAt`, the idempotency "
    "window)."
)
class OperationCollected:
    caller_did: str
    operation_id: str
    final_state: OperationState
    collected_at: EpochMillis


ClaimOperationResult = Annotated[
    OperationClaimed | OperationExists | OperationConflict | OperationCollected,
    strawberry.union("ClaimOperationResult"),
]


@strawberry.type(
    description="A compare-and-set on an operation: whether it applied, and the operation "
    "as it now stands (null when the key names no operation)."
)
class OperationWritePayload:
    applied: bool
    operation: Operation | None


@strawberry.type(description="A finalize: the committed operation and the watch it armed.")
class FinalizeOperationPayload:
    applied: bool
    operation: Operation | None
    watch: Watch | None


@strawberry.type(description="What an arm did, and the watch as it now stands (null: no watch).")
class ArmWatchPayload:
    outcome: ArmOutcome
    watch: Watch | None


@strawberry.type(
    description="What a verification did, and the watch as it now stands (null: no watch)."
)
class RecordVerificationPayload:
    outcome: VerificationOutcome
    watch: Watch | None


@strawberry.type(
    description="A compare-and-set on a watch: whether it applied, and the watch as it now "
    "stands (null when the identity names no watch)."
)
class WatchWritePayload:
    applied: bool
    watch: Watch | None


@strawberry.type(
    description="One arm result per watch of the document, in identity order; empty when it "
    "has none (the winner is recorded either way)."
)
class RecordIngressPayload:
    results: list[ArmWatchPayload]


@strawberry.type(description="How many operations and watches a resume made due.")
class ResumeDeferredPayload:
    resumed_operations: int
    resumed_watches: int


@strawberry.type(description="The pending authorization as stored (no code verifier).")
class CreatePendingAuthPayload:
    pending_auth: PendingAuth


@strawberry.type(description="How many expired pending authorizations were deleted.")
class DeleteExpiredPendingAuthPayload:
    deleted: int


@strawberry.type(description="How many finished operations were deleted, and how many still match.")
class CollectFinishedOperationsPayload:
    deleted: int
    remaining: int = strawberry.field(
        description="How many operations past the same cutoffs are still kept after this "
        "call (0: done; else call again)."
    )


@strawberry.type(description="The sync state as stored.")
class SetSyncStatePayload:
    sync_state: SyncState


@strawberry.type(
    description="A compare-and-swap on a sync state: whether it applied, and the state as "
    "it now stands (null when there is none), to re-read and retry from."
)
class UpdateSyncProgressPayload:
    applied: bool
    sync_state: SyncState | None


@strawberry.type(description="Whether a sync state was deleted.")
class DeleteSyncStatePayload:
    deleted: bool
