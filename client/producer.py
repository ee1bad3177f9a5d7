"""The producer: applications write to a stream's lane; the producer finds the lane's active generation and
writes there with librdkafka, switching generation when the coordinator fails the lane over.

    producer = Producer("127.0.0.1:7400", **{"linger.ms": 20})
    producer.produce("logs", b'{"msg": "hello"}', key=b"host-1")
    producer.flush()

Routes come from DescribeStream and are kept current by a WatchTopology stream in the background, so a
failover moves new records to the new generation within moments; records already handed to librdkafka for
the old generation are still delivered there (consumers read it to its end). librdkafka's own settings pass
through under their names; zstd is the default compression, and `batch.size` (which librdkafka counts
before compression) is capped so no batch inflates past what consumers accept.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import structlog
from confluent_kafka import Producer as KafkaProducer

from streamplane.client.coordinator import CoordinatorClient
from streamplane.errors import InvalidArgumentError, NotFoundError, StreamplaneError
from streamplane.native import DEFAULT_MAX_DECOMPRESSED
from streamplane.v1 import topology_pb2 as pb

log = structlog.get_logger(__name__)

INGEST_HEADER = "sp-ingest-ms"
"""Header with the ingestion time in milliseconds (also the record's CreateTime)."""


@dataclass(frozen=True)
class Route:
    """Where a lane's records go now."""

    generation: int
    cluster: str
    bootstrap_servers: str
    topic: str
    partitions: int


class Producer:
    """Writes records to streams.

    Args:
        coordinator: host:port of a coordinator replica.
        max_batch_decompressed: the largest batch, before compression, librdkafka may build; keep it at or
            under the consumers' max_decompressed.
        **kafka_config: librdkafka settings under their own names (bootstrap.servers comes from the routes).
    """

    def __init__(
        self, coordinator: str | None = None, *, max_batch_decompressed: int = 1_000_000, **kafka_config: Any
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
        self._client = CoordinatorClient(coordinator)
        self._routes: dict[tuple[str, str], Route] = {}
        self._producers: dict[str, KafkaProducer] = {}
        self._lock = threading.Lock()
        self._version = ""
        self._closed = threading.Event()
        self._watcher = threading.Thread(target=self._watch, name="producer-routes", daemon=True)
        self._watch_started = False

    # -- routes
    def route(self, stream: str, lane: str = "realtime") -> Route:
        """The lane's current route (looked up once, then kept current by the watch)."""
        with self._lock:
            found = self._routes.get((stream, lane))
        if found is not None:
            return found
        described = self._client.describe_stream(stream)
        for pb_lane in described.lanes:
            if pb_lane.name == lane:
                self._set_route(stream, lane, pb_lane.generations[-1])
                break
        else:
            raise NotFoundError(f"lane {lane!r} does not exist in stream {stream!r}")
        with self._lock:
            if not self._watch_started:
                self._watch_started = True
                self._watcher.start()
            return self._routes[(stream, lane)]

    def _set_route(self, stream: str, lane: str, gen: pb.Generation) -> None:
        cluster = next((c for c in self._client.list_clusters() if c.name == gen.cluster), None)
        if cluster is None:
            raise NotFoundError(f"cluster {gen.cluster!r} of {stream}/{lane} g{gen.number} is not registered")
        new = Route(gen.number, gen.cluster, cluster.bootstrap_servers, gen.topic, gen.partitions)
        with self._lock:
            old = self._routes.get((stream, lane))
            if old is None or new.generation >= old.generation:
                self._routes[(stream, lane)] = new
        if old is not None and old.generation != new.generation:
            log.info("producer.switched", stream=stream, lane=lane, previous=old.generation, current=new.generation)

    def _watch(self) -> None:
        """Follow the event log: a failover of a lane we write moves it to the new generation."""
        delay = 0.1
        while not self._closed.is_set():
            try:
                for event in self._client.watch_topology(self._version):
                    self._version = event.version
                    if event.WhichOneof("kind") == "failed_over":
                        f = event.failed_over
                        if (f.stream, f.lane) in self._routes:
                            self._set_route(f.stream, f.lane, f.current)
                    if self._closed.is_set():
                        return
                    delay = 0.1
            except StreamplaneError as err:
                if self._closed.is_set():
                    return
                log.warning("producer.watch_failed", error=err.message, retry_in_s=delay)
                time.sleep(delay)
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

        Delivery is asynchronous: `on_delivery(err, msg)` is called from `poll()`/`flush()`.
        """
        if self._closed.is_set():
            raise StreamplaneError("the producer is closed")
        route = self.route(stream, lane)
        now_ms = int(time.time() * 1000)
        all_headers = [
            *(headers.items() if isinstance(headers, dict) else headers or []),
            (INGEST_HEADER, str(now_ms).encode()),
        ]
        producer = self._producer_for(route)
        while True:
            try:
                producer.produce(
                    route.topic, value=value, key=key, headers=all_headers, timestamp=now_ms, on_delivery=on_delivery
                )
                return route
            except BufferError:  # librdkafka's queue is full: let deliveries drain
                producer.poll(0.05)

    def poll(self, timeout_s: float = 0) -> int:
        """Serve delivery callbacks; the number served."""
        with self._lock:
            producers = list(self._producers.values())
        return sum(p.poll(timeout_s) for p in producers)

    def flush(self, timeout_s: float = 30) -> int:
        """Wait for every handed-over record to be acknowledged; the number still outstanding."""
        with self._lock:
            producers = list(self._producers.values())
        return sum(p.flush(timeout_s) for p in producers)

    def close(self, timeout_s: float = 30) -> int:
        """Flush, stop following the topology; the number of records not acknowledged."""
        left = self.flush(timeout_s)
        self._closed.set()
        self._client.close()
        return left

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
