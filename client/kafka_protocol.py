"""A minimal Kafka wire-protocol client: ApiVersions, Metadata, ListOffsets and Fetch, over one socket.

Fetch returns each partition's `records` bytes untouched, for the native decoder. Only the request and
response versions we need are spoken (non-flexible ones, which every broker since 1.0 accepts):
ApiVersions v0, Metadata v1, ListOffsets v1, Fetch v4.
"""

from __future__ import annotations

import socket
import ssl
import struct
import threading
from dataclasses import dataclass, field

from streamplane.errors import MalformedBatchError, StreamplaneError, UnavailableError

API_FETCH, API_LIST_OFFSETS, API_METADATA, API_VERSIONS = 1, 2, 3, 18
EARLIEST, LATEST = -2, -1
MAX_RESPONSE_BYTES = 256 * 1024 * 1024


class KafkaProtocolError(StreamplaneError):
    """A broker answered with a Kafka error code; `code` is it, `retryable` says whether to try again."""

    # Kafka error codes that mean "try again, perhaps elsewhere" (leadership moved, broker busy, ...).
    RETRIABLE = {3, 5, 6, 7, 9, 13, 14, 15, 16, 19, 20, 56, 74, 75}

    def __init__(self, message: str, *, code: int) -> None:
        super().__init__(message, retryable=code in self.RETRIABLE)
        self.code = code


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def take(self, fmt: str) -> tuple:
        size = struct.calcsize(fmt)
        if self.pos + size > len(self.data):
            raise MalformedBatchError(f"Kafka response ends at byte {len(self.data)}, inside a field at {self.pos}")
        values = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += size
        return values

    def i8(self) -> int:
        return self.take(">b")[0]

    def i16(self) -> int:
        return self.take(">h")[0]

    def i32(self) -> int:
        return self.take(">i")[0]

    def i64(self) -> int:
        return self.take(">q")[0]

    def string(self) -> str | None:
        n = self.i16()
        if n < 0:
            return None
        raw = self.data[self.pos : self.pos + n]
        self.pos += n
        return raw.decode("utf-8", "replace")

    def bytes_(self) -> memoryview | None:
        n = self.i32()
        if n < 0:
            return None
        if self.pos + n > len(self.data):
            raise MalformedBatchError(f"Kafka response declares {n} bytes at {self.pos}, past its end")
        view = memoryview(self.data)[self.pos : self.pos + n]
        self.pos += n
        return view

    def array(self, item) -> list:
        n = self.i32()
        return [] if n < 0 else [item() for _ in range(n)]


def _string(value: str | None) -> bytes:
    if value is None:
        return struct.pack(">h", -1)
    raw = value.encode()
    return struct.pack(">h", len(raw)) + raw


def _array(items: list[bytes]) -> bytes:
    return struct.pack(">i", len(items)) + b"".join(items)


@dataclass(frozen=True)
class Broker:
    node_id: int
    host: str
    port: int


@dataclass(frozen=True)
class PartitionMetadata:
    partition: int
    leader: int
    error_code: int


@dataclass(frozen=True)
class Metadata:
    brokers: dict[int, Broker]
    topics: dict[str, list[PartitionMetadata]]
    topic_errors: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class FetchedPartition:
    """One partition of a Fetch response; `records` is the raw record set (may end in a truncated batch)."""

    topic: str
    partition: int
    error_code: int
    high_watermark: int
    last_stable_offset: int
    aborted: list[tuple[int, int]] | None
    records: memoryview


