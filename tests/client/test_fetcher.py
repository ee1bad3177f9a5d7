"""The partition fetcher against a real local cluster: reading, leader moves, a broker down, a zstd bomb."""

from __future__ import annotations

import threading
import time
import uuid

import pytest
from confluent_kafka import Producer

from streamplane.client.kafka import KafkaConnection
from streamplane.client.partition_fetcher import Leaders, PartitionFetcher, fetch_each
from streamplane.errors import DecodeLimitExceeded
from tests.helpers import fetches_asked


def produce(bootstrap: str, topic: str, values: list[bytes], **config: object) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "compression.type": "zstd", "linger.ms": 5, **config})
    for v in values:
        producer.produce(topic, v, partition=0)
    assert producer.flush(10) == 0


def read_all(fetcher: PartitionFetcher, expected: int, timeout: float = 20) -> tuple[list, list]:
    values, skipped = [], []
    deadline = time.monotonic() + timeout
    while len(values) < expected:
        assert time.monotonic() < deadline, f"read {len(values)} of {expected}"
        got = fetcher.fetch()
        skipped += got.skipped
        if got.batch is not None:
            values += [r.value for r in got.batch.records()]
    return values, skipped


@pytest.fixture
def topic(local_cluster) -> str:
    name = f"fetch-{uuid.uuid4().hex[:8]}"
    local_cluster[1].create_topic(name, 1)
    return name


def test_reads_from_the_earliest_or_a_given_offset(local_cluster, topic: str) -> None:
    bootstrap, _ = local_cluster
    values = [b"v%d" % i for i in range(500)]
    produce(bootstrap, topic, values)
    fetcher = PartitionFetcher(bootstrap, topic, 0, partition_max_bytes=2048)
    assert read_all(fetcher, 500)[0] == values
    assert fetcher.position == 500 and fetcher.fetch().batch is None, "caught up: nothing more"
    fetcher.close()
    middle = PartitionFetcher(bootstrap, topic, 0, start_offset=300)
    got, _ = read_all(middle, 200)
    assert got[0] == b"v300" and got[-1] == b"v499"
    middle.close()


