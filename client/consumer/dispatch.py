"""Handing what was read to application code: the consumer's three APIs (iteration, `run`, `run_batches`).

The fetch loop delivers records in chunks (or decoded batches) into one work queue, higher-priority lanes
first; handler threads take from it. By key, one thread deals records out by key hash so a key stays on one
thread. Nothing of a lost or revoked-past-its-deadline lease reaches a handler: `live` is checked as each
item is handed out.
"""

from __future__ import annotations

import queue
import threading
import zlib
from collections.abc import Callable, Iterator
from typing import Any

from streamplane.client.consumer.ledger import Batch
from streamplane.client.consumer.message import PENDING, BatchOutcome, Message, _text
from streamplane.client.flow import ByPriority
from streamplane.clock import Clock
from streamplane.errors import InvalidArgumentError, StreamplaneError

CHUNK = 256
"""Records queued together for one handler thread (at 64, run() of a trivial handler took half as many records
a second: `benchmarks/scale.py --quick`)."""
FIRST_CHUNK = 16
"""Records of a grant's first delivery queued ahead of the rest of it, in a chunk of their own."""
STOP = object()
"""The marker that ends every handler thread (put back by each one that takes it, for the others)."""
BATCH_COLUMNS = (
    *("stream", "lane", "generation", "partition"),
    *("offset", "timestamp", "key", "value", "headers", "attempt"),
)
"""The columns of the batches `run_batches` hands out."""


def messages_to_arrow(msgs: list[Message]) -> Any:
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


def _forget(item: Any) -> None:
    """Give back a queued item never handed out (its records are read again by whoever holds the lease)."""
    if isinstance(item, Batch):
        item.ledger.forget_batch(item)
    elif item is not STOP:
        for msg in item:
            msg._ledger.forget(msg)


