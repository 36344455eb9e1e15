"""The durable store behind connector write-back (the seed's @kubun/store-connector).

The store knows nothing of GraphQL or HTTP: callers pass plain values and get frozen
records (``store.records``) or typed errors (``store.errors``) back.
"""

from store.connector_store import ConnectorStore

__all__ = ["ConnectorStore"]
