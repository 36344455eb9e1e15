"""The ``Watch`` type: one verify/repair state machine per provider entity."""

from typing import TYPE_CHECKING, Annotated, Any

import strawberry

from schema.enums import DeferReason, VerificationStatus
from schema.event import WatchEventConnection
from schema.names import to_graphql_name
from schema.node import Node
from schema.records import RecordView, mirrors
from store.records import WATCH_IDENTITY, WatchRecord

if TYPE_CHECKING:
    from schema.operation import Operation


KEY_FIELDS = tuple(to_graphql_name(name) for name in WATCH_IDENTITY)
"""The identity's five parts as GraphQL names: the federation key."""


@strawberry.federation.type(
    keys=[" ".join(KEY_FIELDS)],
    description="The verify/repair watch of one provider entity. A federation entity: other "
    "subgraphs refer to it by its identity (owner, connector, model, account, source).",
)
@mirrors(
    WatchRecord,
    types={"verification_status": VerificationStatus, "defer_reason": DeferReason | None},
)
class Watch(Node, RecordView):
    record: strawberry.Private[WatchRecord]

    def global_key(self) -> list[str]:
        """The five parts of the watch's identity."""
        return list(self.record.identity.parts)

    @strawberry.field(
        description="The operations whose watch this is (same owner, connector, model, "
        "account and source), oldest first; only those the viewer may see. Needs the right "
        "operations:read. Its rows count against the request's 1000 rows."
    )
    async def operations(
        self, info: strawberry.Info
    ) -> list[Annotated["Operation", strawberry.lazy("schema.operation")]]:
        return await info.context.visible.operations_of(self.record)

    @strawberry.field(
        description="What happened to this watch, one event per write, oldest first, by "
        "pages: `first` (1 to 500, default 50) after the event whose `sequence` is `after`. "
        "Needs the right watches:read. Its events count against the request's 1000 rows. "
        "Errors: EVENTS_COLLECTED when events after `after` were collected (the event logs "
        "are collected oldest first, by age): read again without `after`."
    )
    async def events(
        self, info: strawberry.Info, first: int | None = None, after: str | None = None
    ) -> WatchEventConnection:
        return await info.context.visible.watch_events(self.record, first, after)

    @classmethod
    async def resolve_reference(cls, info: strawberry.Info, **key: Any) -> "Watch | None":
        """The entity a gateway asks for by its identity (``_entities``), through the
        viewer-scoped reader (``Visible.watch_entity``)."""
        return await info.context.visible.watch_entity(key)

    @classmethod
    def from_record(cls, record: WatchRecord) -> "Watch":
        """The GraphQL view of a stored watch (``RecordView.view``)."""
        return cls.view(record)
