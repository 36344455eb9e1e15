"""Operator controls over many rows at once (docs/runbook.md, 'Operator controls'; no seed
counterpart): cancel live operations, reissue failed ones as new linked operations, re-arm watches
that gave up, and force stuck leases free.

Each call is bounded (``limit`` rows, or the keys given) and is one statement or one
transaction: a call that raises wrote nothing. The rows a filter matches are taken in a
stable order (operations: ``listTrackedOperations``' order; watches: identity order), and
on PostgreSQL a row another transaction holds locked is skipped, not waited for: the next
call finds it.
"""

import hashlib
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from store import validation as check
from store.context import StoreContext
from store.database import Row, chunked
from store.errors import InvalidInput
from store.events import (
    CANCELLED,
    FORCE_RELEASED,
    OPERATIONS,
    REARMED,
    REISSUED,
    WATCHES,
    LoggedItems,
    run_logged,
)
from store.items import ItemStatement, operation_keys
from store.operations import (
    ABANDONED_SEND_MARKER,
    CANCELLED_KIND,
    ORDER,
    OperationFilter,
    by_key,
    claim_insert,
    filter_conditions,
    locked_in_key_order,
    unrecorded_send,
)
from store.records import (
    ATTEMPTED,
    ENVELOPE,
    FAILED,
    OPERATION_FIELDS,
    REPAIR_FAILED,
    OperationEnvelope,
    OperationRecord,
    WatchRecord,
)
from store.statements import param
from store.tables import operation as op
from store.tables import projection_watch as watch
from store.tombstones import Tombstoned, envelope_digest, find_tombstones, key_digest
from store.watches import (
    IDENTITY_COLUMNS,
    IDENTITY_ITEM,
    LOCK_WATCHES,
    ReadWinners,
    WatchFilter,
    opened_generation,
    unchanged_watch,
    watch_filter_conditions,
)

DEFAULT_LIMIT = 100
MAX_LIMIT = 1000
"""The most rows one bulk call writes."""
MAX_FILTER_DOCUMENTS = 500
"""The most ``documentIDs`` a bulk call's filter names (one IN list, never chunked)."""
MAX_REASON_BYTES = 2048
"""The longest cancel reason, in bytes of UTF-8."""
REISSUE_PREFIX = "reissue:"
CANCELLED_RISK = "cancelled"
"""A reissue risk: an operator cancelled the operation (its ``last_kind`` is
``CANCELLED_KIND``, which only ``cancel_operations`` writes: ``record_operation`` refuses it)."""
OUTCOME_UNKNOWN_RISK = "outcome_unknown"
"""A reissue risk: the operation failed with its send marker still set, so its last send was
marked and no answer was recorded for it (every write that records an attempt's answer
clears the marker): cancelled after a marked send, or recorded failed without counting the
attempt after a run that marked and was abandoned. The provider may hold the write."""
REISSUE_RISKS = frozenset({CANCELLED_RISK, OUTCOME_UNKNOWN_RISK})

NOW = param("p_now", op.c.updated_at)
COUNT_CHUNK = 5000
"""How many operations ``count_reissue`` sorts per round (a round: three reads)."""


def reissue_key(caller_did: str, operation_id: str) -> str:
    """The operation id of the reissue of ``(caller_did, operation_id)``: ``reissue:`` and
    the SHA-256 (hex) of the key, so it stays 72 characters however long the original's
    (a reissue of a reissue included), and every reissue of one original names one key."""
    digest = hashlib.sha256(f"{caller_did}\x00{operation_id}".encode()).hexdigest()
    return REISSUE_PREFIX + digest


def outcome_unknown(row: sa.FromClause = op) -> sa.ColumnElement[bool]:
    """``OUTCOME_UNKNOWN_RISK`` of a failed operation (of ``row``: the operations table or an
    alias of it)."""
    return row.c.send_marker.is_not(None)


def cancelled(row: sa.FromClause = op) -> sa.ColumnElement[bool]:
    """``CANCELLED_RISK`` of a failed operation (of ``row``)."""
    return sa.func.coalesce(row.c.last_kind, "") == CANCELLED_KIND


def _include(include: Collection[str]) -> frozenset[str]:
    return frozenset(check.choice("include", risk, REISSUE_RISKS) for risk in include)


