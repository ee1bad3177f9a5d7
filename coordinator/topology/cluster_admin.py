"""What the coordinator asks of Kafka clusters: topic creation and deletion (Kafka's admin API for real clusters,
the control channel for local ones) and end offsets (ListOffsets, the same on both kinds) for sealing
generations.

Topic creation is idempotent: a topic that exists with the wanted partition count is success, so a retried
Failover or CreateStream never fails on its own earlier attempt. On a Kafka cluster it returns once every
partition's leader serves the topic (answers ListOffsets), so no producer is routed to a partition whose
leader is still being made: librdkafka's idempotent producer can report a record as delivered that such a
leader refused, when a later batch of the same new producer id is accepted (the first record of a failover's
new generation was lost so, one run in four on a loaded machine; confluent-kafka-go#921).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from streamplane.client.kafka.config import ConnectionConfig
from streamplane.client.kafka.watermarks import Watermarks
from streamplane.coordinator.topology.kafka_settings import PLAINTEXT, KafkaSettings
from streamplane.errors import FailedPreconditionError, StreamplaneError, UnavailableError
from streamplane.model import ADMIN_LOCAL, Cluster, PartitionBounds, TopicSettings

DEFAULTS = TopicSettings()


@dataclass(frozen=True)
class TopicSpec:
    """A topic to have on a cluster: its name, partition count and settings."""

    topic: str
    partitions: int
    settings: TopicSettings = DEFAULTS


class ClusterAdmin(Protocol):
    """What the topology needs from a Kafka cluster."""

    def ensure_topic(self, cluster: Cluster, topic: str, partitions: int, settings: TopicSettings = DEFAULTS) -> None:
        """Create `topic` with `partitions` partitions (and `settings`) on `cluster` unless it exists with that
        many partitions; return once every partition's leader serves it."""
        ...

    def ensure_topics(self, cluster: Cluster, topics: Sequence[TopicSpec]) -> dict[str, StreamplaneError]:
        """`ensure_topic` for many topics of one cluster at once (a dead cluster's lanes leaving for it): one
        request creates them, and their leaders, made side by side, are waited for together. Returns the topics
        that failed, each with its error (empty: every one serves)."""
        ...

    def end_offsets(self, cluster: Cluster, topic: str, partitions: int) -> list[int]:
        """The offset after the last record of each partition of `topic` (UnavailableError if unreachable)."""
        ...

    def delete_topic(self, cluster: Cluster, topic: str) -> None:
        """Delete `topic` from `cluster`; a topic already gone is success. UnavailableError if the cluster does
        not answer, FailedPreconditionError if it refuses."""
        ...

    def bounds(self, cluster: Cluster, topic: str, partitions: int, at_ms: int | None = None) -> list[PartitionBounds]:
        """What `cluster` keeps of each partition of `topic`, and where `at_ms` falls in it (a rewind's lookup).
        NotFoundError when the topic is gone, UnavailableError when the cluster does not answer."""
        ...

    def timestamps(self, cluster: Cluster, topic: str, offsets: dict[int, int]) -> dict[int, int]:
        """{partition: the timestamp of its first record at or after the offset} (a partition with none is left
        out); UnavailableError when the cluster does not answer."""
        ...


def ensure_each(admin: ClusterAdmin, cluster: Cluster, topics: Sequence[TopicSpec]) -> dict[str, StreamplaneError]:
    """`ensure_topics` one topic at a time, for admins whose creations are cheap (local clusters, memory). A
    cluster that did not answer is not asked again for the rest: they fail with the same error."""
    failed: dict[str, StreamplaneError] = {}
    unavailable: UnavailableError | None = None
    for spec in topics:
        if unavailable is not None:
            failed[spec.topic] = unavailable
            continue
        try:
            admin.ensure_topic(cluster, spec.topic, spec.partitions, spec.settings)
        except UnavailableError as err:
            failed[spec.topic] = unavailable = err
        except StreamplaneError as err:
            failed[spec.topic] = err
    return failed


def _raise_failed(failed: dict[str, StreamplaneError]) -> None:
    for err in failed.values():
        raise err


