"""Document winners: the current winning state digest of each document (seed ``ReadWinner``)."""

from typing import Any

import sqlalchemy as sa

from store import validation as check
from store.context import StoreContext
from store.database import Database
from store.tables import document_winner as winner


class WinnersStore:
    """Reads and records the winner digest per document id."""

    def __init__(self, context: StoreContext) -> None:
        self._ctx = context
        self._db = context.db

    async def read_winner(self, document_id: str | None) -> str | None:
        """The document's current winner digest, or None (no document, or none recorded).

        The default ``ReadWinner``: awaited inside a transaction it reads through that
        transaction's connection and, on PostgreSQL, holds a share lock on the winner row
        until commit, so an ingress cannot move the winner between this read and the
        caller's write.
        """
        if document_id is None:
            return None
        row = await self._db.fetch_one(
            sa.select(winner.c.winner_digest)
            .where(winner.c.document_id == document_id)
            .with_for_update(read=True)
        )
        return None if row is None else row["winner_digest"]

    async def record_winner(self, document_id: str, winner_digest: str) -> None:
        """Set the document's winner digest (insert or replace). ``record_ingress`` does this
        and arms the document's watches in one transaction."""
        check.key("documentID", document_id)
        check.key("winnerDigest", winner_digest)
        await self._db.write_one(
            winner_upsert(self._db, document_id, winner_digest, self._ctx.clock())
        )


def winner_upsert(db: Database, document_id: str, winner_digest: str, now: int) -> Any:
    """The statement setting a document's winner (insert or replace) at ``now`` (epoch ms),
    returning its document id."""
    upsert = db.insert(winner).values(
        document_id=document_id, winner_digest=winner_digest, updated_at=now
    )
    return upsert.on_conflict_do_update(
        index_elements=[winner.c.document_id],
        set_={
            "winner_digest": upsert.excluded.winner_digest,
            "updated_at": upsert.excluded.updated_at,
        },
    ).returning(winner.c.document_id)
