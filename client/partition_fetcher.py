"""Fetching one partition's records straight from Kafka, decoded by the native decoder.

A PartitionFetcher finds the partition's leader, starts at a given offset (or the earliest one), and returns
decoded batches. It follows leader moves and retriable errors with backoff, and never stalls the partition on
a bad batch: a batch past the decompression limit, or corrupt, is skipped and reported as a rejected range.
Fetchers that read several partitions (a Spark task's ranges) share their `Leaders`: one metadata request per
topic and one connection per broker, not both for every partition; `fetch_each` reads them together, one Fetch
per leader for all of them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

import structlog

from streamplane.client.kafka import EARLIEST, LATEST, ConnectionConfig, KafkaConnection, KafkaProtocolError
from streamplane.client.kafka.codec import RELOOKUP, ErrorCode
from streamplane.client.records import Fetched, decode_records
from streamplane.clock import SYSTEM, Clock
from streamplane.errors import UnavailableError
from streamplane.native import DEFAULT_MAX_DECOMPRESSED, Where

log = structlog.get_logger(__name__)
R = TypeVar("R")


class Leaders:
    """Connections to partitions' leaders, for fetchers used one after another on one thread: each topic's
    metadata is asked once, and each broker has one connection, until one fails (then that connection is
    closed and the metadata asked again). Its owner closes it."""

    def __init__(self, connection: ConnectionConfig | None = None) -> None:
        self._config = connection
        self._leaders: dict[tuple[str, str], dict[int, tuple[str, int]]] = {}  # (bootstrap, topic): partition's
        self._connections: dict[tuple[str, int], KafkaConnection] = {}

    def leader(self, bootstrap_servers: str, topic: str, partition: int) -> KafkaConnection:
        """A connection to the partition's leader (KafkaProtocolError when it has none now)."""
        known = self._leaders.get((bootstrap_servers, topic))
        if known is None or partition not in known:
            with KafkaConnection.connect_any(bootstrap_servers, self._config) as bootstrap:
                metadata = bootstrap.metadata([topic])
            known = self._leaders[(bootstrap_servers, topic)] = {
                p.partition: (metadata.brokers[p.leader].host, metadata.brokers[p.leader].port)
                for p in metadata.topics.get(topic, [])
                if p.leader >= 0 and p.leader in metadata.brokers
            }
        if partition not in known:
            raise KafkaProtocolError(f"{topic}/{partition} has no leader now", code=5)
        where = known[partition]
        conn = self._connections.get(where)
        if conn is None:
            conn = self._connections[where] = KafkaConnection(*where, self._config)
        return conn

    def failed(self, bootstrap_servers: str, topic: str, partition: int) -> None:
        """The partition's leader did not serve it: close that connection, and ask the topic's metadata again
        next time."""
        where = self._leaders.pop((bootstrap_servers, topic), {}).get(partition)
        conn = self._connections.pop(where, None) if where is not None else None
        if conn is not None:
            conn.close()

    def close(self) -> None:
        for conn in self._connections.values():
            conn.close()
        self._connections.clear()
        self._leaders.clear()