def test_records_retention_removed_are_stepped_over_from_the_partitions_earliest_offset(kafka_bootstrap: str) -> None:
    """On a real broker whose log start was moved (DeleteRecords): `earliest()` is it, a fetcher from the
    earliest starts there, and one positioned below it goes on from it (what it missed is logged lost)."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = f"fetch-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=30)
    produce(kafka_bootstrap, topic, [b"v%d" % i for i in range(10)])
    for future in admin.delete_records([TopicPartition(topic, 0, 4)]).values():
        future.result(timeout=30)
    with_leaders = Leaders()
    try:
        fetcher = PartitionFetcher(kafka_bootstrap, topic, 0, leaders=with_leaders)
        assert fetcher.earliest() == 4 and fetcher.offsets() == (4, 10)
        assert read_all(fetcher, 6)[0] == [b"v%d" % i for i in range(4, 10)]
        below = PartitionFetcher(kafka_bootstrap, topic, 0, start_offset=1, leaders=with_leaders)
        assert read_all(below, 6)[0] == [b"v%d" % i for i in range(4, 10)]
    finally:
        with_leaders.close()


def test_follows_a_leader_move_and_waits_out_a_broker_down(local_cluster, topic: str) -> None:
    bootstrap, control = local_cluster
    produce(bootstrap, topic, [b"a%d" % i for i in range(100)])
    fetcher = PartitionFetcher(bootstrap, topic, 0, partition_max_bytes=1024, retry_backoff_s=0.05)
    first = fetcher.fetch()
    assert first.batch is not None and first.batch.count > 0
    control.set_leader(topic, 0, 2)  # the leader moves (twice), then its broker goes down for half a second
    assert fetcher.fetch() is not None
    control.set_leader(topic, 0, 3)
    control.broker_down(3)
    threading.Timer(0.5, control.broker_up, args=(3,)).start()
    rest, _ = read_all(fetcher, 100 - fetcher.position)
    assert fetcher.position == 100
    assert rest == [b"a%d" % i for i in range(100 - len(rest), 100)]
    fetcher.close()


def test_a_zstd_bomb_is_skipped_and_the_partition_keeps_flowing(local_cluster, topic: str) -> None:
    bootstrap, _ = local_cluster
    produce(bootstrap, topic, [b"before"])
    produce(bootstrap, topic, [b"\0" * (8 << 20)], **{"message.max.bytes": 16 << 20})  # 8 MiB, ~1 KB as zstd
    produce(bootstrap, topic, [b"after-%d" % i for i in range(10)])
    fetcher = PartitionFetcher(bootstrap, topic, 0, max_decompressed=1 << 20)
    values, skipped = read_all(fetcher, 11)
    assert values == [b"before"] + [b"after-%d" % i for i in range(10)]
    (bomb,) = skipped
    assert isinstance(bomb.error, DecodeLimitExceeded) and (bomb.first_offset, bomb.next_offset) == (1, 2)
    fetcher.close()


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="partition"):
        PartitionFetcher("127.0.0.1:1", "t", -1)


@pytest.mark.parametrize("records", [1, 7, 500, 3000])
def test_the_first_offset_at_a_time_is_found_by_the_records_own_timestamps(local_cluster, records: int) -> None:
    """The mock cluster's ListOffsets cannot look up by time (it answers -1): a rewind and the Spark source's
    startingTimestamp find the offset by a binary search of fetches, in batches of many records or of one."""
    from streamplane.client.kafka.watermarks import Watermarks

    bootstrap, control = local_cluster
    topic = f"time-{uuid.uuid4().hex[:8]}"
    control.create_topic(topic, 1)
    base = 1_700_000_000_000
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(records):  # every tenth record shares its time with the one before: times repeat
        producer.produce(topic, b"v%d" % i, partition=0, timestamp=base + 10 * (i - i % 10 // 9))
    assert producer.flush(10) == 0
    stamps = [base + 10 * (i - i % 10 // 9) for i in range(records)]
    fetcher = PartitionFetcher(bootstrap, topic, 0, partition_max_bytes=1024)
    marks = Watermarks()
    try:
        for at in sorted(
            {base - 1, base, base + 5, *stamps[records // 2 : records // 2 + 3], stamps[-1], base + 10**9}
        ):
            expected = next((i for i, t in enumerate(stamps) if t >= at), records)
            assert fetcher.offset_at_time(at, 0, records) == expected, at
            (bounds,) = marks.bounds(bootstrap, topic, 1, at)
            assert (bounds.earliest, bounds.end, bounds.at) == (0, records, expected), at
    finally:
        fetcher.close()
        marks.close()


def test_the_timestamps_of_records_at_offsets_come_in_one_fetch_per_leader(local_cluster) -> None:
    """Where a rewind to offsets starts each partition, and when that record was written: its time lag counts
    from it. A partition with no record at or after its offset is left out."""
    from streamplane.client.kafka.watermarks import Watermarks

    bootstrap, control = local_cluster
    topic = f"ts-{uuid.uuid4().hex[:8]}"
    control.create_topic(topic, 3)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for p in range(3):
        for i in range(10):
            producer.produce(topic, b"v", partition=p, timestamp=1_700_000_000_000 + 1000 * p + i)
    assert producer.flush(10) == 0
    marks = Watermarks()
    try:
        got = marks.timestamps(bootstrap, topic, {0: 0, 1: 7, 2: 10})
        assert got == {0: 1_700_000_000_000, 1: 1_700_000_001_007}
        (held,) = marks._clusters.values()
        kept = dict(held.conns)
        assert marks.timestamps(bootstrap, topic, {0: 0, 1: 7, 2: 10}) == got
        assert held.conns == kept, "asked again on the connections it kept (one a broker)"
    finally:
        marks.close()


def test_watermarks_shared_by_threads_answer_every_caller_while_clients_are_evicted(local_cluster) -> None:
    """The coordinator's rewinds and redrive claims look up bounds at the same time through one Watermarks:
    with room for one client and two clusters (the same broker by two names), every caller still gets its
    answer, though each call evicts the other's client (never closed under a caller that is using it)."""
    from concurrent.futures import ThreadPoolExecutor

    from streamplane.client.kafka.watermarks import Watermarks

    bootstrap, control = local_cluster
    host, port = bootstrap.split(",")[0].rsplit(":", 1)
    names = [f"{host}:{port}", f"localhost:{port}" if host != "localhost" else f"127.0.0.1:{port}"]
    topic = f"shared-{uuid.uuid4().hex[:8]}"
    control.create_topic(topic, 2)
    produce(bootstrap, topic, [b"v"] * 5)
    marks = Watermarks(max_clients=1)
    try:
        with ThreadPoolExecutor(8) as pool:
            got = list(pool.map(lambda i: marks.bounds(names[i % 2], topic, 2), range(40)))
    finally:
        marks.close()
    assert {(b[0].earliest, b[0].end, b[1].end) for b in got} == {(0, 5, 0)}


