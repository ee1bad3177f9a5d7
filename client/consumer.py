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

The consumer holds the group session (rejoining with backoff when the coordinator goes away), keeps one
ledger per lease and reads every lease through one fetch loop (one connection per broker, whatever the lease
count), commits every lease that changed in one call about every `commit_interval_s`, each with its epoch,
and copies rejected records to the stream's `dlq` lane with their origin in headers before marking them
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
from streamplane.client.background import start_thread
from streamplane.client.config import ConsumerConfig
from streamplane.client.coordinator import CoordinatorClient
from streamplane.client.fetch_loop import FetchLoop
from streamplane.client.fetcher import Fetched
from streamplane.client.flow import Budget, ByPriority
from streamplane.client.kafka import ConnectionConfig, KafkaAuthenticationError
from streamplane.client.ledger import Batch, LeaseInfo, LeaseLedger, Outcomes, ToCopy
from streamplane.client.message import PENDING, BatchOutcome, Message, _text
from streamplane.client.producer import Producer
from streamplane.client.session import LeaseLoad, SessionEndedError, WorkerSession
from streamplane.clock import SYSTEM, Clock
from streamplane.errors import (
    AlreadyExistsError,
    FencedError,
    InvalidArgumentError,
    LimitExceededError,
    StreamplaneError,
    UnauthenticatedError,
    UnavailableError,
)
from streamplane.model import (
    DLQ_COPY_TIMEOUT_MS,
    ClusterErrors,
    Commit,
    DlqLocation,
    Grant,
    LeaseCommit,
    Revoke,
    Sealed,
    SessionEvent,
)
from streamplane.offsets import to_bitmap, to_ranges

log = structlog.get_logger(__name__)

ORIGIN_HEADERS = (
    "sp-origin-stream",
    "sp-origin-lane",
    "sp-origin-generation",
    "sp-origin-partition",
    "sp-origin-offset",
)
REASON_HEADER = "sp-reject-reason"
ATTEMPT_HEADER = "sp-dlq-attempt"
"""The attempts the record had when it was rejected."""
COPY_HEADER = "sp-dlq-copy"
"""Which copy of the reject this is: 1, or 2 when a holder crashed between writing its copy and recording it."""
CHUNK = 256
"""Records handed to one handler thread at a time (parallelism inside a partition, little queueing cost)."""
REVOKE_MARGIN_S = 0.25
"""How long before a revoke deadline the consumer stops waiting for a lease's in-flight records and commits."""
RETRY_CHECK_S = 0.5
"""How often leases with retry state ask which retries are due."""
LOAD_REPORT_S = 1.0
"""How often lease loads that changed are reported to the Assigner."""
REJOIN_MAX_S = 1.0
"""The longest wait between attempts to get the group session back (records wait for it: keep it short)."""
MAX_COMMIT_LEASES = 1024
"""Leases in one CommitBatch call (one store transaction each)."""
_STOP = object()
BATCH_COLUMNS = (
    *("stream", "lane", "generation", "partition"),
    *("offset", "timestamp", "key", "value", "headers", "attempt"),
)
"""The columns of the batches `run_batches` hands out."""


class _Receiver:
    """What the fetch loop talks to for one lease: its ledger, through the consumer."""

    __slots__ = ("consumer", "ledger")

    def __init__(self, consumer: Consumer, ledger: LeaseLedger) -> None:
        self.consumer, self.ledger = consumer, ledger

    def fetchable(self) -> bool:
        return self.ledger.fetchable()

    def received(self, fetched: Fetched) -> tuple[int, int]:
        ledger = self.ledger
        for s in fetched.skipped:
            reason = "too_large" if isinstance(s.error, LimitExceededError) else "corrupt"
            metrics.DECODE_ERRORS.labels(*ledger.labels, reason).inc()
            metrics.REJECTS.labels(*ledger.labels).inc(max(0, s.next_offset - s.first_offset))
            log.warning(
                "consumer.batch_rejected",
                lease=ledger.lease_id,
                first=s.first_offset,
                end=s.next_offset,
                reason=s.error.message,
            )
        consumer = self.consumer
        delivered, used, count = ledger.accept(fetched, batches=consumer.mode == "batches")
        if delivered:
            metrics.RECORDS_IN.labels(*ledger.labels).inc(count)
            if fetched.batch is not None:
                metrics.FETCH_BYTES.labels(*ledger.labels).inc(fetched.batch.consumed)
            consumer.deliver(delivered)
        return used, count

    def failed(self, error: StreamplaneError) -> None:
        self.consumer.lease_failed(self.ledger, error)


