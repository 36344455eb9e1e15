"""Authentication (server/auth.py): bad tokens are 401 ``UNAUTHENTICATED`` with no data,
public keys work, open endpoints stay open (and hold no token: tests/api/test_sign_in.py),
CORS is opt-in, secrets stay out of logs, and a failing store is masked."""

import base64
import hashlib
import hmac
import json
import logging
import time

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519, rsa
from pydantic import SecretStr

from resolvers.permissions import Viewer
from server.auth import Credentials, Unauthenticated, VerifiedTokens, authenticator
from server.settings import Settings
from tests.api.conftest import app_client, claim_input, error_codes
from tests.tokens import SERVICE_TOKEN, TEST_JWT_SECRET, bearer, mint

QUERY = {"query": "{ serverTime operations { edges { node { operationID } } } }"}
NOW = int(time.time())
"""The suite's start: only for tokens an hour or a day from it, never for a leeway's edge."""
UNSIGNED = jwt.encode({"sub": "x", "scope": "service", "exp": NOW + 86_400}, None, algorithm="none")
BAD_HEADERS = {
    "missing": {},
    "not bearer": {"Authorization": f"Basic {SERVICE_TOKEN}"},
    "empty bearer": {"Authorization": "Bearer "},
    "malformed": bearer("not.a.jwt"),
    "garbage": bearer("x" * 40),
    "expired": bearer(mint(exp=NOW - 3600)),
    "no exp": bearer(mint(exp=None)),
    "no sub": bearer(mint(sub=None)),
    "not yet valid": bearer(mint(nbf=NOW + 3600)),
    "wrong signature": bearer(mint(key="another-secret-of-at-least-32-bytes!!")),
    "alg none": bearer(UNSIGNED),
    "alg none, unsigned edit": bearer(SERVICE_TOKEN.rsplit(".", 1)[0] + "."),
    "HS512 not configured": bearer(mint(algorithm="HS512")),
    "sub with NUL": bearer(mint(sub="did:key:a\x00b")),
    "sub too long": bearer(mint(sub="did:key:" + "a" * 100_000)),
    "sub blank": bearer(mint(sub=" ")),
}


async def test_bad_tokens__two_authorization_headers_refused(store):
    headers = [("Authorization", f"Bearer {SERVICE_TOKEN}")] * 2
    async with app_client(store, token=None) as http:
        assert_unauthenticated(await http.post("/graphql", json=QUERY, headers=headers))


def assert_unauthenticated(response: httpx.Response) -> None:
    assert response.status_code == 401, response.text
    assert response.headers["www-authenticate"].startswith("Bearer")
    body = response.json()
    assert error_codes(body) == ["UNAUTHENTICATED"]
    assert "data" not in body


@pytest.mark.parametrize("headers", BAD_HEADERS.values(), ids=BAD_HEADERS.keys())
async def test_bad_tokens__401_unauthenticated_and_no_data(store, headers):
    async with app_client(store, token=None) as http:
        assert_unauthenticated(await http.post("/graphql", json=QUERY, headers=headers))
        assert_unauthenticated(
            await http.get("/graphql", params={"query": "{ serverTime }"}, headers=headers)
        )


@pytest.mark.parametrize(
    ("claims", "expired_s_ago", "ok"),
    [
        ({"iss": "issuer-1", "aud": "api-1"}, None, True),
        ({"iss": "issuer-2", "aud": "api-1"}, None, False),
        ({"aud": "api-1"}, None, False),
        ({"iss": "issuer-1", "aud": "api-2"}, None, False),
        ({"iss": "issuer-1"}, None, False),
        ({"iss": "issuer-1", "aud": "api-1"}, 10, True),  # within the leeway
        ({"iss": "issuer-1", "aud": "api-1"}, 120, False),
    ],
)
async def test_issuer_audience_and_leeway(store, claims, expired_s_ago, ok):
    settings = Settings(jwt_issuer="issuer-1", jwt_audience="api-1", jwt_leeway_seconds=60)
    # The expiry counts from this test's own now, not the module's import: a slow run
    # must not carry a token past its leeway before the test sends it.
    if expired_s_ago is not None:
        claims = claims | {"exp": int(time.time()) - expired_s_ago}
    async with app_client(store, settings, token=mint(**claims)) as http:
        response = await http.post("/graphql", json=QUERY)
    if ok:
        assert response.status_code == 200 and "errors" not in response.json()
    else:
        assert_unauthenticated(response)


