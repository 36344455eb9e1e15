"""Operations: the durable, exactly-once write-back envelope of one change (seed operations.js).

Every write is one conditional ``UPDATE … WHERE <guards> RETURNING``: it applied when a row
came back. Methods return the updated record when they applied and None when a guard
refused, where the seed returns a boolean.
"""

import string
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Literal, NamedTuple

import sqlalchemy as sa

from store import lease_guards as guards
from store import validation as check
from store.accounts import ENSURE_ACCOUNT, touch
from store.context import ReadWinner, StoreContext
from store.database import chunked, fetch_in_chunks
from store.dialects import Dialect
from store.errors import InvalidInput, ReservedValue
from store.events import (
    CLAIMED,
    DEFERRED,
    FINALIZED,
    LEASE_ACTION,
    OPERATIONS,
    PRIOR_TOKEN,
    RECORDED,
    RELEASED,
    SEND_MARKED,
    Logged,
    checked_message,
)
from store.items import Inputs, unindexed
from store.operation_match import OPERATION, key_conditions, visible
from store.records import (
    ATTEMPTED,
    COMMITTED,
    DEFER_REASONS,
    OPERATION_FIELDS,
    OPERATION_STATES,
    TERMINAL_STATES,
    WATCH_IDENTITY,
    EpochMs,
    JsonValue,
    OperationClaim,
    OperationRecord,
    TombstoneRecord,
    WatchIdentity,
    WatchRecord,
)
from store.sizes import SIZE, Measured, fetch_measured, measured, row_bytes, within_bytes
from store.statements import Prepared, param
from store.tables import account
from store.tables import operation as op
from store.tombstones import (
    NOT_COLLECTED,
    envelope_digest,
    get_tombstone,
    key_digest,
)
from store.watches import WatchesStore, by_identity

CONTESTED_SEND_MARKER = "*contested*"
"""The send marker of an attempt that more than one run marked: it matches no run's marker,
so no run can refund that attempt."""
ABANDONED_SEND_MARKER = "*abandoned*"
"""The send marker after a takeover counted the lapsed run's send. It matches no run's
marker, so no refund takes the counted attempt back, the next run's mark makes the attempt
contested, and a later takeover counts again only when a run marked since."""
RESERVED_SEND_MARKERS = frozenset({CONTESTED_SEND_MARKER, ABANDONED_SEND_MARKER})
CANCELLED_KIND = "cancelled"
"""The ``last_kind`` of an operation an operator cancelled (``store.operator``): reserved, so
no recorded attempt's kind reads as a cancel."""

FinalizeInOne = Callable[[dict[str, Any], dict[str, Any]], Awaitable["Finalization | None"]]
"""A finalize as one statement: given the item's inputs (``finalize_item``) and its
parameters (``p_<name>`` and ``p_now``), the finalization, or None when refused."""

InsertClaims = Callable[
    [Sequence[Mapping[str, Any]]], Awaitable[dict[tuple[str, str], OperationRecord]]
]
"""Claims' fresh rows (a claim's columns, in key order) inserted in one statement
(``store.claims.ClaimsInOne``): the rows inserted, by key; none whose key is taken or
collected."""

ClaimStatus = Literal["claimed", "exists", "conflict", "collected"]
OrderKey = tuple[int, str, str]


@dataclass(frozen=True, slots=True)
class ClaimResult:
    """The outcome of a claim: ``claimed`` or ``exists`` carry the operation; ``collected``
    carries the tombstone of the key (its operation was collected, with the claim's
    envelope); ``conflict`` carries neither, or the tombstone when the key's operation was
    collected with another envelope."""

    status: ClaimStatus
    operation: OperationRecord | None = None
    tombstone: TombstoneRecord | None = None


@dataclass(frozen=True, slots=True)
class OperationTransition:
    """The input of ``record_operation`` (seed ``RecordOperationInput``).

    CAS on (state = from_state, version, lease_token). ``count_attempt`` (default True) adds
    one attempt and clears the send marker; ``refund_attempt`` takes one back instead, only
    when attempts > 0 and the marker is absent or ``send_marker``. Times are epoch ms.
    ``error_message`` (at most 2,048 bytes of UTF-8) becomes ``last_error`` and the event's
    message.
    """

    caller_did: str
    operation_id: str
    from_state: str
    to_state: str
    version: int
    lease_token: str
    provider_etag: str | None = None
    count_attempt: bool = True
    refund_attempt: bool = False
    send_marker: str | None = None
    next_attempt_at: int | None = None
    defer_reason: str | None = None
    kind: str | None = None
    http_status: int | None = None
    error_message: str | None = None


@dataclass(frozen=True, slots=True)
class OperationFilter:
    """The filter of ``list_tracked_operations`` and of the operator's bulk writes
    (``store.operator``); every field given must match.

    ``visible_to`` matches the caller or the owner. An empty ``states`` or
    ``document_ids`` list matches nothing; None leaves that field unfiltered. ``kind`` is
    the last recorded outcome's kind (``last_kind``); ``last_error`` its error message,
    exactly (a group of ``OperatorStore.failure_groups``). ``run`` (one of ``RUNS``): where
    an ATTEMPTED operation stands at the store's now (``run_condition``). ``search``: a part
    of the operation id, the target or the source id, in any case (``search_condition``).
    ``updated_after`` and
    ``updated_before`` (epoch ms) bound ``updated_at``: at or after the one, strictly
    before the other.
    """

    node_key: str | None = None
    caller_did: str | None = None
    operation_id: str | None = None
    visible_to: str | None = None
    connector_name: str | None = None
    states: Sequence[str] | None = None
    document_ids: Sequence[str] | None = None
    owner_did: str | None = None
    account_key: str | None = None
    kind: str | None = None
    last_error: str | None = None
    updated_after: int | None = None
    updated_before: int | None = None
    run: str | None = None
    search: str | None = None

    @property
    def is_empty(self) -> bool:
        """True when no field is given: the filter matches every operation."""
        return all(getattr(self, name) is None for name in self.__slots__)


RUNS = ("leased", "due", "scheduled", "deferred")
"""Where an ATTEMPTED operation stands at a moment (``run_condition``), one of each."""


def run_condition(run: str, now: int) -> sa.ColumnElement[bool]:
    """The ATTEMPTED operations that stand as ``run`` says at ``now`` (epoch ms): ``leased``,
    its lease held and not lapsed (``lease_guards.live_lease``); ``due``, ``ready`` (its lease
    free and its next attempt null or come: a worker may lease it once its account allows);
    ``scheduled``, its lease free and its next attempt later, with no deferral (a retry or a
    delay); ``deferred``, its lease free and its next attempt later, deferred
    (``deferReason``: offline or auth). Each ATTEMPTED operation with a lease token stands in
    exactly one."""
    waiting = sa.and_(guards.live(), lease_free(now), op.c.next_attempt_at > now)
    if run == "leased":
        return guards.live_lease(now)
    if run == "due":
        return sa.and_(guards.live(), ready(now))
    if run == "scheduled":
        return sa.and_(waiting, op.c.defer_reason.is_(None))
    return sa.and_(waiting, op.c.defer_reason.is_not(None))


ASCII_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)
SEARCHED = (op.c.operation_id, op.c.target, op.c.source_id)
"""The columns ``search`` looks into."""


def search_condition(search: str) -> sa.ColumnElement[bool]:
    """The operations whose id, target or source id holds ``search`` (checked), ignoring the
    case of ASCII letters; ``%``, ``_`` and ``\\`` in it are plain characters. A scan of the
    rows the other conditions leave (no index serves a substring)."""
    escaped = (
        search.translate(ASCII_LOWER).replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    )
    pattern = f"%{escaped}%"
    return sa.or_(*(sa.func.lower(column).like(pattern, escape="\\") for column in SEARCHED))


