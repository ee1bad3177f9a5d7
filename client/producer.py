"""The producer: applications write to a stream's lane; the producer finds the lane's active generation and
writes there with librdkafka, switching generation when the coordinator fails the lane over.

    producer = Producer("127.0.0.1:7400", **{"linger.ms": 20})
    producer.produce("logs", b'{"msg": "hello"}', key=b"host-1")
    producer.flush()

Routes come from DescribeStream and are kept current by a WatchTopology stream in the background, so a
failover moves new records to the new generation within moments. Records already handed to librdkafka for
the old generation are still delivered there; one that fails there is sent again to the new generation, so
no record is lost, and `on_delivery` reports success only once a record is acknowledged somewhere.

The producer holds a session with the coordinator: it reports the topology version it routes by and the
generations it still has records in flight to. That lets the coordinator seal a draining generation (fix
its end offsets) once no producer can write to it again.

librdkafka's settings pass through under their names; zstd is the default compression, and `batch.size`
(which librdkafka counts before compression) is capped so no batch inflates past what consumers accept.
Delivery callbacks run on the producer's background thread (or in `poll()`/`flush()`).
"""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import structlog
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka import Producer as KafkaProducer

from streamplane.client.coordinator import CoordinatorClient
from streamplane.errors import InvalidArgumentError, NotFoundError, StreamplaneError
from streamplane.native import DEFAULT_MAX_DECOMPRESSED
from streamplane.v1 import topology_pb2 as pb

log = structlog.get_logger(__name__)

INGEST_HEADER = "sp-ingest-ms"
"""Header with the ingestion time in milliseconds (also the record's CreateTime)."""

GenerationKey = tuple[str, str, int]  # (stream, lane, generation)


@dataclass(frozen=True)
class Route:
    """Where a lane's records go now."""

    stream: str
    lane: str
    generation: int
    cluster: str
    bootstrap_servers: str
    topic: str
    partitions: int

    @property
    def key(self) -> GenerationKey:
        return (self.stream, self.lane, self.generation)


def check_kafka_config(config: dict[str, Any]) -> None:
    """Raise InvalidArgumentError (a ValueError) naming the librdkafka setting that is unknown or malformed."""
    try:
        KafkaProducer({**config, "log_level": 3})  # no bootstrap servers: validates without connecting anywhere
    except KafkaException as err:
        raise InvalidArgumentError(f"invalid Kafka setting: {err.args[0].str()}") from err