class _Bounds:
    """`ClusterAdmin.bounds` (and the sealer's end offsets) through our wire client's ListOffsets on any
    Kafka-protocol cluster, real or local, with one connection per broker of the clusters looked at last kept (a
    rewind, a redrive or the sealer asks again and again). Calls from several RPCs and the sealer go on at once
    (Watermarks is safe to share). Clusters that name Kafka settings (`config_ref`) are reached with them: one
    Watermarks for each reference."""

    def __init__(self, timeout_s: float = 10.0, settings: KafkaSettings = PLAINTEXT) -> None:
        self.marks = Watermarks(timeout_s)
        self._timeout_s, self._settings = timeout_s, settings
        self._lock = threading.Lock()
        self._secured: dict[str, tuple[int, Watermarks]] = {}  # {reference: (its settings' stamp, Watermarks)}

    def of(self, cluster: Cluster) -> Watermarks:
        """The Watermarks that reach `cluster` (UnavailableError when its settings are not this replica's); made
        again when a reload changed its settings."""
        if not cluster.config_ref:
            return self.marks
        stamp = self._settings.stamp(cluster)
        config = self._settings.connection(cluster, self._timeout_s)
        with self._lock:
            kept = self._secured.get(cluster.config_ref)
            if kept is not None and kept[0] == stamp:
                return kept[1]
            marks = Watermarks(config=config)
            self._secured[cluster.config_ref] = (stamp, marks)
        if kept is not None:
            kept[1].close()  # the old settings' connections (each closed once a lookup under way is done)
        return marks

    def __call__(self, cluster: Cluster, topic: str, partitions: int, at_ms: int | None) -> list[PartitionBounds]:
        return self.of(cluster).bounds(cluster.bootstrap_servers, topic, partitions, at_ms)

    def timestamps(self, cluster: Cluster, topic: str, offsets: dict[int, int]) -> dict[int, int]:
        return self.of(cluster).timestamps(cluster.bootstrap_servers, topic, offsets)

    def wait_serving(self, cluster: Cluster, topic: str, partitions: int, deadline: float, timeout_s: float) -> None:
        """Return once the leader of every partition of a topic just created answers ListOffsets for it (Kafka
        makes a new partition's leader after it lists the topic in its metadata: meanwhile produce and
        ListOffsets are refused alike); UnavailableError past `deadline` (time.monotonic(), `timeout_s` after the
        creation began). Asked at least once, even past it."""
        pause = 0.01
        while True:
            try:
                self.of(cluster).ends(cluster.bootstrap_servers, topic, list(range(partitions)))
                return
            except StreamplaneError as err:
                if time.monotonic() + pause > deadline:
                    raise UnavailableError(
                        f"topic {topic} on cluster {cluster.name} ({cluster.bootstrap_servers}) was created but its "
                        f"partitions' leaders do not serve it after {timeout_s:.0f} s: {err.message}"
                    ) from err
            time.sleep(pause)  # a leader is being made: it takes milliseconds
            pause = min(0.05, pause * 2)


def kafka_end_offsets(
    cluster: Cluster,
    topic: str,
    partitions: int,
    timeout_s: float = 10.0,
    *,
    marks: Watermarks | None = None,
    config: ConnectionConfig | None = None,
) -> list[int]:
    """End offsets through our wire client's ListOffsets (one request per leader); any Kafka-protocol cluster, real
    or local. `marks` keeps its connections for the next call (the sealer's); without, connections made with
    `config` (TLS, SASL and its timeout; default plaintext, `timeout_s`) are closed after."""
    own = marks is None
    marks = marks or Watermarks(timeout_s, config=config)
    try:
        ends = marks.ends(cluster.bootstrap_servers, topic, list(range(partitions)))
    except UnavailableError as err:
        raise UnavailableError(
            f"cannot read the end offsets of topic {topic} on cluster {cluster.name} ({cluster.bootstrap_servers}): "
            f"{err.message}"
        ) from err
    finally:
        if own:
            marks.close()
    return [ends[p] for p in range(partitions)]


