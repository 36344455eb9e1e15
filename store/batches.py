"""Batch settles: many operations claimed, marked, recorded or finalized in one call.

Each item is its own compare-and-set with exactly its single write's outcome (the writes
are independent: an item that does not apply changes nothing of the others), and each
step runs one statement for the whole batch, on both backends, whatever the number of
items: the items travel as arrays (PostgreSQL ``unnest``) or one JSON array (SQLite
``json_each``), see ``store.items.ItemStatement``. The statements are built from the
single writes' own guard functions (``store.operations.mark_send_started_update``, …), so
each guard is written once.

Every item is checked before anything runs: a bad item, or two items naming one key,
refuse the whole batch with ``InvalidInput`` naming ``items[i].<field>``. Rows are written
in key order, so two batches over the same keys lock them in the same order.
"""

from collections.abc import Mapping, Sequence
from typing import Any

import sqlalchemy as sa

from store import lease_guards as guards
from store.accounts import ensure
from store.context import ReadWinner, StoreContext, current_actor
from store.database import Row, chunked
from store.events import (
    CLAIMED,
    FINALIZED,
    OPENED,
    OPERATIONS,
    RECORDED,
    SEND_MARKED,
    WATCHES,
    LoggedItems,
)
from store.finalizes import (
    FINALIZE_AND_OPEN_ITEMS,
    FINALIZE_AND_OPEN_ITEMS_KEEPING_DOCUMENTS,
    finalizations,
)
from store.items import ItemStatement, each_item, refuse_repeats
from store.operations import (
    CLAIM_COLUMNS,
    ITEM_COLUMNS,
    NOW,
    ClaimResult,
    Finalization,
    Finalize,
    InsertClaims,
    OperationTransition,
    RecordShape,
    SendMark,
    by_key,
    claim_after_collection,
    claim_insert,
    claim_lease,
    claim_outcome,
    claim_row,
    finalize_item,
    finalize_update,
    items_locked_in_key_order,
    mark_item,
    mark_send_started_update,
    record_item,
    record_operation_update,
    record_steps,
    sets_documents,
)
from store.records import (
    TERMINAL_STATES,
    WATCH_FIELDS,
    WATCH_IDENTITY,
    OperationClaim,
    OperationRecord,
    TombstoneRecord,
    WatchIdentity,
    WatchRecord,
)
from store.sqlite_steps import Steps
from store.tables import account
from store.tables import document_winner as winner
from store.tables import operation as op
from store.tables import operation_tombstone as tombstone
from store.tables import projection_watch as watch
from store.tombstones import Tombstoned, find_tombstones, key_digest
from store.watches import (
    ReadWinners,
    Verification,
    VerificationResult,
    WatchesStore,
    open_generation_upsert,
    opening_row,
)

Key = tuple[str, str]


def _columns(*names: str) -> dict[str, sa.Column[Any]]:
    return {name: ITEM_COLUMNS[name] for name in names}


KEYS = _columns("caller", "operation")

MARK_SENDS_STARTED = LoggedItems(
    OPERATIONS,
    SEND_MARKED,
    _columns("caller", "operation", "token", "marker"),
    lambda _, rows: mark_send_started_update(rows.c, NOW),
    lock_first=items_locked_in_key_order,
)
"""``mark_send_started_update`` of every item."""

RECORDED_COLUMNS = _columns(
    "caller",
    "operation",
    "from_state",
    "to_state",
    "version",
    "token",
    "attempts",
    "marker",
    "provider_etag",
    "next_attempt_at",
    "defer_reason",
    "kind",
    "http_status",
    "message",
)

RECORD_OPERATIONS = LoggedItems(
    OPERATIONS,
    RECORDED,
    RECORDED_COLUMNS,
    lambda _, rows: record_operation_update(rows.c, NOW),
    lock_first=items_locked_in_key_order,
)
"""``record_operation_update`` of every item."""

RECORD_OPERATIONS_STAYING = LoggedItems(
    OPERATIONS,
    RECORDED,
    RECORDED_COLUMNS,
    lambda _, rows: record_operation_update(rows.c, NOW, stays=True),
    lock_first=items_locked_in_key_order,
)
"""``RECORD_OPERATIONS`` of items that each stay in their state (``to_state`` is
``from_state``): ``state`` is left out of the SET."""

