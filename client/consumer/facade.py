"""`Consumer`: what application code holds. It builds the consumer's parts and wires them together:

- `membership`: the group session and the leases it grants (one thread);
- `fetch_loop`: every lease read through one connection per broker (one thread);
- `ledger`: per lease, every record from fetch to outcome;
- `committer` and `dlq`: commits, revokes, retries, load reports and dlq copies (one thread);
- `dispatch`: the three ways to consume (iteration, `run`, `run_batches`).
"""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import structlog

from streamplane.client import metrics
from streamplane.client.background import start_thread
from streamplane.client.config import ConsumerConfig
from streamplane.client.consumer.committer import Committer
from streamplane.client.consumer.dispatch import Dispatch
from streamplane.client.consumer.dlq import DlqCopier
from streamplane.client.consumer.fetch_loop import FetchLoop
from streamplane.client.consumer.ledger import GrantedLease, LeaseLedger
from streamplane.client.consumer.membership import Membership
from streamplane.client.consumer.message import BatchOutcome, Message
from streamplane.client.coordinator import CoordinatorClient
from streamplane.client.flow import Budget
from streamplane.client.kafka import ConnectionConfig
from streamplane.clock import SYSTEM, Clock
from streamplane.errors import StreamplaneError
from streamplane.native import compile_where

log = structlog.get_logger(__name__)


