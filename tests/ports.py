"""Ports for the servers the tests start: chosen by the operating system, never from a
fixed range that tests running beside each other (or a busy CI host) use up."""

import socket

_HANDED_OUT: set[int] = set()
"""Ports already given in this process: the system may offer a closed probe's port again."""


def free_port(exclude: set[int] | None = None) -> int:
    """A port of 127.0.0.1 nobody listens on, chosen by the system (a bind to port 0) and
    probed with ``SO_REUSEADDR`` as uvicorn binds, so a port some earlier connection left in
    TIME_WAIT counts as free; never one in ``exclude`` or one this process handed out."""
    unwanted = _HANDED_OUT | (exclude or set())
    while True:
        with socket.socket() as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if port not in unwanted:
            _HANDED_OUT.add(port)
            return port