RECORD_OPERATIONS_KEEPING_SCHEDULE = LoggedItems(
    OPERATIONS,
    RECORDED,
    RECORDED_COLUMNS,
    lambda _, rows: record_operation_update(rows.c, NOW, keeps_schedule=True),
    lock_first=items_locked_in_key_order,
)
"""``RECORD_OPERATIONS`` where each row's ``next_attempt_at`` and ``defer_reason`` already
are its item's: both are left out of the SET."""

RECORD_OPERATIONS_STAYING_KEEPING_SCHEDULE = LoggedItems(
    OPERATIONS,
    RECORDED,
    RECORDED_COLUMNS,
    lambda _, rows: record_operation_update(rows.c, NOW, stays=True, keeps_schedule=True),
    lock_first=items_locked_in_key_order,
)
"""``RECORD_OPERATIONS_STAYING`` and ``RECORD_OPERATIONS_KEEPING_SCHEDULE`` at once."""

RECORD_OPERATIONS_BY_SHAPE = {
    RecordShape(False, False): RECORD_OPERATIONS,
    RecordShape(True, False): RECORD_OPERATIONS_STAYING,
    RecordShape(False, True): RECORD_OPERATIONS_KEEPING_SCHEDULE,
    RecordShape(True, True): RECORD_OPERATIONS_STAYING_KEEPING_SCHEDULE,
}
"""``record_operations``' statement of each ``record_steps`` shape."""

FINALIZED_COLUMNS = _columns(
    "caller", "operation", "version", "token", "result_entity", "provider_etag"
)

FINALIZE_OPERATIONS = LoggedItems(
    OPERATIONS,
    FINALIZED,
    {**FINALIZED_COLUMNS, **_columns("document_id")},
    lambda _, rows: finalize_update(rows.c, NOW),
    lock_first=items_locked_in_key_order,
)
"""``finalize_update`` of every item."""

FINALIZE_OPERATIONS_KEEPING_DOCUMENTS = LoggedItems(
    OPERATIONS,
    FINALIZED,
    FINALIZED_COLUMNS,
    lambda _, rows: finalize_update(rows.c, NOW, sets_document=False),
    lock_first=items_locked_in_key_order,
)
"""``FINALIZE_OPERATIONS`` of items that give no ``document_id``: each row keeps its own,
and ``document_id`` is left out of the SET."""

ACCOUNTS = {"connector_name": account.c.connector_name, "account_key": account.c.account_key}


def _ensure_accounts(lock: bool) -> ItemStatement:
    """``accounts.ensure`` of every item's account (one item per account), in key order: so
    with ``lock`` two claims lock their accounts in the same order (no deadlock)."""
    return ItemStatement(
        ACCOUNTS,
        lambda insert, rows: ensure(
            insert,
            sa.select(rows.c.connector_name, rows.c.account_key, NOW)
            .where(sa.true())
            .order_by(rows.c.connector_name, rows.c.account_key),
            lock,
        ),
    )


ENSURE_ACCOUNTS = _ensure_accounts(lock=False)
"""Create every item's account that is absent (SQLite)."""
ENSURE_AND_LOCK_ACCOUNTS = _ensure_accounts(lock=True)
"""Create every item's account that is absent, and lock every one (PostgreSQL), in one
statement: what a claim of a capped account runs first (``store.claims``)."""


def claims_insert(insert: Any, rows: sa.FromClause, *where: Any) -> Any:
    """``claim_insert`` of every item's fresh row, each keeping the claimant's lease only
    where ``claim_operation`` would and the items before it in the batch (by key) leave
    room: the guard's subqueries see only rows already stored, not the statement's own, so
    the items are ranked. ``allowed`` is ``lease_allowed`` without the cap; an item keeps its
    lease when allowed, first (by key) of its provider entity in the batch, and within its
    account's room (``lease_guards.with_room``) among the allowed first-of-entity items of
    its account. An item whose key already exists (left as stored) still takes its rank:
    that may only refuse a later item its lease, never grant a second one. ``where``: further
    conditions on the items inserted (of ``rows.c``)."""
    key = [rows.c.caller_did, rows.c.operation_id]
    ranked = (
        sa.select(
            *(rows.c[name] for name in CLAIM_COLUMNS),
            guards.lease_allowed(rows.c, NOW, None, cap=False).label("allowed"),
            sa.func.row_number()
            .over(partition_by=[rows.c[name] for name in WATCH_IDENTITY], order_by=key)
            .label("entity_rank"),
        )
        .where(*where)
        .subquery("ranked")
    )
    first = ranked.c.entity_rank == 1
    joined, room = guards.with_room(ranked, NOW)
    placed = (
        sa.select(
            ranked,
            room.label("room"),
            sa.func.row_number()
            .over(
                partition_by=[
                    ranked.c.connector_name,
                    ranked.c.account_key,
                    ranked.c.allowed,
                    first,
                ],
                order_by=[ranked.c.caller_did, ranked.c.operation_id],
            )
            .label("account_rank"),
        )
        .select_from(joined)
        .subquery("placed")
    )
    granted = sa.and_(
        placed.c.allowed,
        placed.c.entity_rank == 1,
        sa.or_(placed.c.room.is_(None), placed.c.account_rank <= placed.c.room),
    )
    lease = claim_lease(placed.c, NOW, granted)
    values = [lease.get(name, placed.c[name]).label(name) for name in CLAIM_COLUMNS]
    # ``WHERE true``: SQLite parses ``ON CONFLICT`` after a bare SELECT as a join's.
    return claim_insert(
        insert(op).from_select(list(CLAIM_COLUMNS), sa.select(*values).where(sa.true()))
    )


