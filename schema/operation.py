"""The ``Operation`` type: the write-back envelope of one change; a federation entity keyed
by ``callerDID operationID``."""

from typing import Any

import strawberry

from schema.enums import DeferReason, OperationState
from schema.node import Node, encode_global_id
from schema.records import from_record
from schema.scalars import JSON, EpochMillis
from schema.watch import Watch
from store import validation as check
from store.errors import InvalidInput
from store.records import OperationRecord, WatchIdentity


@strawberry.federation.type(
    keys=["callerDID operationID"],
    description="The durable, exactly-once write-back envelope of one change. A federation "
    "entity: other subgraphs refer to it by `callerDID` and `operationID`.",
)
class Operation(Node):
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
    reissue_intent: JSON | None
    provider_etag: str | None
    document_id: str | None
    result_entity: JSON | None
    state: OperationState
    attempts: int
    next_attempt_at: EpochMillis | None
    defer_reason: DeferReason | None
    last_kind: str | None
    last_http_status: int | None
    send_marker: str | None
    version: int
    incarnation: str
    lease_token_held: strawberry.Private[str | None]
    lease_expires_at: EpochMillis | None
    created_at: EpochMillis
    updated_at: EpochMillis

    @strawberry.field(
        description="The lease's token; null to a viewer that is not the operation's caller "
        "(nor a service)."
    )
    def lease_token(self, info: strawberry.Info) -> str | None:
        return self.lease_token_held if info.context.can_see_lease(self.caller_did) else None

    @strawberry.field(
        description="The verify/repair watch of this operation's provider entity; null when "
        "the viewer may not see it. Needs the right watches:read."
    )
    async def watch(self, info: strawberry.Info) -> Watch | None:
        info.context.require("watches:read")
        identity = WatchIdentity(
            self.owner_did, self.connector_name, self.model, self.account_key, self.source_id
        )
        record = await info.context.loaders.watch.load(identity)
        if record is None or not info.context.owns(record.owner_did):
            return None
        return Watch.from_record(record)

    @classmethod
    async def resolve_reference(cls, info: strawberry.Info, **key: Any) -> "Operation | None":
        """The entity a gateway asks for by its key (``_entities``): through the request's
        loader, with the checks of every other read (the right operations:read; the viewer
        must be the caller or the owner). A malformed, unknown or foreign key reads null."""
        info.context.require("operations:read")
        try:
            wanted = (
                check.key("callerDID", key.get("callerDID")),
                check.key("operationID", key.get("operationID")),
            )
        except InvalidInput:
            return None
        record = await info.context.loaders.operation.load(wanted)
        if record is None or not info.context.can_see(record):
            return None
        return cls.from_record(record)

    @classmethod
    def from_record(cls, record: OperationRecord) -> "Operation":
        """The GraphQL view of a stored operation."""
        return from_record(
            cls,
            record,
            id=encode_global_id("Operation", record.node_key),
            lease_token_held=record.lease_token,
            state=OperationState(record.state),
            defer_reason=DeferReason(record.defer_reason) if record.defer_reason else None,
        )


def operation_or_none(record: OperationRecord | None) -> Operation | None:
    """``Operation.from_record`` that lets None through."""
    return None if record is None else Operation.from_record(record)
