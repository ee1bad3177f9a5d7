"""The ledger of one lease: every record read from it until its outcome, and what to commit next.

No threads, no sockets: the fetch loop hands it what it read (`accept`), application threads end records
(`finish`, `ack_many`), and the consumer's committer takes what changed (`take_outcomes`) and reports what
the coordinator recorded (`committed`). It knows the lease's life too: a revoked lease is dead at its
deadline and a lost one at once, and `live` is checked where records are handed to the application, so no
record of a dead lease reaches a handler.
"""

from __future__ import annotations

import bisect
import threading
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

from streamplane.client.consumer.message import (
    ACKED,
    PENDING,
    REJECTED,
    RETRIED,
    BatchOutcome,
    Message,
    OutcomeError,
    messages,
)
from streamplane.client.flow import Budget, Held
from streamplane.client.records import Fetched
from streamplane.clock import Clock
from streamplane.errors import InvalidArgumentError
from streamplane.model import GAVE_UP, DlqCopy, DlqLocation, RecordOutcome, Reject, Retry, RetryState
from streamplane.native._loaded import _native
from streamplane.native.batch import with_origin
from streamplane.offsets import normalize, runs, subtract, to_ranges

RECORD_OVERHEAD = 320
"""Bytes counted per decoded record beyond its key, value and headers (the Python objects around it)."""


HAND_OUT_S = 0.5
"""Records of a revoking lease are handed to the application until this long before the revoke's deadline; the
consumer commits and hands the lease back REVOKE_MARGIN_S before it, so what was in hand is committed first."""


class _Off:
    """An offset dressed as a record, for the done-range filter."""

    __slots__ = ("offset",)

    def __init__(self, offset: int) -> None:
        self.offset = offset


class LedgerOwner(Protocol):
    """What a ledger needs from its consumer: the retry default, and to be told when it has something to commit
    (so the committer never scans idle leases)."""

    retry_backoff_s: float
    clock: Clock

    def changed(self, ledger: LeaseLedger) -> None: ...


@dataclass(frozen=True)
class ToCopy:
    """A rejected record whose dlq copy the commit log let this holder write, as copy number `copy`."""

    msg: Message
    reason: str
    copy: int


REDRIVE_HEADER = b"sp-redrive-of"
"""The header `dlq redrive` gives each record it produces again: '<group> <origin>'. Other groups reading
the lane step over such a record (it is done for them), so a redrive concerns its own group only."""


def _may_hold_redrives(columns: dict[str, Any]) -> bool:
    """Whether a decoded batch may hold redriven records: one search of its header names (none: no cost)."""
    if not columns["header_count"]:
        return False
    return REDRIVE_HEADER in bytes(columns["hkeys"])


def _redriven_for_another(headers: Any, group: str) -> bool:
    for key, value in headers:
        if key == "sp-redrive-of" and isinstance(value, bytes):
            return value.split(b" ", 1)[0] != group.encode()
    return False


COMMIT_BYTES = 2_000_000
"""About what one lease's commit carries at most; the rest goes in the next one."""
RETRY_BYTES, REJECT_BYTES = 150, 300
"""What the commit log writes for a retry or a reject besides its text (its key, its mark, a dlq location)."""


@dataclass
class Outcomes:
    """What ended since the last commit."""

    acked: list[int] = field(default_factory=list)
    ranges: list[tuple[int, int]] = field(default_factory=list)
    batch_acked: int = 0
    """Records acked in runs, by the handler API or whole batches (their offsets are in `ranges`)."""
    retries: list[Retry] = field(default_factory=list)
    rejects: list[Reject] = field(default_factory=list)
    copying: list[Reject] = field(default_factory=list)
    """Rejected records whose dlq copy waits for the commit log's leave (and copy number)."""
    filtered: list[tuple[int, int]] = field(default_factory=list)
    """Offsets the consumer's `where` predicate left out (done; also among the gaps in `ranges`)."""

    def __bool__(self) -> bool:
        return bool(self.acked or self.ranges or self.retries or self.rejects or self.copying or self.filtered)

    def _acks(self) -> int:
        return 16 * (len(self.acked) + len(self.ranges) + len(self.filtered))

    def cost(self) -> int:
        """About how many bytes the commit log writes for these outcomes (rejects and retries carry texts)."""
        texts = sum(80 + len(r.error) for r in self.retries)
        return self._acks() + texts + sum(160 + len(r.reason) for r in self.rejects + self.copying)

    def split(self, budget: int) -> Outcomes:
        """Keep the first retries, rejects and copies that fit in `budget` bytes (acks always: they cost little),
        and return the rest, for a later commit."""
        rest = Outcomes()
        used = self._acks()
        parts = (
            ("retries", RETRY_BYTES, "error"),
            ("rejects", REJECT_BYTES, "reason"),
            ("copying", REJECT_BYTES, "reason"),
        )
        for name, fixed, text in parts:
            items: list[Any] = getattr(self, name)
            keep = 0
            while keep < len(items) and used + fixed + len(getattr(items[keep], text)) <= budget:
                used += fixed + len(getattr(items[keep], text))
                keep += 1
            if keep == 0 and items and used == self._acks():
                used += fixed + len(getattr(items[0], text))
                keep = 1  # one always goes, however long: progress
            setattr(rest, name, items[keep:])
            setattr(self, name, items[:keep])
        return rest


