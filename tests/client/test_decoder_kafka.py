"""Batches written by librdkafka, fetched raw over the Kafka protocol from the local cluster, decode exactly
as confluent-kafka's own consumer reads them, under both decoder implementations."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from streamplane.client.kafka import EARLIEST, LATEST, KafkaConnection
from streamplane.native import decode

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
PARTITIONS = 2
PER_PARTITION = 600


def _record(i: int) -> dict:
    return {
        "key": None if i % 5 == 0 else b"key-%d" % i,
        "value": None if i % 7 == 0 else b'{"id":%d,"level":"info","msg":"%s"}' % (i, b"x" * (i % 50)),
        "headers": [("trace", b"t%d" % i), ("dup", b"1"), ("dup", None)] if i % 3 == 0 else None,
    }


@pytest.fixture(scope="module")
def topics(local_cluster) -> dict[str, str]:
    bootstrap, control = local_cluster
    names = {}
    for codec in CODECS:
        topic = f"sp.decode-{codec}-{uuid.uuid4().hex[:6]}.realtime.g1"
        control.create_topic(topic, PARTITIONS)
        producer = Producer(
            {"bootstrap.servers": bootstrap, "compression.type": codec, "linger.ms": 20, "batch.num.messages": 200}
        )
        for i in range(PARTITIONS * PER_PARTITION):
            producer.produce(topic, partition=i % PARTITIONS, timestamp=1_700_000_000_000 + i, **_record(i))
        assert producer.flush(30) == 0
        names[codec] = topic
    return names


def _confluent(bootstrap: str, topic: str) -> list[tuple]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex, "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    got: list[tuple] = []
    deadline = time.monotonic() + 30
    while len(got) < PARTITIONS * PER_PARTITION:
        assert time.monotonic() < deadline, "confluent-kafka stopped receiving"
        for m in consumer.consume(200, 0.2):  # consume() waits its full timeout unless it fills the batch
            assert m.error() is None
            got.append((m.partition(), m.offset(), m.timestamp()[1], m.key(), m.value(), tuple(m.headers() or ())))
    consumer.close()
    return sorted(got)


def _raw(bootstrap: str, topic: str, impl: str) -> tuple[list[tuple], list[str]]:
    """Every record of the topic through our Fetch client and decoder; also the codecs of the batches seen."""
    got: list[tuple] = []
    codecs: set[str] = set()
    with KafkaConnection.connect_any(bootstrap) as bootstrap_conn:
        versions = bootstrap_conn.versions
        assert versions[1][1] >= 4, "the broker must speak Fetch v4"
        metadata = bootstrap_conn.metadata([topic])
    for part in metadata.topics[topic]:
        leader = metadata.brokers[part.leader]
        with KafkaConnection(leader.host, leader.port) as conn:
            offset = conn.list_offsets(topic, [part.partition], EARLIEST)[part.partition]
            end = conn.list_offsets(topic, [part.partition], LATEST)[part.partition]
            while offset < end:
                (fetched,) = conn.fetch(topic, {part.partition: offset}, partition_max_bytes=4096)
                assert fetched.error_code == 0
                batch = decode(fetched.records, impl=impl)
                assert batch.error is None
                codecs.update(b.codec_name for b in batch.batches)
                for r in batch.records():
                    got.append((part.partition, r.offset, r.timestamp, r.key, r.value, r.headers))
                offset = batch.next_offset
    return sorted(got), sorted(codecs)


@pytest.mark.parametrize("codec", CODECS)
def test_raw_fetch_decodes_like_confluent_kafka(local_cluster, topics, codec: str) -> None:
    bootstrap, _ = local_cluster
    expected = _confluent(bootstrap, topics[codec])
    native_records, native_codecs = _raw(bootstrap, topics[codec], "native")
    python_records, _ = _raw(bootstrap, topics[codec], "python")
    # the broker hands back the producer's batches verbatim; librdkafka sends a batch uncompressed when the
    # codec would not shrink it (seen once with snappy in a full run)
    assert codec in native_codecs and set(native_codecs) <= {codec, "none"}, native_codecs
    assert len(expected) == PARTITIONS * PER_PARTITION
    assert native_records == expected
    assert python_records == expected


def test_fetch_of_an_unknown_partition_reports_the_kafka_error(local_cluster, topics) -> None:
    bootstrap, _ = local_cluster
    with KafkaConnection.connect_any(bootstrap) as conn:
        (fetched,) = conn.fetch(topics["none"], {99: 0})
    assert fetched.error_code != 0 and len(fetched.records) == 0
