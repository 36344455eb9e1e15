"""Round trips to the database, counted the way a user pays for them: on PostgreSQL each
call asyncpg sends and waits for (a statement, ``BEGIN``, ``COMMIT``, ``ROLLBACK``, an
``executemany``), by wrapping asyncpg's public connection methods; on SQLite each hop to a
connection's thread (``store.sqlite_pool.SQLiteConnection.run``), which runs a whole
transaction's statements when the store sends them together. A statement asyncpg prepares
anew (a cache miss) costs one more that this does not count: a call is counted warm."""

from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

import asyncpg
import pytest

from store.sqlite_pool import SQLiteConnection

POSTGRES_CALLS = ("execute", "executemany", "fetch", "fetchrow", "fetchval")


class RoundTrips:
    """The round trips counted since the block began (``count``), with what each sent
    (``sent``: SQL on PostgreSQL, ``hop`` on SQLite)."""

    def __init__(self) -> None:
        self.sent: list[str] = []

    @property
    def count(self) -> int:
        return len(self.sent)

    def reset(self) -> None:
        self.sent.clear()


def _counting(
    trips: RoundTrips, method: Callable[..., Awaitable[Any]], label: Callable[..., str]
) -> Callable[..., Awaitable[Any]]:
    async def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        trips.sent.append(label(*args))
        return await method(self, *args, **kwargs)

    return counted


@contextmanager
def round_trips(monkeypatch: pytest.MonkeyPatch) -> Iterator[RoundTrips]:
    """Count every round trip of the process to either backend while the block runs."""
    trips = RoundTrips()
    with monkeypatch.context() as patch:
        for name in POSTGRES_CALLS:
            method = getattr(asyncpg.Connection, name)
            patch.setattr(
                asyncpg.Connection, name, _counting(trips, method, lambda sql="", *_: str(sql))
            )
        patch.setattr(
            SQLiteConnection, "run", _counting(trips, SQLiteConnection.run, lambda *_: "hop")
        )
        yield trips
