"""Signing people in: one-time sign-in codes and the sessions they open (no seed counterpart).

A sign-in is one row (``tables.sign_in``). ``issue_code`` makes it: a random code, of which
only the SHA-256 is kept, good once until ``code_expires_at``, for a named person's ``sub``
or for a subject of the session's own (``OWN_SUBJECT``). ``sign_in`` spends the code and
opens the row's session, valid until ``expires_at``; ``renew`` moves ``expires_at`` on while
the session is live; ``sign_out`` revokes it. Every server process on the database reads the
same row (``session``), so a code spent on one process is spent for all, and a session
signed out on one is refused by all. ``delete_ended`` drops rows whose code and session can
no longer be used (the sweeper).

Each method is one statement; ``sign_in`` reads the row once more only after it was
refused, to say why (``SignInRefused``).
"""

import hashlib
import re
import secrets
from dataclasses import dataclass
from typing import Final

import sqlalchemy as sa

from store import validation as check
from store.context import StoreContext
from store.database import Row
from store.errors import InvalidInput, StoreError
from store.statements import Prepared, param
from store.tables import sign_in as si

CODE_BYTES: Final = 32
"""Random bytes in a sign-in code (256 bits: never guessed), URL-safe base64 (43 chars)."""
MAX_CODE_CHARS: Final = 128
"""The longest text ``sign_in`` looks up; anything longer is no code this store made."""
CODE_SHAPE: Final = re.compile(r"[A-Za-z0-9_-]+")
"""The alphabet of a code (URL-safe base64): text outside it (a lone surrogate from JSON's
``\\ud800``, which has no UTF-8) is no code this store made, refused before any hashing."""
OWN_SUBJECT: Final = "session:"
"""The ``sub`` of a session issued for no named person: this prefix and its ``session_id``,
so each such session is a subject of its own (never a worker's, never another session's)."""
UNKNOWN: Final = "unknown"
USED: Final = "used"
EXPIRED: Final = "expired"


