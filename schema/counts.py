"""The dashboard's counts: ``OperationCount`` and ``WatchCount`` (``store.counts``), and
``FailureGroup`` (``store.operator``)."""

import strawberry

from schema.enums import OperationState, VerificationStatus
from schema.operator import ReissueSkipped
from schema.scalars import EpochMillis
from store.counts import OperationCount as OperationCountRecord
from store.counts import WatchCount as WatchCountRecord
from store.operator import FailureGroup as FailureGroupRecord


@strawberry.type(
    description="How many operations of one connector's provider account are in one state; "
    "exact, counted when asked."
)
class OperationCount:
    connector_name: str
    account_key: str
    state: OperationState
    count: int = strawberry.field(description="How many operations are in this state.")
    due: int = strawberry.field(
        description="For ATTEMPTED: how many are due now, their lease free or lapsed (what "
        "dueOperations hands out); 0 for the other states."
    )
    in_flight: int = strawberry.field(
        description="For ATTEMPTED: how many hold a live lease now; 0 for the other states."
    )

    @classmethod
    def from_record(cls, record: OperationCountRecord) -> "OperationCount":
        """The GraphQL view of one group."""
        return cls(
            connector_name=record.connector_name,
            account_key=record.account_key,
            state=OperationState(record.state),
            count=record.count,
            due=record.due,
            in_flight=record.in_flight,
        )


@strawberry.type(
    description="How many watches of one connector are in one verification status; exact, "
    "counted when asked."
)
class WatchCount:
    connector_name: str
    status: VerificationStatus
    count: int = strawberry.field(description="How many watches are in this status.")

    @classmethod
    def from_record(cls, record: WatchCountRecord) -> "WatchCount":
        """The GraphQL view of one group."""
        return cls(
            connector_name=record.connector_name,
            status=VerificationStatus(record.status),
            count=record.count,
        )


@strawberry.type(description="What a reissue would do now for a filter (reissuableCount).")
class ReissueCount:
    remaining: int = strawberry.field(
        description="How many operations it would reissue, over as many calls as it takes."
    )
    skipped: ReissueSkipped = strawberry.field(
        description="What it would leave, by why (as reissueOperations answers it)."
    )


@strawberry.type(
    description="The FAILED operations of one last outcome: its kind and error message, "
    "exact counts (failureGroups)."
)
class FailureGroup:
    kind: str | None = strawberry.field(
        description="The last recorded outcome's kind (e.g. `cancelled`); null when none."
    )
    message: str | None = strawberry.field(
        description="The last error message, as written; null when none (the operations "
        "filter's `lastError` matches it)."
    )
    count: int = strawberry.field(description="How many FAILED operations have it.")
    unreissued: int = strawberry.field(description="How many of them were never reissued.")
    last_at: EpochMillis = strawberry.field(description="When the latest of them was last written.")

    @classmethod
    def from_record(cls, record: FailureGroupRecord) -> "FailureGroup":
        """The GraphQL view of one group."""
        return cls(
            kind=record.kind,
            message=record.message,
            count=record.count,
            unreissued=record.unreissued,
            last_at=EpochMillis(record.last_at),
        )
