"""Projection watches: one verify/repair state machine per provider entity (seed
projection-watches.js, every method of it, plus a due list, filtered pages and ingress).

Single-row guards are one conditional ``UPDATE … RETURNING``: they applied when a row came
back, and return the updated record or None where the seed returns a boolean.
``arm_watch``, ``record_verification`` and ``record_ingress`` are decisions over several
reads; each runs in one write transaction that re-reads everything, and is run again from
the start (up to ``CAS_ATTEMPTS`` times) when its version-guarded write did not apply.

Lock order, to keep PostgreSQL free of deadlocks: the document's winner row first (a share
lock through ``read_winner``, or the ingress upsert), then the watch row (``FOR UPDATE``),
as finalize does. SQLite's ``BEGIN IMMEDIATE`` takes the whole write lock up front.
"""

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import sqlalchemy as sa

from store import events
from store import lease_guards as guards
from store import validation as check
from store.context import ReadWinner, StoreContext
from store.database import Row, chunked, fetch_in_chunks
from store.errors import CasRetriesExhausted, InvalidInput, ReservedValue
from store.events import WATCHES, Logged, LoggedItems, checked_message, run_logged
from store.items import Inputs, ItemStatement, each_item, refuse_repeats
from store.records import (
    ATTEMPTED,
    DEFER_REASONS,
    PENDING_VERIFICATION,
    REPAIR_FAILED,
    VERIFICATION_STATUSES,
    VERIFIED,
    WATCH_FIELDS,
    WATCH_IDENTITY,
    WatchIdentity,
    WatchRecord,
)
from store.sizes import (
    SIZE,
    Measured,
    fetch_measured,
    measured,
    row_bytes,
    sized_rows,
    within_bytes,
)
from store.statements import Prepared, param
from store.tables import operation as op
from store.tables import projection_watch as watch
from store.winners import RECORD_WINNER, winner_of, winner_params

ReadWinners = Callable[[Sequence[str]], Awaitable[dict[str, str]]]
"""The current winner digest of each of these documents (those that have one), read
inside the caller's transaction as ``ReadWinner`` is (share-locked on PostgreSQL)."""
CAS_ATTEMPTS = 6
"""How many transactions a multi-statement decision runs before ``CasRetriesExhausted``
(the seed's first try and five retries)."""
DEFAULT_DUE_LIMIT = 100
MAX_DUE_LIMIT = 500

ArmReason = Literal["ingress", "manual"]
ArmOutcome = Literal["opened", "coalesced", "noop"]
VerificationOutcome = Literal[
    "verified", "pending", "repair_failed", "stale-generation", "stale-claim"
]
Decision = Literal["open", "coalesce", "noop"]
ARM_REASONS = frozenset({"ingress", "manual"})
RESERVED_ARM_REASON = "finalize"
WatchOrderKey = tuple[str, str, str, str, str]


@dataclass(frozen=True, slots=True)
class ArmResult:
    """What ``arm_watch`` did, and the watch as it now stands (None: no watch)."""

    outcome: ArmOutcome
    watch: WatchRecord | None


@dataclass(frozen=True, slots=True)
class VerificationResult:
    """What ``record_verification`` did, and the watch as it now stands (None: no watch)."""

    outcome: VerificationOutcome
    watch: WatchRecord | None


@dataclass(frozen=True, slots=True)
class Resumed:
    """How many operations and watches a resume made due."""

    operations: int
    watches: int


@dataclass(frozen=True, slots=True)
class WatchFilter:
    """The filter of ``list_watches_matching`` and of ``rearm_watches``
    (``store.operator``); every field given must match.

    ``document_ids``: an empty list matches nothing. ``source_id``: the provider entity's
    id (with the owner, connector, model and account, one watch). ``status``: a verification status
    (``pending_verification``, ``verified``, ``repair_failed``). ``due_before`` (epoch ms):
    watches whose ``next_attempt_at`` is set and earlier. ``updated_after`` and
    ``updated_before`` (epoch ms) bound ``updated_at``: at or after the one, strictly
    before the other.
    """

    document_ids: Sequence[str] | None = None
    owner_did: str | None = None
    connector_name: str | None = None
    model: str | None = None
    status: str | None = None
    due_before: int | None = None
    account_key: str | None = None
    updated_after: int | None = None
    updated_before: int | None = None
    source_id: str | None = None


def watch_filter_conditions(where: WatchFilter) -> list[sa.ColumnElement[bool]]:
    """The conditions of ``where`` on watches, checked, but its ``document_ids`` (each
    caller chunks those as it must). Raises ``InvalidInput`` naming the first malformed
    field, and ``updatedBefore`` when it is earlier than ``updatedAfter``."""
    keys = {
        "ownerDID": (watch.c.owner_did, where.owner_did),
        "connectorName": (watch.c.connector_name, where.connector_name),
        "model": (watch.c.model, where.model),
        "accountKey": (watch.c.account_key, where.account_key),
        "sourceID": (watch.c.source_id, where.source_id),
    }
    conditions = [
        column == check.key(field, value)
        for field, (column, value) in keys.items()
        if value is not None
    ]
    if where.status is not None:
        status = check.choice("status", where.status, VERIFICATION_STATUSES)
        conditions.append(watch.c.verification_status == status)
    if where.due_before is not None:
        due_before = check.epoch_ms("dueBefore", where.due_before)
        conditions += [watch.c.next_attempt_at.is_not(None), watch.c.next_attempt_at < due_before]
    after = check.optional_epoch_ms("updatedAfter", where.updated_after)
    before = check.optional_epoch_ms("updatedBefore", where.updated_before)
    if after is not None and before is not None and before < after:
        raise InvalidInput("updatedBefore", "must not be earlier than updatedAfter")
    if after is not None:
        conditions.append(watch.c.updated_at >= after)
    if before is not None:
        conditions.append(watch.c.updated_at < before)
    return conditions


def _record(row: Row | None) -> WatchRecord | None:
    return None if row is None else WatchRecord.from_row(row)


class _Unsettled(Exception):
    """A version-guarded write of one attempt did not apply: roll back and run again."""


