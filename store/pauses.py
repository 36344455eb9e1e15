"""Pausing and resuming provider accounts, one at a time or a connector's as a whole
(docs/runbook.md, 'Operator controls'; no seed counterpart).

An account paused on its own keeps ``paused_at`` in its row (``store.accounts``); a connector
paused as a whole has a row in ``paused_connector``. The pause binds through
``lease_guards.unpaused``, which a watch's claim and the due lists apply, and through
``lease_guards.open_account`` (the same probes, the throttle asked with the account's
pause), which every path that takes a lease applies. A resume spreads the due backlog it
releases over a window (``spread_update``), so the provider is not sent the whole backlog
in the same instant.
"""

from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from store import validation as check
from store.accounts import PAUSE, AccountsStore
from store.context import StoreContext
from store.events import OPERATIONS, RESUMED, run_logged
from store.operations import due_operation
from store.records import AccountLoad
from store.statements import Prepared, param
from store.tables import operation as op
from store.tables import paused_connector

MAX_SPREAD_MS = 86_400_000
"""The longest a resume spreads the due operations over, in ms: one day."""


PAUSE_CONNECTOR = Prepared(
    lambda insert: (
        insert(paused_connector)
        .values(
            connector_name=param("p_connector_name", paused_connector.c.connector_name),
            paused_at=param("p_updated_at", paused_connector.c.paused_at),
        )
        .on_conflict_do_nothing(index_elements=[paused_connector.c.connector_name])
        .returning(paused_connector.c.connector_name)
    )
)
"""``pause_account``'s pause of a whole connector (a second pause keeps the first one's
time; an account's own: ``PAUSE``)."""
RESUME_CONNECTOR = Prepared(
    lambda _: (
        sa.delete(paused_connector)
        .where(
            paused_connector.c.connector_name
            == param("p_connector_name", paused_connector.c.connector_name)
        )
        .returning(paused_connector.c.connector_name)
    )
)
"""``resume_account``'s end of a whole connector's pause (the account's own: ``PAUSE``
with ``p_paused_at`` None)."""
CONNECTOR_PAUSED = Prepared(
    lambda _: sa.select(paused_connector.c.connector_name).where(
        paused_connector.c.connector_name
        == param("p_connector_name", paused_connector.c.connector_name)
    )
)


def spread_update(
    connector_name: str, account_key: str | None, now: int, spread_ms: int
) -> sa.Update:
    """Reschedule the due operations (``due_operation`` at ``now``: attempted, due, lease
    free, account not paused) of ``connector_name`` (and ``account_key`` when given) evenly
    over ``spread_ms`` from ``now``: the k-th of n in due order (``next_attempt_at``, or
    ``created_at`` when null, then caller and operation id) becomes due at ``now`` +
    floor(k * ``spread_ms`` / n) (epoch ms). So any one second holds at most
    ceil(n / (``spread_ms`` / 1000)) + 1 of them. One statement, returning what the event
    log reads of each (``store.events.OPERATIONS``)."""
    scope = [op.c.connector_name == connector_name]
    if account_key is not None:
        scope.append(op.c.account_key == account_key)
    due_at = sa.func.coalesce(op.c.next_attempt_at, op.c.created_at)
    position = sa.func.row_number().over(order_by=[due_at, op.c.caller_did, op.c.operation_id])
    ranked = (
        sa.select(
            op.c.caller_did,
            op.c.operation_id,
            (position - 1).label("k"),
            sa.func.count().over().label("n"),
        )
        .where(*scope, due_operation(now))
        .cte("backlog")
    )
    later = sa.literal(now, sa.BigInteger) + (
        ranked.c.k * sa.literal(spread_ms, sa.BigInteger) // ranked.c.n
    )
    # A join (UPDATE … FROM), not a subquery per row: the backlog is read once.
    return (
        sa.update(op)
        .where(
            op.c.caller_did == ranked.c.caller_did,
            op.c.operation_id == ranked.c.operation_id,
            due_operation(now),
        )
        .values(next_attempt_at=later, updated_at=now)
        .returning(*(op.c[name] for name in OPERATIONS.source))
    )


@dataclass(frozen=True, slots=True)
class PauseState:
    """What ``pause_account``/``resume_account`` left: whether the connector is paused as
    a whole, the account (None when the call named the whole connector) with its live
    leases, and how many due operations a resume spread (``spread``)."""

    connector_paused: bool
    account: AccountLoad | None
    spread: int = 0


class PausesStore:
    """``pauseAccount`` and ``resumeAccount``."""

    def __init__(self, context: StoreContext, accounts: AccountsStore) -> None:
        self._ctx = context
        self._db = context.db
        self._accounts = accounts

    async def pause_account(self, connector_name: str, account_key: str | None) -> PauseState:
        """Pause the account (creating its row if absent), or with ``account_key`` None the
        whole connector: no lease is taken of its operations and no verifier claims its
        watches (``lease_guards.unpaused``), and the due lists leave them out, until
        ``resume_account``. Leases already held stay. One statement, then a read. Raises
        ``InvalidInput`` naming ``connectorName`` or ``accountKey``."""
        now = self._ctx.clock()
        params = {
            "p_connector_name": check.key("connectorName", connector_name),
            "p_account_key": check.optional_key("accountKey", account_key),
            "p_paused_at": now,
            "p_updated_at": now,
        }
        await self._db.write_prepared(PAUSE_CONNECTOR if account_key is None else PAUSE, params)
        return await self._state(params)

    async def resume_account(
        self, connector_name: str, account_key: str | None, spread_ms: int = 0
    ) -> PauseState:
        """End the account's own pause (creating its row if absent), or with
        ``account_key`` None the whole connector's (an account paused on its own stays
        paused), and spread the operations that are due
        and no longer paused evenly over ``spread_ms`` (0 to 86,400,000) from the store's
        now (``spread_update``, each logged ``resumed``) instead of making them all due at
        once; 0 makes them all due now. Either way their next attempt moves, which wakes idle
        workers (``workAvailable``: migration 0009's trigger on operations). One transaction.
        Raises ``InvalidInput`` naming ``connectorName``, ``accountKey`` or ``spreadMs``."""
        spread = check.count("spreadMs", spread_ms, maximum=MAX_SPREAD_MS)
        now = self._ctx.clock()
        params = {
            "p_connector_name": check.key("connectorName", connector_name),
            "p_account_key": check.optional_key("accountKey", account_key),
            "p_paused_at": None,
            "p_updated_at": now,
        }
        async with self._db.write_transaction():
            await self._db.write_prepared(
                RESUME_CONNECTOR if account_key is None else PAUSE, params
            )
            update = spread_update(connector_name, account_key, now, spread)
            rescheduled = len(await run_logged(self._db, OPERATIONS, RESUMED, update))
        state = await self._state(params)
        return PauseState(state.connector_paused, state.account, rescheduled)

    async def _state(self, params: dict[str, Any]) -> PauseState:
        """Whether ``p_connector_name`` is paused as a whole, and the account at
        ``p_account_key`` (None: none named) as it now stands."""
        connector = await self._db.fetch_prepared(CONNECTOR_PAUSED, params)
        account_load = (
            None if params["p_account_key"] is None else await self._accounts.read_account(params)
        )
        return PauseState(connector is not None, account_load)