class KafkaConnection:
    """One connection to one broker. Calls are serialized; the connection is reusable and thread-safe."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        client_id: str = "streamplane",
        timeout_s: float = 30.0,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.address = f"{host}:{port}"
        try:
            sock = socket.create_connection((host, port), timeout=timeout_s)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._sock = ssl_context.wrap_socket(sock, server_hostname=host) if ssl_context else sock
        except OSError as err:  # ssl.SSLError included
            raise UnavailableError(f"cannot connect to Kafka broker {self.address}: {err}") from err
        self._client_id = client_id
        self._correlation = 0
        self._lock = threading.Lock()

    @classmethod
    def connect_any(cls, bootstrap_servers: str, **kwargs: object) -> KafkaConnection:
        """Connect to the first reachable host:port of a bootstrap list."""
        errors = []
        for server in bootstrap_servers.split(","):
            host, _, port = server.strip().rpartition(":")
            try:
                return cls(host, int(port), **kwargs)  # type: ignore[arg-type]
            except (UnavailableError, ValueError) as err:
                errors.append(str(err))
        raise UnavailableError(f"no Kafka broker of {bootstrap_servers} is reachable: {'; '.join(errors)}")

    def close(self) -> None:
        self._sock.close()

    def __enter__(self) -> KafkaConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _recv_exact(self, n: int) -> bytes:
        buf = bytearray(n)
        view = memoryview(buf)
        got = 0
        while got < n:
            k = self._sock.recv_into(view[got:], n - got)
            if k == 0:
                raise UnavailableError(f"Kafka broker {self.address} closed the connection")
            got += k
        return bytes(buf)

    def request(self, api_key: int, version: int, body: bytes) -> _Reader:
        """Send one request and return a reader over its response body."""
        with self._lock:
            self._correlation += 1
            cid = self._correlation
            header = struct.pack(">hhi", api_key, version, cid) + _string(self._client_id)
            try:
                self._sock.sendall(struct.pack(">i", len(header) + len(body)) + header + body)
                (size,) = struct.unpack(">i", self._recv_exact(4))
                if not 4 <= size <= MAX_RESPONSE_BYTES:
                    raise MalformedBatchError(f"Kafka broker {self.address} sent a response of {size} bytes")
                payload = self._recv_exact(size)
            except OSError as err:
                raise UnavailableError(f"Kafka broker {self.address}: {err}") from err
        reader = _Reader(payload)
        if reader.i32() != cid:
            raise MalformedBatchError(f"Kafka broker {self.address} answered another request (correlation id)")
        return reader

    def api_versions(self) -> dict[int, tuple[int, int]]:
        """{api_key: (min_version, max_version)} the broker supports."""
        r = self.request(API_VERSIONS, 0, b"")
        code = r.i16()
        if code:
            raise KafkaProtocolError(f"ApiVersions failed on {self.address} with error {code}", code=code)
        return {k: (lo, hi) for k, lo, hi in r.array(lambda: (r.i16(), r.i16(), r.i16()))}

    def metadata(self, topics: list[str] | None = None) -> Metadata:
        body = struct.pack(">i", -1) if topics is None else _array([_string(t) for t in topics])
        r = self.request(API_METADATA, 1, body)
        brokers: dict[int, Broker] = {}
        for _ in range(r.i32()):
            node, host, port = r.i32(), r.string() or "", r.i32()
            r.string()  # rack
            brokers[node] = Broker(node, host, port)
        r.i32()  # controller id
        topic_map: dict[str, list[PartitionMetadata]] = {}
        topic_errors: dict[str, int] = {}
        for _ in range(r.i32()):
            code, name = r.i16(), r.string() or ""
            r.i8()  # is_internal
            parts = []
            for _ in range(r.i32()):
                p_code, index, leader = r.i16(), r.i32(), r.i32()
                r.array(r.i32)  # replicas
                r.array(r.i32)  # isr
                parts.append(PartitionMetadata(index, leader, p_code))
            topic_map[name] = sorted(parts, key=lambda p: p.partition)
            if code:
                topic_errors[name] = code
        return Metadata(brokers, topic_map, topic_errors)

    def list_offsets(self, topic: str, partitions: list[int], timestamp: int) -> dict[int, int]:
        """{partition: offset} for EARLIEST (-2) or LATEST (-1); the partitions must be led by this broker."""
        body = struct.pack(">i", -1) + _array(
            [_string(topic) + _array([struct.pack(">iq", p, timestamp) for p in partitions])]
        )
        r = self.request(API_LIST_OFFSETS, 1, body)
        out = {}
        for _ in range(r.i32()):
            r.string()
            for _ in range(r.i32()):
                partition, code = r.i32(), r.i16()
                r.i64()  # timestamp
                offset = r.i64()
                if code:
                    raise KafkaProtocolError(
                        f"ListOffsets {topic}/{partition} failed on {self.address} with error {code}", code=code
                    )
                out[partition] = offset
        return out

    def fetch(
        self,
        topic: str,
        offsets: dict[int, int],
        *,
        max_wait_ms: int = 100,
        min_bytes: int = 1,
        max_bytes: int = 50 * 1024 * 1024,
        partition_max_bytes: int = 8 * 1024 * 1024,
        read_committed: bool = False,
    ) -> list[FetchedPartition]:
        """Fetch v4 from `offsets` ({partition: offset}); partitions must be led by this broker."""
        parts = [struct.pack(">iqi", p, o, partition_max_bytes) for p, o in offsets.items()]
        body = struct.pack(">iiiib", -1, max_wait_ms, min_bytes, max_bytes, 1 if read_committed else 0)
        body += _array([_string(topic) + _array(parts)])
        r = self.request(API_FETCH, 4, body)
        r.i32()  # throttle time
        out = []
        for _ in range(r.i32()):
            name = r.string() or ""
            for _ in range(r.i32()):
                partition, code, hw, lso = r.i32(), r.i16(), r.i64(), r.i64()
                n = r.i32()
                aborted = None if n < 0 else [(r.i64(), r.i64()) for _ in range(n)]
                records = r.bytes_()
                out.append(
                    FetchedPartition(
                        name, partition, code, hw, lso, aborted, records if records is not None else memoryview(b"")
                    )
                )
        return out
