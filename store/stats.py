"""Operations over time for the dashboard's charts (docs/architecture.md, 'Counting for the
dashboard'): per time bucket of a window, how many operations were claimed, committed,
failed and scheduled for a retry, read from the event log.

An event counts in the bucket of its ``at`` (when its write took effect, epoch ms): a
``claimed`` event as a claim; a ``finalized`` or ``recorded`` event that left the operation
committed as a commit; a ``recorded`` or ``cancelled`` event that left it failed as a
failure; a ``recorded`` event that left it attempted as a retry. Nothing leaves a terminal
state, so each operation commits or fails at most once.

One statement walks ``kubun_connector_operation_event_at_idx`` over the window only (partial
over the counted actions, ``tables.COUNTED_EVENTS``): its cost follows the window's events,
not the log's. A filter by connector or account, or a tenant's view (``visible_to``: the
operations it called or owns), matches each counted event's own columns (the operation's
envelope fields it carries, ``store.operation_match``), so the events of a collected
operation count as they did while it was kept.
"""

from dataclasses import dataclass
from typing import Any, Final

import sqlalchemy as sa

from store import validation as check
from store.context import StoreContext
from store.errors import InvalidInput
from store.events import CANCELLED, CLAIMED, FINALIZED, RECORDED
from store.operation_match import EVENT, key_conditions
from store.records import ATTEMPTED, COMMITTED, FAILED
from store.tables import COUNTED_EVENTS
from store.tables import operation_event as event

MAX_BUCKETS: Final = 1440
"""The most buckets one window holds (``bucketMs`` at least the window's length / 1440: a
day by the minute)."""


@dataclass(frozen=True, slots=True)
class StatsBucket:
    """One time bucket, ``start`` (inclusive) to ``end`` (exclusive), epoch ms: how many
    operations were claimed, committed, failed and scheduled for a retry in it."""

    start: int
    end: int
    claimed: int
    committed: int
    failed: int
    retried: int


def _ones(condition: sa.ColumnElement[bool]) -> sa.ColumnElement[Any]:
    """How many events of the bucket meet ``condition``."""
    return sa.func.coalesce(sa.func.sum(sa.case((condition, 1), else_=0)), 0)


def _outcome(actions: tuple[str, ...], state: str) -> sa.ColumnElement[bool]:
    return sa.and_(event.c.action.in_(actions), event.c.to_state == state)


class StatsStore:
    """Counts of the operations' event log by time."""

    def __init__(self, context: StoreContext) -> None:
        self._db = context.db

    async def operation_stats(
        self,
        *,
        since: int,
        until: int,
        bucket_ms: int,
        connector_name: str | None = None,
        account_key: str | None = None,
        visible_to: str | None = None,
    ) -> list[StatsBucket]:
        """The buckets of ``bucket_ms`` from ``since`` (inclusive) to ``until`` (exclusive),
        epoch ms, oldest first, every one of them (zeros where nothing happened); the last
        ends at ``until`` and may be shorter. ``connector_name`` and ``account_key`` narrow
        to the operations of that connector and provider account, ``visible_to`` (a DID) to
        those it called or owns, collected ones included (by the event's own columns). One
        statement. Raises ``InvalidInput`` naming ``since``, ``until`` (not after
        ``since``), ``bucketMs`` (below 1, or more than ``MAX_BUCKETS`` buckets),
        ``connectorName``, ``accountKey`` or ``visibleTo``."""
        start = check.epoch_ms("since", since)
        end = check.epoch_ms("until", until)
        if end <= start:
            raise InvalidInput("until", "must be later than since")
        size = check.count("bucketMs", bucket_ms, minimum=1)
        buckets = -(-(end - start) // size)
        if buckets > MAX_BUCKETS:
            raise InvalidInput(
                "bucketMs", f"must give at most {MAX_BUCKETS} buckets from since to until"
            )
        narrowed = key_conditions(
            EVENT, connector_name=connector_name, account_key=account_key, visible_to=visible_to
        )
        bucket = ((event.c.at - start) // size).label("bucket")
        query = (
            sa.select(
                bucket,
                _ones(event.c.action == CLAIMED).label("claimed"),
                _ones(_outcome((FINALIZED, RECORDED), COMMITTED)).label("committed"),
                _ones(_outcome((RECORDED, CANCELLED), FAILED)).label("failed"),
                _ones(_outcome((RECORDED,), ATTEMPTED)).label("retried"),
            )
            .where(sa.text(COUNTED_EVENTS), event.c.at >= start, event.c.at < end, *narrowed)
            .group_by(bucket)
        )
        found = {int(row["bucket"]): row for row in await self._db.fetch_all(query)}
        return [
            StatsBucket(
                start=start + index * size,
                end=min(start + (index + 1) * size, end),
                claimed=int(found[index]["claimed"]) if index in found else 0,
                committed=int(found[index]["committed"]) if index in found else 0,
                failed=int(found[index]["failed"]) if index in found else 0,
                retried=int(found[index]["retried"]) if index in found else 0,
            )
            for index in range(buckets)
        ]
