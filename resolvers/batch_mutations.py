"""The batch settles of ``Mutation`` (docs/worker-protocol.md, 'Settling in batches'):
``claimOperations``, ``markSendsStarted``, ``finalizeOperations``, ``recordOperations`` and
``recordVerifications``. Each passes its items to ``store.batches`` (one statement per step) and
answers each item with its single mutation's payload, built by the same functions."""

from collections.abc import Sequence

import strawberry

from resolvers import fields
from resolvers.context import Info
from resolvers.mutations import (
    claim_payload,
    finalize_payload,
    fresh,
    to_claim,
    to_finalize,
    to_transition,
    verification_payload,
)
from schema.batches import (
    ClaimOperationsInput,
    ClaimOperationsPayload,
    FinalizeOperationsInput,
    FinalizeOperationsPayload,
    MarkSendsStartedInput,
    MarkSendsStartedPayload,
    RecordOperationsInput,
    RecordOperationsPayload,
    RecordVerificationsInput,
    RecordVerificationsPayload,
)
from schema.results import FinalizeOperationPayload, OperationWritePayload
from store import validation as check
from store.items import each_item
from store.operations import CONTESTED_SEND_MARKER, SendMark
from store.records import OperationRecord, WatchIdentity
from store.watches import Verification

Key = tuple[str, str]


async def write_payloads(
    info: Info, keys: Sequence[Key], records: Sequence[OperationRecord | None]
) -> list[OperationWritePayload]:
    """The payload of each item's compare-and-set, in order: the written operation, or,
    where it did not apply, the operation as it now stands (one read for all of them)."""
    missing = [key for key, record in zip(keys, records, strict=True) if record is None]
    current = await info.context.store.batches.get_operations(missing)
    fresh(info, *records, *current.values())
    visible = info.context.visible
    return [
        OperationWritePayload(
            applied=record is not None,
            operation=visible.operation(record if record is not None else current.get(key)),
        )
        for key, record in zip(keys, records, strict=True)
    ]


@strawberry.type
class BatchMutation:
    @fields.mutation(
        description="Claim many operation keys, each as `claimOperation`, in one transaction: "
        "an item takes its claimant's lease only where claimOperation would, the items before "
        "it (by key) counted against its account's cap and its provider entity; otherwise it "
        "is claimed with its lease already lapsed, due at once for leaseOperations. An item "
        "whose key's operation was collected answers OperationCollected (or "
        "OperationConflict) and takes no place in the batch."
    )
    async def claim_operations(
        self, info: Info, input: ClaimOperationsInput
    ) -> ClaimOperationsPayload:
        claims = [to_claim(item) for item in input.items]
        results = await info.context.store.batches.claim_operations(claims)
        return ClaimOperationsPayload(
            results=[
                claim_payload(info, claim, result)
                for claim, result in zip(claims, results, strict=True)
            ]
        )

    @fields.mutation(description="Mark many attempts as sent, each as `markSendStarted`.")
    async def mark_sends_started(
        self, info: Info, input: MarkSendsStartedInput
    ) -> MarkSendsStartedPayload:
        marks = [
            SendMark(item.caller_did, item.operation_id, item.lease_token, item.marker)
            for item in input.items
        ]
        records = await info.context.store.batches.mark_sends_started(marks)
        for mark, record in zip(marks, records, strict=True):
            if (
                record is not None
                and record.send_marker == CONTESTED_SEND_MARKER
                and record.lease_token == mark.lease_token
            ):
                info.context.events.append("contested_send")
        keys = [(mark.caller_did, mark.operation_id) for mark in marks]
        return MarkSendsStartedPayload(results=await write_payloads(info, keys, records))

    @fields.mutation(description="Record many operations, each as `recordOperation`.")
    async def record_operations(
        self, info: Info, input: RecordOperationsInput
    ) -> RecordOperationsPayload:
        now = info.context.store.clock()
        changes = each_item(input.items, lambda item: to_transition(item, now))
        records = await info.context.store.batches.record_operations(changes)
        keys = [(change.caller_did, change.operation_id) for change in changes]
        return RecordOperationsPayload(results=await write_payloads(info, keys, records))

    @fields.mutation(
        description="Finalize many operations, each as `finalizeOperation`, in one transaction."
    )
    async def finalize_operations(
        self, info: Info, input: FinalizeOperationsInput
    ) -> FinalizeOperationsPayload:
        now = info.context.store.clock()
        finals = each_item(input.items, lambda item: to_finalize(item, now))
        done = await info.context.store.batches.finalize_operations(finals)
        keys = [(final.caller_did, final.operation_id) for final in finals]
        refused = [key for key, result in zip(keys, done, strict=True) if result is None]
        current = dict(
            zip(refused, await write_payloads(info, refused, [None] * len(refused)), strict=True)
        )
        return FinalizeOperationsPayload(
            results=[
                finalize_payload(info, result)
                if result is not None
                else FinalizeOperationPayload(
                    applied=False, operation=current[key].operation, watch=None
                )
                for key, result in zip(keys, done, strict=True)
            ]
        )

    @fields.mutation(
        description="Record many verifications, each as `recordVerification`, in one transaction."
    )
    async def record_verifications(
        self, info: Info, input: RecordVerificationsInput
    ) -> RecordVerificationsPayload:
        now = info.context.store.clock()
        verifications = each_item(
            input.items,
            lambda item: Verification(
                identity=WatchIdentity.of(item.identity),
                generation=item.generation,
                fetched_digest=item.fetched_digest,
                max_attempts=item.max_attempts,
                due_at=check.at_or_delay("dueAt", item.due_at, "delayMs", item.delay_ms, now),
                claimed_until=item.claimed_until,
                error_message=item.error_message,
            ),
        )
        results = await info.context.store.batches.record_verifications(verifications)
        return RecordVerificationsPayload(
            results=[verification_payload(info, result) for result in results]
        )
