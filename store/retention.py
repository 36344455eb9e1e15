"""Retention: which operations are due for another attempt, and collecting finished ones
(seed retention.js)."""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from store import lease_guards as guards
from store import validation as check
from store.context import StoreContext
from store.operations import due_operation, lease_free
from store.records import ATTEMPTED, FAILED, TERMINAL_STATES, OperationRecord
from store.sizes import Measured, measured, row_bytes, sized_rows, within_bytes
from store.statements import Prepared, param
from store.tables import operation as op
from store.tables import operation_tombstone as tombstone
from store.tables import pending_auth as pa
from store.tables import projection_watch as watch
from store.tombstones import PUT_TOMBSTONE, TOMBSTONE_COLUMNS, tombstone_row
from store.watches import due_watch

DEFAULT_LIMIT = 100
MAX_LIMIT = 500
DEFAULT_COLLECT_LIMIT = 1000
DAY_S = 24 * 3600
RETAIN_FINISHED_S = 7 * DAY_S
RETAIN_FAILED_S = 30 * DAY_S
RETAIN_KEYS_S = 90 * DAY_S
RETAIN_EVENTS_S = max(RETAIN_FINISHED_S, RETAIN_FAILED_S)
"""The default retention periods, in seconds (the settings ``RETAIN_FINISHED_SECONDS``,
``RETAIN_FAILED_SECONDS``, ``RETAIN_KEYS_SECONDS``, ``RETAIN_EVENTS_SECONDS``): committed
and superseded operations after their last update, failed ones after theirs, a collected
operation's tombstone after its collection, an event after its write (the longest operation
retention, so a kept operation's history is whole)."""
MAX_RETAIN_S = check.MAX_EPOCH_MS // 1000
"""The longest retention period, in seconds: its ms stay within the store's times (epoch
ms, at most ``store.validation.MAX_EPOCH_MS``), which the sweep subtracts them from."""
MAX_COLLECT_LIMIT = 10_000
SWEEP_LOCK_KEY = 0x6B75_6275_6E5F_7377
"""The PostgreSQL advisory lock key one sweep holds across replicas (any fixed bigint)."""


@dataclass(frozen=True, slots=True)
class Backlog:
    """``count_backlog``: operations per state, and the operations and watches due."""

    operations_by_state: dict[str, int]
    due_operations: int
    due_watches: int


@dataclass(frozen=True, slots=True)
class ConnectorCounts:
    """``count_by_connector``: operations per (connector name, state) and watches per
    (connector name, verification status)."""

    operations: dict[tuple[str, str], int]
    watches: dict[tuple[str, str], int]


def _state_is(*states: str) -> sa.ColumnElement[bool]:
    return sa.or_(*(op.c.state == sa.literal_column(f"'{state}'") for state in sorted(states)))


def finished_before(older_than: Any, failed_older_than: Any) -> sa.ColumnElement[bool]:
    """A terminal operation past its retention: committed or superseded and last updated
    before ``older_than``, or failed and last updated before ``failed_older_than`` (epoch
    ms, strict; values or ``param``s). No index holds ``updated_at`` (every write sets it, and
    an update that changes no indexed column is HOT): each arm is a ``created_at`` range,
    bounded by the same cutoff (an operation is created before it is last updated), with
    ``updated_at`` checked on the rows in it; the partial ``(state, created_at)`` index of
    terminal rows holds it (its own condition repeated, so SQLite may use it too), or the
    order index where the planner prefers that."""
    return sa.and_(
        op.c.state != sa.literal_column(f"'{ATTEMPTED}'"),
        sa.or_(
            *(
                sa.and_(_state_is(*states), op.c.created_at < cutoff, op.c.updated_at < cutoff)
                for states, cutoff in (
                    (TERMINAL_STATES - {FAILED}, older_than),
                    ({FAILED}, failed_older_than),
                )
            )
        ),
    )


