"""What every store part shares: the database, the clock, id minting, ``readWinner``, and
who is writing (``acting_as``)."""

import secrets
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
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


_actor: ContextVar[str | None] = ContextVar("connector_store_actor", default=None)


@contextmanager
def acting_as(did: str | None) -> Iterator[None]:
    """Every store write awaited in the block (by this task, and by tasks it starts) is
    logged with ``did`` as its actor (``store.events``); outside any block the actor is
    None: the system (the sweeper, the CLI)."""
    token = _actor.set(did)
    try:
        yield
    finally:
        _actor.reset(token)


def current_actor() -> str | None:
    """The DID writes are logged for now (``acting_as``), or None."""
    return _actor.get()