def ingress_gate(
    triggering_winner: str | None,
    current_winner: str | None,
    verified_digest: str | None,
    observed_digest: str | None,
) -> bool:
    """True when an ingress may arm: the triggering winner is the document's current winner
    and differs from both watermarks (verified and observed). The seed's in-CAS re-check."""
    return (
        triggering_winner is not None
        and triggering_winner == current_winner
        and triggering_winner != verified_digest
        and triggering_winner != observed_digest
    )


def arm_decision(
    reason: str, stored: WatchRecord, current_winner: str | None, triggering_winner: str | None
) -> Decision:
    """What ``arm_watch`` does to ``stored``: ``manual`` always opens a generation; an
    ingress that passes ``ingress_gate`` opens one from verified or repair_failed and
    coalesces into a pending one; anything else is a noop."""
    if reason == "manual":
        return "open"
    passes = ingress_gate(
        triggering_winner,
        current_winner,
        stored.verified_state_digest,
        stored.observed_winner_digest,
    )
    if not passes:
        return "noop"
    if stored.verification_status in (VERIFIED, REPAIR_FAILED):
        return "open"
    return "coalesce"


def coalesce_due(next_attempt_at: int | None, due_at: int) -> int:
    """The earlier of a pending watch's due time and a new one (epoch ms), computed here
    because SQL's LEAST/MIN differ between backends."""
    return due_at if next_attempt_at is None else min(next_attempt_at, due_at)


def verification_decision(
    stored: WatchRecord | None,
    *,
    generation: int,
    claimed_until: int | None,
    fetched_digest: str | None,
    current_winner: str | None,
    max_attempts: int,
) -> VerificationOutcome:
    """The outcome of one verification of ``stored`` (seed ``recordVerification``).

    No watch, or another generation: ``stale-generation`` (checked first). A
    ``claimed_until`` given and different from the stored claim: ``stale-claim``. The
    fetched digest equal to the current winner: ``verified``. Otherwise one more attempt:
    ``repair_failed`` when it reaches ``max_attempts``, else ``pending``.
    """
    if stored is None or stored.repair_generation != generation:
        return "stale-generation"
    if claimed_until is not None and stored.claimed_until != claimed_until:
        return "stale-claim"
    if fetched_digest is not None and fetched_digest == current_winner:
        return "verified"
    if stored.verification_attempts + 1 >= max_attempts:
        return "repair_failed"
    return "pending"


def by_identity(identity: WatchIdentity, table: sa.Table = watch) -> sa.ColumnElement[bool]:
    """The WHERE clause naming one watch (or, over ``operation``, the operations whose
    watch it is); raises ``InvalidInput`` for a malformed part."""
    return sa.and_(
        table.c.owner_did == check.key("ownerDID", identity.owner_did),
        table.c.connector_name == check.key("connectorName", identity.connector_name),
        table.c.model == check.key("model", identity.model),
        table.c.account_key == check.key("accountKey", identity.account_key),
        table.c.source_id == check.key("sourceID", identity.source_id),
    )


IDENTITY_COLUMNS = tuple(watch.c[name] for name in WATCH_IDENTITY)
"""The identity's columns, in key order: the order of watch lists and their cursors."""
ROW_BYTES = row_bytes(watch.c)
"""A watch's size in bytes (``store.sizes``)."""


def opened_generation(
    stored: WatchRecord, current_winner: str | None, due_at: int
) -> dict[str, Any]:
    """The columns of a new repair generation: pending, 0 attempts, observing the current
    winner, due at ``due_at``, no claim, no defer reason; the verified digest kept."""
    return {
        "repair_generation": stored.repair_generation + 1,
        "verification_status": PENDING_VERIFICATION,
        "verification_attempts": 0,
        "observed_winner_digest": current_winner,
        "next_attempt_at": due_at,
        "claimed_until": None,
        "defer_reason": None,
    }


def claim_lapsed(now: Any, table: Any = watch) -> sa.ColumnElement[bool]:
    """The watch's claim is absent or lapsed at ``now`` (``claimed_until <= now``; of
    ``table``: the watches table or an alias of it)."""
    return sa.or_(table.c.claimed_until.is_(None), table.c.claimed_until <= now)


def waiting_watch(now: Any) -> sa.ColumnElement[bool]:
    """``due_watch`` but the pause guard: pending verification, due (``next_attempt_at``
    set and at most ``now``), its claim absent or lapsed; its own columns only, so an index
    walk in ``next_attempt_at`` order can apply it row by row."""
    return sa.and_(
        # A literal, so the planner can match the partial index on pending watches.
        watch.c.verification_status == sa.literal_column(f"'{PENDING_VERIFICATION}'"),
        watch.c.next_attempt_at.is_not(None),
        watch.c.next_attempt_at <= now,
        claim_lapsed(now),
    )


def due_watch(now: Any) -> sa.ColumnElement[bool]:
    """A watch a verifier may claim at ``now`` (epoch ms, a value or a ``param``):
    ``waiting_watch``, and its account not paused (``lease_guards.unpaused``)."""
    return sa.and_(guards.unpaused(watch.c), waiting_watch(now))


OPEN_GENERATION_COLUMNS = WATCH_FIELDS
"""The columns ``open_generation`` inserts (every one), each from the parameter
``p_<column>``."""


def open_generation_upsert(insert: Any) -> Any:
    """``insert`` (an INSERT of whole watch rows, by values or from a select) as the upsert
    that opens a generation: a new watch as inserted, or, on the identity of one that
    exists, its next generation from the inserted row's values (``verified_state_digest``
    kept), returning the row."""
    fresh = insert.excluded
    return insert.on_conflict_do_update(
        index_elements=list(watch.primary_key.columns),
        set_={
            "document_id": fresh.document_id,
            "repair_generation": watch.c.repair_generation + 1,
            "verification_status": fresh.verification_status,
            "verification_attempts": fresh.verification_attempts,
            "observed_winner_digest": fresh.observed_winner_digest,
            "next_attempt_at": fresh.next_attempt_at,
            "claimed_until": None,
            "defer_reason": None,
            "version": watch.c.version + 1,
            "updated_at": fresh.updated_at,
        },
    ).returning(watch)


