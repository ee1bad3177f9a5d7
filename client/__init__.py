"""The streamplane Python client: talks to the coordinator; data goes straight to Kafka."""

from streamplane.client.coordinator import CoordinatorClient

__all__ = ["CoordinatorClient"]
