"""Watermarks: what a cluster keeps of partitions, through our own protocol client, one connection per broker of
the clusters looked at last (rewinds, redrive claims and Spark's planner ask it again and again)."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer

from streamplane.client.kafka.watermarks import Watermarks
from streamplane.devstack.mockcluster import MockCluster
from streamplane.errors import NotFoundError, UnavailableError


def _fill(cluster: MockCluster, topic: str, counts: list[int]) -> None:
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "linger.ms": 5})
    for p, n in enumerate(counts):
        for i in range(n):
            producer.produce(topic, b"v%d" % i, partition=p)
    assert producer.flush(10) == 0


@pytest.fixture
def two_brokers() -> Iterator[tuple[MockCluster, Watermarks]]:
    cluster, marks = MockCluster(2), Watermarks()
    yield cluster, marks
    marks.close()
    cluster.close()


def test_watermarks_of_every_partition_come_over_one_connection_a_broker_kept_between_calls(
    two_brokers: tuple[MockCluster, Watermarks],
) -> None:
    cluster, marks = two_brokers
    cluster.create_topic("kept", 4)
    for p in range(4):
        cluster.set_leader("kept", p, 1 + p % 2)
    _fill(cluster, "kept", [3, 0, 5, 1])
    for _ in range(3):
        assert marks.marks(cluster.bootstrap_servers, "kept", [0, 1, 2, 3]) == {
            0: (0, 3),
            1: (0, 0),
            2: (0, 5),
            3: (0, 1),
        }
        assert marks.get(cluster.bootstrap_servers, "kept", 2) == (0, 5)
        assert marks.ends(cluster.bootstrap_servers, "kept", [3, 2]) == {3: 1, 2: 5}
        assert [(b.earliest, b.end) for b in marks.bounds(cluster.bootstrap_servers, "kept", 4)] == [
            (0, 3),
            (0, 0),
            (0, 5),
            (0, 1),
        ]
    (held,) = marks._clusters.values()
    assert sorted(held.conns) == [1, 2], "one connection per broker, kept"


def test_a_leader_that_moved_since_the_last_call_is_looked_up_again(
    two_brokers: tuple[MockCluster, Watermarks],
) -> None:
    cluster, marks = two_brokers
    cluster.create_topic("moving", 1)
    cluster.set_leader("moving", 0, 1)
    _fill(cluster, "moving", [4])
    assert marks.get(cluster.bootstrap_servers, "moving", 0) == (0, 4)
    cluster.set_leader("moving", 0, 2)  # the leader it knows now answers NOT_LEADER_OR_FOLLOWER
    assert marks.get(cluster.bootstrap_servers, "moving", 0) == (0, 4)
    assert marks._clusters[cluster.bootstrap_servers].leaders["moving"] == {0: 2}


def test_a_topic_that_is_gone_and_a_cluster_that_does_not_answer_are_said_in_one_sentence() -> None:
    cluster = MockCluster(1)
    marks = Watermarks()
    with socket.socket() as s:  # a port where nothing listens
        s.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{s.getsockname()[1]}"
    try:
        with pytest.raises(NotFoundError, match="topic never-made is not on"):
            marks.bounds(cluster.bootstrap_servers, "never-made", 2)
        assert not marks.exists(cluster.bootstrap_servers, "never-made")
        with pytest.raises(UnavailableError, match="never-made/0 is not in"):
            marks.get(cluster.bootstrap_servers, "never-made", 0)
        with pytest.raises(UnavailableError, match=f"no Kafka broker of {dead} is reachable"):
            marks.bounds(dead, "t", 1)
    finally:
        marks.close()
        cluster.close()


def test_a_time_past_the_last_record_of_many_partitions_is_found_without_a_search_of_each(
    two_brokers: tuple[MockCluster, Watermarks],
) -> None:
    """The mock cluster never looks up by time (it answers -1, as a real broker does past the last record): the
    partitions' last records, one Fetch per leader, say which hold a record that late; only those are searched,
    not every idle partition over a connection of its own."""
    cluster, marks = two_brokers
    cluster.create_topic("idle", 8)
    for p in range(8):
        cluster.set_leader("idle", p, 1 + p % 2)
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "linger.ms": 5})
    for p in range(8):
        for i in range(3):
            producer.produce("idle", b"v%d" % i, partition=p, timestamp=1_000 * (i + 1))
    producer.produce("idle", b"late", partition=5, timestamp=9_000)
    assert producer.flush(10) == 0
    searched: list[int] = []
    search = marks._search

    def counted(bootstrap: str, topic: str, partition: int, at_ms: int, low: int, high: int) -> int:
        searched.append(partition)
        return search(bootstrap, topic, partition, at_ms, low, high)

    marks._search = counted  # type: ignore[method-assign]
    bounds = marks.bounds(cluster.bootstrap_servers, "idle", 8, 5_000)
    assert [b.at for b in bounds] == [3, 3, 3, 3, 3, 3, 3, 3], "past the last record: each partition's end"
    assert bounds[5].end == 4
    assert searched == [5], "only the partition with a record that late is searched"
    assert marks.at_time(cluster.bootstrap_servers, "idle", {0: 2_000, 1: 10_000}) == {0: 1, 1: -1}


def test_offsets_asked_together_come_back_in_order_and_a_refused_one_leaves_the_connection_usable(
    two_brokers: tuple[MockCluster, Watermarks],
) -> None:
    """A rewind's lookup sends a partition's earliest, latest and timed offsets to its leader together (a
    request may not name a partition twice): one round trip. Every answer is read before a refused one
    raises, so the next request on the connection gets its own answer."""
    from streamplane.client.kafka import KafkaConnection, KafkaProtocolError

    cluster, _ = two_brokers
    cluster.create_topic("together", 1)
    cluster.set_leader("together", 0, 1)
    _fill(cluster, "together", [4])
    with KafkaConnection.connect_any(cluster.bootstrap_servers) as boot:
        leader = boot.metadata(["together"]).brokers[1]
    with KafkaConnection(leader.host, leader.port) as conn:
        assert conn.list_offsets_each("together", [{0: -2}, {0: -1}, {0: -1}]) == [{0: 0}, {0: 4}, {0: 4}]
        with pytest.raises(KafkaProtocolError, match="together/7 failed"):
            conn.list_offsets_each("together", [{7: -1}, {0: -1}])
        assert conn.list_offsets("together", [0], -1) == {0: 4}, "the refused ask's answers were all read"