def filter_conditions(where: OperationFilter, *, now: int) -> list[sa.ColumnElement[bool]] | None:
    """The conditions of ``where`` on operations at ``now`` (the store's clock, epoch ms: what
    ``run`` compares), checked, but its ``document_ids`` (each caller chunks those as it
    must); None when ``where`` matches nothing (an empty ``states``). Raises
    ``InvalidInput`` naming the first malformed field, and ``updatedBefore`` when it is
    earlier than ``updatedAfter``."""
    states = (
        None
        if where.states is None
        else sorted({check.choice("states", state, OPERATION_STATES) for state in where.states})
    )
    conditions: list[sa.ColumnElement[bool]] = []
    if where.node_key is not None:
        conditions.append(op.c.node_key == check.key("nodeKey", where.node_key))
    conditions += key_conditions(
        OPERATION,
        caller_did=where.caller_did,
        operation_id=where.operation_id,
        connector_name=where.connector_name,
        owner_did=where.owner_did,
        account_key=where.account_key,
        kind=where.kind,
        visible_to=where.visible_to,
    )
    if where.last_error is not None:
        conditions.append(op.c.last_error == check.text("lastError", where.last_error))
    after = check.optional_epoch_ms("updatedAfter", where.updated_after)
    before = check.optional_epoch_ms("updatedBefore", where.updated_before)
    if after is not None and before is not None and before < after:
        raise InvalidInput("updatedBefore", "must not be earlier than updatedAfter")
    if after is not None:
        conditions.append(op.c.updated_at >= after)
    if before is not None:
        conditions.append(op.c.updated_at < before)
    if where.run is not None:
        conditions.append(run_condition(check.choice("run", where.run, RUNS), now))
    if where.search is not None:
        conditions.append(search_condition(check.text("search", where.search, maximum=200)))
    if states == []:
        return None
    if states is not None:
        conditions.append(op.c.state.in_(states))
    return conditions


def _tracked(
    where: OperationFilter, now: int
) -> tuple[list[sa.ColumnElement[bool]], list[str] | None] | None:
    """The conditions of ``where`` for the tracked list and its count, and its document ids
    without repeats (so a list split into chunks cannot match one operation in two of
    them); None when it matches nothing. Raises ``InvalidInput`` as ``filter_conditions``
    and naming ``documentIDs``."""
    conditions = filter_conditions(where, now=now)
    document_ids = (
        None
        if where.document_ids is None
        else list(dict.fromkeys(check.key_list("documentIDs", where.document_ids)))
    )
    if conditions is None or document_ids == []:
        return None
    return conditions, document_ids


@dataclass(frozen=True, slots=True)
class Finalization:
    """What ``finalize_operation_and_arm_watch`` wrote: the committed operation and its watch."""

    operation: OperationRecord
    watch: WatchRecord


def by_key(caller: Any, operation: Any) -> sa.ColumnElement[bool]:
    """The operation at ``(caller, operation)``: values (validated by the caller) or
    ``param``s."""
    return sa.and_(op.c.caller_did == caller, op.c.operation_id == operation)


def lease_free(now: Any, table: Any = op) -> sa.ColumnElement[bool]:
    """No lease, or an expired one (``lease_expires_at < now``, epoch ms): a lease that
    expires exactly at ``now`` is still held (of ``table``: the operations table or an alias
    of it)."""
    return sa.or_(table.c.lease_token.is_(None), table.c.lease_expires_at < now)


def lease_free_or_held(now: Any, token: Any) -> sa.ColumnElement[bool]:
    """The lease guard: ``lease_free``, or the lease is ``token``'s (a ``param``; NULL
    drops that arm)."""
    return sa.or_(lease_free(now), op.c.lease_token == token)


def unrecorded_send(row: sa.FromClause = op) -> sa.ColumnElement[bool]:
    """A run marked a send and never recorded it: the marker set, and not already counted
    as ``ABANDONED_SEND_MARKER`` (of ``row``: the operations table or an alias of it). A
    lease taken over or forced free from that run counts the attempt."""
    return sa.and_(row.c.send_marker.is_not(None), row.c.send_marker != ABANDONED_SEND_MARKER)


def abandoned_send(now: Any, token: Any, row: sa.FromClause = op) -> sa.ColumnElement[bool]:
    """A takeover by ``token`` of a lapsed lease whose run marked a send and never recorded
    it (``unrecorded_send``), of ``row`` (the operations table or an alias of it)."""
    return sa.and_(
        row.c.lease_token.is_not(None),
        row.c.lease_token != token,
        row.c.lease_expires_at < now,
        unrecorded_send(row),
    )


def ready(now: Any) -> sa.ColumnElement[bool]:
    """What makes a live operation due at ``now`` (epoch ms): ``next_attempt_at`` null or at
    most ``now``, its lease free or expired."""
    return sa.and_(
        sa.or_(op.c.next_attempt_at.is_(None), op.c.next_attempt_at <= now), lease_free(now)
    )


def due_operation(now: Any) -> sa.ColumnElement[bool]:
    """A live operation a worker may pick up at ``now`` (epoch ms): attempted, ``ready``, its
    account not paused (``lease_guards.unpaused``)."""
    return sa.and_(guards.live(), ready(now), guards.unpaused(op.c))


KEY = by_key(param("p_caller", op.c.caller_did), param("p_operation", op.c.operation_id))
"""``by_key`` with the key as the parameters ``p_caller`` and ``p_operation``."""
NOW = param("p_now", op.c.updated_at)
ORDER = (op.c.created_at, op.c.caller_did, op.c.operation_id)
"""The ``listTrackedOperations`` order (``OperationRecord.order_key``)."""
KEY_ORDER = (op.c.caller_did, op.c.operation_id)
"""Key order (``list_operations``)."""


def items_locked_in_key_order(rows: sa.FromClause) -> sa.FromClause:
    """A batch's items (``rows``, naming ``caller`` and ``operation``) once their operations
    are locked in key order (``FOR UPDATE``), for a batch write over them (its
    ``lock_first``, PostgreSQL): the write's plan may visit the rows in any order (their
    order in the table, say), and then locks none anew, so two batches, or a batch and
    another write that waits for operations in key order (``force_release_leases``,
    ``LeasingStore.renew_leases``), wait on each other instead of deadlocking. An item
    whose operation is absent is left out: it writes nothing either way."""
    locked = (
        sa.select(rows)
        .join_from(rows, op, by_key(rows.c.caller, rows.c.operation))
        .order_by(*KEY_ORDER)
        .with_for_update(of=op)
    )
    return locked.cte("locked_item")


def locked_in_key_order(dialect: Dialect, keys: Any, *guards: Any) -> sa.ColumnElement[bool]:
    """The WHERE of a write over several operations it names by key: the operation is one
    of ``keys`` (a condition) and meets ``guards``. Where writers run side by side
    (``Dialect.locked_in_order``; where they take turns, the conditions alone) those
    meeting them are locked first in key order, so the write waits for them in the order
    ``items_locked_in_key_order`` gives a batch; ``guards`` are asked again of each locked
    row."""
    if dialect.one_writer:
        return sa.and_(keys, *guards)
    chosen = dialect.locked_in_order(sa.select(*KEY_ORDER).where(keys, *guards), *KEY_ORDER)
    locked = chosen.cte("locked")
    return sa.and_(
        sa.tuple_(*KEY_ORDER).in_(sa.select(locked.c.caller_did, locked.c.operation_id)),
        *guards,
    )


WATCH_ORDER = (*(op.c[name] for name in WATCH_IDENTITY), *ORDER)
"""By watch identity, then in ``ORDER`` (``list_operations_of_watches``)."""
ROW_BYTES = row_bytes(op.c)
"""An operation's size in bytes (``store.sizes``)."""
TOKEN = param("p_token", op.c.lease_token)

CLAIM_COLUMNS = OPERATION_FIELDS
"""The columns ``claim_operation`` writes (every one), each from the parameter
``p_<column>``."""


