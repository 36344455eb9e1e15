"""The typed request context every resolver receives."""

from dataclasses import dataclass, field
from typing import Any

import strawberry

from resolvers.budget import Budget
from resolvers.loaders import Loaders
from resolvers.permissions import Viewer
from resolvers.visible import Visible
from store import ConnectorStore
from store.retention import RETAIN_FAILED_S


@dataclass
class Context:
    """One request's context: the store, the viewer, fresh loaders with the request's
    budget (the rows and bytes its lists may still return), and a request id."""

    store: ConnectorStore
    viewer: Viewer
    loaders: Loaders
    request_id: str
    events: list[str] = field(default_factory=list)
    """Store events this request saw, for the metrics: ``lease_takeover``,
    ``contested_send``."""
    request: Any = None
    """The HTTP request (federated tracing reads its ``apollo-federation-include-trace``
    header); None outside HTTP."""
    retain_failed_ms: int = RETAIN_FAILED_S * 1000
    """``RETAIN_FAILED_SECONDS`` in ms: ``collectFinishedOperations``' default
    ``failedOlderThan`` is the store's now less this."""

    visible: Visible = field(init=False)
    """The viewer-scoped reader every resolver and nested field reads rows through."""

    def __post_init__(self) -> None:
        self.visible = Visible(self.viewer, self.loaders, self.loaders.budget)

    @property
    def budget(self) -> Budget:
        """The rows and bytes this request's lists may still return (the loaders' own)."""
        return self.loaders.budget


Info = strawberry.Info[Context, None]