def hs256_by_hand(claims: dict, key: str) -> str:
    """An HS256 token made without PyJWT (which refuses a PEM key as an HMAC secret)."""

    def part(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    signed = part(b'{"alg":"HS256","typ":"JWT"}') + "." + part(json.dumps(claims).encode())
    signature = hmac.new(key.encode(), signed.encode(), hashlib.sha256).digest()
    return signed + "." + part(signature)


def pem(public_key) -> str:
    return public_key.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    ).decode()


@pytest.mark.parametrize("kind", ["RS256", "EdDSA"])
@pytest.mark.parametrize("as_path", [False, True])
async def test_public_keys__rs256_and_eddsa(store, tmp_path, kind, as_path):
    if kind == "RS256":
        private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    else:
        private, other = ed25519.Ed25519PrivateKey.generate(), ed25519.Ed25519PrivateKey.generate()
    key_text = pem(private.public_key())
    if as_path:
        (tmp_path / "key.pem").write_text(key_text)
        key_text = str(tmp_path / "key.pem")
    settings = Settings(jwt_secret=None, jwt_public_key=key_text)
    good = mint("did:x", "service", key=private, algorithm=kind)
    wrong_key = mint("did:x", "service", key=other, algorithm=kind)
    # The classic confusion: an HS256 token signed with the public key's text.
    confused = hs256_by_hand(
        {"sub": "did:x", "scope": "service", "exp": int(time.time()) + 600},
        pem(private.public_key()),
    )
    async with app_client(store, settings, token=good) as http:
        ok = await http.post("/graphql", json=QUERY)
        for token in (wrong_key, confused, SERVICE_TOKEN):
            assert_unauthenticated(await http.post("/graphql", json=QUERY, headers=bearer(token)))
    assert ok.status_code == 200 and "errors" not in ok.json(), ok.text


async def test_open_endpoints_and_graphiql_stay_open(store):
    async with app_client(store, token=None) as http:
        assert (await http.get("/healthz")).status_code == 200
        assert (await http.get("/readyz")).status_code == 200
        page = await http.get("/graphql", headers={"Accept": "text/html"})
        asset = await http.get("/graphiql/graphiql.min.js")
        assert_unauthenticated(await http.get("/graphql", params={"query": "{ serverTime }"}))
    assert page.status_code == 200 and "GraphiQL" in page.text
    assert "Bearer ey" not in page.text
    assert asset.status_code == 200


async def test_cors__off_by_default_on_for_configured_origins(store):
    preflight = {
        "Origin": "https://app.example",
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization,content-type",
    }
    async with app_client(store) as http:
        off = await http.options("/graphql", headers=preflight)
        plain = await http.post("/graphql", json=QUERY, headers={"Origin": "https://app.example"})
    settings = Settings(cors_origins="https://app.example, https://other.example")
    async with app_client(store, settings) as http:
        on = await http.options("/graphql", headers=preflight)
        other = await http.options("/graphql", headers=preflight | {"Origin": "https://evil"})
        denied = await http.post(
            "/graphql", json=QUERY, headers={"Origin": "https://app.example", "Authorization": ""}
        )
    assert "access-control-allow-origin" not in off.headers
    assert "access-control-allow-origin" not in plain.headers
    assert on.status_code == 200
    assert on.headers["access-control-allow-origin"] == "https://app.example"
    assert "authorization" in on.headers["access-control-allow-headers"].lower()
    assert "access-control-allow-origin" not in other.headers
    assert denied.status_code == 401
    assert denied.headers["access-control-allow-origin"] == "https://app.example"


