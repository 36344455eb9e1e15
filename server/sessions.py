"""Signing people in to the dashboard and GraphiQL: one-time sign-in links and sessions.

``sign_in_link`` makes ``<server>/ui#sign-in=<code>`` (``/graphql#sign-in=<code>`` for
GraphiQL), the code good once within ``SIGN_IN_CODE_TTL_SECONDS``. ``Sessions`` serves
``POST /auth/sign-in`` (a code for a session's token, valid ``SESSION_TTL_SECONDS``),
``/auth/renew`` and ``/auth/sign-out`` (revokes the session for every server process; its
tokens are then refused on every endpoint, ``server.auth.live``). A refused code is answered
400 ``SIGN_IN_REFUSED``. Codes and sessions live in the database (``store.sign_in``). Only a
server that signs tokens (``JWT_SECRET`` or its generated secret) opens sessions. Why:
docs/decisions/0015-tokens-by-configured-key-people-by-one-time-links.md.
"""

import json
import logging
from dataclasses import dataclass

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from resolvers.codes import SIGN_IN_REFUSED
from server.auth import Authenticator, Credentials, Unauthenticated, unauthenticated
from server.responses import JsonResponse, database_unavailable, request_error
from store import ConnectorStore
from store.errors import DatabaseUnavailable
from store.sign_in import EXPIRED, USED, Session, SignInRefused

log = logging.getLogger("connector_store.sessions")

SIGN_IN_FRAGMENT = "sign-in="
"""A sign-in link's fragment, before the code (``#sign-in=<code>``)."""
MAX_SIGN_IN_BODY_BYTES = 1024
"""The largest body ``/auth/sign-in`` reads: ``{"code": "…"}`` is about 60 bytes."""
ADMIN_SCOPE = "service"
"""The rights of the sign-in ``serve`` prints a link for, and of ``sign-in-link``'s by
default (an admin): every right. Its subject is the session's own
(``store.sign_in.OWN_SUBJECT``), never the workers' ``service``."""
GET_ANOTHER = "ask for a new link (connector-store sign-in-link, where the server runs)"
REFUSALS = {
    USED: f"this sign-in link was used already: each works once; {GET_ANOTHER}",
    EXPIRED: f"this sign-in link has expired; {GET_ANOTHER}",
}
UNKNOWN_CODE = (
    f"this sign-in link is not one this server issued (or it was collected); {GET_ANOTHER}"
)
NO_SIGNING = (
    "this server signs no sessions (JWT_PUBLIC_KEY is set): sign in with a token of your "
    "identity provider"
)


def sign_in_link(base_url: str, code: str, page: str = "/ui") -> str:
    """The link that signs a browser in to ``page`` (``/ui`` or ``/graphql``) of the server
    at ``base_url`` (``http://host:port``) with ``code``, in the URL's fragment."""
    return f"{base_url.rstrip('/')}{page}#{SIGN_IN_FRAGMENT}{code}"


@dataclass(frozen=True, slots=True)
class Sessions:
    """The sign-in endpoints of one app: ``authenticator`` signs sessions' tokens, each
    valid ``ttl_seconds`` from its sign-in or renewal."""

    authenticator: Authenticator
    ttl_seconds: int

    def answer(self, session: Session, store: ConnectorStore) -> JSONResponse:
        """A session's token (``token``), its end (``expiresAt``, epoch ms), how long that
        is from now (``expiresIn``, seconds: the page renews at half of it), and whose it is
        (``sub``, ``scope``); never cached."""
        expires_in = max(0, (session.expires_at - store.clock()) // 1000)
        token = self.authenticator.mint_session(
            session.sub, session.scope, session.session_id, expires_in
        )
        return JsonResponse(
            {
                "token": token,
                "expiresAt": session.expires_at,
                "expiresIn": expires_in,
                "sub": session.sub,
                "scope": session.scope,
            },
            headers={"Cache-Control": "no-store"},
        )

    async def sign_in(self, request: Request) -> Response:
        """``POST /auth/sign-in`` with ``{"code": "<code>"}``: spend the code, open its
        session, answer its token (``answer``). Refused with 400 ``SIGN_IN_REFUSED``
        (used, expired, unknown: the message says which and how to get another link),
        400 ``BAD_REQUEST`` for a body that is not that JSON object, 413 past
        ``MAX_SIGN_IN_BODY_BYTES``."""
        if not self.authenticator.signs:
            return request_error(400, NO_SIGNING, code=SIGN_IN_REFUSED)
        body = await request.body()
        if len(body) > MAX_SIGN_IN_BODY_BYTES:
            return request_error(413, f"a sign-in body is at most {MAX_SIGN_IN_BODY_BYTES} bytes")
        try:
            code = json.loads(body).get("code")
        except (ValueError, AttributeError):
            code = None
        if not isinstance(code, str):
            return request_error(400, 'send JSON {"code": "<the code of the sign-in link>"}')
        store: ConnectorStore = request.app.state.store
        try:
            session = await store.sign_in.sign_in(code, self.ttl_seconds * 1000)
        except SignInRefused as refused:
            message = REFUSALS.get(refused.reason, UNKNOWN_CODE)
            return request_error(400, message, code=SIGN_IN_REFUSED)
        except DatabaseUnavailable as error:
            return unavailable(error)
        log.info("signed in: session for %s", session.sub)
        return self.answer(session, store)

    async def renew(self, request: Request) -> Response:
        """``POST /auth/renew`` with the session's token: the session valid ``ttl_seconds``
        from now and a new token for it (``answer``). A token of a session signed out or
        expired never gets here (401, ``server.auth.Authentication``); a token of no
        session is 400."""
        credentials: Credentials = request.scope["credentials"]
        if credentials.session is None:
            return request_error(400, "this token is no session's: nothing to renew")
        store: ConnectorStore = request.app.state.store
        try:
            session = await store.sign_in.renew(credentials.session, self.ttl_seconds * 1000)
        except DatabaseUnavailable as error:
            return unavailable(error)
        if session is None:
            return unauthenticated(Unauthenticated("this session has ended: sign in again"))
        return self.answer(session, store)

    async def sign_out(self, request: Request) -> Response:
        """``POST /auth/sign-out`` with the session's token: the session is revoked for every
        server process (``{"signedOut": true}``); its tokens are refused from now on. A
        token of no session is 400 (it stays valid until its ``exp``)."""
        credentials: Credentials = request.scope["credentials"]
        if credentials.session is None:
            return request_error(
                400, "this token is no session's: it cannot be signed out (it ends at its exp)"
            )
        store: ConnectorStore = request.app.state.store
        try:
            await store.sign_in.sign_out(credentials.session)
        except DatabaseUnavailable as error:
            return unavailable(error)
        log.info("signed out: session of %s", credentials.viewer.did)
        return JsonResponse({"signedOut": True}, headers={"Cache-Control": "no-store"})


def unavailable(error: DatabaseUnavailable) -> JSONResponse:
    """503 when the sessions cannot be read or written (``database_unavailable``), logged."""
    log.warning("sign-in: the database is unavailable: %s", error)
    return database_unavailable()
