"""A stand-in for many Kafka clusters on one machine, to measure the control plane at fleet size.

Each cluster is one listening socket speaking enough of the Kafka protocol for the health monitor and the
cluster admin: ApiVersions, Metadata, CreateTopics, ListOffsets, and Produce and Fetch for the canary. One
thread serves every cluster through one selector, so hundreds of clusters cost one thread and a socket
each. A cluster dies when its listener and connections close (`kill`), and comes back on the same port
(`revive`).

It keeps only the last batches of each partition and has no replication, transactions or consumer groups:
real brokers back the end-to-end tests; this is for what a fleet costs the coordinator.

    python -m streamplane.testing.kafka_fleet --clusters 1000   # prints one JSON line of bootstrap lists
"""

from __future__ import annotations

import argparse
import contextlib
import json
import selectors
import socket
import struct
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from streamplane.client.kafka import codec
from streamplane.client.kafka.codec import Reader
from streamplane.errors import StreamplaneError

UNKNOWN_TOPIC, INVALID_PARTITIONS, TOPIC_EXISTS, UNSUPPORTED = 3, 37, 36, 35
KEPT_BATCHES = 16
"""Batches kept per partition: the canary reads back what it just wrote."""
MAX_REQUEST = 16 << 20
SPOKEN = {0: (3, 8), 1: (4, 11), 2: (1, 5), 3: (1, 8), 18: (0, 3), 19: (2, 4)}
"""{api key: (min, max version)}: Produce, Fetch, ListOffsets, Metadata, ApiVersions, CreateTopics, none of
them in a flexible version but ApiVersions v3."""


@dataclass
class _Partition:
    batches: list[tuple[int, bytes]] = field(default_factory=list)  # (base offset, batch), the newest kept
    log_start: int = 0
    end: int = 0

    def append(self, batch: bytes) -> int:
        base = self.end
        count = struct.unpack_from(">i", batch, 23)[0] + 1  # last offset delta + 1
        self.batches.append((base, struct.pack(">q", base) + batch[8:]))
        self.end += count
        if len(self.batches) > KEPT_BATCHES:
            del self.batches[0]
            self.log_start = self.batches[0][0]
        return base


@dataclass
class FakeCluster:
    """One cluster: a single broker (node 0) and its topics."""

    name: str
    port: int
    topics: dict[str, list[_Partition]] = field(default_factory=dict)
    listener: socket.socket | None = None
    requests: int = 0


