"""Authentication: settings → a JWT verifier → the request's ``Viewer``.

``Authorization: Bearer <JWT>``, verified with PyJWT against the key and algorithms the
configuration fixes: HS256 with ``JWT_SECRET`` (with no key configured, a random secret made in
``DATA_DIR``, mode 0600, and reused), or RS256/EdDSA with ``JWT_PUBLIC_KEY`` (its type sets
which; PEM text or a file path). ``exp`` and ``sub`` are required; ``nbf`` is checked when
present, ``iss``/``aud`` when ``JWT_ISSUER``/``JWT_AUDIENCE`` are set, with
``JWT_LEEWAY_SECONDS`` of leeway. A token naming a session in ``SESSION_CLAIM``
(``server.sessions``) is accepted only while that session is neither signed out nor expired.
``authenticate`` makes every check of a request's token; ``live`` checks accepted credentials
again while a stream runs. A refused token is answered with 401 and ``WWW-Authenticate: Bearer
error="invalid_token"``, its reason from ``REFUSED``; neither the key nor a token is logged.
Why: docs/decisions/0015-tokens-by-configured-key-people-by-one-time-links.md.
"""

import logging
import os
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import ed25519, rsa
from cryptography.hazmat.primitives.serialization import load_pem_public_key
from starlette.datastructures import QueryParams
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from resolvers.permissions import Viewer
from server.responses import database_unavailable, request_error
from server.settings import Settings
from store import ConnectorStore
from store import validation as check
from store.errors import DatabaseUnavailable, InvalidInput

log = logging.getLogger("connector_store.auth")

SECRET_FILE = "jwt-secret"
SESSION_CLAIM = "connector_store_session"
"""The claim of a session's token that names its session (``store.sign_in``)."""
SIGN_IN_PATH = "/auth/sign-in"
OPEN_PATHS = frozenset({"/", "/healthz", "/readyz", "/ui", "/ui/dashboard.graphql", SIGN_IN_PATH})
OPEN_PREFIXES = ("/graphiql/", "/ui/assets/", "/signin/")
"""The pages and their assets, which hold no data and no token (the dashboard, like
GraphiQL, sends the user's token with each GraphQL request it makes), and the exchange of a
sign-in code for a session's token (the code is its credential)."""
TOKEN_UNTIL = "connector_store.token_until"
"""The ASGI scope key of until when the request's token is accepted (epoch seconds): a
subscription over HTTP ends then."""


class AuthError(Exception):
    """The configuration cannot produce a verifier (a bad key, say); one line for the CLI."""


class Unauthenticated(Exception):
    """The request carries no usable token; the message is safe to show to the client.

    ``error``: RFC 6750's code for ``WWW-Authenticate`` (``invalid_token``,
    ``invalid_request``), None when the request sent no credentials at all.
    """

    def __init__(self, message: str, error: str | None = "invalid_token") -> None:
        super().__init__(message)
        self.error = error


REFUSED: dict[type[jwt.PyJWTError], str] = {
    jwt.ExpiredSignatureError: "the token has expired (exp)",
    jwt.ImmatureSignatureError: "the token is not valid yet (its nbf or iat is in the future)",
    jwt.InvalidSignatureError: "the token's signature does not match this server's key",
    jwt.InvalidAlgorithmError: "the token's algorithm is not the one this server's key uses",
    jwt.InvalidAudienceError: "the token's audience (aud) is not this server's",
    jwt.InvalidIssuerError: "the token's issuer (iss) is not the one this server accepts",
    jwt.MissingRequiredClaimError: "the token lacks a required claim (exp and sub are)",
    jwt.exceptions.InvalidSubjectError: "the token's sub (a DID) must be a string",
    jwt.DecodeError: "the token is not a well-formed JWT",
}
"""Why a token was refused, by PyJWT's exception type (the most specific listed wins)."""
NEW_SECRET = (
    "; this server made its secret in DATA_DIR anew (was the data folder removed?), so tokens "
    "it issued before are no longer valid: get a new one (connector-store token)"
)


def refusal(error: jwt.PyJWTError, generated: bool) -> str:
    """The client-safe reason for a refused token; with a generated secret, a signature
    that does not match says that the secret may have been made anew."""
    reason = next(
        (text for kind, text in REFUSED.items() if isinstance(error, kind)),
        "the token is not valid",
    )
    if generated and isinstance(error, jwt.InvalidSignatureError):
        reason += NEW_SECRET
    return reason


