"""Wake-ups for idle workers (``workAvailable``; docs/scaling.md, 'Live updates across processes'):
which connectors may have work that has just become leasable.

Two sources, both read here:

- writes: the triggers of migration 0009 fire on every write that can make an operation
  leasable (a claim; an operation finished, released, its lease shortened or its next
  attempt moved; an account's cap or throttle changed). On PostgreSQL they send
  ``NOTIFY kubun_connector_work`` with the connector's name, delivered at commit to every
  replica's listener (``listening``: one connection of its own per process, on
  ``listen_url`` when the pool goes through pgbouncer in transaction mode, where LISTEN
  does not work). On SQLite they stamp the connector's row of ``kubun_connector_wakeup``
  with the next sequence number, and each process tails that table.
- time: what writes nothing (a lease that lapses, a deferral that comes due, a throttle
  that ends) is found by asking when the next such moment is (``next_due_after``) and, once
  it has passed, which connectors it concerns (``due_between``).

A wake-up is a hint that work may be there, never the work itself: the worker asks
``leaseOperations``, and the database decides.
"""

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import asyncpg
import sqlalchemy as sa

from store import background
from store import lease_guards as guards
from store.context import StoreContext
from store.errors import StoreError
from store.tables import account, wakeup
from store.tables import operation as op
from store.urls import asyncpg_dsn

log = logging.getLogger("connector_store.wakeups")

CHANNEL = "kubun_connector_work"
"""The PostgreSQL channel migration 0009's triggers notify, with a connector's name."""
EVENTS_CHANNEL = "kubun_connector_events"
"""The PostgreSQL channel migration 0011's triggers notify, with the name of the event log
table that grew."""
KEEPALIVE_S = 10.0
"""How often the listener's connection is checked (``SELECT 1``) between notifications: a
connection lost without a word (a network cut) is found within this long."""
RECONNECT_DELAYS_S = (0.1, 0.5, 1.0, 2.0, 5.0)
"""Seconds between attempts to connect the listener again, the last one repeated."""
DEFAULT_POLL_S = 0.025
"""SQLite: how often ``kubun_connector_wakeup`` is read while someone waits."""

Wake = Callable[[str | None], None]
"""Told a connector's name when its work may have changed, or None when any connector's may
have (the listener has just connected, or connected again after it lost its connection)."""
Logged = Callable[[str | None], None]
"""PostgreSQL: told an event log's table name when it grew (``EVENTS_CHANNEL``), or None
when either may have (the listener has just connected, or connected again)."""


def _leased(after: Any) -> sa.ColumnElement[bool]:
    """A live operation holding a lease that lapses after ``after`` (epoch ms): a lease is
    live while ``lease_expires_at >= now``, so it lapses at ``lease_expires_at + 1``."""
    return sa.and_(guards.live(), op.c.lease_token.is_not(None), op.c.lease_expires_at >= after)


def _deferred(after: Any) -> sa.ColumnElement[bool]:
    """A live operation whose next attempt comes due after ``after`` (epoch ms)."""
    return sa.and_(guards.live(), op.c.next_attempt_at > after)


