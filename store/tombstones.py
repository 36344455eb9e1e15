"""Tombstones: what a collected operation leaves under its key, so that a claim replayed
after collection is never claimed afresh (docs/api.md, 'Idempotency window').

``RetentionStore.collect_finished_operations`` writes one tombstone for each operation it
deletes, in the delete's transaction (``tombstone_row``, ``PUT_TOMBSTONE``). A claim
(``claim_operation``, ``claim_operations``) looks tombstones up only for the rows its insert
created (a key that exists costs nothing more): one primary-key probe of this table per
claim, one statement per batch. When a created row's key has a tombstone, the claim's
transaction is rolled back (``Tombstoned``) and the claim answers ``collected`` (same
envelope) or ``conflict``. The probe runs after the insert, in its transaction, so it sees a
collection that committed while the insert waited for the collected row; a probe before the
insert could miss it and claim the key afresh. The sweeper deletes tombstones
``RETAIN_KEYS_SECONDS`` after their collection (``RetentionStore.delete_expired_tombstones``).

A tombstone is kept compact (a row of about 100 bytes on PostgreSQL, its index included;
``benchmarks/tombstones.py``): the key is kept as ``KEY_DIGEST_BYTES`` of a BLAKE2b digest
(the key itself can be hundreds of bytes), the envelope as ``ENVELOPE_DIGEST_BYTES`` of a
digest of the key and envelope. Two keys share a key digest with probability 2^-96 per pair,
and a drifted envelope passes as the collected one with probability 2^-64.
"""

import hashlib
import json
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from store.database import Database, Row, chunked
from store.records import (
    ENVELOPE,
    OPERATION_KEY,
    TERMINAL_STATE_CODES,
    OperationEnvelope,
    TombstoneRecord,
)
from store.statements import Prepared, param
from store.tables import operation_tombstone as tombstone

KEY_DIGEST_BYTES = 12
ENVELOPE_DIGEST_BYTES = 8
ENVELOPE_COLUMNS = (*OPERATION_KEY, *ENVELOPE)
TOMBSTONE_COLUMNS = (*ENVELOPE_COLUMNS, "state")
"""The columns of a collected operation its tombstone is made of (``tombstone_row``)."""


def _digest(parts: Sequence[str], size: int, person: bytes) -> bytes:
    """BLAKE2b of ``parts`` as one JSON array of strings (unambiguous whatever the strings
    hold), ``size`` bytes, personalised by ``person`` so a key digest and an envelope digest
    of the same strings differ."""
    text = json.dumps(list(parts), ensure_ascii=False, separators=(",", ":"))
    return hashlib.blake2b(text.encode(), digest_size=size, person=person).digest()


def key_digest(caller_did: str, operation_id: str) -> bytes:
    """The tombstone's key: ``KEY_DIGEST_BYTES`` of a digest of ``(caller_did,
    operation_id)``."""
    return _digest([caller_did, operation_id], KEY_DIGEST_BYTES, b"kubun-key")


def envelope_digest(envelope: OperationEnvelope) -> bytes:
    """``ENVELOPE_DIGEST_BYTES`` of a digest of an operation's key and envelope (the fields
    a repeated claim must match, ``records.ENVELOPE``): a claim and the operation it
    replays have the same one."""
    parts = [envelope.caller_did, envelope.operation_id]
    parts += [getattr(envelope, name) for name in ENVELOPE]
    return _digest(parts, ENVELOPE_DIGEST_BYTES, b"kubun-envelope")


def tombstone_row(collected: Row, collected_at: int) -> dict[str, Any]:
    """The tombstone of an operation collected at ``collected_at`` (epoch ms), as
    ``PUT_TOMBSTONE``'s parameters; ``collected`` is the deleted row (at least its
    ``TOMBSTONE_COLUMNS``)."""
    envelope = OperationEnvelope(**{name: collected[name] for name in ENVELOPE_COLUMNS})
    return {
        "p_key_digest": key_digest(envelope.caller_did, envelope.operation_id),
        "p_envelope_digest": envelope_digest(envelope),
        "p_final_state": TERMINAL_STATE_CODES[collected["state"]],
        "p_collected_at": collected_at,
    }


def _put(insert: Any) -> Any:
    values = {name: param(f"p_{name}", column) for name, column in tombstone.c.items()}
    statement = insert(tombstone).values(values)
    # A key collected again (claimed afresh after its tombstone expired, then collected
    # while the expired tombstone still waited for the sweeper) keeps the newer one.
    return statement.on_conflict_do_update(
        index_elements=[tombstone.c.key_digest],
        set_={
            name: statement.excluded[name]
            for name in ("envelope_digest", "final_state", "collected_at")
        },
    )


PUT_TOMBSTONE = Prepared(_put)
"""Write one tombstone (``tombstone_row``'s parameters), replacing an older one of the key."""

GET_TOMBSTONE = Prepared(
    lambda _: sa.select(tombstone).where(
        tombstone.c.key_digest == param("p_key_digest", tombstone.c.key_digest)
    )
)
"""The tombstone of one key digest: a single primary-key probe."""

NOT_COLLECTED = ~sa.exists().where(
    tombstone.c.key_digest == param("p_key_digest", tombstone.c.key_digest)
)
"""No tombstone holds the key digest ``p_key_digest``: the key was never collected, or its
tombstone is no longer kept. A claim's guard: its inserts write nothing for such a key."""


class Tombstoned(Exception):
    """Raised inside a claim's transaction when a row it created has a tombstone, to roll
    the transaction back; ``found`` holds the tombstones by key digest. Never leaves the
    store."""

    def __init__(self, found: dict[bytes, TombstoneRecord]) -> None:
        super().__init__(f"{len(found)} claimed keys were collected")
        self.found = found


async def get_tombstone(db: Database, digest: bytes) -> TombstoneRecord | None:
    """The tombstone of ``digest`` (a ``key_digest``), or None."""
    row = await db.fetch_prepared(GET_TOMBSTONE, {"p_key_digest": digest})
    return None if row is None else TombstoneRecord.from_row(row)


async def find_tombstones(db: Database, digests: Sequence[bytes]) -> dict[bytes, TombstoneRecord]:
    """The tombstones of ``digests`` (``key_digest``s) that exist, by digest: one statement
    per 500 digests, none for an empty list."""
    found: dict[bytes, TombstoneRecord] = {}
    for chunk in chunked(digests):
        rows = await db.fetch_all(sa.select(tombstone).where(tombstone.c.key_digest.in_(chunk)))
        for row in rows:
            record = TombstoneRecord.from_row(row)
            found[record.key_digest] = record
    return found
