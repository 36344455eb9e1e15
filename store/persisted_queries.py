"""Automatic persisted queries (Apollo APQ): a query text stored under its SHA-256, so a
client may send the hash alone. The table is shared by every server instance on the
database; a hash is registered once and never changes (its text is its identity)."""

import hashlib
from typing import Any

import sqlalchemy as sa

from store.context import StoreContext
from store.sizes import OctetLength
from store.statements import Prepared, param
from store.tables import persisted_query as pq

MAX_REGISTERED = 10_000
"""The most query texts the table keeps; past it a registration is skipped (the client's
query still runs, sent in full), so no client can grow the table without bound."""
MAX_REGISTERED_BYTES = 64 * 1024 * 1024
"""The most bytes (UTF-8) of query text the table keeps, likewise: ``MAX_REGISTERED`` texts
of the longest registered length would hold gigabytes."""


def sha256_hex(query: str) -> str:
    """The lowercase hex SHA-256 of ``query``'s UTF-8 bytes (what Apollo clients send)."""
    return hashlib.sha256(query.encode()).hexdigest()


HASH = param("p_sha256_hash", pq.c.sha256_hash)
GET_QUERY = Prepared(lambda _: sa.select(pq.c.query).where(pq.c.sha256_hash == HASH))
"""``get``'s read."""


def _register(insert: Any) -> Any:
    stored = sa.select(sa.func.count()).select_from(pq).scalar_subquery()
    stored_bytes = sa.select(sa.func.coalesce(sa.func.sum(OctetLength(pq.c.query)), 0))
    chosen = sa.select(HASH, param("p_query", pq.c.query), param("p_now", pq.c.created_at)).where(
        stored < sa.bindparam("p_limit", type_=sa.BigInteger),
        stored_bytes.scalar_subquery() + sa.bindparam("p_bytes", type_=sa.BigInteger)
        <= sa.bindparam("p_max_bytes", type_=sa.BigInteger),
    )
    return (
        insert(pq)
        .from_select([pq.c.sha256_hash, pq.c.query, pq.c.created_at], chosen)
        .on_conflict_do_nothing(index_elements=[pq.c.sha256_hash])
        .returning(pq.c.sha256_hash)
    )


REGISTER_QUERY = Prepared(_register)
"""``register``'s insert-if-absent, while fewer than ``p_limit`` texts are stored and the
new text (``p_bytes``) keeps them within ``p_max_bytes``."""


class PersistedQueriesStore:
    """Registered query texts by hash."""

    def __init__(self, context: StoreContext) -> None:
        self._db = context.db
        self._clock = context.clock

    async def get(self, sha256_hash: str) -> str | None:
        """The query registered under ``sha256_hash``, or None."""
        row = await self._db.fetch_prepared(GET_QUERY, {"p_sha256_hash": sha256_hash.lower()})
        return None if row is None else str(row["query"])

    async def register(
        self, query: str, limit: int = MAX_REGISTERED, max_bytes: int = MAX_REGISTERED_BYTES
    ) -> bool:
        """Store ``query`` under its hash, in one statement, while fewer than ``limit`` texts
        are stored and with it they hold at most ``max_bytes`` (UTF-8) of text (a second
        registration changes nothing); True when a row was written."""
        params = {
            "p_sha256_hash": sha256_hex(query),
            "p_query": query,
            "p_now": self._clock(),
            "p_limit": limit,
            "p_bytes": len(query.encode()),
            "p_max_bytes": max_bytes,
        }
        return await self._db.write_prepared(REGISTER_QUERY, params) is not None
