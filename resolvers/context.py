"""The typed request context every resolver receives."""

from dataclasses import dataclass, field
from typing import Any

import strawberry

from resolvers.errors import bad_input
from resolvers.loaders import Loaders
from resolvers.permissions import Viewer, can_see, can_see_lease, owns, require
from store import ConnectorStore
from store.records import OperationRecord

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

    def require(self, scope: str) -> None:
        """Raise ``FORBIDDEN`` unless the viewer holds ``scope`` (for nested fields, which
        reach rights through the context)."""
        require(self.viewer, scope)

    def can_see(self, record: OperationRecord) -> bool:
        """True when the viewer may see the operation ``record``."""
        return can_see(self.viewer, record.caller_did, record.owner_did)

    def owns(self, owner_did: str) -> bool:
        """True when the viewer may see a watch (or other row) of ``owner_did``."""
        return owns(self.viewer, owner_did)

    def can_see_lease(self, caller_did: str) -> bool:
        """True when the viewer may see the lease token of an operation of ``caller_did``."""
        return can_see_lease(self.viewer, caller_did)


Info = strawberry.Info[Context, None]
