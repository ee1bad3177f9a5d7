"""What a Kafka cluster keeps of partitions: their low and high watermarks, and offsets by time.

Through librdkafka, one client per cluster, kept while the `Watermarks` lives: Spark's planner, the
coordinator's rewinds and tests read where partitions begin and end, and where a time falls in them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

from streamplane.errors import NotFoundError, UnavailableError
from streamplane.model import PartitionBounds

EARLIEST, LATEST = -2, -1
"""ListOffsets' special timestamps: a partition's first offset kept, and the offset after its last record."""


class Watermarks:
    """Low and high watermarks of partitions, and offsets by time, through librdkafka: one client per cluster,
    the `max_clients` used last kept (each is a librdkafka instance with its threads and connections, so a
    coordinator that looked at many clusters once keeps only a few). Their errors come back as exceptions; their
    logs are off, so a cluster that dies while its client is kept does not fill stderr.

    Safe to share between threads: librdkafka's calls are, and a client in use is never closed under its caller
    (one evicted while in use is closed by its last user)."""

    def __init__(self, timeout_s: float = 10.0, *, max_clients: int = 8) -> None:
        self._consumers: dict[str, Any] = {}
        self._users: dict[int, int] = {}
        self._evicted: set[int] = set()
        self._lock = threading.Lock()
        self._timeout_s = timeout_s
        self._max_clients = max_clients

    @contextmanager
    def _using(self, bootstrap: str) -> Iterator[Any]:
        """The cluster's client while the block runs (made on first use; the least recently used one beyond
        `max_clients` is evicted)."""
        from confluent_kafka import Consumer

        with self._lock:
            consumer = self._consumers.pop(bootstrap, None)
            if consumer is None:
                consumer = Consumer(
                    {"bootstrap.servers": bootstrap, "group.id": "streamplane-watermarks", "log_level": 0}
                )
            self._consumers[bootstrap] = consumer  # the newest last: the first is the one used longest ago
            self._users[id(consumer)] = self._users.get(id(consumer), 0) + 1
            closing = []
            while len(self._consumers) > self._max_clients:
                oldest = self._consumers.pop(next(iter(self._consumers)))
                if self._users.get(id(oldest)):
                    self._evicted.add(id(oldest))  # its user closes it
                else:
                    closing.append(oldest)
        for old in closing:
            old.close()
        try:
            yield consumer
        finally:
            with self._lock:
                left = self._users[id(consumer)] = self._users[id(consumer)] - 1
                last = left == 0 and id(consumer) in self._evicted
                if left == 0:
                    del self._users[id(consumer)]
                    self._evicted.discard(id(consumer))
            if last:
                consumer.close()

    def get(self, bootstrap: str, topic: str, partition: int) -> tuple[int, int]:
        from confluent_kafka import KafkaException, TopicPartition

        try:
            with self._using(bootstrap) as consumer:
                low, high = consumer.get_watermark_offsets(
                    TopicPartition(topic, partition), timeout=self._timeout_s, cached=False
                )
            return int(low), int(high)
        except KafkaException as err:
            raise UnavailableError(f"cannot read offsets of {topic}/{partition} at {bootstrap}: {err}") from err

    def at_time(self, bootstrap: str, topic: str, partitions: dict[int, int]) -> dict[int, int]:
        """{partition: the offset of its first record at or after the time (ms)}; -1 where there is none. One
        request per leader for all the partitions; where the cluster answers none while the partition's last
        record is that late (librdkafka's mock cluster never looks up by time), the records' own timestamps
        are searched."""
        from confluent_kafka import KafkaException, TopicPartition

        asked = [TopicPartition(topic, p, ts) for p, ts in partitions.items()]
        try:
            with self._using(bootstrap) as consumer:
                got = consumer.offsets_for_times(asked, timeout=self._timeout_s)
        except KafkaException as err:
            raise UnavailableError(f"cannot look up offsets by time in {topic} at {bootstrap}: {err}") from err
        for tp in got:
            if tp.error is not None:
                raise UnavailableError(f"cannot look up offsets by time in {topic}/{tp.partition}: {tp.error.str()}")
        found = {tp.partition: tp.offset for tp in got}
        for p, offset in found.items():
            if offset < 0:
                low, high = self.get(bootstrap, topic, p)
                if high > low:
                    at = self._search(bootstrap, topic, p, partitions[p], low, high)
                    found[p] = at if at < high else -1
        return found

    def _special(self, bootstrap: str, topic: str, partitions: int, which: int) -> dict[int, int]:
        """{partition: its earliest or latest offset} (`which` EARLIEST or LATEST), one request per leader."""
        from confluent_kafka import KafkaException, TopicPartition

        asked = [TopicPartition(topic, p, which) for p in range(partitions)]
        try:
            with self._using(bootstrap) as consumer:
                got = consumer.offsets_for_times(asked, timeout=self._timeout_s)
        except KafkaException as err:
            raise UnavailableError(f"cannot read the offsets of {topic} at {bootstrap}: {err}") from err
        for tp in got:
            if tp.error is not None or tp.offset < 0:
                why = tp.error.str() if tp.error is not None else "no offset"
                raise UnavailableError(f"cannot read the offsets of {topic}/{tp.partition} at {bootstrap}: {why}")
        return {tp.partition: tp.offset for tp in got}

    def exists(self, bootstrap: str, topic: str) -> bool:
        """Whether the cluster has `topic` (UnavailableError if it does not answer)."""
        from confluent_kafka import KafkaException

        try:
            with self._using(bootstrap) as consumer:
                metadata = consumer.list_topics(topic, timeout=self._timeout_s)
        except KafkaException as err:
            raise UnavailableError(f"cannot read the metadata of {bootstrap}: {err}") from err
        found = metadata.topics.get(topic)
        return found is not None and found.error is None and bool(found.partitions)

    def bounds(self, bootstrap: str, topic: str, partitions: int, at_ms: int | None = None) -> list[PartitionBounds]:
        """What the cluster keeps of each partition of `topic`, and where `at_ms` falls in it (None: no time).
        NotFoundError when the topic is gone, UnavailableError when the cluster does not answer. The lookups go
        out together (one round trip, not four: a rewind waits on them)."""
        asks: list[Callable[[], Any]] = [
            lambda: self.exists(bootstrap, topic),
            lambda: self._special(bootstrap, topic, partitions, LATEST),
            lambda: self._special(bootstrap, topic, partitions, EARLIEST),
        ]
        if at_ms is not None:
            asks.append(lambda: self.at_time(bootstrap, topic, dict.fromkeys(range(partitions), at_ms)))
        with ThreadPoolExecutor(len(asks), thread_name_prefix="watermarks") as pool:
            answers = [pool.submit(ask) for ask in asks]
        if not answers[0].result():  # before the others' errors: those are about a topic that is gone
            raise NotFoundError(f"topic {topic} is not on {bootstrap} any more", kind="topic", name=topic)
        ends, starts = answers[1].result(), answers[2].result()
        marks = [(starts[p], ends[p]) for p in range(partitions)]
        if at_ms is None:
            return [PartitionBounds(low, high) for low, high in marks]
        found = answers[3].result()
        return [
            PartitionBounds(low, high, at if (at := found.get(p, -1)) >= 0 else high)
            for p, (low, high) in enumerate(marks)
        ]

    def _search(self, bootstrap: str, topic: str, partition: int, at_ms: int, low: int, high: int) -> int:
        """The first offset at or after `at_ms` by the records' own timestamps (see PartitionFetcher): when
        the last record is earlier, one fetch says so."""
        from streamplane.client.partition_fetcher import PartitionFetcher

        fetcher = PartitionFetcher(bootstrap, topic, partition, partition_max_bytes=64 << 10)
        try:
            fetcher.position = high - 1
            last = fetcher.fetch().batch
            if last is None or not len(last) or max(last.timestamps) < at_ms:
                return high
            return fetcher.offset_at_time(at_ms, low, high)
        finally:
            fetcher.close()

    @staticmethod
    def timestamps(bootstrap: str, topic: str, offsets: dict[int, int]) -> dict[int, int]:
        """{partition: the timestamp of its first record at or after the offset}: one Fetch per leader for all
        its partitions (a partition with no record there, or whose leader does not answer, is left out)."""
        from streamplane.client.kafka import ConnectionConfig, KafkaConnection, KafkaProtocolError
        from streamplane.client.records import decode_records
        from streamplane.native import DEFAULT_MAX_DECOMPRESSED

        config = ConnectionConfig(timeout_s=10.0)
        try:
            with KafkaConnection.connect_any(bootstrap, config) as boot:
                md = boot.metadata([topic])
        except (UnavailableError, KafkaProtocolError) as err:
            raise UnavailableError(f"cannot read the metadata of {topic} at {bootstrap}: {err}") from err
        leaders = {p.partition: p.leader for p in md.topics.get(topic, [])}
        by_leader: dict[int, dict[int, int]] = {}
        for partition, offset in offsets.items():
            leader = leaders.get(partition, -1)
            if leader in md.brokers:
                by_leader.setdefault(leader, {})[partition] = offset
        out = {}
        for leader, asked in by_leader.items():
            broker = md.brokers[leader]
            try:
                with KafkaConnection(broker.host, broker.port, config) as conn:
                    parts = conn.fetch(topic, asked, max_wait_ms=10, partition_max_bytes=64 << 10)
            except (UnavailableError, KafkaProtocolError):
                continue
            for part in parts:
                if part.error_code or part.partition not in asked:
                    continue
                start = asked[part.partition]
                got = decode_records(
                    part.records, start, part.high_watermark, max_decompressed=DEFAULT_MAX_DECOMPRESSED, aborted=None
                )
                if got.batch is not None and len(got.batch):
                    out[part.partition] = int(got.batch.timestamps[0])
        return out

    def close(self) -> None:
        with self._lock:
            consumers, self._consumers = list(self._consumers.values()), {}
        for consumer in consumers:
            consumer.close()
