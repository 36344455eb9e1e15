"""Projection watches: one verify/repair state machine per provider entity
(seed projection-watches.js)."""

from collections.abc import Sequence

import sqlalchemy as sa

from store import validation as check
from store.context import StoreContext
from store.database import chunked
from store.records import PENDING_VERIFICATION, WatchIdentity, WatchRecord
from store.tables import projection_watch as watch


def by_identity(identity: WatchIdentity) -> sa.ColumnElement[bool]:
    """The WHERE clause naming one watch; raises ``InvalidInput`` for a malformed part."""
    return sa.and_(
        watch.c.owner_did == check.key("ownerDID", identity.owner_did),
        watch.c.connector_name == check.key("connectorName", identity.connector_name),
        watch.c.model == check.key("model", identity.model),
        watch.c.account_key == check.key("accountKey", identity.account_key),
        watch.c.source_id == check.key("sourceID", identity.source_id),
    )


class WatchesStore:
    """The watch methods of the seed's ``createProjectionWatchesMethods``."""

    def __init__(self, context: StoreContext) -> None:
        self._ctx = context
        self._db = context.db

    async def get_watch(self, identity: WatchIdentity) -> WatchRecord | None:
        """The watch of ``identity``, or None (seed ``getWatch``)."""
        row = await self._db.fetch_one(sa.select(watch).where(by_identity(identity)))
        return None if row is None else WatchRecord.from_row(row)

    async def list_watches(self, identities: Sequence[WatchIdentity]) -> list[WatchRecord]:
        """The watches of ``identities`` that exist, in no particular order (for DataLoaders)."""
        found: list[WatchRecord] = []
        for chunk in chunked(identities, 100):
            rows = await self._db.fetch_all(
                sa.select(watch).where(sa.or_(*(by_identity(identity) for identity in chunk)))
            )
            found.extend(WatchRecord.from_row(row) for row in rows)
        return found

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
        now = self._ctx.clock()
        values = {
            "owner_did": identity.owner_did,
            "connector_name": identity.connector_name,
            "model": identity.model,
            "account_key": identity.account_key,
            "source_id": identity.source_id,
            "document_id": document_id,
            "repair_generation": 1,
            "verification_status": PENDING_VERIFICATION,
            "verification_attempts": 0,
            "observed_winner_digest": observed_winner,
            "verified_state_digest": None,
            "next_attempt_at": check.epoch_ms("dueAt", due_at),
            "claimed_until": None,
            "defer_reason": None,
            "version": 0,
            "created_at": now,
            "updated_at": now,
        }
        upsert = self._db.insert(watch).values(values)
        fresh = upsert.excluded
        upsert = upsert.on_conflict_do_update(
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
        )
        row = await self._db.write_one(upsert.returning(watch))
        assert row is not None, "an upsert always returns its row"
        return WatchRecord.from_row(row)
