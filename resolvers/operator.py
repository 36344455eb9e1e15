"""Root fields of the operator controls (docs/runbook.md, 'Operator controls'), mixed into the root
``Mutation`` and ``Query``: ``OperatorMutation`` (pause and resume accounts, bulk cancel, reissue,
re-arm, force-release) and ``ViewerQuery`` (who the token names and what it may do).

The rules (``resolvers.permissions``) give these mutations to ``operator`` (and ``service``);
they act on every tenant's rows, so no input names the viewer.
"""

from typing import cast

import strawberry

from resolvers import fields
from resolvers.context import Info
from resolvers.leasing import key_pairs
from resolvers.permissions import permitted
from resolvers.queries import to_store_filter, to_watch_filter
from schema.account import Account
from schema.enums import value_of
from schema.operator import (
    AccountPausePayload,
    CancelOperationsInput,
    CancelOperationsPayload,
    ForceReleaseLeasesInput,
    ForceReleaseLeasesPayload,
    PauseAccountInput,
    RearmWatchesInput,
    RearmWatchesPayload,
    ReissueOperationsInput,
    ReissueOperationsPayload,
    ReissueSkipped,
    ResumeAccountInput,
)
from schema.viewer import ViewerInfo
from store.operator import DEFAULT_LIMIT
from store.pauses import PauseState
from store.records import OperationRecord
from store.sizes import Measured
from store.watches import WatchFilter


def pause_payload(connector_name: str, state: PauseState) -> AccountPausePayload:
    """The GraphQL view of what a pause or a resume left."""
    return AccountPausePayload(
        connector_name=connector_name,
        connector_paused=state.connector_paused,
        account=None if state.account is None else Account.from_load(state.account),
        spread=state.spread,
    )


def limit_of(limit: int | None) -> int:
    """A bulk call's ``limit``: 100 when null."""
    return DEFAULT_LIMIT if limit is None else limit


def written(records: list[OperationRecord]) -> Measured[OperationRecord]:
    """Rows a mutation wrote, as a list read's answer: each costs nothing (a mutation's
    answer is bounded by its input), as ``Loaders.remember`` counts them."""
    return Measured(records, [0] * len(records))


