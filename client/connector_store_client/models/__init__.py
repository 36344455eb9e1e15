from .async_base_client import AsyncBaseClient
from .base_model import BaseModel, Upload
from .claim_operations import (
    ClaimOperations,
    ClaimOperationsClaimOperations,
    ClaimOperationsClaimOperationsResultsOperationClaimed,
    ClaimOperationsClaimOperationsResultsOperationClaimedOperation,
    ClaimOperationsClaimOperationsResultsOperationCollected,
    ClaimOperationsClaimOperationsResultsOperationConflict,
    ClaimOperationsClaimOperationsResultsOperationExists,
    ClaimOperationsClaimOperationsResultsOperationExistsOperation,
)
from .client import Client
from .enums import DeferReason, OperationAction, OperationRun, OperationState
from .exceptions import (
    GraphQLClientError,
    GraphQLClientGraphQLError,
    GraphQLClientGraphQLMultiError,
    GraphQLClientHttpError,
    GraphQLClientInvalidResponseError,
)
from .finalize_operations import (
    FinalizeOperations,
    FinalizeOperationsFinalizeOperations,
    FinalizeOperationsFinalizeOperationsResults,
    FinalizeOperationsFinalizeOperationsResultsOperation,
)
from .fragments import LeasedOperation, Settled
from .input_types import (
    ClaimOperationInput,
    ClaimOperationsInput,
    FinalizeOperationInput,
    FinalizeOperationsInput,
    LeaseOperationsInput,
    MarkSendsStartedInput,
    MarkSendStartedInput,
    OperationFilter,
    OperationKeyInput,
    RecordOperationInput,
    RecordOperationsInput,
    ReleaseLeasesInput,
    RenewLeasesInput,
    ThrottleAccountInput,
)
from .lease_operations import (
    LeaseOperations,
    LeaseOperationsLeaseOperations,
    LeaseOperationsLeaseOperationsOperations,
)
from .mark_sends_started import (
    MarkSendsStarted,
    MarkSendsStartedMarkSendsStarted,
    MarkSendsStartedMarkSendsStartedResults,
    MarkSendsStartedMarkSendsStartedResultsOperation,
)
from .operation_counts import OperationCounts, OperationCountsOperationCounts
from .operation_events import (
    OperationEvents,
    OperationEventsOperationEvents,
    OperationEventsOperationEventsOperation,
)
from .operation_events_head import OperationEventsHead
from .operation_outcome import OperationOutcome, OperationOutcomeOperation
from .record_operations import (
    RecordOperations,
    RecordOperationsRecordOperations,
    RecordOperationsRecordOperationsResults,
    RecordOperationsRecordOperationsResultsOperation,
)
from .release_leases import (
    ReleaseLeases,
    ReleaseLeasesReleaseLeases,
    ReleaseLeasesReleaseLeasesReleased,
)
from .renew_leases import (
    RenewLeases,
    RenewLeasesRenewLeases,
    RenewLeasesRenewLeasesRenewed,
)
from .throttle_account import (
    ThrottleAccount,
    ThrottleAccountThrottleAccount,
    ThrottleAccountThrottleAccountAccount,
)
from .work_available import WorkAvailable, WorkAvailableWorkAvailable

__all__ = [
    "AsyncBaseClient",
    "BaseModel",
    "ClaimOperationInput",
    "ClaimOperations",
    "ClaimOperationsClaimOperations",
    "ClaimOperationsClaimOperationsResultsOperationClaimed",
    "ClaimOperationsClaimOperationsResultsOperationClaimedOperation",
    "ClaimOperationsClaimOperationsResultsOperationCollected",
    "ClaimOperationsClaimOperationsResultsOperationConflict",
    "ClaimOperationsClaimOperationsResultsOperationExists",
    "ClaimOperationsClaimOperationsResultsOperationExistsOperation",
    "ClaimOperationsInput",
    "Client",
    "DeferReason",
    "FinalizeOperationInput",
    "FinalizeOperations",
    "FinalizeOperationsFinalizeOperations",
    "FinalizeOperationsFinalizeOperationsResults",
    "FinalizeOperationsFinalizeOperationsResultsOperation",
    "FinalizeOperationsInput",
    "GraphQLClientError",
    "GraphQLClientGraphQLError",
    "GraphQLClientGraphQLMultiError",
    "GraphQLClientHttpError",
    "GraphQLClientInvalidResponseError",
    "LeaseOperations",
    "LeaseOperationsInput",
    "LeaseOperationsLeaseOperations",
    "LeaseOperationsLeaseOperationsOperations",
    "LeasedOperation",
    "MarkSendStartedInput",
    "MarkSendsStarted",
    "MarkSendsStartedInput",
    "MarkSendsStartedMarkSendsStarted",
    "MarkSendsStartedMarkSendsStartedResults",
    "MarkSendsStartedMarkSendsStartedResultsOperation",
    "OperationAction",
    "OperationCounts",
    "OperationCountsOperationCounts",
    "OperationEvents",
    "OperationEventsHead",
    "OperationEventsOperationEvents",
    "OperationEventsOperationEventsOperation",
    "OperationFilter",
    "OperationKeyInput",
    "OperationOutcome",
    "OperationOutcomeOperation",
    "OperationRun",
    "OperationState",
    "RecordOperationInput",
    "RecordOperations",
    "RecordOperationsInput",
    "RecordOperationsRecordOperations",
    "RecordOperationsRecordOperationsResults",
    "RecordOperationsRecordOperationsResultsOperation",
    "ReleaseLeases",
    "ReleaseLeasesInput",
    "ReleaseLeasesReleaseLeases",
    "ReleaseLeasesReleaseLeasesReleased",
    "RenewLeases",
    "RenewLeasesInput",
    "RenewLeasesRenewLeases",
    "RenewLeasesRenewLeasesRenewed",
    "Settled",
    "ThrottleAccount",
    "ThrottleAccountInput",
    "ThrottleAccountThrottleAccount",
    "ThrottleAccountThrottleAccountAccount",
    "Upload",
    "WorkAvailable",
    "WorkAvailableWorkAvailable",
]
