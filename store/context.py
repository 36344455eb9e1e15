"""What every store part shares: the database, the clock, id minting and ``readWinner``."""

import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from store.database import Database

Clock = Callable[[], int]
"""Returns "now" in epoch milliseconds."""

ReadWinner = Callable[[str | None], Awaitable[str | None]]
"""The seed's ``ReadWinner``: the current winning state digest of a document, or None.

Awaited inside the caller's transaction, on the same task, so it reads through the same
connection and sees the same locked state.
"""


def system_clock() -> int:
    """The system time in epoch milliseconds."""
    return time.time_ns() // 1_000_000


def random_id() -> str:
    """A random, URL-safe id with 128 bits of entropy (node keys, incarnations)."""
    return secrets.token_urlsafe(16)


@dataclass(frozen=True, slots=True)
class StoreContext:
    """The dependencies of every store part."""

    db: Database
    clock: Clock
    new_id: Callable[[], str]
