"""Root fields of batch leasing and provider accounts (docs/worker-protocol.md, 'Leasing in
batches'), mixed into the root ``Mutation`` and ``Query``: ``LeasingMutation`` and
``AccountsQuery``.

A tenant (a viewer without ``service``) leases only operations it called, and claims only its
own watches: the store filters by the viewer's DID. A renewal or release that names a key of
another caller is refused (``FORBIDDEN`` naming ``keys[i].callerDID``), as its single form is.
"""

import strawberry

from resolvers import fields
from resolvers.context import Info
from resolvers.queries import page_request, page_size
from resolvers.visible import page_info
from schema.account import Account, AccountConnection, AccountEdge, Connector
from schema.leasing import (
    AccountPayload,
    ClaimWatchesInput,
    ClaimWatchesPayload,
    LeaseOperationsInput,
    LeaseOperationsPayload,
    LiftThrottleInput,
    OperationKeyInput,
    ReleaseLeasesInput,
    ReleaseLeasesPayload,
    RenewLeasesInput,
    RenewLeasesPayload,
    SetAccountLimitInput,
    ThrottleAccountInput,
)
from schema.node import encode_opaque
from schema.scalars import EpochMillis
from store.leasing import DEFAULT_BATCH
from store.operations import ABANDONED_SEND_MARKER
from store.records import AccountLoad


def batch_size(info: Info, limit: int | None) -> int:
    """A batch's ``limit`` (1 to 500, default 10), counted against the request's rows."""
    size = page_size("limit", limit, DEFAULT_BATCH)
    info.context.budget.take("limit", size)
    return size


def key_pairs(keys: list[OperationKeyInput]) -> list[tuple[str, str]]:
    return [(key.caller_did, key.operation_id) for key in keys]


def account_cursor(load: AccountLoad) -> str:
    """The keyset cursor of an account: its key within the connector."""
    return encode_opaque([load.account.account_key])


