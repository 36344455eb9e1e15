"""Root fields of the dashboard's counts (docs/architecture.md, 'Counting for the dashboard'), mixed
into the root ``Query``: ``CountsQuery``. A tenant counts only its own rows (an observer every row):
the store narrows the counts to the viewer's ``visible_to`` (the rule in ``resolvers.permissions``
says so)."""

from typing import cast

import strawberry

from resolvers import fields
from resolvers.context import Info
from resolvers.queries import to_store_filter, to_watch_filter
from schema.counts import FailureGroup, OperationCount, ReissueCount, WatchCount
from schema.enums import ReissueRisk, value_of
from schema.inputs import OperationFilter, WatchFilter
from schema.operator import ReissueSkipped
from schema.scalars import EpochMillis
from schema.stats import OperationStatsBucket
from store.errors import InvalidInput
from store.operator import DEFAULT_LIMIT, MAX_FAILURE_GROUPS
from store.stats import MAX_BUCKETS


@strawberry.type
class CountsQuery:
    @fields.query(
        description="Operations by connector, provider account and state (with how many "
        "live ones are due and in flight), ordered by those three; exact counts over indexes "
        "that cover them. A viewer that does not read every row (`observer`, `operator`, "
        "`service` do) counts the operations it called or owns."
    )
    async def operation_counts(
        self, info: Info, connector_name: str | None = None
    ) -> list[OperationCount]:
        records = await info.context.store.counts.count_operations(
            connector_name=connector_name, visible_to=info.context.viewer.visible_to
        )
        return [OperationCount.from_record(record) for record in records]

    @fields.query(
        description="Operations claimed, committed, failed and retried per time bucket of "
        f"`bucketMs` from `since` to `until` (at most {MAX_BUCKETS} buckets), oldest first, "
        "every bucket of the window; counted from the event log when asked. A viewer that "
        "does not read every row (`observer`, `operator`, `service` do) counts the "
        "operations it called or owns. Each event counts by what it carries (its operation's "
        "caller, owner, connector and account), so a collected operation's events count as "
        "they did while it was kept, until the event log's retention collects them."
    )
    async def operation_stats(
        self,
        info: Info,
        since: EpochMillis,
        bucket_ms: int,
        until: EpochMillis | None = None,
        connector_name: str | None = None,
        account_key: str | None = None,
    ) -> list[OperationStatsBucket]:
        store = info.context.store
        try:
            records = await store.stats.operation_stats(
                since=since,
                until=store.clock() if until is None else until,
                bucket_ms=bucket_ms,
                connector_name=connector_name,
                account_key=account_key,
                visible_to=info.context.viewer.visible_to,
            )
        except InvalidInput as error:
            # `until` omitted is the server's now: the window's wrong end is the given one.
            if until is None and error.field == "until":
                raise type(error)("since", "must be earlier than the server's now") from error
            raise
        return [OperationStatsBucket.from_record(record) for record in records]

    @fields.query(
        description="Watches by connector and verification status, ordered by those two; "
        "exact counts. A viewer that does not read every row (`observer`, `operator`, "
        "`service` do) counts its own watches."
    )
    async def watch_counts(self, info: Info, connector_name: str | None = None) -> list[WatchCount]:
        records = await info.context.store.counts.count_watches(
            connector_name=connector_name, owner_did=info.context.viewer.visible_to
        )
        return [WatchCount.from_record(record) for record in records]

    @fields.query(
        description="FAILED operations matching the filter grouped by their last outcome's "
        "kind and error message, with exact counts: the largest group first, then by kind "
        f"and message; at most `first` groups (1 to {MAX_FAILURE_GROUPS:,}). A viewer that "
        "does not read every row (`observer`, `operator`, `service` do) groups the "
        "operations it called or owns."
    )
    async def failure_groups(
        self, info: Info, filter: OperationFilter | None = None, first: int = DEFAULT_LIMIT
    ) -> list[FailureGroup]:
        info.context.budget.take("first", max(first, 0))
        where = to_store_filter(filter, info.context.viewer.visible_to)
        records = await info.context.store.operator.failure_groups(where, limit=first)
        return [FailureGroup.from_record(record) for record in records]

    @fields.query(
        description="How many operations cancelOperations would cancel now for this filter, "
        "over as many calls as it takes (the ATTEMPTED ones matching it); exact."
    )
    async def cancellable_count(self, info: Info, filter: OperationFilter) -> int:
        where = to_store_filter(filter, info.context.viewer.visible_to)
        return await info.context.store.operator.count_cancellable(where)

    @fields.query(
        description="What reissueOperations would do now for this filter and include: how "
        "many it would reissue over as many calls as it takes (remaining), and what it would "
        "skip (skipped); exact."
    )
    async def reissuable_count(
        self, info: Info, filter: OperationFilter, include: list[ReissueRisk] | None = None
    ) -> ReissueCount:
        where = to_store_filter(filter, info.context.viewer.visible_to)
        risks = [cast(str, value_of(risk)) for risk in include or []]
        counts = await info.context.store.operator.count_reissue(where, include=risks)
        return ReissueCount(
            remaining=counts.remaining,
            skipped=ReissueSkipped(
                cancelled=counts.cancelled,
                outcome_unknown=counts.outcome_unknown,
                blocked=counts.blocked,
            ),
        )

    @fields.query(
        description="How many watches rearmWatches would re-arm now for this filter, over as "
        "many calls as it takes (the REPAIR_FAILED ones matching it); exact."
    )
    async def rearmable_count(self, info: Info, filter: WatchFilter) -> int:
        where = to_watch_filter(filter, info.context.viewer.visible_to)
        if where is None:
            return 0
        return await info.context.store.operator.count_rearmable(where)