def risks_allowed(include: frozenset[str]) -> list[sa.ColumnElement[bool]]:
    """The conditions that leave out the failed operations holding a risk not in
    ``include``."""
    conditions = []
    if OUTCOME_UNKNOWN_RISK not in include:
        conditions.append(sa.not_(outcome_unknown()))
    if CANCELLED_RISK not in include:
        conditions.append(sa.not_(cancelled()))
    return conditions


UNREISSUED = (op.c.state == FAILED, op.c.reissued_as.is_(None))
"""A failed operation never reissued: what ``reissue_operations`` matches."""


@dataclass(frozen=True, slots=True)
class ReissueCounts:
    """What a reissue's filter still matches (failed, never reissued), each operation in one
    count: ``outcome_unknown`` (``OUTCOME_UNKNOWN_RISK`` not included), else ``cancelled``
    (``CANCELLED_RISK`` not included), else ``blocked`` (its ``reissue_key`` is taken: by
    another operation, or by a collected one of another envelope), else ``remaining`` (the
    next call with the same include reissues it, or links it to its collected reissue)."""

    cancelled: int
    outcome_unknown: int
    blocked: int
    remaining: int


MAX_FAILURE_GROUPS = 500
"""The most groups one ``failure_groups`` call answers."""


@dataclass(frozen=True, slots=True)
class FailureGroup:
    """The failed operations of one last outcome: its ``kind`` and error ``message`` (each
    None when the last write gave none), how many (``count``), how many of them were never
    reissued (``unreissued``), and when the latest of them was last written (``last_at``,
    epoch ms)."""

    kind: str | None
    message: str | None
    count: int
    unreissued: int
    last_at: int


COPIED = frozenset({"caller_did", *ENVELOPE, "reissue_intent", "provider_etag", "document_id"})
"""What a reissue takes from its original: the caller, the envelope, and the claim's
optional values. Everything else is ``_fresh``'s."""


def _fresh(original: Any, item: Any) -> dict[str, Any]:
    """The columns of a reissue that are not ``COPIED``: a fresh claim's (attempted, no
    attempt, version 0, no lease, due at once, created now), its new key and ids from the
    ``item``, and the link to ``original``."""
    return {
        "operation_id": item.new_operation,
        "node_key": item.node_key,
        "result_entity": sa.null(),
        "state": sa.literal(ATTEMPTED),
        "attempts": sa.literal(0),
        "next_attempt_at": sa.null(),
        "defer_reason": sa.null(),
        "last_kind": sa.null(),
        "last_http_status": sa.null(),
        "last_error": sa.null(),
        "send_marker": sa.null(),
        "version": sa.literal(0),
        "incarnation": item.incarnation,
        "lease_token": sa.null(),
        "lease_expires_at": sa.null(),
        "created_at": NOW,
        "updated_at": NOW,
        "reissued_from": original.c.operation_id,
        "reissued_as": sa.null(),
    }


def reissue_columns(original: Any, item: Any) -> list[Any]:
    """Every column of a reissued operation, in the table's order: ``COPIED`` from
    ``original``, the rest ``_fresh``. Raises ``KeyError`` for a column neither names (a
    column added without deciding what a reissue does with it)."""
    fresh = _fresh(original, item)
    return [
        (original.c[name] if name in COPIED else fresh[name]).label(name)
        for name in OPERATION_FIELDS
    ]


REISSUE_ITEM = {
    "caller": op.c.caller_did,
    "operation": op.c.operation_id,
    "new_operation": op.c.operation_id,
    "node_key": op.c.node_key,
    "incarnation": op.c.incarnation,
}
"""A reissue's item: its original's key (an operation the same transaction read as failed),
the new key and ids. The statements over the items compare no state: a failed operation
never changes state (only its collection removes it), so ``reissued_as IS NULL`` is their
compare-and-set, and only the key can drive. A state compared there, whether with a literal
or with the item's, let a planner walk the state index once per item: SQLite without
statistics, and PostgreSQL with statistics from before a bulk of failures (2-13 s for 1,000
items over 10,000 failed rows, past the statement timeout under load)."""


def _reissue_insert(insert: Any, rows: sa.FromClause) -> Any:
    original = op.alias("original")
    chosen = (
        sa.select(*reissue_columns(original, rows.c))
        .select_from(
            original.join(
                rows,
                sa.and_(
                    original.c.caller_did == rows.c.caller,
                    original.c.operation_id == rows.c.operation,
                ),
            )
        )
        .where(original.c.reissued_as.is_(None))
    )
    return claim_insert(insert(op).from_select(list(OPERATION_FIELDS), chosen))


