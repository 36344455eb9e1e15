"""Counts for people (the dashboard's overview; docs/architecture.md, 'Counting for the dashboard'):
operations by connector, account and state, with how many of the live ones are due and in flight,
and watches by connector and verification status.

Exact counts, kept cheap at 1M operations by indexes that cover them (``store.tables``), so
each count is an index-only scan on PostgreSQL and a covering-index scan on SQLite, with no
counter row that every write would have to update (a hot spot, and a second write per
transition):

- the totals walk ``kubun_connector_operation_account_state_idx`` (connector, account,
  state): few distinct keys, so PostgreSQL's B-tree deduplication keeps it small;
- due and in flight walk ``kubun_connector_operation_live_account_idx``, partial over live
  (attempted) operations only: its size follows the backlog, not the history;
- watches walk ``kubun_connector_projection_watch_status_idx`` (connector, status).

A tenant's counts (``visible_to``) read only the rows it called or owns: those are not
covered by the indexes (the DIDs are not in them) and cost a read of each of its rows.
"""

from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from store import lease_guards as guards
from store import validation as check
from store.context import StoreContext
from store.operation_match import visible
from store.operations import ready
from store.records import ATTEMPTED
from store.tables import operation as op
from store.tables import projection_watch as watch


@dataclass(frozen=True, slots=True)
class OperationCount:
    """How many operations of one connector's account are in one state (``count``); for
    ``attempted``, how many of them are due now (``due``: what ``list_due_operations``
    would hand out) and hold a live lease (``in_flight``); 0 for the other states."""

    connector_name: str
    account_key: str
    state: str
    count: int
    due: int
    in_flight: int


@dataclass(frozen=True, slots=True)
class WatchCount:
    """How many watches of one connector are in one verification status."""

    connector_name: str
    status: str
    count: int


def _ones(condition: sa.ColumnElement[bool]) -> sa.ColumnElement[Any]:
    """How many rows of the group meet ``condition``."""
    return sa.func.sum(sa.case((condition, 1), else_=0))


def _narrowed(query: sa.Select[Any], connector: str | None, did: str | None) -> sa.Select[Any]:
    """``query`` over operations, narrowed to a connector and to a DID's calls and rows."""
    if connector is not None:
        query = query.where(op.c.connector_name == connector)
    if did is not None:
        query = query.where(visible(op.c, did))
    return query


class CountsStore:
    """Grouped counts of operations and watches."""

    def __init__(self, context: StoreContext) -> None:
        self._ctx = context
        self._db = context.db

    async def count_operations(
        self, *, connector_name: str | None = None, visible_to: str | None = None
    ) -> list[OperationCount]:
        """Operations per (connector, account, state), ordered by those three, with the due
        and in-flight counts of the live ones at the store's now (epoch ms): the predicates
        of ``list_due_operations`` (``operations.ready``, and none due in a paused account)
        and of a live lease (``lease_guards.lease_held``). Only
        groups that have rows. ``connector_name`` narrows to one connector, ``visible_to``
        (a DID) to the operations it called or owns. One statement. Raises
        ``InvalidInput`` naming ``connectorName`` or ``visibleTo``."""
        connector = None if connector_name is None else check.key("connectorName", connector_name)
        did = None if visible_to is None else check.key("visibleTo", visible_to)
        now = self._ctx.clock()
        group = (op.c.connector_name, op.c.account_key)
        totals = sa.select(
            *group,
            op.c.state,
            sa.func.count().label("n"),
            sa.literal(0).label("due"),
            sa.literal(0).label("in_flight"),
        ).group_by(*group, op.c.state)
        live = (
            sa.select(
                *group,
                sa.literal_column(f"'{ATTEMPTED}'").label("state"),
                sa.literal(0).label("n"),
                # Over live rows only, so neither repeats ``live``: the state is no column of
                # the partial index the count reads.
                _ones(ready(now)).label("due"),
                _ones(guards.lease_held(now)).label("in_flight"),
            )
            .where(guards.live())
            .group_by(*group)
        )
        both = sa.union_all(
            _narrowed(totals, connector, did), _narrowed(live, connector, did)
        ).subquery()
        keys = (both.c.connector_name, both.c.account_key, both.c.state)
        query = (
            sa.select(
                *keys,
                sa.func.sum(both.c.n).label("n"),
                # A paused account's operations are due to no one (the due lists leave
                # them out): decided once per group.
                sa.case((guards.unpaused(both.c), sa.func.sum(both.c.due)), else_=0).label("due"),
                sa.func.sum(both.c.in_flight).label("in_flight"),
            )
            .group_by(*keys)
            .order_by(*keys)
        )
        return [
            OperationCount(
                connector_name=row["connector_name"],
                account_key=row["account_key"],
                state=row["state"],
                count=int(row["n"]),
                due=int(row["due"]),
                in_flight=int(row["in_flight"]),
            )
            for row in await self._db.fetch_all(query)
        ]

    async def count_watches(
        self, *, connector_name: str | None = None, owner_did: str | None = None
    ) -> list[WatchCount]:
        """Watches per (connector, verification status), ordered by those two; only groups
        that have rows. ``connector_name`` narrows to one connector, ``owner_did`` to one
        owner's watches. One statement. Raises ``InvalidInput`` naming ``connectorName`` or
        ``ownerDID``."""
        query = sa.select(
            watch.c.connector_name, watch.c.verification_status, sa.func.count().label("n")
        )
        if connector_name is not None:
            query = query.where(
                watch.c.connector_name == check.key("connectorName", connector_name)
            )
        if owner_did is not None:
            query = query.where(watch.c.owner_did == check.key("ownerDID", owner_did))
        keys = (watch.c.connector_name, watch.c.verification_status)
        return [
            WatchCount(
                connector_name=row["connector_name"],
                status=row["verification_status"],
                count=int(row["n"]),
            )
            for row in await self._db.fetch_all(query.group_by(*keys).order_by(*keys))
        ]
