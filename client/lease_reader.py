"""Reading one leased partition: fetch and decode, track every record until its outcome, and turn outcomes
into commits.

A LeaseReader runs one thread. It fetches from the partition leader while the consumer's budget allows,
hands decoded records to the consumer, re-fetches records whose retry is due (live records go on
meanwhile), and steps over batches it cannot decode by rejecting their offsets. On a generation that is
sealed it stops at the end offset. On a revoke it stops fetching, waits for in-flight records until shortly
before the deadline, commits what is done and releases the lease; a lease that is gone stops at once.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import structlog

from streamplane.client import metrics
from streamplane.client.fetcher import PartitionFetcher
from streamplane.client.flow import Budget, Held
from streamplane.client.message import ACKED, PENDING, REJECTED, RETRIED, Message, OutcomeError
from streamplane.errors import FencedError, StreamplaneError
from streamplane.v1 import assigner_pb2 as apb
from streamplane.v1 import commitlog_pb2 as cpb
from streamplane.v1 import topology_pb2 as pb

if TYPE_CHECKING:
    from streamplane.client.consumer import Consumer

log = structlog.get_logger(__name__)

RECORD_OVERHEAD = 320
"""Bytes counted per decoded record beyond its key, value and headers (the Python objects around it)."""
REVOKE_MARGIN_S = 0.25
"""How long before a revoke deadline the reader stops waiting for in-flight records and commits."""
RETRY_CHECK_S = 0.5
GAVE_UP = "max attempts reached; last error"
"""Reject reason of a record whose retries used up the group's max attempts (the count lives in the commit
log, not here: a new holder may have read the record afresh)."""


@dataclass
class Outcomes:
    """What ended since the last commit."""

    acked: list[int]
    ranges: list[tuple[int, int]]
    retries: list[cpb.RetryEntry]
    rejects: list[cpb.RejectEntry]


def _release_all(msgs: list[Message]) -> None:
    """Give back the memory accounts of ended records, one call per batch."""
    counts: dict[int, list] = {}
    for m in msgs:
        held = m._held
        if held is not None:
            m._held = None
            entry = counts.get(id(held))
            if entry is None:
                counts[id(held)] = [held, 1]
            else:
                entry[1] += 1
    for held, n in counts.values():
        held.release(n)


def to_ranges(offsets: list[int]) -> list[tuple[int, int]]:
    """Sorted offsets as half-open [start, end) ranges."""
    out: list[tuple[int, int]] = []
    for o in sorted(offsets):
        if out and out[-1][1] == o:
            out[-1] = (out[-1][0], o + 1)
        elif not out or o >= out[-1][1]:
            out.append((o, o + 1))
    return out


class LeaseReader:
    """One lease of the consumer's session: its fetch thread, its in-flight records, its commits."""

    def __init__(self, consumer: Consumer, grant: apb.Grant) -> None:
        self.consumer = consumer
        self.lease_id = grant.lease_id
        self.epoch = grant.epoch
        p = grant.partition
        self.stream, self.lane, self.generation, self.partition = p.stream, p.lane, p.generation, p.partition
        self.topic, self.bootstrap_servers = grant.topic, grant.bootstrap_servers
        self.start_offset = grant.start_offset
        self.end_offset = grant.end_offset if grant.generation_state == pb.GENERATION_STATE_SEALED else -1
        self.budget: Budget = consumer.budget
        self.labels = (consumer.group, self.stream, self.lane)
        self._lock = threading.Lock()
        self.pending: dict[int, Message] = {}  # delivered, no outcome yet
        self._waiting: dict[int, Message] = {}  # retried or rejected, until the coordinator has recorded it
        self._out = Outcomes([], [], [], [])
        self._retrying: set[int] = set()  # offsets re-fetched for a due retry and not yet ended
        self.high_watermark = 0
        self.last_ts = 0
        self.position = -1
        self._lost = threading.Event()
        self._revoke_deadline = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"lease-{self.lease_id}", daemon=True)
        self._done_above: list[tuple[int, int]] = []
        self._fetched = 0
        self._rate_since = time.monotonic()

    # -- control (from the consumer's session thread)
    def start(self) -> None:
        self._thread.start()

    def revoke(self, deadline_unix_ms: int) -> None:
        """Finish in-flight work by the deadline, commit, release."""
        self._revoke_deadline = deadline_unix_ms / 1000

    def lose(self) -> None:
        """The lease is gone: stop at once; outcomes from now on are not recorded."""
        self._lost.set()
        self._stop.set()

    def stop(self) -> None:
        """Stop fetching (the consumer is closing); in-flight records may still end and be committed."""
        self._stop.set()

    @property
    def lost(self) -> bool:
        return self._lost.is_set()

    def seal(self, end_offset: int) -> None:
        self.end_offset = end_offset

    # -- outcomes (from application threads)
    def finish(self, msg: Message, outcome: str, *, error: str = "", backoff_s: float | None = None) -> None:
        with self._lock:
            if msg._outcome == outcome:
                return
            if msg._outcome != PENDING:
                raise OutcomeError(
                    f"record {self.lease_id}@{msg.offset} is already {msg._outcome}; cannot {outcome[:-2]}"
                )
            msg._outcome = outcome
            if self.pending.pop(msg.offset, None) is None or self._lost.is_set():
                self._release(msg)
                return
            if outcome == ACKED:
                self._out.acked.append(msg.offset)
                self._retrying.discard(msg.offset)
                self._release(msg)
                return
            self._waiting[msg.offset] = msg  # kept (and counted) until the coordinator has it
        if outcome == RETRIED:
            backoff = self.consumer.retry_backoff_s if backoff_s is None else max(0.0, backoff_s)
            entry = cpb.RetryEntry(offset=msg.offset, attempt=msg.attempt, error=error, backoff_ms=int(backoff * 1000))
            with self._lock:
                self._out.retries.append(entry)
        else:
            self.consumer.send_to_dlq(self, msg, error)

    def forget(self, msg: Message) -> None:
        """A delivered record the application never received (the consumer is closing): not recorded."""
        with self._lock:
            if self.pending.pop(msg.offset, None) is None:
                return
        self._release(msg)

    def rejected(self, msg: Message, reason: str, dlq: cpb.DlqLocation | None) -> None:
        """The record's copy is in the dlq lane (or it had none to copy): mark it rejected in the next commit."""
        with self._lock:
            self._out.rejects.append(cpb.RejectEntry(offset=msg.offset, reason=reason[:1000], dlq=dlq))

    def ack_many(self, msgs: list[Message]) -> None:
        """Ack every still-pending record of `msgs` at once (the handler API's path)."""
        released: list[Message] = []
        with self._lock:
            record = not self._lost.is_set()
            pending, acked, retrying = self.pending, self._out.acked, self._retrying
            for m in msgs:
                if m._outcome is PENDING:
                    m._outcome = ACKED
                    if pending.pop(m._record.offset, None) is not None and record:
                        acked.append(m._record.offset)
                    released.append(m)
            if retrying:
                retrying.difference_update(m._record.offset for m in released)
        _release_all(released)

    def _release(self, msg: Message) -> None:
        if msg._held is not None:
            msg._held.release()
            msg._held = None

    # -- the fetch thread
    def _run(self) -> None:
        fetcher: PartitionFetcher | None = None
        next_retry_check = 0.0
        try:
            fetcher = self.consumer.new_fetcher(self, self.start_offset)
            if self.start_offset >= 0:
                self._load_done_ranges()
            if fetcher.position < 0 and self.consumer.start_from_latest:
                fetcher.position = fetcher.offsets()[1]
            while not self._lost.is_set():
                if self._revoke_deadline:
                    if self._finish_revoke():
                        return
                    continue
                if self._stop.is_set():
                    return
                now = time.monotonic()
                if now >= next_retry_check:
                    next_retry_check = now + RETRY_CHECK_S
                    try:
                        self._due_retries()
                    except FencedError:
                        raise
                    except StreamplaneError as err:  # the coordinator is away: live records go on
                        log.info("lease.retries_unavailable", lease=self.lease_id, error=err.message)
                if 0 <= self.end_offset <= max(fetcher.position, 0):
                    self._stop.wait(0.1)
                    continue
                self._fetch_once(fetcher)
        except FencedError:
            self._lost.set()
        except StreamplaneError as err:
            log.warning("lease.reader_failed", lease=self.lease_id, error=err.message)
            self._lost.set()
            self.consumer.reader_failed(self)
        except Exception:
            log.exception("lease.reader_crashed", lease=self.lease_id)
            self._lost.set()
            self.consumer.reader_failed(self)
        finally:
            if fetcher is not None:
                fetcher.close()
            if self._lost.is_set():
                self._drop_pending()

    def _fetch_once(self, fetcher: PartitionFetcher) -> None:
        reserve = self.consumer.max_decompressed + fetcher.partition_max_bytes
        if not self.budget.reserve(reserve, 0.1):
            return
        used = 0
        count = 0
        try:
            before = fetcher.position
            got = fetcher.fetch()
            self.position = fetcher.position
            if got.high_watermark >= 0:
                self.high_watermark = got.high_watermark
            for s in got.skipped:
                self._reject_range(s.first_offset, s.next_offset, s.error.message)
            batch = got.batch
            delivered: list[Message] = []
            offsets: list[int] = []
            if batch is not None and batch.count:
                c = batch.columns
                used = sum(len(c[k]) for k in ("keys", "values", "hkeys", "hvalues")) + RECORD_OVERHEAD * batch.count
                records = list(batch.records())
                offsets = batch.offsets.tolist()
                if self.end_offset >= 0 and offsets[-1] >= self.end_offset:
                    records = [r for r in records if r.offset < self.end_offset]
                    offsets = offsets[: len(records)]
                if self._done_above:
                    records = self._not_done(records)
                    offsets = [r.offset for r in records]
                count = len(records)
                if count:
                    held = Held(self.budget, used, count)
                    delivered = [Message(self, r, 1, held) for r in records]
                    self.last_ts = records[-1].timestamp
                    metrics.RECORDS_IN.labels(*self.labels).inc(count)
                    metrics.FETCH_BYTES.labels(*self.labels).inc(batch.consumed)
                else:
                    used = 0
            gaps = self._gaps(before, fetcher.position, offsets if delivered else [], got.skipped)
        finally:
            self.budget.settle(reserve, used, count)
        with self._lock:
            if delivered:
                self.pending.update(zip(offsets, delivered, strict=True))
            self._out.ranges.extend(gaps)
        if delivered:
            self._fetched += len(delivered)
            self.consumer.deliver(delivered)

    def take_rate(self, now_s: float) -> float:
        """Records per second fetched since the last call."""
        n, self._fetched = self._fetched, 0
        elapsed, self._rate_since = now_s - self._rate_since, now_s
        return n / elapsed if elapsed > 0 else 0.0

    def _load_done_ranges(self) -> None:
        """Offsets above the low watermark a previous holder finished (past a retrying record, say): skipped,
        so a moved lease does not process them again."""
        progress = self.consumer.client.progress(self.consumer.group, self.lease_id, max_ranges=100_000)
        self._done_above = sorted((r.start, r.end) for r in progress.done if r.end > self.start_offset)

    def _not_done(self, records: list) -> list:
        ranges = self._done_above
        while ranges and records and ranges[0][1] <= records[0].offset:
            ranges.pop(0)
        if not ranges:
            return records
        out, i = [], 0
        for r in records:  # both sorted by offset: one merge walk
            while i < len(ranges) and ranges[i][1] <= r.offset:
                i += 1
            if i < len(ranges) and ranges[i][0] <= r.offset:
                continue
            out.append(r)
        return out

    def _gaps(self, before: int, after: int, offsets: list[int], skipped: list) -> list[tuple[int, int]]:
        """Offsets the fetch stepped over without a record (control batches, aborted or compacted records, or
        ones a previous holder finished): done by themselves."""
        if before < 0 or after <= before:
            return []
        if self.end_offset >= 0:
            after = min(after, self.end_offset)
        if len(offsets) + sum(s.next_offset - s.first_offset for s in skipped) >= after - before:
            return []
        covered = set(offsets)
        for s in skipped:
            covered.update(range(s.first_offset, s.next_offset))
        return to_ranges([o for o in range(before, after) if o not in covered])

    def _reject_range(self, first: int, end: int, reason: str) -> None:
        """A batch that cannot be decoded (corrupt, or a decompression bomb): reject its offsets, move on."""
        if self.end_offset >= 0:
            end = min(end, self.end_offset)
        metrics.DECODE_ERRORS.labels(*self.labels).inc()
        log.warning("lease.batch_rejected", lease=self.lease_id, first=first, end=end, reason=reason)
        text = f"undecodable batch [{first}, {end}): {reason}"[:1000]
        with self._lock:
            self._out.rejects.extend(cpb.RejectEntry(offset=o, reason=text) for o in range(first, end))
        metrics.REJECTS.labels(*self.labels).inc(max(0, end - first))

    def _due_retries(self) -> None:
        """Re-fetch records whose retry is due, and reject exhausted ones a previous holder left."""
        due = self.consumer.client.due_retries(self.consumer.group, self.lease_id, self.epoch, limit=200)
        with self._lock:
            busy = set(self.pending) | set(self._waiting) | self._retrying
        want = {d.offset: d for d in due if d.offset not in busy}
        if not want:
            return
        fetcher = self.consumer.new_fetcher(self, min(want))
        try:
            while want:
                reserve = self.consumer.max_decompressed + fetcher.partition_max_bytes
                if not self.budget.reserve(reserve, 1.0):
                    return
                used = count = 0
                found: list[Message] = []
                exhausted: list[tuple[Message, str]] = []
                try:
                    fetcher.position = min(want)
                    got = fetcher.fetch()
                    for s in got.skipped:
                        for o in range(s.first_offset, s.next_offset):
                            want.pop(o, None)
                    if got.batch is None or not got.batch.count:
                        if not got.skipped:
                            return  # nothing there (retention removed it): try again later
                        continue
                    records = [r for r in got.batch.records() if r.offset in want]
                    count = len(records)
                    used = RECORD_OVERHEAD * count + sum(len(r.value or b"") + len(r.key or b"") for r in records)
                    held = Held(self.budget, used, count) if count else None
                    for r in records:
                        state = want.pop(r.offset)
                        if state.exhausted:  # a previous holder used up its attempts and did not reject it
                            exhausted.append((Message(self, r, state.attempts, held), state.last_error))
                        else:
                            found.append(Message(self, r, state.attempts + 1, held))
                    last = got.batch.next_offset
                    for o in [o for o in want if o < last]:
                        want.pop(o)  # not in the log (aborted or compacted away)
                finally:
                    self.budget.settle(reserve, used, count)
                with self._lock:
                    for m in found + [m for m, _ in exhausted]:
                        self.pending[m.offset] = m
                    self._retrying.update(m.offset for m in found)
                for m, error in exhausted:
                    self.finish(m, REJECTED, error=f"{GAVE_UP}: {error}")
                if found:
                    self.consumer.deliver(found)
        finally:
            fetcher.close()

    # -- commits (from the consumer's committer thread)
    def take_outcomes(self) -> Outcomes:
        with self._lock:
            out, self._out = self._out, Outcomes([], [], [], [])
        return out

    def put_back(self, out: Outcomes) -> None:
        """A commit that failed: its outcomes go into the next one."""
        with self._lock:
            self._out.acked.extend(out.acked)
            self._out.ranges.extend(out.ranges)
            self._out.retries.extend(out.retries)
            self._out.rejects.extend(out.rejects)

    def oldest_pending_ts(self) -> int:
        """Ingestion time of the oldest record the live path has not finished (0: none); retries are tracked
        by the commit log's retry state instead, so a poison record does not hold the time lag up."""
        with self._lock:  # pending is in fetch order: the first live record is the oldest
            oldest = next((m for o, m in self.pending.items() if o not in self._retrying), None)
        if oldest is not None:
            return oldest.timestamp
        if self.position < self.high_watermark and self.last_ts:
            return self.last_ts  # not fetched yet: at most as old as the newest record read
        return 0

    def committed(self, out: Outcomes, exhausted: list[int]) -> None:
        """The coordinator recorded `out`: forget what it now keeps; reject what used up its attempts."""
        gave_up = set(exhausted)
        done = [r.offset for r in out.retries if r.offset not in gave_up] + [r.offset for r in out.rejects]
        to_reject = []
        with self._lock:
            for o in done:
                self._retrying.discard(o)
                msg = self._waiting.pop(o, None)
                if msg is not None:
                    self._release(msg)
            for o in gave_up:
                msg = self._waiting.pop(o, None)
                if msg is not None:
                    to_reject.append(msg)
        for msg in to_reject:
            error = next((r.error for r in out.retries if r.offset == msg.offset), "")
            self.consumer.send_to_dlq(self, msg, f"{GAVE_UP}: {error}")

    def _finish_revoke(self) -> bool:
        """While revoking: True once in-flight work is done (or the deadline is near) and the lease released."""
        with self._lock:
            busy = bool(self.pending) or bool(self._waiting)
        if busy and time.time() < self._revoke_deadline - REVOKE_MARGIN_S:
            self._stop.wait(0.01)
            return False
        self.consumer.commit_lease(self)
        self.consumer.release(self)
        self._lost.set()  # what ends from now on is the next holder's to read again
        return True

    def _drop_pending(self) -> None:
        with self._lock:
            dropped = list(self.pending.values()) + list(self._waiting.values())
            self.pending.clear()
            self._waiting.clear()
        for msg in dropped:
            self._release(msg)

    def records_behind(self) -> int:
        """Records fetched and not finished, plus those not fetched yet (for load reports)."""
        return max(0, self.high_watermark - max(self.position, 0)) + len(self.pending)