REISSUE = LoggedItems(OPERATIONS, REISSUED, REISSUE_ITEM, _reissue_insert)
"""Insert the reissue of each item's original (still failed and not reissued), unless its
key exists; returns the rows inserted, each logged ``reissued`` (its first event)."""


def _link(_: Any, rows: sa.FromClause) -> Any:
    return (
        sa.update(op)
        .where(by_key(rows.c.caller, rows.c.operation), op.c.reissued_as.is_(None))
        .values(reissued_as=rows.c.new_operation, updated_at=NOW)
        .returning(op)
    )


LINK_REISSUED = LoggedItems(OPERATIONS, REISSUED, REISSUE_ITEM, _link)
"""Link each item's original to its reissue (``reissued_as``: the item's new key), where it
is not linked yet; each original logged ``reissued`` (still failed). Its items are those
whose reissue the same transaction inserted, or whose reissue was collected with the
original's envelope (its tombstone stands for it)."""


def _reissue_item(caller_did: str, operation_id: str) -> dict[str, Any]:
    """The item of the reissue of ``(caller_did, operation_id)`` (``REISSUE_ITEM``) but its
    new ids: the original's key and ``reissue_key``."""
    return {
        "caller": caller_did,
        "operation": operation_id,
        "new_operation": reissue_key(caller_did, operation_id),
    }


GET_AT_KEYS = ItemStatement(
    {"caller": op.c.caller_did, "operation": op.c.operation_id},
    lambda _, rows: sa.select(op).select_from(
        op.join(rows, by_key(rows.c.caller, rows.c.operation))
    ),
)
"""The operations at the items' keys (those that exist), the keys bound as one array each
(or one JSON array) whatever their number, each found by its primary key."""


SortedReissues = tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]
"""``_sort_reissues``' answer: the ``fresh``, ``collected`` and ``blocked`` reissue items."""


def reissue_envelope(original: OperationRecord, new_operation: str) -> OperationEnvelope:
    """The envelope of ``original``'s reissue at ``new_operation``: its caller and envelope
    under the new key (what ``COPIED`` takes)."""
    values = {name: getattr(original, name) for name in ENVELOPE}
    return OperationEnvelope(caller_did=original.caller_did, operation_id=new_operation, **values)


OPENED_COLUMNS = (
    "repair_generation",
    "verification_status",
    "verification_attempts",
    "observed_winner_digest",
    "next_attempt_at",
    "claimed_until",
    "defer_reason",
)
REARM = LoggedItems(
    WATCHES,
    REARMED,
    IDENTITY_ITEM | {"version": watch.c.version} | {name: watch.c[name] for name in OPENED_COLUMNS},
    lambda _, rows: (
        sa.update(watch)
        .where(unchanged_watch(rows.c))
        .values(
            {name: rows.c[name] for name in OPENED_COLUMNS}
            | {"version": watch.c.version + 1, "updated_at": param("p_now", watch.c.updated_at)}
        )
        .returning(watch)
    ),
)
"""Each item's new generation (``opened_generation``) written over the repair-failed watch
it was decided from, guarded by ``unchanged_watch`` (every watch write moves the version),
logged ``rearmed``."""


def _limit(limit: Any) -> int:
    return check.count("limit", limit, minimum=1, maximum=MAX_LIMIT)


def _documents(document_ids: Sequence[str] | None) -> list[str] | None:
    if document_ids is None:
        return None
    ids = list(dict.fromkeys(check.key_list("filter.documentIDs", document_ids)))
    check.item_count("filter.documentIDs", ids, most=MAX_FILTER_DOCUMENTS)
    return ids


def _in_filter(where: OperationFilter, now: int, *, allow_empty: bool = False) -> list[Any] | None:
    """The conditions of ``where`` for a bulk write over operations; None when it matches
    nothing. Raises ``InvalidInput`` naming ``filter`` when it names no field (unless
    ``allow_empty``), else as ``filter_conditions``, its fields under ``filter.``."""
    if where.is_empty and not allow_empty:
        raise InvalidInput("filter", "must name at least one field (an empty filter matches all)")
    documents = _documents(where.document_ids)
    try:
        conditions = filter_conditions(where, now=now)
    except InvalidInput as error:
        raise type(error)(f"filter.{error.field}", error.problem) from error
    if conditions is None or documents == []:
        return None
    if documents is not None:
        conditions.append(op.c.document_id.in_(documents))
    return conditions


