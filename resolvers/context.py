"""The typed request context every resolver receives."""

from dataclasses import dataclass, field
from typing import Any

import strawberry

from resolvers.errors import bad_input
from resolvers.loaders import Loaders
from resolvers.permissions import Viewer
from resolvers.visible import Visible
from store import ConnectorStore

MAX_ROWS_PER_REQUEST = 1000


@dataclass
class RowBudget:
    """How many more rows this request may ask lists for (``first``, ``limit``) or nested
    lists may return (``Watch.operations``), so aliases and nesting cannot multiply one page
    into an unbounded response."""

    left: int = MAX_ROWS_PER_REQUEST

    def take(self, field: str, rows: int) -> None:
        """Spend ``rows``; raise ``BAD_USER_INPUT`` naming ``field`` when they are not left."""
        if rows > self.left:
            raise bad_input(
                field,
                f"one request may list at most {MAX_ROWS_PER_REQUEST} rows in all; "
                "ask for fewer or page with `after`",
            )
        self.left -= rows


@dataclass
class Context:
    """One request's context: the store, the viewer, fresh loaders, a request id and the
    rows its lists may still return."""

    store: ConnectorStore
    viewer: Viewer
    loaders: Loaders
    request_id: str
    rows: RowBudget = field(default_factory=RowBudget)
    events: list[str] = field(default_factory=list)
    """Store events this request saw, for the metrics: ``lease_takeover``,
    ``contested_send``."""
    request: Any = None
    """The HTTP request (federated tracing reads its ``apollo-federation-include-trace``
    header); None outside HTTP."""

    visible: Visible = field(init=False)
    """The viewer-scoped reader every resolver and nested field reads rows through."""

    def __post_init__(self) -> None:
        self.visible = Visible(self.viewer, self.loaders, self.rows)


Info = strawberry.Info[Context, None]
