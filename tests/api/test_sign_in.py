"""Signing in (server/sessions.py, server/auth.py's ``live``) on both backends: a sign-in
code is exchanged for a session's token once, and not after it expired; the session's token
is renewed while live, and refused after sign-out and after expiry by every process, over
HTTP and WebSocket; no response of any route holds a token but that exchange's; and every
response forbids framing (the test walks the app's routes, so a new page is checked too)."""

import asyncio
import json
import re
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric import ed25519
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

import resolvers.live
import server.websocket
from resolvers.codes import BAD_REQUEST, PAYLOAD_TOO_LARGE, SIGN_IN_REFUSED, UNAUTHENTICATED
from resolvers.permissions import Viewer
from server.app import create_app
from server.sessions import MAX_SIGN_IN_BODY_BYTES
from server.settings import Settings
from store import ConnectorStore
from store.database import Database
from tests.api.conftest import app_client, error_codes
from tests.api.live_client import MULTIPART, WAIT_S, served, socket
from tests.factories import claimed_operation
from tests.tokens import SERVICE_TOKEN, bearer

SESSION_TTL_S = 900
VIEWER = {"query": "{ viewer { did scopes } }"}
JWT = re.compile(r"eyJ[\w-]+\.eyJ[\w-]+\.[\w-]+")
"""A JWT's shape (its header and claims are JSON objects: base64url of ``{"``)."""


def codes(response: httpx.Response) -> list[str]:
    return [error["extensions"]["code"] for error in response.json()["errors"]]


def message(response: httpx.Response) -> str:
    return str(response.json()["errors"][0]["message"])


async def issued(store: ConnectorStore, sub: str = "did:key:ops", scope: str = "operator") -> str:
    return (await store.sign_in.issue_code(sub, scope, ttl_ms=600_000)).code


async def signed_in(http: httpx.AsyncClient, store: ConnectorStore) -> dict:
    """A session opened by a fresh code: the sign-in's answer."""
    response = await http.post("/auth/sign-in", json={"code": await issued(store)})
    assert response.status_code == 200, response.text
    return response.json()


async def test_sign_in__a_code_opens_a_session_once(store, clock):
    async with app_client(store, token=None) as http:
        first = await http.post("/auth/sign-in", json={"code": (code := await issued(store))})
        again = await http.post("/auth/sign-in", json={"code": code})
        viewer = await http.post("/graphql", json=VIEWER, headers=bearer(first.json()["token"]))
    assert first.status_code == 200 and first.headers["cache-control"] == "no-store"
    answer = first.json()
    assert answer["expiresAt"] == clock.now + SESSION_TTL_S * 1000
    assert answer["expiresIn"] == SESSION_TTL_S
    assert (answer["sub"], answer["scope"]) == ("did:key:ops", "operator")
    assert viewer.json()["data"]["viewer"]["did"] == "did:key:ops"
    assert "operator" in viewer.json()["data"]["viewer"]["scopes"]
    assert again.status_code == 400 and codes(again) == [SIGN_IN_REFUSED]
    assert "used already" in message(again) and "sign-in-link" in message(again)
    assert not JWT.search(again.text)


async def test_sign_in__an_admin_link_signs_in_a_subject_of_its_own_with_every_right(store):
    """A link for no named person (``serve``'s, ``sign-in-link``'s default) signs in as the
    session's own subject, never the workers' ``service``, with every right: it reads and
    writes every tenant's rows as a ``service`` token does."""
    async with app_client(store, token=None) as http:
        answers = []
        for _ in range(2):
            code = (await store.sign_in.issue_code(None, "service", ttl_ms=600_000)).code
            answers.append((await http.post("/auth/sign-in", json={"code": code})).json())
        token = answers[0]["token"]
        viewer = await http.post("/graphql", json=VIEWER, headers=bearer(token))
        await claimed_operation(store, caller_did="did:key:tenant", owner_did="did:key:tenant")
        rows = await http.post(
            "/graphql",
            json={"query": "{ operations(first: 5) { edges { node { callerDID } } } }"},
            headers=bearer(token),
        )
        released = await http.post(
            "/graphql",
            json={
                "query": 'mutation { releaseLease(input: {callerDID: "did:key:tenant", '
                'operationID: "op-1", leaseToken: "lease-A"}) { applied } }'
            },
            headers=bearer(token),
        )
    subs = [answer["sub"] for answer in answers]
    assert all(sub.startswith("session:") for sub in subs) and len(set(subs)) == 2, subs
    assert viewer.json()["data"]["viewer"] == {"did": subs[0], "scopes": viewer_scopes()}
    assert rows.json()["data"]["operations"]["edges"] == [{"node": {"callerDID": "did:key:tenant"}}]
    assert released.json()["data"]["releaseLease"] == {"applied": True}, released.json()


