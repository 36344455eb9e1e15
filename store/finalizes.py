"""A finalize as one statement (PostgreSQL): the operation's compare-and-set to committed,
its event, its watch's next generation observing the document's winner, and the watch's
event, in one writable CTE run in autocommit. One statement holds the step's atomicity, so
it needs no ``BEGIN``/``COMMIT`` around it: one round trip where the transaction of
``finalize_update``, the winner's read and ``open_generation_upsert`` took four (single) or
five (batch).

The statement answers each committed operation's row with its watch's row beside it, the
watch's columns named ``w_<column>``. A batch whose committed operations share a watch
cannot open two generations of one row in one upsert: the statement then writes nothing
and says so (``repeated``), and the batch runs its transaction of rounds instead
(``store.batches``).
"""

from collections.abc import Mapping, Sequence
from typing import Any

import sqlalchemy as sa

from store.context import current_actor
from store.database import Database, Row
from store.events import ACTOR, FINALIZED, OPENED, OPERATIONS, WATCHES, appended
from store.items import ItemStatement
from store.operations import (
    FINALIZE,
    FINALIZE_KEEPING_DOCUMENT,
    ITEM_COLUMNS,
    KEY_ORDER,
    NOW,
    PARAMS,
    Finalization,
    by_key,
    finalize_update,
    sets_documents,
)
from store.records import (
    PENDING_VERIFICATION,
    WATCH_FIELDS,
    WATCH_IDENTITY,
    OperationRecord,
    WatchRecord,
)
from store.sqlite_steps import Steps
from store.statements import Prepared, param
from store.tables import operation as op
from store.tables import projection_watch as watch
from store.watches import (
    OPEN_GENERATION_COLUMNS,
    OPEN_GENERATION_OBSERVING,
    open_generation_upsert,
    opening_row,
)
from store.winners import winner_of

WATCH_PREFIX = "w_"
"""The prefix of the watch's columns in a finalize's answer."""
DUE_AT = param("p_due_at", watch.c.next_attempt_at)


def _opening(changed: sa.CTE, due_at: Any, now: Any) -> sa.Select[Any]:
    """The row that opens the watch of each committed operation of ``changed`` (its next
    generation on conflict, ``open_generation_upsert``), as ``opening_row`` builds it,
    observing the document's winner (``winner_of``, share-locked before the upsert locks
    the watch row: the order finalize and ingress take them)."""
    values: dict[str, Any] = {name: changed.c[name] for name in WATCH_IDENTITY} | {
        "document_id": changed.c.document_id,
        "repair_generation": sa.literal(1),
        "verification_status": sa.literal(PENDING_VERIFICATION),
        "verification_attempts": sa.literal(0),
        "observed_winner_digest": winner_of(changed.c.document_id).scalar_subquery(),
        "verified_state_digest": sa.null(),
        "next_attempt_at": due_at,
        "claimed_until": sa.null(),
        "defer_reason": sa.null(),
        "last_error": sa.null(),
        "version": sa.literal(0),
        "created_at": now,
        "updated_at": now,
    }
    return sa.select(*(sa.cast(values[name], watch.c[name].type) for name in WATCH_FIELDS))


def _finalized_and_opened(
    insert: Any, changed: sa.CTE, due_at: Any, *rest: Any
) -> tuple[sa.CTE, list[sa.ColumnElement[Any]], list[sa.CTE]]:
    opened = open_generation_upsert(
        insert(watch).from_select(
            list(WATCH_FIELDS), _opening(changed, due_at, NOW).select_from(changed)
        )
    ).cte("opened")
    columns = [*changed.c[: len(op.c)], *rest]
    columns += [opened.c[name].label(WATCH_PREFIX + name) for name in WATCH_FIELDS]
    logs = [
        appended(OPERATIONS, FINALIZED, changed, ACTOR),
        appended(WATCHES, OPENED, opened, ACTOR),
    ]
    return opened, columns, logs


def _same_watch(changed: sa.CTE, opened: sa.CTE) -> sa.ColumnElement[bool]:
    return sa.and_(*(changed.c[name] == opened.c[name] for name in WATCH_IDENTITY))


def _single(insert: Any, sets_document: bool) -> sa.Select[Any]:
    changed = finalize_update(PARAMS, NOW, sets_document).cte("changed")
    opened, columns, logs = _finalized_and_opened(insert, changed, DUE_AT)
    return (
        sa.select(*columns)
        .select_from(changed.join(opened, _same_watch(changed, opened)))
        .add_cte(*logs)
    )


FINALIZE_AND_OPEN = Prepared(lambda insert: _single(insert, sets_document=True))
"""``finalize_operation_and_arm_watch`` in one statement (PostgreSQL): ``FINALIZE`` and the
opening of its watch, each logged; ``p_due_at`` the watch's due time."""
FINALIZE_AND_OPEN_KEEPING_DOCUMENT = Prepared(lambda insert: _single(insert, sets_document=False))
"""``FINALIZE_AND_OPEN`` of an item that gives no ``document_id``."""


