"""The ``Operation`` type: the write-back envelope of one change; a federation entity keyed
by ``callerDID operationID``."""

from typing import Any, Optional

import strawberry

from schema.enums import DeferReason, OperationState
from schema.event import OperationEventConnection
from schema.names import to_graphql_name
from schema.node import Node, encode_global_id
from schema.records import RecordView, mirrors
from schema.watch import Watch
from store.records import OPERATION_KEY, OperationRecord

KEY_FIELDS = tuple(to_graphql_name(name) for name in OPERATION_KEY)
"""The operation's key as GraphQL names: the federation key."""


@strawberry.federation.type(
    keys=[" ".join(KEY_FIELDS)],
    description="The durable, exactly-once write-back envelope of one change. A federation "
    "entity: other subgraphs refer to it by `callerDID` and `operationID`.",
)
@mirrors(
    OperationRecord,
    types={"state": OperationState, "defer_reason": DeferReason | None},
    omit={"lease_token", "reissued_from", "reissued_as"},
)
class Operation(Node, RecordView):
    # The record's leaseToken is served by the field below (null to other viewers); nested
    # fields read the record itself.
    record: strawberry.Private[OperationRecord]

    def global_key(self) -> str:
        """The operation's ``node_key``."""
        return self.record.node_key

    @strawberry.federation.field(
        shareable=True,
        description="The global id: opaque; `node(id:)` fetches the object again. Shareable: "
        "a subgraph that extends Operation by its key may serve it too (a Relay subgraph "
        "beside this one), the same id for the same key.",
    )
    def id(self) -> strawberry.ID:
        return encode_global_id("Operation", self.global_key())

    @strawberry.field(
        description="The lease's token; null to a viewer that is not the operation's caller "
        "(nor a service)."
    )
    def lease_token(self, info: strawberry.Info) -> str | None:
        return info.context.visible.lease_token(self.record)

    @strawberry.field(
        description="The verify/repair watch of this operation's provider entity; null when "
        "the viewer may not see it. Needs the right watches:read."
    )
    async def watch(self, info: strawberry.Info) -> Watch | None:
        return await info.context.visible.watch_of(self.record)

    @strawberry.field(
        description="The FAILED operation this one reissues (reissueOperations), under the "
        "same caller; null when it reissues none, or the viewer may not see it."
    )
    async def reissued_from(self, info: strawberry.Info) -> Optional["Operation"]:
        return await info.context.visible.linked("reissuedFrom", self.record, "reissued_from")

    @strawberry.field(
        description="The operation that reissues this FAILED one (reissueOperations), under "
        "the same caller; null when it was never reissued, or the viewer may not see it."
    )
    async def reissued_as(self, info: strawberry.Info) -> Optional["Operation"]:
        return await info.context.visible.linked("reissuedAs", self.record, "reissued_as")

    @strawberry.field(
        description="What happened to this operation, one event per write, oldest first, by "
        "pages: `first` (1 to 500, default 50) after the event whose `sequence` is `after`. "
        "Needs the right operations:read. Its events count against the request's 1000 rows. "
        "Errors: EVENTS_COLLECTED when events after `after` were collected (the event logs "
        "are collected oldest first, by age): read again without `after`."
    )
    async def events(
        self, info: strawberry.Info, first: int | None = None, after: str | None = None
    ) -> OperationEventConnection:
        return await info.context.visible.operation_events(self.record, first, after)

    @classmethod
    async def resolve_reference(cls, info: strawberry.Info, **key: Any) -> "Operation | None":
        """The entity a gateway asks for by its key (``_entities``), through the viewer-scoped
        reader (``Visible.operation_entity``)."""
        return await info.context.visible.operation_entity(key)

    @classmethod
    def from_record(cls, record: OperationRecord) -> "Operation":
        """The GraphQL view of a stored operation (``RecordView.view``)."""
        return cls.view(record)
