"""``OperationEvent`` and ``WatchEvent``: one entry of an operation's or a watch's history
(docs/architecture.md, 'The event log'), and their connections (``Operation.events``,
``Watch.events``)."""

from typing import TYPE_CHECKING, Annotated

import strawberry

from schema.enums import OperationAction, OperationState, VerificationStatus, WatchAction
from schema.records import mirrors, record_values
from store.records import (
    OPERATION_KEY,
    WATCH_IDENTITY,
    OperationEventRecord,
    WatchEventRecord,
    WatchIdentity,
)

if TYPE_CHECKING:
    from schema.operation import Operation
    from schema.pagination import PageInfo
    from schema.watch import Watch

Page = Annotated["PageInfo", strawberry.lazy("schema.pagination")]
OperationRow = Annotated["Operation", strawberry.lazy("schema.operation")]
WatchRow = Annotated["Watch", strawberry.lazy("schema.watch")]


@strawberry.type(description="One write of an operation, as its event log keeps it.")
@mirrors(
    OperationEventRecord,
    types={
        "action": OperationAction,
        "from_state": OperationState | None,
        "to_state": OperationState,
    },
    omit=OPERATION_KEY,
)
class OperationEvent:
    key: strawberry.Private[tuple[str, str] | None] = None

    @classmethod
    def from_record(cls, record: OperationEventRecord) -> "OperationEvent":
        """The GraphQL view of a logged event."""
        return cls(**record_values(cls, record), key=(record.caller_did, record.operation_id))

    @strawberry.field(
        description="The operation this event is of, as it is now; null once it was "
        "collected, or when the viewer may not see it. Needs the right operations:read."
    )
    async def operation(self, info: strawberry.Info) -> OperationRow | None:
        return None if self.key is None else await info.context.visible.operation_at(self.key)


@strawberry.type(description="One write of a watch, as its event log keeps it.")
@mirrors(
    WatchEventRecord,
    types={
        "action": WatchAction,
        "from_status": VerificationStatus | None,
        "to_status": VerificationStatus,
    },
    omit=WATCH_IDENTITY,
)
class WatchEvent:
    identity: strawberry.Private[WatchIdentity | None] = None

    @classmethod
    def from_record(cls, record: WatchEventRecord) -> "WatchEvent":
        """The GraphQL view of a logged event."""
        return cls(**record_values(cls, record), identity=WatchIdentity.of(record))

    @strawberry.field(
        description="The watch this event is of, as it is now; null when the viewer may "
        "not see it. Needs the right watches:read."
    )
    async def watch(self, info: strawberry.Info) -> WatchRow | None:
        return None if self.identity is None else await info.context.visible.watch_at(self.identity)


@strawberry.type
class OperationEventEdge:
    cursor: str
    node: OperationEvent


@strawberry.type(description="A page of an operation's events, oldest first.")
class OperationEventConnection:
    edges: list[OperationEventEdge]
    page_info: Page


@strawberry.type
class WatchEventEdge:
    cursor: str
    node: WatchEvent


@strawberry.type(description="A page of a watch's events, oldest first.")
class WatchEventConnection:
    edges: list[WatchEventEdge]
    page_info: Page