CLAIM_OPERATIONS = LoggedItems(
    OPERATIONS, CLAIMED, {name: op.c[name] for name in CLAIM_COLUMNS}, claims_insert
)
"""``claims_insert`` of every item's fresh row; ``p_now`` is the store's now (SQLite; on
PostgreSQL ``store.claims.CLAIMS``)."""

GET_OPERATIONS = ItemStatement(
    KEYS,
    lambda _, rows: sa.select(op).select_from(
        op.join(rows, by_key(rows.c.caller, rows.c.operation))
    ),
)
"""The operations at the items' keys that exist."""

OPEN_GENERATIONS = LoggedItems(
    WATCHES,
    OPENED,
    {name: watch.c[name] for name in WATCH_FIELDS},
    lambda insert, rows: open_generation_upsert(
        insert(watch).from_select(
            list(WATCH_FIELDS), sa.select(*(rows.c[name] for name in WATCH_FIELDS)).where(sa.true())
        )
    ),
)
"""``open_generation_upsert`` of every item's opening row (no two of one watch)."""

READ_WINNERS = ItemStatement(
    {"document_id": winner.c.document_id},
    lambda _, rows: (
        sa.select(winner.c.document_id, winner.c.winner_digest)
        .select_from(winner.join(rows, winner.c.document_id == rows.c.document_id))
        .with_for_update(read=True, of=winner)
    ),
)
"""The items' documents' winners (share-locked on PostgreSQL, as ``read_winner``)."""


def _key(item: Mapping[str, Any]) -> Key:
    return (item["caller"], item["operation"])