@dataclass(frozen=True)
class GrantedLease:
    """The granted lease a ledger keeps: where to read and from where."""

    lease_id: str
    epoch: int
    stream: str
    lane: str
    generation: int
    partition: int
    topic: str
    bootstrap_servers: str
    start_offset: int
    end_offset: int
    """The sealed generation's end, -1 while producers may still write."""


def _end_pending_py(msgs: list[Message], pending: dict[int, Any]) -> tuple[list[int], list[tuple[Any, int]]]:
    """Ack every still-open message of `msgs`; return the offsets that left `pending` and their memory accounts
    in runs (a chunk shares one or two). The C version (`_native.end_pending`) does the same."""
    ended: list[int] = []
    holds: list[tuple[Any, int]] = []
    last, n = None, 0
    for m in msgs:
        if m._outcome is PENDING:
            m._outcome = ACKED
            o = m._record.offset
            if pending.pop(o, None) is not None:  # else dropped with its lease, and released then
                ended.append(o)
                if m._held is not last:
                    if n:
                        holds.append((last, n))
                    last, n = m._held, 0
                n += 1
    if n:
        holds.append((last, n))
    return ended, holds


def _end_pending(msgs: list[Message], pending: dict[int, Any]) -> tuple[list[int], list[tuple[Any, int]]]:
    if _native is not None and type(msgs) is list:
        return cast(tuple[list[int], list[tuple[Any, int]]], _native.end_pending(msgs, pending, ACKED, PENDING))
    return _end_pending_py(msgs, pending)


class Batch:
    """Records of one lease handed out together (the batch API): the decoded columns, not Python objects."""

    __slots__ = ("attempt", "decoded", "held", "hi", "ledger", "lo", "offsets")

    def __init__(self, ledger: LeaseLedger, decoded: Any, lo: int, hi: int, offsets: list[int], held: Held) -> None:
        self.ledger, self.decoded, self.lo, self.hi, self.offsets, self.held = ledger, decoded, lo, hi, offsets, held
        self.attempt = 1

    def to_arrow(self) -> Any:
        """The records as a pyarrow.RecordBatch with their origin (stream, lane, generation, partition) and
        attempt columns."""
        arrow = self.decoded.to_arrow().slice(self.lo, self.hi - self.lo)
        if len(self.offsets) != self.hi - self.lo:  # a previous holder finished some: leave them out
            import pyarrow as pa
            import pyarrow.compute as pc

            arrow = arrow.filter(pc.is_in(arrow.column(0), value_set=pa.array(self.offsets, pa.int64())))
        x = self.ledger
        return with_origin(arrow, x.stream, x.lane, x.generation, x.partition, attempt=self.attempt, micros=False)

    def records(self, wanted: set[int]) -> list[Any]:
        return [r for r in self.decoded.records() if r.offset in wanted]


def _release_all(msgs: list[Message]) -> None:
    """Give back the memory accounts of ended records, one call per batch."""
    counts: dict[int, list[Any]] = {}
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


