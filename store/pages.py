"""Pages of a connection: the most items one page holds, and the read behind a page.

A connection's resolver reads a page and one row more, which tells it whether more follow
(``hasNextPage``). So every store reader behind a connection takes a ``limit`` of up to
``MAX_PAGE`` + 1 rows (``read_limit``): a page of ``MAX_PAGE`` must never be refused for
the one row more it reads, with an error naming the store's ``limit`` rather than the
``first`` the client sent.
"""

from typing import Any

from store import validation as check

MAX_PAGE = 500
"""The most items one page of a connection holds (``first``: 1 to 500)."""


def read_limit(limit: Any) -> int:
    """``limit`` checked as the rows a page's read asks for: 1 to ``MAX_PAGE`` + 1. Raises
    ``InvalidInput`` naming ``limit``."""
    return check.count("limit", limit, minimum=1, maximum=MAX_PAGE + 1)
