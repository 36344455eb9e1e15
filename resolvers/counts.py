"""Root fields of the dashboard's counts (docs/architecture.md, 'Counting for the dashboard'), mixed
into the root ``Query``: ``CountsQuery``. A tenant counts only its own rows (an observer every row):
the store narrows the counts to the viewer's ``visible_to`` (the rule in ``resolvers.permissions``
says so)."""

import strawberry

from resolvers import fields
from resolvers.context import Info
from schema.counts import OperationCount, WatchCount


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
        description="Watches by connector and verification status, ordered by those two; "
        "exact counts. A viewer that does not read every row (`observer`, `operator`, "
        "`service` do) counts its own watches."
    )
    async def watch_counts(self, info: Info, connector_name: str | None = None) -> list[WatchCount]:
        records = await info.context.store.counts.count_watches(
            connector_name=connector_name, owner_did=info.context.viewer.visible_to
        )
        return [WatchCount.from_record(record) for record in records]
