"""A client for connector-store-server: ``Worker`` (a connector worker in a few lines),
``enqueue`` (claims for a pool of workers), ``follow_events`` (events without gaps across
reconnects), typed errors carrying ``extensions.code``."""

from connector_store_client.client import Client
from connector_store_client.enqueue import enqueue
from connector_store_client.errors import (
    ConnectorStoreError,
    EventsCollected,
    GraphQLResponseError,
    TransportError,
    UnsendableVariables,
)
from connector_store_client.events import events_head, follow_events
from connector_store_client.handler_errors import HandlerRetries
from connector_store_client.outcomes import (
    Committed,
    Deferred,
    Failed,
    Outcome,
    ProviderRetryPolicy,
    RetryAfter,
    sendable,
)
from connector_store_client.settling import LeasedOperation, WorkerStats
from connector_store_client.worker import Worker

__all__ = [
    "Client",
    "Committed",
    "ConnectorStoreError",
    "Deferred",
    "EventsCollected",
    "Failed",
    "GraphQLResponseError",
    "HandlerRetries",
    "LeasedOperation",
    "Outcome",
    "ProviderRetryPolicy",
    "RetryAfter",
    "TransportError",
    "UnsendableVariables",
    "Worker",
    "WorkerStats",
    "enqueue",
    "events_head",
    "follow_events",
    "sendable",
]