class VerifiedTokens:
    """The viewers of accepted tokens verified lately, by the token's text, each until its
    ``exp`` plus the leeway (when PyJWT would start refusing it), the clock read on every
    hit; the ``max_entries`` used last (LRU), tokens up to ``MAX_TOKEN_CHARS`` long.
    ``clock``: seconds since the epoch, as PyJWT reads them. Why:
    docs/decisions/0015-tokens-by-configured-key-people-by-one-time-links.md."""

    MAX_TOKEN_CHARS = 4096

    def __init__(self, max_entries: int = 1024, clock: Callable[[], float] = time.time) -> None:
        self.max_entries = max_entries
        self.clock = clock
        self.entries: OrderedDict[str, Credentials] = OrderedDict()

    def get(self, token: str) -> "Credentials | None":
        """The credentials of ``token`` (its viewer, until when it is accepted), when it was
        verified and has not expired since."""
        entry = self.entries.get(token)
        if entry is None:
            return None
        if self.clock() >= entry.until:
            del self.entries[token]
            return None
        self.entries.move_to_end(token)
        return entry

    def put(self, token: str, credentials: "Credentials") -> None:
        """Remember ``credentials`` for ``token`` until their ``until`` (epoch seconds)."""
        if len(token) > self.MAX_TOKEN_CHARS:
            return
        self.entries[token] = credentials
        self.entries.move_to_end(token)
        while len(self.entries) > self.max_entries:
            self.entries.popitem(last=False)


@dataclass(frozen=True, slots=True)
class Credentials:
    """What a token proves: its ``viewer``, until when it is accepted (``until``, epoch
    seconds: ``exp`` plus the leeway, or its session's end) and, for a session's token, the
    session it belongs to (``session``, None for any other token)."""

    viewer: Viewer
    until: float
    session: str | None = None


@dataclass(frozen=True)
class Authenticator:
    """Verifies tokens (and, with a shared secret, mints them) for one configuration.

    ``generated`` is True when the secret was created by the server in ``DATA_DIR``.
    """

    key: Any
    algorithms: tuple[str, ...]
    issuer: str | None
    audience: str | None
    leeway: float
    signing_key: str | None
    generated: bool
    verified: VerifiedTokens = field(default_factory=VerifiedTokens, compare=False)

    def viewer(self, authorization: str | None) -> Viewer:
        """The viewer of an ``Authorization`` header; raises ``Unauthenticated``."""
        return self.credentials(authorization).viewer

    def credentials(self, authorization: str | None) -> Credentials:
        """The credentials of an ``Authorization`` header's token, its session not yet
        checked (``live`` does); raises ``Unauthenticated``."""
        if not authorization:
            raise Unauthenticated(
                "this request needs a bearer token (Authorization: Bearer …)", error=None
            )
        scheme, _, token = authorization.strip().partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise Unauthenticated(
                "the Authorization header must be 'Bearer <token>'", error="invalid_request"
            )
        return self.accepted(token.strip())

    def verify(self, token: str) -> Viewer:
        """The viewer a token names; raises ``Unauthenticated`` when it is not valid.
        Remembered (``verified``) once accepted, until it expires."""
        return self.accepted(token).viewer

    def accepted(self, token: str) -> Credentials:
        """The credentials of a token, its session not yet checked (``live`` does); raises
        ``Unauthenticated`` when it is not valid. Remembered (``verified``) once accepted,
        until it expires."""
        entry = self.verified.get(token)
        if entry is not None:
            return entry
        credentials = self.decode(token)
        self.verified.put(token, credentials)
        return credentials

    def decode(self, token: str) -> Credentials:
        """The credentials of a token (``until``: its ``exp`` plus the leeway), checked by
        PyJWT; raises ``Unauthenticated`` when it is not valid."""
        try:
            claims = jwt.decode(
                token,
                self.key,
                algorithms=list(self.algorithms),
                issuer=self.issuer,
                audience=self.audience,
                leeway=self.leeway,
                options={"require": ["exp", "sub"], "verify_aud": self.audience is not None},
            )
        except jwt.PyJWTError as error:
            log.debug("token refused: %s", type(error).__name__)
            raise Unauthenticated(
                f"the bearer token is not valid: {refusal(error, self.generated)}"
            ) from None
        sub, scope = claims.get("sub"), claims.get("scope", "")
        if not isinstance(scope, str):
            raise Unauthenticated("the bearer token is not valid: its scope is not a string")
        try:
            did = check.key("sub", sub)
        except InvalidInput as error:
            raise Unauthenticated(f"the bearer token's sub (a DID) {error.problem}") from None
        if not did.strip():
            raise Unauthenticated("the bearer token's sub (a DID) must not be blank")
        session = claims.get(SESSION_CLAIM)
        if session is not None and not isinstance(session, str):
            raise Unauthenticated(f"the bearer token is not valid: its {SESSION_CLAIM} is not text")
        until = float(claims["exp"]) + self.leeway
        return Credentials(Viewer.of_token(did, scope), until, session)

    @property
    def signs(self) -> bool:
        """Whether this server signs tokens (a secret: ``JWT_SECRET`` or generated), and so
        can open sessions; not with ``JWT_PUBLIC_KEY``."""
        return self.signing_key is not None

    def mint(self, sub: str, scopes: Iterable[str], ttl_seconds: int) -> str:
        """A token for ``sub`` with ``scopes``, valid ``ttl_seconds``; only with a secret."""
        now = int(time.time())
        return self.sign({"sub": sub, "scope": " ".join(scopes), "exp": now + ttl_seconds})

    def mint_session(self, sub: str, scope: str, session: str, ttl_seconds: int) -> str:
        """The token of session ``session`` for ``sub`` with ``scope`` (space-separated
        rights), valid ``ttl_seconds`` (the session's remaining life, so it expires with
        it); only with a secret."""
        exp = int(time.time()) + ttl_seconds
        return self.sign({"sub": sub, "scope": scope, "exp": exp, SESSION_CLAIM: session})

    def sign(self, claims: dict[str, Any]) -> str:
        """``claims`` with ``iat``, ``nbf`` (now) and the configured ``iss``/``aud``, signed
        with the secret (HS256); raises ``AuthError`` with ``JWT_PUBLIC_KEY``."""
        if self.signing_key is None:
            raise AuthError(
                "JWT_PUBLIC_KEY is set: tokens are minted by whoever holds the private key"
            )
        now = int(time.time())
        claims = {**claims, "iat": now, "nbf": now}
        if self.issuer:
            claims["iss"] = self.issuer
        if self.audience:
            claims["aud"] = self.audience
        return jwt.encode(claims, self.signing_key, algorithm="HS256")


