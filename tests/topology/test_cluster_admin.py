"""Topic creation on clusters: the local control channel always, Kafka's admin API on a real cluster when given."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka.admin import AdminClient

from streamplane.client.kafka.config import ConnectionConfig
from streamplane.client.kafka.connection import KafkaConnection
from streamplane.coordinator.topology.cluster_admin import KafkaAdmin, LocalAdmin, TopicSpec
from streamplane.devstack.cluster_control import LocalClusterControl
from streamplane.errors import FailedPreconditionError, UnavailableError
from streamplane.model import ADMIN_LOCAL, Cluster


def _partitions(bootstrap: str, topic: str) -> int:
    return len(AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10).topics[topic].partitions)


def test_local_admin_creates_topics_idempotently(local_cluster) -> None:
    bootstrap, control = local_cluster
    cluster = Cluster("t", bootstrap, admin=ADMIN_LOCAL, control_endpoint=control.endpoint)
    topic = f"sp.admin-{uuid.uuid4().hex[:8]}.realtime.g1"
    LocalAdmin().ensure_topic(cluster, topic, 5)
    LocalAdmin().ensure_topic(cluster, topic, 5)  # a retried creation succeeds
    assert _partitions(bootstrap, topic) == 5
    with pytest.raises(FailedPreconditionError, match="5 partitions, not 7"):
        LocalAdmin().ensure_topic(cluster, topic, 7)


def test_local_control_channel_reports_bad_requests_and_faults(local_cluster) -> None:
    _, control = local_cluster
    with pytest.raises(FailedPreconditionError, match="broker 99"):
        control.broker_down(99)
    control.broker_down(2)
    control.broker_up(2)
    with pytest.raises(UnavailableError, match="unreachable"):
        LocalClusterControl("127.0.0.1:1", name="gone", timeout_s=2).info()


def test_kafka_admin_reports_an_unreachable_cluster() -> None:
    cluster = Cluster("nowhere", "127.0.0.1:1")
    with pytest.raises(UnavailableError, match="nowhere"):
        KafkaAdmin(timeout_s=2).ensure_topic(cluster, "sp.x.realtime.g1", 1)


def test_kafka_admin_creates_topics_on_real_kafka(kafka_bootstrap: str) -> None:
    cluster = Cluster("real", kafka_bootstrap)
    topic = f"sp.admin-{uuid.uuid4().hex[:8]}.realtime.g1"
    KafkaAdmin().ensure_topic(cluster, topic, 3)
    KafkaAdmin().ensure_topic(cluster, topic, 3)
    assert _partitions(kafka_bootstrap, topic) == 3
    with pytest.raises(FailedPreconditionError):
        KafkaAdmin().ensure_topic(cluster, topic, 4)


def _assert_every_leader_serves(bootstrap: str, topic: str, partitions: int) -> None:
    """Each partition of `topic` has a leader that answers ListOffsets for it now (asked once, no retry)."""
    with KafkaConnection.connect_any(bootstrap, ConnectionConfig(timeout_s=10)) as boot:
        md = boot.metadata([topic])
        leaders = {p.partition: p.leader for p in md.topics[topic]}
        assert sorted(leaders) == list(range(partitions)) and min(leaders.values()) >= 0, leaders
        for node in set(leaders.values()):
            broker = md.brokers[node]
            with KafkaConnection(broker.host, broker.port, ConnectionConfig(timeout_s=10)) as conn:
                led = [p for p, leader in leaders.items() if leader == node]
                assert conn.list_offsets(topic, led, -1) == dict.fromkeys(led, 0)


def test_kafka_admin_returns_once_every_partition_leader_serves_the_new_topic(kafka_bootstrap: str) -> None:
    """A producer routed to a new generation writes at once: a leader still being made refuses its first batch,
    and librdkafka's idempotent producer may then report that record delivered when a later batch is accepted.
    So creation returns only once every partition's leader answers for the topic (asked here once, no retry)."""
    cluster = Cluster("real", kafka_bootstrap)
    for _ in range(3):
        topic = f"sp.admin-{uuid.uuid4().hex[:8]}.realtime.g1"
        KafkaAdmin().ensure_topic(cluster, topic, 32)
        _assert_every_leader_serves(kafka_bootstrap, topic, 32)


def test_kafka_admin_creates_many_topics_at_once_and_says_which_failed(kafka_bootstrap: str) -> None:
    """A dead cluster's lanes leave for one target together: their topics are created at once, and when it returns
    every one that did not fail serves; one topic's refusal (it exists with another partition count) fails that
    topic only, and one that exists as asked is success."""
    cluster = Cluster("real", kafka_bootstrap)
    run = uuid.uuid4().hex[:8]
    KafkaAdmin().ensure_topic(cluster, f"sp.many-{run}.realtime.g1", 2)
    KafkaAdmin().ensure_topic(cluster, f"sp.many-{run}.realtime.g2", 3)
    wanted = [TopicSpec(f"sp.many-{run}-{i}.realtime.g2", 4) for i in range(20)]
    wanted += [TopicSpec(f"sp.many-{run}.realtime.g1", 2), TopicSpec(f"sp.many-{run}.realtime.g2", 5)]
    failed = KafkaAdmin().ensure_topics(cluster, wanted)
    assert list(failed) == [f"sp.many-{run}.realtime.g2"]
    assert isinstance(failed[f"sp.many-{run}.realtime.g2"], FailedPreconditionError)
    assert "3 partitions, not 5" in failed[f"sp.many-{run}.realtime.g2"].message
    for spec in wanted[:-1]:
        _assert_every_leader_serves(kafka_bootstrap, spec.topic, spec.partitions)


def test_kafka_admin_fails_every_topic_of_an_unreachable_cluster_with_its_name() -> None:
    cluster = Cluster("nowhere", "127.0.0.1:1")
    failed = KafkaAdmin(timeout_s=2).ensure_topics(
        cluster, [TopicSpec("sp.x.realtime.g1", 1), TopicSpec("sp.y.realtime.g1", 1)]
    )
    assert sorted(failed) == ["sp.x.realtime.g1", "sp.y.realtime.g1"]
    assert all(isinstance(err, UnavailableError) and "nowhere" in err.message for err in failed.values())
