"""Relay connections over keyset cursors."""

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


@strawberry.type(description="A page of operations, oldest first.")
class OperationConnection:
    edges: list[OperationEdge]
    page_info: PageInfo


@strawberry.type
class WatchEdge:
    cursor: str
    node: Watch


@strawberry.type(description="A page of watches, in identity order.")
class WatchConnection:
    edges: list[WatchEdge]
    page_info: PageInfo