class KafkaAdmin:
    """Topics on real Kafka clusters, through confluent-kafka's AdminClient (CreateTopics); a cluster that names
    Kafka settings (TLS, SASL) is reached with them."""

    def __init__(self, timeout_s: float = 15.0, settings: KafkaSettings = PLAINTEXT) -> None:
        self._timeout_s, self._settings = timeout_s, settings
        self._bounds = _Bounds(timeout_s, settings)

    def _client(self, cluster: Cluster) -> Any:
        """An AdminClient for the cluster, with its settings."""
        from confluent_kafka.admin import AdminClient

        config = {**self._settings.librdkafka(cluster), "bootstrap.servers": cluster.bootstrap_servers, "log_level": 3}
        return AdminClient(config)

    def ensure_topic(self, cluster: Cluster, topic: str, partitions: int, settings: TopicSettings = DEFAULTS) -> None:
        _raise_failed(self.ensure_topics(cluster, [TopicSpec(topic, partitions, settings)]))

    def ensure_topics(self, cluster: Cluster, topics: Sequence[TopicSpec]) -> dict[str, StreamplaneError]:
        from confluent_kafka import KafkaError, KafkaException
        from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

        if not topics:
            return {}
        deadline = time.monotonic() + self._timeout_s
        client = self._client(cluster)
        # replication_factor=-1 takes the broker's default.replication.factor (KIP-464).
        new = [
            NewTopic(
                spec.topic,
                num_partitions=spec.partitions,
                replication_factor=spec.settings.replication_factor or -1,
                config=spec.settings.configs(),
            )
            for spec in topics
        ]
        futures = client.create_topics(new, request_timeout=self._timeout_s)
        failed: dict[str, StreamplaneError] = {}
        for spec in topics:
            where = f"topic {spec.topic} on cluster {cluster.name} ({cluster.bootstrap_servers})"
            try:
                futures[spec.topic].result(timeout=max(0.0, deadline - time.monotonic()))
            except KafkaException as err:
                error = err.args[0]
                if error.code() != KafkaError.TOPIC_ALREADY_EXISTS:
                    if error.retriable() or error.code() < 0:  # unreachable, timed out: worth another try
                        failed[spec.topic] = UnavailableError(f"cannot create {where}: {error.str()}")
                    else:
                        failed[spec.topic] = FailedPreconditionError(
                            f"cluster {cluster.name} refuses {where}: {error.str()}"
                        )
                    continue
                try:
                    self._check_partitions(client, cluster, spec.topic, spec.partitions)
                except StreamplaneError as refused:
                    failed[spec.topic] = refused
                except Exception as err:  # the metadata's future timed out
                    failed[spec.topic] = UnavailableError(f"cannot describe {where}: {err}")
            except Exception as err:  # a timeout of the future
                failed[spec.topic] = UnavailableError(f"cannot create {where}: {err}")
        for spec in topics:  # their leaders were made side by side: the first wait is most of the others'
            if spec.topic not in failed:
                try:
                    self._bounds.wait_serving(cluster, spec.topic, spec.partitions, deadline, self._timeout_s)
                except UnavailableError as err:
                    failed[spec.topic] = err
        return failed

    def _check_partitions(self, client: object, cluster: Cluster, topic: str, partitions: int) -> None:
        metadata = client.list_topics(topic, timeout=self._timeout_s)  # type: ignore[attr-defined]
        found = len(metadata.topics[topic].partitions)
        if found != partitions:
            raise FailedPreconditionError(
                f"topic {topic} exists on cluster {cluster.name} with {found} partitions, not {partitions}"
            )

    def end_offsets(self, cluster: Cluster, topic: str, partitions: int) -> list[int]:
        return kafka_end_offsets(cluster, topic, partitions, marks=self._bounds.of(cluster))

    def bounds(self, cluster: Cluster, topic: str, partitions: int, at_ms: int | None = None) -> list[PartitionBounds]:
        return self._bounds(cluster, topic, partitions, at_ms)

    def timestamps(self, cluster: Cluster, topic: str, offsets: dict[int, int]) -> dict[int, int]:
        return self._bounds.timestamps(cluster, topic, offsets)

    def delete_topic(self, cluster: Cluster, topic: str) -> None:
        from confluent_kafka import KafkaError, KafkaException

        client = self._client(cluster)
        where = f"topic {topic} on cluster {cluster.name} ({cluster.bootstrap_servers})"
        futures = client.delete_topics([topic], request_timeout=self._timeout_s)
        try:
            futures[topic].result(timeout=self._timeout_s)
        except KafkaException as err:
            error = err.args[0]
            if error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                return  # gone already: what was asked
            if error.retriable() or error.code() < 0:
                raise UnavailableError(f"cannot delete {where}: {error.str()}") from err
            raise FailedPreconditionError(f"cluster {cluster.name} refuses to delete {where}: {error.str()}") from err
        except Exception as err:  # a timeout of the future
            raise UnavailableError(f"cannot delete {where}: {err}") from err


