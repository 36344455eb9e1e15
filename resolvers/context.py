"""The typed request context every resolver receives."""

from dataclasses import dataclass, field
from typing import Any

import strawberry

from resolvers.budget import Budget
from resolvers.live import LiveHub, Session
from resolvers.loaders import Loaders
from resolvers.permissions import Viewer
from resolvers.visible import Visible
from store import ConnectorStore
from store.retention import RETAIN_FAILED_S


@dataclass
class Context:
    """One request's context: the store, the viewer, fresh loaders with the request's
    budget (the rows and bytes its lists may still return), and a request id. Over a
    WebSocket one context stands for the connection, and each operation runs with its own
    copy (``fresh``)."""

    store: ConnectorStore
    viewer: Viewer
    loaders: Loaders
    request_id: str
    events: list[str] = field(default_factory=list)
    """Store events this request saw, for the metrics: ``lease_takeover``,
    ``contested_send``."""
    request: Any = None
    """The HTTP request or WebSocket (federated tracing reads its
    ``apollo-federation-include-trace`` header); None outside HTTP."""
    hub: LiveHub | None = None
    """This process's subscriptions (``server.live.Hub``); None where none are served."""
    session: Session | None = None
    """The subscriptions of this connection (a WebSocket, or one HTTP request)."""
    connection_params: dict[str, Any] | None = None
    """A WebSocket's ``connection_init`` payload (Strawberry sets it)."""
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

    def signed_in(
        self, viewer: Viewer, expires_at: float | None, sign_in: str | None = None
    ) -> None:
        """A WebSocket's token was accepted at ``connection_init``: ``viewer`` from now on,
        its subscriptions ending at ``expires_at`` (epoch seconds); ``sign_in``: the sign-in
        session the token belongs to (None: a token of no session)."""
        self.viewer = viewer
        self.visible = Visible(viewer, self.loaders, self.loaders.budget)
        self.session = Session(viewer, expires_at, sign_in=sign_in)

    def renew(self) -> None:
        """New loaders and a full budget for this context (a subscription's next event is
        read afresh: the rows as they are now, charged as a response of its own)."""
        self.loaders = Loaders(self.store, Budget(max_bytes=self.loaders.budget.max_bytes))
        self.visible = Visible(self.viewer, self.loaders, self.loaders.budget)

    def fresh(self) -> "Context":
        """A context for one operation of this one's connection: the same viewer, session
        and hub, new loaders and a full budget (a loader caches for its operation only)."""
        return Context(
            store=self.store,
            viewer=self.viewer,
            loaders=Loaders(self.store, Budget(max_bytes=self.loaders.budget.max_bytes)),
            request_id=self.request_id,
            request=self.request,
            hub=self.hub,
            session=self.session,
        )

    def live(self) -> LiveHub:
        """The hub subscriptions read from; ``RuntimeError`` where none runs."""
        if self.hub is None:
            raise RuntimeError("this server runs no subscriptions (no live hub)")
        return self.hub

    def subscriber(self) -> Session:
        """This connection's subscriptions (made for the viewer on first use)."""
        if self.session is None:
            self.session = Session(self.viewer)
        return self.session


Info = strawberry.Info[Context, None]
