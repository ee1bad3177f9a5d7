"""One fetch loop per worker: one connection per broker, one Fetch per broker for every partition it leads.

However many leases a worker holds, it runs one thread here and one connection per broker it reads from.
Each round sends one Fetch (in an incremental fetch session where the broker has them) to every broker
with fetchable partitions and nothing in flight, waits on all their sockets at once, and decodes each
partition's record set on its own: a bomb or a corrupt batch in one partition is that partition's skipped
range, never a delay for the others. Partitions join and leave between rounds; leader moves, lost
connections and retriable errors re-route partitions without touching the others. One-off reads at an
offset (records whose retry is due) go to the same connections, between session fetches.

Decompressing and decoding is most of a busy loop's work, and the native decoder runs without the GIL: a
response with enough records in several partitions is decoded by a small pool (DECODE_THREADS a worker,
however many partitions it holds), each partition on its own, and handed over in the response's order. The
broker's next Fetch is sent before a response is decoded, each partition asked from where the response's whole
batches end (read from their headers), so the broker reads and sends while the loop decodes.
"""

from __future__ import annotations

import collections
import contextlib
import os
import queue
import select
import socket
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

import structlog

from streamplane.client.flow import Budget
from streamplane.client.kafka import (
    ConnectionConfig,
    KafkaConnection,
    KafkaProtocolError,
    codec,
    fetch,
    leader_epoch,
    list_offsets,
)
from streamplane.client.kafka.codec import KafkaAuthenticationError
from streamplane.client.records import Fetched, decode_records
from streamplane.clock import SYSTEM, Clock
from streamplane.errors import StreamplaneError, ThreadCrashedError, UnavailableError
from streamplane.native import Where, records_end
from streamplane.shares import even_runs

log = structlog.get_logger(__name__)

MAX_CRASHES = 20
"""Rounds failing in a row (half a second apart) after which the loop gives up and its owner ends."""
MAX_WAIT_MS = 100
"""How long a broker may hold a Fetch open when none of its partitions has new data. A partition granted or
moved meanwhile (a failover, a rewind, a rebalance) is first asked in the next Fetch (a broker answers one
request of a connection at a time), so this bounds how long it waits for its first read. A fifth of Kafka's
500 ms costs an idle worker ten tiny requests a second per broker instead of two; its incremental fetch
session names no partition in them, and a worker idle on 1,024 partitions measured 0.011 cores at 100 ms
against 0.010 at 250 (`benchmarks/scale.py --quick`), while a rewind's last partition began 0.11-0.17 s after
the command instead of 0.22-0.40 s (`benchmarks/reprocess.py`). A rewind's workers are told first, and keep
their long polls short until its grants come (`hurry`)."""
HURRIED_WAIT_MS = 10
"""A long poll's wait while grants are on their way (`FetchLoop.hurry`): a partition granted meanwhile is asked
this long after at most, not after a whole long poll."""
DECODE_THREADS = min(4, os.cpu_count() or 1)
"""Threads a worker decodes a response's partitions on (1: the fetch loop's own, no pool)."""
PARALLEL_MIN_BYTES = 256 << 10
"""A response with fewer record bytes than this is decoded on the loop's thread: handing it to the pool would
cost more than it saves (an idle or lightly loaded worker never wakes a decode thread)."""
METADATA_BACKOFF_S = (0.1, 2.0)
"""First and longest wait before a cluster's metadata is asked again for leaderless partitions."""


class Receiver(Protocol):
    """What the loop tells the owner of one partition (a lease's ledger, through the consumer)."""

    def fetchable(self) -> bool:
        """False pauses this partition (revoking, lost, at its sealed end)."""

    def received(self, fetched: Fetched) -> tuple[int, int]:
        """Records (or skipped bad batches) read from the partition's position, which has moved past them.
        Returns the decoded bytes and records it keeps (counted against the budget until they end)."""

    def failed(self, error: StreamplaneError) -> None:
        """An error no retry will mend (authentication, a version the broker refuses): the partition left."""


@dataclass(frozen=True)
class Read:
    """A partition a fetch loop is asked to read (see `FetchLoop.add`)."""

    key: str
    cluster: str
    topic: str
    partition: int
    position: int
    receiver: Receiver
    mine: Where | None = None


@dataclass(eq=False)
class _Partition:
    key: str
    cluster: str
    topic: str
    partition: int
    receiver: Receiver
    position: int  # -1: the earliest kept offset; -2: the latest
    node: int = -1  # the broker we read it from; -1 while unknown
    leader_epoch: int = -1
    log_start: int = -1
    not_before: float = 0.0  # backoff after a retriable error
    backoff_s: float = 0.1
    reset: bool = False  # out of range: look the earliest offset up again
    high_watermark: int = -1
    asked: fetch.PartitionFetch | None = None  # what the last request asked (reused while nothing moved)
    parked: fetch.FetchedPartition | None = None  # read but not decoded: no room until handlers free some
    read_epoch: int = -1  # the leader epoch of the last batch read
    validate: bool = False  # its leader changed: check the log was not truncated under our position (KIP-320)
    mine: Where | None = None  # a slice of a split partition: the records that are this reader's
    ahead: int = -1  # while its records are decoded: where they end, and the Fetch sent meanwhile asks from

    def request(self, max_bytes: int) -> fetch.PartitionFetch:
        f = self.asked
        at = self.ahead if self.ahead >= 0 else self.position
        if (
            f is None
            or f.offset != at
            or f.log_start_offset != self.log_start
            or f.leader_epoch != self.leader_epoch  # a new leader: a stale epoch would be fenced
        ):
            f = self.asked = fetch.PartitionFetch(at, max_bytes, self.log_start, self.leader_epoch)
        return f

    @property
    def tp(self) -> fetch.TopicPartition:
        return (self.topic, self.partition)


