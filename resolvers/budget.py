"""What one request may still load: rows and bytes.

Rows: a list's ``first``/``limit`` and a nested list's rows are taken from
``MAX_ROWS_PER_REQUEST`` before they are read, so aliases and nesting cannot multiply one
page. Bytes: every list read gets what is left of ``MAX_RESPONSE_BYTES`` as its allowance
(the store stops before the rows past it are sent, ``store.sizes``), and the reader
(``resolvers.visible``) spends each row it returns at its measured size. A list asked for
once the bytes are spent, or whose first row alone passes what is left, answers
``RESPONSE_TOO_LARGE``.
"""

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from graphql import GraphQLError

from resolvers.codes import RESPONSE_TOO_LARGE
from resolvers.errors import bad_input

MAX_ROWS_PER_REQUEST = 1000
DEFAULT_MAX_RESPONSE_BYTES = 8 * 1024 * 1024
"""``MAX_RESPONSE_BYTES``' default."""


@dataclass
class Budget:
    """One request's budget: ``rows_left`` of ``MAX_ROWS_PER_REQUEST`` and ``bytes_left``
    of ``max_bytes`` (the rows' sizes as ``store.sizes`` measures them)."""

    max_bytes: int = DEFAULT_MAX_RESPONSE_BYTES
    rows_left: int = MAX_ROWS_PER_REQUEST
    bytes_left: int = field(init=False)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock, repr=False)

    def __post_init__(self) -> None:
        self.bytes_left = self.max_bytes

    def take(self, field: str, rows: int) -> None:
        """Spend ``rows``; raise ``BAD_USER_INPUT`` naming ``field`` when they are not left."""
        if rows > self.rows_left:
            raise bad_input(
                field,
                f"one request may list at most {MAX_ROWS_PER_REQUEST} rows in all; "
                "ask for fewer or page with `after`",
            )
        self.rows_left -= rows

    @asynccontextmanager
    async def reading(self, field: str) -> AsyncIterator[int]:
        """One list read of the request at a time (its aliases and loaders resolve
        concurrently): yields the read's ``allowance``; spend what it returns before the
        block ends, so the next read is allowed only what is left."""
        async with self.lock:
            yield self.allowance(field)

    @property
    def untouched(self) -> bool:
        """No list of this request has spent bytes yet, so its read may return a first row
        past the allowance (``spend``); a store read that leases takes it as
        ``at_least_one``."""
        return self.bytes_left >= self.max_bytes

    def allowance(self, field: str) -> int:
        """The bytes a list read of ``field`` may load; ``RESPONSE_TOO_LARGE`` naming
        ``field`` when none are left."""
        if self.bytes_left <= 0:
            raise self.too_large(field)
        return self.bytes_left

    def spend(self, field: str, sizes: list[int]) -> None:
        """Spend the bytes of the rows ``field`` returns (their ``sizes``). Only the first
        list of a request may pass what is left (by its first row, which a list always
        returns so a client paging on moves forward); any other raises
        ``RESPONSE_TOO_LARGE`` naming ``field``."""
        spent = sum(sizes)
        if spent > self.bytes_left and self.bytes_left < self.max_bytes:
            raise self.too_large(field)
        self.bytes_left -= spent

    def too_large(self, field: str) -> GraphQLError:
        """``RESPONSE_TOO_LARGE`` naming ``field`` and the limit: ask for less, or in a
        request of its own."""
        return GraphQLError(
            f"{field}: this request's answer reached MAX_RESPONSE_BYTES ({self.max_bytes} "
            "bytes); ask for it in a request of its own or page with `after`",
            extensions={
                "code": RESPONSE_TOO_LARGE,
                "field": field,
                "maxResponseBytes": self.max_bytes,
            },
        )