async def test_secrets_and_tokens_never_reach_the_log(store, caplog):
    caplog.set_level(logging.DEBUG)
    async with app_client(store) as http:
        await http.post("/graphql", json=QUERY)
        await http.post("/graphql", json=QUERY, headers=bearer(mint(exp=NOW - 3600)))
        await http.post("/graphql", json=QUERY, headers=bearer(mint(key="x" * 40)))
        await http.post("/graphql", json={"query": "{ nope }"})
    for secret in (TEST_JWT_SECRET, SERVICE_TOKEN, SERVICE_TOKEN.split(".")[2]):
        assert secret not in caplog.text


def test_generated_secret__0600_reused_and_signs_tokens(tmp_path):
    settings = Settings(jwt_secret=None, data_dir=tmp_path / "data")
    first = authenticator(settings)
    path = tmp_path / "data" / "jwt-secret"
    assert first.generated and path.stat().st_mode & 0o777 == 0o600
    again = authenticator(settings)
    assert again.key == first.key
    viewer = again.verify(first.mint("service", ["service"], 60))
    assert viewer.is_service and viewer.did == "service"


def test_jwt_secret_shorter_than_32_is_refused():
    with pytest.raises(ValueError, match="jwt_secret"):
        Settings(jwt_secret=SecretStr("short"))


async def test_forced_database_failure_in_a_mutation_is_masked(store, monkeypatch, caplog):
    async def broken(*args, **kwargs):
        raise RuntimeError("secret-detail")

    monkeypatch.setattr(store.operations, "claim_operation", broken)
    caplog.set_level(logging.ERROR)
    async with app_client(store) as http:
        response = await http.post(
            "/graphql",
            json={
                "query": "mutation($i: ClaimOperationInput!) { claimOperation(input: $i) "
                "{ __typename } }",
                "variables": {"i": claim_input()},
            },
            headers={"X-Request-ID": "req-broken"},
        )
    body = response.json()
    assert error_codes(body) == ["INTERNAL_SERVER_ERROR"]
    assert body["errors"][0]["extensions"]["requestId"] == "req-broken"
    assert "secret-detail" not in response.text and "RuntimeError" not in response.text
    assert "secret-detail" in caplog.text and "req-broken" in caplog.text


SAYS_WHY = {
    "expired": (mint(exp=NOW - 3600), "has expired"),
    "no exp": (mint(exp=None), "lacks a required claim"),
    "not yet valid": (mint(nbf=NOW + 3600), "not valid yet"),
    "issued in the future": (mint(iat=NOW + 3600), "its nbf or iat is in the future"),
    "wrong signature": (mint(key="another-secret-of-at-least-32-bytes!!"), "signature"),
    "HS512 not configured": (mint(algorithm="HS512"), "algorithm"),
    "malformed": ("not.a.jwt", "not a well-formed JWT"),
    "sub with NUL": (mint(sub="did:key:a\x00b"), "sub (a DID) must not contain NUL"),
    "sub blank": (mint(sub=" "), "sub (a DID) must not be blank"),
    "sub not a string": (mint(sub=7), "sub (a DID) must be a string"),
}


@pytest.mark.parametrize(("token", "says"), SAYS_WHY.values(), ids=SAYS_WHY.keys())
async def test_bad_tokens__401_says_which_check_failed_in_www_authenticate(store, token, says):
    async with app_client(store, token=None) as http:
        response = await http.post("/graphql", json=QUERY, headers=bearer(token))
    assert_unauthenticated(response)
    challenge = response.headers["www-authenticate"]
    assert 'error="invalid_token"' in challenge
    assert says in challenge.split("error_description=", 1)[1]
    assert says in response.json()["errors"][0]["message"]
    assert TEST_JWT_SECRET not in challenge


