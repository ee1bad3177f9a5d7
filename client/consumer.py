"""The consumer: a group member that reads its leased partitions straight from Kafka and processes records in
parallel, each ending as ack, retry or reject.

Iterator:

    with Consumer("127.0.0.1:7400", group="billing", stream="orders") as consumer:
        for msg in consumer:
            handle(msg.value)
            msg.ack()

Handler (`concurrency` threads; an exception is a retry, and after the group's max attempts a reject):

    def handle(msg: Message) -> None:
        charge(json.loads(msg.value))      # returning acks the record

    Consumer("127.0.0.1:7400", group="billing", stream="orders", concurrency=8).run(handle)

The consumer holds the group session (rejoining with backoff when the coordinator goes away), runs one
LeaseReader per lease, commits outcomes in batches about every `commit_interval_s` with the lease epoch, and
copies rejected records to the stream's `dlq` lane with their origin in headers before marking them
rejected. Decoded data held is capped by `max_buffered_bytes`; fetching pauses at `max_in_flight` records.
"""

from __future__ import annotations

import os
import queue
import socket
import threading
import time
import uuid
import zlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import structlog

from streamplane.client import metrics
from streamplane.client.coordinator import CoordinatorClient
from streamplane.client.fetcher import PartitionFetcher
from streamplane.client.flow import Budget
from streamplane.client.lease_reader import LeaseReader, to_ranges
from streamplane.client.message import ACKED, PENDING, Message
from streamplane.client.producer import Producer
from streamplane.client.session import LeaseLoad, SessionEndedError, WorkerSession
from streamplane.client.tls import tls_context
from streamplane.errors import (
    AlreadyExistsError,
    FencedError,
    InvalidArgumentError,
    NotFoundError,
    StreamplaneError,
    UnavailableError,
)
from streamplane.native import DEFAULT_MAX_DECOMPRESSED
from streamplane.v1 import assigner_pb2 as apb
from streamplane.v1 import commitlog_pb2 as cpb
from streamplane.v1 import topology_pb2 as pb

log = structlog.get_logger(__name__)

ORIGIN_HEADERS = (
    "sp-origin-stream",
    "sp-origin-lane",
    "sp-origin-generation",
    "sp-origin-partition",
    "sp-origin-offset",
)
REASON_HEADER = "sp-reject-reason"
CHUNK = 256
"""Records handed to one handler thread at a time (parallelism inside a partition, little queueing cost)."""
_STOP = object()


def _positive(name: str, value: float, *, integer: bool = True) -> Any:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or value <= 0
        or (integer and value != int(value))
    ):
        raise InvalidArgumentError(f"{name} must be a positive {'integer' if integer else 'number'}, not {value!r}")
    return int(value) if integer else float(value)


