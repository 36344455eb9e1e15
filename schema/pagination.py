"""Relay connections over keyset cursors."""

from collections.abc import Awaitable, Callable
from enum import Enum

import strawberry

from schema.operation import Operation
from schema.watch import Watch


@strawberry.federation.type(shareable=True, description="Where a page stands in the whole list.")
class PageInfo:
    has_next_page: bool
    has_previous_page: bool
    start_cursor: str | None
    end_cursor: str | None


@strawberry.type
class OperationEdge:
    cursor: str
    node: Operation


@strawberry.enum(description="The order of a list of operations, by when each was created.")
class OperationOrder(Enum):
    OLDEST_FIRST = "oldest_first"
    NEWEST_FIRST = "newest_first"


@strawberry.type(description="A page of operations, in the order asked (oldest first unless told).")
class OperationConnection:
    edges: list[OperationEdge]
    page_info: PageInfo
    count: strawberry.Private[Callable[[], Awaitable[int]]]

    @strawberry.field(
        description="How many operations match the filter over every page (the viewer's "
        "own when it does not read every row); exact, counted only when asked."
    )
    async def total_count(self) -> int:
        return await self.count()


@strawberry.type
class WatchEdge:
    cursor: str
    node: Watch


@strawberry.type(description="A page of watches, in identity order.")
class WatchConnection:
    edges: list[WatchEdge]
    page_info: PageInfo
