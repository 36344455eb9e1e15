"""Where ``connector-store serve`` prints a sign-in link, in real ``serve`` runs on both
backends: only on a development server (its secret the one it made in ``DATA_DIR``), only to
a terminal (standard output a pseudo-terminal this test reads), and only with text logs;
never with a configured ``JWT_SECRET``, never into a file or pipe, never with
``LOG_FORMAT=json``: then neither standard output nor standard error holds a link, and the
output says how to get one (``sign-in-link``, which prints one when asked). The link it
prints signs in an admin with a subject of its own, never the workers' ``service``."""

import contextlib
import os
import select
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import jwt
import pytest

from server.app import create_app
from server.settings import Settings
from tests.api.test_sign_in import JWT, LOOPBACK_LOOKS, every_path, holds_a_token
from tests.ports import free_port
from tests.test_cli_auth import run

pytestmark = pytest.mark.slow

READY_TIMEOUT_S = 120.0
"""A bound against a hang, not a measure: a busy 2-core machine starts a server slowly."""
LINK = "#sign-in="


@dataclass
class Serving:
    """A ``serve`` process at ``url``: what it wrote to standard output (a terminal's, read
    through ``terminal``, or a file's) and to standard error, as far as it has written."""

    url: str
    process: subprocess.Popen[bytes]
    stdout_file: Path
    stderr_file: Path
    terminal: int | None

    def stdout(self) -> str:
        """What standard output holds: a terminal's output is kept in ``stdout_file`` as it
        is read; returned with ``\\n`` line ends (a terminal writes ``\\r\\n``)."""
        chunks = []
        while self.terminal is not None and select.select([self.terminal], [], [], 0)[0]:
            try:
                chunk = os.read(self.terminal, 65536)
            except OSError:
                break
            if not chunk:
                break
            chunks.append(chunk)
        with self.stdout_file.open("ab") as kept:
            kept.write(b"".join(chunks))
        return self.stdout_file.read_text(errors="replace").replace("\r\n", "\n")

    def stderr(self) -> str:
        return self.stderr_file.read_text(errors="replace")


@contextlib.contextmanager
def serving(tmp_path: Path, database_url: str, *, terminal: bool, **env: str) -> Iterator[Serving]:
    """``connector-store serve`` on a free port and ``database_url`` until the block ends,
    ready (``/readyz``); standard output a terminal when ``terminal``, else a file. ``env``
    adds to the environment; an empty value removes the variable."""
    port = free_port()
    environment = os.environ | {
        "DATABASE_URL": database_url,
        "DATA_DIR": str(tmp_path / "data"),
        "SWEEPER": "false",
    }
    for name, value in env.items():
        if value:
            environment[name] = value
        else:
            environment.pop(name, None)
    master, slave = os.openpty() if terminal else (None, None)
    stdout_file, stderr_file = tmp_path / "stdout", tmp_path / "stderr"
    stdout_file.touch()
    with stderr_file.open("wb") as errors, stdout_file.open("wb") as output:
        process = subprocess.Popen(
            [str(Path(sys.executable).with_name("connector-store")), "serve", "--port", str(port)],
            env=environment,
            cwd=tmp_path,
            stdin=subprocess.DEVNULL,
            stdout=output if slave is None else slave,
            stderr=errors,
        )
    if slave is not None:
        os.close(slave)
    served = Serving(f"http://127.0.0.1:{port}", process, stdout_file, stderr_file, master)
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not ready(served.url):
            assert process.poll() is None, f"serve exited\n{served.stdout()}\n{served.stderr()}"
            assert time.monotonic() < deadline, f"not ready\n{served.stdout()}\n{served.stderr()}"
            time.sleep(0.1)
        yield served
    finally:
        process.terminate()
        process.wait(timeout=30)
        served.stdout()
        served.terminal = None
        if master is not None:
            os.close(master)


def ready(url: str) -> bool:
    try:
        return httpx.get(url + "/readyz", timeout=1.0).status_code == 200
    except httpx.TransportError:
        return False


CASES = {
    "a configured JWT_SECRET, at a terminal": ({}, True, None),
    "its own secret, at a terminal": ({"JWT_SECRET": ""}, True, "/ui" + LINK),
    "its own secret, output to a file": ({"JWT_SECRET": ""}, False, None),
    "its own secret, LOG_FORMAT=json": ({"JWT_SECRET": "", "LOG_FORMAT": "json"}, True, None),
}


