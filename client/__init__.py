"""The streamplane Python client: talks to the coordinator; data goes straight to Kafka."""

from streamplane.client.coordinator import CoordinatorClient
from streamplane.client.session import GenerationChange, Grant, LeaseLoad, Revoke, SessionEndedError, WorkerSession

__all__ = [
    "CoordinatorClient",
    "GenerationChange",
    "Grant",
    "LeaseLoad",
    "Revoke",
    "SessionEndedError",
    "WorkerSession",
]