def opening_row(
    identity: WatchIdentity,
    *,
    document_id: str | None,
    observed_winner: str | None,
    due_at: int,
    now: int,
) -> dict[str, Any]:
    """The row ``open_generation_upsert`` inserts for a watch at generation 1 (the values
    a new generation takes): pending verification, due at ``due_at`` (epoch ms), 0
    attempts, no claim, no defer reason. Raises ``InvalidInput`` for a bad ``due_at``."""
    return dict(zip(WATCH_IDENTITY, identity.parts, strict=True)) | {
        "document_id": document_id,
        "repair_generation": 1,
        "verification_status": PENDING_VERIFICATION,
        "verification_attempts": 0,
        "observed_winner_digest": observed_winner,
        "verified_state_digest": None,
        "next_attempt_at": check.epoch_ms("dueAt", due_at),
        "claimed_until": None,
        "defer_reason": None,
        "last_error": None,
        "version": 0,
        "created_at": now,
        "updated_at": now,
    }


def _open_generation(insert: Any) -> Any:
    return open_generation_upsert(
        insert(watch).values(
            {name: param(f"p_{name}", watch.c[name]) for name in OPEN_GENERATION_COLUMNS}
        )
    )


OPEN_GENERATION = Logged(WATCHES, events.OPENED, _open_generation)
"""``open_generation``'s upsert (the finalize half), logged."""


def _open_generation_observing(insert: Any) -> Any:
    values: dict[str, Any] = {
        name: param(f"p_{name}", watch.c[name]) for name in OPEN_GENERATION_COLUMNS
    }
    values["observed_winner_digest"] = winner_of(values["document_id"]).scalar_subquery()
    return open_generation_upsert(insert(watch).values(values))


OPEN_GENERATION_OBSERVING = Logged(WATCHES, events.OPENED, _open_generation_observing)
"""``OPEN_GENERATION`` whose observed winner is read in the statement (``winner_of`` of
``p_document_id``: share-locked on PostgreSQL before the upsert locks the watch row, the
order finalize and ingress take them)."""

IDENTITY = sa.and_(*(column == param(f"p_{column.name}", column) for column in IDENTITY_COLUMNS))
"""One watch, its identity as the parameters ``p_owner_did`` … ``p_source_id``."""
GENERATION = param("p_generation", watch.c.repair_generation)
NOW = param("p_now", watch.c.updated_at)

GET_WATCH = Prepared(lambda _: sa.select(watch).where(IDENTITY))
"""``get_watch``'s read."""


def claim_values(until: Any, now: Any) -> dict[str, Any]:
    """The columns a verifier's claim until ``until`` writes at ``now`` (epoch ms, values or
    ``param``s): a takeover of a lapsed claim counts the verification attempt it abandoned.
    ``claim_watch_attempt`` and ``claim_watches`` both write these."""
    return {
        "claimed_until": until,
        "verification_attempts": sa.case(
            (watch.c.claimed_until.is_not(None), watch.c.verification_attempts + 1),
            else_=watch.c.verification_attempts,
        ),
        "version": watch.c.version + 1,
        "updated_at": now,
    }


CLAIM_WATCH = Logged(
    WATCHES,
    events.CLAIMED,
    lambda _: (
        sa.update(watch)
        .where(IDENTITY, watch.c.repair_generation == GENERATION, due_watch(param("p_due", NOW)))
        .values(claim_values(param("p_until", watch.c.claimed_until), NOW))
        .returning(watch)
    ),
)
"""``claim_watch_attempt``'s guarded update: the ``due_watch`` guard at ``p_due``, logged."""

DEFER_WATCH = Logged(
    WATCHES,
    events.DEFERRED,
    lambda _: (
        sa.update(watch)
        .where(
            IDENTITY,
            watch.c.verification_status == PENDING_VERIFICATION,
            watch.c.repair_generation == GENERATION,
            watch.c.claimed_until == param("p_claimed_until", watch.c.claimed_until),
        )
        .values(
            next_attempt_at=param("p_next_attempt_at", watch.c.next_attempt_at),
            defer_reason=param("p_defer_reason", watch.c.defer_reason),
            claimed_until=None,
            version=watch.c.version + 1,
            updated_at=NOW,
        )
        .returning(watch)
    ),
)
"""``defer_watch``'s guarded update, for the claim's holder, logged."""


WATCH_DOCUMENT = Prepared(lambda _: sa.select(watch.c.document_id).where(IDENTITY))
"""The document a watch names (read before its winner, then the watch is locked)."""
LOCK_WATCH = Prepared(lambda _: sa.select(watch).where(IDENTITY).with_for_update())
"""One watch, locked for the rest of the transaction (``FOR UPDATE`` on PostgreSQL)."""
WATCH_BY_DOCUMENT = Prepared(
    lambda _: (
        sa.select(watch)
        .where(watch.c.document_id == param("p_document_id", watch.c.document_id))
        .order_by(*IDENTITY_COLUMNS)
        .limit(1)
    )
)
"""``get_watch_by_document``'s read: the first watch naming the document, in identity order."""


LOCK_WATCHES_OF_DOCUMENT = Prepared(
    lambda _: (
        sa.select(watch)
        .where(watch.c.document_id == param("p_document_id", watch.c.document_id))
        .order_by(*IDENTITY_COLUMNS)
        .with_for_update()
    )
)
"""Every watch naming a document, locked in identity order (``record_ingress``)."""


def identity_params(identity: WatchIdentity) -> dict[str, str]:
    """The parameters of ``IDENTITY``; raises ``InvalidInput`` for a malformed part."""
    return {
        "p_owner_did": check.key("ownerDID", identity.owner_did),
        "p_connector_name": check.key("connectorName", identity.connector_name),
        "p_model": check.key("model", identity.model),
        "p_account_key": check.key("accountKey", identity.account_key),
        "p_source_id": check.key("sourceID", identity.source_id),
    }


def watch_item(stored: WatchRecord) -> dict[str, Any]:
    """The identity parts and version of ``stored``: what ``unchanged_watch`` compares."""
    return dict(zip(WATCH_IDENTITY, stored.identity.parts, strict=True)) | {
        "version": stored.version
    }


def unchanged_watch(item: Inputs) -> sa.ColumnElement[bool]:
    """The watch at the item's identity parts (``owner_did`` … ``source_id``), still at the
    item's ``version``: the compare-and-set of a decision written over a watch it read."""
    return sa.and_(
        *(watch.c[name] == item[name] for name in WATCH_IDENTITY),
        watch.c.version == item["version"],
    )