@strawberry.type
class OperatorMutation:
    @fields.mutation(
        description="Pause a provider account (accountKey omitted: its whole connector): none "
        "of its operations is leased (leaseOperations, acquireLease, a claim's own lease) and "
        "none of its watches claimed (claimWatches, claimWatchAttempt), and dueOperations and "
        "dueWatches leave them out, until resumeAccount. Leases already held stay."
    )
    async def pause_account(self, info: Info, input: PauseAccountInput) -> AccountPausePayload:
        state = await info.context.store.pauses.pause_account(
            input.connector_name, input.account_key
        )
        return pause_payload(input.connector_name, state)

    @fields.mutation(
        description="Resume a provider account (accountKey omitted: its whole connector; an "
        "account paused on its own stays paused) and spread its due operations evenly over "
        "spreadMs from now, so no second holds more than ceil(backlog / spread seconds) + 1 "
        "of them (0: all due now). Their next attempt moves, so idle workers are woken "
        "(workAvailable)."
    )
    async def resume_account(self, info: Info, input: ResumeAccountInput) -> AccountPausePayload:
        state = await info.context.store.pauses.resume_account(
            input.connector_name, input.account_key, input.spread_ms
        )
        return pause_payload(input.connector_name, state)

    @fields.mutation(
        description="Cancel ATTEMPTED operations matching the filter, oldest first: each "
        "becomes FAILED with kind `cancelled` and loses its lease, so its holder's later "
        "renew, mark, record or finalize is refused. A send already marked keeps its marker "
        "(the provider may hold the write). Answers how many still match (remaining). An "
        "empty filter is BAD_USER_INPUT."
    )
    async def cancel_operations(
        self, info: Info, input: CancelOperationsInput
    ) -> CancelOperationsPayload:
        operator = info.context.store.operator
        where = to_store_filter(input.filter, info.context.viewer.visible_to)
        cancelled = await operator.cancel_operations(
            where, reason=input.reason, limit=limit_of(input.limit)
        )
        info.context.loaders.remember(*cancelled)
        remaining = await operator.count_cancellable(where)
        return CancelOperationsPayload(cancelled=len(cancelled), remaining=remaining)

    @fields.mutation(
        description="Reissue FAILED operations matching the filter that were never reissued, "
        "oldest first: each gets a new ATTEMPTED operation under the same caller with its "
        "envelope, due at once, at a key derived from the original's (`reissue:` and a "
        "SHA-256), linked both ways (reissuedFrom, reissuedAs); the original stays FAILED and "
        "is not matched again, so calling again pages through a backlog. An operation that "
        "was cancelled, or whose marked send's outcome is unknown, may already be at the "
        "provider: it is skipped unless `include` names its risk. Skipped and blocked "
        "operations are counted (skipped) and take no place of `limit`; remaining says how "
        "many a next call would reissue. An empty filter is BAD_USER_INPUT."
    )
    async def reissue_operations(
        self, info: Info, input: ReissueOperationsInput
    ) -> ReissueOperationsPayload:
        size = limit_of(input.limit)
        info.context.budget.take("limit", max(size, 0))
        operator = info.context.store.operator
        where = to_store_filter(input.filter, info.context.viewer.visible_to)
        include = [cast(str, value_of(risk)) for risk in input.include]
        created = await operator.reissue_operations(where, include=include, limit=size)
        info.context.loaders.remember(*created)
        operations = info.context.visible.operations("reissueOperations", written(created))
        counts = await operator.count_reissue(where, include=include)
        return ReissueOperationsPayload(
            operations=operations,
            skipped=ReissueSkipped(
                cancelled=counts.cancelled,
                outcome_unknown=counts.outcome_unknown,
                blocked=counts.blocked,
            ),
            remaining=counts.remaining,
        )

    @fields.mutation(
        description="Open a new repair generation on REPAIR_FAILED watches matching the "
        "filter, in identity order, as a MANUAL armWatch does: pending, 0 attempts, observing "
        "the document's current winner, due now. Answers how many still match (remaining)."
    )
    async def rearm_watches(self, info: Info, input: RearmWatchesInput) -> RearmWatchesPayload:
        operator = info.context.store.operator
        filtered = to_watch_filter(input.filter, info.context.viewer.visible_to)
        where = WatchFilter(document_ids=[]) if filtered is None else filtered
        rearmed = await operator.rearm_watches(where, limit=limit_of(input.limit))
        info.context.loaders.remember(*rearmed)
        remaining = await operator.count_rearmable(where)
        return RearmWatchesPayload(rearmed=len(rearmed), remaining=remaining)

    @fields.mutation(
        description="Free the leases of the ATTEMPTED operations at `keys` whatever their "
        "token: the holder's later renew, mark, record or finalize is refused. A send its run "
        "marked and never recorded counts as an abandoned attempt, as a takeover counts it. A "
        "key named twice refuses the call. Returns the released operations in key order "
        "(callerDID, then operationID)."
    )
    async def force_release_leases(
        self, info: Info, input: ForceReleaseLeasesInput
    ) -> ForceReleaseLeasesPayload:
        info.context.budget.take("keys", len(input.keys))
        released = await info.context.store.operator.force_release_leases(key_pairs(input.keys))
        info.context.loaders.remember(*released)
        operations = info.context.visible.operations("forceReleaseLeases", written(released))
        return ForceReleaseLeasesPayload(released=operations)


@strawberry.type
class ViewerQuery:
    @fields.query(
        description="Who the token names, its rights, and the root mutations they permit."
    )
    def viewer(self, info: Info) -> ViewerInfo:
        viewer = info.context.viewer
        return ViewerInfo(
            did=viewer.did,
            scopes=sorted(viewer.scopes),
            mutations=sorted(permitted(viewer, "Mutation")),
        )
