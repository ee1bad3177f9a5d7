"""One connection to one Kafka broker: framing, TLS, SASL, and version negotiation.

On connect it asks ApiVersions, authenticates when configured, and from then on speaks, for each API, the
highest version both sides support within the range we test (`VERSIONS` of each API module). A broker with
no overlap is one clear error naming the API. Calls are serialized; `send` and `receive` are also exposed
apart so one thread can keep a request in flight on many brokers at once (the consumer's fetch loop).
"""

from __future__ import annotations

import socket
import ssl
import struct
import threading
from collections import deque

from streamplane.client.kafka import api_versions, codec, fetch, list_offsets, metadata, produce, sasl
from streamplane.client.kafka.codec import KafkaAuthenticationError, KafkaProtocolError, Reader
from streamplane.client.kafka.config import ConnectionConfig
from streamplane.errors import MalformedBatchError, StreamplaneError, UnavailableError

MAX_RESPONSE_BYTES = 256 * 1024 * 1024
API_NAMES = {
    0: "Produce",
    1: "Fetch",
    2: "ListOffsets",
    3: "Metadata",
    17: "SaslHandshake",
    18: "ApiVersions",
    23: "OffsetForLeaderEpoch",
    36: "SaslAuthenticate",
}


class KafkaConnection:
    """A negotiated, authenticated connection to one broker."""

    def __init__(self, host: str, port: int, config: ConnectionConfig | None = None) -> None:
        self.config = config or ConnectionConfig()
        self.address = f"{host}:{port}"
        timeout = self.config.timeout_s
        try:
            sock = socket.create_connection((host, port), timeout=timeout)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            ctx = self.config.ssl_context
            self._sock = ctx.wrap_socket(sock, server_hostname=host) if ctx else sock
        except OSError as err:  # ssl.SSLError included
            raise UnavailableError(f"cannot connect to Kafka broker {self.address}: {err}") from err
        self._correlation = 0
        self._in_flight: deque[int] = deque()  # correlation ids of requests sent, their answers not read yet
        # The next response as read so far: its 4-byte size, then its body (see `receive_some`).
        self._head = bytearray(4)
        self._head_got = 0
        self._body = bytearray()
        self._body_got = 0
        self._broken: StreamplaneError | None = None  # what reading it in part ran into: raised by `receive`
        self._lock = threading.Lock()
        try:
            self.versions = self._negotiate()
            if self.config.sasl_mechanism:
                self._authenticate()
        except BaseException:
            self.close()
            raise

    @classmethod
    def connect_any(cls, bootstrap_servers: str, config: ConnectionConfig | None = None) -> KafkaConnection:
        """Connect to the first reachable host:port of a bootstrap list (authentication errors are not
        hidden behind the next host: they are raised at once)."""
        errors = []
        for server in bootstrap_servers.split(","):
            host, _, port = server.strip().rpartition(":")
            try:
                return cls(host, int(port), config)
            except (UnavailableError, ValueError) as err:
                errors.append(str(err))
        raise UnavailableError(f"no Kafka broker of {bootstrap_servers} is reachable: {'; '.join(errors)}")

    def close(self) -> None:
        self._sock.close()

    def fileno(self) -> int:
        return self._sock.fileno()

    def __enter__(self) -> KafkaConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- versions
    def _negotiate(self) -> dict[int, tuple[int, int]]:
        version = api_versions.VERSIONS[1]
        for _ in range(2):
            self._send(api_versions.KEY, version, api_versions.encode(version))
            code, versions = api_versions.decode(version, self._receive())
            if code == codec.ErrorCode.UNSUPPORTED_VERSION and version > 0:
                version = min(version - 1, versions.get(api_versions.KEY, (0, 0))[1])
                continue
            if code:
                raise KafkaProtocolError(f"ApiVersions failed on {self.address} with error {code}", code=code)
            return versions
        raise KafkaProtocolError(f"{self.address} refuses every ApiVersions version we speak", code=35)

    def version(self, api_key: int, ours: tuple[int, int]) -> int:
        """The highest version of `api_key` both sides speak."""
        theirs = self.versions.get(api_key)
        if theirs is not None:
            hi = min(ours[1], theirs[1])
            if hi >= max(ours[0], theirs[0]):
                return hi
        name = API_NAMES.get(api_key, str(api_key))
        raise KafkaProtocolError(
            f"Kafka broker {self.address} speaks {name} versions {theirs or 'none'}, we speak {ours[0]}-{ours[1]}",
            code=codec.ErrorCode.UNSUPPORTED_VERSION,
        )

    # -- SASL
    def _authenticate(self) -> None:
        cfg = self.config
        mech = cfg.sasl_mechanism
        try:
            hs = self.version(sasl.HANDSHAKE_KEY, sasl.HANDSHAKE_VERSIONS)
            auth = self.version(sasl.AUTHENTICATE_KEY, sasl.AUTHENTICATE_VERSIONS)
        except KafkaProtocolError as err:
            raise KafkaAuthenticationError(
                f"Kafka broker {self.address} does not offer SASL on this listener ({err.message})", code=err.code
            ) from err
        code, enabled = sasl.decode_handshake(self.request(sasl.HANDSHAKE_KEY, hs, sasl.encode_handshake(mech)))
        if code:
            raise KafkaAuthenticationError(
                f"Kafka broker {self.address} does not enable SASL mechanism {mech} (it has {', '.join(enabled)})",
                code=code,
            )
        client = sasl.mechanism_for(mech, cfg.sasl_username, cfg.sasl_password)
        challenge: bytes | None = None
        while True:
            payload = client.step(challenge)
            if payload is None:
                return
            reader = self.request(sasl.AUTHENTICATE_KEY, auth, sasl.encode_authenticate(payload))
            code, message, challenge = sasl.decode_authenticate(auth, reader)
            if code:
                raise KafkaAuthenticationError(
                    f"SASL {mech} authentication as {cfg.sasl_username!r} failed on {self.address}: "
                    f"{message or f'error {code}'}",
                    code=code,
                )

    # -- framing
    def _send(self, api_key: int, version: int, body: bytes) -> int:
        self._correlation += 1
        cid = self._correlation
        header = struct.pack(">hhi", api_key, version, cid) + codec.string(self.config.client_id)
        if api_key == api_versions.KEY and version >= api_versions.FLEXIBLE_FROM:
            header += codec.NO_TAGS  # request header v2
        try:
            self._sock.sendall(struct.pack(">i", len(header) + len(body)) + header + body)
        except OSError as err:
            raise UnavailableError(f"Kafka broker {self.address}: {err}") from err
        self._in_flight.append(cid)
        return cid

    def _fill(self) -> None:
        """Read the response in flight until it is whole: its size, then its body, into the buffer it is kept in
        (a Fetch response of 16 MB is not copied again: on a 2-core VM a copy of 16 MB and its page faults took
        7-10 ms of the fetch loop's thread). On a socket that does not wait (`receive_some`), raises
        BlockingIOError (ssl.SSLWantReadError under TLS) when what has come is read; what was read is kept."""
        while self._head_got < 4:
            k = self._sock.recv_into(memoryview(self._head)[self._head_got :])
            if k == 0:
                raise UnavailableError(f"Kafka broker {self.address} closed the connection")
            self._head_got += k
            if self._head_got == 4:
                (size,) = struct.unpack(">i", self._head)
                if not 4 <= size <= MAX_RESPONSE_BYTES:
                    raise MalformedBatchError(f"Kafka broker {self.address} sent a response of {size} bytes")
                self._body = bytearray(size)
        view = memoryview(self._body)
        while self._body_got < len(self._body):
            k = self._sock.recv_into(view[self._body_got :])
            if k == 0:
                raise UnavailableError(f"Kafka broker {self.address} closed the connection")
            self._body_got += k

    def _receive(self) -> Reader:
        assert self._in_flight, "nothing was sent"
        if self._broken is not None:
            raise self._broken
        try:
            self._fill()
        except OSError as err:
            raise UnavailableError(f"Kafka broker {self.address}: {err}") from err
        body = self._body
        self._head_got, self._body, self._body_got = 0, bytearray(), 0
        cid = self._in_flight.popleft()
        reader = Reader(body)
        if reader.i32() != cid:
            raise MalformedBatchError(f"Kafka broker {self.address} answered another request (correlation id)")
        return reader

    @property
    def received(self) -> bool:
        """Whether the response in flight is read whole already (`receive_some`): `receive` returns it at once."""
        return self._head_got == 4 and self._body_got == len(self._body)

    def receive_some(self) -> bool:
        """Read what has come of the response in flight without waiting for more; True once it is whole.
        `receive` returns it (or waits for its rest). So one thread can read a response as it arrives while
        other threads work, instead of after them. An error here is raised again by `receive`."""
        with self._lock:
            if self._broken is not None:
                raise self._broken
            if not self._in_flight:
                return False
            wait = self._sock.gettimeout()
            try:
                self._sock.settimeout(0.0)
                try:
                    self._fill()
                finally:
                    self._sock.settimeout(wait)
            except (BlockingIOError, ssl.SSLWantReadError):
                return False
            except OSError as err:
                self._broken = UnavailableError(f"Kafka broker {self.address}: {err}")
                raise self._broken from err
            except StreamplaneError as err:
                self._broken = err
                raise
            return True

    def send(self, api_key: int, version: int, body: bytes) -> None:
        """Send one request; `receive` reads its response (one request in flight at a time)."""
        with self._lock:
            self._send(api_key, version, body)

    def receive(self) -> Reader:
        with self._lock:
            return self._receive()

    def request(self, api_key: int, version: int, body: bytes) -> Reader:
        """Send one request and return a reader over its response body."""
        with self._lock:
            self._send(api_key, version, body)
            return self._receive()

    # -- the calls
    def metadata(self, topics: list[str] | None = None) -> metadata.Metadata:
        v = self.version(metadata.KEY, metadata.VERSIONS)
        return metadata.decode(v, self.request(metadata.KEY, v, metadata.encode(v, topics)))

    def list_offsets(
        self, topic: str, partitions: list[int], timestamp: int, *, read_committed: bool = False
    ) -> dict[int, int]:
        """{partition: offset} for EARLIEST (-2), LATEST (-1) or a time in ms (-1 when nothing is at or after
        it); the partitions must be led by this broker."""
        (out,) = self.list_offsets_each(topic, [dict.fromkeys(partitions, timestamp)], read_committed=read_committed)
        return out

    def list_offsets_each(
        self, topic: str, asks: list[dict[int, int]], *, read_committed: bool = False
    ) -> list[dict[int, int]]:
        """`list_offsets` for each of `asks` ({partition: timestamp} each; a request may not name a partition
        twice, so a partition's earliest, latest and a time are three asks): the requests are sent back to back
        and their answers read in order, one round trip for all. Every answer is read before a failed one
        raises, so the connection stays usable."""
        v = self.version(list_offsets.KEY, list_offsets.VERSIONS)
        bodies = [list_offsets.encode(v, topic, asked, read_committed=read_committed) for asked in asks]
        with self._lock:
            for body in bodies:
                self._send(list_offsets.KEY, v, body)
            answers = [list_offsets.decode(v, self._receive()) for _ in bodies]
        out: list[dict[int, int]] = []
        for answer in answers:
            for p, (code, _, _) in answer.items():
                if code:
                    raise KafkaProtocolError(
                        f"ListOffsets {topic}/{p} failed on {self.address} with error {code}", code=code
                    )
            out.append({p: offset for p, (_, offset, _) in answer.items()})
        return out

    def produce(self, topic: str, partition: int, batch: bytes, *, timeout_ms: int) -> int:
        """Write one record batch with acks=all to a partition led by this broker; its base offset."""
        v = self.version(produce.KEY, produce.VERSIONS)
        body = produce.encode(v, topic, partition, batch, timeout_ms=timeout_ms)
        code, base = produce.decode(v, self.request(produce.KEY, v, body))
        if code:
            raise KafkaProtocolError(
                f"Produce {topic}/{partition} failed on {self.address} with error {code}", code=code
            )
        return base

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
    ) -> list[fetch.FetchedPartition]:
        """A one-off Fetch (no session) from `offsets` ({partition: offset}) led by this broker."""
        v = self.version(fetch.KEY, fetch.VERSIONS)
        wanted = {(topic, p): fetch.PartitionFetch(o, partition_max_bytes) for p, o in offsets.items()}
        body = fetch.encode(
            v,
            wanted,
            max_wait_ms=max_wait_ms,
            min_bytes=min_bytes,
            max_bytes=max_bytes,
            read_committed=read_committed,
            rack=self.config.rack,
        )
        response = fetch.decode(v, self.request(fetch.KEY, v, body))
        if response.error_code:
            raise KafkaProtocolError(
                f"Fetch failed on {self.address} with error {response.error_code}", code=response.error_code
            )
        return response.partitions