@dataclass(eq=False)
class _Link:
    """One broker of one cluster: its connection, fetch session, and what is in flight on it."""

    cluster: str
    node: int
    host: str
    port: int
    conn: KafkaConnection | None = None
    session: fetch.FetchSession = field(default_factory=fetch.FetchSession)
    in_flight: str = ""  # "" | "session" | "oneoff"
    sent: dict[Any, Any] = field(default_factory=dict)  # tp: PartitionFetch of the request in flight
    forgotten: list[Any] = field(default_factory=list)
    parts: dict[Any, Any] = field(default_factory=dict)  # tp: _Partition of the request in flight
    version: int = 0
    reserved: int = 0
    built_at: int = -1  # the loop's change count when `wanted` and `body` below were built
    wanted: dict[Any, Any] = field(default_factory=dict)
    body: bytes = b""  # the full-fetch request as last encoded (brokers without sessions)
    synced_at: int = -1  # the change count whose partitions the broker's session holds as they are
    sent_at: int = -1  # the change count the request in flight was built at


@dataclass
class _Cluster:
    bootstrap: str
    config: ConnectionConfig
    brokers: dict[int, tuple[str, int]] = field(default_factory=dict)
    lost: bool = False  # it has partitions without a known leader
    next_metadata: float = 0.0
    backoff_s: float = METADATA_BACKOFF_S[0]


OneOff = Callable[[Fetched | None, StreamplaneError | None], None]