class Producer:
    """Writes records to streams.

    Args:
        coordinator: host:port of a coordinator replica (default STREAMPLANE_COORDINATOR or 127.0.0.1:7400).
        max_batch_decompressed: the largest batch, before compression, librdkafka may build; keep it at or
            under the consumers' max_decompressed.
        producer_id: names this producer's session (default host-pid-random).
        **kafka_config: librdkafka settings under their own names (bootstrap.servers comes from the routes).

    Raises UnavailableError if the coordinator cannot be reached, InvalidArgumentError (a ValueError) for a
    bad setting.
    """

    def __init__(
        self,
        coordinator: str | None = None,
        *,
        max_batch_decompressed: int = 1_000_000,
        producer_id: str | None = None,
        **kafka_config: Any,
    ) -> None:
        if not 1024 <= max_batch_decompressed <= DEFAULT_MAX_DECOMPRESSED:
            raise InvalidArgumentError(
                f"max_batch_decompressed must be between 1024 and "
                f"{DEFAULT_MAX_DECOMPRESSED}, not {max_batch_decompressed}"
            )
        if "bootstrap.servers" in kafka_config:
            raise InvalidArgumentError("bootstrap.servers comes from the stream's routes; do not set it")
        self._config = {
            "compression.type": "zstd",
            "linger.ms": 10,
            "enable.idempotence": True,
            **kafka_config,
            "batch.size": min(int(kafka_config.get("batch.size", max_batch_decompressed)), max_batch_decompressed),
        }
        check_kafka_config(self._config)
        self.producer_id = producer_id or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self._client = CoordinatorClient(coordinator)
        self._lock = threading.Lock()
        self._routes: dict[tuple[str, str], Route] = {}
        self._topics: dict[str, GenerationKey] = {}
        self._producers: dict[str, KafkaProducer] = {}
        self._in_flight: Counter[GenerationKey] = Counter()
        self._resend: list[tuple[Any, GenerationKey]] = []
        self._version = ""  # the event version the routes are current as of
        self._resolving = 0
        self._closed = threading.Event()
        self._beat_now = threading.Event()
        self._heartbeat_s = 1.0
        self._heartbeat()  # opens the session; an unreachable coordinator fails here
        self._watcher = threading.Thread(target=self._watch, name="producer-routes", daemon=True)
        self._watch_started = False
        threading.Thread(target=self._heartbeats, name="producer-session", daemon=True).start()
        self._poller = threading.Thread(target=self._poll_loop, name="producer-poll", daemon=True)
        self._poller.start()

    # -- the session
    def _heartbeat(self) -> None:
        with self._lock:
            version = self._version
            in_flight = [g for g, n in self._in_flight.items() if n > 0]
        answer = self._client.producer_heartbeat(self.producer_id, version, in_flight)
        self._heartbeat_s = max(0.05, answer.heartbeat_interval_ms / 1000)
        with self._lock:
            if not self._routes and not self._resolving and answer.topology_version > self._version:
                self._version = answer.topology_version  # nothing routed yet: any later route is newer

    def _heartbeats(self) -> None:
        delay = 0.1
        while not self._closed.is_set():
            self._beat_now.wait(self._heartbeat_s)
            self._beat_now.clear()
            if self._closed.is_set():
                return
            try:
                self._heartbeat()
                delay = 0.1
            except StreamplaneError as err:
                log.warning("producer.heartbeat_failed", error=err.message, retry_in_s=delay)
                self._closed.wait(delay)
                delay = min(5.0, delay * 2)

    # -- routes
    def route(self, stream: str, lane: str = "realtime") -> Route:
        """The lane's current route (looked up once, then kept current by the watch)."""
        with self._lock:
            found = self._routes.get((stream, lane))
            if found is not None:
                return found
            self._resolving += 1
        try:
            described, version = self._client.describe_stream_versioned(stream)
            gen = next((x.generations[-1] for x in described.lanes if x.name == lane), None)
            if gen is None:
                raise NotFoundError(f"lane {lane!r} does not exist in stream {stream!r}")
            self._set_route(stream, lane, gen)
            with self._lock:
                if not self._watch_started:
                    self._watch_started = True
                    self._version = version
                    self._watcher.start()
                return self._routes[(stream, lane)]
        finally:
            with self._lock:
                self._resolving -= 1

    def _set_route(self, stream: str, lane: str, gen: pb.Generation) -> None:
        cluster = next((c for c in self._client.list_clusters() if c.name == gen.cluster), None)
        if cluster is None:
            raise NotFoundError(f"cluster {gen.cluster!r} of {stream}/{lane} g{gen.number} is not registered")
        new = Route(stream, lane, gen.number, gen.cluster, cluster.bootstrap_servers, gen.topic, gen.partitions)
        with self._lock:
            old = self._routes.get((stream, lane))
            if old is None or new.generation >= old.generation:
                self._routes[(stream, lane)] = new
                self._topics[new.topic] = new.key
        if old is not None and old.generation != new.generation:
            log.info("producer.switched", stream=stream, lane=lane, previous=old.generation, current=new.generation)

    def _watch(self) -> None:
        """Follow the event log: a failover of a lane we write moves it to the new generation."""
        delay = 0.1
        while not self._closed.is_set():
            try:
                for event in self._client.watch_topology(self._version):
                    if event.WhichOneof("kind") == "failed_over":
                        f = event.failed_over
                        if (f.stream, f.lane) in self._routes:
                            self._set_route(f.stream, f.lane, f.current)
                            self._beat_now.set()
                    with self._lock:
                        self._version = event.version
                    if self._closed.is_set():
                        return
                    delay = 0.1
            except StreamplaneError as err:
                if self._closed.is_set():
                    return
                log.warning("producer.watch_failed", error=err.message, retry_in_s=delay)
                self._closed.wait(delay)
                delay = min(5.0, delay * 2)

    def _producer_for(self, route: Route) -> KafkaProducer:
        with self._lock:
            producer = self._producers.get(route.bootstrap_servers)
            if producer is None:
                producer = KafkaProducer({**self._config, "bootstrap.servers": route.bootstrap_servers})
                self._producers[route.bootstrap_servers] = producer
            return producer

    # -- writing
    def produce(
        self,
        stream: str,
        value: bytes | None,
        key: bytes | None = None,
        lane: str = "realtime",
        headers: dict[str, bytes] | list[tuple[str, bytes]] | None = None,
        on_delivery: Callable[[Any, Any], None] | None = None,
    ) -> Route:
        """Hand one record to librdkafka for the lane's active generation; return the route it took.

        Delivery is asynchronous: `on_delivery(err, msg)` is called once the record is acknowledged (err is
        None) or has finally failed.
        """
        if self._closed.is_set():
            raise StreamplaneError("the producer is closed")
        with self._lock:
            route = self._routes.get((stream, lane))
            if route is not None:
                self._in_flight[route.key] += 1  # under the lock that switches routes: see _heartbeat
        if route is None:
            self.route(stream, lane)
            return self.produce(stream, value, key, lane, headers, on_delivery)
        now_ms = int(time.time() * 1000)
        all_headers = [
            *(headers.items() if isinstance(headers, dict) else headers or []),
            (INGEST_HEADER, str(now_ms).encode()),
        ]
        callback = self._delivered if on_delivery is None else _WithCallback(self, on_delivery)
        try:
            self._send(route, value, key, all_headers, now_ms, callback)
        except BaseException:
            self._done(route.key)
            raise
        return route

    def _send(self, route: Route, value: Any, key: Any, headers: Any, ts: int, callback: Any) -> None:
        producer = self._producer_for(route)
        while True:
            try:
                producer.produce(route.topic, value=value, key=key, headers=headers, timestamp=ts, on_delivery=callback)
                return
            except BufferError:  # librdkafka's queue is full: let deliveries drain
                producer.poll(0.05)

    def _done(self, gen: GenerationKey) -> None:
        with self._lock:
            self._in_flight[gen] -= 1
            if self._in_flight[gen] > 0:
                return
            del self._in_flight[gen]
            current = self._routes.get(gen[:2])
            left_behind = current is not None and current.generation != gen[2]
        if left_behind:
            self._beat_now.set()  # the last record of an old generation landed: tell the coordinator now

    def _delivered(self, err: Any, msg: Any, callback: Any = None) -> bool:
        """Account for one delivery report; True when it is final (not sent again to a new generation)."""
        gen = self._topics.get(msg.topic())
        final = True
        if err is not None and gen is not None and err.code() != KafkaError._PURGE_QUEUE:
            with self._lock:
                current = self._routes.get(gen[:2])
                if current is not None and current.generation != gen[2]:
                    self._in_flight[current.key] += 1
                    self._resend.append((msg, current, callback or self._delivered))
                    final = False
        if gen is not None:
            self._done(gen)
        return final

    def _poll_loop(self) -> None:
        """Serve delivery reports and resend records that failed on a generation the lane has left."""
        while not self._closed.is_set():
            with self._lock:
                producers = list(self._producers.values())
                resend, self._resend = self._resend, []
            for msg, route, callback in resend:
                log.info("producer.resend", topic=msg.topic(), to=route.topic)
                self._send(route, msg.value(), msg.key(), msg.headers(), msg.timestamp()[1], callback)
            if not producers:
                self._closed.wait(0.05)
            for p in producers:
                p.poll(0.05 / len(producers))

    def poll(self, timeout_s: float = 0) -> int:
        """Serve delivery callbacks; the number served."""
        with self._lock:
            producers = list(self._producers.values())
        return sum(p.poll(timeout_s) for p in producers)

    def flush(self, timeout_s: float = 30) -> int:
        """Wait for every handed-over record to be acknowledged; the number still outstanding."""
        deadline = time.monotonic() + timeout_s
        while True:
            with self._lock:
                producers = list(self._producers.values())
                left = sum(self._in_flight.values())
            left = max(left, sum(p.flush(max(0.0, min(0.1, deadline - time.monotonic()))) for p in producers))
            if left == 0 or time.monotonic() >= deadline:
                return left

    def close(self, timeout_s: float = 30) -> int:
        """Flush, end the session, stop following the topology; the number of records not acknowledged."""
        left = self.flush(timeout_s)
        self._closed.set()
        self._beat_now.set()
        self._poller.join(timeout=5)
        try:
            self._client.close_producer(self.producer_id)
        except StreamplaneError as err:  # the session then expires by its TTL
            log.warning("producer.close_failed", error=err.message)
        self._client.close()
        return left

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _WithCallback:
    """Delivery report handler for a record with the application's own `on_delivery`."""

    __slots__ = ("_on_delivery", "_producer")

    def __init__(self, producer: Producer, on_delivery: Callable[[Any, Any], None]) -> None:
        self._producer = producer
        self._on_delivery = on_delivery

    def __call__(self, err: Any, msg: Any) -> None:
        if self._producer._delivered(err, msg, self):
            self._on_delivery(err, msg)