NOW = param("p_now", op.c.updated_at)
OPERATIONS_BY_STATE = Prepared(
    lambda _: sa.select(op.c.state, sa.func.count().label("n")).group_by(op.c.state)
)
DUE_OPERATIONS = Prepared(
    lambda _: sa.select(sa.func.count().label("n")).select_from(op).where(due_operation(NOW))
)
DUE_WATCHES = Prepared(
    lambda _: sa.select(sa.func.count().label("n")).select_from(watch).where(due_watch(NOW))
)
"""``count_backlog``'s three counts."""
COUNT_EXPIRED_PENDING_AUTH = Prepared(
    lambda _: (
        sa.select(sa.func.count().label("n"))
        .select_from(pa)
        .where(pa.c.expires_at < param("p_cutoff", pa.c.expires_at))
    )
)
"""``count_expired_pending_auth``'s count."""
OPERATIONS_BY_CONNECTOR = Prepared(
    lambda _: sa.select(op.c.connector_name, op.c.state, sa.func.count().label("n")).group_by(
        op.c.connector_name, op.c.state
    )
)
"""``count_by_connector``'s operations per connector and state."""
WATCHES_BY_CONNECTOR = Prepared(
    lambda _: sa.select(
        watch.c.connector_name, watch.c.verification_status, sa.func.count().label("n")
    ).group_by(watch.c.connector_name, watch.c.verification_status)
)
"""``count_by_connector``'s watches per connector and verification status."""
COUNT_FINISHED = Prepared(
    lambda _: (
        sa.select(sa.func.count().label("n"))
        .select_from(op)
        .where(
            finished_before(
                param("p_older_than", op.c.updated_at),
                param("p_failed_older_than", op.c.updated_at),
            )
        )
    )
)
"""``count_finished_operations``' count."""
EXPIRED_TOMBSTONES = tombstone.c.collected_at < param("p_cutoff", tombstone.c.collected_at)
DELETE_EXPIRED_TOMBSTONES = Prepared(
    lambda _: (
        sa.delete(tombstone)
        .where(
            tombstone.c.key_digest.in_(
                sa.select(tombstone.c.key_digest)
                .where(EXPIRED_TOMBSTONES)
                .limit(sa.bindparam("p_limit", type_=sa.Integer))
            )
        )
        .returning(tombstone.c.collected_at)
    )
)
"""``delete_expired_tombstones``' bounded delete."""
COUNT_EXPIRED_TOMBSTONES = Prepared(
    lambda _: sa.select(sa.func.count().label("n")).select_from(tombstone).where(EXPIRED_TOMBSTONES)
)
"""``count_expired_tombstones``' count."""
TRY_SWEEP_LOCK = Prepared(
    lambda _: sa.select(sa.func.pg_try_advisory_lock(SWEEP_LOCK_KEY).label("got"))
)
SWEEP_UNLOCK = Prepared(
    lambda _: sa.select(sa.func.pg_advisory_unlock(SWEEP_LOCK_KEY).label("released"))
)
"""``exclusive_sweep``'s advisory lock (PostgreSQL)."""