def _rearmable(where: WatchFilter) -> list[Any] | None:
    """The conditions of a repair-failed watch matching ``where``; None when it matches
    nothing (an empty ``documentIDs``). Raises ``InvalidInput`` naming ``filter.<field>``
    for a malformed field (``filter.documentIDs``: at most 500)."""
    documents = _documents(where.document_ids)
    try:
        conditions = watch_filter_conditions(where)
    except InvalidInput as error:
        raise type(error)(f"filter.{error.field}", error.problem) from error
    if documents == []:
        return None
    if documents is not None:
        conditions.append(watch.c.document_id.in_(documents))
    return [*conditions, watch.c.verification_status == REPAIR_FAILED]


def _reason(reason: str | None) -> str | None:
    if reason is None:
        return None
    if len(check.storable("reason", reason)) > MAX_REASON_BYTES:
        raise InvalidInput("reason", f"must be at most {MAX_REASON_BYTES} bytes of UTF-8")
    if "\x00" in reason:
        raise InvalidInput("reason", "must not contain NUL characters")
    return reason


MARKED_NOTE = "its send was marked: the provider may hold the write"
"""What a cancel's event (and ``last_error``) adds when the operation's send was marked."""


def cancel_message(reason: str | None, marked: bool) -> str | None:
    """The message a cancel keeps (``last_error``, and its event's): the ``reason``, and
    ``MARKED_NOTE`` when the operation's send was marked."""
    if not marked:
        return reason
    return MARKED_NOTE if reason is None else f"{reason} ({MARKED_NOTE})"


def _first_fresh(
    fresh: list[dict[str, Any]],
    collected: list[dict[str, Any]],
    items: list[dict[str, Any]],
    wanted: int,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], int]:
    """What one round of a reissue writes when it read more originals (``items``, sorted
    into ``fresh`` and ``collected`` by ``_sort_reissues``) than it may reissue: the first
    ``wanted`` fresh ones and the collected ones before the last of them, and how many of
    ``items`` that uses up (all of them when fewer than ``wanted`` are fresh)."""
    if len(fresh) < wanted:
        return fresh, collected, len(items)
    position = {item["new_operation"]: index for index, item in enumerate(items)}
    used = position[fresh[wanted - 1]["new_operation"]] + 1
    kept = [item for item in collected if position[item["new_operation"]] < used]
    return fresh[:wanted], kept, used


def _records(rows: Sequence[Row]) -> list[OperationRecord]:
    """Operations in ``listTrackedOperations``' order."""
    return sorted((OperationRecord.from_row(row) for row in rows), key=lambda r: r.order_key)


