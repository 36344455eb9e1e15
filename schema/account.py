"""The ``Account`` type (a provider account's cap, throttle and live leases) and its
connection."""

import strawberry

from schema.pagination import PageInfo
from schema.records import mirrors, record_values
from schema.scalars import EpochMillis
from store.records import AccountLoad, AccountRecord


@strawberry.type(
    description="A provider account: a connector's account, shared by every owner that names "
    "it; listed once a claim named it or a limit or a throttle was set."
)
@mirrors(AccountRecord, omit={"updated_at"})
class Account:
    max_in_flight: int | None = strawberry.field(
        description="The most live leases the account may hold; null: no cap. A cap set "
        "below the live leases ends none of them: no new lease until enough end."
    )
    throttled_until: EpochMillis | None = strawberry.field(
        description="Until when the account is leased nothing; null when never throttled. "
        "A time already past no longer stops leasing."
    )
    paused_at: EpochMillis | None = strawberry.field(
        description="Since when the account is paused on its own (pauseAccount with its "
        "accountKey); null when it is not, though its connector may be paused as a whole."
    )
    in_flight: int = strawberry.field(
        description="Live leases now: attempted operations of the account whose lease has "
        "not lapsed."
    )
    paused: bool = strawberry.field(
        description="Whether the account is paused, on its own or with its whole connector: "
        "none of its operations is leased and none of its watches claimed, and the due lists "
        "leave them out."
    )

    @classmethod
    def from_load(cls, load: AccountLoad) -> "Account":
        """The GraphQL view of an account, its live leases and whether it is paused."""
        return cls(**record_values(cls, load.account), in_flight=load.in_flight, paused=load.paused)


@strawberry.type(description="An account in a page, with its cursor.")
class AccountEdge:
    cursor: str
    node: Account


@strawberry.type(description="A page of one connector's accounts, ordered by account key.")
class AccountConnection:
    edges: list[AccountEdge]
    page_info: PageInfo


@strawberry.type(
    description="A connector that has a provider account or is paused as a whole, listed even "
    "when it has no operations."
)
class Connector:
    connector_name: str = strawberry.field(description="The connector's name.")
    paused_at: EpochMillis | None = strawberry.field(
        description="Since when the connector is paused as a whole (pauseAccount without an "
        "accountKey); null when it is not."
    )