@strawberry.type
class LeasingMutation:
    @fields.mutation(
        description="Lease up to `limit` due operations to `leaseToken` until the store's now + "
        "`leaseMs`. An operation qualifies when it is ATTEMPTED, due (`nextAttemptAt` null or "
        "passed), its lease free or lapsed, called by the viewer (a service: any caller), its "
        "account not paused, below its cap and not throttled, and it is the oldest ATTEMPTED "
        "operation of its provider entity (owner, connector, model, account, source) with no "
        "other of the entity holding a live lease. Order: fair across owners (each owner's k-th "
        "before any owner's (k+1)-th), then due time, then key. A takeover of a lapsed lease "
        "whose run marked a send counts the abandoned attempt, as acquireLease does. Concurrent "
        "calls never lease one operation twice, pass an account's cap or lease two of one entity. "
        "When the answer would pass the request's byte budget (MAX_RESPONSE_BYTES), fewer "
        "operations are leased: the rest stay as they were."
    )
    async def lease_operations(
        self, info: Info, input: LeaseOperationsInput
    ) -> LeaseOperationsPayload:
        size = batch_size(info, input.limit)
        budget = info.context.budget
        async with budget.reading("leaseOperations") as allowance:
            records = await info.context.store.leasing.lease_operations(
                input.lease_token,
                input.lease_ms,
                limit=size,
                connector_name=input.connector_name,
                account_keys=input.account_keys,
                caller_did=info.context.viewer.writes_as,
                max_bytes=allowance,
                at_least_one=budget.untouched,
            )
            info.context.loaders.remember(*records)
            operations = info.context.visible.operations("leaseOperations", records)
        # Each lease that counted a lapsed run's abandoned send, as acquireLease reports one.
        info.context.events.extend(
            "lease_takeover" for record in records if record.send_marker == ABANDONED_SEND_MARKER
        )
        return LeaseOperationsPayload(operations=operations)

    @fields.mutation(
        description="Renew, until the store's now + `leaseMs`, the leases `leaseToken` holds on "
        "the operations at `keys` (at most 500) and has not let lapse; a lapsed lease is taken "
        "again with leaseOperations or acquireLease (unlike renewLease, which renews its "
        "holder's lapsed lease too). Only the viewer's calls (a service: any); a key named "
        "twice refuses the call. Returns the renewed operations in key order (callerDID, then "
        "operationID), not the order of `keys`."
    )
    async def renew_leases(self, info: Info, input: RenewLeasesInput) -> RenewLeasesPayload:
        info.context.budget.take("keys", len(input.keys))
        records = await info.context.store.leasing.renew_leases(
            input.lease_token,
            input.lease_ms,
            key_pairs(input.keys),
            caller_did=info.context.viewer.writes_as,
        )
        info.context.loaders.remember(*records)
        return RenewLeasesPayload(renewed=info.context.visible.operations("renewLeases", records))

    @fields.mutation(
        description="Drop the leases of the operations at `keys` (at most 500) where "
        "`leaseToken` holds them or none is held, as releaseLease does. Only the viewer's calls "
        "(a service: any); a key named twice refuses the call. Returns the released operations "
        "in key order (callerDID, then operationID), not the order of `keys`."
    )
    async def release_leases(self, info: Info, input: ReleaseLeasesInput) -> ReleaseLeasesPayload:
        info.context.budget.take("keys", len(input.keys))
        records = await info.context.store.leasing.release_leases(
            input.lease_token, key_pairs(input.keys), caller_did=info.context.viewer.writes_as
        )
        info.context.loaders.remember(*records)
        return ReleaseLeasesPayload(
            released=info.context.visible.operations("releaseLeases", records)
        )

    @fields.mutation(
        description="Claim up to `limit` due pending watches until the store's now + "
        "`claimMs`, fair across owners, then by due time and identity; only the viewer's own "
        "watches (a service: any owner's). A takeover of a lapsed claim counts the abandoned "
        "verification attempt, as claimWatchAttempt does. When the answer would pass the "
        "request's byte budget (MAX_RESPONSE_BYTES), fewer watches are claimed."
    )
    async def claim_watches(self, info: Info, input: ClaimWatchesInput) -> ClaimWatchesPayload:
        size = batch_size(info, input.limit)
        budget = info.context.budget
        async with budget.reading("claimWatches") as allowance:
            records = await info.context.store.leasing.claim_watches(
                input.claim_ms,
                limit=size,
                connector_name=input.connector_name,
                owner_did=info.context.viewer.writes_as,
                max_bytes=allowance,
                at_least_one=budget.untouched,
            )
            info.context.loaders.remember(*records)
            watches = info.context.visible.watches("claimWatches", records)
        return ClaimWatchesPayload(watches=watches)

    @fields.mutation(
        description="Cap the live leases of a provider account (null clears the cap). Every "
        "path that takes a lease respects it; leases already held stay."
    )
    async def set_account_limit(self, info: Info, input: SetAccountLimitInput) -> AccountPayload:
        load = await info.context.store.accounts.set_account_limit(
            input.connector_name, input.account_key, input.max_in_flight
        )
        return AccountPayload(account=Account.from_load(load))

    @fields.mutation(
        description="Lease nothing of a provider account until the store's now + "
        "`retryAfterMs` (a provider's 429 with Retry-After); a later throttle replaces it."
    )
    async def throttle_account(self, info: Info, input: ThrottleAccountInput) -> AccountPayload:
        load = await info.context.store.accounts.throttle_account(
            input.connector_name, input.account_key, input.retry_after_ms
        )
        return AccountPayload(account=Account.from_load(load))

    @fields.mutation(
        description="End a provider account's throttle now, before its time (an operator who "
        "knows the provider is answering again): it is leased again as its cap and pauses "
        "allow."
    )
    async def lift_throttle(self, info: Info, input: LiftThrottleInput) -> AccountPayload:
        load = await info.context.store.accounts.lift_throttle(
            input.connector_name, input.account_key
        )
        return AccountPayload(account=Account.from_load(load))


@strawberry.type
class AccountsQuery:
    @fields.query(
        description="Every connector that has a provider account or is paused as a whole, by "
        "name, with since when it is paused as a whole."
    )
    async def connectors(self, info: Info) -> list[Connector]:
        return [
            Connector(
                connector_name=c.connector_name,
                paused_at=None if c.paused_at is None else EpochMillis(c.paused_at),
            )
            for c in await info.context.store.accounts.list_connectors()
        ]

    @fields.query(description="A connector's provider accounts, by account key, by pages.")
    async def accounts(
        self,
        info: Info,
        connector_name: str,
        first: int | None = None,
        after: str | None = None,
    ) -> AccountConnection:
        size, after_key = page_request(info, first, after, 1, str)
        loads = await info.context.store.accounts.list_accounts(
            connector_name, after=None if after_key is None else after_key[0], limit=size + 1
        )
        edges = [
            AccountEdge(cursor=account_cursor(load), node=Account.from_load(load))
            for load in loads[:size]
        ]
        return AccountConnection(
            edges=edges, page_info=page_info([e.cursor for e in edges], len(loads) > size, after)
        )