def viewer_scopes() -> list[str]:
    return sorted(Viewer.of_token("x", "service").scopes)


async def test_sign_in__an_expired_code_is_refused(store, clock):
    code = await issued(store)
    clock.advance(600_000)
    async with app_client(store, token=None) as http:
        response = await http.post("/auth/sign-in", json={"code": code})
    assert response.status_code == 400 and codes(response) == [SIGN_IN_REFUSED]
    assert "expired" in message(response) and not JWT.search(response.text)


@pytest.mark.parametrize(
    ("body", "status", "code", "says"),
    [
        (b'{"code": "never-issued"}', 400, SIGN_IN_REFUSED, "not one this server issued"),
        (b'{"code": "\\ud800"}', 400, SIGN_IN_REFUSED, "not one this server issued"),
        (b'{"code": ""}', 400, SIGN_IN_REFUSED, "not one this server issued"),
        (b"", 400, BAD_REQUEST, '{"code"'),
        (b"{}", 400, BAD_REQUEST, '{"code"'),
        (b"\xff\xfe", 400, BAD_REQUEST, '{"code"'),
        (b"null", 400, BAD_REQUEST, '{"code"'),
        (b'{"code": null}', 400, BAD_REQUEST, '{"code"'),
        (b'{"code": ["abc"]}', 400, BAD_REQUEST, '{"code"'),
        (b"[" * 500 + b"]" * 500, 400, BAD_REQUEST, '{"code"'),
        (b"code=abc", 400, BAD_REQUEST, '{"code"'),
        (b'["abc"]', 400, BAD_REQUEST, '{"code"'),
        (b'{"code": 7}', 400, BAD_REQUEST, '{"code"'),
        (b'{"code": "' + b"x" * MAX_SIGN_IN_BODY_BYTES + b'"}', 413, PAYLOAD_TOO_LARGE, "1024"),
    ],
)
async def test_sign_in__a_bad_request_is_refused_saying_why(store, body, status, code, says):
    async with app_client(store, token=None) as http:
        response = await http.post(
            "/auth/sign-in", content=body, headers={"Content-Type": "application/json"}
        )
    assert response.status_code == status and codes(response) == [code]
    assert says in message(response)


async def test_sign_in__only_by_post(store):
    """A GET (a prefetch, a crawler, a proxy's log) never spends a code."""
    code = await issued(store)
    async with app_client(store, token=None) as http:
        got = await http.get("/auth/sign-in", params={"code": code})
        posted = await http.post("/auth/sign-in", json={"code": code})
    assert got.status_code == 405 and posted.status_code == 200


@asynccontextmanager
async def other_process(database_url: str, clock) -> AsyncIterator[httpx.AsyncClient]:
    """A second server on the same database, with its own pool and its own verified-token
    cache, as another process of ``serve --workers`` or another replica has."""
    db = Database(database_url, pool_size=5)
    await db.connect()
    try:
        async with app_client(ConnectorStore(db, clock=clock), token=None) as http:
            yield http
    finally:
        await db.disconnect()


async def test_session__refused_after_sign_out_by_every_process(store, clock, database_url):
    async with (
        app_client(store, token=None) as http,
        other_process(database_url, clock) as elsewhere,
    ):
        token = (await signed_in(http, store))["token"]
        before = await elsewhere.post("/graphql", json=VIEWER, headers=bearer(token))
        out = await http.post("/auth/sign-out", headers=bearer(token))
        after = [
            await client.post(path, json=VIEWER, headers=bearer(token))
            for client in (http, elsewhere)
            for path in ("/graphql", "/auth/renew", "/auth/sign-out")
        ]
    assert before.status_code == 200 and "errors" not in before.json()
    assert out.status_code == 200 and out.json() == {"signedOut": True}
    assert [r.status_code for r in after] == [401] * 6
    assert all(codes(r) == [UNAUTHENTICATED] and "signed out" in message(r) for r in after)
    assert 'error="invalid_token"' in after[0].headers["www-authenticate"]


async def test_session__refused_after_expiry(store, clock):
    async with app_client(store, token=None) as http:
        token = (await signed_in(http, store))["token"]
        clock.advance(SESSION_TTL_S * 1000 - 1)
        live = await http.post("/graphql", json=VIEWER, headers=bearer(token))
        clock.advance(1)
        expired = await http.post("/graphql", json=VIEWER, headers=bearer(token))
        renewed = await http.post("/auth/renew", headers=bearer(token))
    assert live.status_code == 200
    assert expired.status_code == 401 and "expired" in message(expired)
    assert renewed.status_code == 401 and "expired" in message(renewed)