class KafkaFleet:
    """`clusters` stand-in clusters listening on 127.0.0.1, served by one thread until `close`."""

    def __init__(self, clusters: int, *, host: str = "127.0.0.1", prefix: str = "fake") -> None:
        self.host = host
        self._selector = selectors.DefaultSelector()
        self._lock = threading.Lock()
        self._conns: dict[socket.socket, tuple[FakeCluster, bytearray]] = {}
        self.clusters: list[FakeCluster] = []
        for i in range(clusters):
            cluster = FakeCluster(f"{prefix}-{i:04d}", 0)
            self._listen(cluster)
            self.clusters.append(cluster)
        self._waker_r, self._waker_w = socket.socketpair()
        self._selector.register(self._waker_r, selectors.EVENT_READ, None)
        self._closed = False
        self._thread = threading.Thread(target=self._serve, name="kafka-fleet", daemon=True)
        self._thread.start()

    def bootstrap(self, i: int) -> str:
        return f"{self.host}:{self.clusters[i].port}"

    def kill(self, i: int) -> None:
        """Cluster `i` dies: its listener and every connection to it close."""
        with self._lock:
            cluster = self.clusters[i]
            if cluster.listener is not None:
                self._selector.unregister(cluster.listener)
                cluster.listener.close()
                cluster.listener = None
            for sock, (owner, _) in list(self._conns.items()):
                if owner is cluster:
                    self._drop(sock)

    def revive(self, i: int) -> None:
        """Cluster `i` listens again on its port, with the topics it had."""
        with self._lock:
            if self.clusters[i].listener is None:
                self._listen(self.clusters[i])
        self._waker_w.send(b"\0")

    def close(self) -> None:
        self._closed = True
        self._waker_w.send(b"\0")
        self._thread.join(5)
        with self._lock:
            for sock in list(self._conns):
                self._drop(sock)
            for cluster in self.clusters:
                if cluster.listener is not None:
                    cluster.listener.close()
        self._selector.close()
        self._waker_r.close()
        self._waker_w.close()

    def __enter__(self) -> KafkaFleet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _listen(self, cluster: FakeCluster) -> None:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((self.host, cluster.port))
        listener.listen(64)
        listener.setblocking(False)
        cluster.port = listener.getsockname()[1]
        cluster.listener = listener
        self._selector.register(listener, selectors.EVENT_READ, cluster)

    def _drop(self, sock: socket.socket) -> None:
        self._conns.pop(sock, None)
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(sock)
        sock.close()

    def _serve(self) -> None:
        while not self._closed:
            events = self._selector.select(1.0)
            with self._lock:
                for key, _ in events:
                    sock = key.fileobj
                    assert isinstance(sock, socket.socket)
                    if sock is self._waker_r:
                        sock.recv(4096)
                    elif key.data is not None and sock is key.data.listener:
                        self._accept(key.data)
                    elif sock in self._conns:
                        self._read(sock)

    def _accept(self, cluster: FakeCluster) -> None:
        assert cluster.listener is not None
        try:
            sock, _ = cluster.listener.accept()
        except OSError:
            return
        sock.setblocking(True)  # responses are small: written whole
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._conns[sock] = (cluster, bytearray())
        self._selector.register(sock, selectors.EVENT_READ, None)

    def _read(self, sock: socket.socket) -> None:
        cluster, buf = self._conns[sock]
        try:
            chunk = sock.recv(1 << 16)
        except OSError:
            chunk = b""
        if not chunk:
            self._drop(sock)
            return
        buf += chunk
        while len(buf) >= 4:
            (size,) = struct.unpack_from(">i", buf)
            if not 0 < size <= MAX_REQUEST:
                self._drop(sock)
                return
            if len(buf) < 4 + size:
                return
            request = bytes(buf[4 : 4 + size])
            del buf[: 4 + size]
            try:
                response = self._answer(cluster, request)
                sock.sendall(struct.pack(">i", len(response)) + response)
            except (OSError, ValueError, struct.error, StreamplaneError):
                self._drop(sock)
                return

    def _answer(self, cluster: FakeCluster, request: bytes) -> bytes:
        r = Reader(request)
        api, version, correlation = r.i16(), r.i16(), r.i32()
        r.string()  # client id
        cluster.requests += 1
        head = struct.pack(">i", correlation)  # response header v0 (ApiVersions' always is)
        if api == 18:
            return head + _api_versions(version)
        lo_hi = SPOKEN.get(api)
        if lo_hi is None or not lo_hi[0] <= version <= lo_hi[1]:
            raise ValueError(f"api {api} v{version} is not spoken here")
        answer: dict[int, Callable[[FakeCluster, int, Reader], bytes]] = {
            0: self._produce,
            1: self._fetch,
            2: self._list_offsets,
            3: self._metadata,
            19: self._create_topics,
        }
        return head + answer[api](cluster, version, r)

    def _metadata(self, cluster: FakeCluster, version: int, r: Reader) -> bytes:
        n = r.i32()
        wanted = list(cluster.topics) if n < 0 else [r.string() or "" for _ in range(n)]
        out = struct.pack(">i", 0) if version >= 3 else b""
        out += codec.array(
            [struct.pack(">i", 0) + codec.string(self.host) + struct.pack(">i", cluster.port) + codec.string(None)]
        )
        if version >= 2:
            out += codec.string(cluster.name)
        out += struct.pack(">i", 0)  # controller
        topics = []
        for name in wanted:
            parts = cluster.topics.get(name)
            item = struct.pack(">h", 0 if parts is not None else UNKNOWN_TOPIC) + codec.string(name) + b"\0"
            rows = []
            for index in range(len(parts or ())):
                row = struct.pack(">hii", 0, index, 0)
                if version >= 7:
                    row += struct.pack(">i", 0)  # leader epoch
                row += codec.array([struct.pack(">i", 0)]) * 2  # replicas, in-sync replicas
                if version >= 5:
                    row += codec.array([])  # offline replicas
                rows.append(row)
            item += codec.array(rows)
            if version >= 8:
                item += struct.pack(">i", 0)
            topics.append(item)
        out += codec.array(topics)
        if version >= 8:
            out += struct.pack(">i", 0)
        return out

    def _create_topics(self, cluster: FakeCluster, version: int, r: Reader) -> bytes:
        results = []
        for _ in range(r.i32()):
            name, partitions = r.string() or "", r.i32()
            r.i16()  # replication factor
            r.array(lambda: (r.i32(), r.array(r.i32)))  # assignments
            r.array(lambda: (r.string(), r.string()))  # configs
            if name in cluster.topics:
                code = TOPIC_EXISTS
            elif partitions == 0 or partitions < -1:
                code = INVALID_PARTITIONS
            else:
                cluster.topics[name] = [_Partition() for _ in range(max(partitions, 1))]
                code = 0
            results.append(codec.string(name) + struct.pack(">h", code) + codec.string(None))
        return struct.pack(">i", 0) + codec.array(results)

    def _partition(self, cluster: FakeCluster, topic: str, index: int) -> _Partition | None:
        parts = cluster.topics.get(topic)
        return parts[index] if parts is not None and 0 <= index < len(parts) else None

    def _list_offsets(self, cluster: FakeCluster, version: int, r: Reader) -> bytes:
        r.i32()  # replica
        if version >= 2:
            r.i8()  # isolation
        topics = []
        for _ in range(r.i32()):
            topic = r.string() or ""
            rows = []
            for _ in range(r.i32()):
                index = r.i32()
                if version >= 4:
                    r.i32()  # current leader epoch
                when = r.i64()
                p = self._partition(cluster, topic, index)
                offset = -1 if p is None else p.log_start if when == -2 else p.end
                row = struct.pack(">ihqq", index, UNKNOWN_TOPIC if p is None else 0, -1, offset)
                rows.append(row + (struct.pack(">i", 0) if version >= 4 else b""))
            topics.append(codec.string(topic) + codec.array(rows))
        return (struct.pack(">i", 0) if version >= 2 else b"") + codec.array(topics)

    def _produce(self, cluster: FakeCluster, version: int, r: Reader) -> bytes:
        r.string()  # transactional id
        r.i16()  # acks
        r.i32()  # timeout
        topics = []
        for _ in range(r.i32()):
            topic = r.string() or ""
            rows = []
            for _ in range(r.i32()):
                index = r.i32()
                batch = r.bytes_()
                p = self._partition(cluster, topic, index)
                if p is None or batch is None or len(batch) < 61:
                    code, base = UNKNOWN_TOPIC if p is None else 87, -1  # 87: INVALID_RECORD
                else:
                    code, base = 0, p.append(bytes(batch))
                row = struct.pack(">ihqq", index, code, base, -1)
                if version >= 5:
                    row += struct.pack(">q", p.log_start if p else -1)
                if version >= 8:
                    row += codec.array([]) + codec.string(None)
                rows.append(row)
            topics.append(codec.string(topic) + codec.array(rows))
        return codec.array(topics) + struct.pack(">i", 0)

    def _fetch(self, cluster: FakeCluster, version: int, r: Reader) -> bytes:
        r.i32()  # replica
        r.i32()  # max wait: the stand-in answers at once
        r.i32()  # min bytes
        r.i32()  # max bytes
        r.i8()  # isolation
        if version >= 7:
            r.i32()  # session id: none is opened
            r.i32()  # session epoch
        topics = []
        for _ in range(r.i32()):
            topic = r.string() or ""
            rows = []
            for _ in range(r.i32()):
                index = r.i32()
                if version >= 9:
                    r.i32()  # current leader epoch
                offset = r.i64()
                if version >= 5:
                    r.i64()  # log start offset
                r.i32()  # partition max bytes
                p = self._partition(cluster, topic, index)
                if p is None:
                    code, end, start, records = UNKNOWN_TOPIC, -1, -1, b""
                elif not p.log_start <= offset <= p.end:
                    code, end, start, records = 1, p.end, p.log_start, b""  # OFFSET_OUT_OF_RANGE
                else:
                    code, end, start = 0, p.end, p.log_start
                    records = b"".join(b for base, b in p.batches if base + _count(b) > offset)
                row = struct.pack(">ihqq", index, code, end, end)
                if version >= 5:
                    row += struct.pack(">q", start)
                row += struct.pack(">i", 0)  # no aborted transactions
                if version >= 11:
                    row += struct.pack(">i", -1)  # preferred read replica
                rows.append(row + codec.bytes_(records))
            topics.append(codec.string(topic) + codec.array(rows))
        if version >= 7:
            r.array(lambda: (r.string(), r.array(r.i32)))  # forgotten topics
        head = struct.pack(">i", 0) + (struct.pack(">hi", 0, 0) if version >= 7 else b"")
        return head + codec.array(topics)


