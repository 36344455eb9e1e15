"""Retention: which operations are due for another attempt (seed retention.js)."""

import sqlalchemy as sa

from store import validation as check
from store.context import StoreContext
from store.records import ATTEMPTED, OperationRecord
from store.tables import operation as op

DEFAULT_LIMIT = 100
MAX_LIMIT = 500


class RetentionStore:
    """The due-work half of the seed's ``createRetentionMethods``."""

    def __init__(self, context: StoreContext) -> None:
        self._db = context.db

    async def list_due_operations(
        self, now: int, limit: int = DEFAULT_LIMIT, connector_name: str | None = None
    ) -> list[OperationRecord]:
        """Live operations a worker may pick up at ``now`` (epoch ms) (seed ``listDueOperations``).

        State attempted, ``next_attempt_at`` null or at most ``now``, and the lease free or
        expired (``lease_expires_at < now``). Ordered by the time each became due
        (``next_attempt_at``, or ``created_at`` when null), then caller and operation id.
        ``limit`` is 1 to 500. Raises ``InvalidInput`` for a bad ``now`` or ``limit``.
        """
        check.epoch_ms("now", now)
        check.count("limit", limit, minimum=1, maximum=MAX_LIMIT)
        due_at = sa.func.coalesce(op.c.next_attempt_at, op.c.created_at)
        query = (
            sa.select(op)
            .where(
                op.c.state == ATTEMPTED,
                sa.or_(op.c.next_attempt_at.is_(None), op.c.next_attempt_at <= now),
                sa.or_(op.c.lease_token.is_(None), op.c.lease_expires_at < now),
            )
            .order_by(due_at, op.c.caller_did, op.c.operation_id)
            .limit(limit)
        )
        if connector_name is not None:
            query = query.where(op.c.connector_name == check.key("connectorName", connector_name))
        return [OperationRecord.from_row(row) for row in await self._db.fetch_all(query)]
