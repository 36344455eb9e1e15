"""Document winners: the current winning state digest of each document (seed ``ReadWinner``)."""

from typing import Any

import sqlalchemy as sa

from store import validation as check
from store.context import StoreContext
from store.statements import Prepared, param
from store.tables import document_winner as winner


def _record_winner(insert: Any) -> Any:
    upsert = insert(winner).values(
        document_id=param("p_document_id", winner.c.document_id),
        winner_digest=param("p_winner_digest", winner.c.winner_digest),
        updated_at=param("p_now", winner.c.updated_at),
    )
    return upsert.on_conflict_do_update(
        index_elements=[winner.c.document_id],
        set_={
            "winner_digest": upsert.excluded.winner_digest,
            "updated_at": upsert.excluded.updated_at,
        },
    ).returning(winner.c.document_id)


RECORD_WINNER = Prepared(_record_winner)
"""Set a document's winner (insert or replace) at ``p_now`` (epoch ms), returning its
document id; ``record_winner`` and ``record_ingress`` run it with ``winner_params``."""


def winner_of(document_id: Any) -> sa.Select[Any]:
    """The winner digest of ``document_id`` (a value, column or ``param``), share-locked on
    PostgreSQL until the transaction ends."""
    return (
        sa.select(winner.c.winner_digest)
        .where(winner.c.document_id == document_id)
        .with_for_update(read=True)
    )


READ_WINNER = Prepared(lambda _: winner_of(param("p_document_id", winner.c.document_id)))
"""``read_winner``'s read (a share lock on PostgreSQL)."""


def winner_params(document_id: str, winner_digest: str, now: int) -> dict[str, Any]:
    """The parameters of ``RECORD_WINNER``; raises ``InvalidInput`` for a bad key."""
    return {
        "p_document_id": check.key("documentID", document_id),
        "p_winner_digest": check.key("winnerDigest", winner_digest),
        "p_now": now,
    }


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
        row = await self._db.fetch_prepared(READ_WINNER, {"p_document_id": document_id})
        return None if row is None else str(row["winner_digest"])

    async def record_winner(self, document_id: str, winner_digest: str) -> None:
        """Set the document's winner digest (insert or replace). ``record_ingress`` does this
        and arms the document's watches in one transaction."""
        params = winner_params(document_id, winner_digest, self._ctx.clock())
        await self._db.write_prepared(RECORD_WINNER, params)