def _count(batch: bytes) -> int:
    return int(struct.unpack_from(">i", batch, 23)[0]) + 1


def _api_versions(version: int) -> bytes:
    spoken = sorted(SPOKEN.items())
    if version >= 3:
        entries = [struct.pack(">hhh", k, lo, hi) + codec.NO_TAGS for k, (lo, hi) in spoken]
        return (
            struct.pack(">h", 0)
            + codec.uvarint(len(entries) + 1)
            + b"".join(entries)
            + struct.pack(">i", 0)
            + codec.NO_TAGS
        )
    entries = [struct.pack(">hhh", k, lo, hi) for k, (lo, hi) in spoken]
    return struct.pack(">h", 0) + codec.array(entries) + (struct.pack(">i", 0) if version >= 1 else b"")


def main(argv: list[str] | None = None) -> int:
    """Serve `--clusters` stand-ins until stdin closes; print their bootstrap lists as one JSON line."""
    parser = argparse.ArgumentParser(prog="python -m streamplane.testing.kafka_fleet", description=__doc__)
    parser.add_argument("--clusters", type=int, default=100)
    args = parser.parse_args(argv)
    if not 1 <= args.clusters <= 10_000:
        parser.error(f"--clusters must be from 1 to 10000, not {args.clusters}")
    with KafkaFleet(args.clusters) as fleet:
        print(json.dumps([fleet.bootstrap(i) for i in range(args.clusters)]), flush=True)
        for line in sys.stdin:  # "kill N" / "revive N"; the fleet stops when stdin closes
            word, _, number = line.partition(" ")
            if word in ("kill", "revive") and number.strip().isdigit():
                getattr(fleet, word)(int(number))
    return 0


if __name__ == "__main__":
    sys.exit(main())
