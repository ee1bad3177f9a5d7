"""How the health monitor looks at a cluster: a metadata probe and a canary, over our own wire client.

A fleet of a thousand clusters is probed every two seconds, so a probe must cost a request, not a
connection: each cluster keeps one connection to a bootstrap broker between probes (and one to its canary
partition's leader when that is another broker), opened again after any error. The canary produces one
small record with the wire client's own Produce and fetches it back on the same connection; it never starts
a producer, whose threads and sockets a fleet would multiply.
"""

from __future__ import annotations

import threading
import time

from streamplane.client.kafka import produce
from streamplane.client.kafka.codec import KafkaProtocolError
from streamplane.client.kafka.connection import KafkaConnection
from streamplane.coordinator.topology.kafka_settings import PLAINTEXT, KafkaSettings
from streamplane.errors import StreamplaneError, UnavailableError
from streamplane.model import Cluster, Probe
from streamplane.names import TOPIC_PREFIX
from streamplane.native import decode

CANARY_TOPIC = f"{TOPIC_PREFIX}._canary"
"""One small topic per cluster (1 partition) that the health monitor writes to and reads back."""
CANARY_BACKOFF_S = 0.05
"""The first wait before a canary tries again after a broker's passing error (doubling up to 0.5 s)."""


class WireProbes:
    """Probes and canaries for many clusters, with their connections kept per cluster (thread-safe across
    clusters; one cluster is looked at by one thread at a time, as the autopilot schedules it)."""

    def __init__(self, settings: KafkaSettings = PLAINTEXT) -> None:
        self._settings = settings  # of the clusters that name Kafka settings (TLS, SASL)
        self._lock = threading.Lock()
        self._held: dict[str, tuple[tuple[str, int], dict[str, KafkaConnection]]] = {}
        """{cluster: ((its bootstrap list, its settings' stamp), {broker address: connection})}; the first address
        is bootstrap's."""

    def probe(self, cluster: Cluster, *, timeout_s: float, now_ms: int, topics: bool = True) -> Probe:
        """Read a cluster's metadata; without `topics` only its brokers (a cheap look: partitions are counted
        on every few probes)."""
        name = cluster.name
        started = time.perf_counter()
        try:
            try:
                md = self._bootstrap(cluster, timeout_s).metadata(None if topics else [])
            except UnavailableError:
                if time.perf_counter() - started >= timeout_s / 2:
                    raise  # no answer in time: the cluster's, not the kept connection's
                self.forget(name)  # a kept connection the broker dropped (restarted, idle): a fresh one decides
                md = self._bootstrap(cluster, timeout_s).metadata(None if topics else [])
        except (StreamplaneError, OSError) as err:
            self.forget(name)
            message = err.message if isinstance(err, StreamplaneError) else str(err)
            return Probe(name, now_ms, False, (time.perf_counter() - started) * 1000, error=message[:300])
        took = (time.perf_counter() - started) * 1000
        if not topics:
            return Probe(name, now_ms, True, took, len(md.brokers), partitions=-1)
        ours = [p for topic, parts in md.topics.items() if topic.startswith(f"{TOPIC_PREFIX}.") for p in parts]
        return Probe(
            name,
            now_ms,
            True,
            took,
            brokers=len(md.brokers),
            partitions=len(ours),
            leaderless=sum(1 for p in ours if p.leader < 0),
            under_replicated=sum(1 for p in ours if p.isr and len(p.isr) < len(p.replicas)),
        )

    def canary(self, cluster: Cluster, *, timeout_s: float) -> tuple[float, str]:
        """Produce one record to the cluster's health topic (acks=all) and fetch it back: (ms it took, "" or
        the error). The topic must exist (the autopilot creates it once per cluster). What a broker may say for
        a moment (no leader yet, leadership moving, replicas catching up, a dropped connection) is tried again
        within the timeout, as a producer would; the last of it is the error if the timeout runs out."""
        started = time.perf_counter()
        deadline = time.monotonic() + timeout_s
        value = f"canary {time.time_ns()}".encode()
        offset, last, backoff = -1, "canary record not fetched back in time", CANARY_BACKOFF_S

        def took() -> float:
            return (time.perf_counter() - started) * 1000

        while time.monotonic() < deadline:
            try:
                leader = self._canary_leader(cluster, timeout_s)
                if offset < 0:
                    batch = produce.record_batch(value, time.time_ns() // 1_000_000)
                    try:
                        offset = leader.produce(CANARY_TOPIC, 0, batch, timeout_ms=max(1, int(timeout_s * 1000)))
                    except StreamplaneError as err:
                        if not err.retryable:
                            return took(), f"canary produce failed: {err.message[:200]}"
                        raise
                (part,) = leader.fetch(CANARY_TOPIC, {0: offset}, max_wait_ms=min(100, int(timeout_s * 1000)))
                if part.error_code:
                    raise KafkaProtocolError(f"canary fetch of {CANARY_TOPIC}/0 failed", code=part.error_code)
                if part.records and any(r.value == value for r in decode(part.records).records()):
                    return took(), ""
                continue  # not there yet: fetch again
            except (StreamplaneError, OSError) as err:
                message = err.message if isinstance(err, StreamplaneError) else str(err)
                if isinstance(err, StreamplaneError) and not err.retryable:
                    self.forget(cluster.name)
                    return took(), f"canary failed: {message[:200]}"
                last = f"canary failed: {message[:200]}"
                if isinstance(err, (UnavailableError, OSError)):
                    self.forget(cluster.name)  # a connection that broke: fresh ones next time
            time.sleep(max(0.0, min(backoff, deadline - time.monotonic())))  # a broker's moment, not a guess
            backoff = min(2 * backoff, 0.5)
        return took(), last

    def forget(self, name: str) -> None:
        """Close a cluster's connections (after an error, or once it is removed)."""
        with self._lock:
            held = self._held.pop(name, None)
            conns = list(held[1].values()) if held else []  # a probe under way may add to it meanwhile
        for conn in conns:
            conn.close()

    def close(self) -> None:
        for name in list(self._held):
            self.forget(name)

    def connections(self) -> int:
        """Connections open now, over every cluster."""
        with self._lock:
            return sum(len(conns) for _, conns in self._held.values())

    def _reached(self, cluster: Cluster) -> tuple[str, int]:
        """How a cluster's kept connections were made: its bootstrap list and its settings' stamp (either
        changed, by a registration elsewhere or a reload, and they are made again)."""
        return cluster.bootstrap_servers, self._settings.stamp(cluster)

    def _bootstrap(self, cluster: Cluster, timeout_s: float) -> KafkaConnection:
        name, reached = cluster.name, self._reached(cluster)
        with self._lock:
            held = self._held.get(name)
        if held is not None and held[0] != reached:  # registered again elsewhere, or its settings reloaded
            self.forget(name)
            held = None
        if held is not None:
            return next(iter(held[1].values()))
        conn = KafkaConnection.connect_any(cluster.bootstrap_servers, self._settings.connection(cluster, timeout_s))
        with self._lock:
            self._held[name] = (reached, {conn.address: conn})
        return conn

    def _canary_leader(self, cluster: Cluster, timeout_s: float) -> KafkaConnection:
        """The connection to the leader of the canary partition, opened once and kept with the cluster's."""
        bootstrap = self._bootstrap(cluster, timeout_s)
        md = bootstrap.metadata([CANARY_TOPIC])
        part = next((p for p in md.topics.get(CANARY_TOPIC, []) if p.partition == 0), None)
        if part is None or part.leader not in md.brokers:
            raise UnavailableError(f"{CANARY_TOPIC}/0 has no leader now")
        broker = md.brokers[part.leader]
        address = f"{broker.host}:{broker.port}"
        with self._lock:
            conns = self._held.get(cluster.name, (("", 0), {}))[1]
            conn = conns.get(address)
        if conn is None:
            conn = KafkaConnection(broker.host, broker.port, self._settings.connection(cluster, timeout_s))
            with self._lock:  # kept with the cluster's, even if they were forgotten meanwhile: closed with them
                kept = self._held.setdefault(cluster.name, (self._reached(cluster), {}))[1]
                other = kept.setdefault(address, conn)
            if other is not conn:  # another probe opened one meanwhile
                conn.close()
                conn = other
        return conn
