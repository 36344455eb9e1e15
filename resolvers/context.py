"""The typed request context every resolver receives."""

from dataclasses import dataclass

import strawberry

from resolvers.loaders import Loaders
from resolvers.permissions import Viewer
from store import ConnectorStore


@dataclass
class Context:
    """One request's context: the store, the viewer, fresh loaders and a request id."""

    store: ConnectorStore
    viewer: Viewer
    loaders: Loaders
    request_id: str


Info = strawberry.Info[Context, None]
