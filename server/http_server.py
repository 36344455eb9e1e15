"""The HTTP server: uvicorn, with the bounds it has no setting for, in this one place.

uvicorn bounds what it has settings for: the keep-alive wait between requests
(``KEEPALIVE_TIMEOUT_SECONDS``), how long shutdown waits for requests in flight
(``SHUTDOWN_GRACE_SECONDS``) and, with h11 only, the part of a request head still
incomplete after a read (``h11_max_incomplete_event_size``, set to ``MAX_HEADER_BYTES``;
a larger head that arrives whole in one read passes it). It has none for how long
a request's head may take to arrive (a silent connection, half a header, a header trickled
a byte at a time are held for ever), for a head's whole size, nor for how many connections
are held open, so ``Bounds`` adds them to uvicorn's HTTP/1.1 protocol of ``HTTP_PARSER``
(``BoundedHttpToolsProtocol``, the default: httptools parses in C; or
``BoundedH11Protocol``, pure Python), given to uvicorn through its public ``http=`` setting
(a protocol class):

- a request head (request line and headers) past ``MAX_HEADER_BYTES`` is answered 431 and
  the connection closed, before any token check, holding no more than one read's bytes;
- a connection whose request head is not complete ``HEADER_TIMEOUT_SECONDS`` after it
  opened (on a kept-alive connection: after the next request's first byte) is closed;
- past ``MAX_CONNECTIONS`` open connections, each new connection closes the connection idle
  longest (no request in flight), or itself when every connection is busy, so idle sockets
  never use up the process's file descriptors and ``/healthz`` still gets in;
- a connection whose client reads nothing of its response for ``SEND_TIMEOUT_SECONDS``
  (the server's write buffer full all that time) is closed, so a response left unread
  cannot hold its request (and its memory) for ever;
- a request body's framing (chunk sizes, extensions, trailers: its bytes on the wire less
  the body's own) past ``MAX_BODY_FRAMING_BYTES`` is answered 413 and the connection closed,
  so a body sent in a million one-byte chunks costs the event loop no more than a body sent
  whole (the request is counted 413); the bytes of each read are parsed a slice
  (``READ_SLICE``) at a time, so one read's worth of tiny chunks never runs long before the
  check;
- a response that starts before its request's body has all arrived (401, 413, 408, any early
  answer) says ``Connection: close`` (``CloseAfterEarlyAnswer``, around the application),
  so uvicorn closes the connection after it rather than reading and discarding the rest;
- a connection upgraded to a WebSocket leaves these deadlines behind but the send deadline:
  the WebSocket protocol (``BoundedWebSocketProtocol``, given through uvicorn's ``ws=``
  setting) aborts a client that reads nothing of its messages for ``SEND_TIMEOUT_SECONDS``
  (a subscriber too slow to keep up), and has its own pings; subscriptions have their own
  bounds (``server.live``);
- at shutdown, a request that has not started its response ``SHUTDOWN_GRACE_SECONDS``
  later is cut: cancelled and answered 503 ``SERVICE_UNAVAILABLE`` (retryable) with
  ``Connection: close`` by ``ShutdownCut``, logged at WARNING, counted as 503; a response
  already started has its connection closed.

A stalled request body is bounded at ASGI level (``server.request_body.RequestBody``).

What this relies on beyond uvicorn's public settings, pinned by
``tests/test_http_server.py`` for both protocols (``H11Protocol`` and ``HttpToolsProtocol``):
their ``connection_made``, ``data_received``, ``connection_lost``, ``on_response_complete``,
``handle_websocket_upgrade``, ``shutdown``, ``pause_writing`` and ``resume_writing`` hooks,
their ``loop`` and ``transport``, their ``connections`` set (the server's open connections),
and their ``cycle`` (the latest request whose head arrived, None before the first) with
``response_started``,
``response_complete``, ``more_body``, ``scope`` (the dict the application is called with)
and ``body`` (the body bytes parsed and not yet received by the application); and, for
``listening`` (a second port on the running loop, the metrics'), ``ServerState`` and the
protocol's constructor, as uvicorn's own server calls them; of ``WebSocketsSansIOProtocol``,
its ``pause_writing``, ``resume_writing`` and ``connection_lost`` hooks, its ``loop`` and
``transport``.
"""