def _messages_to_arrow(msgs: list[Message]) -> Any:
    """Records re-read for a retry, as one batch with the batch API's columns."""
    import pyarrow as pa

    first = msgs[0]
    n = len(msgs)
    header_type = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
    return pa.RecordBatch.from_arrays(
        [
            pa.array([first.stream] * n, pa.string()),
            pa.array([first.lane] * n, pa.string()),
            pa.array([first.generation] * n, pa.int32()),
            pa.array([first.partition] * n, pa.int32()),
            pa.array([m.offset for m in msgs], pa.int64()),
            pa.array([m.timestamp for m in msgs], pa.timestamp("ms", tz="UTC")),
            pa.array([m.key for m in msgs], pa.binary()),
            pa.array([m.value for m in msgs], pa.binary()),
            pa.array([[{"key": k, "value": v} for k, v in m.headers] for m in msgs], header_type),
            pa.array([m.attempt for m in msgs], pa.int32()),
        ],
        names=[*BATCH_COLUMNS],
    )


def _changed(last: LeaseLoad, now: LeaseLoad) -> bool:
    """Whether a lease's load moved enough to be worth telling the Assigner (noise is not)."""
    return (
        abs(now.records_per_s - last.records_per_s) > max(1.0, 0.2 * last.records_per_s)
        or abs(now.lag_records - last.lag_records) > max(100, last.lag_records // 5)
        or abs(now.lag_ms - last.lag_ms) > max(1000, last.lag_ms // 5)
    )


class Consumer:
    """Consumes one stream's lanes as a member of a group.

    Args:
        coordinator: host:port of a coordinator replica (default STREAMPLANE_COORDINATOR or 127.0.0.1:7400).
        group: the consumer group.
        stream: the stream to read.
        lanes: lanes to read; default every lane but dlq.
        config: the consumer's settings (ConsumerConfig); its fields may also be given as keywords.

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
        config: ConsumerConfig | None = None,
        clock: Clock = SYSTEM,
        **settings: Any,
    ) -> None:
        self.clock = clock
        """Its time: revoke deadlines, retry due times, rates and commit pacing (a ManualClock in tests)."""
        cfg = self.config = ConsumerConfig.build(config, settings)
        self.concurrency = cfg.concurrency
        self.ordering = cfg.ordering
        self.max_decompressed = cfg.max_decompressed
        self.retry_backoff_s = cfg.retry_backoff_s
        self.commit_interval_s = cfg.commit_interval_s
        self.start_from_latest = cfg.start == "latest"
        self.kafka_config = dict(cfg.kafka_config or {})
        connection = ConnectionConfig.from_settings(self.kafka_config)
        self.group, self.stream, self.lanes = group, stream, list(lanes)
        self.worker_id = cfg.worker_id or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self.budget = Budget(cfg.max_in_flight, cfg.max_buffered_bytes)
        self.client = CoordinatorClient(coordinator, token=cfg.token, tls=cfg.tls)
        self._coordinator = self.client.target
        self._priorities = self._check_subscription()
        self._ledgers: dict[str, LeaseLedger] = {}
        self._ledgers_lock = threading.Lock()
        self.active: set[LeaseLedger] = set()
        """Leases the committer looks at: those that read, ended records or are revoking since it last did."""
        self._work: queue.Queue[Any] = ByPriority(self._priority_of)
        self._closed = threading.Event()
        self._connected = threading.Event()  # cleared while the group session is being resumed
        self._connected.set()
        self._fatal: StreamplaneError | None = None
        self._close_lock = threading.Lock()
        self._session_id = ""
        self._dlq: Producer | None = None
        self._dlq_lock = threading.Lock()
        self._copying: dict[int, tuple[LeaseLedger, Message]] = {}
        """Dlq copies handed to the dlq producer and not reported yet (by id of the record): failed, to be made
        again, if that producer ends before it reports them."""
        self._loads: dict[str, LeaseLoad] = {}
        self._cluster_names: dict[str, str] = {}  # bootstrap servers of a grant: its cluster's name
        self._fetch = FetchLoop(
            budget=self.budget,
            max_decompressed=self.max_decompressed,
            partition_max_bytes=cfg.partition_max_bytes,
            read_committed=cfg.isolation_level == "read_committed",
            default_config=connection,
            on_crash=self._end,
            clock=clock,
        )
        self.mode = ""  # "records" or "batches": set by the first of run(), iteration, run_batches()
        self._mode_lock = threading.Lock()
        # an unreachable coordinator or an unknown stream fails here
        self._session: WorkerSession | None = self._join()
        if cfg.metrics_port:
            metrics.serve(cfg.metrics_port)
        self._threads = [
            start_thread("consumer-session", self._session_loop, self._end),
            start_thread("consumer-commits", self._commit_loop, self._end),
        ]

    # -- the group session
    def _check_subscription(self) -> dict[str, int]:
        """The subscribed lanes' priorities ({lane: priority}); NotFoundError for a lane the stream lacks."""
        described = self.client.describe_stream(self.stream)
        for lane in self.lanes:
            described.require_lane(lane)
        return {lane.name: lane.priority for lane in described.lanes}

    def _priority_of(self, item: Any) -> int:
        """The handlers take records of higher-priority lanes first (the stop marker before anything)."""
        if item is _STOP:
            return 1 << 30
        ledger = item.ledger if isinstance(item, Batch) else item[0]._reader
        return self._priorities.get(ledger.lane, 0)

    def _join(self, resume: str = "") -> WorkerSession:
        session = WorkerSession(
            self._coordinator,
            group=self.group,
            worker_id=self.worker_id,
            subscriptions={self.stream: self.lanes},
            token=self.client.credentials,
            tls=self.config.tls,
        )
        session.join(resume=resume)
        self._session_id = session.session_id  # what commits name: kept while the session is being resumed
        what = "consumer.resumed" if session.resumed else "consumer.joined"
        log.info(what, group=self.group, worker=self.worker_id, session=session.session_id)
        return session

    def _session_loop(self) -> None:
        """Keep the group session. When its stream breaks (the coordinator restarted, or its leadership moved),
        records stop being handed out and the session is resumed: its leases, epochs, records in flight and
        outcomes not yet committed stay valid. Only if it ended meanwhile are the leases given up."""
        delay = 0.1
        resume = ""
        while not self._closed.is_set():
            session = self._session
            if session is None:
                try:
                    session = self._session = self._join(resume)
                    delay = 0.1
                except (UnavailableError, AlreadyExistsError, FencedError) as err:
                    log.warning("consumer.rejoin_failed", error=err.message, retry_in_s=delay)
                    self._closed.wait(delay)
                    delay = min(REJOIN_MAX_S, delay * 2)
                    continue
                except StreamplaneError as err:
                    # a credential refused for good, a stream deleted: no retry heals it. A refused token that
                    # its file or callback may still replace is tried again for a while (see Credentials).
                    hopeless = not (err.retryable or isinstance(err, UnauthenticatedError))
                    if self.client.credentials.refused(err) or hopeless:
                        self._end(err)
                        return
                    log.warning("consumer.rejoin_refused", error=err.message, retry_in_s=delay)
                    self._closed.wait(delay)
                    delay = min(REJOIN_MAX_S, delay * 2)
                    continue
                if resume and not session.resumed:
                    self._lose_all()  # that session ended: its leases are someone else's now
                resume = ""
                self._connected.set()
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
                self._connected.clear()  # nothing more is handed out until the session is back
                resume = session.session_id
                session.close()
                self._session = None
                self._closed.wait(delay)
                delay = min(REJOIN_MAX_S, delay * 2)

    def _await_session(self) -> None:
        """Hold a handler thread while the session is being resumed (its leases may be gone when it is not)."""
        while not self._connected.wait(0.1) and not self._closed.is_set():
            pass

    def _on_event(self, event: SessionEvent) -> None:
        match event:
            case Grant():
                self._grant(event)
            case Revoke():
                self._revoke(event)
            case Sealed():
                with self._ledgers_lock:
                    ledger = self._ledgers.get(event.lease_id)
                if ledger is not None:
                    ledger.seal(event.end_offset)
                    self._fetch.touch()

    def _revoke(self, event: Revoke) -> None:
        with self._ledgers_lock:
            ledger = self._ledgers.get(event.lease_id)
            if ledger is None or ledger.epoch != event.epoch:
                return
            if not event.deadline_ms:
                self._ledgers.pop(event.lease_id)
        if event.deadline_ms:
            ledger.revoking(event.deadline_ms / 1000)
            self._fetch.touch()  # stop fetching it now
        else:
            self._lose(ledger)
        log.info("consumer.lease_revoked", lease=event.lease_id, deadline=event.deadline_ms, reason=event.reason)

    def _grant(self, grant: Grant) -> None:
        with self._ledgers_lock:
            held = self._ledgers.get(grant.lease_id)
        if held is not None and held.epoch == grant.epoch and not held.lost:
            return  # a resumed session's grants again: the lease goes on as it was
        p = grant.partition
        info = LeaseInfo(
            lease_id=grant.lease_id,
            epoch=grant.epoch,
            stream=p.stream,
            lane=p.lane,
            generation=p.generation,
            partition=p.partition,
            topic=grant.topic,
            bootstrap_servers=grant.bootstrap_servers,
            start_offset=grant.start_offset,
            end_offset=grant.end_offset,
        )
        ledger = LeaseLedger(self, info, self.budget, self.group)
        if grant.start_offset >= 0:  # progress exists: skip what a previous holder finished above it
            try:
                progress = self.client.progress(self.group, grant.lease_id, max_ranges=100_000)
                ledger.skip_done(list(progress.done), progress.retrying)
                ledger.may_have_retries = progress.retries > 0
            except StreamplaneError as err:
                log.warning("consumer.progress_unavailable", lease=grant.lease_id, error=err.message)
                ledger.may_have_retries = True
        with self._ledgers_lock:
            old = self._ledgers.get(grant.lease_id)
            self._ledgers[grant.lease_id] = ledger
        if old is not None:
            old.drop()
        position = grant.start_offset if grant.start_offset >= 0 else -2 if self.start_from_latest else -1
        receiver = _Receiver(self, ledger)
        self._cluster_names[grant.bootstrap_servers] = grant.cluster
        self._fetch.add(grant.lease_id, grant.bootstrap_servers, grant.topic, p.partition, position, receiver)
        log.info("consumer.lease_granted", lease=grant.lease_id, epoch=grant.epoch, start=grant.start_offset)

    def _lose(self, ledger: LeaseLedger) -> None:
        """The lease is gone: stop reading it; what it had in flight is the next holder's to read again."""
        ledger.drop()
        self._fetch.remove(ledger.lease_id)

    def _lose_all(self) -> None:
        with self._ledgers_lock:
            ledgers, self._ledgers = list(self._ledgers.values()), {}
        for ledger in ledgers:
            self._lose(ledger)

    def _release(self, ledger: LeaseLedger) -> None:
        """Hand a revoked lease back (what was done is committed)."""
        with self._ledgers_lock:
            if self._ledgers.get(ledger.lease_id) is ledger:
                del self._ledgers[ledger.lease_id]
        self._lose(ledger)
        session = self._session
        if session is not None:
            session.release(ledger.lease_id, ledger.epoch)

    def _end(self, error: StreamplaneError) -> None:
        """End this consumer loudly for an error no retry heals (a credential refused for good, a permission it
        lacks, a background thread's bug): `run()`, `run_batches()` and the iterator raise `error`, and the
        consumer closes (on a thread of its own, as its caller may be one of the threads close() waits for),
        so the group regrants its leases at once instead of waiting for work that will not be done."""
        if self._fatal is not None or self._closed.is_set():
            return
        self._fatal = error
        metrics.ENDED.labels(type(error).__name__).inc()
        log.error("consumer.ended", group=self.group, worker=self.worker_id, error=error.message)
        self._work.put(_STOP)
        threading.Thread(target=self.close, name="consumer-end", daemon=True).start()

    def lease_failed(self, ledger: LeaseLedger, error: StreamplaneError) -> None:
        """The fetch loop cannot read this lease (bad credentials, a broker refusing our versions): give it
        back; an authentication error also ends `run()` and the iterator with that error."""
        log.error("consumer.lease_failed", lease=ledger.lease_id, error=error.message)
        if isinstance(error, KafkaAuthenticationError):
            self._fatal = error
            self._work.put(_STOP)
        self._release(ledger)

    # -- what ledgers use
    def _start(self, mode: str) -> None:
        """Fetching starts with the first way of consuming asked for; records are then delivered that way."""
        with self._mode_lock:
            if self.mode and self.mode != mode:
                raise InvalidArgumentError(
                    f"this consumer delivers {self.mode}; run_batches() and run()/iteration cannot be mixed"
                )
            if not self.mode:
                self.mode = mode
                self._fetch.start()

    def deliver(self, items: list[Any]) -> None:
        """Queue what was read for the handlers: records in chunks (run() deals them out by key when
        ordering by key), batches one by one."""
        if items and isinstance(items[0], Batch):
            for batch in items:
                self._work.put(batch)
            return
        for i in range(0, len(items), CHUNK):
            self._work.put(items[i : i + CHUNK])

    def send_to_dlq(self, ledger: LeaseLedger, copy: ToCopy) -> None:
        """Copy a rejected record to its stream's dlq lane (the commit log counted the copy already); it is
        marked rejected once the copy is stored. The copy says where it came from, and which copy it is."""
        msg, reason = copy.msg, copy.reason
        origin = (ledger.stream, ledger.lane, str(ledger.generation), str(ledger.partition), str(msg.offset))
        headers = [(k, v) for k, v in msg.headers if not k.startswith(("sp-origin-", "sp-dlq-"))]
        headers += [(name, value.encode()) for name, value in zip(ORIGIN_HEADERS, origin, strict=True)]
        headers += [
            (REASON_HEADER, reason[:1000].encode()),
            ("sp-origin-ingest-ms", str(msg.timestamp).encode()),
            (ATTEMPT_HEADER, str(msg.attempt).encode()),
            (COPY_HEADER, str(copy.copy).encode()),
        ]

        def stored(err: Any, kmsg: Any) -> None:
            with self._dlq_lock:
                if self._copying.pop(id(msg), None) is None:
                    return  # its producer was replaced meanwhile: the copy was failed then, and is made again
            if err is not None:
                metrics.DLQ_COPY_FAILURES.labels(self.group, ledger.stream).inc()
                log.error("consumer.dlq_failed", lease=ledger.lease_id, offset=msg.offset, error=str(err))
                ledger.copy_failed(msg)  # copied again at the next retry check here, or by the next holder
                return
            route = producer.route(ledger.stream, "dlq")  # the producer that made the copy
            where = DlqLocation(
                stream=ledger.stream,
                lane="dlq",
                generation=route.generation if route.topic == kmsg.topic() else 0,
                partition=kmsg.partition(),
                offset=kmsg.offset(),
            )
            ledger.rejected(msg, reason, where)

        metrics.REJECTS.labels(*ledger.labels).inc()
        producer = self._dlq_producer()
        with self._dlq_lock:
            self._copying[id(msg)] = (ledger, msg)
        try:
            producer.produce(ledger.stream, msg.value, key=msg.key, lane="dlq", headers=headers, on_delivery=stored)
        except StreamplaneError:
            with self._dlq_lock:
                self._copying.pop(id(msg), None)
            raise

    def changed(self, ledger: LeaseLedger) -> None:
        self.active.add(ledger)

    def _replace_dlq_producer(self) -> None:
        try:
            self._dlq_producer()
        except StreamplaneError as err:  # a credential refused for good: no copy can be made
            self._end(err)

    def _dlq_producer(self) -> Producer:
        """Idempotent, so that librdkafka's own retries of a copy (a broker down, a timeout) add no copy. One
        that ended on its own is replaced: detached under the lock and closed outside it (its delivery
        callbacks take the lock), its unreported copies failed so they are made again; unless its credential
        is refused for good, which raises."""
        ended: Producer | None = None
        with self._dlq_lock:
            if self._dlq is not None and self._dlq.error is not None:
                ended, self._dlq = self._dlq, None
                pending, self._copying = list(self._copying.values()), {}
        if ended is not None and ended.error is not None:
            for ledger, msg in pending:
                ledger.copy_failed(msg)
            ended.close(0)  # its callbacks now find their copies gone: they do nothing
            if self.client.credentials.refused(ended.error):
                raise ended.error
            log.warning("consumer.dlq_producer_replaced", error=ended.error.message)
        with self._dlq_lock:
            if self._dlq is None:
                config = {
                    "linger.ms": 5,
                    **self.kafka_config,
                    "enable.idempotence": True,
                    "message.timeout.ms": DLQ_COPY_TIMEOUT_MS,  # over by then: see the commit log's copy rule
                }
                self._dlq = Producer(self._coordinator, token=self.client.credentials, tls=self.config.tls, **config)
            return self._dlq

    # -- commits, revokes, retries and load reports: one thread for every lease
    def _commit_loop(self) -> None:
        next_load = next_retries = 0.0
        while not self._closed.wait(self.commit_interval_s):
            active = list(self.active)  # the leases that read, ended records or are revoking: idle ones cost nothing
            done_revoking = self._revokes_done(active)
            self.commit(active)
            for ledger in done_revoking:
                if not ledger.dirty:  # else its commit failed (its replica died, say): tried again next round
                    self._release(ledger)
            for ledger in active:
                if ledger.lost or ledger.quiet:
                    self.active.discard(ledger)
                    if not ledger.lost and not ledger.quiet:  # it read again meanwhile: keep it
                        self.active.add(ledger)
            now = self.clock.monotonic()
            if now >= next_retries or now >= next_load:
                with self._ledgers_lock:
                    ledgers = list(self._ledgers.values())
            if now >= next_retries:
                next_retries = now + RETRY_CHECK_S
                if self._dlq is not None and self._dlq.error is not None:
                    self._replace_dlq_producer()  # its unreported copies are failed now, and made again
                self._due_retries([x for x in ledgers if x.may_have_retries and not x.lost])
            if now >= next_load:
                next_load = now + LOAD_REPORT_S
                self._report_load(ledgers)

    def _revokes_done(self, ledgers: list[LeaseLedger]) -> list[LeaseLedger]:
        """Revoking leases whose in-flight work has ended, or whose deadline is near: commit and hand back. None
        while the session is being resumed: a release cannot be sent then, and the group's new owner may give the
        lease a later deadline (told with the resumed session's grants) if the old one died with its replica."""
        if not self._connected.is_set():
            return []
        now = self.clock.now_ms() / 1000
        return [
            x
            for x in ledgers
            if x.revoke_deadline and not x.lost and (not x.busy or now >= x.revoke_deadline - REVOKE_MARGIN_S)
        ]

    def commit(self, ledgers: list[LeaseLedger]) -> None:
        """Commit what changed on these leases, in as few calls as the batch limit allows (outcomes are kept
        for the next try when a call fails)."""
        pending: list[tuple[LeaseLedger, Outcomes, LeaseCommit]] = []
        for ledger in ledgers:
            if ledger.lost or not (ledger.dirty or ledger.in_hand):
                continue  # an idle lease: nothing to look at
            taken = ledger.take_outcomes()
            if taken is not None:
                out, oldest = taken
                pending.append((ledger, out, self._request(ledger, out, oldest)))
        for i in range(0, len(pending), MAX_COMMIT_LEASES):
            self._commit_batch(pending[i : i + MAX_COMMIT_LEASES])

    def _request(self, ledger: LeaseLedger, out: Outcomes, oldest: int) -> LeaseCommit:
        ranges = to_ranges(out.acked)
        bitmap, base = b"", 0
        if len(ranges) > 4096:  # scattered acks: a bitmap is smaller than that many ranges
            (bitmap, base), ranges = to_bitmap(out.acked), []
        commit = Commit(
            acked=ranges + out.ranges,
            retries=out.retries,
            rejects=out.rejects,
            oldest_pending_ts_ms=oldest,
            high_watermark=ledger.high_watermark,
            high_watermark_ts_ms=ledger.last_ts,
            acked_bitmap=bitmap,
            acked_bitmap_base=base,
            copying=out.copying,
        )
        return LeaseCommit(ledger.lease_id, ledger.epoch, commit)

    def _commit_batch(self, batch: list[tuple[LeaseLedger, Outcomes, LeaseCommit]]) -> None:
        try:
            outcomes = self.client.commit_batch(self.group, [r for _, _, r in batch], session_id=self._session_id)
        except StreamplaneError as err:
            for ledger, out, _ in batch:
                ledger.put_back(out)
            metrics.COMMIT_FAILURES.labels(self.group).inc()
            if self.client.credentials.refused(err):
                self._end(err)
                return
            log.warning("consumer.commit_failed", leases=len(batch), error=err.message)
            return
        now_ms = self.clock.now_ms()
        for (ledger, out, request), result in zip(batch, outcomes, strict=True):
            error = result.error
            if error is not None:
                if isinstance(error, FencedError):
                    log.info("consumer.lease_fenced", lease=ledger.lease_id, epoch=ledger.epoch)
                    with self._ledgers_lock:
                        if self._ledgers.get(ledger.lease_id) is ledger:
                            del self._ledgers[ledger.lease_id]
                    self._lose(ledger)
                else:
                    log.warning("consumer.commit_refused", lease=ledger.lease_id, error=error.message)
                    ledger.put_back(out)
                continue
            labels = ledger.labels
            metrics.ACKS.labels(*labels).inc(len(out.acked) + out.batch_acked)
            metrics.RETRIES.labels(*labels).inc(len(out.retries))
            oldest = request.commit.oldest_pending_ts_ms
            metrics.TIME_LAG.labels(self.group, ledger.lease_id).set(max(0, now_ms - oldest) / 1000 if oldest else 0)
            ledger.may_have_retries = result.retries > 0 or (ledger.may_have_retries and bool(out.retries))
            for copy in ledger.committed(out, result.copies):
                try:
                    self.send_to_dlq(ledger, copy)
                except StreamplaneError as err:  # the copy waits: made again at the next retry check here
                    ledger.copy_failed(copy.msg)
                    if self.client.credentials.refused(err):
                        self._end(err)
                        return
                    log.warning("consumer.dlq_unavailable", lease=ledger.lease_id, error=err.message)

    def _due_retries(self, ledgers: list[LeaseLedger]) -> None:
        """Re-read records whose retry is due, and reject exhausted ones a previous holder left."""
        for ledger in ledgers:
            try:
                due = self.client.due_retries(self.group, ledger.lease_id, ledger.epoch, limit=200)
            except FencedError:
                continue  # the next commit finds it fenced and drops it
            except StreamplaneError as err:  # the coordinator is away: live records go on
                log.info("consumer.retries_unavailable", lease=ledger.lease_id, error=err.message)
                return
            busy = ledger.busy_offsets()
            want = {d.offset: d for d in due if d.offset not in busy}
            if want:
                self._read_retries(ledger, want)

    def _read_retries(self, ledger: LeaseLedger, want: dict[int, Any]) -> None:
        def got(fetched: Fetched | None, error: StreamplaneError | None) -> None:
            if fetched is None or ledger.lost:
                return  # tried again at the next check
            before = len(want)
            found, _ = ledger.retried(fetched, want)
            if found:
                self.deliver(found)
            if want and len(want) < before:
                self._fetch.fetch_at(ledger.lease_id, min(want), got)

        self._fetch.fetch_at(ledger.lease_id, min(want), got)

    def _report_load(self, ledgers: list[LeaseLedger]) -> None:
        """Tell the Assigner the throughput and lag of each lease whose load changed: it balances by them."""
        session = self._session
        if session is None:
            return
        now_s = self.clock.monotonic()
        now_ms = self.clock.now_ms()
        total = 0.0
        changed: dict[str, LeaseLoad] = {}
        for x in ledgers:
            if x.lost:
                continue
            last = self._loads.get(x.lease_id)
            if last is not None and x.idle and not (last.records_per_s or last.lag_records or last.lag_ms):
                continue  # idle before and now: nothing to compute, nothing to tell
            rate = x.take_rate(now_s)
            total += rate
            oldest = x.oldest_pending_ts()
            load = LeaseLoad(rate, x.records_behind(), max(0, now_ms - oldest) if oldest else 0)
            if last is None or _changed(last, load):
                self._loads[x.lease_id] = load
                changed[x.lease_id] = load
        live = {x.lease_id for x in ledgers}
        for lid in [lid for lid in self._loads if lid not in live]:
            del self._loads[lid]
        errors = [
            ClusterErrors(self._cluster_names.get(bootstrap, bootstrap)[:64], count, last)
            for bootstrap, (count, last) in self._fetch.take_errors().items()
        ]
        session.report_load(records_per_s=total, leases=changed, errors=errors)

    # -- the two APIs
    def __iter__(self) -> Iterator[Message]:
        """Records as they arrive, until `close()`; end each with ack(), retry() or reject()."""
        self._start("records")
        while True:
            item = self._work.get()
            if item is _STOP:
                self._work.put(_STOP)
                if self._fatal is not None:
                    raise self._fatal
                return
            now = self.clock.now_ms() / 1000
            for msg in item:
                if not self._connected.is_set():
                    self._await_session()
                    now = self.clock.now_ms() / 1000
                if not msg._reader.live(now):
                    msg._reader.forget(msg)  # its lease is gone or past its deadline: the next holder reads it
                    continue
                yield msg

    def run(self, handler: Callable[[Message], Any], *, stop: threading.Event | None = None) -> None:
        """Call `handler(msg)` for every record on `concurrency` threads until `close()` (or `stop` is set).

        Returning acks the record unless the handler ended it itself; raising retries it (after
        retry_backoff_s), and after the group's max attempts rejects it to the dlq lane.
        """
        self._start("records")

        connected = self._connected

        def handle(item: list[Message]) -> None:
            ledger = item[0]._reader
            for i, msg in enumerate(item):
                if not connected.is_set():
                    self._await_session()
                # lost, or near its revoke deadline: hand nothing more out (the ones handled are acked below)
                if ledger.lost or (ledger.revoke_deadline and not ledger.live(self.clock.now_ms() / 1000)):
                    for rest in item[i:]:
                        if rest._outcome is PENDING:
                            ledger.forget(rest)
                    break
                try:
                    handler(msg)
                except Exception as err:  # the handler's failure is the record's retry
                    if msg._outcome is PENDING:
                        msg.retry(err)
            ledger.ack_many(item)  # what the handler did not end itself

        self._serve(handle, stop, by_key=self.ordering == "key")

    def run_batches(
        self, handler: Callable[[Any], BatchOutcome | None], *, stop: threading.Event | None = None
    ) -> None:
        """Call `handler(batch)` with pyarrow.RecordBatches of one lease each (columns stream, lane, generation,
        partition, offset, timestamp, key, value, headers, attempt) on `concurrency` threads, until `close()`
        (or `stop` is set). The path for pipelines where a Python object per record costs more than the work.

        Returning None acks the whole batch; a BatchOutcome retries or rejects the offsets it names and acks
        the rest; raising retries the whole batch (and after the group's max attempts, rejects its records).
        """
        if self.ordering != "none":
            raise InvalidArgumentError("ordering='key' is for run(); run_batches hands out whole batches")
        self._start("batches")
        self._serve(lambda item: self._handle_batch(handler, item), stop, by_key=False)

    def _serve(self, handle: Callable[[Any], None], stop: threading.Event | None, *, by_key: bool) -> None:
        """Run `handle` over what is delivered on `concurrency` threads (this one among them), until `close()`
        or `stop`. By key, this thread deals records out by key hash, so one key stays on one thread."""
        halt = threading.Event()

        def stopped() -> bool:
            return halt.is_set() or (stop is not None and stop.is_set())

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

        if by_key:
            queues: list[queue.Queue[Any]] = [ByPriority(self._priority_of) for _ in range(self.concurrency)]
        else:  # every thread takes from the shared queue; this one too
            queues = [self._work] * (self.concurrency - 1)
        threads = [
            threading.Thread(target=work, args=(q,), name=f"handler-{i}", daemon=True) for i, q in enumerate(queues)
        ]
        for t in threads:
            t.start()
        try:
            if by_key:
                self._deal_by_key(queues, stopped)
            else:
                work(self._work)
        finally:
            halt.set()
            for t in threads:
                t.join()
        if self._fatal is not None:
            raise self._fatal

    def _handle_batch(self, handler: Callable[[Any], BatchOutcome | None], item: Any) -> None:
        self._await_session()
        if isinstance(item, Batch):
            ledger = item.ledger
            if not ledger.live(self.clock.now_ms() / 1000):
                ledger.forget_batch(item)
                return
            try:
                outcome = handler(item.to_arrow())
            except Exception as err:  # the handler's failure is every record's retry
                outcome = BatchOutcome(retry=dict.fromkeys(item.offsets, _text(err)))
            ledger.finish_batch(item, outcome)
            return
        # records re-read for a due retry come as messages: handed over as one batch too
        ledger = item[0]._reader
        if not ledger.live(self.clock.now_ms() / 1000):
            for msg in item:
                ledger.forget(msg)
            return
        try:
            outcome = handler(_messages_to_arrow(item))
        except Exception as err:
            outcome = BatchOutcome(retry={m.offset: _text(err) for m in item})
        for msg in item:
            if outcome is not None and msg.offset in outcome.retry:
                msg.retry(outcome.retry[msg.offset], outcome.backoff_s)
            elif outcome is not None and msg.offset in outcome.reject:
                msg.reject(outcome.reject[msg.offset] or "rejected")
        ledger.ack_many(item)

    def _forget(self, item: Any) -> None:
        if isinstance(item, Batch):
            item.ledger.forget_batch(item)
        elif item is not _STOP:
            for msg in item:
                msg._reader.forget(msg)

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
        with self._close_lock:
            self._close(timeout_s)

    def _close(self, timeout_s: float) -> None:
        if self._closed.is_set():
            return
        self._fetch.close()
        with self._ledgers_lock:
            ledgers = list(self._ledgers.values())
        while True:  # records still queued were never handed out: nothing to wait for
            try:
                item = self._work.get_nowait()
            except queue.Empty:
                break
            self._forget(item)
        deadline = self.clock.monotonic() + timeout_s
        while self.clock.monotonic() < deadline and any(x.in_hand for x in ledgers if not x.lost):
            time.sleep(0.02)
        if self._dlq is not None:
            self._dlq.flush(max(0.0, deadline - self.clock.monotonic()))
        self._closed.set()
        if threading.current_thread() is not self._threads[1]:
            self._threads[1].join(timeout=5)  # the committer: no commit may race the final one or the close
        try:
            self.commit(ledgers)
        except Exception:  # whatever failed, the session below is still closed: the leases must not linger
            log.exception("consumer.final_commit_failed", group=self.group, worker=self.worker_id)
        self._work.put(_STOP)
        for x in ledgers:
            x.drop()
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
    def error(self) -> StreamplaneError | None:
        """Why this consumer ended on its own (a credential refused for good, a permission it lacks, a thread's
        bug), or None while it runs or after a plain close(); `run()` and the iterator raise it."""
        return self._fatal

    @property
    def leases(self) -> list[str]:
        """The leases this member reads now."""
        with self._ledgers_lock:
            return sorted(lid for lid, x in self._ledgers.items() if not x.lost)

    @property
    def connections(self) -> int:
        """Connections to Kafka brokers open now (one per broker read from, whatever the lease count)."""
        return self._fetch.connections


__all__ = ["BatchOutcome", "Consumer", "ConsumerConfig", "Message"]
