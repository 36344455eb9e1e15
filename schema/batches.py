"""The batch settles' inputs and payloads (docs/worker-protocol.md, 'Settling in batches'): each
takes the single mutation's inputs, unchanged, as ``items``, and answers the single mutation's
payloads as ``results``, in input order."""

import strawberry

from schema.inputs import (
    ClaimOperationInput,
    FinalizeOperationInput,
    MarkSendStartedInput,
    RecordOperationInput,
    RecordVerificationInput,
)
from schema.leaf_inputs import items_input
from schema.results import (
    ClaimOperationResult,
    FinalizeOperationPayload,
    OperationWritePayload,
    RecordVerificationPayload,
)

ITEMS = (
    "1 to 500 items, each its own compare-and-set, applied as its single mutation would; a "
    "bad item, one the token may not write, or two naming the same key refuse the whole "
    "request (`extensions.field` names `items[i].<field>`) and nothing is written."
)
RESULTS = "Each item's outcome, in input order."


@items_input
@strawberry.input(description="Claim many operation keys, each as `claimOperation`.")
class ClaimOperationsInput:
    items: list[ClaimOperationInput] = strawberry.field(description=ITEMS)


@items_input
@strawberry.input(description="Mark many attempts as sent, each as `markSendStarted`.")
class MarkSendsStartedInput:
    items: list[MarkSendStartedInput] = strawberry.field(description=ITEMS)


@items_input
@strawberry.input(description="Finalize many operations, each as `finalizeOperation`.")
class FinalizeOperationsInput:
    items: list[FinalizeOperationInput] = strawberry.field(description=ITEMS)


@items_input
@strawberry.input(description="Record many operations, each as `recordOperation`.")
class RecordOperationsInput:
    items: list[RecordOperationInput] = strawberry.field(description=ITEMS)


@strawberry.input(description="Record many verifications, each as `recordVerification`.")
class RecordVerificationsInput:
    items: list[RecordVerificationInput] = strawberry.field(description=ITEMS)


@strawberry.type(description="What each claim did, in input order.")
class ClaimOperationsPayload:
    results: list[ClaimOperationResult] = strawberry.field(description=RESULTS)


@strawberry.type(description="Whether each mark applied, in input order.")
class MarkSendsStartedPayload:
    results: list[OperationWritePayload] = strawberry.field(description=RESULTS)


@strawberry.type(description="Whether each record applied, in input order.")
class RecordOperationsPayload:
    results: list[OperationWritePayload] = strawberry.field(description=RESULTS)


@strawberry.type(
    description="Each finalize: the committed operation and its watch, in input order."
)
class FinalizeOperationsPayload:
    results: list[FinalizeOperationPayload] = strawberry.field(description=RESULTS)


@strawberry.type(description="Each verification's outcome, in input order.")
class RecordVerificationsPayload:
    results: list[RecordVerificationPayload] = strawberry.field(description=RESULTS)