class Consumer:
    """Consumes one stream's lanes as a member of a group.

    Args:
        coordinator: host:port of a coordinator replica (default STREAMPLANE_COORDINATOR or 127.0.0.1:7400).
        group: the consumer group.
        stream: the stream to read.
        lanes: lanes to read; default every lane but dlq.
        config: the consumer's settings (ConsumerConfig); its fields may also be given as keywords, as
            `where="header(service) = 'api' and key ^= 'us-'"`: records the predicate does not match are left out
            in the decoder, never reach the handler, the iterator or a batch, and are committed as done.
        clock: its time: revoke deadlines, retry due times, rates and commit pacing (a ManualClock in tests).

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
        cfg = self.config = ConsumerConfig.build(config, settings)
        where = compile_where(cfg.where) if cfg.where else None  # a bad one is refused before anything starts
        self.group, self.stream = group, stream
        self.worker_id = cfg.worker_id or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self.budget = Budget(cfg.max_in_flight, cfg.max_buffered_bytes)
        self.client = CoordinatorClient(coordinator, token=cfg.token, tls=cfg.tls)
        described = self.client.describe_stream(stream)
        for lane in lanes:
            described.require_lane(lane)  # NotFoundError for a lane the stream lacks
        self._closed = threading.Event()
        connected = threading.Event()  # cleared while the group session is being resumed
        connected.set()
        self._close_lock = threading.Lock()
        kafka_config = dict(cfg.kafka_config or {})
        self._fetch = FetchLoop(
            budget=self.budget,
            max_decompressed=cfg.max_decompressed,
            partition_max_bytes=cfg.partition_max_bytes,
            read_committed=cfg.isolation_level == "read_committed",
            where=where,
            default_config=ConnectionConfig.from_settings(kafka_config),
            on_crash=self._end,
            clock=clock,
        )
        self.dispatch = Dispatch(
            concurrency=cfg.concurrency,
            ordering=cfg.ordering,
            priorities={lane.name: lane.priority for lane in described.lanes},
            connected=connected,
            closed=self._closed,
            clock=clock,
            start_fetching=self._fetch.start,
        )
        self.dlq = DlqCopier(self.client, group, kafka_config, cfg.tls)
        self.membership = Membership(
            client=self.client,
            group=group,
            stream=stream,
            lanes=list(lanes),
            worker_id=self.worker_id,
            tls=cfg.tls,
            fetch=self._fetch,
            dispatch=self.dispatch,
            new_ledger=self._new_ledger,
            start_from_latest=cfg.start == "latest",
            connected=connected,
            closed=self._closed,
            end=self._end,
        )
        self.committer = Committer(
            client=self.client,
            group=group,
            membership=self.membership,
            fetch=self._fetch,
            dlq=self.dlq,
            dispatch=self.dispatch,
            clock=clock,
            commit_interval_s=cfg.commit_interval_s,
            retry_backoff_s=cfg.retry_backoff_s,
            closed=self._closed,
            end=self._end,
        )
        self.membership.join()  # an unreachable coordinator or an unknown stream fails here
        if cfg.metrics_port:
            metrics.serve(cfg.metrics_port)
        self._threads = [
            start_thread("consumer-session", self.membership.loop, self._end),
            start_thread("consumer-commits", self.committer.loop, self._end),
        ]

    def _new_ledger(self, lease: GrantedLease) -> LeaseLedger:
        return LeaseLedger(self.committer, lease, self.budget, self.group)

    def _end(self, error: StreamplaneError) -> None:
        """End this consumer loudly for an error no retry heals (a credential refused for good, a permission it
        lacks, a background thread's bug): `run()`, `run_batches()` and the iterator raise `error`, and the
        consumer closes (on a thread of its own, as its caller may be one of the threads close() waits for),
        so the group regrants its leases at once instead of waiting for work that will not be done."""
        if self.dispatch.fatal is not None or self._closed.is_set():
            return
        metrics.ENDED.labels(type(error).__name__).inc()
        log.error("consumer.ended", group=self.group, worker=self.worker_id, error=error.message)
        self.dispatch.stop(error)
        threading.Thread(target=self.close, name="consumer-end", daemon=True).start()

    @property
    def finished(self) -> bool:
        """Whether the group's replay window is processed to its end (then `run()` returned by itself)."""
        return self.membership.finished

    # -- the three APIs
    def __iter__(self) -> Iterator[Message]:
        """Records as they arrive, until `close()`; end each with ack(), retry() or reject()."""
        return self.dispatch.records()

    def run(self, handler: Callable[[Message], Any], *, stop: threading.Event | None = None) -> None:
        """Call `handler(msg)` for every record on `concurrency` threads until `close()` (or `stop` is set, or the
        group's replay window is processed to its end: a side group made with `group create --from`).

        Returning acks the record unless the handler ended it itself; raising retries it (after
        retry_backoff_s), and after the group's max attempts rejects it to the dlq lane.
        """
        self.dispatch.run(handler, stop)

    def run_batches(
        self, handler: Callable[[Any], BatchOutcome | None], *, stop: threading.Event | None = None
    ) -> None:
        """Call `handler(batch)` with pyarrow.RecordBatches of one lease each (columns stream, lane, generation,
        partition, offset, timestamp, key, value, headers, attempt) on `concurrency` threads, until `close()`
        (or `stop` is set). The path for pipelines where a Python object per record costs more than the work.

        Returning None acks the whole batch; a BatchOutcome retries or rejects the offsets it names and acks
        the rest; raising retries the whole batch (and after the group's max attempts, rejects its records).
        """
        self.dispatch.run_batches(handler, stop)

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
        ledgers = self.membership.ledgers()
        self.dispatch.forget_queued()  # records still queued were never handed out: nothing to wait for
        deadline = self.clock.monotonic() + timeout_s
        while self.clock.monotonic() < deadline and any(x.in_hand for x in ledgers if not x.lost):
            time.sleep(0.02)  # handler threads finishing what they hold: nothing to wake us when they do
        self.dlq.flush(max(0.0, deadline - self.clock.monotonic()))
        self._closed.set()
        if threading.current_thread() is not self._threads[1]:
            self._threads[1].join(timeout=5)  # the committer: no commit may race the final one or the close
        try:
            self.committer.commit(ledgers)
        except Exception:  # whatever failed, the session below is still closed: the leases must not linger
            log.exception("consumer.final_commit_failed", group=self.group, worker=self.worker_id)
        self.dispatch.stop()
        for x in ledgers:
            x.drop()
        self.membership.close()
        self.dlq.close(1.0)
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
        return self.dispatch.fatal

    @property
    def leases(self) -> list[str]:
        """The leases this member reads now."""
        return self.membership.leases()

    @property
    def connections(self) -> int:
        """Connections to Kafka brokers open now (one per broker read from, whatever the lease count)."""
        return self._fetch.connections
