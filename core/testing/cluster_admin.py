"""Kafka clusters held in memory, for transaction-level tests and the simulator (see `MemoryClusterAdmin`)."""

from __future__ import annotations

from streamplane.errors import FailedPreconditionError, UnavailableError
from streamplane.model import Cluster, TopicSettings

DEFAULTS = TopicSettings()


class MemoryClusterAdmin:
    """Kafka clusters held in memory: topics and their end offsets, and clusters that can be made unreachable.

    A stand-in for the external system only (Kafka), for transaction-level tests and the simulator: records
    are counted, never stored; `append` plays a producer, `down` a failed cluster.
    """

    def __init__(self) -> None:
        self.topics: dict[tuple[str, str], list[int]] = {}
        self.settings: dict[tuple[str, str], TopicSettings] = {}
        self.down: set[str] = set()

    def ensure_topic(self, cluster: Cluster, topic: str, partitions: int, settings: TopicSettings = DEFAULTS) -> None:
        self._reach(cluster)
        self.settings.setdefault((cluster.name, topic), settings)
        ends = self.topics.setdefault((cluster.name, topic), [0] * partitions)
        if len(ends) != partitions:
            raise FailedPreconditionError(
                f"topic {topic} exists on cluster {cluster.name} with {len(ends)} partitions, not {partitions}"
            )

    def end_offsets(self, cluster: Cluster, topic: str, partitions: int) -> list[int]:
        self._reach(cluster)
        ends = self.topics.get((cluster.name, topic))
        if ends is None:
            raise UnavailableError(f"topic {topic} does not exist on cluster {cluster.name}")
        return list(ends[:partitions])

    def delete_topic(self, cluster: Cluster, topic: str) -> None:
        self._reach(cluster)
        self.topics.pop((cluster.name, topic), None)
        self.settings.pop((cluster.name, topic), None)

    def append(self, cluster: str, topic: str, partition: int, records: int = 1) -> None:
        """`records` more records written to one partition."""
        self.topics[(cluster, topic)][partition] += records

    def _reach(self, cluster: Cluster) -> None:
        if cluster.name in self.down:
            raise UnavailableError(f"cluster {cluster.name} ({cluster.bootstrap_servers}) is unreachable")
