"""Our Kafka wire client: one module per API (api_versions, metadata, list_offsets, fetch, leader_epoch,
sasl), their primitives (codec), and connection handling apart from them (connection, config)."""

from streamplane.client.kafka.codec import KafkaAuthenticationError, KafkaProtocolError
from streamplane.client.kafka.config import ConnectionConfig
from streamplane.client.kafka.connection import KafkaConnection
from streamplane.client.kafka.list_offsets import EARLIEST, LATEST
from streamplane.client.kafka.metadata import Broker, Metadata, PartitionMetadata

__all__ = [
    "EARLIEST",
    "LATEST",
    "Broker",
    "ConnectionConfig",
    "KafkaAuthenticationError",
    "KafkaConnection",
    "KafkaProtocolError",
    "Metadata",
    "PartitionMetadata",
]
