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
its end offsets) once no producer can write to it again. A session no replica has heard from for its TTL
no longer holds a seal back, so the producer fences itself first: once half the TTL has passed since the
start of its last heartbeat that was answered, it stops writing (a failover it has not heard of may have
sealed the generation it routes to). `produce()` still returns at once: records are held, in order, up to
MAX_HELD_BYTES (then it waits). When a heartbeat is answered again the producer looks its routes up afresh
and writes the held records first. A record is never written past a seal that did not wait for it.

librdkafka's settings pass through under their names; zstd is the default compression, and `batch.size`
(which librdkafka counts before compression) is capped so no batch inflates past what consumers accept.
Delivery callbacks run on the producer's background thread, in `poll()`/`flush()`, or in `produce()` while
librdkafka's queue is full (never under the producer's lock: a callback may produce).
"""

from __future__ import annotations

import collections
import functools
import os
import socket
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import structlog
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka import Producer as KafkaProducer

from streamplane.client import metrics
from streamplane.client.background import start_thread
from streamplane.client.coordinator import CoordinatorClient
from streamplane.client.credentials import ClientTls, TokenSource
from streamplane.client.lanes import Lane, Lanes
from streamplane.clock import SYSTEM, Clock
from streamplane.errors import InvalidArgumentError, NotFoundError, StreamplaneError
from streamplane.model import (
    Cluster,
    ClusterErrors,
    ClusterHealth,
    ClusterHealthChanged,
    FailedOver,
    Generation,
    StreamDeleted,
)
from streamplane.native import DEFAULT_MAX_DECOMPRESSED

log = structlog.get_logger(__name__)


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
        metrics_port: serve Prometheus metrics (records out, by stream and lane) on this port; off by default.
        token, tls: the coordinator credential and TLS (default: found as `streamplane.client.credentials` says).
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
        metrics_port: int | None = None,
        token: TokenSource = None,
        tls: ClientTls | None = None,
        clock: Clock = SYSTEM,
        **kafka_config: Any,
    ) -> None:
        self.clock = clock
        """Its time: heartbeats' pace, flush deadlines, switch durations (a ManualClock in tests)."""
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
        if metrics_port is not None and not 0 < metrics_port < 65536:
            raise InvalidArgumentError(f"metrics_port must be between 1 and 65535, not {metrics_port}")
        self.producer_id = producer_id or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self._client = CoordinatorClient(coordinator, token=token, tls=tls)
        self._lock = threading.Lock()
        self._routes: dict[tuple[str, str], Route] = {}
        self._senders: dict[GenerationKey, _Sender] = {}
        self._spares: dict[str, _Spare] = {}
        """{bootstrap servers: a warm librdkafka producer} for clusters a failover may move a lane to (see
        `_warm`): a fresh idempotent producer waits about 500 ms for its producer id; a warm one has it."""
        self._active: dict[tuple[str, str], _Sender] = {}  # the sender of each lane's current route
        self._lanes = Lanes(self._produce, self._lock)  # the fast path to each one's quiet librdkafka producer
        self._resend: list[tuple[Any, Route, Any]] = []
        self._held: collections.deque[_Held] = collections.deque()
        """Records produced while fenced (or while earlier held ones are still being written), oldest first."""
        self._held_bytes = 0
        self.failed = 0
        """Records whose delivery finally failed (each also logged, and reported to its on_delivery)."""
        self.last_failure = ""
        """Why the last of them failed, as librdkafka said."""
        self._version = ""  # the event version the routes are current as of
        self._resolving = 0
        self._errors: dict[str, tuple[int, str]] = {}
        """{cluster: (errors, the last one)} librdkafka reported since the last heartbeat."""
        self._closed = threading.Event()
        self._fatal: StreamplaneError | None = None
        """Why the producer ended on its own (a credential refused for good, a thread's bug): records raise it."""
        self._beat_now = threading.Event()
        self._heartbeat_s = 1.0
        self._heartbeat_timeout_s = 5.0
        self._confirmed_until = float("-inf")
        """Until when (monotonic) the session is surely live: the start of the last answered heartbeat plus
        FENCE_AT of its TTL. Past it the producer is fenced: records wait (see `_fence`)."""
        self._fenced = False
        self._unfenced = threading.Event()
        self._heartbeat()  # opens the session; an unreachable coordinator or a refused credential fails here
        self._watch_started = False
        self._beater = start_thread("producer-session", self._heartbeats, self._end)
        self._poller = start_thread("producer-poll", self._poll_loop, self._end)
        if metrics_port:
            metrics.serve(metrics_port)

    # -- the session
    def _heartbeat(self) -> None:
        started = self.clock.monotonic()
        with self._lock:
            version = self._version
            in_flight = self._in_flight_generations()
            errors, self._errors = self._errors, {}
            writes = sorted(self._routes)
            lapsed = started >= self._confirmed_until
        reports = [ClusterErrors(cluster, count, last) for cluster, (count, last) in sorted(errors.items())]
        try:
            answer = self._client.producer_heartbeat(
                self.producer_id, version, in_flight, reports, writes, timeout_s=self._heartbeat_timeout_s
            )
            if lapsed and writes and answer.topology_version > self._version:
                self._refresh_routes(writes)  # a seal may have passed us by: route by what is current
        except StreamplaneError:
            with self._lock:  # told with the next heartbeat
                for cluster, (count, last) in errors.items():
                    seen = self._errors.get(cluster, (0, ""))
                    self._errors[cluster] = (seen[0] + count, seen[1] or last)
            raise
        self._heartbeat_s = max(0.05, answer.heartbeat_interval_ms / 1000)
        ttl_s = answer.ttl_ms / 1000 if answer.ttl_ms > 0 else DEFAULT_TTL_S
        self._heartbeat_timeout_s = max(0.2, ttl_s * FENCE_AT / 2)
        with self._lock:
            if not self._routes and not self._resolving and answer.topology_version > self._version:
                self._version = answer.topology_version  # nothing routed yet: any later route is newer
            self._confirmed_until = max(self._confirmed_until, started + ttl_s * FENCE_AT)
            unfenced = self._fenced and self.clock.monotonic() < self._confirmed_until
            if unfenced:
                self._fenced = False
                self._unfenced.set()
        if unfenced:
            log.info("producer.unfenced", producer=self.producer_id)

    def _refresh_routes(self, lanes: list[tuple[str, str]]) -> None:
        """Look every routed lane up again (after a lapse of the session, when events may have been missed);
        the version reported from then on is the oldest these lookups reflect."""
        versions = []
        for stream in sorted({s for s, _ in lanes}):
            try:
                described = self._client.describe_stream_versioned(stream)
            except NotFoundError:
                self._forget(stream)
                continue
            versions.append(described.version)
            for s, lane in lanes:
                if s == stream and (found := described.stream.lane(lane)) is not None:
                    self._set_route(stream, lane, found.active)
        with self._lock:
            if versions and min(versions) > self._version:
                self._version = min(versions)
        log.info("producer.routes_refreshed", producer=self.producer_id, streams=len(versions))

    def _fence(self) -> None:
        """From the poll loop: past `_confirmed_until`, stop writing (every record takes the general path,
        which waits) and ask for a heartbeat now."""
        with self._lock:
            if self._fenced or self.clock.monotonic() < self._confirmed_until:
                return
            self._fenced = True
            self._unfenced.clear()
            self._lanes.clear()
        metrics.PRODUCER_FENCED.inc()
        log.warning(
            "producer.fenced",
            producer=self.producer_id,
            why="no coordinator replica answered a heartbeat for half the session's TTL; records wait",
        )
        self._beat_now.set()

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
                if self._client.credentials.refused(err):
                    self._end(err)
                    return
                log.warning("producer.heartbeat_failed", error=err.message, retry_in_s=delay)
                self._closed.wait(delay)
                delay = min(5.0, delay * 2)

    def _end(self, error: StreamplaneError) -> None:
        """End the producer for an error no retry heals: every record from now on raises it (those already
        handed to librdkafka are still delivered), and it is logged as an error, never silently."""
        if self._fatal is None:
            self._fatal = error
            metrics.ENDED.labels(type(error).__name__).inc()
            log.error("producer.ended", producer=self.producer_id, error=error.message)
        with self._lock:
            self._lanes.clear()  # every record now takes the general path, which raises the error

    # -- routes
    def route(self, stream: str, lane: str = "realtime") -> Route:
        """The lane's current route (looked up once, then kept current by the watch)."""
        with self._lock:
            found = self._routes.get((stream, lane))
            if found is not None:
                return found
            self._resolving += 1
        try:
            described = self._client.describe_stream_versioned(stream)
            version = described.version
            self._set_route(stream, lane, described.stream.require_lane(lane).active)
            try:
                self._heartbeat()  # the coordinator learns of the lane now: a token that may not write it says so
            except StreamplaneError as err:
                if self._client.credentials.refused(err):
                    with self._lock:
                        self._routes.pop((stream, lane), None)
                    raise
            with self._lock:
                if not self._watch_started:
                    self._watch_started = True
                    self._version = version
                    self._watcher = start_thread("producer-routes", self._watch, self._end)
                return self._routes[(stream, lane)]
        finally:
            with self._lock:
                self._resolving -= 1

    def prepare(self, stream: str, lane: str = "realtime", timeout_s: float = 5.0) -> Route:
        """Route the lane and connect its producer now, so that its first records do not wait: a new
        idempotent librdkafka producer that has not yet reached a broker holds its first records about half
        a second for its producer id. Asking the cluster for the topic's metadata connects it. A cluster that
        does not answer within `timeout_s` is left to the first record (logged)."""
        route = self.route(stream, lane)
        with self._lock:
            sender = self._current_sender(stream, lane)
        if sender is not None:
            try:
                sender.quiet.list_topics(route.topic, timeout=timeout_s)
            except KafkaException as err:
                log.info("producer.prepare_failed", stream=stream, lane=lane, error=str(err))
        return route

    def _set_route(self, stream: str, lane: str, gen: Generation) -> None:
        try:
            cluster, _ = self._client.cluster_health(gen.cluster)  # one cluster, not the fleet's list
        except NotFoundError as err:
            raise NotFoundError(
                f"cluster {gen.cluster!r} of {stream}/{lane} g{gen.number} is not registered",
                kind="cluster",
                name=gen.cluster,
            ) from err
        new = Route(stream, lane, gen.number, gen.cluster, cluster.bootstrap_servers, gen.topic, gen.partitions)
        with self._lock:
            old = self._routes.get((stream, lane))
            if old is None or new.generation >= old.generation:
                self._routes[(stream, lane)] = new
                self._active.pop((stream, lane), None)
                self._lanes.drop(stream, lane)
        if old is not None and old.generation != new.generation:
            log.info("producer.switched", stream=stream, lane=lane, previous=old.generation, current=new.generation)

    def _watch(self) -> None:
        """Follow the event log: a failover of a lane we write moves it to the new generation."""
        delay = 0.1
        while not self._closed.is_set():
            try:
                for event in self._client.watch_topology(self._version):
                    if isinstance(event, ClusterHealthChanged) and event.cluster.health != ClusterHealth.HEALTHY:
                        self._warm(event.cluster.name)
                    if isinstance(event, StreamDeleted):
                        self._forget(event.stream)
                    if isinstance(event, FailedOver) and (event.stream, event.lane) in self._routes:
                        self._set_route(event.stream, event.lane, event.current)
                        self._beat_now.set()
                        switched_s = max(0.0, self.clock.now_ms() / 1000 - event.time_ms / 1000)
                        metrics.PRODUCER_SWITCH.labels(event.stream, event.lane).observe(switched_s)
                    with self._lock:
                        self._version = max(self._version, event.version)
                    if self._closed.is_set():
                        return
                    delay = 0.1
            except StreamplaneError as err:
                if self._closed.is_set():
                    return
                log.warning("producer.watch_failed", error=err.message, retry_in_s=delay)
                self._closed.wait(delay)
                delay = min(5.0, delay * 2)

    def _forget(self, stream: str) -> None:
        """A deleted stream: its routes go, so the next record for it asks the coordinator (and is refused,
        NOT_FOUND, unless the stream was created again)."""
        with self._lock:
            for key in [k for k in self._routes if k[0] == stream]:
                del self._routes[key]
                self._active.pop(key, None)
                self._lanes.drop(*key)
        log.info("producer.stream_deleted", stream=stream)

    def _warm(self, sick: str) -> None:
        """A cluster we write to is no longer healthy: a failover may follow. Start a spare producer toward
        each healthy, uncordoned cluster we do not write to (at most MAX_SPARES), so that the lane's first
        records after the switch do not wait for a new producer id."""
        with self._lock:
            if not any(r.cluster == sick for r in self._routes.values()):
                return
            writing = {r.bootstrap_servers for r in self._routes.values()} | set(self._spares)
            room = MAX_SPARES - len(self._spares)
        fit: list[Cluster] = []
        try:
            for page in self._client.cluster_pages(health=ClusterHealth.HEALTHY):  # pages until there are enough
                fit += [
                    c for c in page.clusters if c.name != sick and not c.cordoned and c.bootstrap_servers not in writing
                ]
                if len(fit) >= room:
                    break
        except StreamplaneError as err:
            log.info("producer.warm_failed", error=err.message)
            return
        for c in fit[: max(0, room)]:
            spare = _Spare(self, c.name, c.bootstrap_servers)  # outside the lock: it takes a few ms
            with self._lock:
                if self._closed.is_set() or len(self._spares) >= MAX_SPARES:
                    return
                self._spares.setdefault(c.bootstrap_servers, spare)
            log.info("producer.warmed", cluster=c.name, because=f"{sick} is not healthy")

    def _current_sender(self, stream: str, lane: str) -> _Sender | None:
        """The sender of the lane's current route, not put on the fast path (call with the lock held)."""
        route = self._routes.get((stream, lane))
        return self._sender(route) if route is not None else None

    def _sender(self, route: Route) -> _Sender:
        """The librdkafka producers of a route (call with the lock held)."""
        sender = self._senders.get(route.key)
        if sender is None:
            sender = self._senders[route.key] = _Sender(self, route)
        return sender

    # -- writing
    def produce(
        self,
        stream: str,
        value: bytes | None,
        key: bytes | None = None,
        lane: str = "realtime",
        headers: dict[str, bytes | None] | list[tuple[str, bytes | None]] | None = None,
        on_delivery: Callable[[Any, Any], None] | None = None,
    ) -> Route:
        """Hand one record to librdkafka for the lane's active generation; return the route it took.

        Delivery is asynchronous: `on_delivery(err, msg)` is called once the record is acknowledged (err is
        None) or has finally failed. Records with and without `on_delivery` go through separate librdkafka
        instances, so their relative order is not kept (order among records of one kind is). While the
        producer is fenced (no coordinator replica answers) a record is held and the route returned is the
        one known then; it is written, in order, to the lane's route once a heartbeat is answered.
        """
        route: Route = self._lanes(stream, value, key, lane, headers, on_delivery)
        return route

    def _produce(
        self,
        stream: str,
        value: bytes | None,
        key: bytes | None,
        lane: str,
        headers: dict[str, bytes | None] | list[tuple[str, bytes | None]] | None,
        on_delivery: Callable[[Any, Any], None] | None,
    ) -> Route:
        """What the fast path (`_lanes`) leaves: a lane not routed yet, headers, on_delivery, a full queue."""
        if self._fatal is not None:
            raise self._fatal
        if self._closed.is_set():
            raise StreamplaneError("the producer is closed")
        if isinstance(headers, dict):
            headers = list(headers.items())
        held = self._hold(stream, lane, value, key, headers, on_delivery)
        if held is not None:
            return held

        def active() -> _Sender | None:  # called under the lock
            sender = self._active.get((stream, lane))
            if sender is None and (route := self._routes.get((stream, lane))) is not None:
                sender = self._active[(stream, lane)] = self._sender(route)
                self._lanes.set(stream, lane, sender.lane)
            return sender

        sender = self._send(active, value, key, headers, 0, on_delivery)
        if sender is None:
            self.route(stream, lane)
            return self._produce(stream, value, key, lane, headers, on_delivery)
        with self._lock:
            sender.slow_produced += 1
        return sender.route

    def _hold(
        self,
        stream: str,
        lane: str,
        value: bytes | None,
        key: bytes | None,
        headers: list[tuple[str, bytes | None]] | None,
        on_delivery: Callable[[Any, Any], None] | None,
    ) -> Route | None:
        """While fenced, or while records held then are still being written (order is kept), a record of a
        routed lane joins the held ones and its lane's route as known now is returned; up to MAX_HELD_BYTES,
        past which it waits for room. None when it is not held: the caller writes it (or, for a lane not routed
        yet while fenced, waits in `_send`)."""
        if not (self._fenced or self._held):  # the usual case, without the lock (looked at again under it)
            return None
        size = len(value or b"") + len(key or b"") + sum(len(k) + len(v or b"") for k, v in headers or [])
        while True:
            with self._lock:
                route = self._routes.get((stream, lane))
                if route is None or not (self._fenced or self._held):
                    return None
                room = not self._held or self._held_bytes + size <= MAX_HELD_BYTES
                if room or threading.current_thread() is self._poller:  # (a delivery callback never waits on
                    # the thread that writes the held records: that would wait for itself)
                    self._held.append(_Held(stream, lane, value, key, headers, self.clock.now_ms(), on_delivery, size))
                    self._held_bytes += size
                    return route
            if self._closed.is_set():
                raise StreamplaneError("the producer is closed")
            if self._fatal is not None:
                raise self._fatal
            self._beat_now.set()
            self._closed.wait(0.01)  # full: the poll loop writes held records once a heartbeat is answered

    def _write_held(self) -> None:
        """From the poll loop, while not fenced: the held records, oldest first, to their lanes' current routes
        (never through the fast path while any is held, so later records cannot pass them). A record whose
        lane is gone (its stream deleted) fails, reported as any failed delivery."""
        while True:
            with self._lock:
                if self._fenced or not self._held:
                    return
                h = self._held[0]
            current = functools.partial(self._current_sender, h.stream, h.lane)
            sender = self._send(current, h.value, h.key, h.headers, h.ts, h.on_delivery, wait_if_fenced=False)
            with self._lock:
                if sender is None and self._fenced:
                    return  # fenced again meanwhile: still held, in order
                self._held.popleft()
                self._held_bytes -= h.size
                if sender is not None:
                    sender.slow_produced += 1
                else:
                    self.failed += 1
                    self.last_failure = f"lane {h.lane} of {h.stream} is gone"
            if sender is None:
                log.error("producer.delivery_failed", stream=h.stream, lane=h.lane, error="the lane is gone")

    def _send(
        self,
        pick: Callable[[], _Sender | None],
        value: bytes | None,
        key: bytes | None,
        headers: list[tuple[str, bytes | None]] | None,
        ts: int,
        on_delivery: Callable[[Any, Any], None] | None,
        *,
        wait_if_fenced: bool = True,
    ) -> _Sender | None:
        """Hand a record to the sender `pick()` names; that sender, or None when it names none (or, without
        `wait_if_fenced`, when the producer is fenced).

        Under the lock that switches routes and snapshots what is in flight (see _heartbeat): a record is
        either counted in flight to its generation or routed to the new one, never neither. While librdkafka's
        queue is full it waits outside the lock: delivery reports are served meanwhile, and their callbacks
        take the lock and run the application's code, which may produce."""
        while True:
            with self._lock:
                fenced = self._fenced
                sender = None if fenced else pick()
                if sender is None and (not fenced or not wait_if_fenced):
                    return None
                if sender is not None:
                    try:
                        sender.send(value, key, headers, ts, on_delivery)
                        return sender
                    except BufferError:
                        pass
            if self._closed.is_set():
                raise StreamplaneError("the producer is closed")
            if self._fatal is not None:
                raise self._fatal
            if sender is None:  # fenced: wait for an answered heartbeat
                self._beat_now.set()
                self._unfenced.wait(0.1)
            else:
                sender.wait_for_room(on_delivery is not None)

    def _cluster_error(self, cluster: str, err: Any) -> None:
        """librdkafka's error callback (a cluster's brokers refuse or drop connections), and records whose
        delivery finally failed there. Told to the coordinator with the next heartbeat, for its health
        monitor."""
        with self._lock:
            count, _ = self._errors.get(cluster, (0, ""))
            self._errors[cluster] = (count + 1, str(err)[:300])

    def _failed(self, gen: GenerationKey, err: Any, msg: Any, on_delivery: Any = None) -> None:
        """A record that finally failed on `gen`: sent again if its lane has moved on, else reported."""
        with self._lock:
            current = self._routes.get(gen[:2])
            moved_on = current is not None and current.generation != gen[2] and err.code() != KafkaError._PURGE_QUEUE
            if current is not None and moved_on:
                self._resend.append((msg, current, on_delivery))
            else:
                self.failed += 1  # under the lock: reports are served on the application's threads too
                self.last_failure = err.str()
            sender = self._senders.get(gen)
        if sender is not None and err.code() != KafkaError._PURGE_QUEUE:
            self._cluster_error(sender.route.cluster, err)  # a delivery that failed there: the health monitor hears
        if moved_on:
            return
        log.error("producer.delivery_failed", topic=msg.topic(), partition=msg.partition(), error=err.str())
        if on_delivery is not None:
            on_delivery(err, msg)

    def _in_flight_generations(self) -> list[GenerationKey]:
        return [g for g, sender in self._senders.items() if len(sender)]

    def _poll_loop(self) -> None:
        """Serve delivery reports, resend records that failed on a generation the lane has left, retire the
        producers of generations left behind once they are empty, and count what was produced."""
        last_count = self.clock.monotonic()
        while not self._closed.is_set():
            self._fence()
            self._write_held()
            with self._lock:
                senders = list(self._senders.values())
                spares = [p for s in self._spares.values() for p in s.producers()]
                resend, self._resend = ([], self._resend) if self._fenced else (self._resend, [])
            for spare in spares:  # their connection errors, told to the coordinator like any other
                spare.poll(0)
            for msg, route, on_delivery in resend:
                log.info("producer.resend", topic=msg.topic(), to=route.topic)
                try:
                    self._send(
                        functools.partial(self._sender, route),
                        msg.value(),
                        msg.key(),
                        msg.headers(),
                        msg.timestamp()[1],
                        on_delivery,
                    )
                except StreamplaneError:  # closed while librdkafka's queue was full
                    with self._lock:
                        self.failed += 1
                        self.last_failure = "the producer was closed"
                    log.error("producer.delivery_failed", topic=msg.topic(), to=route.topic, error="closed")
            for sender in senders:
                sender.poll()
            self._retire(senders)
            if self.clock.monotonic() - last_count > 1.0:
                last_count = self.clock.monotonic()
                for sender in senders:
                    sender.count_produced()
            self._closed.wait(0.02)

    def _retire(self, senders: list[_Sender]) -> None:
        """Close the producers of generations the lanes have left once nothing is in flight there."""
        retired = []
        with self._lock:
            for sender in senders:
                route = sender.route
                current = self._routes.get((route.stream, route.lane))
                if current is not None and current.generation != route.generation and not len(sender):
                    self._senders.pop(route.key, None)
                    retired.append(sender)
        for sender in retired:
            sender.count_produced()
            sender.close()
            self._beat_now.set()  # the last record of an old generation landed: tell the coordinator now

    def poll(self, timeout_s: float = 0) -> int:
        """Serve delivery callbacks now (the background thread also does); the number served."""
        with self._lock:
            senders = list(self._senders.values())
        return sum(sender.poll(timeout_s) for sender in senders)

    @property
    def error(self) -> StreamplaneError | None:
        """Why this producer ended on its own (a credential refused for good, a thread's bug), or None; every
        record handed to it since raises it."""
        return self._fatal

    def flush(self, timeout_s: float = 30) -> int:
        """Wait for every handed-over record to be acknowledged (or finally failed, see `failed`); the number
        still outstanding."""
        deadline = self.clock.monotonic() + timeout_s
        while True:
            with self._lock:
                senders = list(self._senders.values())
                left = len(self._resend) + len(self._held)
            left += sum(sender.flush(max(0.0, min(0.1, deadline - self.clock.monotonic()))) for sender in senders)
            if left == 0 or self.clock.monotonic() >= deadline:
                return left

    def close(self, timeout_s: float = 30) -> int:
        """Flush, end the session, stop following the topology; the number of records not acknowledged."""
        left = self.flush(timeout_s)
        self._closed.set()
        with self._lock:
            self._lanes.clear()  # every record now takes the general path, which refuses it
        self._beat_now.set()
        for thread in (self._poller, self._beater):  # a heartbeat under way ends before its channel closes
            if thread is not threading.current_thread():  # (a delivery callback may close its own producer)
                thread.join(timeout=5)
        with self._lock:
            senders, self._senders, self._active = list(self._senders.values()), {}, {}
            self._spares.clear()  # never written to: nothing to flush
        for sender in senders:
            sender.count_produced()
            sender.close()
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