class Dispatch:
    """The work queue and the handler threads over it.

    Args:
        concurrency: handler threads `run` and `run_batches` use (the calling thread among them).
        ordering: "key" keeps one key on one thread in `run`; "none" does not.
        priorities: each lane's priority ({lane: priority}); higher is taken first.
        connected: set while the group session is up; handing out waits while it is not.
        clock: the consumer's time (revoke deadlines).
        start_fetching: called once, by the first way of consuming asked for.
    """

    def __init__(
        self,
        *,
        concurrency: int,
        ordering: str,
        priorities: dict[str, int],
        connected: threading.Event,
        closed: threading.Event,
        clock: Clock,
        start_fetching: Callable[[], None],
    ) -> None:
        self.concurrency, self.ordering, self.clock = concurrency, ordering, clock
        self._priorities = priorities
        self._connected, self._closed = connected, closed
        self._start_fetching = start_fetching
        self._work: queue.Queue[Any] = ByPriority(self._key_of)
        self.mode = ""
        """"records" or "batches": set by the first of run(), iteration, run_batches()."""
        self._mode_lock = threading.Lock()
        self.fatal: StreamplaneError | None = None
        """Why handing out ended on its own; the APIs raise it."""

    def _key_of(self, item: Any) -> tuple[int, object]:
        """The handlers take records of higher-priority lanes first (the stop marker before anything), and
        within a priority the leases' records by turns (owned by lease id: the queue keeps no ledger alive)."""
        if item is STOP:
            return 1 << 30, None
        ledger = item.ledger if isinstance(item, Batch) else item[0]._ledger
        return self._priorities.get(ledger.lane, 0), ledger.lease_id

    def start(self, mode: str) -> None:
        """Fetching starts with the first way of consuming asked for; records are then delivered that way."""
        with self._mode_lock:
            if self.mode and self.mode != mode:
                raise InvalidArgumentError(
                    f"this consumer delivers {self.mode}; run_batches() and run()/iteration cannot be mixed"
                )
            if not self.mode:
                self.mode = mode
                self._start_fetching()

    def deliver(self, items: list[Any], *, first: bool = False) -> None:
        """Queue what was read for the handlers: records in chunks (run() deals them out by key when
        ordering by key), batches one by one. The `first` records of a grant start with a short chunk: the
        leases take turns in the queue, so every lease granted together (a rewind, a failover, a rebalance)
        has its first records handled before any has all of its backlog handled."""
        if items and isinstance(items[0], Batch):
            for batch in items:
                self._work.put(batch)
            return
        start = 0
        if first and len(items) > FIRST_CHUNK:
            self._work.put(items[:FIRST_CHUNK])
            start = FIRST_CHUNK
        for i in range(start, len(items), CHUNK):
            self._work.put(items[i : i + CHUNK])

    def stop(self, error: StreamplaneError | None = None) -> None:
        """End every handler thread and the iterator; with `error`, they raise it."""
        if error is not None:
            self.fatal = error
        self._work.put(STOP)

    def forget_queued(self) -> None:
        """Give back what is queued and was never handed out: nothing to wait for at close."""
        while True:
            try:
                item = self._work.get_nowait()
            except queue.Empty:
                return
            _forget(item)

    def await_session(self) -> None:
        """Hold a handler thread while the session is being resumed (its leases may be gone when it is not)."""
        while not self._connected.wait(0.1) and not self._closed.is_set():
            pass

    def _now_s(self) -> float:
        return self.clock.now_ms() / 1000

    # -- the three APIs
    def records(self) -> Iterator[Message]:
        """Records as they arrive, until the consumer closes."""
        self.start("records")
        while True:
            item = self._work.get()
            if item is STOP:
                self._work.put(STOP)
                if self.fatal is not None:
                    raise self.fatal
                return
            now = self._now_s()
            for msg in item:
                if not self._connected.is_set():
                    self.await_session()
                    now = self._now_s()
                if not msg._ledger.live(now):
                    msg._ledger.forget(msg)  # its lease is gone or past its deadline: the next holder reads it
                    continue
                yield msg

    def run(self, handler: Callable[[Message], Any], stop: threading.Event | None) -> None:
        """`handler(msg)` for every record; returning acks it unless the handler ended it, raising retries it."""
        self.start("records")
        connected = self._connected

        def handle(item: list[Message]) -> None:
            ledger = item[0]._ledger
            for i, msg in enumerate(item):
                if not connected.is_set():
                    self.await_session()
                # lost, or near its revoke deadline: hand nothing more out (the ones handled are acked below)
                if ledger.lost or (ledger.revoke_deadline and not ledger.live(self._now_s())):
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

    def run_batches(self, handler: Callable[[Any], BatchOutcome | None], stop: threading.Event | None) -> None:
        """`handler(batch)` with pyarrow.RecordBatches of one lease each; see Consumer.run_batches."""
        if self.ordering != "none":
            raise InvalidArgumentError("ordering='key' is for run(); run_batches hands out whole batches")
        self.start("batches")
        self._serve(lambda item: self._handle_batch(handler, item), stop, by_key=False)

    def _serve(self, handle: Callable[[Any], None], stop: threading.Event | None, *, by_key: bool) -> None:
        """Run `handle` over what is delivered on `concurrency` threads (this one among them), until close or
        `stop`. By key, this thread deals records out by key hash, so one key stays on one thread."""
        halt = threading.Event()

        def stopped() -> bool:
            return halt.is_set() or (stop is not None and stop.is_set())

        def work(source: queue.Queue[Any]) -> None:
            while not stopped():
                try:
                    item = source.get(timeout=0.1)
                except queue.Empty:
                    continue
                if item is STOP:
                    source.put(STOP)  # for the other threads
                    return
                handle(item)

        if by_key:
            queues: list[queue.Queue[Any]] = [ByPriority(self._key_of) for _ in range(self.concurrency)]
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
        if self.fatal is not None:
            raise self.fatal

    def _handle_batch(self, handler: Callable[[Any], BatchOutcome | None], item: Any) -> None:
        self.await_session()
        if isinstance(item, Batch):
            ledger = item.ledger
            if not ledger.live(self._now_s()):
                ledger.forget_batch(item)
                return
            try:
                outcome = handler(item.to_arrow())
            except Exception as err:  # the handler's failure is every record's retry
                outcome = BatchOutcome(retry=dict.fromkeys(item.offsets, _text(err)))
            ledger.finish_batch(item, outcome)
            return
        # records re-read for a due retry come as messages: handed over as one batch too
        ledger = item[0]._ledger
        if not ledger.live(self._now_s()):
            for msg in item:
                ledger.forget(msg)
            return
        try:
            outcome = handler(messages_to_arrow(item))
        except Exception as err:
            outcome = BatchOutcome(retry={m.offset: _text(err) for m in item})
        for msg in item:
            if outcome is not None and msg.offset in outcome.retry:
                msg.retry(outcome.retry[msg.offset], outcome.backoff_s)
            elif outcome is not None and msg.offset in outcome.reject:
                msg.reject(outcome.reject[msg.offset] or "rejected")
        ledger.ack_many(item)

    def _deal_by_key(self, queues: list[queue.Queue[Any]], stopped: Callable[[], bool]) -> None:
        while not stopped():
            try:
                item = self._work.get(timeout=0.1)
            except queue.Empty:
                continue
            if item is STOP:
                self._work.put(STOP)
                for q in queues:
                    q.put(STOP)
                return
            parts: dict[int, list[Message]] = {}
            for msg in item:
                parts.setdefault(zlib.crc32(msg.key or b"") % len(queues), []).append(msg)
            for i, part in parts.items():
                queues[i].put(part)