ITEMS = {
    **{
        name: ITEM_COLUMNS[name]
        for name in ("caller", "operation", "version", "token", "result_entity", "provider_etag")
    },
    "document_id": ITEM_COLUMNS["document_id"],
    "due_at": watch.c.next_attempt_at,
}


def _locked_with_watches(rows: sa.FromClause) -> sa.FromClause:
    """The items once their operations are locked in key order (``FOR UPDATE``, as
    ``items_locked_in_key_order``), each with its operation's watch identity."""
    locked = (
        sa.select(rows, *(op.c[name].label(f"i_{name}") for name in WATCH_IDENTITY))
        .join_from(rows, op, by_key(rows.c.caller, rows.c.operation))
        .order_by(*KEY_ORDER)
        .with_for_update(of=op)
    )
    return locked.cte("locked_item")


def _batch(insert: Any, rows: sa.FromClause, sets_document: bool) -> sa.Select[Any]:
    identity = sa.tuple_(*(rows.c[f"i_{name}"] for name in WATCH_IDENTITY))
    repeated = (
        sa.select((sa.func.count() > sa.func.count(sa.distinct(identity))).label("repeated"))
        .select_from(rows)
        .cte("repeated")
    )
    update = finalize_update(rows.c, NOW, sets_document)
    update = update.where(sa.not_(sa.select(repeated.c.repeated).scalar_subquery()))
    changed = update.returning(rows.c.due_at.label("item_due_at")).cte("changed")
    opened, columns, logs = _finalized_and_opened(insert, changed, changed.c.item_due_at)
    written = changed.join(opened, _same_watch(changed, opened))
    return (
        sa.select(repeated.c.repeated, *columns)
        .select_from(repeated.outerjoin(written, sa.true()))
        .add_cte(*logs)
    )


FINALIZE_AND_OPEN_ITEMS = ItemStatement(
    ITEMS,
    lambda insert, rows: _batch(insert, rows, sets_document=True),
    lock_first=_locked_with_watches,
)
"""``finalize_operations`` in one statement (PostgreSQL): ``FINALIZE_AND_OPEN`` of every
item, each due at its ``due_at``; writes nothing when two committed operations share a
watch (``repeated``)."""
FINALIZE_AND_OPEN_ITEMS_KEEPING_DOCUMENTS = ItemStatement(
    ITEMS,
    lambda insert, rows: _batch(insert, rows, sets_document=False),
    lock_first=_locked_with_watches,
)
"""``FINALIZE_AND_OPEN_ITEMS`` of items that give no ``document_id``."""


def finalization(row: Row) -> Finalization:
    """The committed operation and its watch, from a row of these statements' answers."""
    opened = {name: row[WATCH_PREFIX + name] for name in WATCH_FIELDS}
    return Finalization(OperationRecord.from_row(row), WatchRecord.from_row(opened))


def finalizations(
    rows: Sequence[Row], items: Sequence[Mapping[str, Any]]
) -> list[Finalization | None] | None:
    """Each item's finalization in input order (None where its compare-and-set did not
    apply), from a batch statement's answer; None when it wrote nothing because two
    committed operations share a watch."""
    if rows and rows[0]["repeated"]:
        return None
    done = {
        (row["caller_did"], row["operation_id"]): finalization(row)
        for row in rows
        if row["caller_did"] is not None
    }
    return [done.get((item["caller"], item["operation"])) for item in items]


class FinalizeInOne:
    """``OperationsStore``'s finalize in one round trip, with the default winner reader: on
    PostgreSQL one statement (``FINALIZE_AND_OPEN``), on SQLite its two logged writes
    (``FINALIZE``, ``OPEN_GENERATION_OBSERVING``) in one hop (``Database.write_steps``)."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def __call__(self, item: dict[str, Any], params: dict[str, Any]) -> Finalization | None:
        params = params | {"p_actor": current_actor()}
        keeps = not sets_documents([item])
        if not self._db.dialect.logs_in_write:
            return await self._db.write_steps(lambda steps: _finalize_steps(steps, params, keeps))
        statement = FINALIZE_AND_OPEN_KEEPING_DOCUMENT if keeps else FINALIZE_AND_OPEN
        row = await self._db.write_prepared(statement, params)
        return None if row is None else finalization(row)


def _finalize_steps(steps: Steps, params: dict[str, Any], keeps: bool) -> Finalization | None:
    """SQLite: the finalize's compare-and-set and its watch's opening as ``Steps``."""
    rows = (FINALIZE_KEEPING_DOCUMENT if keeps else FINALIZE).run_steps(steps, params)
    if not rows:
        return None
    committed = OperationRecord.from_row(rows[0])
    opening = opening_row(
        committed.identity,
        document_id=committed.document_id,
        observed_winner=None,
        due_at=params["p_due_at"],
        now=params["p_now"],
    )
    values = {f"p_{name}": opening[name] for name in OPEN_GENERATION_COLUMNS}
    (opened,) = OPEN_GENERATION_OBSERVING.run_steps(steps, values | {"p_actor": params["p_actor"]})
    return Finalization(committed, WatchRecord.from_row(opened))