class SignInRefused(StoreError):
    """A sign-in code that opens no session: ``reason`` is ``UNKNOWN`` (never issued, or
    collected since), ``USED`` (spent by an earlier sign-in) or ``EXPIRED``; nothing was
    written."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"the sign-in code is {reason}")
        self.reason = reason


def code_hash(code: str) -> str:
    """The lowercase hex SHA-256 of ``code``'s UTF-8 bytes: what the table keeps of it."""
    return hashlib.sha256(code.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class IssuedCode:
    """A sign-in code ``issue_code`` made: ``code`` (shown once, never stored), the session
    it will open (``session_id``) and until when it can be used (``expires_at``, epoch ms)."""

    code: str
    session_id: str
    expires_at: int


@dataclass(frozen=True, slots=True)
class Session:
    """A session: ``session_id``, for whom (``sub``, a DID, with ``scope``, space-separated
    rights), when it was opened (``signed_in_at``), until when it is valid (``expires_at``)
    and when it was signed out (``revoked_at``, None while it was not); epoch ms."""

    session_id: str
    sub: str
    scope: str
    signed_in_at: int
    expires_at: int
    revoked_at: int | None

    @classmethod
    def from_row(cls, row: Row) -> "Session":
        return cls(
            session_id=row["session_id"],
            sub=row["sub"],
            scope=row["scope"],
            signed_in_at=int(row["signed_in_at"]),
            expires_at=int(row["expires_at"]),
            revoked_at=None if row["revoked_at"] is None else int(row["revoked_at"]),
        )

    def live_at(self, now: int) -> bool:
        """Whether the session is valid at ``now`` (epoch ms): not signed out, not expired."""
        return self.revoked_at is None and now < self.expires_at


def refusal(row: Row | None) -> str:
    """Why ``sign_in``'s spend of a code was refused, from the code's row read after (None:
    no such code): spent, else expired (the spend takes a code neither)."""
    if row is None:
        return UNKNOWN
    return USED if row["signed_in_at"] is not None else EXPIRED


SESSION_COLUMNS = (si.c.session_id, si.c.sub, si.c.scope, si.c.signed_in_at, si.c.expires_at)
NOW = param("p_now", si.c.created_at)
SESSION_ID = param("p_session_id", si.c.session_id)
CODE_HASH = param("p_code_hash", si.c.code_hash)

ISSUE_CODE = Prepared(
    lambda insert: insert(si).values(
        session_id=SESSION_ID,
        code_hash=CODE_HASH,
        sub=param("p_sub", si.c.sub),
        scope=param("p_scope", si.c.scope),
        created_at=NOW,
        code_expires_at=param("p_code_expires_at", si.c.code_expires_at),
    )
)
"""``issue_code``'s insert."""
SIGN_IN = Prepared(
    lambda _: (
        sa.update(si)
        .where(si.c.code_hash == CODE_HASH, si.c.signed_in_at.is_(None), si.c.code_expires_at > NOW)
        .values(signed_in_at=NOW, expires_at=param("p_expires_at", si.c.expires_at))
        .returning(*SESSION_COLUMNS, si.c.revoked_at)
    )
)
"""``sign_in``'s spend of a code not used and not expired, opening its session."""
CODE_STATE = Prepared(
    lambda _: sa.select(si.c.signed_in_at, si.c.code_expires_at).where(si.c.code_hash == CODE_HASH)
)
"""``sign_in``'s read of a refused code, to say why."""
SESSION = Prepared(
    lambda _: sa.select(*SESSION_COLUMNS, si.c.revoked_at).where(
        si.c.session_id == SESSION_ID, si.c.signed_in_at.is_not(None)
    )
)
"""``session``'s read."""
RENEW = Prepared(
    lambda _: (
        sa.update(si)
        .where(
            si.c.session_id == SESSION_ID,
            si.c.signed_in_at.is_not(None),
            si.c.revoked_at.is_(None),
            si.c.expires_at > NOW,
        )
        .values(expires_at=param("p_expires_at", si.c.expires_at))
        .returning(*SESSION_COLUMNS, si.c.revoked_at)
    )
)
"""``renew``'s extension of a live session."""
SIGN_OUT = Prepared(
    lambda _: (
        sa.update(si)
        .where(
            si.c.session_id == SESSION_ID,
            si.c.signed_in_at.is_not(None),
            si.c.revoked_at.is_(None),
        )
        .values(revoked_at=NOW)
        .returning(si.c.session_id)
    )
)
"""``sign_out``'s revocation of a session not yet signed out."""
DELETE_ENDED = Prepared(
    lambda _: (
        sa.delete(si)
        .where(
            sa.or_(
                sa.and_(si.c.signed_in_at.is_(None), si.c.code_expires_at <= NOW),
                si.c.expires_at <= NOW,
            )
        )
        .returning(si.c.session_id)
    )
)
"""``delete_ended``'s delete of codes expired unused and of sessions past their expiry."""


class SignInStore:
    """Sign-in codes and sessions (``store.sign_in``)."""

    def __init__(self, context: StoreContext) -> None:
        self._db = context.db
        self._clock = context.clock
        self._new_id = context.new_id

    async def issue_code(self, sub: str | None, scope: str, ttl_ms: int) -> IssuedCode:
        """A new sign-in code for ``sub`` (a DID; None: the session's own subject,
        ``OWN_SUBJECT`` and its ``session_id``) with ``scope`` (space-separated rights),
        usable once within ``ttl_ms`` from now. Raises ``InvalidInput`` for a blank or
        over-long ``sub``, a blank ``scope`` or a ``ttl_ms`` below 1."""
        if sub is not None and not check.key("sub", sub).strip():
            raise InvalidInput("sub", "must not be blank")
        if not check.text("scope", scope).strip():
            raise InvalidInput("scope", "must name at least one right")
        check.count("ttlMs", ttl_ms, minimum=1)
        code = secrets.token_urlsafe(CODE_BYTES)
        now = self._clock()
        issued = IssuedCode(code=code, session_id=self._new_id(), expires_at=now + ttl_ms)
        if sub is None:
            sub = OWN_SUBJECT + issued.session_id
        await self._db.write_prepared(
            ISSUE_CODE,
            {
                "p_session_id": issued.session_id,
                "p_code_hash": code_hash(code),
                "p_sub": sub,
                "p_scope": scope,
                "p_now": now,
                "p_code_expires_at": issued.expires_at,
            },
        )
        return issued

    async def sign_in(self, code: str, ttl_ms: int) -> Session:
        """Spend ``code`` and open its session, valid ``ttl_ms`` from now: once only, and only
        before the code expires (two sign-ins racing on one code: one wins). Raises
        ``SignInRefused`` saying why (unknown, used, expired), ``InvalidInput`` for a
        ``ttl_ms`` below 1."""
        check.count("ttlMs", ttl_ms, minimum=1)
        if len(code) > MAX_CODE_CHARS or not CODE_SHAPE.fullmatch(code):
            raise SignInRefused(UNKNOWN)
        now = self._clock()
        params = {"p_code_hash": code_hash(code), "p_now": now}
        row = await self._db.write_prepared(SIGN_IN, params | {"p_expires_at": now + ttl_ms})
        if row is None:
            raise SignInRefused(refusal(await self._db.fetch_prepared(CODE_STATE, params)))
        return Session.from_row(row)

    async def session(self, session_id: str) -> Session | None:
        """The session ``session_id`` (live, expired or signed out), or None when no code
        opened it (or it was collected)."""
        row = await self._db.fetch_prepared(SESSION, {"p_session_id": session_id})
        return None if row is None else Session.from_row(row)

    async def renew(self, session_id: str, ttl_ms: int) -> Session | None:
        """Make the live session ``session_id`` valid ``ttl_ms`` from now; None when it is
        not live (signed out, expired, unknown): nothing written. Raises ``InvalidInput``
        for a ``ttl_ms`` below 1."""
        check.count("ttlMs", ttl_ms, minimum=1)
        now = self._clock()
        row = await self._db.write_prepared(
            RENEW, {"p_session_id": session_id, "p_now": now, "p_expires_at": now + ttl_ms}
        )
        return None if row is None else Session.from_row(row)

    async def sign_out(self, session_id: str) -> bool:
        """Revoke the session ``session_id``; False when it was already signed out or no
        code opened it."""
        row = await self._db.write_prepared(
            SIGN_OUT, {"p_session_id": session_id, "p_now": self._clock()}
        )
        return row is not None

    async def delete_ended(self, now: int) -> int:
        """Delete, at ``now`` (epoch ms), the codes that expired unused and the sessions past
        their ``expires_at`` (signed out or not); returns how many rows went."""
        rows = await self._db.write_prepared_all(DELETE_ENDED, {"p_now": now})
        return len(rows)