import asyncio
import contextlib
import gc
import logging
import re
import resource
import socket
from collections.abc import AsyncIterator
from typing import Any, cast

import uvicorn
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from uvicorn.server import ServerState

from resolvers.codes import SERVICE_UNAVAILABLE
from server.responses import request_error
from server.settings import Settings
from store import background

log = logging.getLogger("connector_store.http")

FD_RESERVE = 64
"""File descriptors kept back from ``MAX_CONNECTIONS``'s automatic value, beyond three per
pooled database connection: log files, the event loop, the metrics port, migrations."""


def max_connections(settings: Settings) -> int:
    """``MAX_CONNECTIONS``, or (0, the default) the process's soft file-descriptor limit
    less three per pooled database connection and ``FD_RESERVE`` (at least 16)."""
    if settings.max_connections:
        return settings.max_connections
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        soft = 65536
    return max(16, soft - 3 * settings.db_pool_size - FD_RESERVE)


HEAD_END = re.compile(rb"\n\r?\n")
"""The blank line that ends a request head (h11 accepts a bare LF too)."""
HEAD_TOO_LARGE = (
    b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: text/plain\r\n"
    b"content-length: 30\r\nconnection: close\r\n\r\nrequest headers are too large\n"
)


def framing_too_large(max_body_framing_bytes: int) -> bytes:
    """The whole 413 the protocol writes itself for a body whose framing passed
    ``max_body_framing_bytes``: the JSON error shape (``PAYLOAD_TOO_LARGE``) of the
    application's refusals, then the connection closes."""
    body = request_error(
        413,
        "request body framing (chunk sizes, extensions, trailers) is larger than "
        f"{max_body_framing_bytes} bytes",
    ).body
    head = (
        "HTTP/1.1 413 Content Too Large\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode() + bytes(body)


READ_SLICE = 16 * 1024
"""Bytes of a read handed to the parser at once, so the framing is checked after each slice:
the parser calls Python once per chunk (about 6 µs), and one 256 KiB read of one-byte chunks
(43,000 of them) would hold the event loop a quarter of a second; a slice, under 20 ms."""
REFUSED_STATUS = "connector_store.refused_status"
"""The ASGI scope key where the protocol leaves the status it answered a request with on its
own (413 for its body's framing) before closing the connection; ``server.request_body.RequestBody``
reports that status rather than the disconnect's 499."""
SHUTDOWN_CUT = "connector_store.shutdown_cut"
"""The ASGI scope key of a request's cut (``ShutdownCut`` puts it there; the protocol calls
it when shutdown's grace ends before the response started)."""


class SendDeadline(asyncio.Protocol):
    """A deadline on a full write buffer, over the uvicorn protocol it is mixed into before:
    when the transport pauses writing (its buffer past the high-water mark) and has not
    resumed ``send_timeout_s`` later, the client has read nothing all that time and its
    connection is aborted (a plain close would wait for the unread buffer to drain), so an
    unread response or an unread stream of events holds no more than one buffer. What the
    log says of it is ``unread``."""

    loop: asyncio.AbstractEventLoop
    transport: asyncio.Transport
    send_timeout_s: float = 30.0
    unread: str = "http: closed a connection that read nothing of its response for %s s"
    send_deadline: asyncio.TimerHandle | None = None

    def pause_writing(self) -> None:
        super().pause_writing()
        if self.send_deadline is None:
            self.send_deadline = self.loop.call_later(self.send_timeout_s, self.reader_too_slow)

    def resume_writing(self) -> None:
        self.cancel_send_deadline()
        super().resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        self.cancel_send_deadline()
        super().connection_lost(exc)

    def cancel_send_deadline(self) -> None:
        if self.send_deadline is not None:
            self.send_deadline.cancel()
            self.send_deadline = None

    def reader_too_slow(self) -> None:
        self.send_deadline = None
        log.info(self.unread, self.send_timeout_s)
        self.transport.abort()


class Bounds(SendDeadline):
    """A deadline on each request head, a cap on open connections and a bounded shutdown
    (see the module docstring), over the uvicorn protocol it is mixed into before. The
    bounds are class attributes, set by ``bounded_protocol`` for one server."""

    connections: set[Any]
    cycle: Any

    header_timeout_s: float = 10.0
    max_header_bytes: int = 32 * 1024
    max_connections: int = 1000
    shutdown_grace_s: float = 10.0
    max_body_framing_bytes: int = 64 * 1024

    def connection_made(self, transport: asyncio.BaseTransport) -> None:  # type: ignore[override]
        super().connection_made(transport)  # type: ignore[arg-type]
        self.idle_since = self.loop.time()
        self.head_deadline: asyncio.TimerHandle | None = None
        self.head_bytes = 0
        self.head_tail = b""
        self.framing_cycle: Any = None
        self.framing_bytes = 0
        self.upgraded = False
        self.await_head()
        if len(self.connections) > self.max_connections:
            self.make_room()

    def data_received(self, data: bytes) -> None:
        if self.awaiting_head() and self.head_too_large(data):
            return
        for start in range(0, len(data), READ_SLICE):
            if self.transport.is_closing() or self.upgraded:
                return
            self.parse(data[start : start + READ_SLICE])
        if self.upgraded:
            return
        if self.in_flight():
            self.cancel_head_deadline()
        elif self.head_deadline is None:
            self.await_head()

    def handle_websocket_upgrade(self, *event: Any) -> None:
        """The connection becomes a WebSocket (uvicorn hands its transport to the WebSocket
        protocol): this protocol's deadlines stop, or the head deadline would close the
        WebSocket ``HEADER_TIMEOUT_SECONDS`` after it opened."""
        self.upgraded = True
        self.cancel_head_deadline()
        self.cancel_send_deadline()
        super().handle_websocket_upgrade(*event)  # type: ignore[misc]

    def on_response_complete(self) -> None:
        self.idle_since = self.loop.time()
        super().on_response_complete()  # type: ignore[misc]
        if self.in_flight():
            self.cancel_head_deadline()

    def connection_lost(self, exc: Exception | None) -> None:
        self.cancel_head_deadline()
        super().connection_lost(exc)

    def parse(self, piece: bytes) -> None:
        """Hand ``piece`` to the parser; what of it a body still arriving did not gain is
        that body's framing, counted against ``max_body_framing_bytes``. A piece in which
        a new request starts is not counted (it is at most ``READ_SLICE`` bytes)."""
        cycle = self.cycle if self.receiving_body() else None
        before = len(cycle.body) if cycle is not None else 0
        super().data_received(piece)  # type: ignore[misc]
        if cycle is None or cycle is not self.cycle:
            return
        if cycle is not self.framing_cycle:
            self.framing_cycle, self.framing_bytes = cycle, 0
        self.framing_bytes += len(piece) - (len(cycle.body) - before)
        if self.framing_bytes > self.max_body_framing_bytes:
            self.refuse_framing()

    def refuse_framing(self) -> None:
        """Answer 413 (``framing_too_large``, unless a response has started) and close, and
        say so."""
        log.info(
            "http: a request body's framing passed MAX_BODY_FRAMING_BYTES (%d): 413",
            self.max_body_framing_bytes,
        )
        self.cycle.scope[REFUSED_STATUS] = 413
        if not self.cycle.response_started:
            self.transport.write(framing_too_large(self.max_body_framing_bytes))
        self.transport.close()

    def shutdown(self) -> None:
        super().shutdown()  # type: ignore[misc]
        if not self.transport.is_closing():
            self.loop.call_later(self.shutdown_grace_s, self.grace_over)

    def grace_over(self) -> None:
        """Shutdown's grace is over: a request whose response has not started is cut
        (``ShutdownCut`` answers 503, after which uvicorn closes); otherwise the connection
        is closed."""
        if self.transport.is_closing():
            return
        waiting = self.in_flight() and not self.cycle.response_started
        cut = self.cycle.scope.get(SHUTDOWN_CUT) if waiting else None
        if cut is None:
            self.transport.close()
        else:
            cut()

    def in_flight(self) -> bool:
        """A request's head has arrived and its response is not complete."""
        return self.cycle is not None and not self.cycle.response_complete

    def awaiting_head(self) -> bool:
        """The next bytes start a request head: no request yet, or the last one's body all
        received, answered or not (a pipelined request's head is a head too; a body still
        arriving after an early answer, a 413 say, is not)."""
        return not self.receiving_body()

    def receiving_body(self) -> bool:
        """The latest request's body has not all arrived."""
        return self.cycle is not None and bool(self.cycle.more_body)

    def await_head(self) -> None:
        self.head_deadline = self.loop.call_later(self.header_timeout_s, self.head_too_slow)

    def cancel_head_deadline(self) -> None:
        if self.head_deadline is not None:
            self.head_deadline.cancel()
            self.head_deadline = None

    def head_too_slow(self) -> None:
        self.head_deadline = None
        if not self.in_flight() and not self.transport.is_closing():
            log.info(
                "http: closed a connection whose request head took over %s s",
                self.header_timeout_s,
            )
            self.transport.close()

    def head_too_large(self, data: bytes) -> bool:
        """Count ``data`` toward the request head being received (up to its blank line);
        past ``max_header_bytes``, answer 431 and close, and say so."""
        window = self.head_tail + data
        end = HEAD_END.search(window)
        size = self.head_bytes + (end.end() - len(self.head_tail) if end else len(data))
        self.head_bytes, self.head_tail = (0, b"") if end else (size, window[-2:])
        if size <= self.max_header_bytes:
            return False
        log.info("http: a request head passed MAX_HEADER_BYTES (%d): 431", self.max_header_bytes)
        self.transport.write(HEAD_TOO_LARGE)
        self.transport.close()
        return True

    def make_room(self) -> None:
        """Close the connection idle longest, or this one when none is idle."""
        idle = [
            connection
            for connection in self.connections
            if isinstance(connection, Bounds)
            and connection is not self
            and not connection.in_flight()
            and not connection.transport.is_closing()
        ]
        victim = min(idle, key=lambda connection: connection.idle_since) if idle else self
        log.info(
            "http: %d connections open (MAX_CONNECTIONS %d): closing the %s",
            len(self.connections),
            self.max_connections,
            "one idle longest" if idle else "new one (none is idle)",
        )
        victim.transport.close()


class BoundedHttpToolsProtocol(Bounds, HttpToolsProtocol):
    """uvicorn's httptools protocol with the bounds."""


class BoundedH11Protocol(Bounds, H11Protocol):
    """uvicorn's h11 protocol with the bounds."""


class BoundedWebSocketProtocol(SendDeadline, WebSocketsSansIOProtocol):
    """uvicorn's WebSocket protocol (its default, on websockets' sans-I/O implementation)
    with the send deadline: a client that reads nothing of its messages (a subscription's
    events) for ``SEND_TIMEOUT_SECONDS`` loses its connection, so the server holds no more
    than its write buffer and one page of each stream (``server.live``); the client sees
    the connection closed abnormally (1006) and resumes each stream with ``after``."""

    unread = (
        "websocket: closed a WebSocket that read nothing of its messages for %s s "
        "(its subscriptions resume with after)"
    )


PROTOCOLS: dict[str, type[Bounds]] = {
    "httptools": BoundedHttpToolsProtocol,
    "h11": BoundedH11Protocol,
}
"""The bounded protocol of each ``HTTP_PARSER``."""


def bounded_protocol(settings: Settings) -> type[Bounds]:
    """The bounded protocol of ``settings.http_parser`` with the bounds of ``settings``."""
    base = PROTOCOLS[settings.http_parser]
    return type(
        base.__name__,
        (base,),
        {
            "header_timeout_s": settings.header_timeout_seconds,
            "max_header_bytes": settings.max_header_bytes,
            "max_connections": max_connections(settings),
            "send_timeout_s": settings.send_timeout_seconds,
            "shutdown_grace_s": settings.shutdown_grace_seconds,
            "max_body_framing_bytes": settings.max_body_framing_bytes,
        },
    )


def bounded_ws_protocol(settings: Settings) -> type[BoundedWebSocketProtocol]:
    """The bounded WebSocket protocol with the send deadline of ``settings``."""
    return type(
        BoundedWebSocketProtocol.__name__,
        (BoundedWebSocketProtocol,),
        {"send_timeout_s": settings.send_timeout_seconds},
    )


def http_config(app: ASGIApp, settings: Settings, host: str, port: int) -> uvicorn.Config:
    """uvicorn's configuration for ``app`` on ``host:port`` with every bound of
    ``settings`` (a WebSocket message is bounded as a request body is). uvicorn's own
    graceful-shutdown timeout is a backstop one second after ours (for requests stuck on
    something other than their connection)."""
    return uvicorn.Config(
        CloseAfterEarlyAnswer(app),
        host=host,
        port=port,
        http=bounded_protocol(settings),
        ws=bounded_ws_protocol(settings),
        ws_max_size=settings.max_body_bytes,
        h11_max_incomplete_event_size=settings.max_header_bytes,
        timeout_keep_alive=settings.keepalive_timeout_seconds,
        timeout_graceful_shutdown=int(settings.shutdown_grace_seconds) + 1,
        log_level=settings.log_level,
        log_config=None,
        access_log=False,
    )


class CloseAfterEarlyAnswer:
    """ASGI middleware: a response that starts before its request's body has all been
    received by the application says ``Connection: close`` (any ``Connection`` header it had
    replaced), so uvicorn closes the connection once it is sent instead of reading and
    discarding the rest of the body, which a client without a token could make last for
    ever. A request without a body (no ``Transfer-Encoding``, ``Content-Length`` absent or
    0) keeps its connection."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not has_body(scope):
            await self.app(scope, receive, send)
            return
        all_received = False

        async def receive_noting() -> Message:
            nonlocal all_received
            message = await receive()
            if message["type"] != "http.request" or not message.get("more_body", False):
                all_received = True
            return message

        async def send_closing(message: Message) -> None:
            if message["type"] == "http.response.start" and not all_received:
                headers = [
                    (name, value)
                    for name, value in message.get("headers", [])
                    if name.lower() != b"connection"
                ]
                message = {**message, "headers": [*headers, (b"connection", b"close")]}
            await send(message)

        await self.app(scope, receive_noting, send_closing)


def has_body(scope: Scope) -> bool:
    """The request has a body to read: chunked, or a ``Content-Length`` other than 0."""
    headers = dict(scope["headers"])
    return b"transfer-encoding" in headers or headers.get(b"content-length", b"0") != b"0"


class ShutdownCut:
    """ASGI middleware (inside the request telemetry, which counts what it answers): a
    request still running when shutdown's grace (``SHUTDOWN_GRACE_SECONDS``) ends before its
    response started, on a lock wait say, is cancelled by the protocol (through
    ``SHUTDOWN_CUT``) and answered 503 ``SERVICE_UNAVAILABLE`` with ``retryable: true`` and
    ``Connection: close``, logged at WARNING without a traceback; uvicorn would otherwise
    cancel it a second later and log ERRORs with a traceback, the client answered nothing."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        task = asyncio.current_task()
        assert task is not None, "an ASGI request runs in a task"
        cut = False

        def cut_now() -> None:
            nonlocal cut
            cut = True
            task.cancel()

        scope[SHUTDOWN_CUT] = cut_now
        try:
            await self.app(scope, receive, send)
            return
        except asyncio.CancelledError:
            if not cut:
                raise
            task.uncancel()
        await cut_answer()(scope, receive, send)


def cut_answer() -> JSONResponse:
    """The answer to a request cut at shutdown (``ShutdownCut``, ``server.lean_lane``):
    503 ``SERVICE_UNAVAILABLE``, retryable, ``Connection: close``; logged at WARNING."""
    log.warning("http: shutdown's grace ended with a request still running: cut, answered 503")
    return request_error(
        503,
        "the server is shutting down; send the request again",
        headers={"Connection": "close"},
        code=SERVICE_UNAVAILABLE,
        retryable=True,
    )


class PortUnavailable(Exception):
    """A port the server would listen on cannot be bound; the message says which and why."""


def check_port(host: str, port: int, setting: str) -> None:
    """Bind ``host:port`` as uvicorn will (address reuse on) and let it go; raises
    ``PortUnavailable`` naming ``setting`` when it cannot be bound. Port 0 (any) passes."""
    if port == 0:
        return
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as error:
            raise PortUnavailable(
                f"cannot listen on {host}:{port} ({error.strerror}); "
                f"stop what uses it or choose another {setting}"
            ) from None


def serve_http(
    app: ASGIApp,
    settings: Settings,
    host: str,
    port: int,
    sockets: list[socket.socket] | None = None,
) -> None:
    """Serve ``app`` until SIGTERM or SIGINT, on ``host:port`` or on ``sockets`` already
    bound (a worker's, ``server.workers``), the objects made at startup frozen first
    (``freeze_startup_objects``)."""
    config = http_config(app, settings, host, port)
    freeze_startup_objects()
    uvicorn.Server(config).run(sockets=sockets)


def freeze_startup_objects() -> None:
    """Move every object alive now (modules, the schema, the app) out of the cyclic garbage
    collector's sight (``gc.freeze``): they live as long as the process, and each full
    collection walked all of them again, about a sixth of a request's CPU under load
    (``benchmarks/load.py``: 3.4 → 2.8 ms of server CPU per lifecycle)."""
    gc.collect()
    gc.freeze()


@contextlib.asynccontextmanager
async def listening(app: ASGIApp, settings: Settings, host: str, port: int) -> AsyncIterator[None]:
    """Serve ``app`` (no lifespan) on ``host:port`` on the running event loop for the block,
    with every bound of ``serve_http``: the metrics port beside the API's server. When the
    block ends its connections are closed and its requests still running given the
    shutdown's grace (``SHUTDOWN_GRACE_SECONDS``, then uvicorn's backstop a second later),
    as ``serve_http``'s at SIGTERM; those still running then are cancelled. It returns once
    every request it ran has ended."""
    config = http_config(app, settings, host, port)
    config.load()
    protocol = cast(type[Bounds], config.http_protocol_class)
    state = ServerState()
    server = await asyncio.get_running_loop().create_server(
        lambda: protocol(config=config, server_state=state, app_state={}),  # type: ignore[call-arg]
        host=host,
        port=port,
    )
    try:
        yield
    finally:
        server.close()
        for connection in list(state.connections):
            connection.shutdown()
        if state.tasks:
            _, late = await asyncio.wait(set(state.tasks), timeout=config.timeout_graceful_shutdown)
            if late:
                log.warning("http: %d request(s) outlived shutdown's grace: cancelled", len(late))
                await background.stop(*late)
        await server.wait_closed()
