"""Batch leasing (docs/worker-protocol.md, 'Leasing in batches'): hand out due operations and
watches many at a time, fairly across owners, within each account's cap and throttle and one lease
per provider entity; renew and release many leases at once. No seed counterpart (the seed leases one
operation at a time); the guards are the single methods', written once in ``store.operations``,
``store.watches`` and ``store.lease_guards``.

Durations are relative (ms from the store's now): no caller's clock decides a guard.
"""

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa
from sqlalchemy.sql.selectable import LateralFromClause

from store import lease_guards as guards
from store import validation as check
from store.context import StoreContext, current_actor
from store.errors import DatabaseBusy
from store.events import (
    ACTOR,
    CLAIMED,
    LEASE_ACTION,
    OPERATIONS,
    PRIOR_TOKEN,
    RELEASED,
    WATCHES,
    Logged,
    append_events,
    appended,
    current_actor_value,
    run_logged,
)
from store.items import operation_keys
from store.lease_guards import by_backend
from store.operations import (
    NOW,
    ROW_BYTES,
    due_operation,
    held_by,
    lease_free,
    lease_values,
    locked_in_key_order,
    releasable_by,
)
from store.records import OperationRecord, WatchRecord
from store.sizes import SIZE, Measured, row_bytes
from store.statements import Prepared, param
from store.tables import account
from store.tables import operation as op
from store.tables import projection_watch as watch
from store.watches import (
    IDENTITY_COLUMNS,
    claim_lapsed,
    claim_values,
    due_watch,
    waiting_watch,
)
from store.watches import NOW as WATCH_NOW

KEY_NAMES = ("caller_did", "operation_id")
CHOSEN_KEYS = (*KEY_NAMES, "prior_token")
"""What ``lease_operations`` keeps of each chosen row: its key and the lease token it found
(an event says ``taken_over`` when that was another token's)."""
CHOSEN_ORDER = ("owner_rank", "due_at", *KEY_NAMES)
"""The order ``lease_operations`` picks in (``_chosen``'s columns): fair across owners."""
OWNERS = "owners"
"""The label of ``_ranked_by_owner``'s count of owners with attempted operations."""
HEAD_FIRSTS = "head_firsts"
"""The label of ``_ranked_head``'s count of owners in the head: ``_chosen`` leases from a
head only when its firsts with room are enough."""
STALE = "stale"
"""The label of ``_chosen``'s fact: a capped account was skipped as locked or stale."""

ALL = "all"
"""A walk that ranks every qualifying operation at once (``_ranked_all``)."""
BY_OWNER = "by_owner"
"""A walk of each owner's first ``depth`` qualifying operations (``_ranked_by_owner``)."""
HEAD = "head"
"""A walk of the first ``depth`` qualifying operations in due order, keeping each owner's
first (``_ranked_head``)."""
HEAD_ROWS = 8
"""How many operations due per operation wanted the ``HEAD`` walk reads: room for more than
one of an owner, for rows the guards refuse and for the rows peers' statements hold locked
(16 leasers at once, each leasing from the same head)."""

HEAD_ROUNDS = 3
"""How many ``HEAD`` statements one call runs while the head holds the owners it wants but
leased none (peers' statements held them all): each is a new snapshot, which counts the
leases peers have committed since."""

HEAD_SKIPS = 31
"""How many calls after a head that held too few owners skip the head (``LeasingStore``):
the head is read again after them, in case the backlog that filled it is gone."""

Filters = tuple[Any, list[str] | None, Any]
"""``lease_operations``' connector, account keys and caller (each None: any; the connector
and the caller a value or a ``param``)."""

DEFAULT_BATCH = 10
MAX_BATCH = 500
"""The most operations or watches one call leases, and the most account keys it names
(the most keys a renewal or release names is ``store.items.MAX_ITEMS``)."""


def fair_order(records: Sequence[OperationRecord]) -> list[OperationRecord]:
    """``records`` in the order ``lease_operations`` hands them out: fair across owners (each
    owner's k-th before any owner's (k+1)-th), then the time each became due
    (``next_attempt_at``, or ``created_at`` when never deferred), then caller and operation id.
    """
    by_due = sorted(records, key=_due_key)
    seen: dict[str, int] = {}
    ranked = []
    for record in by_due:
        rank = seen[record.owner_did] = seen.get(record.owner_did, 0) + 1
        ranked.append((rank, _due_key(record), record))
    return [record for _, _, record in sorted(ranked, key=lambda item: item[:2])]


def _due_key(record: OperationRecord) -> tuple[int, str, str]:
    due = record.created_at if record.next_attempt_at is None else record.next_attempt_at
    return (due, record.caller_did, record.operation_id)


def _duration(field: str, value: Any) -> int:
    return check.lease_ms(field, value)


def _batch(value: Any) -> int:
    return check.count("limit", value, minimum=1, maximum=MAX_BATCH)


@dataclass
class _Lease:
    """One ``lease_operations`` call: its token, duration (ms) and byte allowance, and what
    it has leased so far (records with their sizes)."""

    token: str
    duration: int
    max_bytes: int | None
    at_least_one: bool
    leased: list[tuple[OperationRecord, int]] = field(default_factory=list)

    def bytes_left(self) -> int | None:
        spent = sum(size for _, size in self.leased)
        return None if self.max_bytes is None else max(0, self.max_bytes - spent)

    def may_pass(self) -> bool:
        """The next statement may lease its first row past the bytes left."""
        return self.at_least_one and not self.leased

    def add(self, rows: Sequence[Any]) -> None:
        self.leased += [(OperationRecord.from_row(row), row[SIZE]) for row in rows]

    def in_fair_order(self) -> Measured[OperationRecord]:
        sizes = {(r.caller_did, r.operation_id): size for r, size in self.leased}
        ordered = fair_order([record for record, _ in self.leased])
        return Measured(ordered, [sizes[(r.caller_did, r.operation_id)] for r in ordered])


