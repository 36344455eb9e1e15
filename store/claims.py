"""Claims as one statement (PostgreSQL): the missing accounts created, the fresh rows
inserted with the lease each may keep (``store.batches.claims_insert``: the lease guard
computed once per row), their events appended, all in one writable CTE run in autocommit,
for one claim or a batch alike. One round trip where the transaction of the account's lock,
the insert and the tombstones' probe took five.

No account row that exists is written, so claims of one account do not queue on its row.
What that lock gave (claims of one account decided one after another, each reading what the
one before committed) is kept two ways:

- a provider entity's lease: the statement's last step, migration 0020's
  ``kubun_connector_claimed_alone``, takes a transaction lock of each entity the claim
  leased in and asks again, with a snapshot of its own, whether the entity has an attempted
  operation the statement did not see, or an inserted key a tombstone (its operation
  collected while the insert waited on its row). Then the statement raises (``KC409``,
  ``ClaimContended``), writes nothing, and the claim runs again with a newer snapshot;
- an account's cap: a claim naming a capped account writes nothing in autocommit and says
  so (``capped``); it then runs in a transaction that first locks its accounts, writing
  them unchanged (``ENSURE_AND_LOCK_ACCOUNTS``: leasers whose snapshot is older see the
  account changed, ``store.leasing``), and the same statement after (``p_locked``).
"""

from collections.abc import Mapping, Sequence
from typing import Any

import sqlalchemy as sa

from store.accounts import ensure
from store.batches import ENSURE_AND_LOCK_ACCOUNTS, claims_insert
from store.context import StoreContext, current_actor
from store.database import Row
from store.errors import CasRetriesExhausted, ClaimContended
from store.events import ACTOR, CLAIMED, OPERATIONS, appended
from store.items import ItemStatement
from store.operations import CLAIM_COLUMNS, NOW
from store.records import OperationRecord
from store.tables import account
from store.tables import operation as op
from store.tables import operation_tombstone as tombstone
from store.tombstones import key_digest

ITEMS = {name: op.c[name] for name in CLAIM_COLUMNS} | {"key_digest": op.c.caller_did}
"""A claim's fresh row, column by column, and its key's ``key_digest`` as hex text."""
LOCKED = sa.bindparam("p_locked", type_=sa.Boolean)
"""The claim's accounts are locked (its transaction's first statement): a capped one is
claimed from."""
TRIES = 5
"""How often a claim runs when each run finds a concurrent claim's commit
(``ClaimContended``) before it gives up (``CasRetriesExhausted``)."""

Key = tuple[str, str]


def _same_account(rows: sa.FromClause) -> sa.ColumnElement[bool]:
    return sa.and_(
        account.c.connector_name == rows.c.connector_name,
        account.c.account_key == rows.c.account_key,
    )


def _claims(insert: Any, rows: sa.FromClause) -> sa.Select[Any]:
    capped = (
        sa.select(sa.literal(1))
        .select_from(rows.join(account, _same_account(rows)))
        .where(account.c.max_in_flight.is_not(None))
        .exists()
    )
    decided = sa.select(sa.and_(sa.not_(LOCKED), capped).label("capped")).cte("decided")
    going = sa.not_(sa.select(decided.c.capped).scalar_subquery())
    digest = sa.func.decode(rows.c.key_digest, "hex")
    not_collected = ~sa.exists().where(tombstone.c.key_digest == digest)
    missing = (
        sa.select(rows.c.connector_name, rows.c.account_key, NOW)
        .where(going, not_collected, ~sa.exists().where(_same_account(rows)))
        .distinct()
    )
    ensured = ensure(insert, missing, lock=False).cte("ensured")
    changed = claims_insert(insert, rows, going, not_collected).cte("changed")
    leased = changed.c.lease_token.is_not(None)
    entity = [
        sa.func.array_agg(changed.c[name]).filter(leased)
        for name in ("owner_did", "connector_name", "model", "account_key", "source_id")
    ]
    alone = (
        sa.select(sa.func.kubun_connector_claimed_alone(*entity, sa.func.array_agg(digest)))
        .select_from(
            changed.join(
                rows,
                sa.and_(
                    rows.c.caller_did == changed.c.caller_did,
                    rows.c.operation_id == changed.c.operation_id,
                ),
            )
        )
        .where(sa.select(sa.func.count()).select_from(ensured).scalar_subquery() >= 0)
        .scalar_subquery()
    )
    return (
        sa.select(*changed.c, decided.c.capped, alone.label("alone"))
        .select_from(decided.outerjoin(changed, sa.true()))
        .add_cte(ensured, appended(OPERATIONS, CLAIMED, changed, ACTOR))
    )


CLAIMS = ItemStatement(ITEMS, _claims)
"""``claim_operation`` and ``claim_operations`` in one statement (PostgreSQL): every fresh row
of the items inserted unless its key is taken or collected, with the lease it may keep, and
its event; the missing accounts created. When an item's account has a cap and the accounts
are not locked (``p_locked``), nothing is written and ``capped`` says so."""


class ClaimsInOne:
    """Claims by ``CLAIMS``, for PostgreSQL (see the module docstring): called with the
    fresh rows (a claim's columns, in key order), inserts those whose keys are neither taken
    nor collected, each with the lease it may keep, at the store's now, and answers the rows
    inserted, by key. Raises ``CasRetriesExhausted`` when every one of ``TRIES`` runs met a
    concurrent claim's or collection's commit."""

    def __init__(self, context: StoreContext) -> None:
        self._db = context.db
        self._clock = context.clock

    async def __call__(self, rows: Sequence[Mapping[str, Any]]) -> dict[Key, OperationRecord]:
        items = [
            {**row, "key_digest": key_digest(row["caller_did"], row["operation_id"]).hex()}
            for row in rows
        ]
        for _ in range(TRIES):
            try:
                return _inserted(await self._run(items, self._clock()))
            except ClaimContended:
                continue
        raise CasRetriesExhausted("claimOperations", TRIES)

    async def _run(self, items: Sequence[Mapping[str, Any]], now: int) -> list[Row]:
        params = {"p_now": now, "p_actor": current_actor()}
        prepared, values = CLAIMS.bind(self._db.dialect, items, p_locked=False, **params)
        answer = await self._db.write_prepared_all(prepared, values)
        if not answer[0]["capped"]:
            return answer
        accounts = sorted({(item["connector_name"], item["account_key"]) for item in items})
        async with self._db.write_transaction():
            lock, keys = ENSURE_AND_LOCK_ACCOUNTS.bind(
                self._db.dialect,
                [{"connector_name": c, "account_key": a} for c, a in accounts],
                p_now=now,
            )
            await self._db.fetch_prepared_all(lock, keys)
            return await self._db.write_prepared_all(prepared, values | {"p_locked": True})


def _inserted(answer: Sequence[Row]) -> dict[Key, OperationRecord]:
    records = (OperationRecord.from_row(row) for row in answer if row["caller_did"] is not None)
    return {(record.caller_did, record.operation_id): record for record in records}
