"""The streamplane Python client: talks to the coordinator; data goes straight to Kafka."""

from streamplane.client.config import ConsumerConfig
from streamplane.client.consumer import BatchOutcome, Consumer, Message, OutcomeError
from streamplane.client.coordinator import CoordinatorClient
from streamplane.client.partition_fetcher import PartitionFetcher
from streamplane.client.producer import Producer
from streamplane.client.session import Grant, LeaseLoad, Revoke, Sealed, SessionEndedError, WorkerSession

__all__ = [
    "BatchOutcome",
    "Consumer",
    "ConsumerConfig",
    "CoordinatorClient",
    "Grant",
    "LeaseLoad",
    "Message",
    "OutcomeError",
    "PartitionFetcher",
    "Producer",
    "Revoke",
    "Sealed",
    "SessionEndedError",
    "WorkerSession",
]
