"""The dashboard's charts: ``OperationStatsBucket`` (``store.stats``)."""

import strawberry

from schema.scalars import EpochMillis
from store.stats import StatsBucket


@strawberry.type(
    description="What happened to operations in one time bucket, from the event log; exact, "
    "counted when asked."
)
class OperationStatsBucket:
    start: EpochMillis = strawberry.field(description="Where the bucket begins (inclusive).")
    end: EpochMillis = strawberry.field(
        description="Where the bucket ends (exclusive): the window's `until` for the last one."
    )
    claimed: int = strawberry.field(description="How many operations were claimed.")
    committed: int = strawberry.field(description="How many operations were committed.")
    failed: int = strawberry.field(
        description="How many operations failed (a failure recorded, or cancelled)."
    )
    retried: int = strawberry.field(
        description="How many attempts failed and were scheduled for a retry."
    )

    @strawberry.field(description="failed / (committed + failed), 0 to 1; null when none finished.")
    def failure_rate(self) -> float | None:
        finished = self.committed + self.failed
        return None if finished == 0 else self.failed / finished

    @classmethod
    def from_record(cls, record: StatsBucket) -> "OperationStatsBucket":
        """The GraphQL view of one bucket."""
        return cls(
            start=EpochMillis(record.start),
            end=EpochMillis(record.end),
            claimed=record.claimed,
            committed=record.committed,
            failed=record.failed,
            retried=record.retried,
        )
