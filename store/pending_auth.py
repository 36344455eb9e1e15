"""Pending auth: OAuth PKCE state between the authorize redirect and the callback, used
once (seed pending-auth.js).

The record holds the PKCE ``code_verifier``, a secret: of these methods only
``consume_pending_auth`` is meant to hand it to a caller that will use it.
"""

import sqlalchemy as sa

from store import validation as check
from store.context import StoreContext
from store.errors import InvalidInput
from store.records import PendingAuthRecord
from store.statements import Prepared, param
from store.tables import pending_auth as pa

COLUMNS = (
    "state",
    "code_verifier",
    "provider",
    "owner_did",
    "owner_wrappable_did",
    "controller_wrappable_did",
    "created_at",
    "redirect_url",
    "scopes",
    "is_incremental",
    "expires_at",
)
"""The columns ``create_pending_auth`` writes, each from the parameter ``p_<column>``."""
STATE = param("p_state", pa.c.state)

CREATE_PENDING_AUTH = Prepared(
    lambda insert: (
        insert(pa)
        .values({name: param(f"p_{name}", pa.c[name]) for name in COLUMNS})
        .on_conflict_do_nothing(index_elements=[pa.c.state])
        .returning(pa)
    )
)
"""``create_pending_auth``'s insert-if-absent."""
GET_PENDING_AUTH = Prepared(lambda _: sa.select(pa).where(pa.c.state == STATE))
"""``get_pending_auth``'s read."""
CONSUME_PENDING_AUTH = Prepared(lambda _: sa.delete(pa).where(pa.c.state == STATE).returning(pa))
"""``consume_pending_auth``'s delete, whoever the owner."""
CONSUME_OWN_PENDING_AUTH = Prepared(
    lambda _: (
        sa.delete(pa)
        .where(pa.c.state == STATE, pa.c.owner_did == param("p_owner_did", pa.c.owner_did))
        .returning(pa)
    )
)
"""``consume_pending_auth``'s delete, for its owner only."""

DELETE_EXPIRED_PENDING_AUTH = Prepared(
    lambda _: (
        sa.delete(pa)
        .where(pa.c.expires_at < param("p_cutoff", pa.c.expires_at))
        .returning(pa.c.state)
    )
)
"""``delete_expired_pending_auth``'s delete."""


class PendingAuthStore:
    """The methods of the seed's ``createPendingAuthMethods``."""

    def __init__(self, context: StoreContext) -> None:
        self._db = context.db

    async def create_pending_auth(self, record: PendingAuthRecord) -> PendingAuthRecord:
        """Store ``record`` under its ``state`` (seed ``createPendingAuth``).

        One ``INSERT … ON CONFLICT DO NOTHING RETURNING``. Returns the stored record.
        Raises ``InvalidInput`` naming the field for a malformed value, and naming
        ``state`` when that state is already stored (the stored record is left untouched;
        the seed's plain insert fails there too).
        """
        values = {
            "state": check.key("state", record.state),
            "code_verifier": check.key("codeVerifier", record.code_verifier),
            "provider": check.key("provider", record.provider),
            "owner_did": check.key("ownerDID", record.owner_did),
            "owner_wrappable_did": check.optional_key(
                "ownerWrappableDID", record.owner_wrappable_did
            ),
            "controller_wrappable_did": check.optional_key(
                "controllerWrappableDID", record.controller_wrappable_did
            ),
            "created_at": check.epoch_ms("createdAt", record.created_at),
            "redirect_url": check.text("redirectURL", record.redirect_url),
            "scopes": check.json_text("scopes", check.key_list("scopes", record.scopes)),
            "is_incremental": int(check.flag("incremental", record.incremental)),
            "expires_at": check.epoch_ms("expiresAt", record.expires_at),
        }
        params = {f"p_{name}": values[name] for name in COLUMNS}
        row = await self._db.write_prepared(CREATE_PENDING_AUTH, params)
        if row is None:
            raise InvalidInput("state", "a pending authorization with this state exists")
        return PendingAuthRecord.from_row(row)

    async def get_pending_auth(self, state: str) -> PendingAuthRecord | None:
        """The record stored under ``state``, or None (seed ``getPendingAuth``).

        Expired records are returned until a sweep deletes them: the caller compares
        ``expires_at`` with its clock. Raises ``InvalidInput`` (``state``) for a bad key.
        """
        params = {"p_state": check.key("state", state)}
        row = await self._db.fetch_prepared(GET_PENDING_AUTH, params)
        return None if row is None else PendingAuthRecord.from_row(row)

    async def consume_pending_auth(
        self, state: str, owner_did: str | None = None
    ) -> PendingAuthRecord | None:
        """Delete the record under ``state`` and return it, or None when absent, already
        consumed, or (``owner_did`` given) another owner's (seed ``consumePendingAuth``).

        One ``DELETE … RETURNING``: of two callbacks racing on one state, exactly one gets
        the record, and another owner's record is never deleted. Raises ``InvalidInput``
        (``state``, ``ownerDID``) for a bad key.
        """
        params = {"p_state": check.key("state", state)}
        if owner_did is None:
            row = await self._db.write_prepared(CONSUME_PENDING_AUTH, params)
        else:
            params["p_owner_did"] = check.key("ownerDID", owner_did)
            row = await self._db.write_prepared(CONSUME_OWN_PENDING_AUTH, params)
        return None if row is None else PendingAuthRecord.from_row(row)

    async def delete_expired_pending_auth(self, cutoff: int) -> int:
        """Delete every record with ``expires_at < cutoff`` (epoch ms, strict: a record
        expiring exactly at ``cutoff`` is kept, as the seed's ``deleteExpiredPendingAuth``,
        so the sweep and the callback's expiry check agree). Returns how many were deleted,
        counted from the rows ``RETURNING`` gave. Raises ``InvalidInput`` (``cutoff``).
        """
        params = {"p_cutoff": check.epoch_ms("cutoff", cutoff)}
        return len(await self._db.write_prepared_all(DELETE_EXPIRED_PENDING_AUTH, params))
