"""The HTTP server's bounds (``server/http_server.py`` and
``server.request_body.RequestBody``), with raw sockets against a real ``connector-store
serve`` process: slow and silent clients are closed in bounded time, headers are bounded in
size, idle sockets never use up the file descriptors, a client gone mid-body is a 499 at
INFO, and SIGTERM ends a stalled upload within the grace. Short bounds keep each test to a
second or two."""

import asyncio
import contextlib
import gc
import inspect
import json
import signal
import socket
import sqlite3
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import asyncpg
import httpx
import pytest
from graphql import get_introspection_query
from starlette.types import Receive
from uvicorn.config import Config
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.protocols.http.h11_impl import RequestResponseCycle as H11Cycle
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.protocols.http.httptools_impl import RequestResponseCycle as HttpToolsCycle
from uvicorn.server import ServerState

from server.http_server import PROTOCOLS, Bounds, freeze_startup_objects, http_config, listening
from server.settings import Settings
from store.migrate import upgrade
from tests.databases import PostgresRun
from tests.faults.harness import Server, kill_started
from tests.ports import free_port
from tests.tokens import SERVICE_TOKEN

# Real processes (a `connector-store` command or server): left out of `make test-fast`.
pytestmark = pytest.mark.slow

HEADER_TIMEOUT_S = 1.0
BODY_TIMEOUT_S = 1.0
BOUNDS = {
    "HEADER_TIMEOUT_SECONDS": str(HEADER_TIMEOUT_S),
    "BODY_TIMEOUT_SECONDS": str(BODY_TIMEOUT_S),
    "MAX_HEADER_BYTES": "8192",
    "KEEPALIVE_TIMEOUT_SECONDS": "1",
    "SEND_TIMEOUT_SECONDS": "1",
    "LOG_LEVEL": "info",
    "LOG_FORMAT": "json",
    "SWEEPER": "false",
}
SLACK_S = 2.0
"""What a bound may be overshot by on a busy machine before the test calls it unbounded."""


@pytest.fixture(autouse=True, scope="module")
def no_server_left() -> Iterator[None]:
    yield
    kill_started()


def sqlite_server(folder: Path, name: str, **env: str) -> Server:
    url = f"sqlite+aiosqlite:///{folder / 'http.db'}"
    return Server(url, free_port(), folder / f"{name}.log", BOUNDS | env)