class LeaseLedger:
    """One lease's records from fetch to outcome; thread-safe, passive."""

    def __init__(self, owner: LedgerOwner, lease: GrantedLease, budget: Budget, group: str) -> None:
        self.owner = owner
        self.lease = lease
        self.lease_id, self.epoch = lease.lease_id, lease.epoch
        self.stream, self.lane, self.generation, self.partition = (
            lease.stream,
            lease.lane,
            lease.generation,
            lease.partition,
        )
        self.end_offset = lease.end_offset
        self.budget = budget
        self.labels = (group, self.stream, self.lane)
        self._lock = threading.Lock()
        self.pending: dict[int, Message] = {}  # delivered, no outcome yet
        self._batches: dict[Batch, None] = {}  # handed out whole (the batch API), in fetch order
        self._batch_records = 0  # records in those batches
        self._waiting: dict[int, Message] = {}  # retried or rejected, until the coordinator has recorded it
        self._out = Outcomes()
        self._retrying: set[int] = set()  # offsets re-read for a due retry and not yet ended
        self._done_above: list[tuple[int, int]] = []
        self._retry_above: set[int] = set()  # offsets with retry state at the grant: due_retries hands them out
        self._copies_begun: dict[int, int] = {}  # dlq copies the commit log counted for exhausted records re-read
        self.high_watermark = 0
        self.last_ts = 0
        self.position = lease.start_offset
        self.lost = False
        self.revoke_deadline = 0.0  # unix seconds; 0 while not revoking
        self.may_have_retries = False  # the commit log may hold retry state for this lease
        self._fetched = 0
        self.handed_out = False
        """Records of this grant were handed out already (its first go to the handlers in a short chunk)."""
        self._rate_since = self.owner.clock.monotonic()
        self._reported: tuple[int, int] = (0, 0)  # (oldest pending ts, high watermark) last committed
        self.dirty = False
        """Something happened since the last commit (the committer skips a lease that is not, at no cost)."""

    def _changed(self) -> None:
        self.dirty = True
        self.owner.changed(self)

    # -- the lease's life
    def revoking(self, deadline_s: float) -> None:
        """The lease moves to another worker: nothing more is fetched; what is in flight may end until then."""
        self.revoke_deadline = deadline_s
        self.owner.changed(self)

    def live(self, now_s: float) -> bool:
        """Records of this lease may still be handed to the application (of a revoking lease, until HAND_OUT_S
        before its deadline: what is in hand then ends, and is committed, before the lease is handed back)."""
        return not self.lost and (not self.revoke_deadline or now_s < self.revoke_deadline - HAND_OUT_S)

    def fetchable(self) -> bool:
        if self.lost or self.revoke_deadline:
            return False
        return not 0 <= self.end_offset <= max(self.position, 0)

    def seal(self, end_offset: int) -> None:
        self.end_offset = end_offset

    def skip_done(self, done: list[tuple[int, int]], retrying: tuple[int, ...] | list[int] = ()) -> None:
        """Offsets above the start a previous holder finished, and ones with retry state: not handed out as first
        attempts (the retry path hands the latter out when due, with the attempts the commit log counted)."""
        self._done_above = sorted((s, e) for s, e in done if e > self.lease.start_offset)
        self._retry_above = {o for o in retrying if o >= self.lease.start_offset}

    @property
    def quiet(self) -> bool:
        """Nothing to commit, nothing in flight, not being revoked: the committer leaves this lease alone
        until it reads again."""
        return not self.dirty and not self.in_hand and not self._waiting and not self.revoke_deadline

    @property
    def in_hand(self) -> bool:
        """Records handed to the application without an outcome yet."""
        return bool(self.pending) or bool(self._batches)

    @property
    def busy(self) -> bool:
        """Records handed out and not yet recorded by the coordinator."""
        with self._lock:
            return bool(self.pending) or bool(self._batches) or bool(self._waiting)

    def drop(self) -> None:
        """The lease is gone: forget what is in flight; outcomes from now on are not recorded."""
        with self._lock:
            self.lost = True
            dropped = list(self.pending.values()) + list(self._waiting.values())
            batches = list(self._batches)
            self.pending.clear()
            self._waiting.clear()
            self._batches.clear()
            self._batch_records = 0
        for batch in batches:
            batch.held.release(len(batch.offsets))
        _release_all(dropped)

    # -- from the fetch loop
    def accept(self, fetched: Fetched, *, batches: bool = False) -> tuple[list[Any], int, int]:
        """Turn what was read into what to hand out: messages, or one Batch with `batches`; returns them,
        their decoded bytes and record count."""
        before, after = fetched.position, fetched.next_position
        self.position = after
        self._changed()
        if fetched.high_watermark >= 0:
            self.high_watermark = fetched.high_watermark
        rejects = [self._reject_entries(s.first_offset, s.next_offset, s.error.message) for s in fetched.skipped]
        decoded = fetched.batch
        items: list[Any] = []
        offsets: list[int] = []
        used = 0
        if decoded is not None and decoded.count and not self.lost:
            items, offsets, used = self._batch(decoded) if batches else self._messages(decoded)
        left_out = decoded.filtered if decoded is not None else 0
        gaps = self._gaps(before, after, offsets, fetched.skipped, left_out)
        if gaps and decoded is not None and decoded.foreign:  # another slice's records: its holder's to do
            gaps = subtract(gaps, normalize(decoded.foreign_ranges))
        filtered = self._filtered(decoded, before)
        with self._lock:
            if self.lost:
                return [], 0, 0
            if batches:
                for batch in items:
                    self._batches[batch] = None
                self._batch_records += len(offsets)
            else:
                self.pending.update(zip(offsets, items, strict=True))
            self._out.ranges.extend(gaps)
            self._out.filtered.extend(filtered)
            for reject in rejects:
                self._out.rejects.extend(reject)
        self._fetched += len(offsets)
        return items, used, len(offsets)

    def _messages(self, decoded: Any) -> tuple[list[Any], list[int], int]:
        """One Message per record to hand out (leaving out what is past a sealed end or done already)."""
        offsets = decoded.offsets.tolist()
        c = decoded.columns
        data = sum(len(c[k]) for k in ("keys", "values", "hkeys", "hvalues"))
        foreign = _may_hold_redrives(c)
        whole = not self._done_above and not self._retry_above and not foreign
        if (self.end_offset < 0 or offsets[-1] < self.end_offset) and whole:
            # the common case: every record, built in bulk
            used = data + RECORD_OVERHEAD * len(offsets)
            held = Held(self.budget, used, len(offsets))
            self.last_ts = decoded.timestamps[-1]
            return messages(self, decoded, held), offsets, used
        records = list(decoded.records())
        if self.end_offset >= 0:
            records = [r for r in records if r.offset < self.end_offset]
        if self._done_above or self._retry_above:
            records = self._not_done(records)
        if foreign:  # another group's redriven records: done here by being stepped over (see _gaps)
            records = [r for r in records if not _redriven_for_another(r.headers, self.labels[0])]
        if not records:
            return [], [], 0
        used = data + RECORD_OVERHEAD * len(records)
        held = Held(self.budget, used, len(records))
        self.last_ts = records[-1].timestamp
        return [Message(self, r, 1, held) for r in records], [r.offset for r in records], used

    def _batch(self, decoded: Any) -> tuple[list[Any], list[int], int]:
        """One Batch over the decoded columns (no object per record)."""
        offsets = decoded.offsets.tolist()
        lo, hi = 0, len(offsets)
        if self.end_offset >= 0 and offsets[-1] >= self.end_offset:
            hi = bisect.bisect_left(offsets, self.end_offset)
        offsets = offsets[lo:hi]
        if (self._done_above or self._retry_above) and offsets:
            offsets = [r.offset for r in self._not_done([_Off(o) for o in offsets])]
        if offsets and _may_hold_redrives(decoded.columns):  # another group's redriven records are stepped over
            theirs = {r.offset for r in decoded.records() if _redriven_for_another(r.headers, self.labels[0])}
            offsets = [o for o in offsets if o not in theirs]
        if not offsets:
            return [], [], 0
        c = decoded.columns
        used = sum(len(c[k]) for k in ("keys", "values", "hkeys", "hvalues")) + 16 * len(offsets)
        batch = Batch(self, decoded, lo, hi, offsets, Held(self.budget, used, len(offsets)))
        self.last_ts = decoded.timestamps[hi - 1]
        return [batch], offsets, used

    def finish_batch(self, batch: Batch, outcome: BatchOutcome | None) -> None:
        """End a handed-out batch: the records `outcome` retries or rejects that way, every other one acked."""
        special: dict[int, tuple[RecordOutcome, str]] = {}
        if outcome is not None:
            mine = set(batch.offsets)
            for kind, named in ((RETRIED, outcome.retry), (REJECTED, outcome.reject)):
                for o, text in named.items():
                    if o not in mine:
                        raise InvalidArgumentError(f"offset {o} is not in this batch of {self.lease_id}")
                    special[o] = (kind, str(text)[:1000])
        msgs = [Message(self, r, batch.attempt, batch.held) for r in batch.records(set(special))] if special else []
        with self._lock:
            if batch not in self._batches:
                return  # forgotten, or its lease is gone: the next holder reads it again
            del self._batches[batch]
            self._batch_records -= len(batch.offsets)
            acked = [o for o in batch.offsets if o not in special] if special else batch.offsets
            if acked:
                self._out.ranges.extend(runs(acked))
                self._out.batch_acked += len(acked)
                self._changed()
            if self._retrying:
                self._retrying.difference_update(acked)
            for m in msgs:  # the records it names end one by one, as messages
                self.pending[m.offset] = m
        if acked:
            batch.held.release(len(acked))
        for m in msgs:
            kind, text = special[m.offset]
            backoff = outcome.backoff_s if outcome is not None else None
            self.finish(m, kind, error=text or ("retry" if kind == RETRIED else "rejected"), backoff_s=backoff)

    def forget_batch(self, batch: Batch) -> None:
        """A handed-out batch the application never received (its lease is gone, or the consumer closes)."""
        with self._lock:
            if batch not in self._batches:
                return
            del self._batches[batch]
            self._batch_records -= len(batch.offsets)
        batch.held.release(len(batch.offsets))

    def _not_done(self, records: list[Any]) -> list[Any]:
        if self._retry_above:
            records = [r for r in records if r.offset not in self._retry_above]
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

    def _filtered(self, decoded: Any, before: int) -> list[tuple[int, int]]:
        """The ranges a `where` predicate left out of what was read, within this lease (from where the read
        began, up to its end offset): done, and counted apart by the commit log."""
        if decoded is None or not decoded.filtered:
            return []
        ranges: list[tuple[int, int]] = decoded.filtered_ranges
        end = self.end_offset if self.end_offset >= 0 else None
        if end is None and ranges[0][0] >= before:
            return ranges  # the usual case: all of them, as decoded
        out = []
        for s, e in ranges:
            s, e = max(s, before), e if end is None else min(e, end)
            if s < e:
                out.append((s, e))
        return out

    def _gaps(
        self, before: int, after: int, offsets: list[int], skipped: list[Any], filtered: int
    ) -> list[tuple[int, int]]:
        """Offsets the read stepped over without a record (control batches, aborted or compacted records, or
        ones a previous holder finished): done by themselves. `filtered`: how many records a `where` predicate
        left out of the read (done as its filtered ranges; not listed again here)."""
        if before < 0 or after <= before:
            return []
        if self.end_offset >= 0 and self.end_offset < after:
            after, filtered = self.end_offset, 0  # some left out may lie past the end: counted one by one below
        if len(offsets) + filtered + sum(s.next_offset - s.first_offset for s in skipped) >= after - before:
            return []  # every offset read or left out: no gap (the usual case, checked without a set)
        if not skipped and not self._retry_above:  # records left out (a where predicate): between the offsets
            gaps, at = [], before
            for o in offsets:  # in order, as decoded
                if o >= after:
                    break
                if o > at:
                    gaps.append((at, o))
                at = max(at, o + 1)
            if at < after:
                gaps.append((at, after))
            return gaps
        covered = set(offsets) | self._retry_above  # retried records are not done by being stepped over
        for s in skipped:
            covered.update(range(s.first_offset, s.next_offset))
        return to_ranges([o for o in range(before, after) if o not in covered])

    def _reject_entries(self, first: int, end: int, reason: str) -> list[Reject]:
        """A batch that cannot be decoded (corrupt, or a decompression bomb): its offsets are rejected."""
        if self.end_offset >= 0:
            end = min(end, self.end_offset)
        text = f"undecodable batch [{first}, {end}): {reason}"[:1000]
        return [Reject(offset=o, reason=text) for o in range(first, end)]

    def retried(self, fetched: Fetched, want: dict[int, RetryState]) -> tuple[list[Message], list[tuple[Message, str]]]:
        """Records re-read for a due retry: (to hand out again, exhausted ones to reject). `want` maps offsets
        to their retry state; what was read (or is no longer in the log) is taken out of it."""
        for s in fetched.skipped:
            for o in range(s.first_offset, s.next_offset):
                want.pop(o, None)
        found: list[Message] = []
        exhausted: list[tuple[Message, str]] = []
        batch = fetched.batch
        if batch is None or not batch.count:
            return found, exhausted
        with self._lock:
            busy = self._busy_offsets()
        records = [r for r in batch.records() if r.offset in want and r.offset not in busy]
        used = RECORD_OVERHEAD * len(records) + sum(len(r.value or b"") + len(r.key or b"") for r in records)
        held = Held(self.budget, used, len(records)) if records else None
        if records:
            self.budget.settle(0, used, len(records))
        for r in records:
            state = want.pop(r.offset)
            if state.exhausted:  # attempts used up (or a reject begun) and not rejected yet: copy, then reject
                reason = state.last_error if state.copies else f"{GAVE_UP}: {state.last_error}"
                exhausted.append((Message(self, r, state.attempts, held), reason))
                self._copies_begun[r.offset] = state.copies
            else:
                found.append(Message(self, r, state.attempts + 1, held))
        for o in [o for o in want if o < batch.next_offset]:
            want.pop(o)  # not in the log (aborted or compacted away)
        with self._lock:
            for m in found + [m for m, _ in exhausted]:
                self.pending[m.offset] = m
            self._retrying.update(m.offset for m in found)
        if found or exhausted:
            self.owner.changed(self)
        for m, reason in exhausted:
            self.finish(m, REJECTED, error=reason)
        return found, exhausted

    # -- outcomes, from application threads
    def finish(self, msg: Message, outcome: str, *, error: str = "", backoff_s: float | None = None) -> None:
        with self._lock:
            if msg._outcome == outcome:
                return
            if msg._outcome != PENDING:
                raise OutcomeError(
                    f"record {self.lease_id}@{msg.offset} is already {msg._outcome}; cannot {outcome[:-2]}"
                )
            msg._outcome = outcome
            self._changed()
            if self.pending.pop(msg.offset, None) is None or self.lost:
                _release_all([msg])
                return
            if outcome == ACKED:
                self._out.acked.append(msg.offset)
                self._retrying.discard(msg.offset)
                _release_all([msg])
                return
            self._waiting[msg.offset] = msg  # kept (and counted) until the coordinator has it
            if outcome == RETRIED:
                backoff = self.owner.retry_backoff_s if backoff_s is None else max(0.0, backoff_s)
                self._out.retries.append(
                    Retry(offset=msg.offset, attempt=msg.attempt, error=error, backoff_ms=int(backoff * 1000))
                )
            else:  # the dlq copy is counted in the commit log first, and written once it says so
                copy = self._copies_begun.pop(msg.offset, 0) + 1
                self._out.copying.append(Reject(offset=msg.offset, reason=error[:1000] or "rejected", copy=copy))
            self.may_have_retries = True

    def forget(self, msg: Message) -> None:
        """A delivered record the application never received (it was dropped or the consumer is closing)."""
        with self._lock:
            if self.pending.pop(msg.offset, None) is None:
                return
        _release_all([msg])

    def rejected(self, msg: Message, reason: str, dlq: DlqLocation | None) -> None:
        """The record's copy is in the dlq lane (or it had none to copy): mark it rejected in the next commit."""
        with self._lock:
            self._out.rejects.append(Reject(offset=msg.offset, reason=reason[:1000], dlq=dlq))
            self._changed()

    def copy_failed(self, msg: Message) -> None:
        """Its dlq copy could not be written: the record waits in the commit log (exhausted, its copy counted)
        for the next retry check here, or the next holder, to copy it again."""
        with self._lock:
            if self._waiting.pop(msg.offset, None) is None:
                return
            self.may_have_retries = True
        _release_all([msg])

    def ack_many(self, msgs: list[Message]) -> None:
        """Ack every still-pending record of `msgs` at once (the handler API's path)."""
        with self._lock:
            ended, holds = _end_pending(msgs, self.pending)
            if ended:  # usually one run of offsets: one range, not an offset each, for the committer
                self._out.ranges.extend(runs(ended))
                self._out.batch_acked += len(ended)
                self._changed()
                if self._retrying:
                    self._retrying.difference_update(ended)
        for held, k in holds:
            if held is not None:
                held.release(k)

    # -- commits, from the committer
    def take_outcomes(self, budget: int = COMMIT_BYTES) -> tuple[Outcomes, int] | None:
        """What to commit now, with the oldest pending record's time; None when nothing changed. At most about
        `budget` bytes of it: a burst of rejects beyond that waits for the next commit (a store transaction
        holds 10 MB, and a refused commit would only grow)."""
        if not self.dirty and not self.in_hand:
            return None
        self.dirty = False
        oldest = self.oldest_pending_ts()
        with self._lock:
            if not self._out and (oldest, self.high_watermark) == self._reported:
                return None
            out, self._out = self._out, Outcomes()
            self._reported = (oldest, self.high_watermark)
            if out.cost() > budget:
                rest = out.split(budget)
                self._out = rest
                self._reported = (-1, -1)
                self.dirty = True
        return out, oldest

    def put_back(self, out: Outcomes) -> None:
        """A commit that failed: its outcomes go into the next one."""
        with self._lock:
            self._out.acked.extend(out.acked)
            self._out.ranges.extend(out.ranges)
            self._out.filtered.extend(out.filtered)
            self._out.batch_acked += out.batch_acked
            self._out.retries.extend(out.retries)
            self._out.rejects.extend(out.rejects)
            self._out.copying.extend(out.copying)
            self._reported = (-1, -1)
            self._changed()

    def committed(self, out: Outcomes, copies: tuple[DlqCopy, ...] = ()) -> list[ToCopy]:
        """The coordinator recorded `out`: forget what it now keeps. Returns the dlq copies to write: of records
        whose retries used up their attempts, and of rejects the commit log let this holder copy (a reject
        that is done already, by an earlier holder, is dropped here)."""
        granted = {c.offset: c.copy for c in copies}
        reasons = {r.offset: f"{GAVE_UP}: {r.error}"[:1000] for r in out.retries if r.offset in granted}
        reasons.update((r.offset, r.reason) for r in out.copying if r.offset in granted)
        done = [r.offset for r in out.retries + out.copying + out.rejects if r.offset not in granted]
        to_copy = []
        with self._lock:
            for o in done:
                self._retrying.discard(o)
                msg = self._waiting.pop(o, None)
                if msg is not None:
                    _release_all([msg])
            for o, copy in granted.items():
                msg = self._waiting.get(o)  # stays busy until its reject is recorded, or its copy failed
                if msg is not None and o in reasons:
                    to_copy.append(ToCopy(msg, reasons[o], copy))
        return to_copy

    def oldest_pending_ts(self) -> int:
        """Ingestion time of the oldest record the live path has not finished (0: none); retries are tracked
        by the commit log's retry state instead, so a poison record does not hold the time lag up."""
        with self._lock:  # both in fetch order: the first live record of each is the oldest
            oldest = next((m for o, m in self.pending.items() if o not in self._retrying), None)
            batch = next(iter(self._batches), None)
        times = [int(batch.decoded.timestamps[batch.lo])] if batch is not None else []
        if oldest is not None:
            times.append(oldest.timestamp)
        if times:
            return min(times)
        if self.position < self.high_watermark and self.last_ts:
            return self.last_ts  # not fetched yet: at most as old as the newest record read
        return 0

    def busy_offsets(self) -> set[int]:
        with self._lock:
            return self._busy_offsets()

    def _busy_offsets(self) -> set[int]:
        busy = set(self.pending) | set(self._waiting) | self._retrying
        for batch in self._batches:
            busy.update(batch.offsets)
        return busy

    # -- load, for the Assigner
    def take_rate(self, now_s: float) -> float:
        """Records per second read since the last call."""
        n, self._fetched = self._fetched, 0
        elapsed, self._rate_since = now_s - self._rate_since, now_s
        return n / elapsed if elapsed > 0 else 0.0

    @property
    def idle(self) -> bool:
        """Nothing read since the last load report, nothing in flight, nothing left to read."""
        return not self._fetched and not self.in_hand and self.position >= self.high_watermark

    def records_behind(self) -> int:
        """Records read and not finished, plus those not read yet."""
        return max(0, self.high_watermark - max(self.position, 0)) + len(self.pending) + self._batch_records