def _in_key_order(items: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return sorted(items, key=_key)


def _by_key(rows: Sequence[Row]) -> dict[Key, OperationRecord]:
    records = (OperationRecord.from_row(row) for row in rows)
    return {(record.caller_did, record.operation_id): record for record in records}


def _identity(opening: Mapping[str, Any]) -> WatchIdentity:
    return WatchIdentity(*(opening[name] for name in WATCH_IDENTITY))


def _rounds(openings: Sequence[Mapping[str, Any]]) -> list[list[int]]:
    """The openings' indexes by round, each round holding at most one opening per watch
    (the k-th opening of a watch in the k-th round), sorted by identity within it."""
    rounds: list[list[int]] = []
    seen: dict[WatchIdentity, int] = {}
    for index, opening in enumerate(openings):
        identity = _identity(opening)
        depth = seen[identity] = seen.get(identity, -1) + 1
        if depth == len(rounds):
            rounds.append([])
        rounds[depth].append(index)
    return [
        sorted(indexes, key=lambda index: _identity(openings[index]).parts) for indexes in rounds
    ]


def _placed(
    opened: list[WatchRecord | None],
    openings: Sequence[Mapping[str, Any]],
    indexes: Sequence[int],
    rows: Sequence[Row],
) -> None:
    """Each opening of a round (``indexes``) given its watch as the round's upsert left it
    (``rows``)."""
    by_identity = {record.identity: record for record in map(WatchRecord.from_row, rows)}
    for index in indexes:
        opened[index] = by_identity[_identity(openings[index])]


def one_reader(read_winner: ReadWinner) -> ReadWinners:
    """``ReadWinners`` by one ``read_winner`` call per document, for an injected reader."""

    async def read(document_ids: Sequence[str]) -> dict[str, str]:
        found = {}
        for document_id in document_ids:
            digest = await read_winner(document_id)
            if digest is not None:
                found[document_id] = digest
        return found

    return read


class BatchesStore:
    """The batch forms of ``claim_operation``, ``mark_send_started``, ``record_operation``,
    ``finalize_operation_and_arm_watch`` and ``record_verification``.

    ``read_winners`` reads the finalized documents' winners in one statement; with an
    injected ``read_winner`` (``ConnectorStore``) it is ``one_reader`` of it.
    """

    def __init__(
        self,
        context: StoreContext,
        watches: WatchesStore,
        read_winners: ReadWinners | None = None,
        claims_in_one: InsertClaims | None = None,
    ) -> None:
        self._ctx = context
        self._db = context.db
        self._watches = watches
        self._read_winners = read_winners or self.read_winners
        self._claims_in_one = claims_in_one

    async def _write(
        self,
        statement: ItemStatement | LoggedItems,
        items: Sequence[Mapping[str, Any]],
        **params: Any,
    ) -> list[Row]:
        if isinstance(statement, LoggedItems):
            return await statement.run(self._db, items, **params)
        prepared, values = statement.bind(self._db.dialect, items, **params)
        return await self._db.write_prepared_all(prepared, values)

    async def read_winners(self, document_ids: Sequence[str]) -> dict[str, str]:
        """The default ``ReadWinners``: the winner digest of each document that has one,
        one statement (share-locked on PostgreSQL until the transaction ends)."""
        if not document_ids:
            return {}
        items = [{"document_id": document_id} for document_id in sorted(document_ids)]
        prepared, values = READ_WINNERS.bind(self._db.dialect, items)
        rows = await self._db.fetch_prepared_all(prepared, values)
        return {row["document_id"]: row["winner_digest"] for row in rows}

    async def get_operations(self, keys: Sequence[Key]) -> dict[Key, OperationRecord]:
        """The operations at ``keys`` (``(caller_did, operation_id)``, checked by the
        caller) that exist, by key; one statement."""
        if not keys:
            return {}
        items = [{"caller": caller, "operation": operation} for caller, operation in keys]
        prepared, values = GET_OPERATIONS.bind(self._db.dialect, items)
        return _by_key(await self._db.fetch_prepared_all(prepared, values))

    async def claim_operations(self, claims: Sequence[OperationClaim]) -> list[ClaimResult]:
        """``claim_operation`` of each claim, in input order. Every fresh row is inserted if
        absent (``claims_insert``: each keeps the claimant's lease only where
        ``claim_operation`` would grant it, counting the items before it in the batch), and
        every distinct account of the claims that is absent is created: on PostgreSQL in one
        statement (``store.claims``), on SQLite in one transaction, in one hop, that also
        looks up the tombstones of the keys it inserted (``store.tombstones``); then one
        read of the keys that were taken. A key whose operation was collected is never
        claimed afresh and takes no rank from the batch's other claims: on SQLite the
        transaction is rolled back and run again without that claim; either way the claim
        answers ``collected`` or ``conflict`` (``claim_after_collection``), and so does a
        claim whose key's row was collected between the insert and the read of the stored
        rows. Raises ``InvalidInput`` (naming ``items[i].<field>``) for a bad claim or a key
        named twice, ``CasRetriesExhausted`` (PostgreSQL) when every run met a concurrent
        claim's commit."""
        fresh = each_item(claims, lambda claim: claim_row(claim, self._ctx))
        keys = [(row.caller_did, row.operation_id) for row in fresh]
        refuse_repeats(keys, "operationID")
        digests = {key_digest(*key): key for key in keys}
        rows = {
            key: {name: getattr(row, name) for name in CLAIM_COLUMNS}
            for key, row in zip(keys, fresh, strict=True)
        }
        collected: dict[Key, TombstoneRecord] = {}
        inserted: dict[Key, OperationRecord] = {}
        if self._claims_in_one is not None:
            inserted = await self._claims_in_one([rows[key] for key in sorted(rows)])
        while self._claims_in_one is None and len(collected) < len(keys):
            try:
                inserted = await self._insert_claims(
                    [rows[key] for key in sorted(rows) if key not in collected], digests
                )
                break
            except Tombstoned as found:
                collected |= {digests[digest]: record for digest, record in found.found.items()}
        taken = [key for key in keys if key not in inserted and key not in collected]
        stored = await self.get_operations(taken)
        vanished = [key_digest(*key) for key in taken if key not in stored]
        # Rows collected between the insert and the read: their tombstones say so.
        for digest, record in (await find_tombstones(self._db, vanished)).items():
            collected[digests[digest]] = record
        return [
            ClaimResult("claimed", inserted[key])
            if key in inserted
            else claim_after_collection(claim, collected[key])
            if key in collected
            else claim_outcome(claim, stored.get(key))
            for claim, key in zip(claims, keys, strict=True)
        ]

    async def _insert_claims(
        self, rows: Sequence[Mapping[str, Any]], digests: Mapping[bytes, Key]
    ) -> dict[Key, OperationRecord]:
        """SQLite: the transaction of ``claim_operations`` for ``rows`` (fresh rows, in key
        order), in one hop (``Database.write_steps``): the rows it inserted, by key. Raises
        ``Tombstoned`` (and rolls back) when an inserted key has a tombstone; ``digests``
        maps each key's ``key_digest`` to it."""
        accounts = [
            {"connector_name": connector, "account_key": key}
            for connector, key in sorted(
                {(row["connector_name"], row["account_key"]) for row in rows}
            )
        ]
        now = self._ctx.clock()
        actor = current_actor()

        def work(steps: Steps) -> dict[Key, OperationRecord]:
            steps.fetch(*ENSURE_ACCOUNTS.bind(self._db.dialect, accounts, p_now=now))
            inserted = _by_key(CLAIM_OPERATIONS.run_steps(steps, rows, p_now=now, p_actor=actor))
            wanted = [digest for digest, key in digests.items() if key in inserted]
            found = {
                record.key_digest: record
                for chunk in chunked(wanted)
                for record in map(
                    TombstoneRecord.from_row,
                    steps.fetch(sa.select(tombstone).where(tombstone.c.key_digest.in_(chunk)), {}),
                )
            }
            if found:
                raise Tombstoned(found)
            return inserted

        return await self._db.write_steps(work)

    async def mark_sends_started(self, marks: Sequence[SendMark]) -> list[OperationRecord | None]:
        """``mark_send_started`` of each mark, in input order (None where it did not apply).
        Raises ``InvalidInput``/``ReservedValue`` (naming ``items[i].<field>``) for a bad
        mark or a key named twice."""
        items = each_item(marks, mark_item)
        refuse_repeats([_key(item) for item in items], "operationID")
        rows = await self._write(MARK_SENDS_STARTED, _in_key_order(items), p_now=self._ctx.clock())
        applied = _by_key(rows)
        return [applied.get(_key(item)) for item in items]

    async def record_operations(
        self, changes: Sequence[OperationTransition]
    ) -> list[OperationRecord | None]:
        """``record_operation`` of each change, in input order (None where it did not
        apply; a terminal ``from_state`` never does). Raises ``InvalidInput``/
        ``ReservedValue`` (naming ``items[i].<field>``) for a bad change or a key named
        twice. The statements, and their order, are ``record_steps``' (one transaction)."""
        items = each_item(changes, record_item)
        refuse_repeats([_key(item) for item in items], "operationID")
        live = _in_key_order([i for i in items if i["from_state"] not in TERMINAL_STATES])
        if not live:
            return [None for _ in items]
        now = self._ctx.clock()
        first, *rest = record_steps(live, self._db.dialect.one_writer)
        if not rest:
            applied = _by_key(await self._write(RECORD_OPERATIONS_BY_SHAPE[first], live, p_now=now))
            return [applied.get(_key(item)) for item in items]
        async with self._db.write_transaction():
            applied = {}
            for shape in [first, *rest]:
                left = [item for item in live if _key(item) not in applied]
                if left:
                    statement = RECORD_OPERATIONS_BY_SHAPE[shape]
                    applied |= _by_key(await self._write(statement, left, p_now=now))
        return [applied.get(_key(item)) for item in items]

    async def finalize_operations(self, finals: Sequence[Finalize]) -> list[Finalization | None]:
        """``finalize_operation_and_arm_watch`` of each item, in input order (None where
        its compare-and-set did not apply: that item writes nothing). On PostgreSQL with the
        default winner reader, one statement in autocommit (``store.finalizes``) when no two
        committed operations share a watch. Otherwise one transaction: one statement
        commits the operations, one reads their documents' winners, and one opens their
        watches (one more for each further item of a watch already opened in the batch, so
        each opens its own generation, in input order). Raises ``InvalidInput`` (naming
        ``items[i].<field>``) for a bad item or a key named twice.
        """
        items = each_item(finals, finalize_item)
        refuse_repeats([_key(item) for item in items], "operationID")
        now = self._ctx.clock()
        if self._db.dialect.logs_in_write and self._read_winners == self.read_winners:
            statement = (
                FINALIZE_AND_OPEN_ITEMS
                if sets_documents(items)
                else FINALIZE_AND_OPEN_ITEMS_KEEPING_DOCUMENTS
            )
            prepared, values = statement.bind(
                self._db.dialect, _in_key_order(items), p_now=now, p_actor=current_actor()
            )
            in_one = finalizations(await self._db.write_prepared_all(prepared, values), items)
            if in_one is not None:
                return in_one
        if self._db.dialect.one_writer and self._read_winners == self.read_winners:
            actor = current_actor()
            return await self._db.write_steps(
                lambda steps: self._finalize_steps(steps, items, now, actor)
            )
        async with self._db.write_transaction():
            finalize = (
                FINALIZE_OPERATIONS
                if sets_documents(items)
                else FINALIZE_OPERATIONS_KEEPING_DOCUMENTS
            )
            rows = await self._write(finalize, _in_key_order(items), p_now=now)
            committed = _by_key(rows)
            done = [(item, committed[_key(item)]) for item in items if _key(item) in committed]
            documents = {record.document_id for _, record in done} - {None}
            winners = await self._read_winners(sorted(d for d in documents if d is not None))
            watches = await self._open_generations(
                [
                    opening_row(
                        record.identity,
                        document_id=record.document_id,
                        observed_winner=winners.get(record.document_id or ""),
                        due_at=item["due_at"],
                        now=now,
                    )
                    for item, record in done
                ]
            )
        armed = {
            _key(item): Finalization(record, opened)
            for (item, record), opened in zip(done, watches, strict=True)
        }
        return [armed.get(_key(item)) for item in items]

    async def _open_generations(self, openings: Sequence[dict[str, Any]]) -> list[WatchRecord]:
        """``open_generation`` of each opening row, in order, inside the caller's
        transaction: one upsert per round, a round holding at most one opening per watch."""
        opened: list[WatchRecord | None] = [None] * len(openings)
        for indexes in _rounds(openings):
            _placed(
                opened,
                openings,
                indexes,
                await self._write(OPEN_GENERATIONS, [openings[i] for i in indexes]),
            )
        return [record for record in opened if record is not None]

    def _finalize_steps(
        self, steps: Steps, items: Sequence[Mapping[str, Any]], now: int, actor: str | None
    ) -> list[Finalization | None]:
        """SQLite: ``finalize_operations``' statements as ``Steps`` of one hop (the default
        winner reader)."""
        finalize = (
            FINALIZE_OPERATIONS if sets_documents(items) else FINALIZE_OPERATIONS_KEEPING_DOCUMENTS
        )
        committed = _by_key(
            finalize.run_steps(steps, _in_key_order(items), p_now=now, p_actor=actor)
        )
        done = [(item, committed[_key(item)]) for item in items if _key(item) in committed]
        documents = sorted({record.document_id for _, record in done if record.document_id})
        winners: dict[str, str] = {}
        if documents:
            prepared, values = READ_WINNERS.bind(
                self._db.dialect, [{"document_id": document} for document in documents]
            )
            winners = {
                row["document_id"]: row["winner_digest"] for row in steps.fetch(prepared, values)
            }
        openings = [
            opening_row(
                record.identity,
                document_id=record.document_id,
                observed_winner=winners.get(record.document_id or ""),
                due_at=item["due_at"],
                now=now,
            )
            for item, record in done
        ]
        opened: list[WatchRecord | None] = [None] * len(openings)
        for indexes in _rounds(openings):
            batch = [openings[index] for index in indexes]
            _placed(
                opened, openings, indexes, OPEN_GENERATIONS.run_steps(steps, batch, p_actor=actor)
            )
        armed = {
            _key(item): Finalization(record, watch_record)
            for (item, record), watch_record in zip(done, opened, strict=True)
            if watch_record is not None
        }
        return [armed.get(_key(item)) for item in items]

    async def record_verifications(
        self, verifications: Sequence[Verification]
    ) -> list[VerificationResult]:
        """``record_verification`` of each item, in input order, one statement per step
        (``WatchesStore.record_verifications``)."""
        return await self._watches.record_verifications(verifications, self._read_winners)