@dataclass(frozen=True)
class _Held:
    """A record produced while the producer was fenced, waiting to be written."""

    stream: str
    lane: str
    value: bytes | None
    key: bytes | None
    headers: list[tuple[str, bytes | None]] | None
    ts: int
    """When produce() was called (its CreateTime, as for any record)."""
    on_delivery: Callable[[Any, Any], None] | None
    size: int


MAX_HELD_BYTES = 64 * 1024 * 1024
"""Bytes of records (values, keys and headers) a fenced producer holds before produce() waits for room."""
FENCE_AT = 0.5
"""The share of its session's TTL after which a producer that no replica has answered stops writing: the rest
is left for what librdkafka already holds to land before the session may expire and a seal pass it by."""
DEFAULT_TTL_S = 10.0
"""A session's TTL when the coordinator does not say (an older one)."""
MAX_SPARES = 3
"""Warm producers one Producer keeps toward clusters a failover may pick."""


class _Spare:
    """Warm producers toward a cluster, not yet bound to a route (the two a sender has: quiet and reported):
    they connect and get their producer ids now; the route whose sender adopts them gets their reports."""

    def __init__(self, owner: Producer, cluster: str, bootstrap_servers: str) -> None:
        self.route: GenerationKey | None = None
        config = {
            **owner._config,
            "bootstrap.servers": bootstrap_servers,
            "error_cb": lambda err: owner._cluster_error(cluster, err),
        }
        self.quiet = KafkaProducer(
            {
                **config,
                "delivery.report.only.error": True,
                "on_delivery": lambda err, msg: owner._failed(self.route, err, msg) if self.route else None,
            }
        )
        self.reported = KafkaProducer(config)

    def producers(self) -> list[KafkaProducer]:
        return [self.quiet, self.reported]


