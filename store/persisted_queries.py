"""Automatic persisted queries (Apollo APQ): a query text stored under its SHA-256, so a
client may send the hash alone. The table is shared by every server instance on the
database; a hash is registered once and never changes (its text is its identity)."""

import hashlib

import sqlalchemy as sa

from store.context import StoreContext
from store.tables import persisted_query as pq

MAX_QUERY_CHARS = 1024 * 1024


def sha256_hex(query: str) -> str:
    """The lowercase hex SHA-256 of ``query``'s UTF-8 bytes (what Apollo clients send)."""
    return hashlib.sha256(query.encode()).hexdigest()


class PersistedQueriesStore:
    """Registered query texts by hash."""

    def __init__(self, context: StoreContext) -> None:
        self._db = context.db
        self._clock = context.clock

    async def get(self, sha256_hash: str) -> str | None:
        """The query registered under ``sha256_hash``, or None."""
        row = await self._db.fetch_one(
            sa.select(pq.c.query).where(pq.c.sha256_hash == sha256_hash.lower())
        )
        return None if row is None else str(row["query"])

    async def register(self, query: str) -> str:
        """Store ``query`` under its hash (a second registration changes nothing); returns
        the hash."""
        sha = sha256_hex(query)
        insert = (
            self._db.insert(pq)
            .values(sha256_hash=sha, query=query, created_at=self._clock())
            .on_conflict_do_nothing(index_elements=[pq.c.sha256_hash])
            .returning(pq.c.sha256_hash)
        )
        await self._db.write_one(insert)
        return sha