async def test_renew__the_session_lives_on_with_a_new_token(store, clock):
    async with app_client(store, token=None) as http:
        opened = await signed_in(http, store)
        clock.advance(SESSION_TTL_S * 1000 // 2)
        renewed = await http.post("/auth/renew", headers=bearer(opened["token"]))
        clock.advance(SESSION_TTL_S * 1000 // 2 + 1)
        old = await http.post("/graphql", json=VIEWER, headers=bearer(opened["token"]))
        new = await http.post("/graphql", json=VIEWER, headers=bearer(renewed.json()["token"]))
    assert renewed.status_code == 200
    assert renewed.json()["expiresAt"] == opened["expiresAt"] + SESSION_TTL_S * 1000 // 2
    # One session: its end moved on for both tokens (each JWT's own exp still applies).
    assert old.status_code == new.status_code == 200


async def test_renew_and_sign_out__a_token_of_no_session_is_refused(store):
    async with app_client(store) as http:
        renew = await http.post("/auth/renew")
        out = await http.post("/auth/sign-out")
        still = await http.post("/graphql", json=VIEWER)
    assert renew.status_code == out.status_code == 400
    assert "no session" in message(renew) and "no session" in message(out)
    assert still.status_code == 200


async def test_ws__a_signed_out_session_is_refused_4403(store):
    async with served(store) as server:
        async with httpx.AsyncClient(base_url=server.http) as http:
            token = (await signed_in(http, store))["token"]
            async with socket(server) as sock:
                assert await sock.init(token) == {"type": "connection_ack"}
            await http.post("/auth/sign-out", headers=bearer(token))
        async with socket(server) as sock:
            await sock.send(
                {"type": "connection_init", "payload": {"Authorization": f"Bearer {token}"}}
            )
            code, reason = await sock.closed()
    assert code == 4403 and "signed out" in reason


EVENTS = "subscription { operationEvents { sequence } }"
FROM_THE_START = "subscription E($after: String) { operationEvents(after: $after) { sequence } }"


async def test_ws__an_open_connection_refuses_a_subscribe_after_sign_out(store):
    """A connection opened before its session was signed out takes no new subscription."""
    async with served(store) as server, httpx.AsyncClient(base_url=server.http) as http:
        token = (await signed_in(http, store))["token"]
        async with socket(server) as sock:
            assert await sock.init(token) == {"type": "connection_ack"}
            await http.post("/auth/sign-out", headers=bearer(token))
            await sock.subscribe("1", EVENTS)
            code, reason = await sock.closed()
    assert code == 4403 and "signed out" in reason


async def test_ws__a_stream_open_at_sign_out_is_closed_4403(store, monkeypatch):
    """A subscription streaming when its session is signed out ends with its connection
    (4403) at the next check of the session, rather than streaming on until the session's
    expiry."""
    monkeypatch.setattr(server.websocket, "SESSION_RECHECK_S", 0.05)
    async with served(store) as served_app, httpx.AsyncClient(base_url=served_app.http) as http:
        token = (await signed_in(http, store))["token"]
        async with socket(served_app) as sock:
            assert await sock.init(token) == {"type": "connection_ack"}
            await claimed_operation(store)
            await sock.subscribe("1", FROM_THE_START, after="0" * 32)
            assert (await sock.receive())["type"] == "next"
            await http.post("/auth/sign-out", headers=bearer(token))
            code, reason = await sock.closed()
    assert code == 4403 and "signed out" in reason


async def test_multipart__a_stream_open_at_sign_out_ends_unauthenticated(store, monkeypatch):
    """The HTTP twin of the WebSocket case: a subscription streamed over multipart HTTP with
    a session's token ends with UNAUTHENTICATED at the next check of its session once it is
    signed out, rather than streaming on until the session's expiry."""
    monkeypatch.setattr(resolvers.live, "SESSION_RECHECK_S", 0.05)
    body = {"query": FROM_THE_START, "variables": {"after": "0" * 32}}
    async with served(store) as served_app, httpx.AsyncClient(base_url=served_app.http) as http:
        token = (await signed_in(http, store))["token"]
        await claimed_operation(store)
        headers = {**bearer(token), "Accept": MULTIPART}
        async with http.stream("POST", "/graphql", json=body, headers=headers) as response:
            assert response.headers["content-type"].startswith("multipart/mixed")
            payloads = []
            async for payload in multipart_payloads(response):
                payloads.append(payload)
                if len(payloads) == 1:
                    await http.post("/auth/sign-out", headers=bearer(token))
                if "errors" in payload:
                    break
    assert "operationEvents" in payloads[0]["data"], payloads
    assert error_codes(payloads[-1]) == [UNAUTHENTICATED], payloads


async def multipart_payloads(response: httpx.Response) -> AsyncIterator[dict]:
    """Each ``payload`` of a multipart subscription response, as it arrives."""
    text = ""
    chunks = response.aiter_text()
    while True:
        text += await asyncio.wait_for(anext(chunks), WAIT_S)
        *parts, text = text.split("--graphql")
        for part in parts:
            _, _, content = part.partition("\r\n\r\n")
            try:
                decoded = json.loads(content)
            except ValueError:
                continue
            if "payload" in decoded:
                yield decoded["payload"]


def every_path(app) -> Iterator[str]:
    """Every path the app serves by GET: its routes and each file of its static mounts."""
    for route in app.routes:
        if isinstance(route, Route):
            yield route.path
        elif isinstance(route, Mount) and isinstance(route.app, StaticFiles):
            folder = Path(str(route.app.directory))
            for file in sorted(folder.rglob("*")):
                if file.is_file():
                    yield f"{route.path}/{file.relative_to(folder)}"


LOOPBACK_LOOKS = [
    {},
    {"Accept": "text/html"},
    {"Host": "127.0.0.1", "X-Forwarded-For": "127.0.0.1", "X-Real-IP": "127.0.0.1"},
    {"Host": "localhost", "Accept": "text/html", "Forwarded": "for=127.0.0.1"},
]
"""How a request from this machine looks: direct, or through a proxy on it (nginx's default
forwards ``Host: 127.0.0.1``)."""


def holds_a_token(response: httpx.Response) -> bool:
    return bool(JWT.search(response.text)) or any(
        JWT.search(value) for value in response.headers.values()
    )


async def test_no_response_holds_a_token_but_a_code_exchange(store, tmp_path):
    """No route hands a token to a request from loopback (as ``serve`` runs it, with the
    secret it made itself): only the exchange of a valid sign-in code answers one."""
    settings = Settings(jwt_secret=None, data_dir=tmp_path / "data")
    app = create_app(settings, store=store)
    transport = httpx.ASGITransport(app=app, client=("127.0.0.1", 5555))
    paths = list(every_path(app))
    assert {"/ui", "/graphql", "/auth/sign-in", "/graphiql/index.html"} <= set(paths)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8000") as http:
        holding = [
            (method, path, headers)
            for path in paths
            for headers in LOOPBACK_LOOKS
            for method in ("GET", "POST")
            if holds_a_token(await http.request(method, path, headers=headers, json={}))
        ]
        exchanged = await http.post("/auth/sign-in", json={"code": await issued(store)})
    assert holding == []
    assert holds_a_token(exchanged)


async def test_every_response_forbids_framing(store):
    """Every response of every route (pages, assets, errors, the API) says ``X-Frame-Options:
    DENY`` and ``frame-ancestors 'none'``; the pages among them keep their own policy."""
    app = create_app(Settings(), store=store)
    transport = httpx.ASGITransport(app=app)
    responses: dict[tuple[str, str, bool], httpx.Response] = {}
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
        for path in [*every_path(app), "/no-such-page", "/graphiql/no-such-file"]:
            for token in (None, SERVICE_TOKEN):
                headers = {"Accept": "text/html"} | ({} if token is None else bearer(token))
                for method in ("GET", "POST"):
                    responses[method, path, token is None] = await http.request(
                        method, path, headers=headers
                    )
    unframed = [
        key
        for key, response in responses.items()
        if response.headers.get("x-frame-options") != "DENY"
        or "frame-ancestors 'none'" not in response.headers.get("content-security-policy", "")
    ]
    assert unframed == []
    pages = {
        path
        for (method, path, _), response in responses.items()
        if response.headers.get("content-type", "").startswith("text/html")
    }
    assert {"/ui", "/graphql", "/graphiql/index.html", "/ui/assets/index.html"} <= pages
    for page in ("/ui", "/graphql"):
        policy = responses["GET", page, True].headers["content-security-policy"]
        assert "default-src 'self'" in policy and "'unsafe-eval'" not in policy


async def test_sign_in__a_server_with_a_public_key_opens_no_session(store):
    key = (
        ed25519.Ed25519PrivateKey.generate()
        .public_key()
        .public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )
    code = await issued(store)
    async with app_client(store, Settings(jwt_secret=None, jwt_public_key=key), token=None) as http:
        response = await http.post("/auth/sign-in", json={"code": code})
    assert response.status_code == 400 and codes(response) == [SIGN_IN_REFUSED]
    assert "signs no sessions" in message(response)
    assert (await store.sign_in.sign_in(code, 1000)).sub == "did:key:ops"
