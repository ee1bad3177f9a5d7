"""The streamplane Python client: talks to the coordinator; data goes straight to Kafka."""

from streamplane.client.coordinator import CoordinatorClient
from streamplane.client.fetcher import PartitionFetcher
from streamplane.client.producer import Producer
from streamplane.client.session import GenerationChange, Grant, LeaseLoad, Revoke, SessionEndedError, WorkerSession

__all__ = [
    "CoordinatorClient",
    "GenerationChange",
    "Grant",
    "LeaseLoad",
    "PartitionFetcher",
    "Producer",
    "Revoke",
    "SessionEndedError",
    "WorkerSession",
]