def claim_insert(insert: Any) -> Any:
    """``insert`` (of whole operation rows, by values or from a select) as the claim's
    insert-if-absent: a row whose key exists is left as stored; returns the rows inserted."""
    return insert.on_conflict_do_nothing(
        index_elements=[op.c.caller_did, op.c.operation_id]
    ).returning(op)


def claim_lease(row: Any, now: Any, allowed: sa.ColumnElement[bool]) -> dict[str, Any]:
    """A claim's new ``row``'s lease columns, ``lease_token`` and ``lease_expires_at``: the
    claimant's lease only where ``allowed`` (leasing would grant it:
    ``lease_guards.lease_allowed``, and for a batch its rank within the batch,
    ``store.batches``); else no token and a lease that lapsed at ``now`` - 1 (epoch ms), due
    at once for ``leaseOperations``. Without a token the claimant's token fences nothing: its
    marks, finalizes, records and renewals are refused until it leases the row."""
    return {
        "lease_token": sa.case((allowed, row.lease_token), else_=sa.null()),
        "lease_expires_at": sa.case((allowed, row.lease_expires_at), else_=now - 1),
    }


CLAIMED_ROW = SimpleNamespace(**{name: param(f"p_{name}", op.c[name]) for name in CLAIM_COLUMNS})
"""The claim's new row, column by column, as the parameters ``p_<column>``."""


def _claimed_select() -> sa.Select[Any]:
    # The guard is asked once, in a subquery, for both lease columns.
    decided = sa.select(guards.lease_allowed(CLAIMED_ROW, NOW, None).label("allowed")).subquery(
        "decided"
    )
    values = vars(CLAIMED_ROW) | claim_lease(CLAIMED_ROW, NOW, decided.c.allowed)
    labelled = (value.label(name) for name, value in values.items())
    return sa.select(*labelled).select_from(decided).where(NOT_COLLECTED)


CLAIM = Logged(
    OPERATIONS,
    CLAIMED,
    lambda insert: claim_insert(insert(op).from_select(list(CLAIM_COLUMNS), _claimed_select())),
)
"""``claim_operation``'s insert-if-absent, logged: nothing is inserted when a tombstone
holds the key (``NOT_COLLECTED``, ``p_key_digest``); ``p_now`` is the store's now."""

GET_OPERATION = Prepared(lambda _: sa.select(op).where(KEY))
"""``get_operation``'s read."""

ITEM_COLUMNS: dict[str, sa.Column[Any]] = {
    "caller": op.c.caller_did,
    "operation": op.c.operation_id,
    "token": op.c.lease_token,
    "marker": op.c.send_marker,
    "version": op.c.version,
    "result_entity": op.c.result_entity,
    "provider_etag": op.c.provider_etag,
    "document_id": op.c.document_id,
    "from_state": op.c.state,
    "to_state": op.c.state,
    "attempts": op.c.state,
    "next_attempt_at": op.c.next_attempt_at,
    "defer_reason": op.c.defer_reason,
    "kind": op.c.last_kind,
    "http_status": op.c.last_http_status,
    "message": op.c.last_error,
}
"""The per-item inputs of the guarded writes below, each typed as the column it is
compared with or written to: a single write binds input ``name`` as the parameter
``p_<name>`` (``PARAMS``), a batch (``store.batches``) reads it from its rows' column
``name``, so both run the same guard."""


PARAMS: Inputs = {name: param(f"p_{name}", column) for name, column in ITEM_COLUMNS.items()}


def live_or_allowed(now: Any) -> sa.ColumnElement[bool]:
    """The operation's lease has not lapsed at ``now``, or it is not attempted, or the
    leasing guard would let its holder take it again now (``lease_guards.lease_allowed``):
    what a renewal or a send mark of a lapsed lease must pass, as a new lease would, so a
    lapsed holder never revives its lease past a pause, a throttle, a cap a peer filled or
    another live lease of its entity."""
    return sa.or_(
        op.c.lease_expires_at >= now,
        unindexed(op.c.state) != ATTEMPTED,
        guards.lease_allowed(op.c, now, guards.own_key()),
    )


def mark_send_started_update(item: Inputs, now: Any) -> sa.Update:
    """``mark_send_started``'s guarded update of the operation at the item's ``caller`` and
    ``operation``: state attempted and the lease ``token``'s, not lapsed or one the leasing
    guard would grant again (``live_or_allowed``); the send marker becomes ``marker``, or
    contested when another run's marker is there."""
    return (
        sa.update(op)
        .where(
            by_key(item["caller"], item["operation"]),
            unindexed(op.c.state) == ATTEMPTED,
            op.c.lease_token == item["token"],
            live_or_allowed(now),
        )
        .values(
            send_marker=sa.case(
                (
                    sa.or_(op.c.send_marker.is_(None), op.c.send_marker == item["marker"]),
                    item["marker"],
                ),
                else_=sa.literal(CONTESTED_SEND_MARKER),
            ),
            updated_at=now,
        )
        .returning(op)
    )


MARK_SEND_STARTED = Logged(OPERATIONS, SEND_MARKED, lambda _: mark_send_started_update(PARAMS, NOW))
"""``mark_send_started``'s guarded update, logged."""


def finalize_update(item: Inputs, now: Any, sets_document: bool = True) -> sa.Update:
    """``finalize_operation_and_arm_watch``'s compare-and-set to committed of the operation
    at the item's ``caller`` and ``operation``, on state attempted, ``version`` and the
    lease ``token``. ``sets_document`` False leaves ``document_id`` out of the SET (for
    items that give none, which keep theirs): SQLite rewrites a row's entry in every index
    of a column its SET names, changed or not, so naming it would rewrite the document
    index's entry of each row."""
    values: dict[str, Any] = {
        "state": COMMITTED,
        "result_entity": item["result_entity"],
        "attempts": op.c.attempts + 1,
        "send_marker": None,
        "next_attempt_at": None,
        "defer_reason": None,
        "version": op.c.version + 1,
        # Replaced when given, kept when None.
        "provider_etag": sa.func.coalesce(item["provider_etag"], op.c.provider_etag),
        "updated_at": now,
    }
    if sets_document:
        values["document_id"] = sa.func.coalesce(item["document_id"], op.c.document_id)
    return (
        sa.update(op)
        .where(
            by_key(item["caller"], item["operation"]),
            unindexed(op.c.state) == ATTEMPTED,
            op.c.version == item["version"],
            op.c.lease_token == item["token"],
        )
        .values(values)
        .returning(op)
    )


FINALIZE = Logged(OPERATIONS, FINALIZED, lambda _: finalize_update(PARAMS, NOW))
"""``finalize_operation_and_arm_watch``'s compare-and-set to committed, logged."""

FINALIZE_KEEPING_DOCUMENT = Logged(
    OPERATIONS, FINALIZED, lambda _: finalize_update(PARAMS, NOW, sets_document=False)
)
"""``FINALIZE`` of an item that gives no ``document_id``: the row keeps its own."""


def _keyed_update(guard: sa.ColumnElement[bool], values: dict[str, Any]) -> Callable[[Any], Any]:
    return lambda _: sa.update(op).where(KEY, guard).values(values).returning(op)


EXPIRES_AT = param("p_expires_at", op.c.lease_expires_at)


def lease_values(now: Any, token: Any, expires_at: Any, row: sa.FromClause = op) -> dict[str, Any]:
    """The columns a lease taken by ``token`` until ``expires_at`` writes at ``now`` (values
    or ``param``s, epoch ms) into ``row`` (the operations table, or an alias of it to measure
    the row as the lease leaves it): a takeover of an ``abandoned_send`` counts it
    (attempts + 1, the marker ``ABANDONED_SEND_MARKER``). ``acquire_lease`` and
    ``lease_operations`` both write these."""
    taken_over = abandoned_send(now, token, row)
    return {
        "lease_token": token,
        "lease_expires_at": expires_at,
        "attempts": sa.case((taken_over, row.c.attempts + 1), else_=row.c.attempts),
        "send_marker": sa.case(
            (taken_over, sa.literal(ABANDONED_SEND_MARKER)), else_=row.c.send_marker
        ),
        "updated_at": now,
    }


