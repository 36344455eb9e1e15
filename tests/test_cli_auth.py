"""The command's auth side, in real processes: ``token`` mints tokens for the server's
settings, ``make token`` prints an admin token alone on its last line, ``serve`` refuses
to serve beyond loopback without a configured key; ``sign-in-link`` refuses bad options;
bad key settings are one ``error:`` line. Where ``serve`` prints a sign-in link, and the
links of ``sign-in-link``: ``test_serve_sign_in``."""

import os
import subprocess
import sys
import time
from pathlib import Path

import jwt
import pydantic
import pytest
from cryptography.hazmat.primitives.asymmetric import ed25519
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from server.cli import settings_problem
from tests.tokens import TEST_JWT_SECRET

# Real processes (a `connector-store` command or server): left out of `make test-fast`.
pytestmark = pytest.mark.slow

COMMAND = Path(sys.executable).with_name("connector-store")
REPO = Path(__file__).resolve().parents[1]


def run(*args: str, cwd: Path | None = None, **env: str) -> subprocess.CompletedProcess[str]:
    environment = os.environ | env
    for name, value in env.items():
        if value == "":
            environment.pop(name, None)
    return subprocess.run(
        [str(COMMAND), *args],
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=cwd,
    )


def test_token__signed_with_jwt_secret_with_sub_scope_and_ttl():
    done = run("token", "--sub", "did:key:a", "--scope", "operations:read sync:read", "--ttl", "90")
    assert done.returncode == 0, done.stderr
    claims = jwt.decode(done.stdout.strip(), TEST_JWT_SECRET, algorithms=["HS256"])
    assert claims["sub"] == "did:key:a" and claims["scope"] == "operations:read sync:read"
    assert 80 <= claims["exp"] - time.time() <= 91


@pytest.mark.parametrize("scope", ["operator", "observer"])
def test_token__operator_and_observer_scopes(scope):
    done = run("token", "--sub", "did:key:ops", "--scope", scope)

    assert done.returncode == 0, done.stderr
    claims = jwt.decode(done.stdout.strip(), TEST_JWT_SECRET, algorithms=["HS256"])
    assert claims["scope"] == scope


def test_make_token__an_admin_token_alone_on_the_last_line():
    done = subprocess.run(
        ["make", "-s", "token", f"BIN={COMMAND.parent}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    last = done.stdout.strip().splitlines()[-1]
    claims = jwt.decode(last, TEST_JWT_SECRET, algorithms=["HS256"])
    assert claims["sub"] == "service" and claims["scope"] == "service"


def test_sign_in_link__bad_options_and_a_public_key_are_refused(tmp_path):
    scope = run("sign-in-link", "--scope", "root", DATA_DIR=str(tmp_path))
    page = run("sign-in-link", "--page", "admin", DATA_DIR=str(tmp_path))
    assert scope.returncode == 1 and scope.stderr.startswith("error: --scope: unknown root")
    assert page.returncode == 1 and "--page: 'admin'" in page.stderr
    tenant = run("sign-in-link", "--scope", "operations:read", DATA_DIR=str(tmp_path))
    assert tenant.returncode == 1 and tenant.stderr.startswith("error: --sub: 'operations:read'")
    for url in ("javascript:alert(1)", "127.0.0.1:8000", "ftp://host"):
        refused = run("sign-in-link", "--url", url, DATA_DIR=str(tmp_path))
        assert refused.returncode == 1 and refused.stderr.startswith("error: --url: "), url
    key = tmp_path / "key.pem"
    key.write_bytes(
        ed25519.Ed25519PrivateKey.generate()
        .public_key()
        .public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo)
    )
    public = run("sign-in-link", JWT_SECRET="", JWT_PUBLIC_KEY=str(key), DATA_DIR=str(tmp_path))
    assert public.returncode == 1 and "signs no sessions" in public.stderr


def test_serve__beyond_loopback_without_a_key_is_refused(tmp_path):
    done = run("serve", "--host", "0.0.0.0", DATA_DIR=str(tmp_path), JWT_SECRET="")
    assert done.returncode == 1
    assert done.stderr.startswith("error: bad setting: serving on 0.0.0.0 needs JWT_SECRET")
    assert not (tmp_path / "jwt-secret").exists()


def test_bad_key_settings__one_line_and_the_secret_not_echoed(tmp_path):
    short = run("token", "--sub", "s", "--scope", "service", JWT_SECRET="hunter2-short")
    assert short.returncode == 1 and "JWT_SECRET" in short.stderr
    assert "hunter2" not in short.stderr and len(short.stderr.strip().splitlines()) == 1
    missing = run(
        "serve", JWT_SECRET="", JWT_PUBLIC_KEY=str(tmp_path / "none.pem"), DATA_DIR=str(tmp_path)
    )
    assert missing.returncode == 1 and missing.stderr.startswith(
        "error: bad setting: JWT_PUBLIC_KEY"
    )
    garbage = run("serve", JWT_SECRET="", JWT_PUBLIC_KEY="-----BEGIN PUBLIC KEY-----\nxx")
    assert garbage.returncode == 1 and "not a PEM public key" in garbage.stderr


def test_token__with_no_secret_where_it_looks_refuses_and_says_where(tmp_path):
    """Run from another folder, DATA_DIR (relative) points nowhere: no new secret is made
    (the server would refuse its tokens); the one error line names the path it looked at."""
    done = run("token", "--sub", "did:key:a", "--scope", "service", cwd=tmp_path, JWT_SECRET="")
    assert done.returncode == 1 and done.stdout == ""
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("error: ") and str(tmp_path / "data" / "jwt-secret") in line
    assert not (tmp_path / "data").exists()


@pytest.mark.parametrize(
    ("sub", "scope", "says"),
    [
        ("did:key:a", "operations:reed", "operations:reed"),
        ("did:key:a", "service metrcs", "metrcs"),
        ("did:key:a", " ", "none given"),
        ("", "service", "--sub"),
        ("  ", "service", "--sub"),
    ],
)
def test_token__misspelled_scope_or_empty_sub_refused(sub, scope, says):
    done = run("token", "--sub", sub, "--scope", scope)
    assert done.returncode == 1 and done.stdout == ""
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("error: ") and says in line


def test_bad_settings__a_check_of_several_shows_no_value_and_a_url_no_password(tmp_path):
    """A check across settings (its input: every setting) names them without echoing the
    secret or the database URL's password."""
    secret = "supersecretvalue-0123456789abcdef0123456789"
    url = "postgresql+asyncpg://postgres:hunter2@127.0.0.1:1/nowhere"
    joint = run(
        "serve",
        JWT_SECRET=secret,
        DATABASE_URL=url,
        RETAIN_EVENTS_SECONDS="10",
        DATA_DIR=str(tmp_path),
    )
    assert joint.returncode == 1 and "RETAIN_EVENTS_SECONDS" in joint.stderr, joint.stderr
    assert secret not in joint.stderr and "hunter2" not in joint.stderr
    assert len(joint.stderr.strip().splitlines()) == 1


def test_settings_problem__shows_a_bad_urls_value_without_its_password():
    class Url(pydantic.BaseModel):
        database_url: int

    with pytest.raises(pydantic.ValidationError) as refused:
        Url(database_url="postgresql://u:hunter2@db/x")

    said = settings_problem(refused.value)
    assert said.startswith("DATABASE_URL: ") and "postgresql://u:***@db/x" in said, said
