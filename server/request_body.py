"""``RequestBody``: a request's body bounded in size and time, as ASGI middleware."""

import asyncio
import logging

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from server.http_server import REFUSED_STATUS
from server.responses import (
    request_error,
)

log = logging.getLogger("connector_store")


class RequestBody:
    """Bounds a request's body, until it has all arrived (or a response has started):

    - larger than ``max_bytes`` (declared or streamed): 413;
    - not all arrived ``timeout_s`` seconds after the request's head: 408, and the
      connection is closed (``BODY_TIMEOUT_SECONDS``);
    - the client gone before it all arrived: nothing can be answered; the request is
      reported to the telemetry as status 499 (a client event, logged at INFO, never a
      500 with a traceback), or as the status the HTTP protocol answered it with before
      closing (``REFUSED_STATUS``: a body whose framing is too large). The start message is
      dropped by uvicorn, whose connection is closed (pinned by
      ``tests/test_http_server.py``'s client-gone test).
    """

    def __init__(self, app: ASGIApp, max_bytes: int, timeout_s: float) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.timeout_s = timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_bytes):
            await self.refuse(
                scope, 413, f"request body is larger than {self.max_bytes} bytes", send
            )
            return
        deadline = scope.get(BODY_DEADLINE) or asyncio.get_running_loop().time() + self.timeout_s
        seen = 0
        reading = True

        async def bounded() -> Message:
            nonlocal seen, reading
            if not reading:
                return await receive()
            try:
                async with asyncio.timeout_at(deadline):
                    message = await receive()
            except TimeoutError:
                raise BodyTooSlow from None
            if message["type"] == "http.disconnect":
                raise ClientGone
            seen += len(message.get("body", b""))
            if seen > self.max_bytes:
                raise BodyTooLarge
            reading = message.get("more_body", False)
            return message

        async def answering(message: Message) -> None:
            nonlocal reading
            reading = False
            await send(message)

        try:
            await self.app(scope, bounded, answering)
        except BodyTooLarge:
            await self.refuse(
                scope, 413, f"request body is larger than {self.max_bytes} bytes", send
            )
        except BodyTooSlow:
            log.info("request body not received within %s s: 408", self.timeout_s)
            await self.refuse(
                scope,
                408,
                f"the request body did not arrive within {self.timeout_s} s",
                send,
                headers={"Connection": "close"},
            )
        except ClientGone:
            log.info("the connection closed before the whole request body arrived")
            status = scope.get(REFUSED_STATUS, CLIENT_GONE)
            await send({"type": "http.response.start", "status": status, "headers": []})

    async def refuse(
        self,
        scope: Scope,
        status: int,
        message: str,
        send: Send,
        headers: dict[str, str] | None = None,
    ) -> None:
        response = request_error(status, message, headers=headers)
        await response(scope, empty_receive, send)


BODY_DEADLINE = "connector_store.body_deadline"
"""The ASGI scope key of when a request's body must have all arrived (the event loop's
clock), set by a lane in front that began to read it (``server.lean_lane``): the bound
is the one from the request's head, not restarted."""
CLIENT_GONE = 499
"""The status a request whose client went away is counted and logged with (nginx's)."""


async def empty_receive() -> Message:
    """A response needs no request body."""
    return {"type": "http.request", "body": b"", "more_body": False}


class BodyTooLarge(Exception):
    """Raised inside ``RequestBody`` when a streamed body passes the limit."""


class BodyTooSlow(Exception):
    """Raised inside ``RequestBody`` when the body has not all arrived in time."""


class ClientGone(Exception):
    """Raised inside ``RequestBody`` when the client disconnects before its body arrived."""