ACQUIRE_LEASE = Logged(
    OPERATIONS,
    LEASE_ACTION,
    lambda _: (
        sa.update(op)
        .where(
            KEY,
            op.c.state == ATTEMPTED,
            lease_free_or_held(NOW, TOKEN),
            guards.lease_allowed(op.c, NOW, guards.own_key()),
        )
        .values(lease_values(NOW, TOKEN, EXPIRES_AT))
        .returning(op, param("p_prior_token", op.c.lease_token).label("prior_token"))
    ),
    extras=(PRIOR_TOKEN,),
)
"""``acquire_lease``'s guarded update (``lease_free_or_held`` and ``lease_allowed``),
logged as leased or taken over from ``p_prior_token``, the token it found."""
PRIOR_LEASE = Prepared(
    lambda _: (
        sa.select(op.c.lease_token, abandoned_send(NOW, TOKEN).label("taken_over"))
        .where(KEY)
        .with_for_update()
    )
)
"""The lease token of the operation at ``p_caller``/``p_operation``, and whether ``p_token``
taking it at ``p_now`` counts an abandoned send (``abandoned_send``), locked (PostgreSQL)
until the transaction ends: what ``ACQUIRE_LEASE`` replaces."""

LOCK_ACCOUNT_OF_OPERATION = Prepared(
    lambda _: touch(
        sa.tuple_(account.c.connector_name, account.c.account_key).in_(
            sa.select(op.c.connector_name, op.c.account_key).where(KEY)
        )
    )
)
"""Lock (``touch``) the account row of the operation at ``p_caller``/``p_operation``
(PostgreSQL): every path that takes a lease of a capped account holds it, so their in-flight
counts are exact."""


def held_by(token: Any) -> sa.ColumnElement[bool]:
    """The lease is ``token``'s, lapsed or not: the guard of a renewal."""
    return sa.and_(op.c.lease_token == token)


def releasable_by(token: Any) -> sa.ColumnElement[bool]:
    """The lease is ``token``'s, or none is held: the guard of a release."""
    return sa.or_(op.c.lease_token.is_(None), op.c.lease_token == token)


RENEWED = {"lease_expires_at": EXPIRES_AT, "updated_at": NOW}
RENEW_LIVE_LEASE = Prepared(
    _keyed_update(
        sa.and_(
            held_by(TOKEN),
            sa.or_(op.c.lease_expires_at >= NOW, unindexed(op.c.state) != ATTEMPTED),
        ),
        RENEWED,
    )
)
"""``renew_lease``'s update of a lease that has not lapsed (or of finished work), for its
holder (a heartbeat: not logged)."""
RENEW_LEASE = Prepared(_keyed_update(sa.and_(held_by(TOKEN), live_or_allowed(NOW)), RENEWED))
"""``renew_lease``'s update for the lease's holder, a lapsed lease of an attempted
operation only where the leasing guard allows it (``live_or_allowed``)."""

RELEASE_LEASE = Logged(
    OPERATIONS,
    RELEASED,
    _keyed_update(
        releasable_by(TOKEN),
        {"lease_token": None, "lease_expires_at": None, "updated_at": NOW},
    ),
)
"""``release_lease``'s update, for the holder or when there is no lease, logged."""

DEFER_OPERATION = Logged(
    OPERATIONS,
    DEFERRED,
    _keyed_update(
        sa.and_(op.c.state == ATTEMPTED, lease_free_or_held(NOW, TOKEN)),
        {
            "next_attempt_at": param("p_next_attempt_at", op.c.next_attempt_at),
            "defer_reason": param("p_defer_reason", op.c.defer_reason),
            "last_error": param("p_message", op.c.last_error),
            "updated_at": NOW,
        },
    ),
)
"""``defer_operation``'s guarded update (``p_token`` NULL: no holder's arm), logged with
its error message."""


AttemptsMode = Literal["refund", "count", "keep"]


def record_operation_update(
    item: Inputs, now: Any, stays: bool = False, keeps_schedule: bool = False
) -> sa.Update:
    """``record_operation``'s compare-and-set of the operation at the item's ``caller`` and
    ``operation`` on (state = ``from_state``, ``version``, lease ``token``), to
    ``to_state``, by what the item's ``attempts`` (an ``AttemptsMode``) does to the
    attempts: ``refund`` takes one back (guarded by attempts > 0 and the send marker
    absent or ``marker``; NULL: absent only), ``count`` counts one, ``keep`` keeps them;
    refund and count clear the send marker. ``stays`` True, for items whose ``to_state``
    is their ``from_state``, leaves ``state`` out of the SET: SQLite rewrites a row's entry
    in every index of a column its SET names (and in every partial index whose condition
    names it), changed or not, and ``state`` is in most of them. ``keeps_schedule`` True
    applies only where the row's ``next_attempt_at`` and ``defer_reason`` already are the
    item's, and leaves both out of the SET (the due, per-owner due and live account
    indexes keep the row's entries)."""
    mode = item["attempts"]
    refundable = sa.and_(
        op.c.attempts > 0,
        sa.or_(op.c.send_marker.is_(None), op.c.send_marker == item["marker"]),
    )
    values: dict[str, Any] = dict(
        provider_etag=item["provider_etag"],
        next_attempt_at=item["next_attempt_at"],
        defer_reason=item["defer_reason"],
        last_kind=item["kind"],
        last_http_status=item["http_status"],
        last_error=item["message"],
        attempts=sa.case(
            (mode == "refund", op.c.attempts - 1),
            (mode == "count", op.c.attempts + 1),
            else_=op.c.attempts,
        ),
        send_marker=sa.case((mode == "keep", op.c.send_marker), else_=None),
        version=op.c.version + 1,
        updated_at=now,
    )
    if not stays:
        values["state"] = item["to_state"]
    schedule = sa.and_(
        op.c.next_attempt_at.is_not_distinct_from(item["next_attempt_at"]),
        op.c.defer_reason.is_not_distinct_from(item["defer_reason"]),
    )
    if keeps_schedule:
        del values["next_attempt_at"], values["defer_reason"]
    return (
        sa.update(op)
        .where(
            by_key(item["caller"], item["operation"]),
            unindexed(op.c.state) == item["from_state"],
            op.c.version == item["version"],
            op.c.lease_token == item["token"],
            sa.or_(mode != "refund", refundable),
            *([schedule] if keeps_schedule else []),
        )
        .values(values)
        .returning(op)
    )


class RecordShape(NamedTuple):
    """Which of its indexed columns a ``record_operation_update`` leaves out of its SET
    (its ``stays`` and ``keeps_schedule``): one statement of each settle path per shape."""

    stays: bool
    keeps_schedule: bool


def record_steps(items: Sequence[Mapping[str, Any]], one_writer: bool) -> list[RecordShape]:
    """The statements, in the order to run them, that record ``items`` (live changes, one
    or a batch's): the choice ``record_operation`` and ``BatchesStore.record_operations``
    both make. Each leaves ``state`` out of its SET when every item stays in its state.
    Where the database takes one writer at a time (``one_writer``: SQLite, which rewrites
    an index entry of every column a SET names), two in one transaction: first the one
    that applies only to rows already holding their item's ``next_attempt_at`` and
    ``defer_reason`` and leaves both out of its SET, then the full one for the items the
    first did not apply to. Elsewhere the full one alone: two would lock a batch's rows
    out of key order, so two batches naming the same rows could deadlock (and PostgreSQL
    keeps an update HOT by the indexed values, whatever the SET names)."""
    stays = all(item["to_state"] == item["from_state"] for item in items)
    full = RecordShape(stays, keeps_schedule=False)
    return [RecordShape(stays, keeps_schedule=True), full] if one_writer else [full]