def public_key(text: str) -> tuple[Any, tuple[str, ...]]:
    """The key of ``JWT_PUBLIC_KEY`` (PEM text, or the path of a PEM file) and its algorithms."""
    pem = text if "-----BEGIN" in text else read_key_file(Path(text))
    try:
        key = load_pem_public_key(pem.encode())
    except ValueError as error:
        raise AuthError(f"JWT_PUBLIC_KEY: not a PEM public key ({error})") from None
    if isinstance(key, rsa.RSAPublicKey):
        return key, ("RS256",)
    if isinstance(key, ed25519.Ed25519PublicKey):
        return key, ("EdDSA",)
    raise AuthError("JWT_PUBLIC_KEY: only RSA (RS256) and Ed25519 (EdDSA) keys are supported")


def read_key_file(path: Path) -> str:
    try:
        return path.read_text()
    except OSError as error:
        raise AuthError(f"JWT_PUBLIC_KEY: cannot read {path} ({error.strerror})") from None


def generated_secret(data_dir: Path, create: bool = True) -> str:
    """The secret in ``DATA_DIR``, created (mode 0600) when absent and ``create``; raises
    ``AuthError`` saying where it looked when it is absent and not to be created."""
    path = data_dir / SECRET_FILE
    if not create and not path.exists():
        raise AuthError(
            f"no JWT secret at {path.resolve()} (DATA_DIR is relative to the folder the command "
            "runs in): run it where the server runs, or set DATA_DIR or JWT_SECRET as the "
            "server has them; a token signed with a new secret would be refused"
        )
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        pass
    except OSError as error:
        raise AuthError(f"cannot create {path} ({error.strerror}); set JWT_SECRET") from None
    else:
        with os.fdopen(fd, "w") as file:
            file.write(secrets.token_urlsafe(48))
    try:
        secret = path.read_text().strip()
    except OSError as error:
        raise AuthError(f"cannot read {path} ({error.strerror}); set JWT_SECRET") from None
    if len(secret) < 32:
        raise AuthError(f"{path} holds no usable secret; delete it to make a new one")
    return secret


def authenticator(settings: Settings, create_secret: bool = True) -> Authenticator:
    """The verifier the settings describe; with no key configured, the secret in
    ``DATA_DIR``, made there when absent only if ``create_secret``."""
    common: dict[str, Any] = {
        "issuer": settings.jwt_issuer or None,
        "audience": settings.jwt_audience or None,
        "leeway": settings.jwt_leeway_seconds,
    }
    if settings.jwt_secret is not None:
        secret = settings.jwt_secret.get_secret_value()
        return Authenticator(
            key=secret, algorithms=("HS256",), signing_key=secret, generated=False, **common
        )
    if settings.jwt_public_key:
        key, algorithms = public_key(settings.jwt_public_key)
        return Authenticator(
            key=key, algorithms=algorithms, signing_key=None, generated=False, **common
        )
    secret = generated_secret(settings.data_dir, create=create_secret)
    return Authenticator(
        key=secret, algorithms=("HS256",), signing_key=secret, generated=True, **common
    )