class RetentionStore:
    """The seed's ``createRetentionMethods``: due work, and collecting finished work."""

    def __init__(self, context: StoreContext) -> None:
        self._ctx = context
        self._db = context.db

    async def list_due_operations(
        self,
        now: int,
        limit: int = DEFAULT_LIMIT,
        connector_name: str | None = None,
        *,
        max_bytes: int | None = None,
    ) -> Measured[OperationRecord]:
        """Live operations a worker may pick up at ``now`` (epoch ms) (seed ``listDueOperations``),
        each with its size.

        State attempted, ``next_attempt_at`` null or at most ``now``, the lease free or
        expired (``lease_expires_at < now``), and the account not paused. Ordered by the
        time each became due (``next_attempt_at``, or ``created_at`` when null), then caller
        and operation id.
        ``limit`` is 1 to 500; ``max_bytes`` the most bytes (``store.sizes``: fewer
        operations, the first always). Raises ``InvalidInput`` for a bad ``now`` or ``limit``.
        """
        check.epoch_ms("now", now)
        check.count("limit", limit, minimum=1, maximum=MAX_LIMIT)
        live = sa.and_(guards.live(), guards.unpaused(op.c))
        never_deferred = (
            sa.select(op)
            .where(live, op.c.next_attempt_at.is_(None), lease_free(now))
            .order_by(op.c.created_at, op.c.caller_did, op.c.operation_id)
            .limit(limit)
        )
        next_attempt = (
            sa.select(op)
            .where(
                live,
                op.c.next_attempt_at.is_not(None),
                op.c.next_attempt_at <= now,
                lease_free(now),
            )
            .order_by(op.c.next_attempt_at, op.c.caller_did, op.c.operation_id)
            .limit(limit)
        )
        if connector_name is not None:
            connector = op.c.connector_name == check.key("connectorName", connector_name)
            never_deferred = never_deferred.where(connector)
            next_attempt = next_attempt.where(connector)
        # Each half walks its partial index in due order and stops at ``limit``; the
        # union of the two is ordered again (at most 2 * limit rows).
        both = sa.union_all(
            sa.select(never_deferred.subquery()), sa.select(next_attempt.subquery())
        ).subquery()
        due_at = sa.func.coalesce(both.c.next_attempt_at, both.c.created_at)
        order = (due_at, both.c.caller_did, both.c.operation_id)
        query = sa.select(both).order_by(*order).limit(limit)
        size = row_bytes(both.c)
        rows = await self._db.fetch_all(within_bytes(query, order, size, max_bytes))
        return measured(sized_rows(rows, OperationRecord.from_row), max_bytes)

    async def collect_finished_operations(
        self, older_than: int, limit: int = DEFAULT_COLLECT_LIMIT, *, failed_older_than: int
    ) -> int:
        """Delete at most ``limit`` terminal operations past their retention, leave a
        tombstone for each, and return how many went (seed ``collectFinishedOperations``):
        committed and superseded ones last updated before ``older_than``, failed ones last
        updated before ``failed_older_than`` (epoch ms, strict; failures are kept longer, as
        evidence). A live (attempted) operation is never deleted.

        One transaction: a bounded ``DELETE … WHERE key IN (SELECT … LIMIT n) RETURNING``
        (on PostgreSQL the inner select takes ``FOR UPDATE SKIP LOCKED``, so concurrent
        collectors split the work instead of waiting on each other), then the tombstones
        of the deleted operations, collected at the store's now (``store.tombstones``): a
        claim of a collected key finds the operation or its tombstone, never neither. Their
        events stay: the event log is collected apart, only as a prefix by its own age
        (``store.events``), so a reader resuming in it never meets a hole. Call again
        until it returns less than ``limit`` to collect a backlog in batches.
        ``limit`` is 1 to 10,000. Raises ``InvalidInput`` naming ``olderThan``,
        ``failedOlderThan`` or ``limit``.
        """
        finished = finished_before(
            check.epoch_ms("olderThan", older_than),
            check.epoch_ms("failedOlderThan", failed_older_than),
        )
        size = check.count("limit", limit, minimum=1, maximum=MAX_COLLECT_LIMIT)
        delete = self._db.dialect.delete_first(
            op, (op.c.caller_did, op.c.operation_id), finished, size
        )
        collected = delete.returning(*(op.c[name] for name in TOMBSTONE_COLUMNS))
        async with self._db.write_transaction():
            rows = await self._db.write_all(collected)
            now = self._ctx.clock()
            await self._db.write_many(PUT_TOMBSTONE, [tombstone_row(row, now) for row in rows])
        return len(rows)

    async def delete_expired_tombstones(
        self, cutoff: int, limit: int = DEFAULT_COLLECT_LIMIT
    ) -> int:
        """Delete at most ``limit`` tombstones collected before ``cutoff`` (epoch ms, strict:
        the sweeper's now - ``RETAIN_KEYS_SECONDS``) and return how many went; a claim of
        such a key is then claimed afresh. One bounded ``DELETE``; call again until it
        returns less than ``limit``. ``limit`` is 1 to 10,000. Raises ``InvalidInput``
        naming ``cutoff`` or ``limit``."""
        params = {
            "p_cutoff": check.epoch_ms("cutoff", cutoff),
            "p_limit": check.count("limit", limit, minimum=1, maximum=MAX_COLLECT_LIMIT),
        }
        return len(await self._db.write_prepared_all(DELETE_EXPIRED_TOMBSTONES, params))

    async def count_expired_tombstones(self, cutoff: int) -> int:
        """How many tombstones ``delete_expired_tombstones(cutoff)`` would delete in all
        (``collect --dry-run``). Raises ``InvalidInput`` naming ``cutoff``."""
        params = {"p_cutoff": check.epoch_ms("cutoff", cutoff)}
        row = await self._db.fetch_prepared(COUNT_EXPIRED_TOMBSTONES, params)
        assert row is not None, "a count returns one row"
        return int(row["n"])

    async def count_backlog(self, now: int) -> Backlog:
        """How many operations are in each state, and how many operations and watches are
        due at ``now`` (epoch ms) by the predicates of ``list_due_operations`` and
        ``list_due_watches``: three counting statements, for the metrics gauges."""
        params = {"p_now": check.epoch_ms("now", now)}
        by_state = await self._db.fetch_prepared_all(OPERATIONS_BY_STATE, {})
        due_operations = await self._db.fetch_prepared(DUE_OPERATIONS, params)
        due_watches = await self._db.fetch_prepared(DUE_WATCHES, params)
        return Backlog(
            operations_by_state={row["state"]: int(row["n"]) for row in by_state},
            due_operations=int(due_operations["n"]) if due_operations else 0,
            due_watches=int(due_watches["n"]) if due_watches else 0,
        )

    async def count_finished_operations(self, older_than: int, *, failed_older_than: int) -> int:
        """How many operations ``collect_finished_operations`` with the same cutoffs would
        delete in all (for progress reports). Raises ``InvalidInput`` naming ``olderThan``
        or ``failedOlderThan``."""
        params = {
            "p_older_than": check.epoch_ms("olderThan", older_than),
            "p_failed_older_than": check.epoch_ms("failedOlderThan", failed_older_than),
        }
        row = await self._db.fetch_prepared(COUNT_FINISHED, params)
        assert row is not None, "a count returns one row"
        return int(row["n"])

    async def count_expired_pending_auth(self, cutoff: int) -> int:
        """How many pending authorizations ``delete_expired_pending_auth(cutoff)`` would
        delete (``expires_at < cutoff``, epoch ms): ``collect --dry-run``'s count.
        Raises ``InvalidInput`` naming ``cutoff``."""
        params = {"p_cutoff": check.epoch_ms("cutoff", cutoff)}
        row = await self._db.fetch_prepared(COUNT_EXPIRED_PENDING_AUTH, params)
        assert row is not None, "a count returns one row"
        return int(row["n"])

    async def count_by_connector(self) -> ConnectorCounts:
        """Operations per connector name and state, and watches per connector name and
        verification status (two grouping statements, for the metrics gauges)."""
        operations = await self._db.fetch_prepared_all(OPERATIONS_BY_CONNECTOR, {})
        watches = await self._db.fetch_prepared_all(WATCHES_BY_CONNECTOR, {})
        return ConnectorCounts(
            operations={(row["connector_name"], row["state"]): int(row["n"]) for row in operations},
            watches={
                (row["connector_name"], row["verification_status"]): int(row["n"])
                for row in watches
            },
        )

    @asynccontextmanager
    async def exclusive_sweep(self) -> AsyncIterator[bool]:
        """Hold the sweep lock for the block, if no one else does: yields True when this
        caller may sweep, False when another replica is sweeping (then skip).

        On PostgreSQL a session advisory lock (``pg_try_advisory_lock``) on one pinned
        connection, released at the end; the block's statements run on that connection,
        each batch in its own transaction, so the lock spans the sweep without holding its
        row locks. On SQLite (one process per file) always True.
        """
        if self._db.dialect.one_process:
            yield True
            return
        async with self._db.pinned_connection():
            got = await self._db.fetch_prepared(TRY_SWEEP_LOCK, {})
            locked = got is not None and bool(got["got"])
            try:
                yield locked
            finally:
                if locked:
                    await self._db.fetch_prepared(SWEEP_UNLOCK, {})