def sets_documents(items: Sequence[Mapping[str, Any]]) -> bool:
    """Whether the finalize of ``items`` (one or a batch's) names ``document_id`` in its
    SET: only when an item gives one (``finalize_update``'s ``sets_document``); the choice
    ``finalize_operation_and_arm_watch`` and ``BatchesStore.finalize_operations`` both
    make."""
    return any(item["document_id"] is not None for item in items)


RECORD_OPERATION = Logged(OPERATIONS, RECORDED, lambda _: record_operation_update(PARAMS, NOW))
"""``record_operation``'s compare-and-set, logged."""

RECORD_OPERATION_STAYING = Logged(
    OPERATIONS, RECORDED, lambda _: record_operation_update(PARAMS, NOW, stays=True)
)
"""``RECORD_OPERATION`` of a change whose ``to_state`` is its ``from_state``."""

RECORD_OPERATION_KEEPING_SCHEDULE = Logged(
    OPERATIONS, RECORDED, lambda _: record_operation_update(PARAMS, NOW, keeps_schedule=True)
)
"""``RECORD_OPERATION`` where the row's ``next_attempt_at`` and ``defer_reason`` already are
the change's: both are left out of the SET."""

RECORD_OPERATION_STAYING_KEEPING_SCHEDULE = Logged(
    OPERATIONS,
    RECORDED,
    lambda _: record_operation_update(PARAMS, NOW, stays=True, keeps_schedule=True),
)
"""``RECORD_OPERATION_STAYING`` and ``RECORD_OPERATION_KEEPING_SCHEDULE`` at once."""

RECORD_OPERATION_BY_SHAPE = {
    RecordShape(False, False): RECORD_OPERATION,
    RecordShape(True, False): RECORD_OPERATION_STAYING,
    RecordShape(False, True): RECORD_OPERATION_KEEPING_SCHEDULE,
    RecordShape(True, True): RECORD_OPERATION_STAYING_KEEPING_SCHEDULE,
}
"""``record_operation``'s statement of each ``record_steps`` shape."""


def _reject_reserved_marker(field: str, marker: str | None) -> None:
    if marker in RESERVED_SEND_MARKERS:
        raise ReservedValue(field, f"{marker!r} is reserved")


def claim_lease_values(claim: OperationClaim, now: int) -> dict[str, Any]:
    """The lease columns a claim asks for at the store's ``now`` (epoch ms): its token until
    ``lease_expires_at``, or until ``now`` + ``lease_ms`` (1,000 to 3,600,000); with no lease
    field at all (an enqueue) no token and a lease that lapsed at ``now`` - 1, as a claim
    that leasing refuses. Raises ``InvalidInput`` naming ``leaseToken`` (an expiry without
    a token), ``leaseMs`` (a token without an expiry), ``leaseExpiresAt`` (both an expiry
    and ``leaseMs``) or the malformed field."""
    if claim.lease_token is None:
        if claim.lease_expires_at is not None or claim.lease_ms is not None:
            raise InvalidInput("leaseToken", "a lease expiry needs a leaseToken")
        return {"lease_token": None, "lease_expires_at": now - 1}
    token = check.key("leaseToken", claim.lease_token)
    if claim.lease_expires_at is not None and claim.lease_ms is not None:
        raise InvalidInput("leaseExpiresAt", "give leaseExpiresAt or leaseMs, not both")
    if claim.lease_expires_at is not None:
        return {
            "lease_token": token,
            "lease_expires_at": check.lease_end("leaseExpiresAt", claim.lease_expires_at, now),
        }
    if claim.lease_ms is None:
        raise InvalidInput("leaseMs", "a leaseToken needs leaseMs or leaseExpiresAt")
    return {
        "lease_token": token,
        "lease_expires_at": now + check.lease_ms("leaseMs", claim.lease_ms),
    }


def claim_row(claim: OperationClaim, context: StoreContext) -> OperationRecord:
    """The row a fresh claim inserts, as stored (its JSON as text): what the claim leaves
    out takes the record's defaults (no result, no attempt, version 0, no schedule, no
    marker), created now by ``context``'s clock. Raises ``InvalidInput`` for a malformed
    field."""
    values: dict[str, Any] = {
        "caller_did": check.key("callerDID", claim.caller_did),
        "operation_id": check.key("operationID", claim.operation_id),
        "owner_did": check.key("ownerDID", claim.owner_did),
        "connector_name": check.key("connectorName", claim.connector_name),
        "model": check.key("model", claim.model),
        "op": check.key("op", claim.op),
        "account_key": check.key("accountKey", claim.account_key),
        "target": check.key("target", claim.target),
        "source_id": check.key("sourceID", claim.source_id),
        "deterministic_event_id": check.key("deterministicEventID", claim.deterministic_event_id),
        "payload_hash": check.key("payloadHash", claim.payload_hash),
        "reissue_intent": check.json_text("reissueIntent", claim.reissue_intent),
        "provider_etag": check.optional_key("providerEtag", claim.provider_etag),
        "document_id": check.optional_key("documentID", claim.document_id),
    }
    now = context.clock()
    values |= claim_lease_values(claim, now)
    return OperationRecord(
        **values,
        node_key=context.new_id(),
        incarnation=context.new_id(),
        state=ATTEMPTED,
        created_at=now,
        updated_at=now,
    )


def claim_outcome(claim: OperationClaim, stored: OperationRecord | None) -> ClaimResult:
    """The outcome of a claim whose insert found the key taken: ``exists`` with ``stored``
    when its envelope equals the claim's, ``conflict`` on any drift or when the row
    vanished in between (``stored`` None)."""
    if stored is None or not claim.matches(stored):
        return ClaimResult("conflict")
    return ClaimResult("exists", stored)


def claim_after_collection(claim: OperationClaim, tombstone: TombstoneRecord) -> ClaimResult:
    """The outcome of a claim whose key's operation was collected (``tombstone``):
    ``collected`` when the claim's envelope is the collected operation's (by
    ``envelope_digest``), ``conflict`` otherwise; either way nothing is written."""
    same = envelope_digest(claim) == tombstone.envelope_digest
    return ClaimResult("collected" if same else "conflict", tombstone=tombstone)


def prefixed(item: dict[str, Any]) -> dict[str, Any]:
    """An item's inputs as the parameters of a single write (``PARAMS``: ``p_<name>``)."""
    return {f"p_{name}": value for name, value in item.items()}


@dataclass(frozen=True, slots=True)
class SendMark:
    """The input of ``mark_send_started`` (seed ``markSendStarted``)."""

    caller_did: str
    operation_id: str
    lease_token: str
    marker: str


def mark_item(mark: SendMark) -> dict[str, Any]:
    """The inputs of ``mark_send_started_update`` for ``mark``, checked. Raises
    ``InvalidInput`` for a malformed field, ``ReservedValue`` for a reserved marker."""
    check.key("marker", mark.marker)
    _reject_reserved_marker("marker", mark.marker)
    return {
        "token": check.key("leaseToken", mark.lease_token),
        "marker": mark.marker,
        "caller": check.key("callerDID", mark.caller_did),
        "operation": check.key("operationID", mark.operation_id),
    }


