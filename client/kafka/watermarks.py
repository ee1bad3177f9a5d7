"""What a Kafka cluster keeps of partitions: their low and high watermarks, and offsets by time.

Through our own Kafka protocol client (ListOffsets and Metadata), one connection per broker of the clusters
looked at last, kept while the `Watermarks` lives: Spark's planner, the coordinator's rewinds and tests read
where partitions begin and end, and where a time falls in them.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from streamplane.client.kafka.codec import KafkaProtocolError
from streamplane.client.kafka.config import ConnectionConfig
from streamplane.client.kafka.connection import KafkaConnection
from streamplane.errors import NotFoundError, StreamplaneError, UnavailableError
from streamplane.model import PartitionBounds

EARLIEST, LATEST = -2, -1
"""ListOffsets' special timestamps: a partition's first offset kept, and the offset after its last record."""
ATTEMPTS = 3
"""Lookups of a leader that moved meanwhile (the metadata is asked again before each)."""


@dataclass(eq=False)
class _Cluster:
    """One cluster's connections (a broker each) and the leaders of the topics asked about; used by one caller at
    a time (its lock), so its connections carry one request at a time."""

    bootstrap: str
    lock: threading.Lock = field(default_factory=threading.Lock)
    conns: dict[int, KafkaConnection] = field(default_factory=dict)
    brokers: dict[int, tuple[str, int]] = field(default_factory=dict)
    leaders: dict[str, dict[int, int]] = field(default_factory=dict)  # topic: {partition: leader}, -1 none

    def close(self) -> None:
        for conn in self.conns.values():
            conn.close()
        self.conns.clear()


class Watermarks:
    """Low and high watermarks of partitions, and offsets by time: one connection per broker of each cluster, the
    `max_clients` clusters used last kept (a coordinator that looked at many clusters once keeps only a few). A
    cluster that does not answer is an UnavailableError at once (every bootstrap address tried), not a wait.

    Safe to share between threads: the calls on one cluster take turns (each is a few round trips), those on
    different clusters go on at once, and a cluster's connections are never closed under a caller using them
    (one evicted while in use is closed by its last user)."""

    def __init__(
        self, timeout_s: float = 10.0, *, max_clients: int = 8, config: ConnectionConfig | None = None
    ) -> None:
        """`config`: TLS and SASL of the connections (its timeout is theirs); default plaintext, `timeout_s`."""
        self._config = config or ConnectionConfig(timeout_s=timeout_s)
        self._clusters: dict[str, _Cluster] = {}
        self._users: dict[int, int] = {}
        self._evicted: set[int] = set()
        self._lock = threading.Lock()
        self._max_clients = max_clients

    @contextmanager
    def _using(self, bootstrap: str) -> Iterator[_Cluster]:
        """The cluster's connections while the block runs, its turn taken (made on first use; the least
        recently used cluster beyond `max_clients` is evicted)."""
        with self._lock:
            cluster = self._clusters.pop(bootstrap, None) or _Cluster(bootstrap)
            self._clusters[bootstrap] = cluster  # the newest last: the first is the one used longest ago
            self._users[id(cluster)] = self._users.get(id(cluster), 0) + 1
            closing = []
            while len(self._clusters) > self._max_clients:
                oldest = self._clusters.pop(next(iter(self._clusters)))
                if self._users.get(id(oldest)):
                    self._evicted.add(id(oldest))  # its last user closes it
                else:
                    closing.append(oldest)
        for old in closing:
            with old.lock:
                old.close()
        try:
            with cluster.lock:
                yield cluster
        finally:
            with self._lock:
                left = self._users[id(cluster)] = self._users[id(cluster)] - 1
                last = left == 0 and id(cluster) in self._evicted
                if left == 0:
                    del self._users[id(cluster)]
                    self._evicted.discard(id(cluster))
            if last:
                with cluster.lock:
                    cluster.close()

    # -- the protocol, a cluster's turn held
    def _conn(self, cluster: _Cluster, node: int) -> KafkaConnection:
        conn = cluster.conns.get(node)
        if conn is None:
            host, port = cluster.brokers[node]
            conn = cluster.conns[node] = KafkaConnection(host, port, self._config)
        return conn

    def _metadata(self, cluster: _Cluster, topic: str) -> dict[int, int]:
        """{partition: leader (-1: none)} of `topic`, asked now; {} when the cluster does not have it."""
        md = None
        for node, conn in list(cluster.conns.items()):
            try:
                md = conn.metadata([topic])
                break
            except StreamplaneError:
                conn.close()
                del cluster.conns[node]
        if md is None:
            with KafkaConnection.connect_any(cluster.bootstrap, self._config) as boot:
                md = boot.metadata([topic])
        cluster.brokers = {b.node_id: (b.host, b.port) for b in md.brokers.values()}
        parts = [] if md.topic_errors.get(topic) else md.topics.get(topic, [])
        leaders = {p.partition: p.leader if p.leader in cluster.brokers else -1 for p in parts}
        cluster.leaders[topic] = leaders
        return leaders

    def _offsets(self, cluster: _Cluster, topic: str, asked: dict[int, int]) -> dict[int, int]:
        """{partition: offset} for each asked {partition: timestamp (or EARLIEST, LATEST)}: one request per
        leader. A moved leader is looked up again; a partition without one is UnavailableError."""
        return self._offsets_each(cluster, topic, [asked])[0]

    def _offsets_each(self, cluster: _Cluster, topic: str, asks: list[dict[int, int]]) -> list[dict[int, int]]:
        """`_offsets` for each of `asks`, their requests to a leader sent together (one round trip a leader)."""
        named = {p for asked in asks for p in asked}
        for attempt in range(ATTEMPTS):
            leaders = cluster.leaders.get(topic) if attempt == 0 else None
            if leaders is None or any(leaders.get(p, -1) < 0 for p in named):
                leaders = self._metadata(cluster, topic)
            try:
                return self._ask(cluster, topic, asks, leaders)
            except KafkaProtocolError as err:
                if not err.retryable or attempt == ATTEMPTS - 1:
                    raise UnavailableError(f"cannot read the offsets of {topic} at {cluster.bootstrap}: {err}") from err
            except UnavailableError:
                if attempt:  # once on new connections (a kept one may have been dropped), not a wait per try
                    raise
            cluster.close()  # a broker gone or moved: its leaders are asked again on new connections
        raise AssertionError("unreachable")

    def _ask(
        self, cluster: _Cluster, topic: str, asks: list[dict[int, int]], leaders: dict[int, int]
    ) -> list[dict[int, int]]:
        by_leader: dict[int, list[dict[int, int]]] = {}  # {leader: its part of each ask, in order}
        for i, asked in enumerate(asks):
            for p, ts in asked.items():
                leader = leaders.get(p, -1)
                if leader < 0:
                    what = "is not in" if p not in leaders else "has no leader on"
                    raise UnavailableError(f"{topic}/{p} {what} {cluster.bootstrap} now")
                by_leader.setdefault(leader, [{} for _ in asks])[i][p] = ts
        out: list[dict[int, int]] = [{} for _ in asks]
        for leader, parts in by_leader.items():
            conn = self._conn(cluster, leader)
            try:
                answers = conn.list_offsets_each(topic, [x for x in parts if x])
            except UnavailableError:
                conn.close()
                cluster.conns.pop(leader, None)
                raise
            for i, answer in zip([i for i, x in enumerate(parts) if x], answers, strict=True):
                out[i].update(answer)
        return out

    # -- what callers ask
    def marks(self, bootstrap: str, topic: str, partitions: list[int]) -> dict[int, tuple[int, int]]:
        """{partition: (low, high) watermark} of each partition: one request per leader for each end."""
        with self._using(bootstrap) as cluster:
            low, high = self._offsets_each(
                cluster, topic, [dict.fromkeys(partitions, EARLIEST), dict.fromkeys(partitions, LATEST)]
            )
        return {p: (low[p], high[p]) for p in partitions}

    def ends(self, bootstrap: str, topic: str, partitions: list[int]) -> dict[int, int]:
        """{partition: its high watermark} (the offset after its last record): one request per leader."""
        with self._using(bootstrap) as cluster:
            return self._offsets(cluster, topic, dict.fromkeys(partitions, LATEST))

    def get(self, bootstrap: str, topic: str, partition: int) -> tuple[int, int]:
        return self.marks(bootstrap, topic, [partition])[partition]

    def at_time(self, bootstrap: str, topic: str, partitions: dict[int, int]) -> dict[int, int]:
        """{partition: the offset of its first record at or after the time (ms)}; -1 where there is none. One
        request per leader for all the partitions. Where the cluster answers none, the partitions' last records
        say whether one is that late (one Fetch per leader for all of them: a time past the last record of
        thousands of idle partitions costs no connection each); only where one is (librdkafka's mock cluster
        never looks up by time) are the records' own timestamps searched."""
        every = list(partitions)
        with self._using(bootstrap) as cluster:
            found, lows, highs = self._offsets_each(
                cluster, topic, [partitions, dict.fromkeys(every, EARLIEST), dict.fromkeys(every, LATEST)]
            )
        return self._late(bootstrap, topic, partitions, found, lows, highs)

    def _late(
        self,
        bootstrap: str,
        topic: str,
        partitions: dict[int, int],
        found: dict[int, int],
        lows: dict[int, int],
        highs: dict[int, int],
    ) -> dict[int, int]:
        """`found` (the cluster's answers to a lookup by time) where a partition it answered none for has a
        record that late after all (see `at_time`)."""
        missing = {p: ts for p, ts in partitions.items() if found.get(p, -1) < 0}
        kept = {p: highs[p] - 1 for p in missing if highs[p] > lows[p]}
        lasts = self.timestamps(bootstrap, topic, kept) if kept else {}
        for p, ts in missing.items():
            if p not in kept or lasts.get(p, ts) < ts:
                continue  # no record, or the last is earlier: none that late
            at = self._search(bootstrap, topic, p, ts, lows[p], highs[p])  # also where the last did not answer
            found[p] = at if at < highs[p] else -1
        return found

    def exists(self, bootstrap: str, topic: str) -> bool:
        """Whether the cluster has `topic` (UnavailableError if it does not answer)."""
        with self._using(bootstrap) as cluster:
            return bool(self._metadata(cluster, topic))

    def bounds(self, bootstrap: str, topic: str, partitions: int, at_ms: int | None = None) -> list[PartitionBounds]:
        """What the cluster keeps of each partition of `topic`, and where `at_ms` falls in it (None: no time).
        NotFoundError when the topic is gone, UnavailableError when the cluster does not answer. Two round trips
        on connections kept (its metadata, then the earliest, latest and timed offsets sent to each leader
        together): a rewind waits on them."""
        every = list(range(partitions))
        asks = [dict.fromkeys(every, EARLIEST), dict.fromkeys(every, LATEST)]
        if at_ms is not None:
            asks.append(dict.fromkeys(every, at_ms))
        with self._using(bootstrap) as cluster:
            if not self._metadata(cluster, topic):
                raise NotFoundError(f"topic {topic} is not on {bootstrap} any more", kind="topic", name=topic)
            lows, highs, *timed = self._offsets_each(cluster, topic, asks)
        if at_ms is None:
            return [PartitionBounds(lows[p], highs[p]) for p in every]
        found = self._late(bootstrap, topic, asks[2], timed[0], lows, highs)
        ats = {p: at if (at := found.get(p, -1)) >= 0 else highs[p] for p in every}  # none that late: the end
        return [PartitionBounds(lows[p], highs[p], ats[p]) for p in every]

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

    def timestamps(self, bootstrap: str, topic: str, offsets: dict[int, int]) -> dict[int, int]:
        """{partition: the timestamp of its first record at or after the offset}: one Fetch per leader for all
        its partitions, on the connections kept (a partition with no record there, or whose leader does not
        answer, is left out); UnavailableError when the cluster does not say who leads them."""
        from streamplane.client.records import decode_records
        from streamplane.native import DEFAULT_MAX_DECOMPRESSED

        with self._using(bootstrap) as cluster:
            leaders = cluster.leaders.get(topic)
            if leaders is None or any(leaders.get(p, -1) < 0 for p in offsets):
                try:
                    leaders = self._metadata(cluster, topic)
                except KafkaProtocolError as err:
                    raise UnavailableError(f"cannot read the metadata of {topic} at {bootstrap}: {err}") from err
            by_leader: dict[int, dict[int, int]] = {}
            for partition, offset in offsets.items():
                if (leader := leaders.get(partition, -1)) >= 0:
                    by_leader.setdefault(leader, {})[partition] = offset
            answers = []
            for leader, asked in by_leader.items():
                conn = self._conn(cluster, leader)
                try:
                    answers.append((asked, conn.fetch(topic, asked, max_wait_ms=10, partition_max_bytes=64 << 10)))
                except (UnavailableError, KafkaProtocolError):
                    conn.close()
                    cluster.conns.pop(leader, None)
        out = {}
        for asked, parts in answers:
            for part in parts:
                if part.error_code or part.partition not in asked:
                    continue
                got = decode_records(
                    part.records,
                    asked[part.partition],
                    part.high_watermark,
                    max_decompressed=DEFAULT_MAX_DECOMPRESSED,
                    aborted=None,
                )
                if got.batch is not None and len(got.batch):
                    out[part.partition] = int(got.batch.timestamps[0])
        return out

    def close(self) -> None:
        with self._lock:
            clusters, self._clusters = list(self._clusters.values()), {}
        for cluster in clusters:
            with cluster.lock:
                cluster.close()
