"""The types of live updates (docs/api.md, 'Live updates'): ``WorkSignal``."""

import strawberry

from schema.scalars import EpochMillis


@strawberry.type(
    description="Work may have become leasable: ask `leaseOperations` (a hint, never the work "
    "itself; the first signal comes as soon as the subscription starts)."
)
class WorkSignal:
    connector_name: str | None = strawberry.field(
        description="The connector whose work may be leasable; null: any connector's."
    )
    at: EpochMillis = strawberry.field(description="When the server sent the signal.")