def record_item(change: OperationTransition) -> dict[str, Any]:
    """The inputs of ``record_operation_update`` for ``change``, checked. Raises
    ``InvalidInput`` for ``to_state`` committed and any malformed field, ``ReservedValue``
    for a reserved ``send_marker`` or the ``kind`` ``CANCELLED_KIND``."""
    check.choice("fromState", change.from_state, OPERATION_STATES)
    if change.to_state == COMMITTED:
        raise InvalidInput("toState", "committed is reached only through finalizeOperation")
    check.choice("toState", change.to_state, OPERATION_STATES)
    check.optional_key("sendMarker", change.send_marker)
    _reject_reserved_marker("sendMarker", change.send_marker)
    if change.kind == CANCELLED_KIND:
        raise ReservedValue("kind", f"{CANCELLED_KIND!r} is reserved for cancelOperations")
    attempts: AttemptsMode = (
        "refund" if change.refund_attempt else "count" if change.count_attempt else "keep"
    )
    return {
        "to_state": change.to_state,
        "provider_etag": check.optional_key("providerEtag", change.provider_etag),
        "next_attempt_at": check.optional_epoch_ms("nextAttemptAt", change.next_attempt_at),
        "defer_reason": check.optional_choice("deferReason", change.defer_reason, DEFER_REASONS),
        "kind": check.optional_key("kind", change.kind),
        "http_status": None
        if change.http_status is None
        else check.count("httpStatus", change.http_status, minimum=100, maximum=599),
        "message": checked_message(change.error_message),
        "caller": check.key("callerDID", change.caller_did),
        "operation": check.key("operationID", change.operation_id),
        "from_state": change.from_state,
        "version": check.count("version", change.version),
        "token": check.key("leaseToken", change.lease_token),
        "marker": change.send_marker,
        "attempts": attempts,
    }


@dataclass(frozen=True, slots=True)
class Finalize:
    """The input of ``finalize_operation_and_arm_watch`` (seed
    ``finalizeOperationAndArmWatch``); ``due_at`` epoch ms, ``result_entity`` any JSON
    value. ``FinalizeOperationInput`` mirrors it."""

    caller_did: str
    operation_id: str
    version: int
    lease_token: str
    due_at: EpochMs
    result_entity: JsonValue = None
    provider_etag: str | None = None
    document_id: str | None = None


def finalize_item(final: Finalize) -> dict[str, Any]:
    """The inputs of ``finalize_update`` for ``final``, and its ``due_at``, checked. Raises
    ``InvalidInput`` for a malformed field."""
    item: dict[str, Any] = {
        "result_entity": None
        if final.result_entity is None
        else check.json_text("resultEntity", final.result_entity),
        "provider_etag": None
        if final.provider_etag is None
        else check.key("providerEtag", final.provider_etag),
        "document_id": None
        if final.document_id is None
        else check.key("documentID", final.document_id),
    }
    return item | {
        "due_at": check.epoch_ms("dueAt", final.due_at),
        "caller": check.key("callerDID", final.caller_did),
        "operation": check.key("operationID", final.operation_id),
        "version": check.count("version", final.version),
        "token": check.key("leaseToken", final.lease_token),
    }