class WakeupsStore:
    """The wake-ups' reads and the listener (see the module docstring)."""

    def __init__(self, context: StoreContext) -> None:
        self.db = context.db

    async def next_due_after(self, after: int) -> int | None:
        """The earliest moment (epoch ms) later than ``after`` at which something becomes
        leasable without a write: a deferred operation's ``next_attempt_at``, a held lease's
        lapse (``lease_expires_at + 1``), an account's ``throttled_until``; None when there
        is none. Three index range scans."""
        moments = sa.union_all(
            sa.select(sa.func.min(op.c.next_attempt_at).label("at")).where(_deferred(after)),
            sa.select((sa.func.min(op.c.lease_expires_at) + 1).label("at")).where(_leased(after)),
            sa.select(sa.func.min(account.c.throttled_until).label("at")).where(
                account.c.throttled_until > after
            ),
        ).subquery()
        row = await self.db.fetch_one(sa.select(sa.func.min(moments.c.at).label("at")))
        return None if row is None or row["at"] is None else int(row["at"])

    async def due_between(self, after: int, until: int) -> list[str]:
        """The connectors (sorted) with something that became leasable without a write in
        ``(after, until]`` (epoch ms): a deferral that came due, a lease that lapsed, a
        throttle that ended."""
        names = sa.union(
            sa.select(op.c.connector_name).where(_deferred(after), op.c.next_attempt_at <= until),
            sa.select(op.c.connector_name).where(_leased(after), op.c.lease_expires_at < until),
            sa.select(account.c.connector_name).where(
                account.c.throttled_until > after, account.c.throttled_until <= until
            ),
        ).subquery()
        rows = await self.db.fetch_all(sa.select(names.c.connector_name).order_by(names.c[0]))
        return [row["connector_name"] for row in rows]

    async def last_stamp(self) -> int:
        """SQLite: the latest sequence number in ``kubun_connector_wakeup`` (0: none)."""
        row = await self.db.fetch_one(
            sa.select(sa.func.coalesce(sa.func.max(wakeup.c.seq), 0).label("seq"))
        )
        return 0 if row is None else int(row["seq"])

    async def stamped_after(self, seq: int) -> list[tuple[str, int]]:
        """SQLite: each connector stamped after ``seq``, with its stamp, oldest first."""
        rows = await self.db.fetch_all(
            sa.select(wakeup.c.connector_name, wakeup.c.seq)
            .where(wakeup.c.seq > seq)
            .order_by(wakeup.c.seq)
        )
        return [(row["connector_name"], int(row["seq"])) for row in rows]

    @contextlib.asynccontextmanager
    async def listening(
        self,
        wake: Wake,
        *,
        listen_url: str | None = None,
        wanted: asyncio.Event | None = None,
        poll_s: float = DEFAULT_POLL_S,
        logged: Logged | None = None,
    ) -> AsyncIterator[None]:
        """Tell ``wake`` of every write that may have made work leasable, for the block.

        PostgreSQL: ``LISTEN`` on a connection of its own to ``listen_url`` (default: the
        store's URL), connected again after a loss (``RECONNECT_DELAYS_S``; each connect
        tells ``wake(None)``: what committed meanwhile was not heard). SQLite: reads
        ``kubun_connector_wakeup`` every ``poll_s`` seconds while ``wanted`` is set (always
        when None), which covers the writes of every process on the file. ``logged``
        (PostgreSQL) is told of every commit that grew an event log, on the same
        connection (SQLite has no such notice: readers look at the logs). The block is
        entered once the listener listens (at most ``KEEPALIVE_S`` later); connection
        failures are logged and retried, never raised."""
        started = asyncio.Event()

        def first(name: str | None) -> None:
            started.set()
            wake(name)

        if self.db.dialect.notifies:
            dsn = asyncpg_dsn(listen_url or self.db.url)
            task = asyncio.create_task(
                self._listen(dsn, first, logged), name="connector-store-listen"
            )
        else:
            task = asyncio.create_task(
                self._tail(first, wanted, poll_s), name="connector-store-wakeup-tail"
            )
        try:
            await background.set_within(started, KEEPALIVE_S)
            yield
        finally:
            await background.stop(task)

    async def _listen(self, dsn: str, wake: Wake, logged: Logged | None) -> None:
        attempt = 0
        while True:
            try:
                # No named prepared statements (the keepalive's): behind pgbouncer in
                # transaction mode, where a listener should not be, they break at once.
                connection = await asyncpg.connect(dsn, timeout=KEEPALIVE_S, statement_cache_size=0)
            except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError, TimeoutError) as error:
                delay = RECONNECT_DELAYS_S[min(attempt, len(RECONNECT_DELAYS_S) - 1)]
                log.warning(
                    "wake-ups: cannot connect the listener (%s); again in %s s", error, delay
                )
                attempt += 1
                await asyncio.sleep(delay)
                continue
            attempt = 0
            try:
                await self._heard(connection, wake, logged)
            except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError, TimeoutError) as error:
                log.warning("wake-ups: the listener's connection was lost (%s)", error)
            finally:
                connection.terminate()

    @staticmethod
    async def _heard(connection: Any, wake: Wake, logged: Logged | None) -> None:
        """Listen on ``connection`` until it is lost: each notification's payload to
        ``wake`` (or ``logged``, for ``EVENTS_CHANNEL``), and ``wake(None)`` and
        ``logged(None)`` once listening (whatever committed before was not heard)."""
        lost = asyncio.Event()
        connection.add_termination_listener(lambda _: lost.set())
        await connection.add_listener(CHANNEL, lambda _c, _pid, _channel, name: wake(name))
        if logged is not None:
            await connection.add_listener(
                EVENTS_CHANNEL, lambda _c, _pid, _channel, table: logged(table)
            )
            logged(None)
        wake(None)
        while not await background.set_within(lost, KEEPALIVE_S):
            async with asyncio.timeout(KEEPALIVE_S):
                await connection.fetchval("SELECT 1")

    async def _tail(self, wake: Wake, wanted: asyncio.Event | None, poll_s: float) -> None:
        seq: int | None = None
        while True:
            try:
                if seq is None:
                    seq = await self.last_stamp()
                    wake(None)
                if wanted is not None:
                    await wanted.wait()
                for name, stamp in await self.stamped_after(seq):
                    wake(name)
                    seq = max(seq, stamp)
            except StoreError as error:
                log.warning("wake-ups: reading kubun_connector_wakeup failed: %s", error)
            await asyncio.sleep(poll_s)
