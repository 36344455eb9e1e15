"""Inputs and payloads of the operator controls (docs/runbook.md, 'Operator controls'): pausing
accounts, and bulk writes by filter or by key."""

import strawberry

from schema.account import Account
from schema.enums import ReissueRisk
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


@strawberry.type(description="How many operations were cancelled, and how many still match.")
class CancelOperationsPayload:
    cancelled: int = strawberry.field(
        description="How many operations became FAILED with kind `cancelled`."
    )
    remaining: int = strawberry.field(
        description="How many ATTEMPTED operations still match the filter after this call "
        "(0: done; else call again)."
    )


@strawberry.input(
    description="Reissue the FAILED operations matching a filter (which must name a field) "
    "that were never reissued, at most limit (1 to 1,000, default 100) per call, oldest first; "
    "those holding a risk not in include are left."
)
class ReissueOperationsInput:
    filter: OperationFilter = strawberry.field(
        description="Which operations; an empty filter is refused."
    )
    limit: int | None = strawberry.field(
        default=100,
        description="At most this many new operations (1 to 1,000, default 100); operations "
        "skipped take no place of it.",
    )
    include: list[ReissueRisk] = strawberry.field(
        default_factory=list,
        description="The risks to reissue anyway (default none): an operation holding a risk "
        "not named here is skipped and counted in skipped.",
    )


@strawberry.type(
    description="The FAILED operations matching a reissue's filter, never reissued, that it "
    "left after this call, each counted once: outcomeUnknown, else cancelled, else blocked."
)
class ReissueSkipped:
    cancelled: int = strawberry.field(
        description="Cancelled by an operator (CANCELLED not in include)."
    )
    outcome_unknown: int = strawberry.field(
        description="Failed with the outcome of a marked send unknown (OUTCOME_UNKNOWN not in "
        "include): the provider may hold the write."
    )
    blocked: int = strawberry.field(
        description="Their derived key is already taken, by another operation or by a "
        "collected one of another envelope: no call can reissue them while it stays taken."
    )


@strawberry.type(description="The operations created by a reissue, and what it left.")
class ReissueOperationsPayload:
    operations: list[Operation] = strawberry.field(
        description="The new ATTEMPTED operations, oldest original first, each naming its "
        "original in reissuedFrom."
    )
    skipped: ReissueSkipped = strawberry.field(
        description="The matching operations left and why (counted after this call)."
    )
    remaining: int = strawberry.field(
        description="How many matching operations a call with the same input would still "
        "reissue, after this call (0: done; else call again)."
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


@strawberry.type(description="How many watches were re-armed, and how many still match.")
class RearmWatchesPayload:
    rearmed: int = strawberry.field(description="How many watches opened a new generation.")
    remaining: int = strawberry.field(
        description="How many REPAIR_FAILED watches still match the filter after this call "
        "(0: done; else call again)."
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