class _Sender:
    """The librdkafka producers of one route (one lane generation). Records without `on_delivery` go through
    one that reports failures only (cheap); records with it through one that reports every delivery. What
    the two hold is what is in flight to the generation."""

    def __init__(self, owner: Producer, route: Route) -> None:
        self.owner = owner
        self.route = route
        self._config = {
            **owner._config,
            "bootstrap.servers": route.bootstrap_servers,
            "error_cb": lambda err: owner._cluster_error(route.cluster, err),
        }
        spare = owner._spares.pop(route.bootstrap_servers, None)  # the caller holds the owner's lock
        self.reported: KafkaProducer | None = None
        if spare is not None:
            spare.route = route.key
            self.quiet, self.reported = spare.quiet, spare.reported
        else:
            self.quiet = KafkaProducer(
                {
                    **self._config,
                    "delivery.report.only.error": True,
                    "on_delivery": lambda err, msg: owner._failed(route.key, err, msg),
                }
            )
        self.lane = Lane(self.quiet.produce, self.quiet.poll, route.topic, route)
        self.slow_produced = 0  # records sent by send(), under the owner's lock; the fast path counts in `lane`
        self._counted = 0

    def send(self, value: Any, key: Any, headers: Any, ts: int, on_delivery: Any) -> None:
        """Hand one record to librdkafka; `ts` 0 lets it stamp the time of this call (CreateTime). Raises
        BufferError while librdkafka's queue is full (see wait_for_room)."""
        if on_delivery is None:
            producer, extra = self.quiet, dict[str, Any]()
        else:
            if self.reported is None:
                self.reported = KafkaProducer(self._config)
            producer, extra = self.reported, {"on_delivery": _Reported(self.owner, self.route.key, on_delivery)}
        if headers:
            extra["headers"] = headers
        if ts:
            extra["timestamp"] = ts
        producer.produce(self.route.topic, value, key, **extra)

    def wait_for_room(self, reported: bool) -> None:
        """Let deliveries drain from the producer records with (`reported`) or without on_delivery go to.
        Briefly: one that reports failures only has no event that ends a poll early, so it would wait out a
        long one."""
        producer = self.reported if reported and self.reported is not None else self.quiet
        producer.poll(0.005)

    def __len__(self) -> int:
        return len(self.quiet) + (len(self.reported) if self.reported is not None else 0)

    def _all(self) -> list[KafkaProducer]:
        return [self.quiet] if self.reported is None else [self.quiet, self.reported]

    def poll(self, timeout_s: float = 0) -> int:
        return sum(p.poll(timeout_s) for p in self._all())

    def flush(self, timeout_s: float) -> int:
        return sum(p.flush(timeout_s) for p in self._all())

    @property
    def produced(self) -> int:
        return self.lane.produced + self.slow_produced

    def count_produced(self) -> None:
        n, self._counted = self.produced - self._counted, self.produced
        if n:
            metrics.RECORDS_OUT.labels(self.route.stream, self.route.lane).inc(n)

    def close(self) -> None:
        self.flush(0)


class _Reported:
    """Delivery report handler of a record with the application's own `on_delivery`."""

    __slots__ = ("_gen", "_on_delivery", "_owner")

    def __init__(self, owner: Producer, gen: GenerationKey, on_delivery: Callable[[Any, Any], None]) -> None:
        self._owner, self._gen, self._on_delivery = owner, gen, on_delivery

    def __call__(self, err: Any, msg: Any) -> None:
        if err is None:
            self._on_delivery(err, msg)
        else:
            self._owner._failed(self._gen, err, msg, self._on_delivery)