@pytest.mark.parametrize("case", CASES)
def test_serve__a_sign_in_link_only_on_a_development_servers_terminal(tmp_path, database_url, case):
    env, terminal, printed = CASES[case]
    with serving(tmp_path, database_url, terminal=terminal, **env) as served:
        stdout, stderr = served.stdout(), served.stderr()
        links = [line.strip() for line in stdout.splitlines() if LINK in line]
        opened = [
            httpx.post(served.url + "/auth/sign-in", json={"code": link.split(LINK, 1)[1]})
            for link in links[:1]
        ]
    assert LINK not in stderr, stderr
    if printed is None:
        assert links == [], stdout
        assert "`connector-store sign-in-link` prints a one-time link" in stdout, stdout
        return
    [link, graphiql] = links
    code = link.split(LINK, 1)[1]
    assert link == f"{served.url}{printed}{code}"
    assert graphiql == f"(GraphiQL: {served.url}/graphql{LINK}{code})"
    session = opened[0].json()
    assert opened[0].status_code == 200 and session["scope"] == "service", session
    assert session["sub"].startswith("session:") and session["sub"] != "service", session


def test_serve__its_own_secret_a_working_link_and_no_token_anywhere(tmp_path, database_url):
    """``serve`` as ``make run`` runs it in a terminal (no key: it makes its secret): it
    prints a sign-in link, and no token; no page or endpoint answers a token to a request
    from this machine (direct or through a proxy on it); the link's code opens a session
    once, and ``sign-in-link`` prints a fresh one, as ``token`` mints one, with that
    secret."""
    with serving(tmp_path, database_url, terminal=True, JWT_SECRET="") as served:
        url = served.url
        stdout = served.stdout()
        [pages] = [line for line in stdout.splitlines() if line.startswith("GraphiQL: ")]
        [link] = [line.strip() for line in stdout.splitlines() if line.strip().startswith(url)]
        code = link.split(LINK, 1)[1]
        holding = [
            (method, path, headers)
            for path in every_path(create_app(Settings()))
            for headers in LOOPBACK_LOOKS
            for method in ("GET", "POST")
            if holds_a_token(httpx.request(method, url + path, headers=headers))
        ]
        opened = httpx.post(url + "/auth/sign-in", json={"code": code})
        again = httpx.post(url + "/auth/sign-in", json={"code": code})
        token = opened.json()["token"]
        with_token = httpx.post(
            url + "/graphql",
            json={"query": "{ viewer { did scopes } }"},
            headers={"Authorization": f"Bearer {token}"},
        )
        port = url.rsplit(":", 1)[1]
        alone = {"DATA_DIR": str(tmp_path / "data"), "DATABASE_URL": database_url, "PORT": port}
        fresh = run("sign-in-link", "--page", "graphiql", cwd=tmp_path, JWT_SECRET="", **alone)
        fresh_link = fresh.stdout.strip().splitlines()[-1]
        fresh_opened = httpx.post(
            url + "/auth/sign-in", json={"code": fresh_link.split(LINK, 1)[1]}
        )
        minted = run("token", "--sub", "service", "--scope", "service", JWT_SECRET="", **alone)
    output = served.stdout() + served.stderr()
    assert pages == f"GraphiQL: {url}/graphql  dashboard: {url}/ui"
    assert holding == []
    assert not JWT.search(output)
    assert opened.status_code == 200 and again.status_code == 400
    assert "used already" in again.json()["errors"][0]["message"]
    viewer = with_token.json()["data"]["viewer"]
    assert viewer["did"] == opened.json()["sub"] and "service" in viewer["scopes"]
    secret = (tmp_path / "data" / "jwt-secret").read_text().strip()
    assert (tmp_path / "data" / "jwt-secret").stat().st_mode & 0o777 == 0o600
    assert secret not in output
    assert jwt.decode(token, secret, algorithms=["HS256"])["scope"] == "service"
    assert fresh.returncode == 0 and fresh_link.startswith(f"{url}/graphql{LINK}")
    assert fresh_opened.status_code == 200
    assert fresh_opened.json()["sub"] not in ("service", opened.json()["sub"])
    assert jwt.decode(minted.stdout.strip(), secret, algorithms=["HS256"])["sub"] == "service"