@pytest.fixture(scope="module", params=["httptools", "h11"])
def bounded(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[Server]:
    """One server with short bounds for the module's quick tests, on each ``HTTP_PARSER``."""
    folder = tmp_path_factory.mktemp("http")
    api_port = free_port()
    running = Server(
        f"sqlite+aiosqlite:///{folder / 'http.db'}",
        api_port,
        folder / "bounded.log",
        BOUNDS | {"METRICS_PORT": str(free_port(exclude={api_port})), "HTTP_PARSER": request.param},
    ).start()
    running.wait_ready()
    yield running
    running.kill()


def connect(server: Server) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    sock.settimeout(10)
    return sock


def read_until_closed(sock: socket.socket) -> tuple[bytes, float]:
    """Everything the server sends until it closes the connection, and when it closed."""
    received = b""
    while True:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            break
        if not chunk:
            break
        received += chunk
    return received, time.monotonic()


def read_response(sock: socket.socket) -> bytes:
    """One whole response to a request of ``/healthz``."""
    received = b""
    while not received.endswith(b'"ok"}'):
        chunk = sock.recv(65536)
        assert chunk, received
        received += chunk
    return received


def read_response_head(sock: socket.socket) -> bytes:
    """The status line and headers of the next response."""
    received = b""
    while b"\r\n\r\n" not in received:
        chunk = sock.recv(65536)
        assert chunk, received
        received += chunk
    return received


def request_head(body_length: int) -> bytes:
    return (
        "POST /graphql HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
        f"Authorization: Bearer {SERVICE_TOKEN}\r\nContent-Length: {body_length}\r\n\r\n"
    ).encode()


def log_entries(server: Server) -> list[dict[str, object]]:
    return [json.loads(line) for line in server.output().splitlines() if line.startswith("{")]


@pytest.mark.parametrize(
    ("protocol_class", "cycle_class"),
    [(HttpToolsProtocol, HttpToolsCycle), (H11Protocol, H11Cycle)],
    ids=["httptools", "h11"],
)
def test_http_protocol__has_what_the_bounded_protocol_relies_on(protocol_class, cycle_class):
    """``Bounds`` overrides these hooks and reads these attributes of both protocols; a
    uvicorn that renamed one would leave a bound silently unenforced."""
    for hook in (
        "connection_made",
        "data_received",
        "connection_lost",
        "on_response_complete",
        "shutdown",
        "pause_writing",
        "resume_writing",
    ):
        assert callable(getattr(protocol_class, hook)), hook
    config = Config(app=lambda scope, receive, send: None)
    config.load()
    state = ServerState()
    loop = asyncio.new_event_loop()
    try:
        protocol = protocol_class(config=config, server_state=state, app_state={}, _loop=loop)
        assert protocol.cycle is None
        assert protocol.connections is state.connections
        assert protocol.loop is loop
        assert "transport" in vars(protocol)
    finally:
        loop.close()
    source = inspect.getsource(cycle_class.__init__)
    assert "self.response_complete = False" in source
    assert "self.response_started = False" in source
    assert "self.more_body = True" in source
    assert "self.body = " in source
    assert "self.scope = scope" in source


@pytest.mark.parametrize("parser", ["httptools", "h11"])
def test_http_parser__each_setting_serves_its_bounded_protocol(parser):
    config = http_config(
        lambda scope, receive, send: None, Settings(http_parser=parser), "127.0.0.1", 0
    )
    config.load()
    assert config.http_protocol_class.__mro__[1] is PROTOCOLS[parser]
    assert issubclass(config.http_protocol_class, Bounds)


@pytest.mark.parametrize(
    "sent",
    [b"", b"POST /graphql HTTP/1.1\r\nHost: local"],
    ids=["nothing", "half_a_header"],
)
def test_header_timeout__silent_or_half_header_connection_closed(bounded, sent):
    with connect(bounded) as sock:
        opened = time.monotonic()
        sock.sendall(sent)
        _, closed = read_until_closed(sock)
        assert closed - opened < HEADER_TIMEOUT_S + SLACK_S


def test_header_timeout__header_trickled_a_byte_at_a_time_closed(bounded):
    with connect(bounded) as sock:
        opened = time.monotonic()
        head = b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nX-Slow: " + b"a" * 1000
        closed_early = False
        for byte in head:
            try:
                sock.sendall(bytes([byte]))
            except (BrokenPipeError, ConnectionResetError):
                closed_early = True
                break
            time.sleep(0.2)
            if time.monotonic() - opened > HEADER_TIMEOUT_S + SLACK_S:
                break
        if not closed_early:
            sock.settimeout(0.5)
            with contextlib.suppress(ConnectionResetError):
                assert sock.recv(1) == b""
        assert time.monotonic() - opened < HEADER_TIMEOUT_S + SLACK_S + 0.5


HEALTHZ = b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n"


def test_keepalive_timeout__idle_connection_closed_after_its_response(bounded):
    with connect(bounded) as sock:
        sock.sendall(HEALTHZ)
        answered = time.monotonic()
        received, closed = read_until_closed(sock)
    assert received.startswith(b"HTTP/1.1 200")
    assert closed - answered < 1 + SLACK_S


def test_header_timeout__next_request_head_on_a_kept_alive_connection_bounded_too(bounded):
    """The keep-alive timer stops at the next request's first byte; the head deadline then
    bounds the rest of that head."""
    with connect(bounded) as sock:
        sock.sendall(HEALTHZ)
        assert read_response(sock).startswith(b"HTTP/1.1 200")
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: loc")
        started = time.monotonic()
        received, closed = read_until_closed(sock)
    assert received == b""
    assert closed - started < HEADER_TIMEOUT_S + SLACK_S


def header_of(size: int) -> bytes:
    head = b"GET /graphql?query={__typename} HTTP/1.1\r\nHost: localhost\r\nX-Big: "
    return head + b"a" * (size - len(head) - 4) + b"\r\n\r\n"


def test_metrics_port__served_with_the_same_head_deadline(bounded):
    port = int(bounded.env["METRICS_PORT"])
    assert "connector_requests_total" in httpx.get(f"http://127.0.0.1:{port}/metrics").text
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        opened = time.monotonic()
        sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: loc")
        _, closed = read_until_closed(sock)
    assert closed - opened < HEADER_TIMEOUT_S + SLACK_S


def test_max_header_bytes__header_past_the_limit_refused_before_any_token(bounded):
    """12 KiB: past ``MAX_HEADER_BYTES`` (8 KiB here), within h11's own default (16 KiB)."""
    with connect(bounded) as sock:
        sock.sendall(header_of(12 * 1024))
        received, _ = read_until_closed(sock)
    assert received.startswith(b"HTTP/1.1 431"), received[:100]


def test_max_header_bytes__huge_header_closed_without_being_read(bounded):
    with connect(bounded) as sock:
        try:
            sock.sendall(header_of(64 * 1024 * 1024))
        except (BrokenPipeError, ConnectionResetError):
            return
        received, _ = read_until_closed(sock)
    assert received.startswith(b"HTTP/1.1 431"), received[:100]


class Recorded(asyncio.Transport):
    """A transport that keeps what the protocol writes and whether it closed."""

    def __init__(self) -> None:
        super().__init__()
        self.written = b""
        self.closed = False

    def get_extra_info(self, name: str, default: object = None) -> object:
        return default

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.written += bytes(data)

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


async def test_listening__a_request_still_running_when_the_block_ends_has_ended_when_it_returns():
    """Past the shutdown's grace and uvicorn's backstop a request that ignores both is
    cancelled: nothing the server ran goes on after it (on the API's event loop, beside
    the metrics port's server)."""
    started, ended = asyncio.Event(), asyncio.Event()

    async def ignores_everything(scope: object, receive: object, send: object) -> None:
        started.set()
        try:
            await asyncio.Event().wait()
        finally:
            ended.set()

    port = free_port()
    async with listening(
        ignores_everything, Settings(shutdown_grace_seconds=0.1), "127.0.0.1", port
    ):
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n")
        async with asyncio.timeout(10):
            await started.wait()
    assert ended.is_set()
    writer.close()


@pytest.mark.parametrize("parser", ["httptools", "h11"])
async def test_max_header_bytes__a_pipelined_head_past_the_limit_refused_while_one_is_in_flight(
    parser,
):
    """A head pipelined behind a request still in flight is counted too: httptools parses it
    at once and would keep a head that never ends in memory."""

    async def never_answers(scope: object, receive: Receive, send: object) -> None:
        """Reads the request, then waits for the client to go without answering it."""
        while (await receive())["type"] != "http.disconnect":
            pass

    settings = Settings(http_parser=parser, max_header_bytes=8192)
    config = http_config(never_answers, settings, "127.0.0.1", 0)
    config.load()
    protocol = config.http_protocol_class(config=config, server_state=ServerState(), app_state={})
    transport = Recorded()
    protocol.connection_made(transport)
    protocol.data_received(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
    await asyncio.sleep(0)
    assert protocol.in_flight()
    protocol.data_received(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nX-Big: ")
    for _ in range(64):
        if transport.closed:
            break
        protocol.data_received(b"a" * 1024)
    assert transport.written.startswith(b"HTTP/1.1 431"), transport.written[:100]
    assert transport.closed
    protocol.connection_lost(None)


def test_max_header_bytes__get_query_string_past_the_limit_refused(bounded):
    """A GET's query and variables travel in the request line, which the same limit bounds."""
    target = b"/graphql?query={__typename}&variables=" + b"a" * 12 * 1024
    with connect(bounded) as sock:
        sock.sendall(b"GET " + target + b" HTTP/1.1\r\nHost: localhost\r\n\r\n")
        received, _ = read_until_closed(sock)
    assert received.startswith(b"HTTP/1.1 431"), received[:100]


def test_max_header_bytes__header_within_the_limit_reaches_the_token_check(bounded):
    with connect(bounded) as sock:
        sock.sendall(header_of(6 * 1024))
        assert sock.recv(65536).startswith(b"HTTP/1.1 401")


def test_max_header_bytes__a_refused_body_still_arriving_is_not_taken_for_a_head(bounded):
    """An upload answered 413 early keeps arriving: its bytes are body, never a 431."""
    with connect(bounded) as sock:
        sock.sendall(request_head(10 * 1024 * 1024) + b'{"query": ')
        answer = read_response_head(sock)
        assert answer.startswith(b"HTTP/1.1 413"), answer
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            sock.sendall(b"x" * (64 * 1024))
        sock.settimeout(1)
        more = b""
        with contextlib.suppress(TimeoutError, ConnectionResetError):
            while chunk := sock.recv(65536):
                more += chunk
    assert b"431" not in more, more


def chunked_head(token: str | None) -> bytes:
    authorization = f"Authorization: Bearer {token}\r\n" if token else ""
    return (
        "POST /graphql HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
        f"{authorization}Transfer-Encoding: chunked\r\n\r\n"
    ).encode()


def test_early_answer__a_401_before_the_body_closes_the_connection_instead_of_draining(bounded):
    """No token, a chunked body still arriving: the 401 says ``Connection: close`` and the
    connection closes, however long the client would go on sending."""
    with connect(bounded) as sock:
        sock.sendall(chunked_head(None) + b"1\r\n{\r\n" * 10)
        started = time.monotonic()
        received, closed = read_until_closed(sock)
    assert received.startswith(b"HTTP/1.1 401"), received[:200]
    assert b"connection: close" in received.lower()
    assert closed - started < SLACK_S


def test_early_answer__a_body_less_request_keeps_its_connection(bounded):
    with connect(bounded) as sock:
        for _ in range(2):
            sock.sendall(HEALTHZ)
            answer = read_response(sock)
            assert answer.startswith(b"HTTP/1.1 200")
            assert b"connection: close" not in answer.lower()


def send_one_byte_chunks(sock: socket.socket, count: int) -> None:
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        for _ in range(count // 10_000):
            sock.sendall(b"1\r\n \r\n" * 10_000)


def test_max_body_framing_bytes__a_body_of_one_byte_chunks_refused_413_and_closed(bounded):
    """200,000 one-byte chunks (1.2 MB on the wire for a 200 KB body, within
    ``MAX_BODY_BYTES``), with a valid token: refused once the framing passes 64 KiB, in the
    JSON error shape of every 413, the connection closed, and ``/healthz`` answers
    meanwhile."""
    with connect(bounded) as sock:
        sock.sendall(chunked_head(SERVICE_TOKEN))
        started = time.monotonic()
        send_one_byte_chunks(sock, 200_000)
        received, closed = read_until_closed(sock)
        assert httpx.get(bounded.url + "/healthz", timeout=SLACK_S).status_code == 200
    assert received.startswith(b"HTTP/1.1 413"), received[:200]
    head, body = received.split(b"\r\n\r\n", 1)
    assert b"content-type: application/json" in head.lower()
    assert json.loads(body) == {
        "errors": [
            {
                "message": "request body framing (chunk sizes, extensions, trailers) is larger "
                "than 65536 bytes",
                "extensions": {"code": "PAYLOAD_TOO_LARGE"},
            }
        ]
    }
    assert closed - started < SLACK_S
    assert "MAX_BODY_FRAMING_BYTES" in bounded.output()


def test_max_body_framing_bytes__a_chunked_body_of_ordinary_chunks_is_answered(bounded):
    body = json.dumps({"query": "{ __typename }", "variables": {"pad": "x" * 200_000}})
    chunks = [body[i : i + 1024].encode() for i in range(0, len(body), 1024)]
    framed = b"".join(b"%x\r\n%s\r\n" % (len(chunk), chunk) for chunk in chunks) + b"0\r\n\r\n"
    with connect(bounded) as sock:
        sock.sendall(chunked_head(SERVICE_TOKEN) + framed)
        answer = read_response_head(sock)
    assert answer.startswith(b"HTTP/1.1 200"), answer


def test_body_timeout__stalled_body_answered_408_and_closed(bounded):
    with connect(bounded) as sock:
        sock.sendall(request_head(1000) + b'{"query": ')
        started = time.monotonic()
        received, closed = read_until_closed(sock)
        assert received.startswith(b"HTTP/1.1 408"), received[:200]
        assert closed - started < BODY_TIMEOUT_S + SLACK_S


def test_body_timeout__a_body_that_arrives_in_time_is_answered(bounded):
    body = json.dumps({"query": "{ __typename }"}).encode()
    with connect(bounded) as sock:
        sock.sendall(request_head(len(body)) + body[:5])
        time.sleep(BODY_TIMEOUT_S / 4)
        sock.sendall(body[5:])
        assert sock.recv(65536).startswith(b"HTTP/1.1 200")


def test_client_gone_mid_body__logged_at_info_as_499_never_a_500(bounded):
    with connect(bounded) as sock:
        sock.sendall(request_head(1000) + b'{"query": ' + b"x-gone-mid-body")
        time.sleep(0.2)
        sock.close()
        deadline = time.monotonic() + 5
        lines: list[dict[str, object]] = []
        while time.monotonic() < deadline and not lines:
            time.sleep(0.1)
            lines = [
                entry
                for entry in log_entries(bounded)
                if entry.get("logger") == "connector_store.request" and entry.get("status") == 499
            ]
        assert lines, bounded.output()
        assert all(entry["level"] == "info" for entry in lines)
        output = bounded.output()
        assert "Traceback" not in output
        assert '"status": 500' not in output


def test_send_timeout__a_response_left_unread_is_cut_and_the_connection_closed(bounded):
    """A client that never reads (its receive window shut) large answers (40 pipelined
    introspections of the schema, 5 MB) loses its connection after ``SEND_TIMEOUT_SECONDS``:
    aborted (a plain close would wait for the unread answers to drain)."""
    query = json.dumps({"query": get_introspection_query(descriptions=True)}).encode()
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.settimeout(10)
        sock.connect(("127.0.0.1", bounded.port))
        sock.sendall((request_head(len(query)) + query) * 40)
        deadline = time.monotonic() + 1 + SLACK_S + 3
        lines: list[str] = []
        while time.monotonic() < deadline and not lines:
            time.sleep(0.2)
            lines = [line for line in bounded.output().splitlines() if "read nothing" in line]
        assert lines, "the unread response's connection was not closed"
        with pytest.raises((BrokenPipeError, ConnectionResetError)):  # the server's end is gone
            for _ in range(50):
                sock.sendall(b"x" * 1024)
                time.sleep(0.05)


def test_max_connections__healthz_answers_under_300_idle_sockets_with_256_fds(tmp_path):
    running = sqlite_server(tmp_path, "fds", HEADER_TIMEOUT_SECONDS="60")
    running.nofile = 256
    running.start()
    running.wait_ready()
    idle = [connect(running) for _ in range(300)]
    try:
        response = httpx.get(running.url + "/healthz", timeout=5)
        assert response.status_code == 200
    finally:
        for sock in idle:
            sock.close()
    assert "MAX_CONNECTIONS" in running.output()


def test_max_connections__every_connection_busy_the_new_one_is_closed(tmp_path):
    running = sqlite_server(tmp_path, "busy", MAX_CONNECTIONS="2", BODY_TIMEOUT_SECONDS="60")
    running.start()
    running.wait_ready()
    with connect(running) as first, connect(running) as second:
        for busy in (first, second):
            busy.sendall(request_head(1000) + b'{"query": ')
        time.sleep(0.3)
        with connect(running) as third:
            received, _ = read_until_closed(third)
        assert received == b""
        first.settimeout(0.3)
        with pytest.raises(TimeoutError):
            first.recv(1)
    assert "closing the new one (none is idle)" in running.output()


@pytest.fixture(params=["sqlite", "postgres"])
async def backend_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    if request.param == "sqlite":
        url = f"sqlite+aiosqlite:///{tmp_path / 'shutdown.db'}"
        await asyncio.to_thread(upgrade, url)
        yield url
        return
    run = PostgresRun()
    url = await run.create()
    try:
        yield url
    finally:
        await run.drop()


async def test_sigterm__a_stalled_upload_is_cut_after_the_grace_and_the_process_exits(
    backend_url, tmp_path
):
    grace_s = 1.0
    running = Server(
        backend_url,
        free_port(),
        tmp_path / "shutdown.log",
        BOUNDS | {"BODY_TIMEOUT_SECONDS": "60", "SHUTDOWN_GRACE_SECONDS": str(grace_s)},
    ).start()
    await asyncio.to_thread(running.wait_ready)
    with connect(running) as sock:
        sock.sendall(request_head(1000) + b'{"query": ')
        await asyncio.sleep(0.3)
        assert running.process is not None
        signalled = time.monotonic()
        running.process.send_signal(signal.SIGTERM)
        code = await asyncio.to_thread(running.process.wait, 30)
        exited = time.monotonic()
        sock.close()
        output = running.output()
        assert code in (0, -signal.SIGTERM), output
        assert exited - signalled < grace_s + SLACK_S + 1, output
        entries = log_entries(running)
        assert not [entry for entry in entries if entry["level"] == "error"], output
        assert "Traceback" not in output


def test_freeze_startup_objects__what_lives_now_is_out_of_the_collectors_sight():
    try:
        freeze_startup_objects()
        assert gc.get_freeze_count() > 0
        assert gc.get_count()[2] == 0
    finally:
        gc.unfreeze()


@contextlib.asynccontextmanager
async def sync_state_locked(url: str) -> AsyncIterator[None]:
    """A peer session holding a write lock on the sync-state table for the block."""
    if url.startswith("sqlite"):
        peer = sqlite3.connect(url.split("///", 1)[1], isolation_level=None)
        peer.execute("BEGIN IMMEDIATE")
        try:
            yield
        finally:
            peer.execute("ROLLBACK")
            peer.close()
        return
    connection = await asyncpg.connect(url.replace("+asyncpg", ""))
    transaction = connection.transaction()
    await transaction.start()
    await connection.execute("LOCK TABLE kubun_connector_sync_state IN ACCESS EXCLUSIVE MODE")
    try:
        yield
    finally:
        await transaction.rollback()
        await connection.close()


SET_SYNC_STATE = json.dumps(
    {
        "query": 'mutation { setSyncState(input: {connectorName: "c", ownerDID: "did:v", '
        'lastSyncedAt: "2026-01-01T00:00:00+00:00", entityCount: 0, status: IDLE}) '
        "{ syncState { version } } }"
    }
).encode()


async def test_sigterm__a_request_waiting_on_a_lock_at_the_end_of_the_grace_gets_a_retryable_503(
    backend_url, tmp_path
):
    """A write waiting on a peer's lock (for up to 20 s) when SIGTERM's grace ends: answered
    503 SERVICE_UNAVAILABLE, retryable, ``Connection: close``, within the grace; counted
    503; no ERROR, no traceback. (The process exits once the peer lets go: on SQLite the
    cancelled statement's thread waits out its busy timeout.)"""
    grace_s = 1.0
    running = Server(
        backend_url,
        free_port(),
        tmp_path / "cut.log",
        BOUNDS
        | {
            "SHUTDOWN_GRACE_SECONDS": str(grace_s),
            "DB_WAIT_TIMEOUT_SECONDS": "30",
            "DB_LOCK_TIMEOUT_SECONDS": "20",
        },
    ).start()
    await asyncio.to_thread(running.wait_ready)
    async with sync_state_locked(backend_url):
        with connect(running) as sock:
            sock.sendall(request_head(len(SET_SYNC_STATE)) + SET_SYNC_STATE)
            await asyncio.sleep(0.5)
            assert running.process is not None
            signalled = time.monotonic()
            running.process.send_signal(signal.SIGTERM)
            received, answered = await asyncio.to_thread(read_until_closed, sock)
    code = await asyncio.to_thread(running.process.wait, 30)
    output = running.output()
    assert received.startswith(b"HTTP/1.1 503"), output
    assert b"connection: close" in received.lower()
    error = json.loads(received.split(b"\r\n\r\n", 1)[1])["errors"][0]
    assert error["extensions"] == {"code": "SERVICE_UNAVAILABLE", "retryable": True}
    assert code in (0, -signal.SIGTERM), output
    assert answered - signalled < grace_s + SLACK_S, output
    entries = log_entries(running)
    assert not [entry for entry in entries if entry["level"] == "error"], output
    assert "Traceback" not in output
    assert [entry for entry in entries if entry.get("status") == 503], output