class LeasingStore:
    """``leaseOperations``, ``renewLeases``, ``releaseLeases`` and ``claimWatches``."""

    def __init__(self, context: StoreContext) -> None:
        self._ctx = context
        self._db = context.db
        self._owners: int | None = None
        """How many owners had attempted operations at the last ``lease_operations``
        statement (PostgreSQL): the next one's walk depth is chosen from it, so the depth is
        a constant the planner sees (``_ranked_by_owner``)."""
        self._head_skips = 0
        """How many more calls go straight to the ``BY_OWNER`` walk (PostgreSQL): set to
        ``HEAD_SKIPS`` when the head of the due order held too few owners (a blocked
        account's backlog due first fills it), so such a backlog costs the head's read once
        in ``HEAD_SKIPS + 1`` calls, not every call."""

    async def lease_operations(
        self,
        token: str,
        lease_ms: int,
        *,
        limit: int = DEFAULT_BATCH,
        connector_name: str | None = None,
        account_keys: Sequence[str] | None = None,
        caller_did: str | None = None,
        max_bytes: int | None = None,
        at_least_one: bool = True,
    ) -> Measured[OperationRecord]:
        """Lease up to ``limit`` (1 to 500) operations to ``token`` until the store's now +
        ``lease_ms`` (1,000 to 3,600,000) and return them in ``fair_order``, each with its
        size (``store.sizes.row_bytes``).

        ``max_bytes`` (None: no bound) bounds the answer: in the order they are chosen, only
        the operations whose running size stays within it are leased, the rest are left as
        they were (never leased and then refused); the first is leased even when it alone
        passes ``max_bytes`` when ``at_least_one`` (an answer that may pass by its first row,
        as the request's first list may: ``resolvers.budget``), so an operation larger than
        the budget is still handed out.

        An operation qualifies when it is attempted, due (``next_attempt_at`` null or at
        most now), its lease free or lapsed, called by ``caller_did`` when given (a
        tenant's own calls), of ``connector_name`` and one of ``account_keys`` when given
        (an empty list: nothing), and ``lease_guards.lease_allowed``: its account not
        throttled, it the oldest attempted operation of its provider entity, no other of
        the entity holding a live lease. Each capped account hands out at most its cap less
        its live leases, in fair order. A takeover of a lapsed lease counts an abandoned
        send as ``acquire_lease`` does (``lease_values``).

        On PostgreSQL each round is one statement, no transaction around it. When the owners with
        attempted operations that the last ``BY_OWNER`` walk counted (the first call counts them
        first) are at least ``limit``, and no head of the last ``HEAD_SKIPS`` calls held too few
        owners, it first reads the head of the due order (``_ranked_head``: ``HEAD_ROWS`` times
        ``limit`` rows) and, when the head holds ``limit`` owners of which ``limit`` have room in
        their accounts' caps, leases each owner's first in due order; a call that leases some so is
        done (fewer than ``limit`` only when the bytes ran out or peers' statements held some:
        another round would rank its owners without what it just leased), one that leased none while
        peers held the head reads it again (``HEAD_ROUNDS`` in all). Else a CTE walks, of each owner
        with an account that may lease, the owner's first ``depth`` qualifying operations, walked
        account by account over its accounts that may lease (``_ranked_by_owner``,
        ``_leasing_groups``; ``depth`` = twice ``limit`` over the owners with attempted operations
        that the previous statement counted, rounded up; the first call counts them first), so the
        cost follows those accounts, not the operations due; it locks the capped accounts among them
        with ``FOR UPDATE SKIP LOCKED`` and keeps only those whose counts its snapshot holds fresh
        (``_fresh_capped``), picks the operations with ``FOR UPDATE SKIP LOCKED`` (a peer's rows are
        skipped, never waited for), leases them with ``UPDATE … RETURNING`` and writes the capped
        accounts it drew on (``_touch_accounts``). When that leases fewer than ``limit``: if a
        capped account was skipped, one transaction locks every capped account in scope (in key
        order, waiting) and goes again; and while some owner may have more to give, it goes again
        twice as deep (``_deeper``). For a tenant (``caller_did`` given) one statement ranks every
        qualifying operation it called (``_ranked_all``, found by the key's leading column). On
        SQLite one ``BEGIN IMMEDIATE`` transaction counts the owners with attempted operations and
        runs the ``BY_OWNER`` walk (``_ranked_by_owner_sqlite``) and its deeper rounds (a tenant's:
        ``_ranked_all``); no plan of either reads the due operations of an owner past the ones it
        hands out. Raises ``InvalidInput`` naming ``leaseToken``, ``leaseMs``, ``limit``,
        ``connectorName``, ``accountKeys`` or ``maxBytes``; ``DatabaseBusy`` (a lock waited for past
        the lock timeout) only when no round of the call has leased anything yet: else the call
        returns what its committed rounds leased."""
        check.key("leaseToken", token)
        duration = _duration("leaseMs", lease_ms)
        size = _batch(limit)
        connector = check.optional_key("connectorName", connector_name)
        accounts = None
        if account_keys is not None:
            check.item_count("accountKeys", account_keys, most=MAX_BATCH)
            accounts = sorted(set(check.key_list("accountKeys", list(account_keys))))
            if not accounts:
                return Measured()
        caller = check.optional_key("callerDID", caller_did)
        if max_bytes is not None:
            check.count("maxBytes", max_bytes, minimum=1)
        where: Filters = (connector, accounts, caller)
        lease = _Lease(token, duration, max_bytes, at_least_one)
        now = self._ctx.clock()
        if self._db.dialect.one_writer:
            async with self._db.write_transaction():
                if caller is not None:
                    await self._lease(now, lease, size, where, ALL, None)
                    return lease.in_fair_order()
                counted = await self._db.fetch_one(_count_owners())
                self._owners = int(counted["n"]) if counted else 0
                depth = max(1, -(-2 * size // max(self._owners, 1)))
                owners, _ = await self._lease(now, lease, size, where, BY_OWNER, depth)
                await self._deeper(now, lease, where, size, owners, depth)
            return lease.in_fair_order()
        if caller is not None:
            # A tenant's calls are found through the key's leading column, the caller.
            await self._lease(now, lease, size, where, ALL, None)
            return lease.in_fair_order()
        if self._owners is None:
            counted = await self._db.fetch_one(_count_owners())
            self._owners = int(counted["n"]) if counted else 0
        if self._head_skips:
            self._head_skips -= 1
        elif self._owners >= size:
            for _ in range(HEAD_ROUNDS):
                firsts, _ = await self._lease(now, lease, size, where, HEAD, HEAD_ROWS * size)
                if lease.leased:
                    # Fewer than ``size`` when the bytes ran out or peers held some: another
                    # round would rank this call's owners without what it just leased.
                    return lease.in_fair_order()
                if not firsts:
                    self._head_skips = HEAD_SKIPS
                    break
        depth = max(1, -(-2 * size // max(self._owners, 1)))
        owners, stale = await self._lease(now, lease, size, where, BY_OWNER, depth)
        self._owners = owners or self._owners
        committed = len(lease.leased)
        waits = stale and committed < size
        try:
            if waits:
                # A peer held or had just leased from a capped account: wait for its lock,
                # then count afresh.
                async with self._db.write_transaction():
                    await self._db.fetch_all(_lock_capped_accounts(connector, accounts))
                    owners, _ = await self._lease(
                        now, lease, size - committed, where, BY_OWNER, depth
                    )
                    await self._deeper(now, lease, where, size, owners, depth)
            else:
                await self._deeper(now, lease, where, size, owners, depth)
        except DatabaseBusy:
            # The rounds before were committed, each on its own: what they leased is the
            # caller's, and a refusal would leave it held by a token nobody was told of
            # until it lapses. The waiting transaction's own rounds were rolled back.
            if waits:
                del lease.leased[committed:]
            if not lease.leased:
                raise
        return lease.in_fair_order()

    async def _lease(
        self, now: int, lease: "_Lease", size: int, where: Filters, walk: str, depth: int | None
    ) -> tuple[int, bool]:
        """Lease the first ``size`` qualifying operations (``where``; found by ``walk``:
        ``ALL``, ``BY_OWNER`` ``depth`` deep or ``HEAD`` ``depth`` long) that ``_chosen``
        keeps and the bytes ``lease`` has left allow (``_within``), in one statement; add
        them to ``lease``. Returns how many owners the walk saw (``OWNERS``: for ``HEAD``
        the owners in the head, 0 when fewer than ``size``; 0 for ``ALL``) and whether a
        capped account with candidates was skipped as locked or stale (``_fresh_capped``;
        PostgreSQL). Without ``accountKeys`` (an IN list) the statements are built once per
        shape (``_prepared_lease``, ``_prepared_sqlite_lease``); on PostgreSQL a ``HEAD``
        walk runs as a prepared statement (its plan, with or without its values, reads the
        due indexes in order), the others planned with their values each time
        (``Database.custom_plans``)."""
        expires_at = now + lease.duration
        bounds = (lease.bytes_left(), lease.may_pass())
        connector, accounts, caller = where
        shape = (connector is not None, caller is not None, bounds[0] is not None, bounds[1])
        values = {
            "p_now": now,
            "p_token": lease.token,
            "p_expires": expires_at,
            "p_size": size,
            "p_depth": depth,
            "p_connector": connector,
            "p_caller": caller,
            "p_max_bytes": bounds[0],
            "p_actor": current_actor(),
        }
        if self._db.dialect.one_writer:
            # SQLite returns no column of ``kept``: the tokens found are read first, in the
            # same ``BEGIN IMMEDIATE`` transaction, so the update leases exactly those rows.
            if accounts is None:
                choose, write = _prepared_sqlite_lease(walk, *shape)
                found = await self._db.fetch_prepared_all(choose, values)
                rows = await self._db.write_prepared_all(write, values)
            else:
                ranked = _ranked(walk, now, where, depth, size, False)
                update, kept, _ = _lease_update(
                    now, size, ranked, bounds, lease.token, expires_at, False
                )
                found = await self._db.fetch_all(sa.select(kept))
                rows = await self._db.write_all(update.returning(op, ROW_BYTES.label(SIZE)))
            prior = {(row["caller_did"], row["operation_id"]): row["prior_token"] for row in found}
            await append_events(
                self._db,
                OPERATIONS,
                LEASE_ACTION,
                [
                    {**row, "prior_token": prior[(row["caller_did"], row["operation_id"])]}
                    for row in rows
                ],
                (PRIOR_TOKEN,),
            )
            lease.add(rows)
            return (self._owners or 0) if walk == BY_OWNER else 0, False
        if accounts is None:
            statement = _prepared_lease(walk, *shape)
            if walk == HEAD:
                rows = await self._db.write_prepared_all(statement, values)
            else:
                # Planned without its values, the walk may read every owner's rows in due
                # order for each owner, filtering on the owner: seconds a call under load.
                async with self._db.custom_plans():
                    rows = await self._db.write_prepared_all(statement, values)
        else:
            ranked = _ranked(walk, now, where, depth, size)
            leasing = _lease_update(now, size, ranked, bounds, lease.token, expires_at, True)
            rows = await self._db.write_all(_lease_statement(leasing, current_actor_value()))
        lease.add([row for row in rows if row["caller_did"] is not None])
        return (int(rows[0][OWNERS] or 0), bool(rows[0][STALE])) if rows else (0, False)

    async def _deeper(
        self, now: int, lease: _Lease, where: Filters, size: int, owners: int, depth: int
    ) -> None:
        """The rounds of a ``lease_operations`` call on PostgreSQL after its first (which
        walked ``owners`` owners ``depth`` rows deep): while it leased fewer than ``size``
        and some owner may have more to give, walk twice as deep, up to ``size``."""
        while owners and len(lease.leased) < size and depth < size:
            # Some owners had fewer than the depth to give, or a peer held them: deeper.
            depth = min(size, depth * 2)
            owners, _ = await self._lease(
                now, lease, size - len(lease.leased), where, BY_OWNER, depth
            )

    async def renew_leases(
        self,
        token: str,
        lease_ms: int,
        keys: Sequence[tuple[str, str]],
        *,
        caller_did: str | None = None,
    ) -> Measured[OperationRecord]:
        """Move the leases ``token`` holds on the operations at ``keys`` (caller, operation
        id; at most 500) to the store's now + ``lease_ms`` (1,000 to 3,600,000), in any
        state, and return the renewed operations in key order, each with its size (charged
        by the reader, not bounded: at most 500, the keys the caller named). The holder's guard of
        ``renew_lease`` (``held_by``), and the lease must not have lapsed: a lapsed lease is
        taken again through ``acquire_lease`` or ``lease_operations``, which apply the
        account caps and the one-lease-per-entity rule. ``caller_did`` given: only that
        caller's operations (a tenant's). One statement (on PostgreSQL it locks the rows in
        key order first, ``locked_in_key_order``). Raises ``InvalidInput`` naming
        ``leaseToken``, ``leaseMs``, ``keys`` or ``keys[i].<field>`` (a key named twice
        among them)."""
        check.key("leaseToken", token)
        duration = _duration("leaseMs", lease_ms)
        wanted = operation_keys(keys, fewest=0)
        caller = check.optional_key("callerDID", caller_did)
        if not wanted:
            return Measured()
        now = self._ctx.clock()
        held = [
            self._db.dialect.keys_in(op, wanted),
            held_by(token),
            op.c.lease_expires_at >= now,
        ]
        update = (
            sa.update(op)
            .where(locked_in_key_order(self._db.dialect, *held))
            .values(lease_expires_at=now + duration, updated_at=now)
            .returning(op, ROW_BYTES.label(SIZE))
        )
        if caller is not None:
            update = update.where(op.c.caller_did == caller)
        return _in_order(await self._db.write_all(update))

    async def release_leases(
        self, token: str, keys: Sequence[tuple[str, str]], *, caller_did: str | None = None
    ) -> Measured[OperationRecord]:
        """Drop the leases of the operations at ``keys`` (at most 500) where ``token`` holds
        it or none is held (``release_lease``'s guard, ``releasable_by``), and return those
        operations in key order, each with its size (charged, not bounded). ``caller_did``
        given: only that caller's operations. One statement (on PostgreSQL it locks the rows
        in key order first, ``locked_in_key_order``). Raises ``InvalidInput`` naming
        ``leaseToken``, ``keys`` or ``keys[i].<field>`` (a key named twice among them)."""
        check.key("leaseToken", token)
        wanted = operation_keys(keys, fewest=0)
        caller = check.optional_key("callerDID", caller_did)
        if not wanted:
            return Measured()
        now = self._ctx.clock()
        held = [self._db.dialect.keys_in(op, wanted), releasable_by(token)]
        update = (
            sa.update(op)
            .where(locked_in_key_order(self._db.dialect, *held))
            .values(lease_token=None, lease_expires_at=None, updated_at=now)
            .returning(op, ROW_BYTES.label(SIZE))
        )
        if caller is not None:
            update = update.where(op.c.caller_did == caller)
        return _in_order(await run_logged(self._db, OPERATIONS, RELEASED, update))

    async def claim_watches(
        self,
        claim_ms: int,
        *,
        limit: int = DEFAULT_BATCH,
        connector_name: str | None = None,
        owner_did: str | None = None,
        max_bytes: int | None = None,
        at_least_one: bool = True,
    ) -> Measured[WatchRecord]:
        """Claim up to ``limit`` (1 to 500) due pending watches until the store's now +
        ``claim_ms`` (1,000 to 3,600,000), fair across owners (each owner's k-th before any
        owner's (k+1)-th, then ``next_attempt_at``, then identity), and return them in that
        order. Due is ``claim_watch_attempt``'s guard (``due_watch``) at the store's now; a
        takeover of a lapsed claim counts the abandoned verification attempt
        (``claim_values``). ``owner_did`` given: only that owner's watches (a tenant's).
        ``max_bytes`` and ``at_least_one`` bound the answer as ``lease_operations``' do: a
        watch past them is not claimed; each returned watch carries its size. For the
        service (no ``owner_did``) one statement first claims from the head of the due order
        (``_watch_head``: ``HEAD_ROWS`` times ``limit`` watches), which is exact for the
        fair order when the head holds ``limit`` owners or every due watch; when that claims
        none, one statement ranks every due watch (a head that claimed fewer than ``limit``
        did so for the byte bound or for peers holding some, and the call is done). Each
        takes its rows with ``FOR UPDATE SKIP LOCKED`` on PostgreSQL, and passes over a row
        a peer claimed since its snapshot. Raises ``InvalidInput`` naming ``claimMs``,
        ``limit``, ``connectorName`` or ``maxBytes``."""
        duration = _duration("claimMs", claim_ms)
        size = _batch(limit)
        connector = check.optional_key("connectorName", connector_name)
        owner = check.optional_key("ownerDID", owner_did)
        if max_bytes is not None:
            check.count("maxBytes", max_bytes, minimum=1)
        now = self._ctx.clock()
        shape = (connector is not None, owner is not None, max_bytes is not None)
        values = {
            "p_now": now,
            "p_until": now + duration,
            "p_size": size,
            "p_depth": HEAD_ROWS * size,
            "p_connector": connector,
            "p_owner": owner,
            "p_max_bytes": max_bytes,
        }
        rows = []
        if owner is None:
            rows = await _claim_watches(*shape, at_least_one, head=True).run(self._db, values)
        if not rows:
            # Fewer than ``size`` from the head means the bytes ran out or peers held some:
            # another round would rank this call's owners without what it just claimed.
            rows = await _claim_watches(*shape, at_least_one).run(self._db, values)
        sized = [(WatchRecord.from_row(row), row[SIZE]) for row in rows]
        ranks: dict[str, int] = {}
        placed = []
        for record, size in sorted(
            sized, key=lambda pair: (pair[0].next_attempt_at or 0, pair[0].identity.parts)
        ):
            owner_rank = ranks[record.owner_did] = ranks.get(record.owner_did, 0) + 1
            placed.append(
                ((owner_rank, record.next_attempt_at or 0, record.identity.parts), record, size)
            )
        placed.sort(key=lambda item: item[0])
        return Measured((record for _, record, _ in placed), (size for _, _, size in placed))


def _ranked_watches(connector: bool, owner: bool) -> sa.Subquery:
    """Every due watch (``due_watch`` at ``p_now``; of ``p_connector``, ``p_owner`` when
    given) with its rank within its owner: one window over them all."""
    rank = sa.func.row_number().over(
        partition_by=watch.c.owner_did, order_by=[watch.c.next_attempt_at, *IDENTITY_COLUMNS]
    )
    due = sa.select(*IDENTITY_COLUMNS, watch.c.next_attempt_at, rank.label("owner_rank")).where(
        due_watch(WATCH_NOW)
    )
    return _watches_of(due, connector, owner).subquery("ranked")


def _watches_of(query: sa.Select[Any], connector: bool, owner: bool) -> sa.Select[Any]:
    """``query`` over watches narrowed to ``p_connector`` and ``p_owner`` when given."""
    if connector:
        query = query.where(watch.c.connector_name == param("p_connector", watch.c.connector_name))
    if owner:
        query = query.where(watch.c.owner_did == param("p_owner", watch.c.owner_did))
    return query


def _watch_head(connector: bool) -> sa.Subquery:
    """The due watches of the head of the due order (the first ``p_depth`` watches waiting
    at ``p_now``, ``waiting_watch``, of ``p_connector`` when given, read in
    ``next_attempt_at`` order; ``due_watch``'s pause guard after the limit) with their rank
    within their owner: each owner's first when they are at least ``p_size`` owners, every
    one when the head holds every due watch; else none. As ``_ranked_head`` for operations:
    in due order an owner's first watch seen is its first, so either way the first
    ``p_size`` in fair order are among these."""
    scan = sa.select(*IDENTITY_COLUMNS, watch.c.next_attempt_at).where(waiting_watch(WATCH_NOW))
    depth = sa.bindparam("p_depth", type_=sa.Integer)
    order = [watch.c.next_attempt_at, *IDENTITY_COLUMNS]
    head = _watches_of(scan, connector, False).order_by(*order).limit(depth).subquery("head")
    counted = sa.select(head, sa.func.count().over().label("head_rows")).subquery("counted")
    rank = sa.func.row_number().over(
        partition_by=counted.c.owner_did,
        order_by=[counted.c.next_attempt_at, *(counted.c[c.name] for c in IDENTITY_COLUMNS)],
    )
    ranked = (
        sa.select(counted, rank.label("owner_rank"))
        .where(guards.unpaused(counted.c))
        .subquery("guarded")
    )
    firsts = sa.func.count().filter(ranked.c.owner_rank == 1).over()
    with_firsts = sa.select(ranked, firsts.label("firsts")).subquery("with_firsts")
    size = sa.bindparam("p_size", type_=sa.Integer)
    return (
        sa.select(
            *(with_firsts.c[c.name] for c in IDENTITY_COLUMNS),
            with_firsts.c.next_attempt_at,
            with_firsts.c.owner_rank,
        )
        .where(
            sa.or_(
                with_firsts.c.head_rows < depth,
                sa.and_(with_firsts.c.owner_rank == 1, with_firsts.c.firsts >= size),
            )
        )
        .subquery("ranked")
    )


@functools.cache
def _claim_watches(
    connector: bool, owner: bool, bounded: bool, may_pass: bool, head: bool = False
) -> Logged:
    """``claim_watches``' write, built once per shape: narrowed to a connector and an owner
    when those are given, bounded in bytes when ``bounded`` (the first watch may pass them
    when ``may_pass``), over the head of the due order when ``head`` (``_watch_head``), else
    over every due watch (``_ranked_watches``). Its values by name: ``p_now``, ``p_until``
    (epoch ms), ``p_size`` (rows), ``p_depth`` (rows, the head's), ``p_connector``,
    ``p_owner``, ``p_max_bytes``."""
    now = WATCH_NOW

    def write(_: Any) -> Any:
        ranked = _watch_head(connector) if head else _ranked_watches(connector, owner)
        pick = watch.alias("pick")
        chosen = (
            sa.select(
                *(pick.c[column.name] for column in IDENTITY_COLUMNS),
                ranked.c.owner_rank,
                ranked.c.next_attempt_at,
                row_bytes(pick.c).label(SIZE),
            )
            .join_from(
                pick,
                ranked,
                sa.and_(*(pick.c[c.name] == ranked.c[c.name] for c in IDENTITY_COLUMNS)),
            )
            # Checked again on a row a peer claimed since this statement's snapshot, once
            # its lock is taken: that row is passed over, and the limit takes the next.
            .where(claim_lapsed(now, pick))
            .order_by(
                ranked.c.owner_rank,
                ranked.c.next_attempt_at,
                *(ranked.c[c.name] for c in IDENTITY_COLUMNS),
            )
            .limit(sa.bindparam("p_size", type_=sa.Integer))
            .with_for_update(of=pick, skip_locked=True)
            .cte("chosen")
        )
        names = [column.name for column in IDENTITY_COLUMNS]
        max_bytes = sa.bindparam("p_max_bytes", type_=sa.BigInteger) if bounded else None
        kept = _within(
            chosen,
            names,
            ["owner_rank", "next_attempt_at", *names],
            max_bytes,
            may_pass,
        ).cte("kept")
        return (
            sa.update(watch)
            .where(
                sa.tuple_(*IDENTITY_COLUMNS).in_(sa.select(*(kept.c[n] for n in names))),
                due_watch(now),
            )
            .values(claim_values(param("p_until", watch.c.claimed_until), now))
            .returning(watch, row_bytes(watch.c).label(SIZE))
        )

    return Logged(WATCHES, CLAIMED, write)


def _in_order(rows: Sequence[Any]) -> Measured[OperationRecord]:
    """Rows of operations with their sizes (``SIZE``), in key order."""
    sized = sorted(
        ((OperationRecord.from_row(row), row[SIZE]) for row in rows),
        key=lambda pair: (pair[0].caller_did, pair[0].operation_id),
    )
    return Measured((record for record, _ in sized), (size for _, size in sized))


def _lock_capped_accounts(connector: str | None, accounts: list[str] | None) -> sa.Select[Any]:
    """Lock every capped account a lease may draw on, in key order (no deadlock between
    leasers), waiting for a peer that holds one."""
    query = (
        sa.select(account.c.connector_name, account.c.account_key)
        .where(account.c.max_in_flight.is_not(None))
        .order_by(account.c.connector_name, account.c.account_key)
        .with_for_update()
    )
    if connector is not None:
        query = query.where(account.c.connector_name == connector)
    if accounts is not None:
        query = query.where(account.c.account_key.in_(accounts))
    return query


def _touch_accounts(leased: sa.CTE) -> sa.CTE:
    """Write the capped accounts ``leased`` (the rows a statement leased) drew on, unchanged
    (PostgreSQL): a new version of each row, which tells a concurrent leaser whose snapshot
    is older that its in-flight counts of that account are stale (``_fresh_capped``). Every
    path that takes a lease of a capped account writes its row so (``store.accounts``)."""
    drawn = sa.select(leased.c.connector_name, leased.c.account_key)
    return (
        sa.update(account)
        .where(
            account.c.max_in_flight.is_not(None),
            sa.tuple_(account.c.connector_name, account.c.account_key).in_(drawn),
        )
        .values(max_in_flight=account.c.max_in_flight)
        .returning(account.c.account_key)
        .cte("touched")
    )


def _fresh_capped(caps: sa.FromClause) -> sa.CTE:
    """The capped accounts of the candidates (``caps``: ``lease_guards.capped_accounts``)
    that this statement may lease from (PostgreSQL): locked with ``FOR UPDATE SKIP LOCKED``
    (an account a peer is leasing from, or claiming in, is skipped, never waited for), and
    whose locked row is the version the statement's snapshot reads (``xmin``): a peer that
    leased from it and committed after the snapshot began wrote it (``_touch_accounts``),
    and the snapshot's in-flight count would miss that peer's leases, so such an account is
    skipped too."""
    locked = account.alias("locked")
    seen = account.alias("seen")
    same = sa.and_(
        locked.c.connector_name == seen.c.connector_name,
        locked.c.account_key == seen.c.account_key,
    )
    wanted = sa.select(caps.c.connector_name, caps.c.account_key)
    return (
        sa.select(
            locked.c.connector_name,
            locked.c.account_key,
            locked.c.max_in_flight,
            (sa.literal_column("locked.xmin") == sa.literal_column("seen.xmin")).label("fresh"),
        )
        .join_from(locked, seen, same)
        .where(
            locked.c.max_in_flight.is_not(None),
            sa.tuple_(locked.c.connector_name, locked.c.account_key).in_(wanted),
        )
        .order_by(locked.c.connector_name, locked.c.account_key)
        .with_for_update(of=locked, skip_locked=True)
        .cte("capped_locked")
    )


def _filtered(
    query: sa.Select[Any], connector: Any, accounts: list[str] | None, caller: Any
) -> sa.Select[Any]:
    """``query`` over operations narrowed to ``connector``, ``accounts`` and ``caller``."""
    if connector is not None:
        query = query.where(op.c.connector_name == connector)
    if accounts is not None:
        query = query.where(op.c.account_key.in_(accounts))
    if caller is not None:
        query = query.where(op.c.caller_did == caller)
    return query


def _ranked_all(now: Any, where: Filters) -> sa.Subquery:
    """Every qualifying operation at ``now`` with its rank within its owner: one window over
    them all (SQLite, and a tenant's own calls on PostgreSQL)."""
    due_at = sa.func.coalesce(op.c.next_attempt_at, op.c.created_at)
    owner_rank = sa.func.row_number().over(
        partition_by=op.c.owner_did, order_by=[due_at, op.c.caller_did, op.c.operation_id]
    )
    candidates = sa.select(
        op.c.caller_did,
        op.c.operation_id,
        op.c.connector_name,
        op.c.account_key,
        due_at.label("due_at"),
        owner_rank.label("owner_rank"),
    ).where(due_operation(now), guards.lease_allowed(op.c, now, guards.own_key(), cap=False))
    return _filtered(candidates, *where).subquery("candidate")


def _owners() -> sa.CTE:
    """The owners with attempted operations, one index probe each (a loose index scan of
    the entity index, which leads with the owner)."""
    first = sa.select(sa.func.min(op.c.owner_did).label("owner_did")).where(guards.live())
    owners = first.cte("owners", recursive=True)
    following = (
        sa.select(sa.func.min(op.c.owner_did))
        .where(guards.live(), op.c.owner_did > owners.c.owner_did)
        .scalar_subquery()
    )
    return owners.union_all(sa.select(following).where(owners.c.owner_did.is_not(None)))


def _count_owners() -> sa.Select[Any]:
    """How many owners have attempted operations (``_owners``)."""
    owners = _owners()
    return sa.select(sa.func.count().label("n")).where(owners.c.owner_did.is_not(None))


ACCOUNT_GROUP = ("owner_did", "connector_name", "model", "account_key")
"""An owner's operations of one account (and model): the leading columns of the entity
index, by which ``_owner_accounts`` finds each owner's accounts."""


WALKED_GROUP = ("model", "account_key", "connector_name", "owner_did")
"""``ACCOUNT_GROUP`` in the order of the per-account due indexes' leading columns, led by the
model: a row value's range is served by an index holding its first column, and no other index
of the live rows holds the model but the entity index, far down (led by the owner, the owner's
index would serve it and sort; led by the account key or connector, the account's indexes
would, with a bitmap scan of the account's every live row)."""


def _owner_accounts(postgres: bool) -> sa.CTE:
    """Each owner's accounts (``ACCOUNT_GROUP``) with attempted operations, one index probe
    or a few each (a loose index scan of the entity index, which leads with them): on
    PostgreSQL the next group is the first row past the last as a row value (a lateral read
    of one row); SQLite seeks a row value by its first column only, and would read every
    row of the owner's groups before the next: it takes the row id of the next group's first
    row with the last group's leading columns equal and the next one past (an account of the
    same owner, model or connector first; the next owner last)."""
    columns = [op.c[name] for name in ACCOUNT_GROUP]
    first = sa.select(*columns).where(guards.live()).order_by(*columns).limit(1).subquery("first")
    accounts = sa.select(first).cte("owner_accounts", recursive=True)
    last = [accounts.c[name] for name in ACCOUNT_GROUP]
    following = sa.select(*columns).where(guards.live()).order_by(*columns).limit(1)
    if postgres:
        lateral = following.where(sa.tuple_(*columns) > sa.tuple_(*last)).lateral("following")
        return accounts.union_all(sa.select(lateral).select_from(accounts.join(lateral, sa.true())))
    row_ids = [
        following.with_only_columns(sa.literal_column("rowid"))
        .where(*(c == v for c, v in zip(columns[:n], last[:n], strict=True)))
        .where(columns[n] > last[n])
        .scalar_subquery()
        for n in reversed(range(len(columns)))
    ]
    rows = op.alias("following")
    return accounts.union_all(
        sa.select(*(rows.c[name] for name in ACCOUNT_GROUP)).select_from(
            accounts.join(rows, sa.literal_column("following.rowid") == sa.func.coalesce(*row_ids))
        )
    )


def _leasing_accounts(accounts: sa.CTE, now: Any, where: Filters) -> sa.ColumnElement[bool]:
    """The rows of ``accounts`` (``_owner_accounts``) whose account may lease at ``now``:
    not paused, not throttled, below its cap (``lease_guards``), and of the connector and
    account keys ``where`` names. An account's live leases are counted through the index of
    live leases, at most its cap."""
    subject = accounts.c
    conditions = [
        guards.open_account(subject, now),
        sa.not_(guards.at_cap(subject, now)),
    ]
    connector, keys, _ = where
    if connector is not None:
        conditions.append(subject.connector_name == connector)
    if keys is not None:
        conditions.append(subject.account_key.in_(keys))
    return sa.and_(*conditions)


def _leasing_groups(now: Any, where: Filters, postgres: bool) -> tuple[sa.CTE, Any]:
    """Each owner's accounts (``ACCOUNT_GROUP``) with attempted operations that may lease
    (``_leasing_accounts``; ``_owner_accounts``), and how many owners have attempted
    operations (a scalar subquery). An account that is paused, throttled or at its cap is
    not walked: its backlog costs a probe, and never hides its owner's other accounts."""
    accounts = _owner_accounts(postgres)
    count = sa.select(sa.func.count(sa.distinct(accounts.c.owner_did))).scalar_subquery()
    groups = (
        sa.select(*(accounts.c[name] for name in ACCOUNT_GROUP))
        .where(_leasing_accounts(accounts, now, where))
        .cte("leasing_accounts")
    )
    return groups, count


def _due_walk(
    now: Any, where: Filters, depth: Any, never_deferred: bool, group: Any, *, guarded: bool
) -> LateralFromClause:
    """``_due_select`` as a lateral subquery (PostgreSQL)."""
    return _due_select(now, where, depth, never_deferred, group, guarded=guarded).lateral()


def _due_select(
    now: Any, where: Filters, depth: Any, never_deferred: bool, group: Any, *, guarded: bool
) -> sa.Select[Any]:
    """The first ``depth`` operations due at ``now`` with their leases free (of one owner's
    account when ``group`` is not None: the columns ``ACCOUNT_GROUP`` of an outer row;
    qualifying, with ``lease_guards.lease_allowed`` but the cap, when ``guarded``) among
    those never deferred (due at ``created_at``) or those with a next attempt (due at
    ``next_attempt_at``), in due order: one due index read in order, stopping at ``depth``.
    Each row names its key, its entity and claim order (``lease_guards``' subject) and
    ``due_at``.

    Of an account, the walk asks for the account's range as row values in the order of the
    per-account due index (``WALKED_GROUP``, then due order) and orders by all of them,
    rather than naming the account by equalities: with equalities the owner's index, the
    account's indexes or the global due index serve too, and a planner whose statistics say
    the account's rows are many or few may read one of them (filtering the other accounts'
    or owners' rows, or reading the account's rows whole and sorting them); as row values
    led by the model (``WALKED_GROUP``), only the per-account index serves the range and its
    order, so no plan but reading it in order up to ``depth`` is cheap, whatever the
    statistics. SQLite,
    which seeks a row value by its first column only, is given the equalities."""
    due_at = op.c.created_at if never_deferred else op.c.next_attempt_at
    in_order = [due_at, op.c.caller_did, op.c.operation_id]
    narrowed = []
    if group is not None:
        columns = [op.c[name] for name in WALKED_GROUP]
        outer = [group[name] for name in WALKED_GROUP]
        # The due side's bound is in the row value: through the account's rows due by now.
        last = sa.tuple_(*outer) if never_deferred else sa.tuple_(*outer, now)
        through = sa.tuple_(*columns) if never_deferred else sa.tuple_(*columns, due_at)
        narrowed = [
            by_backend(
                sa.and_(sa.tuple_(*columns) >= sa.tuple_(*outer), through <= last),
                sa.and_(
                    *(c == v for c, v in zip(columns, outer, strict=True)),
                    sa.true() if never_deferred else due_at <= now,
                ),
            )
        ]
        in_order[:0] = columns
    if never_deferred:
        due: sa.ColumnElement[bool] = op.c.next_attempt_at.is_(None)
    elif group is None:
        # Due as a row value in the due index's order (keys are never empty, so before
        # ``(now + 1, '', '')`` is at most ``now``): only that index serves it, read in
        # order up to ``depth``; as a bare bound on ``next_attempt_at``, an index that holds
        # the column further in serves it too, read whole and sorted.
        due = sa.and_(
            op.c.next_attempt_at.is_not(None),
            sa.tuple_(*in_order) < sa.tuple_(now + 1, sa.literal(""), sa.literal("")),
        )
    else:
        due = op.c.next_attempt_at.is_not(None)
    conditions = [*narrowed, guards.live(), due, lease_free(now)]
    if guarded:
        conditions.append(guards.lease_allowed(op.c, now, guards.own_key(), cap=False))
    query = (
        sa.select(
            op.c.caller_did,
            op.c.operation_id,
            op.c.owner_did,
            op.c.connector_name,
            op.c.model,
            op.c.account_key,
            op.c.source_id,
            op.c.created_at,
            due_at.label("due_at"),
        )
        .where(*conditions)
        .order_by(*in_order)
        .limit(depth)
    )
    return _filtered(query, *where)


def _ranked_head(now: Any, where: Filters, depth: Any, size: Any) -> sa.Subquery:
    """Each owner's first qualifying operation at ``now`` in the head of the due order (the
    first ``depth`` operations due with their leases free: both due indexes read in order,
    each stopping at ``depth``), rank 1 each, with how many they are (``HEAD_FIRSTS``), when
    they are at least ``size`` owners; else none (PostgreSQL).

    The head is a prefix of the due order, so its qualifying operations are a prefix of the
    qualifying ones, and the first seen of an owner is that owner's first: when the head
    holds ``size`` owners, the first ``size`` in fair order are all rank 1 and among these,
    since every owner's first past the head is due later. The entity and account guards
    run on the head's rows only, after its limit, so the planner reads each due index in
    order whatever it guesses of the guards. The cost follows ``depth``, not the owners or
    the operations due."""
    sides = [
        sa.select(_due_walk(now, where, depth, never, None, guarded=False))
        for never in (True, False)
    ]
    both = sa.union_all(*sides).subquery("gathered")
    in_order = [both.c.due_at, both.c.caller_did, both.c.operation_id]
    head = sa.select(both).order_by(*in_order).limit(depth).subquery("head")
    owner_rank = sa.func.row_number().over(
        partition_by=head.c.owner_did,
        order_by=[head.c.due_at, head.c.caller_did, head.c.operation_id],
    )
    key = (head.c.caller_did, head.c.operation_id)
    ranked = (
        sa.select(head, owner_rank.label("owner_rank"))
        .where(guards.lease_allowed(head.c, now, key, cap=False))
        .subquery("ranked")
    )
    firsts = (
        sa.select(
            ranked.c.caller_did,
            ranked.c.operation_id,
            ranked.c.connector_name,
            ranked.c.account_key,
            ranked.c.due_at,
            ranked.c.owner_rank,
            sa.func.count().over().label("firsts"),
        )
        .where(ranked.c.owner_rank == 1)
        .subquery("firsts")
    )
    columns = [c for c in firsts.c if c.name != "firsts"]
    return (
        sa.select(*columns, firsts.c.firsts.label(HEAD_FIRSTS))
        .where(firsts.c.firsts >= size)
        .subquery("candidate")
    )


def _ranked(
    walk: str, now: Any, where: Filters, depth: Any, size: Any, postgres: bool = True
) -> sa.Subquery:
    """The candidates of one ``walk`` (``ALL``, ``BY_OWNER`` or ``HEAD``; on SQLite ``ALL``
    or ``BY_OWNER``), ranked within their owner."""
    if walk == HEAD:
        return _ranked_head(now, where, depth, size)
    if walk == BY_OWNER:
        return (_ranked_by_owner if postgres else _ranked_by_owner_sqlite)(now, where, depth)
    return _ranked_all(now, where)


def _ranked_by_owner(now: Any, where: Filters, depth: Any) -> sa.Subquery:
    """The first ``depth`` qualifying operations of each owner at ``now``, with their rank
    within the owner and (``OWNERS``) how many owners have attempted operations
    (PostgreSQL). Per account of an owner that may lease (``_leasing_groups``), a walk of
    each of its due indexes in due order that stops at ``depth``, so the cost grows with
    those accounts and ``depth``, not with the operations due: an account paused, throttled
    or at its cap is not walked, and its backlog never hides its owner's other accounts."""
    groups, count = _leasing_groups(now, where, True)
    sides = []
    for never_deferred in (True, False):
        side = _due_walk(now, where, depth, never_deferred, groups.c, guarded=True)
        sides.append(sa.select(side).select_from(groups.join(side, sa.true())))
    both = sa.union_all(*sides).subquery("gathered")
    owner_rank = sa.func.row_number().over(
        partition_by=both.c.owner_did,
        order_by=[both.c.due_at, both.c.caller_did, both.c.operation_id],
    )
    ranked = sa.select(
        both.c.caller_did,
        both.c.operation_id,
        both.c.connector_name,
        both.c.account_key,
        both.c.due_at,
        owner_rank.label("owner_rank"),
    ).subquery("ranked")
    # Past ``depth`` a rank may skip an operation another walk did not reach.
    return (
        sa.select(ranked, count.label(OWNERS))
        .where(ranked.c.owner_rank <= depth)
        .subquery("candidate")
    )


def _ranked_by_owner_sqlite(now: Any, where: Filters, depth: Any) -> sa.Subquery:
    """``_ranked_by_owner`` on SQLite, which has no lateral join: for each account that may
    lease (``_leasing_groups``) the operations whose keys are among the account's first
    ``depth`` of each due walk (``_due_select``, a correlated ``IN`` subquery that SQLite
    runs once per account, probing the key for each key it gives), ranked within the owner;
    ``OWNERS`` is 0 (the caller counts the owners)."""
    groups, _ = _leasing_groups(now, where, False)
    found = op.alias("walked")
    sides = []
    for never_deferred in (True, False):
        keys = (
            _due_select(now, where, depth, never_deferred, groups.c, guarded=True)
            .with_only_columns(op.c.caller_did, op.c.operation_id)
            .correlate(groups)
        )
        sides.append(
            sa.select(
                found.c.caller_did,
                found.c.operation_id,
                found.c.owner_did,
                found.c.connector_name,
                found.c.account_key,
                sa.func.coalesce(found.c.next_attempt_at, found.c.created_at).label("due_at"),
            ).select_from(
                groups.join(found, sa.tuple_(found.c.caller_did, found.c.operation_id).in_(keys))
            )
        )
    both = sa.union_all(*sides).subquery("gathered")
    owner_rank = sa.func.row_number().over(
        partition_by=both.c.owner_did,
        order_by=[both.c.due_at, both.c.caller_did, both.c.operation_id],
    )
    return sa.select(
        both.c.caller_did,
        both.c.operation_id,
        both.c.connector_name,
        both.c.account_key,
        both.c.due_at,
        owner_rank.label("owner_rank"),
        sa.literal(0).label(OWNERS),
    ).subquery("candidate")


def _lease_update(
    now: Any,
    size: Any,
    candidate: sa.Subquery,
    bounds: tuple[Any, bool],
    token: Any,
    expires_at: Any,
    postgres: bool,
) -> tuple[sa.Update, sa.CTE, sa.Select[Any]]:
    """The update that leases to ``token`` until ``expires_at`` (values or ``param``s, epoch
    ms) the first ``size`` of ``candidate`` that ``_chosen`` keeps and ``bounds`` (the bytes
    left, None for no bound; whether the first may pass them: ``_within``) allow; with the
    chosen keys (the CTE ``kept``) and ``_chosen``'s facts."""
    # A CTE, so the chosen keys are read once: an IN subquery with LIMIT and SKIP LOCKED
    # may be run again for each row it is compared with, and lease more than ``size``.
    query, info = _chosen(now, size, candidate, (token, expires_at), postgres)
    chosen = query.cte("chosen")
    kept = _within(chosen, CHOSEN_KEYS, CHOSEN_ORDER, *bounds).cte("kept")
    update = (
        sa.update(op)
        .where(op.c.caller_did == kept.c.caller_did, op.c.operation_id == kept.c.operation_id)
        .values(lease_values(now, token, expires_at))
    )
    if not postgres:
        update = update.where(due_operation(now))
    # On PostgreSQL ``_chosen`` holds each chosen row locked, checked due once locked: no
    # peer changes it before this update, which finds it by its key alone (a due guard here
    # would let a planner whose statistics are older than a burst read every due row
    # through a due index to join them to the few chosen).
    return update, kept, info


def _lease_statement(
    lease_update: tuple[sa.Update, sa.CTE, sa.Select[Any]], actor: Any
) -> sa.Select[Any]:
    """``lease_update`` (``_lease_update``'s, for PostgreSQL) as one statement: the leased
    rows, each with its size and prior token, beside one row of ``_chosen``'s facts
    (``OWNERS``, ``STALE``; one row even when nothing was leased), the capped accounts
    drawn on written (``_touch_accounts``) and each lease's event appended with ``actor``."""
    update, kept, info = lease_update
    leased = update.returning(op, ROW_BYTES.label(SIZE), kept.c.prior_token).cte("leased")
    facts = info.subquery("facts")
    return (
        sa.select(leased, facts)
        .select_from(facts.outerjoin(leased, sa.true()))
        .add_cte(_touch_accounts(leased))
        .add_cte(appended(OPERATIONS, LEASE_ACTION, leased, actor))
    )


def _lease_parts(
    walk: str, connector: bool, caller: bool, bounded: bool, may_pass: bool, postgres: bool
) -> tuple[sa.Update, sa.CTE, sa.Select[Any]]:
    """``_lease_update`` over the candidates of ``walk`` (``_ranked``) with its per-call
    values as parameters by name: ``p_now``, ``p_token``, ``p_expires`` (epoch ms),
    ``p_size`` (rows), ``p_depth`` (rows per owner for ``BY_OWNER``, rows in all for
    ``HEAD``), ``p_connector`` and ``p_caller`` (when ``connector``, ``caller``),
    ``p_max_bytes`` (when ``bounded``)."""
    where: Filters = (
        param("p_connector", op.c.connector_name) if connector else None,
        None,
        param("p_caller", op.c.caller_did) if caller else None,
    )
    depth = sa.bindparam("p_depth", type_=sa.Integer)
    size = sa.bindparam("p_size", type_=sa.Integer)
    candidate = _ranked(walk, NOW, where, depth, size, postgres)
    max_bytes = sa.bindparam("p_max_bytes", type_=sa.BigInteger) if bounded else None
    return _lease_update(
        NOW,
        size,
        candidate,
        (max_bytes, may_pass),
        param("p_token", op.c.lease_token),
        param("p_expires", op.c.lease_expires_at),
        postgres,
    )


@functools.cache
def _prepared_lease(
    walk: str, connector: bool, caller: bool, bounded: bool, may_pass: bool
) -> Prepared:
    """``_lease_statement`` (PostgreSQL, no ``accountKeys``) built once per shape (48 at
    most; ``_lease_parts`` names its values, and ``p_actor``)."""
    shape = (walk, connector, caller, bounded, may_pass)
    return Prepared(lambda _: _lease_statement(_lease_parts(*shape, True), ACTOR))


@functools.cache
def _prepared_sqlite_lease(
    walk: str, connector: bool, caller: bool, bounded: bool, may_pass: bool
) -> tuple[Prepared, Prepared]:
    """SQLite's two statements of a lease (no ``accountKeys``), built once per shape (32 at
    most; ``_lease_parts`` names their values): the chosen keys with their prior tokens,
    and the update returning the leased rows with their sizes."""
    shape = (walk, connector, caller, bounded, may_pass, False)
    return (
        Prepared(lambda _: sa.select(_lease_parts(*shape)[1])),
        Prepared(lambda _: _lease_parts(*shape)[0].returning(op, ROW_BYTES.label(SIZE))),
    )


def _within(
    chosen: sa.CTE, keys: Sequence[str], order: Sequence[str], max_bytes: Any, may_pass: bool
) -> sa.Select[Any]:
    """The ``keys`` columns of the rows of ``chosen`` (rows picked and locked, each with its
    size ``SIZE``) whose running size in ``order`` (column names naming each row once) stays
    within ``max_bytes`` (None: all; ``may_pass``: the first always). One window over the
    chosen rows, after their locks are taken, so a row another leaser holds costs nothing."""
    if max_bytes is None:
        return sa.select(*(chosen.c[name] for name in keys))
    by = [chosen.c[name] for name in order]
    sized = sa.select(
        *(chosen.c[name] for name in keys),
        sa.func.sum(chosen.c[SIZE]).over(order_by=by, rows=(None, 0)).label("through"),
        sa.func.row_number().over(order_by=by).label("position"),
    ).subquery("sized")
    fits: sa.ColumnElement[bool] = sized.c.through <= max_bytes
    if may_pass:
        fits = sa.or_(sized.c.position == 1, fits)
    return sa.select(*(sized.c[name] for name in keys)).where(fits)


def _chosen(
    now: Any, size: Any, ranked: sa.Subquery, lease: tuple[Any, Any], postgres: bool
) -> tuple[sa.Select[Any], sa.Select[Any]]:
    """The keys of the operations to lease at ``now`` among ``ranked`` (ranked within
    their owner), with their fair order and size as the lease (``lease``: its token and
    expiry, values or ``param``s) leaves them, so a byte bound holds for the leased rows the
    answer returns: those past their account's room dropped, the first ``size`` in fair
    order that no other transaction holds locked (PostgreSQL: ``FOR UPDATE SKIP LOCKED``)
    and that are still live with their leases free once locked (a peer that leased one
    since this statement began leaves it to the next). An account's room is its cap less
    its live leases (``lease_guards.with_room``); on PostgreSQL a capped account has room
    only when this statement holds it locked and its counts are fresh (``_fresh_capped``),
    so no peer leases from it at once and none leased from it unseen. With it, one row of
    facts about the candidates: ``OWNERS`` (the owners walked, 0 when unknown) and
    ``STALE`` (a capped account of theirs was skipped as locked or stale)."""
    # A CTE, so the walks run once though the accounts' locks read them too.
    candidate = sa.select(ranked).cte("candidates")
    order = [
        candidate.c.owner_rank,
        candidate.c.due_at,
        candidate.c.caller_did,
        candidate.c.operation_id,
    ]
    caps = guards.capped_accounts(candidate)
    joined, account_room = guards.with_room(candidate, now, caps)
    stale: sa.ColumnElement[bool] = sa.false()
    if postgres:
        capped = _fresh_capped(caps)
        joined = joined.outerjoin(
            capped,
            sa.and_(
                capped.c.connector_name == candidate.c.connector_name,
                capped.c.account_key == candidate.c.account_key,
            ),
        )
        stale = sa.and_(account_room.is_not(None), sa.not_(sa.func.coalesce(capped.c.fresh, False)))
        account_room = sa.case((stale, 0), else_=account_room)
    owners = candidate.c[OWNERS] if OWNERS in candidate.c else sa.literal(0)
    head = HEAD_FIRSTS in candidate.c
    if head:
        owners = candidate.c[HEAD_FIRSTS]
    ranked_in_account = (
        sa.select(
            candidate,
            account_room.label("room"),
            stale.label(STALE),
            owners.label("walked"),
            sa.func.row_number()
            .over(
                partition_by=[candidate.c.connector_name, candidate.c.account_key], order_by=order
            )
            .label("account_rank"),
        )
        .select_from(joined)
        .subquery("ranked_in_account")
    )
    has_room = sa.or_(
        ranked_in_account.c.room.is_(None),
        ranked_in_account.c.account_rank <= ranked_in_account.c.room,
    )
    room = sa.select(
        ranked_in_account,
        # The head's firsts are the first in fair order only while ``size`` of them have
        # room: past a capped account's room the next in fair order may be outside it.
        (sa.func.count().filter(has_room).over() >= size if head else sa.true()).label("whole"),
    ).cte("capacity")
    pick = op.alias("pick")
    fits = sa.and_(sa.or_(room.c.room.is_(None), room.c.account_rank <= room.c.room), room.c.whole)
    picked = sa.select(
        pick.c.caller_did,
        pick.c.operation_id,
        pick.c.lease_token.label("prior_token"),
        row_bytes(pick.c, lease_values(now, *lease, row=pick)).label(SIZE),
    ).where(
        # Checked again on a row a peer changed since this statement's snapshot, once
        # its lock is taken: a row a peer has just leased or deferred is passed over, and
        # the limit takes the next candidate.
        guards.live(pick),
        sa.or_(pick.c.next_attempt_at.is_(None), pick.c.next_attempt_at <= now),
        lease_free(now, pick),
        guards.unpaused(pick.c),
    )
    if postgres:
        # Each candidate's row found by its key, in fair order, and locked as it is found
        # (``FOR UPDATE SKIP LOCKED`` in the lateral read): the limit stops the reads at
        # ``size`` rows taken, and no plan joins the candidates to a scan of the operations
        # (a planner whose statistics are older than a burst of due rows may think that
        # scan small and read every due row for the few candidates).
        ordered = (
            sa.select(room.c.caller_did, room.c.operation_id, room.c.owner_rank, room.c.due_at)
            .where(fits)
            .order_by(*_order_of(room))
            .subquery("ordered")
        )
        found = (
            picked.where(
                pick.c.caller_did == ordered.c.caller_did,
                pick.c.operation_id == ordered.c.operation_id,
            )
            .with_for_update(of=pick, skip_locked=True)
            .lateral("found")
        )
        query = (
            sa.select(
                found.c.caller_did,
                found.c.operation_id,
                found.c.prior_token,
                ordered.c.owner_rank,
                ordered.c.due_at,
                found.c[SIZE],
            )
            .select_from(ordered.join(found, sa.true()))
            .order_by(*_order_of(ordered))
            .limit(size)
        )
    else:
        query = (
            picked.add_columns(room.c.owner_rank, room.c.due_at)
            .join_from(
                pick,
                room,
                sa.and_(
                    pick.c.caller_did == room.c.caller_did,
                    pick.c.operation_id == room.c.operation_id,
                ),
            )
            .where(fits)
            .order_by(*_order_of(room))
            .limit(size)
        )
    info = sa.select(
        sa.func.coalesce(sa.func.max(sa.case((room.c.whole, room.c.walked), else_=0)), 0).label(
            OWNERS
        ),
        sa.func.coalesce(sa.func.bool_or(room.c[STALE]), False).label(STALE),
    )
    return query, info


def _order_of(rows: sa.FromClause) -> list[sa.ColumnElement[Any]]:
    """The fair order of ``rows`` (columns ``CHOSEN_ORDER``)."""
    return [rows.c[name] for name in CHOSEN_ORDER]
