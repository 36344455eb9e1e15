"""Inputs and payloads of the operator controls (docs/runbook.md, 'Operator controls'): pausing
accounts, and bulk writes by filter or by key."""

import strawberry

from schema.account import Account
from schema.inputs import OperationFilter, WatchFilter
from schema.leasing import OperationKeyInput
from schema.operation import Operation


@strawberry.input(
    description="Pause a provider account, or with accountKey omitted its whole connector."
)
class PauseAccountInput:
    connector_name: str
    account_key: str | None = strawberry.field(
        default=None, description="The account to pause; omitted: the whole connector."
    )


@strawberry.input(
    description="Resume a provider account, or with accountKey omitted its whole connector, "
    "spreading its due operations over spreadMs (0 to 86,400,000)."
)
class ResumeAccountInput:
    connector_name: str
    account_key: str | None = strawberry.field(
        default=None,
        description="The account to resume; omitted: the whole connector (an account paused "
        "on its own stays paused).",
    )
    spread_ms: int = strawberry.field(
        default=0,
        description="Over how many ms from now the due operations become due again, evenly "
        "(0 to 86,400,000; 0: all due now).",
    )


@strawberry.type(description="Whether the connector and the account are paused now.")
class AccountPausePayload:
    connector_name: str
    connector_paused: bool = strawberry.field(
        description="Whether the connector is paused as a whole."
    )
    account: Account | None = strawberry.field(
        description="The account as it now stands; null when the input named the whole connector."
    )
    spread: int = strawberry.field(
        description="How many due operations a resume spread over spreadMs (0 for a pause)."
    )


@strawberry.input(
    description="Cancel the ATTEMPTED operations matching a filter (which must name a field), "
    "at most limit (1 to 1,000, default 100) per call, oldest first."
)
class CancelOperationsInput:
    filter: OperationFilter = strawberry.field(
        description="Which operations; an empty filter is refused."
    )
    reason: str | None = strawberry.field(
        default=None, description="Why they are cancelled (at most 2,048 bytes of UTF-8)."
    )
    limit: int | None = strawberry.field(
        default=100, description="At most this many operations (1 to 1,000, default 100)."
    )


@strawberry.type(description="How many operations were cancelled.")
class CancelOperationsPayload:
    cancelled: int = strawberry.field(
        description="How many operations became FAILED with kind `cancelled`; fewer than "
        "limit when no more match (call again while it equals limit)."
    )


@strawberry.input(
    description="Reissue the FAILED operations matching a filter (which must name a field) "
    "that were never reissued, at most limit (1 to 1,000, default 100) per call, oldest first."
)
class ReissueOperationsInput:
    filter: OperationFilter = strawberry.field(
        description="Which operations; an empty filter is refused."
    )
    limit: int | None = strawberry.field(
        default=100, description="At most this many operations (1 to 1,000, default 100)."
    )


@strawberry.type(description="The operations created by a reissue.")
class ReissueOperationsPayload:
    operations: list[Operation] = strawberry.field(
        description="The new ATTEMPTED operations, oldest original first, each naming its "
        "original in reissuedFrom; empty when nothing was left to reissue."
    )


@strawberry.input(
    description="Open a new repair generation on the REPAIR_FAILED watches matching a filter, "
    "at most limit (1 to 1,000, default 100) per call, in identity order."
)
class RearmWatchesInput:
    filter: WatchFilter = strawberry.field(
        description="Which watches; only REPAIR_FAILED ones are re-armed."
    )
    limit: int | None = strawberry.field(
        default=100, description="At most this many watches (1 to 1,000, default 100)."
    )


@strawberry.type(description="How many watches were re-armed.")
class RearmWatchesPayload:
    rearmed: int = strawberry.field(
        description="How many watches opened a new generation; fewer than limit when no more match."
    )


@strawberry.input(description="Free the leases of these operations, whatever their token.")
class ForceReleaseLeasesInput:
    keys: list[OperationKeyInput] = strawberry.field(
        description="The operations whose leases to free (1 to 500)."
    )


@strawberry.type(description="The operations whose leases were freed.")
class ForceReleaseLeasesPayload:
    released: list[Operation] = strawberry.field(
        description="The operations freed, in key order: ATTEMPTED ones that held a lease."
    )