class PartitionFetcher:
    """Reads one partition from its leader.

    Args:
        bootstrap_servers: the cluster's bootstrap list.
        topic, partition: what to read.
        start_offset: the first offset to read; -1 starts at the earliest offset still kept.
        max_decompressed: the decoder's limit for each batch and each fetch.
        partition_max_bytes: how much one fetch asks for.
        max_wait_ms: how long the broker may hold a fetch open when there is nothing new.
        connection: TLS, SASL and client settings of the connections (default plaintext).
        leaders: connections shared with other fetchers (their owner closes them); by default its own.
        retry_for_s: how long a read keeps trying a leader that does not answer before it raises
            UnavailableError (0: as long as it takes, as a Spark task or a consumer waits for its cluster).
        clock: what `retry_for_s` is measured on.
        on_lost: called with (lost_from, lost_to) when retention has removed records from the position before
            they were read, before the fetcher goes on from the earliest offset kept (it may raise to stop
            there); by default the loss is logged.
    """

    def __init__(
        self,
        bootstrap_servers: str,
        topic: str,
        partition: int,
        *,
        start_offset: int = -1,
        max_decompressed: int = DEFAULT_MAX_DECOMPRESSED,
        partition_max_bytes: int = 1 << 20,
        max_wait_ms: int = 100,
        retry_backoff_s: float = 0.1,
        max_backoff_s: float = 2.0,
        connection: ConnectionConfig | None = None,
        where: Where | None = None,
        leaders: Leaders | None = None,
        retry_for_s: float = 0.0,
        clock: Clock = SYSTEM,
        on_lost: Callable[[int, int], None] | None = None,
    ) -> None:
        if partition < 0:
            raise ValueError(f"partition must not be negative, not {partition}")
        if partition_max_bytes <= 0 or max_decompressed <= 0:
            raise ValueError("partition_max_bytes and max_decompressed must be positive")
        self.bootstrap_servers, self.topic, self.partition = bootstrap_servers, topic, partition
        self.position = start_offset
        self.max_decompressed = max_decompressed
        self.partition_max_bytes = partition_max_bytes
        self.max_wait_ms = max_wait_ms
        self._backoff = (retry_backoff_s, max_backoff_s)
        self.retry_for_s, self.clock = retry_for_s, clock
        self._owns = leaders is None
        self._leaders = Leaders(connection) if leaders is None else leaders
        self.where = where  # records it does not match are left out in the decoder
        self.on_lost = on_lost

    def close(self) -> None:
        if self._owns:
            self._leaders.close()

    def _connect_leader(self) -> KafkaConnection:
        return self._leaders.leader(self.bootstrap_servers, self.topic, self.partition)

    def _drop_leader(self) -> None:
        self._leaders.failed(self.bootstrap_servers, self.topic, self.partition)

    def _with_retries(self, what: str, fn: Callable[[KafkaConnection], R]) -> R:
        delay, cap = self._backoff
        failing_since = 0.0
        while True:
            try:
                return fn(self._connect_leader())
            except (UnavailableError, KafkaProtocolError) as err:
                if isinstance(err, KafkaProtocolError) and not err.retryable and err.code not in RELOOKUP:
                    raise
                failing_since = failing_since or self.clock.monotonic()
                if self.retry_for_s and self.clock.monotonic() + delay - failing_since > self.retry_for_s:
                    raise UnavailableError(
                        f"{self.topic}/{self.partition} at {self.bootstrap_servers}: {what} failed for "
                        f"{self.retry_for_s:g} s: {err.message}"
                    ) from err
                log.info(
                    "fetcher.retry",
                    topic=self.topic,
                    partition=self.partition,
                    what=what,
                    error=err.message,
                    backoff_s=delay,
                )
                self._drop_leader()
                time.sleep(delay)
                delay = min(cap, delay * 2)

    def earliest(self) -> int:
        """The earliest offset the partition still keeps (one ListOffsets)."""
        return self._with_retries(
            "ListOffsets", lambda c: c.list_offsets(self.topic, [self.partition], EARLIEST)[self.partition]
        )

    def offsets(self) -> tuple[int, int]:
        """(earliest, latest) offsets of the partition now."""
        earliest = self.earliest()
        latest = self._with_retries(
            "ListOffsets", lambda c: c.list_offsets(self.topic, [self.partition], LATEST)[self.partition]
        )
        return earliest, latest

    def offset_at_time(self, at_ms: int, earliest: int, end: int) -> int:
        """The first offset in [earliest, end) whose record's timestamp is at or after `at_ms` (`end` when none),
        found by the records' own timestamps: a binary search of fetches, about log2(end - earliest) of them.
        For clusters whose ListOffsets cannot look up by time (librdkafka's mock cluster answers -1 always).
        Like Kafka's time index, it takes timestamps to grow with offsets."""
        lo, hi, best = earliest, end, end
        while lo < hi:
            mid = (lo + hi) // 2
            self.position = mid
            batch = self.fetch().batch
            if batch is None or not len(batch):
                hi = mid  # nothing from mid on (the end moved back, or a gap to the end)
                continue
            offsets, stamps = batch.offsets, batch.timestamps
            first_late = next((i for i in range(len(offsets)) if stamps[i] >= at_ms), -1)
            if first_late > 0:
                return int(offsets[first_late])  # the record before it, in the same fetch, is earlier
            if first_late == 0:
                best, hi = min(best, int(offsets[0])), mid  # no record between mid and it
            else:
                lo = int(offsets[-1]) + 1
        return min(best, end)

    def fetch(self) -> Fetched:
        """The next records from the current position (none when caught up), moving the position past them."""
        if self.position < 0:
            self.position = self.earliest()
        while True:
            (part,) = self._with_retries(
                "Fetch",
                lambda c: c.fetch(
                    self.topic,
                    {self.partition: self.position},
                    max_wait_ms=self.max_wait_ms,
                    partition_max_bytes=self.partition_max_bytes,
                ),
            )
            if part.error_code == ErrorCode.OFFSET_OUT_OF_RANGE:
                earliest = self.earliest()
                if self.position < earliest:  # retention removed what we had not read: say so, go on
                    self._lost(earliest)
                    continue
                return Fetched(None, high_watermark=part.high_watermark)
            if part.error_code in RELOOKUP or part.error_code in KafkaProtocolError.RETRIABLE:
                self._drop_leader()
                time.sleep(self._backoff[0])
                continue
            if part.error_code:
                raise KafkaProtocolError(
                    f"Fetch {self.topic}/{self.partition} failed with error {part.error_code}", code=part.error_code
                )
            return self._decode(part.records, part.high_watermark, part.aborted)

    def _lost(self, earliest: int) -> None:
        """Retention removed [position, earliest) before it was read: say so (`on_lost`), go on from earliest."""
        if self.on_lost is not None:
            self.on_lost(self.position, earliest)
        else:
            log.warning(
                "fetcher.data_lost",
                topic=self.topic,
                partition=self.partition,
                lost_from=self.position,
                lost_to=earliest,
            )
        self.position = earliest

    def _decode(self, records: memoryview, high_watermark: int, aborted: list[Any] | None) -> Fetched:
        got = decode_records(
            records,
            self.position,
            high_watermark,
            max_decompressed=self.max_decompressed,
            aborted=aborted,
            where=self.where,
            partition=self.partition,
        )
        if got.skipped:
            log.warning(
                "fetcher.batch_skipped",
                topic=self.topic,
                partition=self.partition,
                first=got.position,
                next=got.next_position,
                error=got.skipped[0].error.message,
            )
        self.position = got.next_position
        return got