class OperatorStore:
    """``cancelOperations``, ``reissueOperations``, ``rearmWatches`` and
    ``forceReleaseLeases``. ``read_winners`` reads documents' current winners inside the
    caller's transaction (``store.batches``' reader, or one over an injected
    ``read_winner``)."""

    def __init__(self, context: StoreContext, read_winners: ReadWinners) -> None:
        self._ctx = context
        self._db = context.db
        self._read_winners = read_winners

    def _chosen(self, conditions: list[Any], order: Sequence[Any], size: int) -> Any:
        """The first ``size`` operations matching ``conditions`` in ``order``, skipping rows
        locked elsewhere (PostgreSQL)."""
        query = sa.select(op.c.caller_did, op.c.operation_id, op.c.created_at).where(*conditions)
        return self._db.dialect.skip_locked(query.order_by(*order).limit(size))

    async def cancel_operations(
        self, where: OperationFilter, *, reason: str | None = None, limit: int = DEFAULT_LIMIT
    ) -> list[OperationRecord]:
        """Cancel up to ``limit`` (1 to 1,000) attempted operations matching ``where``, the
        oldest first: each becomes failed with ``last_kind`` ``cancelled`` (no HTTP status),
        version + 1, nothing scheduled, and its lease cleared, so the holder's later renew,
        mark, record or finalize is refused (their guards name the token). A send already
        marked keeps its marker: the provider may hold the write. ``reason`` (at most 2,048
        bytes of UTF-8) says why: it becomes ``last_error`` and the message of each
        ``cancelled`` event, with ``MARKED_NOTE`` where a send was marked
        (``cancel_message``). Returns the cancelled operations in
        ``listTrackedOperations``' order. One statement (PostgreSQL; SQLite: one
        transaction, the events appended after). Raises ``InvalidInput`` naming
        ``filter`` when ``where`` names no field, ``filter.<field>`` for a malformed one
        (``filter.documentIDs``: at most 500), ``reason`` or ``limit``."""
        size = _limit(limit)
        _reason(reason)
        conditions = _in_filter(where, self._ctx.clock())
        if conditions is None:
            return []
        live = op.c.state == ATTEMPTED
        chosen = self._chosen([*conditions, live], ORDER, size).cte("chosen")
        update = (
            sa.update(op)
            .where(
                sa.tuple_(op.c.caller_did, op.c.operation_id).in_(
                    sa.select(chosen.c.caller_did, chosen.c.operation_id)
                ),
                live,
            )
            .values(
                state=FAILED,
                last_kind=CANCELLED_KIND,
                last_http_status=None,
                next_attempt_at=None,
                defer_reason=None,
                lease_token=None,
                lease_expires_at=None,
                last_error=sa.case(
                    (op.c.send_marker.is_not(None), cancel_message(reason, marked=True)),
                    else_=cancel_message(reason, marked=False),
                ),
                version=op.c.version + 1,
                updated_at=self._ctx.clock(),
            )
            .returning(op)
        )
        return _records(await run_logged(self._db, OPERATIONS, CANCELLED, update))

    async def count_cancellable(self, where: OperationFilter) -> int:
        """How many attempted operations match ``where``: what ``cancel_operations(where)``
        would still cancel, over as many calls as it takes. One count. Raises
        ``InvalidInput`` as ``cancel_operations``."""
        conditions = _in_filter(where, self._ctx.clock())
        if conditions is None:
            return 0
        return await self._count(op, [*conditions, op.c.state == ATTEMPTED])

    async def failure_groups(
        self, where: OperationFilter, *, limit: int = DEFAULT_LIMIT
    ) -> list[FailureGroup]:
        """The failed operations matching ``where`` (an empty filter: all of them) grouped by
        their last outcome's kind and error message, the largest group first, then by kind
        and message (none first); at most ``limit`` (1 to ``MAX_FAILURE_GROUPS``) groups.
        One statement. Raises ``InvalidInput`` naming ``first`` for a limit out of range,
        else as ``cancel_operations`` does for the filter."""
        first = check.count("first", limit, minimum=1, maximum=MAX_FAILURE_GROUPS)
        conditions = _in_filter(where, self._ctx.clock(), allow_empty=True)
        if conditions is None:
            return []
        n = sa.func.count().label("n")
        keys = (op.c.last_kind, op.c.last_error)
        query = (
            sa.select(
                *keys,
                n,
                sa.func.sum(sa.case((op.c.reissued_as.is_(None), 1), else_=0)).label("unreissued"),
                sa.func.max(op.c.updated_at).label("last_at"),
            )
            .where(*conditions, op.c.state == FAILED)
            .group_by(*keys)
            .order_by(n.desc(), *(key.asc().nulls_first() for key in keys))
            .limit(first)
        )
        return [
            FailureGroup(
                kind=row["last_kind"],
                message=row["last_error"],
                count=int(row["n"]),
                unreissued=int(row["unreissued"]),
                last_at=int(row["last_at"]),
            )
            for row in await self._db.fetch_all(query)
        ]

    async def reissue_operations(
        self,
        where: OperationFilter,
        *,
        include: Collection[str] = (),
        limit: int = DEFAULT_LIMIT,
    ) -> list[OperationRecord]:
        """Reissue up to ``limit`` (1 to 1,000) failed operations matching ``where`` that
        were never reissued, the oldest first: each gets a new attempted operation under the
        same caller with its envelope, its reissue intent, ETag and document, at
        ``reissue_key`` of its key, due at once and unleased (``leaseOperations`` hands it
        out), naming it in ``reissued_from``; the original stays failed and names the new
        one in ``reissued_as``, so no later call matches it again. An operation holding a
        risk (``CANCELLED_RISK``, ``OUTCOME_UNKNOWN_RISK``) not in ``include`` is left as it
        is: reissuing it may send the write twice. An original whose reissue key is taken
        (``count_reissue``'s ``blocked``) is passed over and takes no place of the
        ``limit``; one whose reissue was collected with its envelope (the tombstone stands
        for it) is linked to that key and not made again. Returns the new operations in
        their originals' ``listTrackedOperations`` order; ``count_reissue`` says what the
        filter still matches. One transaction: pick the originals (locked), sort out the
        taken keys, insert the reissues, link the originals; again after the last original
        used while passed-over ones left the ``limit`` unfilled, each round reading twice
        as many originals as the last (at most 1,000; the ones read are locked on
        PostgreSQL), so a long run of blocked originals costs a few rounds, not one per
        original. Raises ``InvalidInput``
        naming ``filter`` when ``where`` names no field, ``filter.<field>`` for a malformed
        one, ``include`` or ``limit``."""
        size = _limit(limit)
        risks = _include(include)
        conditions = _in_filter(where, self._ctx.clock())
        if conditions is None:
            return []
        while True:
            try:
                return await self._reissue([*conditions, *UNREISSUED, *risks_allowed(risks)], size)
            except Tombstoned:
                # A reissue's key was collected while this transaction ran: run again, and
                # the sorting finds its tombstone.
                continue

    async def _reissue(self, conditions: list[Any], size: int) -> list[OperationRecord]:
        """``reissue_operations``' transaction over the originals matching ``conditions``.
        A reissue's key is a claim like any other: where the insert created a row whose key
        has a tombstone (a collection that committed after the sorting read; ``store.
        tombstones``), this raises ``Tombstoned``, rolling back."""
        created: list[OperationRecord] = []
        after: tuple[Any, ...] | None = None
        reach = 0
        async with self._db.write_transaction():
            now = self._ctx.clock()
            while len(created) < size:
                wanted = size - len(created)
                reach = min(max(wanted, reach * 2), MAX_LIMIT)
                later = [] if after is None else [sa.tuple_(*ORDER) > sa.tuple_(*after)]
                originals = await self._db.fetch_all(
                    self._chosen([*conditions, *later], ORDER, reach)
                )
                if not originals:
                    break
                items = [
                    _reissue_item(row["caller_did"], row["operation_id"])
                    | {"node_key": self._ctx.new_id(), "incarnation": self._ctx.new_id()}
                    for row in originals
                ]
                fresh, collected, _ = await self._sort_reissues(items)
                fresh, collected, used = _first_fresh(fresh, collected, items, wanted)
                after = tuple(originals[used - 1][column.name] for column in ORDER)
                inserted = await self._write(REISSUE, fresh, p_now=now) if fresh else []
                made = [OperationRecord.from_row(row) for row in inserted]
                found = await find_tombstones(
                    self._db,
                    [key_digest(record.caller_did, record.operation_id) for record in made],
                )
                if found:
                    raise Tombstoned(found)
                keys = {record.operation_id for record in made}
                linked = [item for item in fresh if item["new_operation"] in keys] + collected
                if linked:
                    await self._write(LINK_REISSUED, linked, p_now=now)
                place = {row["operation_id"]: index for index, row in enumerate(originals)}
                created += sorted(made, key=lambda record: place[record.reissued_from or ""])
                if used == len(originals) < reach:
                    break
        return created

    async def _sort_reissues(self, items: Sequence[dict[str, Any]]) -> SortedReissues:
        """Sort reissue items (``_reissue_item``) by their new key: ``fresh`` ones (free:
        no operation, no tombstone), ``collected`` ones (a tombstone of the reissue's own
        envelope, by ``envelope_digest``: it was made, finished and collected, so its
        original is linked to that key) and ``blocked`` ones (another operation holds the
        key, or a tombstone of another envelope). An item whose key holds its own reissue (a
        concurrent call reissued it after the caller read it) is in none of them: it is done,
        neither blocked nor remaining. An item whose original is gone by the time
        its key's tombstone is compared (collected meanwhile; only outside a reissue's own
        transaction, which holds its originals) is in none of them. Returns
        ``(fresh, collected, blocked)``, the first two in the order of ``items``. One read of the
        operations at the new keys, one of the tombstones per 500 keys, and one of the
        originals of tombstoned keys."""
        taken = await self._existing([(item["caller"], item["new_operation"]) for item in items])
        free = [item for item in items if (item["caller"], item["new_operation"]) not in taken]
        blocked = [
            item
            for item in items
            if (row := taken.get((item["caller"], item["new_operation"]))) is not None
            and row["reissued_from"] != item["operation"]
        ]
        digests = [key_digest(item["caller"], item["new_operation"]) for item in free]
        tombstones = await find_tombstones(self._db, digests)
        fresh = [
            item for item, digest in zip(free, digests, strict=True) if digest not in tombstones
        ]
        replayed = [
            (item, tombstones[digest])
            for item, digest in zip(free, digests, strict=True)
            if digest in tombstones
        ]
        if not replayed:
            return fresh, [], blocked
        originals = await self._existing(
            [(item["caller"], item["operation"]) for item, _ in replayed]
        )
        collected = []
        for item, tombstone in replayed:
            original = originals.get((item["caller"], item["operation"]))
            if original is None:
                continue
            envelope = reissue_envelope(OperationRecord.from_row(original), item["new_operation"])
            if envelope_digest(envelope) == tombstone.envelope_digest:
                collected.append(item)
            else:
                blocked.append(item)
        return fresh, collected, blocked

    async def _existing(self, keys: Sequence[tuple[str, str]]) -> dict[tuple[str, str], Row]:
        """The operations at ``keys`` (``(caller_did, operation_id)``) that exist, by key:
        one read (``GET_AT_KEYS``)."""
        if not keys:
            return {}
        items = [{"caller": caller, "operation": ident} for caller, ident in keys]
        prepared, values = GET_AT_KEYS.bind(self._db.dialect, items)
        rows = await self._db.fetch_prepared_all(prepared, values)
        return {(row["caller_did"], row["operation_id"]): row for row in rows}

    async def count_reissue(
        self, where: OperationFilter, *, include: Collection[str] = ()
    ) -> ReissueCounts:
        """What ``reissue_operations(where, include=include)`` leaves, among the failed
        operations matching ``where`` never reissued (``ReissueCounts``): how many it skips
        for each risk not in ``include``, how many are blocked, and how many remain for its
        next call. One count, then the keys of the rest read and sorted
        (``_sort_reissues``) ``COUNT_CHUNK`` at a time. Not a snapshot of one instant: a
        write that commits meanwhile may be counted or not. Raises ``InvalidInput`` as
        ``reissue_operations``."""
        risks = _include(include)
        conditions = _in_filter(where, self._ctx.clock())
        if conditions is None:
            return ReissueCounts(cancelled=0, outcome_unknown=0, blocked=0, remaining=0)
        unknown = outcome_unknown() if OUTCOME_UNKNOWN_RISK not in risks else sa.false()
        stopped = cancelled() if CANCELLED_RISK not in risks else sa.false()
        counted = await self._db.fetch_one(
            sa.select(
                sa.func.coalesce(sa.func.sum(sa.case((unknown, 1), else_=0)), 0).label("unknown"),
                sa.func.coalesce(
                    sa.func.sum(sa.case((sa.and_(sa.not_(unknown), stopped), 1), else_=0)), 0
                ).label("cancelled"),
            ).where(*conditions, *UNREISSUED)
        )
        assert counted is not None, "a count returns one row"
        rows = await self._db.fetch_all(
            sa.select(op.c.caller_did, op.c.operation_id).where(
                *conditions, *UNREISSUED, *risks_allowed(risks)
            )
        )
        blocked = remaining = 0
        for chunk in chunked(rows, COUNT_CHUNK):
            items = [_reissue_item(row["caller_did"], row["operation_id"]) for row in chunk]
            fresh, collected, taken = await self._sort_reissues(items)
            blocked += len(taken)
            remaining += len(fresh) + len(collected)
        return ReissueCounts(
            cancelled=int(counted["cancelled"]),
            outcome_unknown=int(counted["unknown"]),
            blocked=blocked,
            remaining=remaining,
        )

    async def rearm_watches(
        self, where: WatchFilter, *, limit: int = DEFAULT_LIMIT
    ) -> list[WatchRecord]:
        """Open a new repair generation on up to ``limit`` (1 to 1,000) repair-failed
        watches matching ``where``, in identity order, as a manual ``armWatch`` does:
        generation + 1, pending verification, 0 attempts, observing the document's current
        winner, due at the store's now, no claim, no defer reason. Returns them in identity
        order. One transaction: read the candidates, their documents' winners (locked
        first, as every watch decision does), lock the watches in identity order, write the
        ones still repair-failed. Raises ``InvalidInput`` naming ``filter.<field>`` for a
        malformed field (``filter.documentIDs``: at most 500) or ``limit``."""
        size = _limit(limit)
        conditions = _rearmable(where)
        if conditions is None:
            return []
        candidates = (
            sa.select(*IDENTITY_COLUMNS, watch.c.document_id)
            .where(*conditions)
            .order_by(*IDENTITY_COLUMNS)
            .limit(size)
        )
        async with self._db.write_transaction():
            found = await self._db.fetch_all(candidates)
            if not found:
                return []
            winners = await self._read_winners(
                sorted({row["document_id"] for row in found if row["document_id"] is not None})
            )
            identities = [{name: row[name] for name in IDENTITY_ITEM} for row in found]
            prepared, values = LOCK_WATCHES.bind(self._db.dialect, identities)
            locked = [
                WatchRecord.from_row(row)
                for row in await self._db.fetch_prepared_all(prepared, values)
            ]
            now = self._ctx.clock()
            items = [
                {name: getattr(stored, name) for name in IDENTITY_ITEM}
                | {"version": stored.version}
                | opened_generation(stored, winners.get(stored.document_id or ""), now)
                for stored in locked
                if stored.verification_status == REPAIR_FAILED
            ]
            if not items:
                return []
            rows = await self._write(REARM, items, p_now=now)
        return sorted((WatchRecord.from_row(row) for row in rows), key=lambda w: w.order_key)

    async def count_rearmable(self, where: WatchFilter) -> int:
        """How many repair-failed watches match ``where``: what ``rearm_watches(where)``
        would still re-arm, over as many calls as it takes. One count. Raises
        ``InvalidInput`` as ``rearm_watches``."""
        conditions = _rearmable(where)
        if conditions is None:
            return 0
        return await self._count(watch, conditions)

    async def force_release_leases(self, keys: Sequence[tuple[str, str]]) -> list[OperationRecord]:
        """Free the leases of the attempted operations at ``keys`` (1 to 500 ``(caller_did,
        operation_id)``), whatever their token and whether or not they lapsed: the holder's
        later renew, mark, record or finalize is refused. A send its run marked and never
        recorded counts as abandoned, as a takeover counts it (attempts + 1, the marker
        ``*abandoned*``). Operations without a lease, finished or absent are left out.
        Returns the released operations in key order, each logged ``force_released``. One
        statement (on PostgreSQL it locks the rows in key order first; SQLite: one
        transaction, the events appended after). Raises
        ``InvalidInput`` naming ``keys`` or ``keys[i].<field>`` (a key named twice among
        them)."""
        wanted = operation_keys(keys, fewest=1)
        counted = unrecorded_send()
        held = [
            self._db.dialect.keys_in(op, wanted),
            op.c.state == ATTEMPTED,
            op.c.lease_token.is_not(None),
        ]
        update = (
            sa.update(op)
            .where(locked_in_key_order(self._db.dialect, *held))
            .values(
                lease_token=None,
                lease_expires_at=None,
                attempts=sa.case((counted, op.c.attempts + 1), else_=op.c.attempts),
                send_marker=sa.case(
                    (counted, sa.literal(ABANDONED_SEND_MARKER)), else_=op.c.send_marker
                ),
                updated_at=self._ctx.clock(),
            )
            .returning(op)
        )
        rows = await run_logged(self._db, OPERATIONS, FORCE_RELEASED, update)
        records = (OperationRecord.from_row(row) for row in rows)
        return sorted(records, key=lambda r: (r.caller_did, r.operation_id))

    async def _count(self, table: sa.Table, conditions: list[Any]) -> int:
        query = sa.select(sa.func.count().label("n")).select_from(table).where(*conditions)
        row = await self._db.fetch_one(query)
        assert row is not None, "a count returns one row"
        return int(row["n"])

    async def _write(
        self, statement: LoggedItems, items: Sequence[Mapping[str, Any]], **params: Any
    ) -> list[Row]:
        return await statement.run(self._db, items, **params)