async def test_no_token__401_challenge_without_an_error_code(store):
    async with app_client(store, token=None) as http:
        response = await http.post("/graphql", json=QUERY)
    assert_unauthenticated(response)
    assert "error=" not in response.headers["www-authenticate"]


def test_generated_secret__token_of_another_secret_says_the_secret_was_made_anew(tmp_path):
    """``rm -rf data/`` makes a new secret: the 401 says why the old tokens stopped working."""
    settings = Settings(jwt_secret=None, data_dir=tmp_path / "data")
    old = authenticator(settings).mint("did:key:a", ["service"], 600)
    (tmp_path / "data" / "jwt-secret").unlink()
    fresh = authenticator(settings)
    with pytest.raises(Unauthenticated, match="anew") as refused:
        fresh.verify(old)
    assert refused.value.error == "invalid_token"


def test_verified_tokens__a_token_is_decoded_once_while_it_is_valid(monkeypatch):
    auth = authenticator(Settings(jwt_secret=SecretStr(TEST_JWT_SECRET)))
    decoded: list[str] = []
    decode = jwt.decode

    def counting(token: str, *args: object, **kwargs: object) -> object:
        decoded.append(token)
        return decode(token, *args, **kwargs)

    monkeypatch.setattr(jwt, "decode", counting)
    token = mint(sub="did:key:cached", scope="operations:read")
    first, second = auth.verify(token), auth.verify(token)
    assert first == second and first.did == "did:key:cached"
    assert decoded == [token]


def test_verified_tokens__an_expired_cached_token_is_refused():
    auth = authenticator(Settings(jwt_secret=SecretStr(TEST_JWT_SECRET), jwt_leeway_seconds=0))
    exp = int(time.time()) + 1
    token = mint(exp=exp)
    assert auth.verify(token).is_service
    time.sleep(max(0.0, exp - time.time()) + 0.05)
    with pytest.raises(Unauthenticated, match="expired"):
        auth.verify(token)


def test_verified_tokens__kept_until_exp_plus_leeway_then_forgotten():
    now = [1000.0]
    cache = VerifiedTokens(clock=lambda: now[0])
    viewer = Viewer.of_token("did:key:a", "service")
    cache.put("token", Credentials(viewer, until=1030.0))
    now[0] = 1029.9
    assert cache.get("token") == Credentials(viewer, 1030.0)
    now[0] = 1030.0
    assert cache.get("token") is None
    assert "token" not in cache.entries


def test_verified_tokens__bounded_the_least_recently_used_goes_first():
    cache = VerifiedTokens(max_entries=2, clock=lambda: 0.0)
    viewers = {name: Viewer.of_token(f"did:key:{name}", "service") for name in "abc"}
    cache.put("a", Credentials(viewers["a"], until=60.0))
    cache.put("b", Credentials(viewers["b"], until=60.0))
    assert cache.get("a") == Credentials(viewers["a"], 60.0)
    cache.put("c", Credentials(viewers["c"], until=60.0))
    assert list(cache.entries) == ["a", "c"]
    cache.put("x" * (VerifiedTokens.MAX_TOKEN_CHARS + 1), Credentials(viewers["a"], until=60.0))
    assert list(cache.entries) == ["a", "c"]


async def test_scopes__one_we_do_not_know_grants_nothing_and_refuses_nothing(store):
    query = {"query": "{ viewer { mutations } operations { edges { node { operationID } } } }"}
    async with app_client(store) as http:
        shared = await http.post(
            "/graphql", json=query, headers=bearer(mint("did:key:a", "openid operations:read"))
        )
        alone = await http.post("/graphql", json=query, headers=bearer(mint("did:key:a", "openid")))
    assert shared.status_code == 200 and shared.json()["data"]["operations"] == {"edges": []}
    assert shared.json()["data"]["viewer"]["mutations"] == []
    assert alone.status_code == 200 and error_codes(alone.json()) == ["FORBIDDEN"]
