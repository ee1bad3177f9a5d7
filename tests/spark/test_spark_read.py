"""A Spark task's read of its ranges, run as an executor runs it (no Spark) against a real broker: every record
of each range once, ranges read together, and retention's losses failing the query or stepped over as the
failOnDataLoss option says."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from streamplane.errors import UnavailableError
from streamplane.spark.options import SourceOptions
from streamplane.spark.reader import Slice, Task, read_task
from tests.helpers import fetches_asked


@pytest.fixture
def topic(kafka_bootstrap: str) -> Iterator[str]:
    """Three partitions of 30 records each ("p<partition>-<i>", three batches a partition), the first 10 of
    partition 1 removed by retention (DeleteRecords)."""
    name = f"spark-read-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    admin.create_topics([NewTopic(name, 3, 1)])[name].result(timeout=30)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "linger.ms": 5, "compression.type": "zstd"})
    for batch in range(3):
        for p in range(3):
            for i in range(10 * batch, 10 * batch + 10):
                producer.produce(name, b"p%d-%d" % (p, i), partition=p)
        assert producer.flush(10) == 0
    for future in admin.delete_records([TopicPartition(name, 1, 10)]).values():
        future.result(timeout=30)
    yield name
    admin.delete_topics([name])


def task(bootstrap: str, topic: str) -> Task:
    def piece(partition: int, begin: int, end: int) -> Slice:
        return Slice("s", "realtime", 1, partition, topic, bootstrap, begin, end)

    return Task((piece(0, 5, 30), piece(1, 0, 30), piece(2, 0, 20)))


def rows(batches: Iterator[Any]) -> dict[int, list[bytes]]:
    out: dict[int, list[bytes]] = {}
    for batch in batches:
        values = batch.column("value").to_pylist()
        for partition, value in zip(batch.column("partition").to_pylist(), values, strict=True):
            out.setdefault(partition, []).append(value)
    return out


def test_a_tasks_ranges_are_read_together_each_record_once(
    kafka_bootstrap: str, topic: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One Fetch a round for the three ranges (one broker); with the Fetch's byte limit at its least the broker
    fills one partition a round, and those it left empty are asked again; retention's loss is stepped over
    (failOnDataLoss=false)."""
    asked = fetches_asked(monkeypatch)
    opts = SourceOptions.parse({"stream": "s", "failOnDataLoss": "false"})
    got = rows(read_task(task(kafka_bootstrap, topic), opts, None))
    assert got == {
        0: [b"p0-%d" % i for i in range(5, 30)],
        1: [b"p1-%d" % i for i in range(10, 30)],
        2: [b"p2-%d" % i for i in range(20)],
    }
    assert asked[0] == [0, 1, 2] and len(asked) <= 4, f"the ranges were read together: {asked}"

    asked.clear()
    monkeypatch.setattr("streamplane.client.partition_fetcher.TOGETHER_MAX_BYTES", 1)
    assert rows(read_task(task(kafka_bootstrap, topic), opts, None)) == got
    assert len(asked) > 3, f"a round at a time filled what the byte limit let through: {asked}"


def test_records_retention_removed_from_a_range_fail_the_read_with_a_sentence(kafka_bootstrap: str, topic: str) -> None:
    opts = SourceOptions.parse({"stream": "s"})  # failOnDataLoss defaults to true, as in Spark's Kafka source
    with pytest.raises(UnavailableError, match=r"/1: offsets 0 to 10 are gone \(retention\); set failOnDataLoss=false"):
        list(read_task(task(kafka_bootstrap, topic), opts, None))