class OperationsStore:
    """The operation methods of the seed's ``createOperationsMethods``.

    ``read_winner``: an injected ``ReadWinner``, or None for the
    ``kubun_connector_document_winner`` table, which a finalize reads in its watch's
    statement (``WatchesStore.open_generation_observing_winner``). ``finalize_in_one``:
    the finalize as one statement (``store.finalizes.FinalizeInOne``, given the item's
    inputs and parameters), where the backend and the winner reader allow it;
    ``claims_in_one``: a claim as one statement, where the backend allows it.
    """

    def __init__(
        self,
        context: StoreContext,
        watches: WatchesStore,
        read_winner: ReadWinner | None,
        finalize_in_one: FinalizeInOne | None = None,
        claims_in_one: InsertClaims | None = None,
    ) -> None:
        self._ctx = context
        self._db = context.db
        self._watches = watches
        self._read_winner = read_winner
        self._finalize_in_one = finalize_in_one
        self._claims_in_one = claims_in_one

    async def _update_prepared(
        self, statement: Prepared | Logged, params: dict[str, Any]
    ) -> OperationRecord | None:
        if isinstance(statement, Logged):
            row = await statement.run_one(self._db, params)
        else:
            row = await self._db.write_prepared(statement, params)
        return None if row is None else OperationRecord.from_row(row)

    async def claim_operation(self, claim: OperationClaim) -> ClaimResult:
        """Claim ``(caller_did, operation_id)`` once (seed ``claimOperation``).

        Inserts the operation if the key is free: ``claimed`` with the new record (state
        attempted, attempts 0, version 0, the claimant's lease). The lease is the claimant's
        only where ``lease_operations`` would lease the new row (its account neither
        paused nor throttled nor at its cap, no other attempted operation of its provider entity);
        otherwise the row has no token and a lease that lapsed at the store's now - 1, due
        at once, for ``lease_operations`` to hand out (``claim_lease``). Creates the
        account's row if absent, in the same round trip: on PostgreSQL one statement
        (``claims_in_one``, ``store.claims``: concurrent claims of one account write no
        row of it and still decide as if one after another), on SQLite one transaction
        (its write lock held throughout, its ``COMMIT`` with the insert,
        ``Database.last_statement``). Otherwise reads the stored
        one: ``exists`` when its envelope equals the claim's, ``conflict`` on any drift or
        when the row vanished in between. The stored row is never overwritten.
        A key whose operation was collected and whose tombstone is still kept
        (``store.tombstones``) is never claimed afresh: the insert skips it
        (``NOT_COLLECTED``), and the claim answers ``collected`` (the same envelope) or
        ``conflict`` (``claim_after_collection``); so does a claim whose key's row was
        collected between the insert and the read of the stored row. Raises
        ``InvalidInput`` for a malformed field, ``CasRetriesExhausted`` (PostgreSQL) when
        every run of the claim met a concurrent claim's commit.
        """
        fresh = claim_row(claim, self._ctx)
        digest = key_digest(fresh.caller_did, fresh.operation_id)
        if self._claims_in_one is not None:
            row = {name: getattr(fresh, name) for name in CLAIM_COLUMNS}
            inserted_now = await self._claims_in_one([row])
            return await self._claim_answer(
                claim, inserted_now.get((fresh.caller_did, fresh.operation_id)), digest
            )
        params = {f"p_{name}": getattr(fresh, name) for name in CLAIM_COLUMNS}
        params |= {"p_now": fresh.created_at, "p_key_digest": digest}
        async with self._db.write_transaction():
            await self._db.write_ahead(ENSURE_ACCOUNT, params)
            with self._db.last_statement():
                inserted = await CLAIM.run_one(self._db, params)
        record = None if inserted is None else OperationRecord.from_row(inserted)
        return await self._claim_answer(claim, record, digest)

    async def _claim_answer(
        self, claim: OperationClaim, inserted: OperationRecord | None, digest: bytes
    ) -> ClaimResult:
        """The claim's answer once its insert ran: ``claimed`` with the row it inserted, or
        (none) as the stored row or the key's tombstone says."""
        if inserted is not None:
            return ClaimResult("claimed", inserted)
        stored = await self.get_operation(claim.caller_did, claim.operation_id)
        if stored is None:
            # The key was collected, before the insert or between it and this read: its
            # tombstone says so.
            tombstone = await get_tombstone(self._db, digest)
            if tombstone is not None:
                return claim_after_collection(claim, tombstone)
        return claim_outcome(claim, stored)

    async def acquire_lease(
        self,
        caller_did: str,
        operation_id: str,
        token: str,
        expires_at: int | None = None,
        *,
        lease_ms: int | None = None,
    ) -> OperationRecord | None:
        """``take_lease``'s operation: the updated one, or None when refused or absent."""
        taken, _ = await self.take_lease(
            caller_did, operation_id, token, expires_at, lease_ms=lease_ms
        )
        return taken

    async def take_lease(
        self,
        caller_did: str,
        operation_id: str,
        token: str,
        expires_at: int | None = None,
        *,
        lease_ms: int | None = None,
    ) -> tuple[OperationRecord | None, bool]:
        """Take the lease of a live operation for ``token`` until ``expires_at`` (epoch ms,
        1,000 to 3,600,000 ms after the store's now) or for ``lease_ms`` from the store's now
        (1,000 to 3,600,000; ``validation.lease_until``: give one).

        Ports the seed's ``acquireLease`` with two deliberate changes (docs/worker-protocol.md,
        'Where this differs from @kubun/store-connector'): it applies only while the operation is
        attempted (nobody leases finished work), when the lease is free, expired (``lease_expires_at
        < now``) or already ``token``'s; and a takeover of another token's lapsed lease, when that
        run marked a send it never recorded, counts the abandoned attempt: attempts + 1, and the
        marker becomes ``ABANDONED_SEND_MARKER`` (no refund takes the count back, the next run's
        mark makes the attempt contested, and a takeover from a run that never marked counts
        nothing). Caps, throttles and one lease per entity bind it as they bind ``lease_operations``
        (``lease_guards.lease_allowed``): it is refused while the account is paused, throttled or at
        its cap (this operation's own lease not counted), when an older operation of its provider
        entity is still attempted, or another holds a live lease. One transaction that (PostgreSQL)
        first locks the account's row, as every path that takes a lease does. Returns the updated
        operation, or None when refused or absent, and whether the lease counted an abandoned
        send. Raises ``InvalidInput`` for a malformed field (``leaseExpiresAt`` or ``leaseMs``
        out of bounds).
        """
        check.key("token", token)
        now = self._ctx.clock()
        params = {
            "p_token": token,
            "p_expires_at": check.lease_until(
                "leaseExpiresAt", expires_at, "leaseMs", lease_ms, now
            ),
            "p_caller": check.key("callerDID", caller_did),
            "p_operation": check.key("operationID", operation_id),
        }
        async with self._db.write_transaction():
            if not self._db.dialect.one_writer:
                await self._db.fetch_prepared(LOCK_ACCOUNT_OF_OPERATION, params)
            prior = await self._db.fetch_prepared(PRIOR_LEASE, params | {"p_now": now})
            with self._db.last_statement():
                taken = await self._update_prepared(
                    ACQUIRE_LEASE,
                    params
                    | {
                        "p_now": now,
                        "p_prior_token": None if prior is None else prior["lease_token"],
                    },
                )
        return taken, taken is not None and prior is not None and bool(prior["taken_over"])

    async def renew_lease(
        self,
        caller_did: str,
        operation_id: str,
        token: str,
        expires_at: int | None = None,
        *,
        lease_ms: int | None = None,
    ) -> OperationRecord | None:
        """Move the lease's expiry to ``expires_at`` (epoch ms, 1,000 to 3,600,000 ms after
        the store's now) or to the store's now + ``lease_ms`` (``validation.lease_until``: give
        one), for its holder only.

        Ports the seed's ``renewLease`` with one deliberate change (docs/worker-protocol.md, 'Where
        this differs from @kubun/store-connector'): it applies only when ``token`` holds the lease,
        expired or not, in any state; the seed let any caller extend a lapsed lease it does not
        hold. A lapsed lease of an attempted operation is a new lease: renewed only where the
        leasing guard allows it (``live_or_allowed``: not paused, throttled or at its cap, no
        other live lease of its entity), and on PostgreSQL only after the account's row is
        locked, as ``acquire_lease`` does; a lease that has not lapsed is renewed by one
        statement that locks no account. Returns the updated operation, or None when refused or
        absent. Raises ``InvalidInput`` for a malformed field.
        """
        now = self._ctx.clock()
        check.key("token", token)
        params = {
            "p_expires_at": check.lease_until(
                "leaseExpiresAt", expires_at, "leaseMs", lease_ms, now
            ),
            "p_now": now,
            "p_caller": check.key("callerDID", caller_did),
            "p_operation": check.key("operationID", operation_id),
            "p_token": token,
        }
        if self._db.dialect.one_writer:
            return await self._update_prepared(RENEW_LEASE, params)
        renewed = await self._update_prepared(RENEW_LIVE_LEASE, params)
        if renewed is not None:
            return renewed
        async with self._db.write_transaction():
            await self._db.fetch_prepared(LOCK_ACCOUNT_OF_OPERATION, params)
            with self._db.last_statement():
                return await self._update_prepared(RENEW_LEASE, params)

    async def release_lease(
        self, caller_did: str, operation_id: str, token: str
    ) -> OperationRecord | None:
        """Drop the lease, for its holder only (seed ``releaseLease``).

        Applies when ``token`` holds the lease (expired or not, in any state) or when there
        is no lease. Unlike the seed, another token cannot release a lapsed lease: that
        would erase whose run lapsed, and the next ``acquire_lease`` could not count the
        abandoned attempt. Returns the updated operation, or None when refused or absent.
        Raises ``InvalidInput`` for a malformed field.
        """
        now = self._ctx.clock()
        check.key("token", token)
        params = {
            "p_token": token,
            "p_now": now,
            "p_caller": check.key("callerDID", caller_did),
            "p_operation": check.key("operationID", operation_id),
        }
        return await self._update_prepared(RELEASE_LEASE, params)

    async def get_operation(self, caller_did: str, operation_id: str) -> OperationRecord | None:
        """The operation at ``(caller_did, operation_id)``, or None (seed ``getOperation``)."""
        params = {
            "p_caller": check.key("callerDID", caller_did),
            "p_operation": check.key("operationID", operation_id),
        }
        row = await self._db.fetch_prepared(GET_OPERATION, params)
        return None if row is None else OperationRecord.from_row(row)

    async def list_tracked_operations(
        self,
        where: OperationFilter,
        *,
        after: OrderKey | None = None,
        limit: int | None = None,
        max_bytes: int | None = None,
        newest_first: bool = False,
    ) -> Measured[OperationRecord]:
        """Operations matching ``where``, ordered by created_at, caller, operation id (the
        reverse with ``newest_first``), each with its size (``store.sizes``).

        Ports the seed's ``listTrackedOperations`` and adds keyset paging: ``after`` is the
        order key of the last row already seen (the rows that follow it in the order read,
        so a page backwards reads the other order after its first row), ``limit`` the most
        rows returned, ``max_bytes`` the most bytes (the rows past it are never sent; the
        first row always is; ``cut`` says more follow). More than 500 document ids are
        queried in chunks and merged back into order. Raises ``InvalidInput`` for a
        malformed filter.
        """
        tracked = _tracked(where, self._ctx.clock())
        if tracked is None:
            return Measured()
        conditions, document_ids = tracked
        if limit is not None:
            check.count("limit", limit)
        order = [column.desc() for column in ORDER] if newest_first else list(ORDER)
        query = sa.select(op).where(*conditions).order_by(*order)
        if after is not None:
            key = sa.tuple_(*ORDER)
            seen = sa.tuple_(
                check.epoch_ms("after", after[0]),
                check.key("after", after[1]),
                check.key("after", after[2]),
            )
            query = query.where(key < seen if newest_first else key > seen)
        if limit is not None:
            query = query.limit(limit)
        sized = await fetch_in_chunks(
            self._db,
            query,
            op.c.document_id,
            document_ids,
            lambda row: (OperationRecord.from_row(row), row[SIZE]),
            lambda pair: pair[0].order_key,
            limit,
            lambda query: within_bytes(query, order, ROW_BYTES, max_bytes),
            descending=newest_first,
        )
        return measured(sized, max_bytes)

    async def count_tracked_operations(self, where: OperationFilter) -> int:
        """How many operations match ``where``: every one ``list_tracked_operations(where)``
        pages through; exact. One count (one a chunk of 500 document ids). Raises
        ``InvalidInput`` as ``list_tracked_operations``."""
        tracked = _tracked(where, self._ctx.clock())
        if tracked is None:
            return 0
        conditions, document_ids = tracked
        query = sa.select(sa.func.count().label("n")).select_from(op).where(*conditions)
        if document_ids is None:
            return int((await self._db.fetch_all(query))[0]["n"])
        counted = 0
        for chunk in chunked(document_ids):
            counted += int(
                (await self._db.fetch_all(query.where(op.c.document_id.in_(chunk))))[0]["n"]
            )
        return counted

    async def has_newer_operation_on_document(
        self, caller_did: str, operation_id: str, visible_to: str | None = None
    ) -> bool:
        """True when another operation on the same document sorts after this one.

        The order is created_at, then caller, then operation id (seed
        ``hasNewerOperationOnDocument``). An absent operation or a null document is False.
        ``visible_to`` (a DID) counts only operations that DID called or owns, this one
        included: a tenant learns nothing of other tenants' writes. Raises ``InvalidInput``
        for a malformed key.
        """
        this = op.alias("this")
        newer = op.alias("newer")
        query = (
            sa.select(newer.c.operation_id)
            .select_from(this.join(newer, newer.c.document_id == this.c.document_id))
            .where(
                this.c.caller_did == check.key("callerDID", caller_did),
                this.c.operation_id == check.key("operationID", operation_id),
                sa.tuple_(newer.c.created_at, newer.c.caller_did, newer.c.operation_id)
                > sa.tuple_(this.c.created_at, this.c.caller_did, this.c.operation_id),
            )
            .limit(1)
        )
        if visible_to is not None:
            did = check.key("visibleTo", visible_to)
            query = query.where(visible(this.c, did), visible(newer.c, did))
        return await self._db.fetch_one(query) is not None

    async def mark_send_started(
        self, caller_did: str, operation_id: str, lease_token: str, marker: str
    ) -> OperationRecord | None:
        """Mark the current attempt as sent by the run ``marker`` (seed ``markSendStarted``).

        Guarded by state attempted and ``lease_token``. If another run's marker is already
        there the attempt becomes contested: refundable by no run. Returns the updated
        operation, or None when refused or absent. Raises ``ReservedValue`` for the
        contested marker itself.
        """
        item = mark_item(SendMark(caller_did, operation_id, lease_token, marker))
        params = prefixed(item) | {"p_now": self._ctx.clock()}
        return await self._update_prepared(MARK_SEND_STARTED, params)

    async def defer_operation(
        self,
        caller_did: str,
        operation_id: str,
        next_attempt_at: int,
        reason: str | None = None,
        lease_token: str | None = None,
        error_message: str | None = None,
    ) -> OperationRecord | None:
        """Reschedule a live operation to ``next_attempt_at`` (epoch ms) (seed ``deferOperation``).

        Guarded by state attempted and a lease that is free, expired, or ``lease_token``'s
        when one is given. ``reason`` is ``offline``, ``auth`` or None; ``error_message``
        (at most 2,048 bytes of UTF-8, None clears it) becomes ``last_error`` and the
        event's message. Returns the updated operation, or None when refused or absent.
        Raises ``InvalidInput`` for a malformed field.
        """
        now = self._ctx.clock()
        params = {
            "p_next_attempt_at": check.epoch_ms("nextAttemptAt", next_attempt_at),
            "p_defer_reason": check.optional_choice("reason", reason, DEFER_REASONS),
            "p_now": now,
            "p_caller": check.key("callerDID", caller_did),
            "p_operation": check.key("operationID", operation_id),
            "p_token": check.optional_key("leaseToken", lease_token),
            "p_message": checked_message(error_message),
        }
        return await self._update_prepared(DEFER_OPERATION, params)

    async def record_operation(self, change: OperationTransition) -> OperationRecord | None:
        """Move an operation from ``from_state`` to ``to_state`` (seed ``recordOperation``).

        CAS on state, version and lease token; version +1; provider etag, next attempt,
        defer reason, kind and HTTP status take the given values (None clears them). A
        terminal ``from_state`` never applies: nothing leaves a terminal state. The
        statements, and their order, are ``record_steps``' (one transaction).
        Returns the updated operation, or None when a guard refused or it is absent.
        Raises ``InvalidInput`` for ``to_state`` committed (finalize reaches it) and
        ``ReservedValue`` for the contested ``send_marker``.
        """
        item = record_item(change)
        if item["from_state"] in TERMINAL_STATES:
            return None
        params = prefixed(item) | {"p_now": self._ctx.clock()}
        first, *rest = record_steps([item], self._db.dialect.one_writer)
        if not rest:
            return await self._update_prepared(RECORD_OPERATION_BY_SHAPE[first], params)
        async with self._db.write_transaction():
            for shape in [first, *rest]:
                recorded = await self._update_prepared(RECORD_OPERATION_BY_SHAPE[shape], params)
                if recorded is not None:
                    return recorded
        return None

    async def finalize_operation_and_arm_watch(self, final: Finalize) -> Finalization | None:
        """Commit the live operation at ``final``'s key and arm its watch, atomically: one
        statement in autocommit where ``finalize_in_one`` is given, else one transaction.

        CAS from attempted to committed on ``final.version`` and ``final.lease_token``:
        version +1, one attempt counted, ``result_entity`` stored, ``provider_etag`` and
        ``document_id`` replaced when given, send marker, next attempt and defer reason
        cleared, the lease kept. Then the watch of the operation's identity is created or
        opens its next generation, due at ``due_at`` (epoch ms), observing the document's
        current winner (with the default reader, read in the watch's statement). Returns both
        records, or None (and writes nothing) when the CAS refused or the operation is absent.
        Ports ``finalizeOperationAndArmWatch``. Raises ``InvalidInput`` for a malformed field.
        """
        item = finalize_item(final)
        params = prefixed(item)
        if self._finalize_in_one is not None:
            return await self._finalize_in_one(item, params | {"p_now": self._ctx.clock()})
        async with self._db.write_transaction():
            finalize = FINALIZE if sets_documents([item]) else FINALIZE_KEEPING_DOCUMENT
            row = await finalize.run_one(self._db, params | {"p_now": self._ctx.clock()})
            if row is None:
                return None
            committed = OperationRecord.from_row(row)
            if self._read_winner is None:
                with self._db.last_statement():
                    armed = await self._watches.open_generation_observing_winner(
                        committed.identity, document_id=committed.document_id, due_at=final.due_at
                    )
            else:
                winner = await self._read_winner(committed.document_id)
                with self._db.last_statement():
                    armed = await self._watches.open_generation(
                        committed.identity,
                        document_id=committed.document_id,
                        observed_winner=winner,
                        due_at=final.due_at,
                    )
        return Finalization(committed, armed)

    async def list_operations(
        self, keys: Sequence[tuple[str, str]], *, max_bytes: int | None = None
    ) -> Measured[OperationRecord]:
        """The operations at ``(caller_did, operation_id)`` of ``keys`` that exist, in key
        order, each with its size; one statement per 100 keys (for DataLoaders).
        ``max_bytes``: the most bytes loaded (``store.sizes``; ``cut`` says operations of
        keys after the last one kept were left out). Raises ``InvalidInput`` for a malformed
        key."""
        checked = sorted(
            (check.key("callerDID", caller), check.key("operationID", operation))
            for caller, operation in keys
        )
        queries = (
            sa.select(op).where(sa.or_(*(by_key(*key) for key in chunk))).order_by(*KEY_ORDER)
            for chunk in chunked(checked, 100)
        )
        return await fetch_measured(
            self._db, queries, KEY_ORDER, ROW_BYTES, OperationRecord.from_row, max_bytes
        )

    async def list_operations_of_watches(
        self, identities: Sequence[WatchIdentity], *, max_bytes: int | None = None
    ) -> Measured[OperationRecord]:
        """Every operation whose watch is one of ``identities`` (same owner, connector,
        model, account and source), by identity and then in ``listTrackedOperations``
        order, each with its size; one statement per 100 identities (for DataLoaders).
        ``max_bytes``: the most bytes loaded (``store.sizes``; ``cut`` says operations were
        left out after the last one kept)."""
        queries = (
            sa.select(op)
            .where(sa.or_(*(by_identity(identity, op) for identity in chunk)))
            .order_by(*WATCH_ORDER)
            for chunk in chunked(sorted(identities, key=lambda identity: identity.parts), 100)
        )
        return await fetch_measured(
            self._db, queries, WATCH_ORDER, ROW_BYTES, OperationRecord.from_row, max_bytes
        )