def unauthenticated(refused: Unauthenticated) -> JSONResponse:
    """401 with ``WWW-Authenticate: Bearer`` (its ``error`` and ``error_description``, RFC
    6750, when credentials were sent) and the usual GraphQL error body."""
    challenge = 'Bearer realm="connector-store"'
    if refused.error is not None:
        description = str(refused).replace("\\", "").replace('"', "'")
        challenge += f', error="{refused.error}", error_description="{description}"'
    return request_error(401, str(refused), headers={"WWW-Authenticate": challenge})


SIGNED_OUT = "this session was signed out: sign in again"
SESSION_EXPIRED = "this session has expired: sign in again"
NO_SESSION = "this token's session is not known here (it ended and was collected): sign in again"


async def authenticate(
    authenticator: Authenticator, authorization: str | None, store: ConnectorStore
) -> Credentials:
    """The credentials of a request's ``Authorization`` header (None: none sent), every
    check made: the token's (signature, ``exp``, ``nbf``, issuer, audience: ``Authenticator``)
    and its session's (``live``). Every way in calls it: the HTTP middleware
    (``Authentication``), a WebSocket's ``connection_init`` (``server.websocket``), and any
    lane in front of them (``authenticate_request``). Raises ``Unauthenticated`` (the
    message is safe to show) and ``DatabaseUnavailable`` when the session cannot be read."""
    return await live(authenticator.credentials(authorization), store)


async def authenticate_request(
    authenticator: Authenticator, scope: Scope, store: ConnectorStore
) -> Credentials:
    """``authenticate`` for an HTTP request's ASGI ``scope``: its one ``Authorization``
    header (two are refused with ``invalid_request``). Raises as ``authenticate``."""
    headers = [value for name, value in scope["headers"] if name == b"authorization"]
    if len(headers) > 1:
        raise Unauthenticated("send one Authorization header", error="invalid_request")
    return await authenticate(
        authenticator, headers[0].decode("latin-1") if headers else None, store
    )


async def live(credentials: Credentials, store: ConnectorStore) -> Credentials:
    """``credentials`` once their session (if any) is checked in the database, whenever they
    were accepted (an open stream or WebSocket checks its own again with this): refused
    (``Unauthenticated``) when it was signed out, has expired or is unknown; ``until``
    becomes the session's end when that comes first. Credentials of no session pass as
    they are (their ``exp`` is the caller's to watch: ``server.live.Session``). The
    session's times are the store's clock, ``until`` the system's (PyJWT's): the session's
    remaining life is carried over. Raises ``DatabaseUnavailable`` when the session cannot
    be read."""
    if credentials.session is None:
        return credentials
    session = await store.sign_in.session(credentials.session)
    if session is None or session.sub != credentials.viewer.did:
        raise Unauthenticated(NO_SESSION)
    if session.revoked_at is not None:
        raise Unauthenticated(SIGNED_OUT)
    now = store.clock()
    if not session.live_at(now):
        raise Unauthenticated(SESSION_EXPIRED)
    ends = time.time() + (session.expires_at - now) / 1000
    return replace(credentials, until=min(credentials.until, ends))


def is_graphiql_page(scope: Scope) -> bool:
    """A browser asking for the GraphiQL page: GET /graphql with no query and no extensions
    (a persisted query sends its hash alone), accepting HTML (``GraphQLApp`` renders the IDE
    on the same test)."""
    if scope["method"] != "GET" or scope["path"] != "/graphql":
        return False
    params = QueryParams(scope.get("query_string", b""))
    if "query" in params or "extensions" in params:
        return False
    accept = dict(scope["headers"]).get(b"accept", b"").decode("latin-1")
    return "text/html" in accept or "*/*" in accept


class Authentication:
    """ASGI middleware: every HTTP request but ``/healthz``, ``/readyz``, the GraphiQL page,
    the dashboard's page, their assets and the sign-in code's exchange needs a valid bearer
    token (``authenticate_request``: a session's, of a live session); its credentials go to
    ``scope["credentials"]``, its viewer to ``scope["viewer"]``. A session that cannot be
    read (the database is down) is 503 ``SERVICE_UNAVAILABLE``."""

    def __init__(self, app: ASGIApp, authenticator: Authenticator) -> None:
        self.app = app
        self.authenticator = authenticator

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        if path in OPEN_PATHS or path.startswith(OPEN_PREFIXES) or is_graphiql_page(scope):
            await self.app(scope, receive, send)
            return
        try:
            credentials = await authenticate_request(
                self.authenticator, scope, scope["app"].state.store
            )
        except Unauthenticated as refused:
            await unauthenticated(refused)(scope, receive, send)
            return
        except DatabaseUnavailable as error:
            log.warning("a session could not be checked: %s", error)
            await database_unavailable()(scope, receive, send)
            return
        scope["credentials"] = credentials
        scope["viewer"], scope[TOKEN_UNTIL] = credentials.viewer, credentials.until
        await self.app(scope, receive, send)
