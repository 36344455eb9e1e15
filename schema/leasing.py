"""Inputs and payloads of batch leasing and the account mutations (docs/worker-protocol.md, 'Leasing
in batches'). The durations are relative to the store's clock: no input carries a ``now``."""

import strawberry

from schema.account import Account
from schema.operation import Operation
from schema.watch import Watch


@strawberry.input(
    description="Lease due operations: leaseMs 1,000 to 3,600,000, limit 1 to 500 (default "
    "10), optionally of one connector and of some of its accounts (at most 500)."
)
class LeaseOperationsInput:
    lease_token: str = strawberry.field(description="The token the leases are held under.")
    lease_ms: int = strawberry.field(
        description="How long each lease lasts from the store's now, in ms (1,000 to 3,600,000)."
    )
    limit: int | None = strawberry.field(
        default=10, description="At most this many operations (1 to 500, default 10)."
    )
    connector_name: str | None = strawberry.field(
        default=None, description="Only this connector's operations; omitted: all."
    )
    account_keys: list[str] | None = strawberry.field(
        default=None,
        description="Only operations of these accounts (at most 500); an empty list leases "
        "nothing; omitted: all.",
    )


@strawberry.input(description="The key of an operation.")
class OperationKeyInput:
    caller_did: str
    operation_id: str


@strawberry.input(
    description="Renew the leases the token holds and has not let lapse on these operations "
    "(at most 500 keys) until now + leaseMs (1,000 to 3,600,000)."
)
class RenewLeasesInput:
    lease_token: str = strawberry.field(description="The token that holds the leases.")
    lease_ms: int = strawberry.field(
        description="How long each lease lasts from the store's now, in ms (1,000 to 3,600,000)."
    )
    keys: list[OperationKeyInput] = strawberry.field(
        description="The operations whose leases to renew (at most 500)."
    )


@strawberry.input(
    description="Release the leases of these operations that the token holds (expired or not) "
    "or where none is held."
)
class ReleaseLeasesInput:
    lease_token: str = strawberry.field(description="The token that holds the leases.")
    keys: list[OperationKeyInput] = strawberry.field(
        description="The operations whose leases to release (at most 500)."
    )


@strawberry.input(
    description="Claim due pending watches until now + claimMs (1,000 to 3,600,000): limit 1 "
    "to 500 (default 10), optionally of one connector."
)
class ClaimWatchesInput:
    claim_ms: int = strawberry.field(
        description="How long each claim lasts from the store's now, in ms (1,000 to 3,600,000)."
    )
    limit: int | None = strawberry.field(
        default=10, description="At most this many watches (1 to 500, default 10)."
    )
    connector_name: str | None = strawberry.field(
        default=None, description="Only this connector's watches; omitted: all."
    )


@strawberry.input(description="Cap an account's live leases; a null maxInFlight clears it.")
class SetAccountLimitInput:
    connector_name: str
    account_key: str
    max_in_flight: int | None = strawberry.field(
        default=None, description="The most live leases of the account; null clears the cap."
    )


@strawberry.input(
    description="Lease nothing of an account for retryAfterMs (1 to 86,400,000) from now."
)
class ThrottleAccountInput:
    connector_name: str
    account_key: str
    retry_after_ms: int = strawberry.field(
        description="How long to lease nothing, in ms from the store's now (1 to 86,400,000)."
    )


@strawberry.input(description="End an account's throttle now.")
class LiftThrottleInput:
    connector_name: str
    account_key: str


@strawberry.type(description="The operations now leased to the token, in fair order.")
class LeaseOperationsPayload:
    operations: list[Operation] = strawberry.field(description="The operations now leased.")


@strawberry.type(description="The operations whose lease was renewed, in key order.")
class RenewLeasesPayload:
    renewed: list[Operation] = strawberry.field(description="The operations renewed.")


@strawberry.type(description="The operations whose lease was released, in key order.")
class ReleaseLeasesPayload:
    released: list[Operation] = strawberry.field(description="The operations released.")


@strawberry.type(description="The watches now claimed, in fair order.")
class ClaimWatchesPayload:
    watches: list[Watch] = strawberry.field(description="The watches now claimed.")


@strawberry.type(description="The account as it now stands.")
class AccountPayload:
    account: Account = strawberry.field(description="The account with its live leases now.")