TOGETHER_MAX_BYTES = 16 << 20
"""The most one Fetch of `fetch_each` asks a broker for, whatever the number of partitions in it: the broker fills
the partitions in order up to it, and those it leaves empty are asked again by the next call."""


def fetch_each(fetchers: Sequence[PartitionFetcher]) -> Iterator[tuple[PartitionFetcher, Fetched]]:
    """Each fetcher's next records, as `fetch` would return them, read together: one Fetch for the fetchers of
    each leader and topic (fetchers share a `Leaders` to share its connections), each partition's records
    decoded only when the caller takes them. A fetcher whose leader cannot be reached, whose part of the
    response is an error, or whose partition is already in the request, fetches alone (`fetch`: its retries,
    backoff and retention handling)."""
    alone: list[PartitionFetcher] = []
    groups: dict[tuple[int, str], tuple[KafkaConnection, dict[int, PartitionFetcher]]] = {}
    for f in fetchers:
        try:
            conn = f._connect_leader() if f.position >= 0 else None
        except (UnavailableError, KafkaProtocolError):
            conn = None
        if conn is None:
            alone.append(f)
            continue
        members = groups.setdefault((id(conn), f.topic), (conn, {}))[1]
        if f.partition in members:
            alone.append(f)
        else:
            members[f.partition] = f
    for conn, members in groups.values():
        first = next(iter(members.values()))
        try:
            parts = conn.fetch(
                first.topic,
                {p: f.position for p, f in members.items()},
                max_wait_ms=first.max_wait_ms,
                max_bytes=TOGETHER_MAX_BYTES,
                partition_max_bytes=first.partition_max_bytes,
            )
        except (UnavailableError, KafkaProtocolError):
            first._drop_leader()
            alone.extend(members.values())
            continue
        for part in parts:
            if part.partition not in members:
                continue
            f = members.pop(part.partition)
            if not part.error_code:
                yield f, f._decode(part.records, part.high_watermark, part.aborted)
                continue
            if part.error_code in RELOOKUP:
                f._drop_leader()  # its leader moved: the fetch alone asks where to
            alone.append(f)
        alone.extend(members.values())  # not answered
    for f in alone:
        yield f, f.fetch()
