"""Kafka clusters held in memory, for transaction-level tests and the simulator (see `MemoryClusterAdmin`)."""

from __future__ import annotations

from collections.abc import Sequence

from streamplane.coordinator.topology.cluster_admin import TopicSpec, ensure_each
from streamplane.errors import FailedPreconditionError, NotFoundError, StreamplaneError, UnavailableError
from streamplane.model import Cluster, PartitionBounds, TopicSettings

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
        self.earliest: dict[tuple[str, str, int], int] = {}
        """{(cluster, topic, partition): the first offset kept} where retention removed some."""
        self.times: dict[tuple[str, str, int], list[tuple[int, int]]] = {}
        """{(cluster, topic, partition): [(first offset, timestamp)]}: runs of records written at a time, in
        offset order (records appended without a time have timestamp 0)."""

    def ensure_topic(self, cluster: Cluster, topic: str, partitions: int, settings: TopicSettings = DEFAULTS) -> None:
        self._reach(cluster)
        self.settings.setdefault((cluster.name, topic), settings)
        ends = self.topics.setdefault((cluster.name, topic), [0] * partitions)
        if len(ends) != partitions:
            raise FailedPreconditionError(
                f"topic {topic} exists on cluster {cluster.name} with {len(ends)} partitions, not {partitions}"
            )

    def ensure_topics(self, cluster: Cluster, topics: Sequence[TopicSpec]) -> dict[str, StreamplaneError]:
        return ensure_each(self, cluster, topics)

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

    def bounds(self, cluster: Cluster, topic: str, partitions: int, at_ms: int | None = None) -> list[PartitionBounds]:
        self._reach(cluster)
        ends = self.topics.get((cluster.name, topic))
        if ends is None:
            raise NotFoundError(f"topic {topic} is not on cluster {cluster.name} any more", kind="topic", name=topic)
        out = []
        for p, end in enumerate(ends[:partitions]):
            earliest = self.earliest.get((cluster.name, topic, p), 0)
            at = -1
            if at_ms is not None:
                runs = self.times.get((cluster.name, topic, p), [(0, 0)])
                stops = [first for first, _ in runs[1:]] + [end]
                late = zip(runs, stops, strict=True)
                kept = [max(first, earliest) for (first, ts), stop in late if ts >= at_ms and stop > earliest]
                at = min(kept, default=end)
            out.append(PartitionBounds(earliest, end, at))
        return out

    def timestamps(self, cluster: Cluster, topic: str, offsets: dict[int, int]) -> dict[int, int]:
        self._reach(cluster)
        ends = self.topics.get((cluster.name, topic))
        if ends is None:
            raise UnavailableError(f"topic {topic} does not exist on cluster {cluster.name}")
        out = {}
        for p, offset in offsets.items():
            offset = max(offset, self.earliest.get((cluster.name, topic, p), 0))
            if offset < ends[p]:
                runs = self.times.get((cluster.name, topic, p), [(0, 0)])
                out[p] = next(ts for first, ts in reversed(runs) if first <= offset)
        return out

    def append(self, cluster: str, topic: str, partition: int, records: int = 1, ts_ms: int = 0) -> None:
        """`records` more records written to one partition (at `ts_ms`, a record's timestamp)."""
        ends = self.topics[(cluster, topic)]
        runs = self.times.setdefault((cluster, topic, partition), [(0, 0)])
        if runs[-1][1] != ts_ms:
            runs.append((ends[partition], ts_ms))
        ends[partition] += records

    def expire(self, cluster: str, topic: str, partition: int, before: int) -> None:
        """Retention removes the records of one partition below offset `before`."""
        key = (cluster, topic, partition)
        self.earliest[key] = max(self.earliest.get(key, 0), min(before, self.topics[(cluster, topic)][partition]))

    def _reach(self, cluster: Cluster) -> None:
        if cluster.name in self.down:
            raise UnavailableError(f"cluster {cluster.name} ({cluster.bootstrap_servers}) is unreachable")