class LocalAdmin:
    """Topics on local Kafka-protocol clusters started by `streamplane dev`, through their control channel."""

    def __init__(self) -> None:
        self._bounds = _Bounds()

    def ensure_topic(self, cluster: Cluster, topic: str, partitions: int, settings: TopicSettings = DEFAULTS) -> None:
        """Local engines keep no topic settings (the mock cluster has one replica and keeps what fits). The
        mock cluster makes a topic's leaders as it creates it, so there is nothing to wait for (its control
        channel creates topics even while its brokers are down, as tests of dead clusters need)."""
        from streamplane.devstack.cluster_control import LocalClusterControl

        LocalClusterControl(cluster.control_endpoint, name=cluster.name).create_topic(topic, partitions)

    def ensure_topics(self, cluster: Cluster, topics: Sequence[TopicSpec]) -> dict[str, StreamplaneError]:
        return ensure_each(self, cluster, topics)

    def end_offsets(self, cluster: Cluster, topic: str, partitions: int) -> list[int]:
        return kafka_end_offsets(cluster, topic, partitions, marks=self._bounds.marks)

    def bounds(self, cluster: Cluster, topic: str, partitions: int, at_ms: int | None = None) -> list[PartitionBounds]:
        return self._bounds(cluster, topic, partitions, at_ms)

    def timestamps(self, cluster: Cluster, topic: str, offsets: dict[int, int]) -> dict[int, int]:
        return self._bounds.timestamps(cluster, topic, offsets)

    def delete_topic(self, cluster: Cluster, topic: str) -> None:
        """librdkafka's mock cluster has no DeleteTopics (its admin requests wait for a controller it lacks):
        the topic stays, and the caller says so."""
        raise FailedPreconditionError(
            f"topic {topic} stays on local cluster {cluster.name}: a local mock cluster cannot delete topics"
        )


class RoutingAdmin:
    """Sends each cluster's topic creation to the admin of its kind."""

    def __init__(self, kafka: ClusterAdmin | None = None, local: ClusterAdmin | None = None) -> None:
        self._kafka = kafka or KafkaAdmin()
        self._local = local or LocalAdmin()

    def ensure_topic(self, cluster: Cluster, topic: str, partitions: int, settings: TopicSettings = DEFAULTS) -> None:
        self._admin(cluster).ensure_topic(cluster, topic, partitions, settings)

    def ensure_topics(self, cluster: Cluster, topics: Sequence[TopicSpec]) -> dict[str, StreamplaneError]:
        return self._admin(cluster).ensure_topics(cluster, topics)

    def end_offsets(self, cluster: Cluster, topic: str, partitions: int) -> list[int]:
        return self._admin(cluster).end_offsets(cluster, topic, partitions)

    def delete_topic(self, cluster: Cluster, topic: str) -> None:
        self._admin(cluster).delete_topic(cluster, topic)

    def bounds(self, cluster: Cluster, topic: str, partitions: int, at_ms: int | None = None) -> list[PartitionBounds]:
        return self._admin(cluster).bounds(cluster, topic, partitions, at_ms)

    def timestamps(self, cluster: Cluster, topic: str, offsets: dict[int, int]) -> dict[int, int]:
        return self._admin(cluster).timestamps(cluster, topic, offsets)

    def _admin(self, cluster: Cluster) -> ClusterAdmin:
        return self._local if cluster.admin == ADMIN_LOCAL else self._kafka