def test_fetchers_sharing_leaders_read_many_partitions_over_one_connection_a_broker(
    local_cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Spark task reads its ranges one after another: one metadata request and one connection per broker for
    all of them, not both for every partition; a leader that moves meanwhile is followed."""
    bootstrap, control = local_cluster
    name = f"fetch-{uuid.uuid4().hex[:8]}"
    control.create_topic(name, 6)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for p in range(6):
        for i in range(50):
            producer.produce(name, b"p%d-%d" % (p, i), partition=p)
    assert producer.flush(10) == 0
    with KafkaConnection.connect_any(bootstrap) as conn:
        first = next(p.leader for p in conn.metadata([name]).topics[name] if p.partition == 0)
    opened: list[tuple[str, int]] = []
    real_init = KafkaConnection.__init__

    def counted(self: KafkaConnection, host: str, port: int, config: object = None) -> None:
        opened.append((host, port))
        real_init(self, host, port, config)  # type: ignore[arg-type]

    monkeypatch.setattr(KafkaConnection, "__init__", counted)

    def read(p: int, leaders: Leaders) -> list[bytes]:
        fetcher = PartitionFetcher(bootstrap, name, p, start_offset=0, retry_backoff_s=0.05, leaders=leaders)
        values, _ = read_all(fetcher, 50)
        fetcher.close()  # the shared connections stay open for the next one
        return values

    leaders = Leaders()
    try:
        for p in range(6):
            assert read(p, leaders) == [b"p%d-%d" % (p, i) for i in range(50)]
        assert len(opened) <= 4, f"one bootstrap connection for the metadata, one per broker: {opened}"
        before = len(opened)
        control.set_leader(name, 0, 1 + first % 3)  # another broker
        assert read(0, leaders) == [b"p0-%d" % i for i in range(50)]
        assert len(opened) - before <= 2, "after a move: the metadata again, and the new leader if unknown"
    finally:
        leaders.close()
    own = PartitionFetcher(bootstrap, name, 1, start_offset=0)  # a fetcher alone owns and closes its own
    assert read_all(own, 50)[0] == [b"p1-%d" % i for i in range(50)]
    own.close()


def test_fetchers_read_together_ask_each_leader_once_and_follow_a_moved_partition_alone(
    local_cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Spark task reads its ranges together: one Fetch a leader for all of its partitions there, not one a
    partition; a partition whose leader moved is fetched alone and followed; every record comes once, in
    order."""
    bootstrap, control = local_cluster
    name = f"fetch-{uuid.uuid4().hex[:8]}"
    control.create_topic(name, 6)
    for p in range(6):
        control.set_leader(name, p, 1 + p % 2)  # partitions 0, 2, 4 on broker 1; 1, 3, 5 on broker 2
    # flush() sends at once whatever linger.ms says; a long linger keeps each round one batch a partition
    # however slowly a loaded machine runs the loop (at 5 ms a round could leave in two batches)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 10_000})
    for batch in range(3):  # three batches a partition: the local cluster answers a Fetch with one
        for p in range(6):
            for i in range(100 * batch, 100 * batch + 100):
                producer.produce(name, b"p%d-%03d" % (p, i), partition=p)
        assert producer.flush(10) == 0
    asked = fetches_asked(monkeypatch)
    leaders = Leaders()
    fetchers = [
        PartitionFetcher(bootstrap, name, p, start_offset=0, retry_backoff_s=0.05, leaders=leaders) for p in range(6)
    ]
    got: dict[int, list[bytes]] = {p: [] for p in range(6)}

    def take(pending: list[PartitionFetcher]) -> None:
        for fetcher, fetched in fetch_each(pending):
            if fetched.batch is not None:
                got[fetcher.partition] += [r.value for r in fetched.batch.records()]

    try:
        take(fetchers)
        assert asked == [[0, 2, 4], [1, 3, 5]], "one Fetch a leader for its partitions"
        assert all(len(got[p]) == 100 for p in range(6))
        control.set_leader(name, 0, 3)
        take(fetchers)
        assert asked[2:] == [[0, 2, 4], [1, 3, 5], [0]], "the moved partition fetched alone, at its new leader"
        while any(f.position < 300 for f in fetchers):
            take([f for f in fetchers if f.position < 300])
    finally:
        leaders.close()
    assert got == {p: [b"p%d-%03d" % (p, i) for i in range(300)] for p in range(6)}