class FetchLoop:
    """The worker's fetch thread.

    Args:
        budget: the consumer's memory and in-flight limits; a partition's record set is decoded only when its
            worst case fits, else it is fetched again later.
        max_decompressed: the decoder's limit per batch and per partition of a response.
        partition_max_bytes: how much one Fetch asks per partition; max_bytes: per response.
        read_committed: drop records of aborted transactions and stop at the last stable offset.
        default_config: TLS, SASL, rack and client id of every connection.
        decode_threads: threads that decode a response's partitions at once (1: on the loop's thread).
        on_crash: told when rounds keep failing (a bug, MAX_CRASHES rounds in a row): the loop stops and its
            owner ends loudly rather than hold leases it cannot read. A round that fails once is logged and
            the loop goes on.
    """

    def __init__(
        self,
        *,
        budget: Budget,
        max_decompressed: int,
        partition_max_bytes: int = 1 << 20,
        max_bytes: int = 16 << 20,
        read_committed: bool = False,
        where: Where | None = None,
        default_config: ConnectionConfig | None = None,
        max_wait_ms: int = MAX_WAIT_MS,
        decode_threads: int = DECODE_THREADS,
        fetch_ahead: bool = True,
        on_crash: Callable[[StreamplaneError], None] | None = None,
        clock: Clock = SYSTEM,
    ) -> None:
        self.clock = clock
        self.decode_threads = decode_threads
        self.fetch_ahead = fetch_ahead
        self._pool: ThreadPoolExecutor | None = None  # made when a response first has enough to share
        self._decoded: tuple[socket.socket, socket.socket] | None = None  # with it: a byte per share decoded
        self.budget = budget
        self._on_crash = on_crash
        self.max_decompressed = max_decompressed
        self.partition_max_bytes = partition_max_bytes
        self.max_bytes = max_bytes
        self.read_committed = read_committed
        self.where = where  # records it does not match are left out in the decoder
        self.default_config = default_config or ConnectionConfig()
        self.max_wait_ms = max_wait_ms
        self._hurry_until = 0.0  # grants are on their way until then (monotonic seconds; 0: none are)
        self._parts: dict[str, _Partition] = {}
        self._clusters: dict[str, _Cluster] = {}
        self._links: dict[tuple[str, int], _Link] = {}
        self._unreachable: dict[str, int] = {}  # broker host:port: failed connects in a row (logged once)
        self._errors: dict[str, tuple[int, str]] = {}  # cluster bootstrap: (errors, the last) since taken
        self._errors_lock = threading.Lock()
        self._oneoffs: dict[str, list[tuple[int, OneOff]]] = {}
        self._control: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fetch-loop", daemon=True)
        self.requests = 0  # Fetch requests sent (for tests and metrics)
        self.sent_ahead = 0  # of them, sent before the response before was decoded
        self.read_early = 0  # responses read whole while the response before them was decoded
        self.pooled = 0  # responses whose partitions were decoded on the pool
        self.parks = 0  # partitions read while the budget had no room for them (decoded later, on the loop's thread)
        self.epoch_checks = 0  # partitions checked for truncation after a leader change (KIP-320)
        self.truncations = 0  # logs found truncated under a partition's position after a leader change
        # Work proportional to what changed: requests are rebuilt only after a change (a partition joined,
        # left, moved, read records, or its owner touched it); an idle round resends what it sent.
        self._changes = 0
        self._seen = -1
        self._by_link: dict[tuple[str, int], list[_Partition]] = {}
        self._retry_at = float("inf")  # the earliest end of a partition's backoff
        # Partitions read while the budget was full, in arrival order: decoded as room frees, not fetched again
        # meanwhile (a response for every partition is never thrown away and read again).
        self._parked: collections.deque[_Partition] = collections.deque()

    # -- control, from any thread
    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        self.wake()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout=5)
        for link in list(self._links.values()):  # a copy: the loop may still be ending
            if link.conn is not None:
                link.conn.close()
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
        self._wake_r.close()
        self._wake_w.close()
        if self._decoded is not None:
            for end in self._decoded:
                end.close()

    def wake(self) -> None:
        """Let the loop look at its partitions now (one became fetchable again, budget was freed)."""
        with contextlib.suppress(OSError):  # BlockingIOError too: a wake-up is already pending
            self._wake_w.send(b"\0")

    def _do(self, fn: Callable[[], None]) -> None:
        self._control.put(fn)
        self.wake()

    def touch(self) -> None:
        """A partition's owner changed whether it is fetchable (revoked, sealed): rebuild the requests."""
        self._do(lambda: None)

    def hurry(self, for_s: float) -> None:
        """Grants are on their way (the coordinator said so: a rewind of the group is being applied): for the
        next `for_s` seconds (0: no longer) every broker's long poll waits HURRIED_WAIT_MS at most, so that the
        partitions granted meanwhile are asked at once rather than after the long poll in flight (a broker
        answers one request of a connection at a time). The coordinator says it twice: as the rewind begins,
        and once it is applied (a short while more, for its grants to arrive). Requests are built again at each
        change, nothing more; an idle worker sends a few dozen more Fetch requests per broker meanwhile."""

        def change() -> None:
            self._hurry_until = self.clock.monotonic() + for_s if for_s > 0 else 0.0

        self._do(change)

    def add(
        self,
        key: str,
        cluster: str,
        topic: str,
        partition: int,
        position: int,
        receiver: Receiver,
        mine: Where | None = None,
    ) -> None:
        """Read `topic`/`partition` of the cluster at `cluster` (its bootstrap list) from `position`
        (-1: earliest, -2: latest) and hand what is read to `receiver`; with `mine` (a slice's predicate), only
        the records it matches are decoded, the others reported as foreign ranges."""
        self.add_many([Read(key, cluster, topic, partition, position, receiver, mine)])

    def add_many(self, reads: list[Read]) -> None:
        """Start every read of `reads` in one step (see `add`): a worker granted many leases at once asks for
        all of them in its brokers' next Fetch, not for the first few while the rest wait out its response."""

        def add() -> None:
            for r in reads:
                old = self._parts.get(r.key)
                self._remove(r.key)
                new = self._parts[r.key] = _Partition(
                    r.key, r.cluster, r.topic, r.partition, r.receiver, r.position, mine=r.mine
                )
                if old is not None and old.node >= 0 and (old.cluster, old.tp) == (r.cluster, new.tp):
                    # read again from another position (a rewind's new epoch, a resumed session): the broker it
                    # was read from moments ago still serves it, so no Metadata request waits in front of it
                    new.node, new.leader_epoch = old.node, old.leader_epoch
                    continue
                c = self._cluster(r.cluster)
                if c.backoff_s == METADATA_BACKOFF_S[0]:  # its last metadata request did not fail
                    c.next_metadata = 0.0  # route a newcomer now: the pause between requests is for lost leaders

        if reads:
            self._do(add)

    def remove(self, key: str) -> None:
        self._do(lambda: self._remove(key))

    def fetch_at(self, key: str, offset: int, callback: OneOff) -> None:
        """Read the partition once from `offset` (without moving its position); `callback(fetched, error)` is
        called on the loop's thread."""
        self._do(lambda: self._oneoffs.setdefault(key, []).append((offset, callback)))

    @property
    def connections(self) -> int:
        return sum(1 for link in list(self._links.values()) if link.conn is not None)  # read from other threads

    # -- the loop
    def _cluster(self, bootstrap: str) -> _Cluster:
        c = self._clusters.get(bootstrap)
        if c is None:
            c = self._clusters[bootstrap] = _Cluster(bootstrap, self.default_config)
        return c

    def _remove(self, key: str) -> None:
        self._parts.pop(key, None)
        for offset, callback in self._oneoffs.pop(key, []):
            callback(None, UnavailableError(f"partition {key} left the fetch loop before offset {offset} was read"))

    def _run(self) -> None:
        crashes = 0
        while not self._stop.is_set():
            try:
                self._round()
                crashes = 0
            except Exception as err:  # a bug must not stop every partition of the worker: log, wait, go on
                log.exception("fetch_loop.round_crashed")
                crashes += 1
                if crashes >= MAX_CRASHES and self._on_crash is not None:
                    self._on_crash(ThreadCrashedError(f"the fetch loop failed {crashes} rounds in a row: {err!r}"))
                    return
                self._stop.wait(0.5)

    def _round(self) -> None:
        while True:
            try:
                self._control.get_nowait()()
            except queue.Empty:
                break
            self._changes += 1
        if self._parked:
            self._unpark()
        now = self.clock.monotonic()
        if self._hurry_until and now >= self._hurry_until:  # long polls again
            self._hurry_until = 0.0
            self._changes += 1
        if now >= self._retry_at:
            self._retry_at = float("inf")
            self._changes += 1
        if self._changes != self._seen or self._routing_due(now):
            self._route(now)
            by_link: dict[tuple[str, int], list[_Partition]] = {}
            for p in self._parts.values():
                if p.node >= 0 and p.not_before <= now:
                    by_link.setdefault((p.cluster, p.node), []).append(p)
            for (cluster, node), parts in by_link.items():
                if (cluster, node) not in self._links:
                    self._link(parts[0])
            self._by_link, self._seen = by_link, self._changes
        for key, link in list(self._links.items()):
            if not link.in_flight:
                self._send(link, self._by_link.get(key, []))
        waiting = [link for link in self._links.values() if link.in_flight and link.conn is not None]
        read = [link for link in waiting if link.conn is not None and link.conn.received]  # while decoding
        timeout = 0.0 if read else 0.5 if waiting else 0.05 if self._parts else 0.5
        try:
            watched: list[Any] = [self._wake_r, *[link.conn for link in waiting if link not in read]]
            ready, _, _ = select.select(watched, [], [], timeout)
        except (OSError, ValueError):  # a connection closed under us: the next round re-routes
            return
        for link in read:
            self._receive(link)
        for item in ready:
            if item is self._wake_r:
                try:
                    while self._wake_r.recv(4096):
                        pass
                except (BlockingIOError, OSError):
                    pass
                continue
            link = next(x for x in waiting if x.conn is item)
            self._receive(link)

    def _routing_due(self, now: float) -> bool:
        """Whether a cluster with leaderless partitions may be asked for metadata again."""
        return any(c.lost and now >= c.next_metadata for c in self._clusters.values())

    def _route(self, now: float) -> None:
        """Find the leader of every partition that has none, one Metadata request per cluster."""
        lost: dict[str, list[_Partition]] = {}
        for p in self._parts.values():
            if p.node < 0:
                lost.setdefault(p.cluster, []).append(p)
        for c in self._clusters.values():
            c.lost = c.bootstrap in lost
        for bootstrap, parts in lost.items():
            cluster = self._cluster(bootstrap)
            if now < cluster.next_metadata:
                continue
            try:
                md = self._metadata(cluster, sorted({p.topic for p in parts}))
            except KafkaAuthenticationError as err:
                self._fail_cluster(bootstrap, err)
                continue
            except StreamplaneError as err:
                cluster.next_metadata = now + cluster.backoff_s
                cluster.backoff_s = min(METADATA_BACKOFF_S[1], cluster.backoff_s * 2)
                log.info("fetch_loop.metadata_failed", cluster=bootstrap, error=err.message)
                self._count_error(bootstrap, f"metadata: {err.message}")
                continue
            cluster.backoff_s = METADATA_BACKOFF_S[0]
            cluster.next_metadata = now + cluster.backoff_s
            cluster.brokers = {b.node_id: (b.host, b.port) for b in md.brokers.values()}
            for p in parts:
                meta = next((m for m in md.topics.get(p.topic, []) if m.partition == p.partition), None)
                if meta is None or meta.leader < 0 or meta.leader not in cluster.brokers:
                    continue  # no leader now: asked again after the backoff
                p.node, p.leader_epoch = meta.leader, meta.leader_epoch
                p.validate = p.read_epoch >= 0 and p.position >= 0
                self._changes += 1

    def _metadata(self, cluster: _Cluster, topics: list[str]):  # type: ignore[no-untyped-def]
        """Ask through a connection the worker has to that cluster, else a short-lived bootstrap one. A connection
        that fails is dropped (so the links are walked over a copy) and the next one is asked."""
        for link in list(self._links.values()):
            if link.cluster == cluster.bootstrap and link.conn is not None and not link.in_flight:
                try:
                    return link.conn.metadata(topics)
                except UnavailableError:
                    self._drop(link)
        with KafkaConnection.connect_any(cluster.bootstrap, cluster.config) as conn:
            return conn.metadata(topics)

    def _count_error(self, bootstrap: str, text: str) -> None:
        with self._errors_lock:
            count, _ = self._errors.get(bootstrap, (0, ""))
            self._errors[bootstrap] = (count + 1, text[:300])

    def take_errors(self) -> dict[str, tuple[int, str]]:
        """{cluster bootstrap: (errors, the last one)} since the last call (the worker reports them)."""
        with self._errors_lock:
            taken, self._errors = self._errors, {}
        return taken

    def _fail_cluster(self, bootstrap: str, err: StreamplaneError) -> None:
        log.error("fetch_loop.cluster_failed", cluster=bootstrap, error=err.message)
        self._count_error(bootstrap, err.message)
        for key, p in list(self._parts.items()):
            if p.cluster == bootstrap:
                self._remove(key)
                p.receiver.failed(err)

    def _link(self, p: _Partition) -> _Link | None:
        cluster = self._cluster(p.cluster)
        link = self._links.get((p.cluster, p.node))
        if link is None:
            address = cluster.brokers.get(p.node)
            if address is None:
                p.node = -1
                return None
            link = self._links[(p.cluster, p.node)] = _Link(p.cluster, p.node, *address)
        return link

    def _connect(self, link: _Link) -> bool:
        if link.conn is not None:
            return True
        cluster = self._cluster(link.cluster)
        try:
            link.conn = KafkaConnection(link.host, link.port, cluster.config)
            link.version = link.conn.version(fetch.KEY, fetch.VERSIONS)
        except KafkaAuthenticationError as err:
            self._fail_cluster(link.cluster, err)
            return False
        except KafkaProtocolError as err:
            if err.code == codec.ErrorCode.UNSUPPORTED_VERSION:
                self._fail_cluster(link.cluster, err)
            self._drop(link)
            return False
        except StreamplaneError as err:
            broker = f"{link.host}:{link.port}"
            failures = self._unreachable[broker] = self._unreachable.get(broker, 0) + 1
            self._count_error(link.cluster, f"broker {broker} unreachable: {err.message}")
            if failures == 1:  # once per outage, not at every retry: a broker down for minutes is one line
                log.warning("fetch_loop.broker_unreachable", broker=broker, error=err.message, retrying=True)
            self._drop(link)
            return False
        failed = self._unreachable.pop(f"{link.host}:{link.port}", 0)
        if failed:
            log.info("fetch_loop.broker_reachable", broker=f"{link.host}:{link.port}", after_failed_connects=failed)
        link.session.reset()
        return True

    def _drop(self, link: _Link) -> None:
        """The connection is gone: its partitions look their leader up again; a new one starts a new session."""
        if link.conn is not None:
            link.conn.close()
            link.conn = None
        self._release(link)
        link.in_flight = ""
        link.session.reset()
        for p in self._parts.values():
            if p.cluster == link.cluster and p.node == link.node:
                p.node = -1
        self._links.pop((link.cluster, link.node), None)
        self._changes += 1

    def _release(self, link: _Link) -> None:
        if link.reserved:
            self.budget.settle(link.reserved, 0, 0)
            link.reserved = 0

    def _positions(self, link: _Link, parts: list[_Partition]) -> None:
        """Look up where partitions that start at the earliest or latest offset (or fell out of range) are."""
        assert link.conn is not None
        by_topic: dict[str, dict[int, int]] = {}
        for p in parts:
            ts = list_offsets.LATEST if p.position == -2 else list_offsets.EARLIEST
            by_topic.setdefault(p.topic, {})[p.partition] = ts
        v = link.conn.version(list_offsets.KEY, list_offsets.VERSIONS)
        for topic, wanted in by_topic.items():
            body = list_offsets.encode(v, topic, wanted, read_committed=self.read_committed)
            answer = list_offsets.decode(v, link.conn.request(list_offsets.KEY, v, body))
            for p in parts:
                if p.topic != topic or p.partition not in answer:
                    continue
                code, offset, _ = answer[p.partition]
                if code:
                    self._error(p, code, "ListOffsets")
                elif p.reset:
                    p.reset = False
                    if p.position < offset:  # retention removed what we had not read: say so, go on
                        log.warning("fetch_loop.data_lost", partition=p.key, lost_from=p.position, lost_to=offset)
                        p.position = offset
                else:
                    p.position = offset

    def _validate(self, link: _Link, parts: list[_Partition]) -> None:
        """After a leader change: ask the new leader where the epoch of the last batch read ends. Below our
        position, its log was truncated under us: read on from where it diverged (what was read past it is
        gone or replaced), and say so."""
        assert link.conn is not None
        for p in parts:
            p.validate = False
        self.epoch_checks += len(parts)
        try:
            v = link.conn.version(leader_epoch.KEY, leader_epoch.VERSIONS)
        except KafkaProtocolError:
            return  # a broker without it: nothing to check with
        by_topic: dict[str, dict[int, tuple[int, int]]] = {}
        for p in parts:
            by_topic.setdefault(p.topic, {})[p.partition] = (p.leader_epoch, p.read_epoch)
        for topic, wanted in by_topic.items():
            body = leader_epoch.encode(v, topic, wanted)
            answer = leader_epoch.decode(link.conn.request(leader_epoch.KEY, v, body))
            for p in parts:
                end = answer.get((p.topic, p.partition))
                if end is None:
                    continue
                if end.error_code:
                    self._error(p, end.error_code, "OffsetForLeaderEpoch")
                elif 0 <= end.end_offset < p.position:
                    log.warning(
                        "fetch_loop.log_truncated",
                        partition=p.key,
                        position=p.position,
                        diverged_at=end.end_offset,
                        epoch=end.leader_epoch,
                    )
                    self.truncations += 1
                    p.position = end.end_offset

    def _send(self, link: _Link, mine: list[_Partition]) -> None:
        if not mine and not link.session.incremental:
            return
        if not self._connect(link):
            return
        try:
            steady = link.built_at == self._changes
            if not steady:
                unknown = [p for p in mine if p.position < 0 or p.reset]
                if unknown:
                    self._positions(link, unknown)
                    self._changes += 1
                moved = [p for p in mine if p.validate]
                if moved:
                    self._validate(link, moved)
                    self._changes += 1
                oneoffs = {p.tp: p for p in mine if self._oneoffs.get(p.key)}
                if oneoffs:
                    self._send_oneoff(link, oneoffs)
                    return
            if not self.budget.has_room(self.max_decompressed + self.partition_max_bytes):
                self.budget.call_on_release(self.wake)
                return  # paused: the handlers hold as many records (or bytes) as allowed
            if not steady:
                max_bytes = self.partition_max_bytes
                link.wanted = {
                    p.tp: p.request(max_bytes)
                    for p in mine
                    if p.position >= 0 and not p.reset and p.parked is None and p.receiver.fetchable()
                }
                link.parts = {p.tp: p for p in mine if p.tp in link.wanted}
                link.built_at, link.body = self._changes, b""
            wanted = link.wanted
            if not wanted and not link.session.incremental:
                return
            if link.version < fetch.SESSIONS_FROM or not link.session.incremental:
                session_id, epoch, send, forget = link.session.next_request(wanted)
                if link.version < fetch.SESSIONS_FROM:
                    session_id, epoch = 0, fetch.NO_SESSION_EPOCH
            elif link.synced_at == self._changes:  # the broker's session holds exactly these: list nothing
                session_id, epoch, send, forget = link.session.session_id, link.session.epoch, {}, []
            else:
                session_id, epoch, send, forget = link.session.next_request(wanted)
            if not send and not forget and not wanted:
                return
            full = session_id == 0
            if not (full and link.body):  # a full fetch of unchanged partitions is the same bytes again
                link.body = fetch.encode(
                    link.version,
                    send,
                    max_wait_ms=min(self.max_wait_ms, HURRIED_WAIT_MS) if self._hurry_until else self.max_wait_ms,
                    max_bytes=self.max_bytes,
                    read_committed=self.read_committed,
                    session_id=session_id,
                    session_epoch=epoch,
                    forgotten=forget,
                    rack=self._cluster(link.cluster).config.rack,
                )
            body = link.body
            if not full:
                link.body = b""
            link.conn.send(fetch.KEY, link.version, body)  # type: ignore[union-attr]
        except StreamplaneError as err:
            log.info("fetch_loop.send_failed", broker=f"{link.host}:{link.port}", error=err.message)
            self._drop(link)
            return
        self.requests += 1
        link.in_flight, link.sent, link.forgotten = "session", send, forget
        link.sent_at = link.built_at

    def _send_oneoff(self, link: _Link, parts: dict[fetch.TopicPartition, _Partition]) -> None:
        wanted = {
            tp: fetch.PartitionFetch(min(o for o, _ in self._oneoffs[p.key]), self.partition_max_bytes)
            for tp, p in parts.items()
        }
        body = fetch.encode(
            link.version,
            wanted,
            max_wait_ms=0,
            max_bytes=self.max_bytes,
            read_committed=self.read_committed,
            session_id=0,
            session_epoch=fetch.NO_SESSION_EPOCH,
        )
        link.conn.send(fetch.KEY, link.version, body)  # type: ignore[union-attr]
        self.requests += 1
        link.in_flight, link.sent, link.forgotten, link.parts = "oneoff", wanted, [], parts
        link.built_at = -1  # its cached request's partitions were replaced for this one-off read

    def _receive(self, link: _Link) -> None:
        kind, sent, parts = link.in_flight, link.sent, link.parts
        link.in_flight = ""
        try:
            response = fetch.decode(link.version, link.conn.receive())  # type: ignore[union-attr]
        except StreamplaneError as err:
            log.info("fetch_loop.receive_failed", broker=f"{link.host}:{link.port}", error=err.message)
            self._drop(link)
            return
        if kind == "session" and link.version >= fetch.SESSIONS_FROM:
            link.session.handled(response, sent, link.forgotten)
            link.synced_at = link.sent_at if link.session.incremental and not response.error_code else -1
        if response.error_code:
            log.info("fetch_loop.fetch_error", broker=f"{link.host}:{link.port}", code=response.error_code)
            return
        mine = self._parts
        ready: list[tuple[_Partition, fetch.FetchedPartition, int]] = []
        for got in response.partitions:
            p = parts.get((got.topic, got.partition))
            if p is None or p.key not in mine or mine[p.key] is not p:
                continue  # left the loop while its fetch was in flight
            if kind == "oneoff":
                self._deliver_oneoff(p, got, sent[p.tp].offset)
            elif (item := self._deliverable(p, got, sent.get(p.tp))) is not None:
                ready.append(item)
        ahead = self._send_ahead(link, ready) if kind == "session" else []
        try:
            self._hand_over_all(ready, link if ahead and link.in_flight == "session" else None)
        finally:
            for p in ahead:
                p.ahead = -1
            if ahead:
                self._changes += 1  # the next request is built from the positions decoding reached

    def _send_ahead(self, link: _Link, ready: list[tuple[_Partition, fetch.FetchedPartition, int]]) -> list[_Partition]:
        """Send the broker's next Fetch before this response is decoded, so the broker reads and sends it while
        the records are decoded (as a Kafka consumer prefetches): each partition of the response is asked from
        where its whole batches end, read from their headers. A partition whose decoding ends elsewhere (a bad
        batch, a full budget) is not handed what that Fetch brings (it was asked from another position) and is
        asked again from its own. Not when a partition of this broker waits for a lookup first (a position, a
        truncation check, a one-off read): those requests go out before the next Fetch, as without it. Returns
        the partitions asked ahead."""
        if not self.fetch_ahead or not ready:
            return []
        mine = [
            p
            for p in self._by_link.get((link.cluster, link.node), [])
            if self._parts.get(p.key) is p and p.node == link.node
        ]
        if any(p.position < 0 or p.reset or p.validate or p.parked is not None or p.key in self._oneoffs for p in mine):
            return []
        ahead = []
        for p, got, position in ready:
            end = records_end(got.records)
            if end > position:
                p.ahead = end
                ahead.append(p)
        if not ahead:
            return []
        self._changes += 1
        self._send(link, mine)
        if link.in_flight:
            self.sent_ahead += 1
        return ahead

    def _error(self, p: _Partition, code: int, what: str) -> None:
        self._changes += 1
        if code == codec.ErrorCode.OFFSET_OUT_OF_RANGE:
            p.reset = True
            return
        if code in codec.RELOOKUP:
            p.node = -1
            return
        if code in codec.RETRIABLE:
            p.not_before = self.clock.monotonic() + p.backoff_s
            self._retry_at = min(self._retry_at, p.not_before)
            p.backoff_s = min(2.0, p.backoff_s * 2)
            return
        err = KafkaProtocolError(f"{what} {p.topic}/{p.partition} failed with Kafka error {code}", code=code)
        self._remove(p.key)
        p.receiver.failed(err)

    def _deliverable(
        self, p: _Partition, got: fetch.FetchedPartition, asked: fetch.PartitionFetch | None
    ) -> tuple[_Partition, fetch.FetchedPartition, int] | None:
        """What of a partition's answer is to be decoded and handed over (the partition, its answer, the
        position it was read from); None when there is nothing (no news, an error dealt with, a moved
        position)."""
        if (
            not got.records
            and not got.error_code
            and got.high_watermark == p.high_watermark
            and got.log_start_offset == p.log_start
            and got.preferred_read_replica < 0
        ):
            p.backoff_s = 0.1
            return None  # nothing new (a broker without fetch sessions lists idle partitions each time)
        if got.error_code:
            self._error(p, got.error_code, "Fetch")
            return None
        p.backoff_s = 0.1
        if got.log_start_offset >= 0:
            p.log_start = got.log_start_offset
        if got.preferred_read_replica >= 0 and got.preferred_read_replica != p.node:
            p.node = got.preferred_read_replica  # KIP-392: the broker names the nearest replica to read from
            self._changes += 1
        position = asked.offset if asked is not None else p.position
        if position != p.position:
            return None  # the partition was moved meanwhile: this data is for an old position
        if not len(got.records) and got.high_watermark == p.high_watermark:
            return None  # nothing new: an idle partition costs nothing more
        p.high_watermark = got.high_watermark
        return p, got, position

    def _hand_over_all(
        self, ready: list[tuple[_Partition, fetch.FetchedPartition, int]], ahead: _Link | None = None
    ) -> None:
        """Decode the partitions of one response and give each its records, in the response's order. A partition
        whose worst case the budget has no room for when its turn comes is parked (decoded once handlers free
        some, and not fetched meanwhile). One by one here, each decoded once the one before holds its records;
        or, when the response is worth sharing out, on the pool, where each thread takes room for one
        partition's worst case at a time and gives back what its decoded records do not take. So a response of
        many partitions is decoded at once, not as many as worst cases fit in the budget, the rest one by one;
        its records (known once decoded) can take the budget past max_records by one response. While the pool
        decodes, the loop reads what comes of `ahead`'s next response (see `_read_while_decoding`)."""
        pool = self._decode_pool(ready)
        if pool is None:
            for p, got, position in ready:
                if not self._hand_over(p, got, position):
                    self._park(p, got)
            return
        shares = even_runs([len(got.records) for _, got, _ in ready], self.decode_threads)
        decoding = [pool.submit(self._decode_share, ready[a:b]) for a, b in shares]
        self.pooled += 1
        if ahead is not None:
            self._read_while_decoding(ahead, decoding)
        decoded = [outcome for share in decoding for outcome in share.result()]
        failed: BaseException | None = None
        for (p, got, _), outcome in zip(ready, decoded, strict=True):
            if outcome is None:
                self._park(p, got)
                continue
            used = count = held = 0
            try:
                if isinstance(outcome, BaseException):
                    raise outcome
                fetched, held = outcome
                used, count = self._received(p, fetched)
            except Exception as err:  # the others are still handed over, and every reservation settled
                failed = failed or err
            finally:
                if held:
                    self.budget.settle(held, used, count)
        if failed is not None:
            raise failed

    def _decode_share(
        self, share: list[tuple[_Partition, fetch.FetchedPartition, int]]
    ) -> list[tuple[Fetched, int] | BaseException | None]:
        """One pool thread's share of a response, decoded in order: for each partition, its records and the bytes
        they hold in the budget until handed over; its error (its own); or None when the budget had no room for
        its worst case."""
        out: list[tuple[Fetched, int] | BaseException | None] = []
        for p, got, position in share:
            reserve = self._worst_case(got) if len(got.records) else 0
            if reserve and not self.budget.reserve(reserve, 0):
                out.append(None)
                continue
            try:
                fetched = self._decode(p, got, position)
            except Exception as err:
                self.budget.settle(reserve, 0, 0)
                out.append(err)
                continue
            held = fetched.batch.nbytes if reserve and fetched.batch is not None else 0
            self.budget.settle(reserve, held, 0)
            out.append((fetched, held))
        return out

    def _read_while_decoding(self, link: _Link, decoding: list[Future[Any]]) -> None:
        """Read the broker's next response (asked ahead) as it comes while the pool decodes this one, and return
        once every share is decoded. The broker sends a response only as fast as it is read (a socket buffer
        holds a fraction of 16 MB), so read after the decoding it would start after it; read meanwhile, the
        next response is often whole when the decoding ends and is handed to the pool at once. Nothing waits
        for it: what has not come when the decoding ends is read by the next round, as before."""
        assert self._decoded is not None
        told, conn = self._decoded[0], link.conn
        for share in decoding:
            share.add_done_callback(self._decoded_one)
        reading = conn is not None
        while not all(share.done() for share in decoding):
            watched: list[Any] = [told, conn] if reading else [told]
            try:
                ready, _, _ = select.select(watched, [], [], 1.0)  # a lost wake-up costs a second, never a hang
            except (OSError, ValueError):  # a socket closed under us (the loop is ending): the caller waits
                return
            if told in ready:
                with contextlib.suppress(BlockingIOError):
                    told.recv(4096)  # a byte a share decoded (a late one from the response before, too)
            if reading and conn in ready:
                try:
                    reading = not conn.receive_some()  # type: ignore[union-attr]
                except StreamplaneError:
                    reading = False  # the next round's receive meets it again, and drops the connection
                else:
                    self.read_early += not reading

    def _decoded_one(self, _share: Future[Any]) -> None:
        """A share of a response is decoded (on its pool thread): one byte tells the loop's select."""
        with contextlib.suppress(OSError):  # closed: the loop is ending
            self._decoded[1].send(b"\0")  # type: ignore[index]

    def _worst_case(self, got: fetch.FetchedPartition) -> int:
        """Budget room a partition's answer may take while it is decoded: the decoder's limit, and its bytes."""
        return self.max_decompressed + len(got.records)

    def _park(self, p: _Partition, got: fetch.FetchedPartition) -> None:
        self.parks += 1
        p.parked = got
        self._parked.append(p)
        self._changes += 1
        self.budget.call_on_release(self.wake)

    def _decode_pool(self, ready: list[tuple[_Partition, fetch.FetchedPartition, int]]) -> ThreadPoolExecutor | None:
        """The pool, when this response is worth sharing out (several partitions, enough bytes)."""
        if self.decode_threads <= 1 or len(ready) < 2:
            return None
        if sum(len(got.records) for _, got, _ in ready) < PARALLEL_MIN_BYTES:
            return None
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.decode_threads, thread_name_prefix="decode")
            self._decoded = socket.socketpair()
            self._decoded[0].setblocking(False)
        return self._pool

    def _received(self, p: _Partition, fetched: Fetched) -> tuple[int, int]:
        """Move the partition past what was decoded and hand it to its receiver: (bytes, records) it holds."""
        if fetched.batch is not None:
            p.read_epoch = max(p.read_epoch, fetched.batch.last_leader_epoch)
        if fetched.next_position != p.position:
            self._changes += 1
        p.position = fetched.next_position
        return p.receiver.received(fetched)

    def _unpark(self) -> None:
        """Decode what was read while the budget was full, oldest first, as far as room allows."""
        parked = self._parked
        while parked:
            p = parked[0]
            got = p.parked
            if got is not None and self._parts.get(p.key) is p and not self._hand_over(p, got, p.position):
                self.budget.call_on_release(self.wake)
                return
            parked.popleft()
            p.parked = None
            self._changes += 1  # fetched again from its new position

    def _hand_over(self, p: _Partition, got: fetch.FetchedPartition, position: int) -> bool:
        """Decode a partition's records from `position` and give them to its receiver; False (nothing done)
        when the budget has no room for them now."""
        reserve = self._worst_case(got)
        if len(got.records) and not self.budget.reserve(reserve, 0):
            return False
        used = count = 0
        try:
            used, count = self._received(p, self._decode(p, got, position))
        finally:
            if len(got.records):
                self.budget.settle(reserve, used, count)
        return True

    def _decode(self, p: _Partition, got: fetch.FetchedPartition, position: int) -> Fetched:
        return decode_records(
            got.records,
            position,
            got.high_watermark,
            max_decompressed=self.max_decompressed,
            aborted=got.aborted if self.read_committed else None,
            where=self.where,
            partition=p.partition,
            mine=p.mine,
        )

    def _deliver_oneoff(self, p: _Partition, got: fetch.FetchedPartition, offset: int) -> None:
        pending = self._oneoffs.pop(p.key, [])
        now_due = [(o, cb) for o, cb in pending if o == offset]
        later = [(o, cb) for o, cb in pending if o != offset]
        if later:
            self._oneoffs[p.key] = later
        if got.error_code:
            err = KafkaProtocolError(f"Fetch {p.topic}/{p.partition}@{offset} failed", code=got.error_code)
            for _, cb in now_due:
                cb(None, err)
            return
        fetched = self._decode(p, got, offset)
        for _, cb in now_due:
            cb(fetched, None)