class Consumer:
    """Consumes one stream's lanes as a member of a group.

    Args:
        coordinator: host:port of a coordinator replica (default STREAMPLANE_COORDINATOR or 127.0.0.1:7400).
        group: the consumer group.
        stream: the stream to read.
        lanes: lanes to read; default every lane but dlq.
        concurrency: handler threads of `run()`.
        ordering: "none" (default: records of a partition may finish in any order) or "key" (records with the
            same key are handled one at a time, in offset order; `run()` only).
        max_decompressed: the decoder's limit for one batch; a bigger batch is rejected (a zstd bomb).
        max_in_flight: records delivered and not yet ended above which fetching pauses.
        max_buffered_bytes: the decoded data the consumer may hold, a hard cap.
        retry_backoff_s: default wait before a retried record is tried again.
        commit_interval_s: how often outcomes are committed.
        start: where a partition with no progress starts: "earliest" (default) or "latest".
        worker_id: this member's id in the group (default host-pid-random).
        metrics_port: serve Prometheus metrics on this port (off by default).
        kafka_config: librdkafka-style settings for the connections to Kafka (security.protocol, ssl.*) and
            for the dlq producer.

    Raises NotFoundError for an unknown stream or lane, UnavailableError if the coordinator cannot be reached,
    InvalidArgumentError (a ValueError) naming a bad setting.
    """

    def __init__(
        self,
        coordinator: str | None = None,
        *,
        group: str,
        stream: str,
        lanes: Sequence[str] = (),
        concurrency: int = 4,
        ordering: str = "none",
        max_decompressed: int = 16 << 20,
        max_in_flight: int = 50_000,
        max_buffered_bytes: int = 256 << 20,
        retry_backoff_s: float = 1.0,
        commit_interval_s: float = 0.1,
        start: str = "earliest",
        worker_id: str | None = None,
        metrics_port: int | None = None,
        kafka_config: dict[str, Any] | None = None,
    ) -> None:
        self.concurrency = _positive("concurrency", concurrency)
        if ordering not in ("none", "key"):
            raise InvalidArgumentError(f"ordering must be 'none' or 'key', not {ordering!r}")
        self.max_decompressed = _positive("max_decompressed", max_decompressed)
        if self.max_decompressed > DEFAULT_MAX_DECOMPRESSED:
            raise InvalidArgumentError(
                f"max_decompressed must be at most {DEFAULT_MAX_DECOMPRESSED}, not {max_decompressed}"
            )
        max_in_flight = _positive("max_in_flight", max_in_flight)
        max_buffered_bytes = _positive("max_buffered_bytes", max_buffered_bytes)
        if max_buffered_bytes < 2 * (self.max_decompressed + (1 << 20)):
            raise InvalidArgumentError(
                f"max_buffered_bytes ({max_buffered_bytes}) must be at least twice max_decompressed plus 1 MiB "
                f"per fetch ({2 * (self.max_decompressed + (1 << 20))})"
            )
        self.retry_backoff_s = _positive("retry_backoff_s", retry_backoff_s, integer=False) if retry_backoff_s else 0.0
        self.commit_interval_s = _positive("commit_interval_s", commit_interval_s, integer=False)
        if start not in ("earliest", "latest"):
            raise InvalidArgumentError(f"start must be 'earliest' or 'latest', not {start!r}")
        if metrics_port is not None and not 0 < metrics_port < 65536:
            raise InvalidArgumentError(f"metrics_port must be between 1 and 65535, not {metrics_port}")
        self.ordering = ordering
        self.start_from_latest = start == "latest"
        self.kafka_config = dict(kafka_config or {})
        self._ssl = tls_context(self.kafka_config)
        self.group, self.stream, self.lanes = group, stream, list(lanes)
        self.worker_id = worker_id or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self.budget = Budget(max_in_flight, max_buffered_bytes)
        self.client = CoordinatorClient(coordinator)
        self._coordinator = self.client.target
        self._check_subscription()
        self._readers: dict[str, LeaseReader] = {}
        self._readers_lock = threading.Lock()
        self._work: queue.Queue[Any] = queue.Queue()
        self._closed = threading.Event()
        self._dlq: Producer | None = None
        self._dlq_lock = threading.Lock()
        # an unreachable coordinator or an unknown stream fails here
        self._session: WorkerSession | None = self._join()
        if metrics_port:
            metrics.serve(metrics_port)
        self._threads = [
            threading.Thread(target=self._session_loop, name="consumer-session", daemon=True),
            threading.Thread(target=self._commit_loop, name="consumer-commits", daemon=True),
        ]
        for t in self._threads:
            t.start()

    # -- the group session
    def _check_subscription(self) -> None:
        described = self.client.describe_stream(self.stream)
        names = {lane.name for lane in described.lanes}
        missing = [lane for lane in self.lanes if lane not in names]
        if missing:
            raise NotFoundError(f"lane {missing[0]!r} does not exist in stream {self.stream!r}")

    def _join(self) -> WorkerSession:
        session = WorkerSession(
            self._coordinator, group=self.group, worker_id=self.worker_id, subscriptions={self.stream: self.lanes}
        )
        session.join()
        log.info("consumer.joined", group=self.group, worker=self.worker_id, session=session.session_id)
        return session

    def _session_loop(self) -> None:
        delay = 0.1
        while not self._closed.is_set():
            session = self._session
            if session is None:
                try:
                    session = self._session = self._join()
                    delay = 0.1
                except (UnavailableError, AlreadyExistsError, FencedError) as err:
                    log.warning("consumer.rejoin_failed", error=err.message, retry_in_s=delay)
                    self._closed.wait(delay)
                    delay = min(5.0, delay * 2)
                    continue
            try:
                for event in session.events():
                    self._on_event(event)
                if self._closed.is_set():
                    return
                raise SessionEndedError("the session stream ended")
            except StreamplaneError as err:
                if self._closed.is_set():
                    return
                log.warning("consumer.session_ended", error=err.message, retry_in_s=delay)
                self._lose_all()
                session.close()
                self._session = None
                self._closed.wait(delay)
                delay = min(5.0, delay * 2)

    def _on_event(self, event: apb.Grant | apb.Revoke | apb.GenerationChange) -> None:
        if isinstance(event, apb.Grant):
            with self._readers_lock:
                old = self._readers.get(event.lease_id)
                if old is not None:
                    old.lose()
                reader = self._readers[event.lease_id] = LeaseReader(self, event)
            log.info("consumer.lease_granted", lease=event.lease_id, epoch=event.epoch, start=event.start_offset)
            reader.start()
        elif isinstance(event, apb.Revoke):
            with self._readers_lock:
                reader = self._readers.get(event.lease_id)
                if reader is None or reader.epoch != event.epoch:
                    return
                if not event.deadline_unix_ms:
                    self._readers.pop(event.lease_id)
            if event.deadline_unix_ms:
                reader.revoke(event.deadline_unix_ms)
            else:
                reader.lose()
            log.info(
                "consumer.lease_revoked", lease=event.lease_id, deadline=event.deadline_unix_ms, reason=event.reason
            )
        elif isinstance(event, apb.GenerationChange):
            with self._readers_lock:
                reader = self._readers.get(event.lease_id)
            if reader is not None and event.state == pb.GENERATION_STATE_SEALED:
                reader.seal(event.end_offset)

    def _lose_all(self) -> None:
        with self._readers_lock:
            readers, self._readers = list(self._readers.values()), {}
        for r in readers:
            r.lose()

    def release(self, reader: LeaseReader) -> None:
        """Hand a revoked lease back (its reader committed what was done)."""
        with self._readers_lock:
            if self._readers.get(reader.lease_id) is reader:
                del self._readers[reader.lease_id]
        session = self._session
        if session is not None:
            session.release(reader.lease_id, reader.epoch)

    def reader_failed(self, reader: LeaseReader) -> None:
        """A reader stopped on an error it cannot retry: give the lease back so it is granted again."""
        time.sleep(1.0)
        self.release(reader)

    # -- what readers use
    def new_fetcher(self, reader: LeaseReader, start_offset: int) -> PartitionFetcher:
        return PartitionFetcher(
            reader.bootstrap_servers,
            reader.topic,
            reader.partition,
            start_offset=start_offset,
            max_decompressed=self.max_decompressed,
            ssl_context=self._ssl,
        )

    def deliver(self, messages: list[Message]) -> None:
        """Queue records for the handlers, in chunks (run() deals them out by key when ordering by key)."""
        for i in range(0, len(messages), CHUNK):
            self._work.put(messages[i : i + CHUNK])

    def send_to_dlq(self, reader: LeaseReader, msg: Message, reason: str) -> None:
        """Copy a rejected record to its stream's dlq lane; it is marked rejected once the copy is stored."""
        origin = (reader.stream, reader.lane, str(reader.generation), str(reader.partition), str(msg.offset))
        headers = [(k, v) for k, v in msg.headers if not k.startswith("sp-origin-")]
        headers += [(name, value.encode()) for name, value in zip(ORIGIN_HEADERS, origin, strict=True)]
        headers += [(REASON_HEADER, reason[:1000].encode()), ("sp-origin-ingest-ms", str(msg.timestamp).encode())]

        def stored(err: Any, kmsg: Any) -> None:
            if err is not None:
                log.error("consumer.dlq_failed", lease=reader.lease_id, offset=msg.offset, error=str(err))
                return  # stays unfinished: the next holder retries it, nothing is lost
            route = self._dlq_producer().route(reader.stream, "dlq")
            where = cpb.DlqLocation(
                stream=reader.stream,
                lane="dlq",
                generation=route.generation if route.topic == kmsg.topic() else 0,
                partition=kmsg.partition(),
                offset=kmsg.offset(),
            )
            reader.rejected(msg, reason, where)

        metrics.REJECTS.labels(*reader.labels).inc()
        self._dlq_producer().produce(
            reader.stream, msg.value, key=msg.key, lane="dlq", headers=headers, on_delivery=stored
        )

    def _dlq_producer(self) -> Producer:
        with self._dlq_lock:
            if self._dlq is None:
                self._dlq = Producer(self._coordinator, **{"linger.ms": 5, **self.kafka_config})
            return self._dlq

    # -- commits
    def _commit_loop(self) -> None:
        last_load = 0.0
        while not self._closed.wait(self.commit_interval_s):
            with self._readers_lock:
                readers = list(self._readers.values())
            for reader in readers:
                if not reader.lost:
                    self.commit_lease(reader)
            if time.monotonic() - last_load > 1.0:
                last_load = time.monotonic()
                self._report_load(readers)

    def commit_lease(self, reader: LeaseReader) -> None:
        """Commit what ended on one lease since its last commit (kept for the next try if it fails)."""
        out = reader.take_outcomes()
        oldest = reader.oldest_pending_ts()
        request = cpb.CommitRequest(
            group=self.group,
            lease_id=reader.lease_id,
            epoch=reader.epoch,
            retries=out.retries,
            rejects=out.rejects,
            oldest_pending_ts_ms=oldest,
            high_watermark=reader.high_watermark,
            high_watermark_ts_ms=reader.last_ts,
        )
        ranges = to_ranges(out.acked)
        if len(ranges) > 4096:  # scattered acks: a bitmap is smaller than that many ranges
            base = ranges[0][0]
            bits = bytearray((ranges[-1][1] - base + 7) // 8)
            for o in out.acked:
                bits[(o - base) >> 3] |= 1 << ((o - base) & 7)
            request.acked_bitmap, request.acked_bitmap_base = bytes(bits), base
            ranges = []
        ranges += out.ranges
        request.acked.extend(cpb.OffsetRange(start=s, end=e) for s, e in ranges)
        labels = reader.labels
        try:
            response = self.client.commit(request)
        except FencedError:
            log.info("consumer.lease_fenced", lease=reader.lease_id, epoch=reader.epoch)
            reader.lose()
            return
        except StreamplaneError as err:
            log.warning("consumer.commit_failed", lease=reader.lease_id, error=err.message)
            reader.put_back(out)
            return
        metrics.ACKS.labels(*labels).inc(len(out.acked))
        metrics.RETRIES.labels(*labels).inc(len(out.retries))
        metrics.TIME_LAG.labels(self.group, reader.lease_id).set(
            max(0, time.time() * 1000 - oldest) / 1000 if oldest else 0
        )
        reader.committed(out, list(response.exhausted))

    def _report_load(self, readers: list[LeaseReader]) -> None:
        """Tell the Assigner each lease's throughput and lag: it balances partitions by measured load."""
        session = self._session
        if session is None:
            return
        now_s = time.monotonic()
        now_ms = int(time.time() * 1000)
        loads = {}
        for r in readers:
            if r.lost:
                continue
            rate = r.take_rate(now_s)
            oldest = r.oldest_pending_ts()
            loads[r.lease_id] = LeaseLoad(rate, r.records_behind(), max(0, now_ms - oldest) if oldest else 0)
        session.report_load(records_per_s=sum(x.records_per_s for x in loads.values()), leases=loads)

    # -- the two APIs
    def __iter__(self) -> Iterator[Message]:
        """Records as they arrive, until `close()`; end each with ack(), retry() or reject()."""
        while True:
            item = self._work.get()
            if item is _STOP:
                self._work.put(_STOP)
                return
            for msg in item:
                if msg._reader.lost:
                    msg._reader.finish(msg, ACKED)  # its lease moved: releases it, records nothing
                    continue
                yield msg

    def run(self, handler: Callable[[Message], Any], *, stop: threading.Event | None = None) -> None:
        """Call `handler(msg)` for every record on `concurrency` threads until `close()` (or `stop` is set).

        Returning acks the record unless the handler ended it itself; raising retries it (after
        retry_backoff_s), and after the group's max attempts rejects it to the dlq lane.
        """
        halt = threading.Event()

        def stopped() -> bool:
            return halt.is_set() or (stop is not None and stop.is_set())

        def handle(item: list[Message]) -> None:
            reader = item[0]._reader
            if not reader.lost:
                for msg in item:
                    try:
                        handler(msg)
                    except Exception as err:  # the handler's failure is the record's retry
                        if msg._outcome is PENDING:
                            msg.retry(err)
            reader.ack_many(item)  # what the handler did not end itself (and what a lost lease holds)

        def work(source: queue.Queue[Any]) -> None:
            while not stopped():
                try:
                    item = source.get(timeout=0.1)
                except queue.Empty:
                    continue
                if item is _STOP:
                    source.put(_STOP)  # for the other threads
                    return
                handle(item)

        if self.ordering == "none":  # every thread takes chunks from the shared queue; this one too
            queues = [self._work]
            threads = [
                threading.Thread(target=work, args=(self._work,), daemon=True) for _ in range(self.concurrency - 1)
            ]
        else:  # this thread deals chunks out by key hash, so one key is always on one thread, in order
            queues = [queue.Queue() for _ in range(self.concurrency)]
            threads = [threading.Thread(target=work, args=(q,), daemon=True) for q in queues]
        for i, t in enumerate(threads):
            t.name = f"handler-{i}"
            t.start()
        try:
            if self.ordering == "none":
                work(self._work)
            else:
                self._deal_by_key(queues, stopped)
        finally:
            halt.set()
            for t in threads:
                t.join()

    def _deal_by_key(self, queues: list[queue.Queue[Any]], stopped: Callable[[], bool]) -> None:
        while not stopped():
            try:
                item = self._work.get(timeout=0.1)
            except queue.Empty:
                continue
            if item is _STOP:
                self._work.put(_STOP)
                for q in queues:
                    q.put(_STOP)
                return
            parts: dict[int, list[Message]] = {}
            for msg in item:
                parts.setdefault(zlib.crc32(msg.key or b"") % len(queues), []).append(msg)
            for i, part in parts.items():
                queues[i].put(part)

    # -- lifecycle
    def close(self, timeout_s: float = 10.0) -> None:
        """Stop fetching, let in-flight records end (up to `timeout_s`), commit, and leave the group (its
        leases go to the other members at once)."""
        if self._closed.is_set():
            return
        with self._readers_lock:
            readers = list(self._readers.values())
        for r in readers:
            r.stop()
        while True:  # records still queued were never handed out: nothing to wait for
            try:
                item = self._work.get_nowait()
            except queue.Empty:
                break
            for msg in item if item is not _STOP else ():
                msg._reader.forget(msg)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and any(r.pending for r in readers if not r.lost):
            time.sleep(0.02)
        if self._dlq is not None:
            self._dlq.flush(max(0.0, deadline - time.monotonic()))
        for r in readers:
            if not r.lost:
                self.commit_lease(r)
        self._closed.set()
        self._threads[1].join(timeout=5)  # the committer: no commit may race the final ones or the client's close
        self._work.put(_STOP)
        for r in readers:
            r.lose()
        if self._session is not None:
            self._session.close()
        if self._dlq is not None:
            self._dlq.close(1.0)
        self.client.close()
        log.info("consumer.closed", group=self.group, worker=self.worker_id)

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def leases(self) -> list[str]:
        """The leases this member reads now."""
        with self._readers_lock:
            return sorted(lid for lid, r in self._readers.items() if not r.lost)


__all__ = ["Consumer", "Message"]
