"""``OperationEvent`` and ``WatchEvent``: one entry of an operation's or a watch's history
(DESIGN section 7), and their connections (``Operation.events``, ``Watch.events``)."""

from typing import TYPE_CHECKING, Annotated

import strawberry

from schema.enums import OperationAction, OperationState, VerificationStatus, WatchAction
from schema.records import mirrors, record_values
from store.records import (
    OPERATION_KEY,
    WATCH_IDENTITY,
    OperationEventRecord,
    WatchEventRecord,
)

if TYPE_CHECKING:
    from schema.pagination import PageInfo

Page = Annotated["PageInfo", strawberry.lazy("schema.pagination")]


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
    @classmethod
    def from_record(cls, record: OperationEventRecord) -> "OperationEvent":
        """The GraphQL view of a logged event."""
        return cls(**record_values(cls, record))


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
    @classmethod
    def from_record(cls, record: WatchEventRecord) -> "WatchEvent":
        """The GraphQL view of a logged event."""
        return cls(**record_values(cls, record))


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