def verification_values(
    outcome: VerificationOutcome,
    stored: WatchRecord,
    current_winner: str | None,
    due_at: int,
    message: str | None = None,
) -> dict[str, Any]:
    """The columns a verification with ``outcome`` (``verified``, ``repair_failed`` or
    ``pending``) writes over ``stored``: each drops the claim and the defer reason and
    keeps ``message`` (the verifier's error message, None clears it) as ``last_error``;
    verified sets both watermarks to the current winner; repair_failed counts the attempt
    and observes the current winner; pending counts the attempt, due again at ``due_at``
    (epoch ms)."""
    settled: dict[str, Any] = {
        "claimed_until": None,
        "defer_reason": None,
        "last_error": message,
    }
    if outcome == "verified":
        return settled | {
            "verification_status": VERIFIED,
            "observed_winner_digest": current_winner,
            "verified_state_digest": current_winner,
            "next_attempt_at": None,
        }
    if outcome == "repair_failed":
        return settled | {
            "verification_status": REPAIR_FAILED,
            "observed_winner_digest": current_winner,
            "verification_attempts": stored.verification_attempts + 1,
            "next_attempt_at": None,
        }
    return settled | {
        "verification_attempts": stored.verification_attempts + 1,
        "next_attempt_at": due_at,
    }


IDENTITY_ITEM = {name: watch.c[name] for name in WATCH_IDENTITY}
WATCH_DOCUMENTS = ItemStatement(
    IDENTITY_ITEM,
    lambda _, rows: sa.select(*IDENTITY_COLUMNS, watch.c.document_id).select_from(
        watch.join(rows, sa.and_(*(watch.c[name] == rows.c[name] for name in WATCH_IDENTITY)))
    ),
)
"""The documents the items' watches name (read before their winners, then the watches
are locked), as ``WATCH_DOCUMENT`` for many."""
LOCK_WATCHES = ItemStatement(
    IDENTITY_ITEM,
    lambda _, rows: (
        sa.select(watch)
        .select_from(
            watch.join(rows, sa.and_(*(watch.c[name] == rows.c[name] for name in WATCH_IDENTITY)))
        )
        .order_by(*IDENTITY_COLUMNS)
        .with_for_update(of=watch)
    ),
)
"""The items' watches, locked in identity order, as ``LOCK_WATCH`` for many."""
VERIFIED_COLUMNS = (
    "verification_status",
    "verification_attempts",
    "observed_winner_digest",
    "verified_state_digest",
    "next_attempt_at",
    "last_error",
)
WRITE_VERIFICATIONS = LoggedItems(
    WATCHES,
    events.VERIFICATION_ACTION,
    IDENTITY_ITEM
    | {"version": watch.c.version}
    | {name: watch.c[name] for name in VERIFIED_COLUMNS},
    lambda _, rows: (
        sa.update(watch)
        .where(unchanged_watch(rows.c))
        .values(
            {name: rows.c[name] for name in VERIFIED_COLUMNS}
            | {
                "claimed_until": None,
                "defer_reason": None,
                "version": watch.c.version + 1,
                "updated_at": NOW,
            }
        )
        .returning(watch)
    ),
)
"""Each item's verification written over its watch, guarded by ``unchanged_watch``, logged
by the status it left."""


VERIFICATION_ACTIONS: dict[VerificationOutcome, str] = {
    "verified": events.VERIFIED,
    "pending": events.PENDING,
    "repair_failed": events.REPAIR_FAILED,
}
"""The event of each outcome that writes (``store.events.VERIFICATION_ACTION`` decides the
same in SQL, by the status the write left)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Verification:
    """The input of ``record_verification`` (seed ``recordVerification``): what a verifier
    fetched (``fetched_digest``) for ``generation`` of the watch at ``identity``, under its
    claim ``claimed_until`` (None: no claim gate); ``due_at`` epoch ms."""

    identity: WatchIdentity
    generation: int
    fetched_digest: str | None
    max_attempts: int
    due_at: int
    claimed_until: int | None = None
    error_message: str | None = None
    """The verifier's error message (at most 2,048 bytes of UTF-8): the watch's
    ``last_error`` and the event's message."""


def verification_key(verification: Verification) -> dict[str, str]:
    """The checked ``identity_params`` of ``verification``'s watch, after its other fields
    are checked. Raises ``InvalidInput`` for a bad field (``maxAttempts`` below 1
    included, an ``errorMessage`` past 2,048 bytes of UTF-8)."""
    check.count("generation", verification.generation)
    checked_message(verification.error_message)
    check.optional_key("fetchedDigest", verification.fetched_digest)
    check.count("maxAttempts", verification.max_attempts, minimum=1)
    check.epoch_ms("dueAt", verification.due_at)
    check.optional_epoch_ms("claimedUntil", verification.claimed_until)
    return identity_params(verification.identity)


class WatchesStore:
    """The watch methods of the seed's ``createProjectionWatchesMethods``, the due list,
    filtered pages, ingress, and the finalize half of ``finalizeOperationAndArmWatch``.

    ``read_winner`` is awaited inside the deciding transactions (see ``ReadWinner``);
    ``record_winner`` sets a document's winner (``WinnersStore.record_winner``).
    """

    def __init__(
        self,
        context: StoreContext,
        read_winner: ReadWinner,
    ) -> None:
        self._ctx = context
        self._db = context.db
        self._read_winner = read_winner

    async def get_watch(self, identity: WatchIdentity) -> WatchRecord | None:
        """The watch of ``identity``, or None (seed ``getWatch``)."""
        row = await self._db.fetch_prepared(GET_WATCH, identity_params(identity))
        return None if row is None else WatchRecord.from_row(row)

    async def get_watch_by_document(self, document_id: str) -> WatchRecord | None:
        """A watch naming ``document_id``, or None (seed ``getWatchByDocument``).

        When several watches name the document (two connectors), the first in identity
        order. Raises ``InvalidInput`` for a malformed ``documentID``.
        """
        params = {"p_document_id": check.key("documentID", document_id)}
        return _record(await self._db.fetch_prepared(WATCH_BY_DOCUMENT, params))

    async def list_watches_by_documents(self, document_ids: Sequence[str]) -> list[WatchRecord]:
        """Every watch naming one of ``document_ids`` (seed ``listWatchesByDocuments``).

        Ids are queried 500 at a time; the result is in identity order. Raises
        ``InvalidInput`` for a malformed id.
        """
        ids = list(dict.fromkeys(check.key_list("documentIDs", document_ids)))
        found: list[WatchRecord] = []
        for chunk in chunked(ids):
            rows = await self._db.fetch_all(sa.select(watch).where(watch.c.document_id.in_(chunk)))
            found.extend(WatchRecord.from_row(row) for row in rows)
        found.sort(key=lambda record: record.order_key)
        return found

    async def list_watches(
        self, identities: Sequence[WatchIdentity], *, max_bytes: int | None = None
    ) -> Measured[WatchRecord]:
        """The watches of ``identities`` that exist, in identity order, each with its size;
        one statement per 100 identities (for DataLoaders). ``max_bytes``: the most bytes
        loaded (``store.sizes``; ``cut`` says watches after the last one kept were left
        out)."""
        queries = (
            sa.select(watch)
            .where(sa.or_(*(by_identity(identity) for identity in chunk)))
            .order_by(*IDENTITY_COLUMNS)
            for chunk in chunked(sorted(identities, key=lambda identity: identity.parts), 100)
        )
        return await fetch_measured(
            self._db, queries, IDENTITY_COLUMNS, ROW_BYTES, WatchRecord.from_row, max_bytes
        )

    async def list_watches_matching(
        self,
        where: WatchFilter,
        *,
        after: WatchOrderKey | None = None,
        limit: int | None = None,
        max_bytes: int | None = None,
    ) -> Measured[WatchRecord]:
        """Watches matching ``where``, in identity order, by keyset pages, each with its size.

        ``after``: the identity (five parts) of the last watch already seen; ``limit``: the
        most rows returned; ``max_bytes`` the most bytes (``store.sizes``: the rows past it
        are never sent, the first row always is, ``cut`` says more follow). More than 500
        document ids are queried in chunks and merged back into order. Raises
        ``InvalidInput`` for a malformed filter.
        """
        document_ids = (
            None
            if where.document_ids is None
            else list(dict.fromkeys(check.key_list("documentIDs", where.document_ids)))
        )
        if document_ids == []:
            return Measured()
        if limit is not None:
            check.count("limit", limit)
        query = sa.select(watch).where(*watch_filter_conditions(where)).order_by(*IDENTITY_COLUMNS)
        if after is not None:
            if len(after) != len(IDENTITY_COLUMNS):
                raise InvalidInput("after", "must name a watch identity")
            key = tuple(check.key("after", part) for part in after)
            query = query.where(sa.tuple_(*IDENTITY_COLUMNS) > sa.tuple_(*key))
        if limit is not None:
            query = query.limit(limit)
        sized = await fetch_in_chunks(
            self._db,
            query,
            watch.c.document_id,
            document_ids,
            lambda row: (WatchRecord.from_row(row), row[SIZE]),
            lambda pair: pair[0].order_key,
            limit,
            lambda query: within_bytes(query, IDENTITY_COLUMNS, ROW_BYTES, max_bytes),
        )
        return measured(sized, max_bytes)

    async def list_due_watches(
        self,
        now: int,
        limit: int = DEFAULT_DUE_LIMIT,
        connector_name: str | None = None,
        *,
        max_bytes: int | None = None,
    ) -> Measured[WatchRecord]:
        """Watches a verifier may claim at ``now`` (epoch ms), each with its size.

        Pending verification, ``next_attempt_at`` at most ``now``, the claim absent or
        lapsed (``claimed_until <= now``) and the account not paused: the guard
        ``claim_watch_attempt`` applies (``due_watch``).
        Ordered by ``next_attempt_at``, then identity. ``limit`` is 1 to 500; ``max_bytes``
        the most bytes (``store.sizes``: fewer watches, the first always). Raises
        ``InvalidInput`` for a bad ``now``, ``limit`` or ``connectorName``.
        """
        check.epoch_ms("now", now)
        check.count("limit", limit, minimum=1, maximum=MAX_DUE_LIMIT)
        order = (watch.c.next_attempt_at, *IDENTITY_COLUMNS)
        query = sa.select(watch).where(due_watch(now)).order_by(*order).limit(limit)
        if connector_name is not None:
            query = query.where(
                watch.c.connector_name == check.key("connectorName", connector_name)
            )
        rows = await self._db.fetch_all(within_bytes(query, order, ROW_BYTES, max_bytes))
        return measured(sized_rows(rows, WatchRecord.from_row), max_bytes)

    async def open_generation(
        self,
        identity: WatchIdentity,
        *,
        document_id: str | None,
        observed_winner: str | None,
        due_at: int,
    ) -> WatchRecord:
        """Create the watch at generation 1, or open its next generation, in one statement.

        The watch becomes pending verification, due at ``due_at`` (epoch ms), with 0
        attempts, no claim and no defer reason, observing ``observed_winner`` and naming
        ``document_id``; ``verified_state_digest`` is kept. An upsert, so two openings at
        once both land, one generation each. The finalize half of the seed's
        ``finalizeOperationAndArmWatch``; run it inside the finalize transaction.
        """
        values = opening_row(
            identity,
            document_id=document_id,
            observed_winner=observed_winner,
            due_at=due_at,
            now=self._ctx.clock(),
        )
        params = {f"p_{name}": values[name] for name in OPEN_GENERATION_COLUMNS}
        row = await OPEN_GENERATION.run_one(self._db, params)
        assert row is not None, "an upsert always returns its row"
        return WatchRecord.from_row(row)

    async def open_generation_observing_winner(
        self, identity: WatchIdentity, *, document_id: str | None, due_at: int
    ) -> WatchRecord:
        """``open_generation`` observing the document's current winner in the
        ``kubun_connector_document_winner`` table (the default ``read_winner``), read in the
        same statement: one statement where ``read_winner`` and ``open_generation`` are two.
        Raises ``InvalidInput`` for a bad ``due_at``."""
        values = opening_row(
            identity,
            document_id=document_id,
            observed_winner=None,
            due_at=due_at,
            now=self._ctx.clock(),
        )
        params = {f"p_{name}": values[name] for name in OPEN_GENERATION_COLUMNS}
        row = await OPEN_GENERATION_OBSERVING.run_one(self._db, params)
        assert row is not None, "an upsert always returns its row"
        return WatchRecord.from_row(row)

    async def _locked_with_winner(
        self, identity: dict[str, str]
    ) -> tuple[WatchRecord | None, str | None]:
        """Inside a write transaction: the watch at ``identity`` (``identity_params``),
        locked, and its document's current winner.

        The winner is read (and share-locked on PostgreSQL) before the watch row is locked,
        the order finalize and ingress take them. Raises ``_Unsettled`` when the watch's
        document changed in between.
        """
        first = await self._db.fetch_prepared(WATCH_DOCUMENT, identity)
        if first is None:
            return None, None
        current_winner = await self._read_winner(first["document_id"])
        row = await self._db.fetch_prepared(LOCK_WATCH, identity)
        if row is None:
            return None, None
        if row["document_id"] != first["document_id"]:
            raise _Unsettled
        return WatchRecord.from_row(row), current_winner

    async def _write_over(
        self, stored: WatchRecord, values: dict[str, Any], action: str
    ) -> WatchRecord:
        """Write ``values`` on ``stored`` if its version is still the one read, version +1,
        logged as ``action``; raises ``_Unsettled`` when it is not."""
        guard = unchanged_watch(watch_item(stored))
        values = values | {"version": stored.version + 1, "updated_at": self._ctx.clock()}
        rows = await run_logged(
            self._db, WATCHES, action, sa.update(watch).where(guard).values(values).returning(watch)
        )
        if not rows:
            raise _Unsettled
        return WatchRecord.from_row(rows[0])

    async def _arm_locked(
        self,
        stored: WatchRecord,
        reason: str,
        current_winner: str | None,
        triggering_winner: str | None,
        due_at: int,
    ) -> ArmResult:
        """Decide and write one arm of a watch read and locked in this transaction."""
        decision = arm_decision(reason, stored, current_winner, triggering_winner)
        if decision == "noop":
            return ArmResult("noop", stored)
        if decision == "open":
            opened = opened_generation(stored, current_winner, due_at)
            return ArmResult("opened", await self._write_over(stored, opened, events.OPENED))
        coalesced = {"next_attempt_at": coalesce_due(stored.next_attempt_at, due_at)}
        return ArmResult("coalesced", await self._write_over(stored, coalesced, events.COALESCED))

    async def arm_watch(
        self,
        identity: WatchIdentity,
        reason: str,
        due_at: int,
        triggering_winner: str | None = None,
    ) -> ArmResult:
        """Open or coalesce a repair generation (seed ``armWatch``).

        ``reason`` ``manual`` always opens a new generation (pending, 0 attempts, observing
        the current winner, due at ``due_at`` epoch ms, claim and defer reason dropped).
        ``ingress`` acts only when ``triggering_winner`` is the document's current winner
        and differs from both watermarks: from verified or repair_failed it opens, from
        pending it moves ``next_attempt_at`` to the earlier of the two. Otherwise, and when
        there is no watch, ``noop``. The whole gate is re-run in each transaction.
        Returns the outcome and the watch as it now stands (None when absent). Raises
        ``ReservedValue`` for reason ``finalize`` (finalize arms through
        ``finalize_operation_and_arm_watch``), ``InvalidInput`` for any other bad field,
        ``CasRetriesExhausted`` when every attempt lost its compare-and-set.
        """
        if reason == RESERVED_ARM_REASON:
            raise ReservedValue("reason", "finalize is reserved for finalizeOperation")
        check.choice("reason", reason, ARM_REASONS)
        check.epoch_ms("dueAt", due_at)
        check.optional_key("triggeringWinner", triggering_winner)
        watch_key = identity_params(identity)
        for _ in range(CAS_ATTEMPTS):
            try:
                async with self._db.write_transaction():
                    stored, current_winner = await self._locked_with_winner(watch_key)
                    if stored is None:
                        return ArmResult("noop", None)
                    return await self._arm_locked(
                        stored, reason, current_winner, triggering_winner, due_at
                    )
            except _Unsettled:
                continue
        raise CasRetriesExhausted("armWatch", CAS_ATTEMPTS)

    async def record_ingress(
        self, document_id: str, winner_digest: str, due_at: int | None = None
    ) -> list[ArmResult]:
        """Record the document's new winner and arm each of its watches with reason ingress,
        all in one transaction.

        ``due_at`` (epoch ms, default now) is when an opened or coalesced watch is due.
        Returns one result per watch naming the document, in identity order (empty when
        none); the winner is recorded either way. Raises ``InvalidInput`` for a bad field,
        ``CasRetriesExhausted`` when every attempt lost a compare-and-set.
        """
        check.key("documentID", document_id)
        check.key("winnerDigest", winner_digest)
        check.optional_epoch_ms("dueAt", due_at)
        for _ in range(CAS_ATTEMPTS):
            try:
                async with self._db.write_transaction():
                    now = self._ctx.clock()
                    await self._db.fetch_prepared(
                        RECORD_WINNER, winner_params(document_id, winner_digest, now)
                    )
                    rows = await self._db.fetch_prepared_all(
                        LOCK_WATCHES_OF_DOCUMENT, {"p_document_id": document_id}
                    )
                    current_winner = await self._read_winner(document_id)
                    return [
                        await self._arm_locked(
                            WatchRecord.from_row(row),
                            "ingress",
                            current_winner,
                            winner_digest,
                            now if due_at is None else due_at,
                        )
                        for row in rows
                    ]
            except _Unsettled:
                continue
        raise CasRetriesExhausted("recordIngress", CAS_ATTEMPTS)

    async def claim_watch_attempt(
        self,
        identity: WatchIdentity,
        generation: int,
        until: int | None,
        now: int | None = None,
        *,
        lease_ms: int | None = None,
    ) -> WatchRecord | None:
        """Claim a verification attempt until ``until`` (seed ``claimWatchAttempt``), or for
        ``lease_ms`` from the store's now: give one, bounded as a lease is
        (``validation.lease_until``: 1,000 to 3,600,000 ms after the store's now).

        Applies when the watch is pending, at ``generation``, due (``next_attempt_at`` set
        and at most ``now``) and its claim is absent or lapsed (``claimed_until <= now``),
        the ``due_watch`` guard (its account not paused); ``now`` is the caller's (None: the
        store's clock), but never later than the store's clock, so no caller takes over a
        claim that has not lapsed. A takeover of a lapsed
        claim counts the attempt its verifier abandoned (``verification_attempts`` + 1), as
        ``acquire_lease`` counts an abandoned send; the worker's
        ``maxAttempts`` then decides in ``record_verification``. Times are epoch ms.
        Returns the updated watch, or None when refused or absent. Raises ``InvalidInput``
        naming ``until`` (both or neither given, or out of bounds), ``leaseMs`` or a malformed
        field.
        """
        store_now = self._ctx.clock()
        params: dict[str, Any] = {
            "p_generation": check.count("generation", generation),
            "p_until": check.lease_until("until", until, "leaseMs", lease_ms, store_now),
        }
        due = store_now if now is None else min(check.epoch_ms("now", now), store_now)
        params |= identity_params(identity) | {"p_due": due, "p_now": store_now}
        return _record(await CLAIM_WATCH.run_one(self._db, params))

    async def defer_watch(
        self,
        identity: WatchIdentity,
        generation: int,
        claimed_until: int,
        next_attempt_at: int,
        reason: str | None = None,
    ) -> WatchRecord | None:
        """Reschedule a claimed attempt to ``next_attempt_at`` (seed ``deferWatch``).

        Applies when the watch is pending, at ``generation``, and still claimed until
        exactly ``claimed_until``; drops the claim and sets ``reason`` (``offline``,
        ``auth`` or None). Times are epoch ms. Returns the updated watch, or None when
        refused or absent.
        """
        params: dict[str, Any] = {"p_generation": check.count("generation", generation)}
        params |= identity_params(identity) | {
            "p_claimed_until": check.epoch_ms("claimedUntil", claimed_until),
            "p_next_attempt_at": check.epoch_ms("nextAttemptAt", next_attempt_at),
            "p_defer_reason": check.optional_choice("reason", reason, DEFER_REASONS),
            "p_now": self._ctx.clock(),
        }
        return _record(await DEFER_WATCH.run_one(self._db, params))

    async def record_verification(
        self,
        identity: WatchIdentity,
        *,
        generation: int,
        fetched_digest: str | None,
        max_attempts: int,
        due_at: int,
        claimed_until: int | None = None,
        error_message: str | None = None,
    ) -> VerificationResult:
        """Record what a verifier fetched from the provider (seed ``recordVerification``).

        In one transaction, re-run in full on every retry: ``stale-generation`` when the
        watch is absent (watch None) or at another generation; then ``stale-claim`` when
        ``claimed_until`` is given and is not the stored claim (omitted: no claim gate);
        then, against the document's current winner read in the transaction:
        ``fetched_digest`` equal to it → ``verified`` (both watermarks set to it);
        otherwise one more attempt, reaching ``max_attempts`` → ``repair_failed`` (the
        current winner recorded as observed), else ``pending``, due at ``due_at`` (epoch
        ms), watermarks untouched. Each write drops the claim and the defer reason, keeps
        ``error_message`` (at most 2,048 bytes of UTF-8; None clears it) as ``last_error``
        and logs its outcome. Returns the outcome and the watch as it now stands. Raises
        ``InvalidInput`` for a bad field (``maxAttempts`` below 1 included),
        ``CasRetriesExhausted`` when every attempt lost its compare-and-set.
        """
        verification = Verification(
            identity=identity,
            generation=generation,
            fetched_digest=fetched_digest,
            max_attempts=max_attempts,
            due_at=due_at,
            claimed_until=claimed_until,
            error_message=error_message,
        )
        watch_key = verification_key(verification)
        for _ in range(CAS_ATTEMPTS):
            try:
                async with self._db.write_transaction():
                    return await self._verify_locked(verification, watch_key)
            except _Unsettled:
                continue
        raise CasRetriesExhausted("recordVerification", CAS_ATTEMPTS)

    async def record_verifications(
        self, verifications: Sequence[Verification], read_winners: ReadWinners
    ) -> list[VerificationResult]:
        """``record_verification`` of each item, in one transaction; each item's outcome is
        the one its single call would have, in input order.

        Every item is checked first (``items[i].<field>`` in the error), and two items on
        one watch refuse the batch (``items[j].identity``): nothing is written then. Then
        one statement per step, in the single call's lock order: the watches' documents,
        those documents' winners (``read_winners``), the watches locked in identity order;
        each item is decided by ``verification_decision`` and the decided ones written by
        one ``unchanged_watch``-guarded update. The whole batch runs again when a watch's
        document moved or a compare-and-set lost. Raises ``InvalidInput``, or
        ``CasRetriesExhausted`` when every run lost.
        """
        keys = each_item(verifications, verification_key)
        refuse_repeats([verification.identity for verification in verifications], "identity")
        items = sorted(
            ({name: key[f"p_{name}"] for name in WATCH_IDENTITY} for key in keys),
            key=lambda item: tuple(item[name] for name in WATCH_IDENTITY),
        )
        for _ in range(CAS_ATTEMPTS):
            try:
                async with self._db.write_transaction():
                    return await self._verify_all_locked(verifications, items, read_winners)
            except _Unsettled:
                continue
        raise CasRetriesExhausted("recordVerifications", CAS_ATTEMPTS)

    async def _verify_all_locked(
        self,
        verifications: Sequence[Verification],
        items: list[dict[str, Any]],
        read_winners: ReadWinners,
    ) -> list[VerificationResult]:
        """Inside a write transaction: ``record_verifications``' steps for ``items`` (the
        checked identities, in identity order); raises ``_Unsettled`` to run again."""
        dialect = self._db.dialect
        prepared, values = WATCH_DOCUMENTS.bind(dialect, items)
        first = {
            WatchIdentity(*(row[name] for name in WATCH_IDENTITY)): row["document_id"]
            for row in await self._db.fetch_prepared_all(prepared, values)
        }
        winners = await read_winners(sorted({d for d in first.values() if d is not None}))
        prepared, values = LOCK_WATCHES.bind(dialect, items)
        locked = {
            record.identity: record
            for record in map(
                WatchRecord.from_row, await self._db.fetch_prepared_all(prepared, values)
            )
        }
        if any(first.get(identity) != record.document_id for identity, record in locked.items()):
            raise _Unsettled
        outcomes: list[VerificationOutcome] = []
        writes: list[dict[str, Any]] = []
        for verification in verifications:
            stored = locked.get(verification.identity)
            current_winner = None if stored is None else winners.get(stored.document_id or "")
            outcome = verification_decision(
                stored,
                generation=verification.generation,
                claimed_until=verification.claimed_until,
                fetched_digest=verification.fetched_digest,
                current_winner=current_winner,
                max_attempts=verification.max_attempts,
            )
            outcomes.append(outcome)
            if stored is not None and outcome not in ("stale-generation", "stale-claim"):
                decided = verification_values(
                    outcome,
                    stored,
                    current_winner,
                    verification.due_at,
                    verification.error_message,
                )
                row = {name: getattr(stored, name) for name in VERIFIED_COLUMNS}
                writes.append(watch_item(stored) | row | decided)
        written: dict[WatchIdentity, WatchRecord] = {}
        if writes:
            writes.sort(key=lambda item: tuple(item[name] for name in WATCH_IDENTITY))
            rows = await WRITE_VERIFICATIONS.run(self._db, writes, p_now=self._ctx.clock())
            if len(rows) != len(writes):
                raise _Unsettled
            written = {record.identity: record for record in map(WatchRecord.from_row, rows)}
        return [
            VerificationResult(
                outcome,
                written.get(verification.identity, locked.get(verification.identity)),
            )
            for verification, outcome in zip(verifications, outcomes, strict=True)
        ]

    async def _verify_locked(
        self, verification: Verification, watch_key: dict[str, str]
    ) -> VerificationResult:
        """Inside a write transaction: decide and write one verification of the watch at
        ``watch_key`` (``identity_params``); raises ``_Unsettled`` when its write lost."""
        stored, current_winner = await self._locked_with_winner(watch_key)
        outcome = verification_decision(
            stored,
            generation=verification.generation,
            claimed_until=verification.claimed_until,
            fetched_digest=verification.fetched_digest,
            current_winner=current_winner,
            max_attempts=verification.max_attempts,
        )
        if stored is None or outcome in ("stale-generation", "stale-claim"):
            return VerificationResult(outcome, stored)
        values = verification_values(
            outcome, stored, current_winner, verification.due_at, verification.error_message
        )
        action = VERIFICATION_ACTIONS[outcome]
        return VerificationResult(outcome, await self._write_over(stored, values, action))

    async def resume_offline_deferred(self, now: int, connector_name: str | None = None) -> Resumed:
        """Make every live operation and pending watch deferred ``offline`` due at ``now``
        (epoch ms) (seed ``resumeOfflineDeferred``), in one transaction; only those of
        ``connector_name`` when given.

        The defer reason is cleared; watches also get version +1. Returns how many of each
        were resumed. Raises ``InvalidInput`` for a bad ``now`` or ``connectorName``.
        """
        check.epoch_ms("now", now)
        connector = check.optional_key("connectorName", connector_name)
        if connector is None:
            return await self._resume("offline", now, [([], [])])
        scope = ([op.c.connector_name == connector], [watch.c.connector_name == connector])
        return await self._resume("offline", now, [scope])

    async def resume_auth_deferred(
        self, owner_did: str, connector_names: Sequence[str], now: int
    ) -> Resumed:
        """Like ``resume_offline_deferred`` for reason ``auth``, limited to ``owner_did``'s
        rows of ``connector_names`` (seed ``resumeAuthDeferred``).

        An empty ``connector_names`` resumes nothing. Raises ``InvalidInput`` for a bad field.
        """
        owner = check.key("ownerDID", owner_did)
        names = list(dict.fromkeys(check.key_list("connectorNames", connector_names)))
        check.epoch_ms("now", now)
        if not names:
            return Resumed(0, 0)
        return await self._resume(
            "auth",
            now,
            [
                (
                    [op.c.owner_did == owner, op.c.connector_name.in_(chunk)],
                    [watch.c.owner_did == owner, watch.c.connector_name.in_(chunk)],
                )
                for chunk in chunked(names)
            ],
        )

    async def _resume(
        self,
        reason: str,
        now: int,
        scopes: list[tuple[list[sa.ColumnElement[bool]], list[sa.ColumnElement[bool]]]],
    ) -> Resumed:
        """Resume rows deferred for ``reason``, one pair of statements per (operation guard,
        watch guard), all in one transaction; counts the rows ``RETURNING`` gave."""
        operations = watches = 0
        async with self._db.write_transaction():
            for op_guard, watch_guard in scopes:
                resumed_operations = await run_logged(
                    self._db,
                    events.OPERATIONS,
                    events.RESUMED,
                    sa.update(op)
                    .where(op.c.state == ATTEMPTED, op.c.defer_reason == reason, *op_guard)
                    .values(next_attempt_at=now, defer_reason=None, updated_at=now)
                    .returning(*(op.c[name] for name in events.OPERATIONS.source)),
                )
                deferred = sa.and_(
                    watch.c.verification_status == PENDING_VERIFICATION,
                    watch.c.defer_reason == reason,
                    *watch_guard,
                )
                # Lock in identity order first, as record_ingress does, so the two never
                # wait on each other's watch rows (an UPDATE locks in no set order).
                await self._db.fetch_all(
                    sa.select(watch.c.owner_did)
                    .where(deferred)
                    .order_by(*IDENTITY_COLUMNS)
                    .with_for_update()
                )
                resumed_watches = await run_logged(
                    self._db,
                    WATCHES,
                    events.RESUMED,
                    sa.update(watch)
                    .where(deferred)
                    .values(
                        next_attempt_at=now,
                        defer_reason=None,
                        version=watch.c.version + 1,
                        updated_at=now,
                    )
                    .returning(*(watch.c[name] for name in WATCHES.source)),
                )
                operations += len(resumed_operations)
                watches += len(resumed_watches)
        return Resumed(operations, watches)
