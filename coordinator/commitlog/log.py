"""The commit log: which offsets of a partition a group has finished, retried or rejected, and its time lag.

Per (group, stream, lane, generation, partition): a low watermark below which everything is done, the done
offsets above it (bitmaps of CHUNK offsets, 512 bytes a value at most, so no value or transaction nears
FoundationDB's limits), retry state per offset (attempts, next attempt time, last error) and rejected marks
(reason, where the record went in the dlq lane). A commit is one transaction, fenced by the lease epoch and
idempotent: acks are a set union, retries keep the highest attempt seen, rejects are marks. As the low
watermark advances, the chunks below it are deleted, so a fully done partition is a single key.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, TypeVar

import orjson

from streamplane import offsets
from streamplane.coordinator import keys, planted
from streamplane.coordinator.groups import config as group_config
from streamplane.coordinator.groups.leases import (
    TORN_EPOCH,
    check_lease,
    lease_store_key,
    parse_lease_id,
    require_reader,
    reread_torn,
)
from streamplane.coordinator.store import Database, Transaction, transactional
from streamplane.coordinator.topology.records import UNDECODABLE, require_stream
from streamplane.errors import (
    FencedError,
    InvalidArgumentError,
    LimitExceededError,
    NotFoundError,
    StreamplaneError,
    quoted,
)
from streamplane.model import (
    ABANDONED,
    DLQ_COPY_TIMEOUT_MS,
    GAVE_UP,
    MAX_PROGRESS_LEASES,
    Commit,
    DlqCopy,
    DlqLocation,
    Generation,
    Lag,
    LaneLag,
    PartitionLag,
    PartitionRef,
    Reject,
    RejectedRecord,
    RejectPage,
    Retry,
    RetryState,
    Slice,
    parse_lease,
)
from streamplane.names import check_lane_name, check_object_name

__all__ = ["Commit", "Reject", "Retry"]  # the commit's model types, re-exported for callers of commit()

CHUNK = offsets.CHUNK
"""Offsets per done-offsets value: a bitmap of at most 512 bytes (a big Python int while in use)."""
MAX_ENTRIES = 100_000
"""Ranges, retries and rejects in one commit, together."""
MAX_TEXT = 1024


MAX_BITMAP_BYTES = 1 << 20
COPY_IN_FLIGHT_MS = DLQ_COPY_TIMEOUT_MS + 5_000
"""How long after a dlq copy was begun it may still land: no other copy of that record begins before."""


def _copy_in_flight(state: dict[str, Any], now_ms: int) -> bool:
    return bool(state.get("copies")) and now_ms < state.get("copy_ms", 0) + COPY_IN_FLIGHT_MS


@dataclass(frozen=True)
class Header:
    """The per-partition summary: one small value, read by lag queries without touching the ranges."""

    low: int = 0
    high: int = 0
    high_ts_ms: int = 0
    oldest_pending_ts_ms: int = 0
    done_above: int = 0
    retries: int = 0
    rejects: int = 0
    """Reject marks, in every state."""
    redriven: int = 0
    """Of those, the ones `dlq redrive` produced again."""
    purged: int = 0
    """Of those, the ones `dlq purge` marked purged."""
    filtered: int = 0
    """Offsets the holders' `where` predicate left out, each counted once (done like acked ones)."""
    updated_ms: int = 0
    slice_pending: dict[str, list[int]] = field(default_factory=dict)
    """While the partition is split: {slice name: [when its oldest record not processed yet was written, the
    high watermark and the newest record's time its holder last saw]}, as each slice's holder last said;
    `oldest_pending_ts_ms` is the oldest of them."""

    def offset_lag(self) -> int:
        return max(0, self.high - self.low - self.done_above)

    def time_lag_ms(self, now_ms: int) -> int:
        if self.oldest_pending_ts_ms <= 0 or self.offset_lag() == 0:
            return 0
        return max(0, now_ms - self.oldest_pending_ts_ms)


@dataclass(frozen=True)
class CommitResult:
    low_watermark: int
    exhausted: list[int]
    newly_done: int
    retries: int = 0
    """Offsets with retry state after the commit."""
    copies: list[DlqCopy] = field(default_factory=list)
    """The dlq copies its holder may write now (each counted in the retry state first)."""


def _partition(group: str, lid: str) -> PartitionRef:
    """The partition a commit names, once its group's name is checked."""
    check_object_name("group", group)
    return parse_lease_id(lid)


def header_json(header: Header) -> bytes:
    """A header as stored: flat (no asdict copy), without the slices' times while the partition is whole."""
    d = dict(vars(header))
    if not header.slice_pending:
        del d["slice_pending"]
    return json.dumps(d, sort_keys=True).encode()


def read_header(tr: Transaction, group: str, ref: PartitionRef) -> Header:
    raw = tr.get(keys.progress_key(group, ref))
    return Header(**json.loads(raw)) if raw else Header()


def _decoded_header(raw: bytes) -> Header | None:
    """A stored partition summary; None when it does not decode (never written so by this code)."""
    try:
        return Header(**json.loads(raw))
    except UNDECODABLE:
        return None


def low_or_none(tr: Transaction, group: str, ref: PartitionRef) -> int | None:
    """The group's low watermark on a partition; None when its header does not decode. For the passes over
    every group (the sealer's): one torn header holds back that partition, never the pass."""
    try:
        return read_header(tr, group, ref).low
    except (ValueError, TypeError):
        return None


def _chunk_key(group: str, ref: PartitionRef, chunk: int) -> bytes:
    return keys.done_key(group, ref, chunk)


def _read_chunk(tr: Transaction, group: str, ref: PartitionRef, chunk: int) -> int:
    """Bit i set: offset chunk * CHUNK + i is done."""
    raw = tr.get(_chunk_key(group, ref, chunk))
    return int.from_bytes(raw, "little") if raw else 0


def _write_chunk(tr: Transaction, group: str, ref: PartitionRef, chunk: int, mask: int) -> None:
    _write_bits(tr, _chunk_key(group, ref, chunk), mask)


def _write_bits(tr: Transaction, key: bytes, mask: int) -> None:
    """A chunk's bitmap as stored (little-endian; none for no bit set)."""
    if mask:
        tr.set(key, mask.to_bytes((mask.bit_length() + 7) // 8, "little"))
    else:
        tr.clear(key)


class RedrivenBits:
    """Which rejects `dlq redrive` produced again, read from their chunks' bitmaps once each in a transaction
    (any stored bytes are a bitmap: bad data reads as some bits, never an error)."""

    def __init__(self, tr: Transaction) -> None:
        self._tr, self._chunks = tr, dict[tuple[str, PartitionRef, int], int]()

    def chunk(self, group: str, ref: PartitionRef, chunk: int) -> int:
        """Bit i set: the reject at offset chunk * CHUNK + i was redriven."""
        at = (group, ref, chunk)
        if at not in self._chunks:
            raw = self._tr.get(keys.redriven_key(group, ref, chunk))
            self._chunks[at] = int.from_bytes(raw, "little") if raw else 0
        return self._chunks[at]

    def has(self, group: str, ref: PartitionRef, offset: int) -> bool:
        chunk = offset // CHUNK
        return bool(self.chunk(group, ref, chunk) >> (offset - chunk * CHUNK) & 1)

    def add(self, group: str, ref: PartitionRef, offsets: Iterable[int]) -> int:
        """Set the offsets' bits and write the chunks they changed; how many bits were not set before."""
        masks: dict[int, int] = {}
        for offset in offsets:
            chunk = offset // CHUNK
            masks[chunk] = masks.get(chunk, 0) | 1 << (offset - chunk * CHUNK)
        added = 0
        for chunk, mask in masks.items():
            old = self.chunk(group, ref, chunk)
            if old | mask != old:
                added += (mask & ~old).bit_count()
                self._chunks[(group, ref, chunk)] = old | mask
                _write_bits(self._tr, keys.redriven_key(group, ref, chunk), old | mask)
        return added


def reject_state(mark: Any, redriven: bool) -> str:
    """A reject's state: purged once purged; redriven once its bit is set (or its mark says so: a mark written
    before the bitmaps); else as its mark says (pending)."""
    stored = str(mark.get("state", PENDING_REJECT))
    return REDRIVEN if redriven and stored != PURGED else stored


MAX_COMMIT_CHUNKS = 4096
"""Blocks of CHUNK offsets that one commit's acked ranges may mark done above the low watermark (16M offsets,
2 MB of writes at most). A range from the low watermark on is not counted: it moves the watermark instead."""


def prepare(c: Commit) -> Commit:
    """Bound a commit's work before any transaction starts: counts and sizes checked, acked ranges checked and
    merged (O(n log n), outside the store's lock), so the transaction walks at most MAX_ENTRIES ranges."""
    entries = len(c.acked) + len(c.filtered) + len(c.retries) + len(c.rejects) + len(c.copying)
    if entries > MAX_ENTRIES:
        raise LimitExceededError(
            f"a commit holds {entries} ranges, retries, rejects and dlq copies; the limit is {MAX_ENTRIES}"
        )
    if len(c.acked_bitmap) > MAX_BITMAP_BYTES:
        raise LimitExceededError(f"acked_bitmap is {len(c.acked_bitmap)} bytes; the limit is {MAX_BITMAP_BYTES}")
    for name, ranges in (("acked", c.acked), ("filtered", c.filtered)):
        if ranges and (min(s for s, _ in ranges) < 0 or any(s >= e for s, e in ranges)):
            for i, (start, end) in enumerate(ranges):
                if start < 0 or start >= end:
                    raise InvalidArgumentError(f"{name}[{i}] [{start}, {end}) is empty, reversed or negative")
    filtered = offsets.normalize(c.filtered)
    return replace(
        c, acked=offsets.normalize(c.acked + filtered) if filtered else offsets.normalize(c.acked), filtered=filtered
    )


def _chunks_touched(ranges: list[offsets.Range], floor: int) -> int:
    """Distinct chunks that sorted, disjoint `ranges` touch at or above `floor`."""
    count, last = 0, -1
    for s, e in ranges:
        if e <= floor:
            continue
        first, end = max(s, floor) // CHUNK, (e - 1) // CHUNK
        count += end - max(first, last + 1) + 1 if end > last else 0
        last = max(last, end)
    return count


def validate(c: Commit, header: Header) -> int:
    """Check a prepared commit against the partition; return the high watermark it is checked against."""
    for name, value in (
        ("oldest_pending_ts_ms", c.oldest_pending_ts_ms),
        ("high_watermark", c.high_watermark),
        ("high_watermark_ts_ms", c.high_watermark_ts_ms),
    ):
        if value < 0:
            raise InvalidArgumentError(f"{name} must not be negative, not {value}")
    high = max(header.high, c.high_watermark)
    if c.acked_bitmap:
        if c.acked_bitmap_base < 0:
            raise InvalidArgumentError(f"acked_bitmap_base must not be negative, not {c.acked_bitmap_base}")
        top = c.acked_bitmap_base + int.from_bytes(c.acked_bitmap, "little").bit_length()
        if high and top > high:
            raise InvalidArgumentError(f"acked_bitmap acks offset {top - 1}, beyond the high watermark {high}")
    if c.acked and high and c.acked[-1][1] > high:  # prepared: sorted and merged
        start, end = c.acked[-1]
        raise InvalidArgumentError(f"acked range [{start}, {end}) ends beyond the high watermark {high}")
    for i, r in enumerate(c.retries):
        if r.offset < 0 or (high and r.offset >= high):
            raise InvalidArgumentError(f"retries[{i}] offset {r.offset} is outside the partition [0, {high})")
        if r.attempt < 1:
            raise InvalidArgumentError(f"retries[{i}] attempt must be 1 or more, not {r.attempt}")
        if len(r.error) > MAX_TEXT:
            raise InvalidArgumentError(f"retries[{i}] error is {len(r.error)} characters; the limit is {MAX_TEXT}")
    for what, listed in (("rejects", c.rejects), ("copying", c.copying)):
        for i, j in enumerate(listed):
            if j.offset < 0 or (high and j.offset >= high):
                raise InvalidArgumentError(f"{what}[{i}] offset {j.offset} is outside the partition [0, {high})")
            if not j.reason.strip():
                raise InvalidArgumentError(f"{what}[{i}] needs a reason")
            if len(j.reason) > MAX_TEXT:
                raise InvalidArgumentError(f"{what}[{i}] reason is {len(j.reason)} characters; the limit is {MAX_TEXT}")
    return high


def _oldest_pending(c: Commit, high: int, before: int) -> int:
    """When the oldest record not processed yet was written, as the time lag uses it (`high`, `before`: the
    high watermark and that time as the log knows them). A commit that saw less of the partition than the log
    knows of (a late copy of an earlier one) knows nothing of the records past its high watermark: it never
    makes that time later, or unknown (0), and so never hides a lag."""
    if c.high_watermark >= high or not before:
        return c.oldest_pending_ts_ms
    return min(c.oldest_pending_ts_ms or before, before)


UNKNOWN = [0, 0, 0]
"""A slice's entry in Header.slice_pending before its holder has said anything, when nothing else bounds it."""


def _pending_times(c: Commit, header: Header, high: int, piece: Slice | None) -> tuple[int, dict[str, list[int]]]:
    """The partition's oldest pending time after a commit (`high`: its high watermark after it), and its
    slices' (see Header.slice_pending): a slice's holder speaks for its own slice only, and the partition's time
    is the oldest of its slices'."""
    if piece is None:
        return _oldest_pending(c, header.high, header.oldest_pending_ts_ms), {}
    suffix = f"of{piece.count}"  # a split into another count left names of its own: they no longer count
    pending = {name: seen for name, seen in header.slice_pending.items() if name.endswith(suffix)}
    if not pending:  # the split's first commit: until they say otherwise, each slice is as far behind as the
        # partition was (a slice that has not committed yet never hides the records it has not processed);
        # when that was not known (no commit yet, or a slice of an earlier split never said), nor is theirs
        unknown = not header.updated_ms or UNKNOWN in header.slice_pending.values()
        seed = UNKNOWN if unknown else [header.oldest_pending_ts_ms, header.high, header.high_ts_ms]
        pending = {Slice(i, piece.count).name: seed for i in range(piece.count)}
    mine = pending.get(piece.name, [0, 0, 0])
    pending[piece.name] = [_oldest_pending(c, mine[1], mine[0]), max(mine[1], c.high_watermark), c.high_watermark_ts_ms]
    times = []
    for ts, seen_high, seen_ts in pending.values():
        if ts > 0:
            times.append(ts)
        elif seen_high < high and seen_ts > 0:
            # caught up when it last said so, before records it has not seen: they were written after its
            # newest record, so that time bounds theirs from below (a lag never hidden, at worst overstated)
            times.append(seen_ts)
    return min(times, default=0), pending


def check_writer(tr: Transaction, group: str, lid: str, epoch: int, principal: str = "", session_id: str = "") -> None:
    """Who may write a partition's progress: the lease holder at `epoch`; or, with epoch 0, an unmanaged group
    (one the Assigner never served, whose progress an external engine such as Spark tracks and fences with
    its own checkpoints). With `principal`, only the principal of the holder's session writes."""
    if epoch:
        check_lease(tr, group, lid, epoch, principal, session_id)
        return
    stream, lane, generation, _ = parse_lease_id(lid)
    if tr.get(keys.group_key(group)) is not None:
        raise FencedError(
            f"lease {lid} epoch 0 is stale: group {group!r} has Assigner sessions, so commits carry the lease's "
            "epoch (epoch 0 is for unmanaged groups)",
            lease_id=lid,
            held_epoch=0,
        )
    if tr.get(keys.generation_key(stream, lane, generation)) is None:
        raise NotFoundError(
            f"{stream}/{lane} has no generation {generation}", kind="generation", name=f"{stream}/{lane}/g{generation}"
        )


def _is_done(
    tr: Transaction, group: str, ref: PartitionRef, header: Header, offset: int, chunks: dict[int, int]
) -> bool:
    if offset < header.low:
        return True
    chunk = offset // CHUNK
    if chunk not in chunks:
        chunks[chunk] = _read_chunk(tr, group, ref, chunk)
    return bool(chunks[chunk] >> (offset - chunk * CHUNK) & 1)


def _jump(
    tr: Transaction, group: str, ref: PartitionRef, header: Header, jump: int, chunks: dict[int, int]
) -> tuple[Header, int]:
    """Move the low watermark to `jump` (an acked range covers everything up to it): the stored chunks it
    passes are cleared without materialising the range. Returns the new header and how many offsets became
    done."""
    first, last = header.low // CHUNK, (jump - 1) // CHUNK
    already = 0
    for key, raw in tr.get_range(_chunk_key(group, ref, first), _chunk_key(group, ref, last + 1)):
        chunk = keys.DONE.unpack(key)[-1]
        base = chunk * CHUNK
        mask = int.from_bytes(raw, "little")
        below = (1 << min(CHUNK, jump - base)) - 1  # bits of this chunk under the new low watermark
        already += (mask & below & ~((1 << max(0, header.low - base)) - 1)).bit_count()
        chunks[chunk] = mask & ~below
        _write_chunk(tr, group, ref, chunk, chunks[chunk])
    return replace(header, low=jump, done_above=header.done_above - already), jump - header.low - already


def _not_done(tr: Transaction, group: str, ref: PartitionRef, header: Header, ranges: list[offsets.Range]) -> int:
    """How many offsets of sorted, disjoint `ranges` are not done yet: at or above the low watermark, and not
    in their chunk's done bitmap. Reads the chunks the ranges touch (bounded with the commit's acked ranges)."""
    count = 0
    masks: dict[int, int] = {}  # many small ranges share a chunk: each is read once
    for start, end in ranges:
        start = max(start, header.low)
        for chunk in range(start // CHUNK, (end - 1) // CHUNK + 1) if start < end else ():
            base = chunk * CHUNK
            lo, hi = max(start, base) - base, min(end, base + CHUNK) - base
            span = ((1 << (hi - lo)) - 1) << lo
            if chunk not in masks:
                masks[chunk] = _read_chunk(tr, group, ref, chunk)
            count += (span & ~masks[chunk]).bit_count()
    return count


def commit(
    db: Database | Transaction,
    group: str,
    lid: str,
    epoch: int,
    c: Commit,
    *,
    now_ms: int,
    principal: str = "",
    session_id: str = "",
) -> CommitResult:
    """Apply one commit of the lease holder at `epoch` (FencedError if stale); idempotent. Its cost is
    bounded (`prepare`) before the transaction starts. With `principal`, only the holder's principal commits."""
    return _apply(db, group, lid, epoch, prepare(c), now_ms=now_ms, principal=principal, session_id=session_id)


def _attempts_at_reject(retry_state: bytes | None, limit: int) -> int:
    """How many times a record was handled when it is rejected (rejects are few: one read each): its failed
    attempts so far, plus the one that rejected it, unless it was rejected for having reached the group's
    max attempts (then the last failed attempt was its last)."""
    if retry_state is None:
        return 1
    attempts = int(json.loads(retry_state).get("attempts", 0))
    return attempts if attempts >= limit else attempts + 1


@transactional
def _apply(
    tr: Transaction,
    group: str,
    lid: str,
    epoch: int,
    c: Commit,
    *,
    now_ms: int,
    principal: str = "",
    session_id: str = "",
) -> CommitResult:
    ref, piece = parse_lease(lid)
    check_object_name("group", group)
    check_writer(tr, group, lid, epoch, principal, session_id)
    header = read_header(tr, group, ref)
    high = validate(c, header)
    limit = group_config.max_attempts(tr, group, ref.lane)

    # a range from the low watermark on moves it; the other ranges are bounded before anything is written
    jump = next((e for s, e in c.acked if s <= header.low < e), header.low)
    touched = _chunks_touched(c.acked, jump)
    if touched > MAX_COMMIT_CHUNKS:
        raise LimitExceededError(
            f"the commit's acked ranges span {touched} blocks of {CHUNK} offsets above the low watermark "
            f"{jump}; the limit is {MAX_COMMIT_CHUNKS}"
        )
    chunks: dict[int, int] = {}
    # filtered offsets are acked ones (merged into c.acked by `prepare`); those not done before count, once
    filtered = _not_done(tr, group, ref, header, c.filtered) if c.filtered else 0
    # rejects are judged against the log before this commit (one acked and rejected at once is a reject)
    rejected = [j for j in c.rejects if not _is_done(tr, group, ref, header, j.offset, chunks)]
    jumped = 0
    if jump > header.low:
        header, jumped = _jump(tr, group, ref, header, jump, chunks)

    # acks and rejects are done offsets: OR them into the chunks' bitmaps
    done_new = [r for r in c.acked if r[1] > header.low] + [(j.offset, j.offset + 1) for j in rejected]
    # below the low watermark everything is done already
    merged_bits = offsets.merge_masks(
        offsets.chunk_masks(done_new, floor=header.low),
        offsets.bitmap_chunk_masks(c.acked_bitmap, c.acked_bitmap_base, floor=header.low) if c.acked_bitmap else {},
    )
    added = 0
    for chunk, bits in merged_bits.items():
        old = chunks[chunk] if chunk in chunks else _read_chunk(tr, group, ref, chunk)
        merged = old | bits
        added += (merged ^ old).bit_count()
        chunks[chunk] = merged
        if merged != old:
            _write_chunk(tr, group, ref, chunk, merged)
    for j in rejected:
        mark = {
            "reason": j.reason,
            "dlq": asdict(j.dlq) if j.dlq else {},
            "attempts": _attempts_at_reject(tr.get(keys.retry_key(group, ref, j.offset)), limit),
            "time_ms": now_ms,
        }
        tr.set(keys.reject_key(group, ref, j.offset), mark_json(mark))
    counted = len(c.rejects) if planted.REJECT_COUNTED_TWICE in planted.active else len(rejected)
    retries, rejects = header.retries, header.rejects + counted

    # retry state: the highest attempt wins; at the group's max attempts the offset is exhausted, and its
    # holder may write its dlq copy: the copy is counted here, before it is written
    exhausted = []
    copies = []
    for r in c.retries:
        if _is_done(tr, group, ref, header, r.offset, chunks):
            continue  # acked or rejected meanwhile: nothing to retry
        key = keys.retry_key(group, ref, r.offset)
        raw = tr.get(key)
        old_state = json.loads(raw) if raw else None
        if old_state and old_state["attempts"] > r.attempt:
            continue  # a late re-send of an older attempt changes nothing
        if old_state and old_state["exhausted"] and old_state["attempts"] == r.attempt:
            exhausted.append(r.offset)  # the same commit again: the same answer, nothing changes
            copies.append(DlqCopy(r.offset, old_state.get("copies", 1)))
            continue
        attempts = max(r.attempt, old_state["attempts"] if old_state else 0)
        begun: int = old_state.get("copies", 0) if old_state else 0
        state: dict[str, Any] = {
            "attempts": attempts,
            "next_ms": now_ms + r.backoff_ms,
            "error": r.error,
            "exhausted": attempts >= limit,
            "copies": begun,
        }
        if state["exhausted"]:
            state["error"] = f"{GAVE_UP}: {r.error}"[:MAX_TEXT]
            exhausted.append(r.offset)
            if not (old_state and _copy_in_flight(old_state, now_ms)):
                state.update(copies=begun + 1, copy_ms=now_ms)
                copies.append(DlqCopy(r.offset, begun + 1))
            else:  # the copy begun already is the one to write (asking again for it is granted the same)
                copies.append(DlqCopy(r.offset, begun))
        tr.set(key, json.dumps(state, sort_keys=True).encode())
        retries += 0 if old_state else 1
    # dlq copies about to be written for rejects: counted before they are written, skipped once rejected, and
    # refused when a later copy was begun already (asking again for the same number is granted the same)
    for j in c.copying:
        if _is_done(tr, group, ref, header, j.offset, chunks):
            continue
        key = keys.retry_key(group, ref, j.offset)
        raw = tr.get(key)
        old_state = json.loads(raw) if raw else {"attempts": 0, "next_ms": 0, "copies": 0}
        begun = old_state.get("copies", 0)
        number = j.copy or begun + 1
        if planted.COPY_NUMBER_REUSED in planted.active and begun:
            number = begun  # the planted bug: the copy begun by another holder, granted again at once
        elif number < begun or (number > begun and _copy_in_flight(old_state, now_ms)):
            continue  # a later copy was begun, or an earlier one may still land: this one waits
        copy_ms = old_state.get("copy_ms", now_ms) if number == begun else now_ms
        state = {**old_state, "error": j.reason, "exhausted": True, "copies": number, "copy_ms": copy_ms}
        tr.set(key, json.dumps(state, sort_keys=True).encode())
        copies.append(DlqCopy(j.offset, number))
        retries += 0 if raw else 1

    # done offsets need no retry state
    if retries and (done_new or c.acked_bitmap or jumped):
        r0 = keys.RETRIES.range((group, *ref))
        for key, _ in tr.get_range(r0.start, r0.stop):
            if _is_done(tr, group, ref, header, keys.RETRIES.unpack(key)[-1], chunks):
                tr.clear(key)
                retries -= 1

    # advance the low watermark over contiguous done offsets, deleting the chunks it passes
    low, consumed = header.low, 0
    while True:
        chunk = low // CHUNK
        base = chunk * CHUNK
        mask = chunks[chunk] if chunk in chunks else _read_chunk(tr, group, ref, chunk)
        ones = offsets.contiguous_from(mask, low - base)  # done offsets from the low watermark on
        if ones == 0:
            break
        low += ones
        kept = mask & ~((1 << (low - base)) - 1)
        consumed += (mask ^ kept).bit_count()
        chunks[chunk] = kept
        _write_chunk(tr, group, ref, chunk, kept)
        if low < base + CHUNK:
            break
    if planted.DROP_RETRIES in planted.active and low > header.low and retries:
        r0 = keys.RETRIES.range((group, *ref))
        tr.clear_range(r0.start, r0.stop)
        retries = 0
    oldest, slice_pending = _pending_times(c, header, max(high, low), piece)
    new_header = replace(
        header,
        low=low,
        high=max(high, low),
        high_ts_ms=max(header.high_ts_ms, c.high_watermark_ts_ms),
        oldest_pending_ts_ms=oldest,
        slice_pending=slice_pending,
        done_above=header.done_above + added - consumed,
        retries=retries,
        rejects=rejects,
        filtered=header.filtered + filtered,
        updated_ms=now_ms,
    )
    tr.set(keys.progress_key(group, ref), header_json(new_header))
    unique = {c.offset: c for c in copies}  # an offset named twice in one commit: its last answer
    return CommitResult(low, sorted(set(exhausted)), added + jumped, retries, [unique[o] for o in sorted(unique)])


def planted_skip_to_top(tr: Transaction, group: str, ref: PartitionRef) -> None:
    """The planted MERGE_DROPS_SLICE bug's write: the low watermark moved past the highest done offset."""
    header = read_header(tr, group, ref)
    r0 = keys.DONE.range((group, *ref))
    rows = tr.get_range(r0.start, r0.stop)
    if not rows:
        return
    chunk = keys.DONE.unpack(rows[-1][0])[-1]
    top = chunk * CHUNK + int.from_bytes(rows[-1][1], "little").bit_length()
    tr.clear_range(r0.start, r0.stop)
    tr.set(keys.progress_key(group, ref), header_json(replace(header, low=max(top, header.low), done_above=0)))


def done_from(tr: Transaction, group: str, ref: PartitionRef, offset: int) -> int:
    """How many offsets at or after `offset` the group has finished on a partition (what a rewind to `offset`
    processes again). Reads the done chunks above it, at most one per CHUNK offsets the group is ahead."""
    header = read_header(tr, group, ref)
    if not header.updated_ms:
        return 0
    below = max(0, header.low - offset)
    if offset <= header.low:
        return below + header.done_above
    r0 = keys.DONE.range((group, *ref))
    first = keys.done_key(group, ref, offset // CHUNK)
    count = 0
    for key, raw in tr.get_range(first, r0.stop, snapshot=True):
        chunk = keys.DONE.unpack(key)[-1]
        mask = int.from_bytes(raw, "little")
        if chunk == offset // CHUNK:
            mask &= ~((1 << (offset - chunk * CHUNK)) - 1)
        count += mask.bit_count()
    return count


def rewind(tr: Transaction, group: str, ref: PartitionRef, offset: int, *, now_ms: int, pending_ts_ms: int = 0) -> None:
    """Forget what the group finished on a partition at or after `offset`: its done offsets, retries and
    rejects there are cleared, for this group only, so its next holder reads from `offset` (or from its low
    watermark, when that is lower) and processes them again. Below `offset` nothing changes. The oldest pending
    record's time becomes `pending_ts_ms` (the record at `offset`), unless records below `offset` still wait."""
    header = read_header(tr, group, ref)
    low = min(header.low, offset) if header.updated_ms else offset
    r0 = keys.DONE.range((group, *ref))
    if offset <= header.low:
        tr.clear_range(r0.start, r0.stop)
        done_above = 0
    else:
        chunk = offset // CHUNK
        kept = _read_chunk(tr, group, ref, chunk) & ((1 << (offset - chunk * CHUNK)) - 1)
        _write_chunk(tr, group, ref, chunk, kept)
        tr.clear_range(keys.done_key(group, ref, chunk + 1), r0.stop)
        done_above = kept.bit_count() + sum(
            int.from_bytes(raw, "little").bit_count()
            for _, raw in tr.get_range(r0.start, keys.done_key(group, ref, chunk))
        )
    r = keys.RETRIES.range((group, *ref))
    tr.clear_range(keys.retry_key(group, ref, offset), r.stop)
    retries = len(tr.get_range(r.start, keys.retry_key(group, ref, offset)))
    r = keys.REJECTS.range((group, *ref))
    tr.clear_range(keys.reject_key(group, ref, offset), r.stop)
    _changed_rejects(tr, group, ref.stream)
    at = offset // CHUNK  # the redriven bits from `offset` on go with their marks
    kept_bits = RedrivenBits(tr).chunk(group, ref, at) & ((1 << (offset - at * CHUNK)) - 1)
    _write_bits(tr, keys.redriven_key(group, ref, at), kept_bits)
    tr.clear_range(keys.redriven_key(group, ref, at + 1), keys.REDRIVEN.range((group, *ref)).stop)
    bits, prefix = RedrivenBits(tr), keys.reject_prefix(group, ref)
    states = [
        _state_of(raw, bits.has(group, ref, keys.offset_in(key, prefix)))
        for key, raw in tr.get_range(r.start, keys.reject_key(group, ref, offset))
    ]
    # behind `offset`, the records from the low watermark on wait still and are older: their time stands
    behind = header.updated_ms and offset > header.low and header.oldest_pending_ts_ms > 0
    rewound = replace(
        header,
        low=low,
        high=max(header.high, low),
        oldest_pending_ts_ms=pending_ts_ms if pending_ts_ms > 0 and not behind else header.oldest_pending_ts_ms,
        slice_pending={},  # the slices' next commits start from the rewound time, as a split's first does
        done_above=done_above,
        retries=retries,
        rejects=len(states),
        redriven=states.count(REDRIVEN),
        purged=states.count(PURGED),
        updated_ms=now_ms,
    )
    tr.set(keys.progress_key(group, ref), header_json(rewound))


MAX_BATCH_LEASES = 4096
"""Leases in one batched commit."""


def check_batch_size(leases: int) -> None:
    if leases > MAX_BATCH_LEASES:
        raise LimitExceededError(f"a batched commit holds {leases} leases; the limit is {MAX_BATCH_LEASES}")


def check_batch(commits: list[tuple[str, int, Commit]]) -> None:
    """Bound a batched commit's work before any transaction starts."""
    check_batch_size(len(commits))
    entries = sum(len(c.acked) + len(c.retries) + len(c.rejects) for _, _, c in commits)
    if entries > MAX_ENTRIES:
        raise LimitExceededError(
            f"a batched commit holds {entries} ranges, retries and rejects; the limit is {MAX_ENTRIES}"
        )
    bitmaps = sum(len(c.acked_bitmap) for _, _, c in commits)
    if bitmaps > MAX_BITMAP_BYTES:
        raise LimitExceededError(f"a batched commit holds {bitmaps} bitmap bytes; the limit is {MAX_BITMAP_BYTES}")


def commit_many(
    db: Database,
    group: str,
    commits: list[tuple[str, int, Commit]],
    *,
    now_ms: int,
    principal: str = "",
    session_id: str = "",
) -> list[CommitResult | StreamplaneError]:
    """Apply one worker's commits of many leases in one transaction. Each is fenced and validated on its own
    (before it writes anything), so a stale or bad one is refused in its result and the others apply."""
    check_batch(commits)
    prepared: list[Commit | StreamplaneError] = []
    for _, _, c in commits:
        try:
            prepared.append(prepare(c))
        except StreamplaneError as err:
            prepared.append(err)
    leases = [(lid, epoch) for lid, epoch, _ in commits]
    return _apply_many(db, group, leases, prepared, now_ms=now_ms, principal=principal, session_id=session_id)


@transactional
def _apply_many(
    tr: Transaction,
    group: str,
    leases: list[tuple[str, int]],
    prepared: list[Commit | StreamplaneError],
    *,
    now_ms: int,
    principal: str = "",
    session_id: str = "",
) -> list[CommitResult | StreamplaneError]:
    tr.run_alone()  # many workers' batches at once: on PostgreSQL, queued rather than racing and retrying
    _prefetch(tr, group, [lease for lease, c in zip(leases, prepared, strict=True) if isinstance(c, Commit)])
    out: list[CommitResult | StreamplaneError] = []
    for (lid, epoch), c in zip(leases, prepared, strict=True):
        if isinstance(c, StreamplaneError):
            out.append(c)
            continue
        try:
            out.append(_apply(tr, group, lid, epoch, c, now_ms=now_ms, principal=principal, session_id=session_id))
        except StreamplaneError as err:
            if isinstance(err, FencedError) and err.current_epoch == TORN_EPOCH:
                reread_torn(tr, group, lid)
            out.append(err)
    return out


def _prefetch(tr: Transaction, group: str, leases: list[tuple[str, int]]) -> None:
    """Read what the commits of many leases read, together: the group, its settings, each generation, each
    partition's summary, its done blocks and retry state (on PostgreSQL, two statements instead of about six
    per lease). Lease ids that do not parse are left to their commit's own error."""
    wanted = [keys.group_key(group), keys.group_config_key(group)]
    spans = []
    for lid, epoch in leases:
        try:
            ref = _partition(group, lid)
        except StreamplaneError:
            continue
        wanted += [keys.generation_key(ref.stream, ref.lane, ref.generation), keys.progress_key(group, ref)]
        if epoch:
            wanted.append(lease_store_key(group, lid))  # a slice's lease, for a slice holder's commit
        for space in (keys.DONE, keys.RETRIES):
            r = space.range((group, *ref))
            spans.append((r.start, r.stop))
    tr.prefetch(wanted, spans)


@dataclass(frozen=True)
class Progress:
    header: Header
    done: list[offsets.Range]
    """The first done ranges above the low watermark."""
    retrying: list[int] = field(default_factory=list)
    """The first offsets with retry state."""


@transactional
def progress(tr: Transaction, group: str, lid: str, *, max_ranges: int = 1000) -> Progress:
    ref = _partition(group, lid)
    header = read_header(tr, group, ref)
    done: list[offsets.Range] = []
    r0 = keys.DONE.range((group, *ref))
    for key, raw in tr.get_range(r0.start, r0.stop, snapshot=True):
        if len(done) >= max_ranges:
            break
        chunk = keys.DONE.unpack(key)[-1]
        done.extend(offsets.mask_ranges(int.from_bytes(raw, "little"), chunk * CHUNK))
    done = offsets.normalize(done)[:max_ranges]
    r0 = keys.RETRIES.range((group, *ref))
    retrying = [keys.RETRIES.unpack(k)[-1] for k, _ in tr.get_range(r0.start, r0.stop, limit=max_ranges, snapshot=True)]
    return Progress(header, done, retrying)


@transactional
def progress_many(tr: Transaction, group: str, lids: Sequence[str], *, max_ranges: int = 100_000) -> list[Progress]:
    """The progress of `lids` in their order, in one transaction, their done ranges and retrying offsets
    `max_ranges` in all: a lease whose ranges do not fit in what is left is left out with the leases after it
    (the caller asks again for them); the first is always listed, cut at `max_ranges` as `progress` cuts. Every
    lease id is checked before anything is read."""
    if len(lids) > MAX_PROGRESS_LEASES:
        raise InvalidArgumentError(f"at most {MAX_PROGRESS_LEASES} leases a call, not {len(lids)}")
    if max_ranges <= 0:
        raise InvalidArgumentError(f"max_ranges must be positive, not {max_ranges}")
    refs = [_partition(group, lid) for lid in lids]
    out: list[Progress] = []
    left = max_ranges
    for i, lid in enumerate(lids):
        if i % PROGRESS_PREFETCH == 0:  # a step at a time: what the budget leaves out is not read
            _prefetch_progress(tr, group, refs[i : i + PROGRESS_PREFETCH])
        p = progress(tr, group, lid, max_ranges=left)
        used = max(len(p.done), len(p.retrying))
        if out and used >= left:  # it may have been cut: it is asked again, first of the next call
            break
        out.append(p)
        left -= used
        if left <= 0:
            break
    return out


PROGRESS_PREFETCH = 64
"""Leases whose progress `progress_many` asks the store for together (one round trip on a remote store); the
next ones are asked for only if the call's budget reaches them."""


def _prefetch_progress(tr: Transaction, group: str, refs: Sequence[PartitionRef]) -> None:
    """Hint the store that these partitions' headers, done ranges and retries are about to be read."""
    spans = [
        (r.start, r.stop) for ref in refs for r in (keys.DONE.range((group, *ref)), keys.RETRIES.range((group, *ref)))
    ]
    tr.prefetch([keys.progress_key(group, ref) for ref in refs], spans)


@transactional
def due_retries(
    tr: Transaction, group: str, lid: str, epoch: int, *, now_ms: int, limit: int = 1000
) -> list[RetryState]:
    """Offsets whose next attempt is due, and exhausted ones still waiting for their reject (so a new holder
    finishes what a crashed one left), for the lease holder at `epoch`."""
    ref = _partition(group, lid)
    check_writer(tr, group, lid, epoch)
    r0 = keys.RETRIES.range((group, *ref))
    due = []
    for key, raw in tr.get_range(r0.start, r0.stop):
        state = json.loads(raw)
        if state["exhausted"] and _copy_in_flight(state, now_ms):
            continue  # its dlq copy may still land: not due until that is over
        if state["exhausted"] or state["next_ms"] <= now_ms:
            due.append(
                RetryState(
                    offset=keys.RETRIES.unpack(key)[-1],
                    attempts=state["attempts"],
                    next_attempt_ms=state["next_ms"],
                    last_error=state["error"],
                    exhausted=state["exhausted"],
                    copies=state.get("copies", 0),
                )
            )
            if len(due) >= limit:
                break
    return due


@transactional
def read_headers(tr: Transaction, group: str, *, stream: str = "", lane: str = "") -> list[tuple[PartitionRef, Header]]:
    """Every partition summary of one group, optionally of one stream (and lane), in key order."""
    check_object_name("group", group)
    prefix: tuple[str, ...] = (group,) + ((stream,) if stream else ()) + ((lane,) if stream and lane else ())
    r0 = keys.PROGRESS.range(prefix)
    out = []
    for key, raw in tr.get_range(r0.start, r0.stop, snapshot=True):
        _, s, la, gen, p = keys.PROGRESS.unpack(key)
        if lane and la != lane:
            continue
        header = _decoded_header(raw)
        if header is not None:  # one that does not decode is left out, as `lag_page` does
            out.append((PartitionRef(s, la, gen, p), header))
    return out


T = TypeVar("T")

REJECT_PAGE_SIZE = 1000
"""Rejected records a page holds at most (and groups a page of every group's rejects looks at)."""
REJECT_SCAN_PAGES = 10
"""A filtered page looks at no more than this many pages' worth of rejects (it may come back short)."""
PURGE_BATCH = 1000
"""Rejects one purge transaction marks at most."""
PENDING_REJECT, REDRIVEN, PURGED = "pending", "redriven", "purged"
"""A reject's state in `dlq list`: pending (its record waits in the dlq lane), redriven (`dlq redrive` produced
it again), or purged."""


def mark_json(mark: dict[str, Any]) -> bytes:
    """A reject mark as stored: JSON with sorted keys (orjson: a redrive batch writes thousands)."""
    return orjson.dumps(mark, option=orjson.OPT_SORT_KEYS)


def mark_of(raw: bytes) -> Any:
    """A stored reject mark as decoded (any JSON value: the caller checks it is a mark); ValueError for bytes
    that are not JSON."""
    return orjson.loads(raw)


def _state_of(raw: bytes, redriven: bool) -> str:
    """A stored reject mark's state (see `reject_state`; pending for one that does not decode)."""
    try:
        return reject_state(mark_of(raw), redriven)
    except (ValueError, AttributeError):
        return PENDING_REJECT


def reject_changes(tr: Transaction, group: str, stream: str) -> int:
    """How many times a rewind or a purge changed the group's reject marks on `stream` (0 for bytes that are not
    a count: a completion that compares it then reads the marks again, as it would for a change)."""
    raw = tr.get(keys.redrive_changes_key(group, stream))
    return int(raw) if raw is not None and raw.isdigit() else 0


def _changed_rejects(tr: Transaction, group: str, stream: str) -> None:
    """Count a change of the group's reject marks on `stream` other than a redrive's: a running redrive's
    batches claimed before it are checked mark by mark at their completion."""
    tr.set(keys.redrive_changes_key(group, stream), b"%d" % (reject_changes(tr, group, stream) + 1))


def count_state_changes(tr: Transaction, group: str, changed: list[tuple[PartitionRef, str, str]]) -> None:
    """Keep the headers' reject counts in step with marks whose state changed: (partition, from, to) each."""
    by_partition: dict[PartitionRef, list[tuple[str, str]]] = {}
    for ref, old, new in changed:
        by_partition.setdefault(ref, []).append((old, new))
    for ref, moves in by_partition.items():
        header = read_header(tr, group, ref)
        counts = {REDRIVEN: header.redriven, PURGED: header.purged}
        for old, new in moves:
            if old in counts:
                counts[old] -= 1
            if new in counts:
                counts[new] += 1
        changed_header = replace(header, redriven=max(0, counts[REDRIVEN]), purged=max(0, counts[PURGED]))
        tr.set(keys.progress_key(group, ref), header_json(changed_header))


def _rejected(
    group: str, ref: PartitionRef, offset: int, raw: bytes, bits: RedrivenBits
) -> tuple[dict[str, Any], RejectedRecord] | None:
    """A stored reject mark, and it as the model's record; None for one that does not decode (left out)."""
    try:
        mark = mark_of(raw)
    except ValueError:
        return None
    record = rejected_record(group, ref, offset, mark, bits.has(group, ref, offset))
    return (mark, record) if record is not None else None


def rejected_record(
    group: str, ref: PartitionRef, offset: int, mark: Any, redriven: bool = False
) -> RejectedRecord | None:
    """A decoded reject mark as the model's record, `redriven` its bit; None for one that is not a mark's shape
    (left out)."""
    try:
        dlq = mark.get("dlq") or None
        return RejectedRecord(
            partition=ref,
            offset=offset,
            reason=str(mark.get("reason", "")),
            attempts=int(mark.get("attempts", 0)),
            rejected_ms=int(mark.get("time_ms", 0)),
            dlq=DlqLocation(**dlq) if dlq else None,
            group=group,
            state=reject_state(mark, redriven),
        )
    except (ValueError, TypeError, KeyError, AttributeError):
        return None


def _reject_places(
    rows: Iterable[tuple[bytes, bytes] | None],
) -> Iterator[tuple[bytes, PartitionRef, int, bytes] | None]:
    """(key, partition, offset, stored mark) of reject rows in key order (a None, `_chunked`'s "more remain",
    passes through). A partition's rows share its prefix, so only the first of each is unpacked whole; the
    others' offsets are read from their suffix (a walk reads thousands)."""
    prefix, ref = b"", None
    for row in rows:
        if row is None:
            yield None
            continue
        key, raw = row
        if ref is not None and key.startswith(prefix):
            yield key, ref, keys.offset_in(key, prefix), raw
            continue
        group, s, la, gen, p, offset = keys.REJECTS.unpack(key)
        ref = PartitionRef(s, la, gen, p)
        prefix = keys.reject_prefix(group, ref)
        yield key, ref, offset, raw


@transactional
def read_rejects(tr: Transaction, group: str, *, limit: int = 50) -> list[RejectedRecord]:
    """The group's first `limit` rejected records, of every stream (a mark that does not decode is left out)."""
    check_object_name("group", group)
    r0 = keys.REJECTS.range((group,))
    rows = tr.get_range(r0.start, r0.stop, limit=limit, snapshot=True)
    bits = RedrivenBits(tr)
    found = (_rejected(group, *place[1:], bits) for place in _reject_places(rows) if place is not None)
    return [decoded[1] for decoded in found if decoded is not None]


def walk_rejects(
    tr: Transaction,
    stream: str,
    *,
    group: str,
    lane: str = "",
    size: int,
    budget: int,
    page_token: str,
    keep: Callable[[RejectedRecord], bool],
) -> tuple[list[tuple[bytes, dict[str, Any], RejectedRecord]], str]:
    """The next at most `size` rejects that `keep`, of one group or (group "") of every group, in (group, lane,
    generation, partition, offset) order from after `page_token` ("GROUP LEASE_ID OFFSET"): (key, stored mark,
    record) each, and the token to go on from ("" when none is left). See `walk_marks`."""
    bits = RedrivenBits(tr)

    def take(group: str, key: bytes, ref: PartitionRef, offset: int, raw: bytes) -> Any:
        decoded = _rejected(group, ref, offset, raw, bits)
        return (key, *decoded) if decoded is not None and keep(decoded[1]) else None

    return walk_marks(tr, stream, group=group, lane=lane, size=size, budget=budget, page_token=page_token, take=take)


def walk_marks(
    tr: Transaction,
    stream: str,
    *,
    group: str,
    lane: str = "",
    size: int,
    budget: int,
    page_token: str,
    take: Callable[[str, bytes, PartitionRef, int, bytes], T | None],
) -> tuple[list[T], str]:
    """What `take` makes of the next at most `size` reject marks it takes (it is given each one's group, key,
    partition, offset and stored bytes; None: not taken), of one group or (group "") of every group, in (group,
    lane, generation, partition, offset) order from after `page_token`, and the token to go on from ("" when
    none is left). At most `budget` marks and `size` groups are looked at; a mark that does not decode is left
    out, never the end of the walk. NotFoundError for a stream that does not exist (deleting one deletes its
    groups' rejects), and for a group named that has never read it (a mistyped name is told so, not shown an
    empty dlq)."""
    check_object_name("stream", stream)
    require_stream(tr, stream)
    if group:
        check_object_name("group", group)
    if lane:
        check_lane_name("lane", lane)
        if tr.get(keys.lane_key(stream, lane)) is None:  # a typo is told so, not shown an empty dlq
            raise NotFoundError(f"lane {quoted(lane)} does not exist in stream {stream!r}", kind="lane", name=lane)
    after_group, after = "", b""
    if page_token:
        after_group, _, rest = page_token.partition(" ")
        lease_id, _, after_offset = rest.partition(" ")
        check_object_name("page_token's group", after_group)
        if (group and after_group != group) or (lease_id and not after_offset.isdigit()):
            raise InvalidArgumentError(f"page_token {quoted(page_token)} is not from a page of these rejects")
        if lease_id:
            after = keys.reject_key(after_group, parse_lease_id(lease_id), int(after_offset)) + b"\x00"
    if group:  # the arguments were checked: now whether the group is one
        require_reader(tr, group, stream, "it has no rejects")
    out: list[T] = []
    looked, groups, last, left = 0, 0, "", False
    at: tuple[str, PartitionRef, int] | None = None  # the last mark looked at: the token is made from it once
    current = group or after_group or _group_after(tr, keys.REJECTS, "")
    while current and not left:
        if groups >= size or looked >= budget:
            left, last = True, f"{current} "  # this group and what follows wait for the next page, from its start
            break
        groups += 1
        r = keys.REJECTS.range((current, stream, lane) if lane else (current, stream))
        start = after if current == after_group and after else r.start
        rows = _reject_places(_chunked(tr, start, r.stop, budget - looked, size + 1))
        for place in rows:
            if place is None:
                left = True  # the scan's budget ran out inside this group
                break
            key, ref, offset, raw = place
            looked += 1
            at = current, ref, offset
            taken = take(current, key, ref, offset, raw)
            if taken is None:
                continue  # not wanted, or a mark that does not decode: the ones after it are looked at
            out.append(taken)
            if len(out) == size:
                more = next(rows, _END) is not _END
                left = more or bool(not group and _group_after(tr, keys.REJECTS, current))
                break
        else:
            if not group:
                current = _group_after(tr, keys.REJECTS, current)
                continue
        break
    if left and not last and at is not None:
        last = f"{at[0]} {at[1].lease_id} {at[2]}"
    return out, last if left else ""


_END = object()


def _chunked(
    tr: Transaction, start: bytes, stop: bytes, limit: int, chunk: int
) -> Iterator[tuple[bytes, bytes] | None]:
    """The rows of [start, stop) in key order, at most `limit`, read `chunk` at a time (a walk that finds what
    it wants early reads no further), then None when rows remain past `limit`."""
    given = 0
    while given < limit:
        n = min(chunk, limit - given)
        rows = tr.get_range(start, stop, limit=n + 1, snapshot=True)
        yield from rows[:n]
        if len(rows) <= n:
            return
        given += n
        start = rows[n - 1][0] + b"\x00"
    yield None


def _page_size(page_size: int) -> int:
    return max(1, min(page_size or 100, REJECT_PAGE_SIZE))


@transactional
def reject_page(
    tr: Transaction,
    stream: str,
    *,
    group: str = "",
    lane: str = "",
    since_ms: int = 0,
    page_size: int = 100,
    page_token: str = "",
    purged: bool = False,
) -> RejectPage:
    """One page of a stream's rejected records, of one group or (group "") of every group, in (group, lane,
    generation, partition, offset) order from after `page_token` (as the previous page gave it); purged ones
    only with `purged`. With `since_ms`, only those rejected then or later (a reject recorded before times were
    kept has none, and is left out). Bounded: at most `page_size` (up to REJECT_PAGE_SIZE) records returned,
    REJECT_SCAN_PAGES times as many looked at when filtered, and as many groups; a page may come back short,
    with a token while any are left."""
    if since_ms < 0:
        raise InvalidArgumentError(f"since must be a time in unix ms (0: every reject), not {since_ms}")
    size = _page_size(page_size)
    filtered = bool(since_ms) or not purged
    found, token = walk_rejects(
        tr,
        stream,
        group=group,
        lane=lane,
        size=size,
        budget=size * (REJECT_SCAN_PAGES if filtered else 1),
        page_token=page_token,
        keep=lambda r: r.rejected_ms >= since_ms and (purged or r.state != PURGED),
    )
    return RejectPage([r for _, _, r in found], token)


@transactional
def purge_rejects(
    tr: Transaction,
    stream: str,
    *,
    before_ms: int,
    group: str = "",
    now_ms: int,
    page_token: str = "",
    dry_run: bool = False,
) -> tuple[int, str]:
    """Mark a stream's rejects recorded before `before_ms` purged, up to PURGE_BATCH of them in this transaction
    (of one group, or of every group): `dlq list` no longer shows them; their records stay done, and Kafka's
    retention still owns the copies' bytes. Returns how many it purged (would purge, with `dry_run`) and the
    token to go on from ("" when none is left). A reject from before times were kept counts as before any."""
    if before_ms <= 0:
        raise InvalidArgumentError(f"before must be a time in unix ms, not {before_ms}")
    if before_ms > now_ms:
        raise InvalidArgumentError("before is in the future: purge what was rejected up to now at the latest")
    found, token = walk_rejects(
        tr,
        stream,
        group=group,
        lane="",
        size=PURGE_BATCH,
        budget=PURGE_BATCH * REJECT_SCAN_PAGES,
        page_token=page_token,
        keep=lambda r: r.rejected_ms < before_ms and r.state != PURGED,
    )
    if not dry_run:
        by_group: dict[str, list[tuple[PartitionRef, str, str]]] = {}
        for key, mark, record in found:
            tr.set(key, mark_json({**mark, "state": PURGED, "purged_ms": now_ms}))
            by_group.setdefault(record.group, []).append((record.partition, record.state, PURGED))
        for changed_group, changed in by_group.items():
            count_state_changes(tr, changed_group, changed)
            _changed_rejects(tr, changed_group, stream)
    return len(found), token


class _Abandoned:
    """Whether a generation was abandoned, read once per generation in one transaction."""

    def __init__(self, tr: Transaction) -> None:
        self._tr, self._seen = tr, dict[tuple[str, str, int], bool]()

    def __call__(self, ref: PartitionRef) -> bool:
        gen = (ref.stream, ref.lane, ref.generation)
        if gen not in self._seen:
            raw = self._tr.get(keys.generation_key(*gen))
            try:
                self._seen[gen] = raw is not None and Generation.from_json(raw).state == ABANDONED
            except UNDECODABLE:  # bad data in the store: its partitions' lag is shown, as for any other
                self._seen[gen] = False
        return self._seen[gen]


@transactional
def lag(tr: Transaction, group: str, *, stream: str = "", lane: str = "", now_ms: int, partitions: bool = True) -> Lag:
    """Lag per partition and lane of one group, optionally of one stream (and lane); without `partitions`,
    the lanes' totals only (every header is still read). Partitions of abandoned generations are left out:
    what they hold is lost (the abandon event lists it), not late."""
    each: list[PartitionLag] = []
    lanes: dict[tuple[str, str], LaneLag] = {}
    abandoned = _Abandoned(tr)
    for ref, h in read_headers(tr, group, stream=stream, lane=lane):
        if abandoned(ref):
            continue
        off, t = h.offset_lag(), h.time_lag_ms(now_ms)
        if partitions:
            each.append(PartitionLag(group, ref.lease_id, h.low, h.high, off, t, h.filtered))
        was = lanes.get((ref.stream, ref.lane)) or LaneLag(group, ref.stream, ref.lane, 0, 0)
        lanes[(ref.stream, ref.lane)] = replace(
            was,
            offset_lag=was.offset_lag + off,
            time_lag_ms=max(was.time_lag_ms, t),
            dlq_pending=was.dlq_pending + max(0, h.rejects - h.redriven - h.purged),
            dlq_redriven=was.dlq_redriven + h.redriven,
            dlq_purged=was.dlq_purged + h.purged,
            filtered=was.filtered + h.filtered,
        )
    return Lag(group=group, partitions=tuple(each), lanes=tuple(lanes[k] for k in sorted(lanes)))


def lag_of_every_group(db: Database, *, stream: str = "", lane: str = "", now_ms: int, partitions: bool = True) -> Lag:
    """The lag of every group that committed, one transaction per group (the metrics' scrape)."""
    each = [
        lag(db, g, stream=stream, lane=lane, now_ms=now_ms, partitions=partitions)
        for g in read_groups_with_progress(db)
    ]
    return Lag(
        group="",
        partitions=tuple(x for one in each for x in one.partitions),
        lanes=tuple(x for one in each for x in one.lanes),
    )


LAG_PAGE_SIZE = 1000
"""Partitions a page of lag holds at most (and groups a page of every group's lag looks at)."""


@transactional
def lag_page(
    tr: Transaction,
    group: str,
    *,
    stream: str = "",
    lane: str = "",
    now_ms: int,
    page_size: int,
    page_token: str = "",
) -> Lag:
    """One page of per-partition lag, of one group or (group "") of every group, in (group, partition) order
    from after `page_token` ("GROUP LEASE_ID", as the previous page gave it); no lanes' totals. Bounded: at
    most `page_size` (up to LAG_PAGE_SIZE) headers and as many groups looked at; a page may come back short
    (abandoned generations, another lane, groups that do not read the stream), with a token while any are
    left."""
    if group:
        check_object_name("group", group)
    if stream:
        check_object_name("stream", stream)
    size = max(1, min(page_size, LAG_PAGE_SIZE))
    after_group, after = "", b""
    if page_token:
        after_group, _, lease_id = page_token.partition(" ")
        check_object_name("page_token's group", after_group)
        if group and after_group != group:
            raise InvalidArgumentError(f"page_token {quoted(page_token)} is not from a page of group {group!r}")
        if lease_id:  # (none: the page before stopped ahead of this group, with nothing of it read)
            after = keys.progress_key(after_group, parse_lease_id(lease_id)) + b"\x00"
    abandoned = _Abandoned(tr)
    out: list[PartitionLag] = []
    looked, groups, last, left = 0, 0, "", False
    current = group or after_group or _group_after(tr, keys.PROGRESS, "")
    while current:
        room = size - looked
        if room <= 0 or groups >= size:
            left = True  # `current` and what follows it wait for the next page
            last = last or f"{current} "  # (a group passed over with nothing read: start at it)
            break
        groups += 1
        prefix: tuple[str, ...] = (current,) + ((stream,) if stream else ()) + ((lane,) if stream and lane else ())
        r = keys.PROGRESS.range(prefix)
        start = after if current == after_group and after else r.start
        rows = tr.get_range(start, r.stop, limit=room + 1, snapshot=True)
        for key, raw in rows[:room]:
            looked += 1
            _, s, la, gen, p = keys.PROGRESS.unpack(key)
            ref = PartitionRef(s, la, gen, p)
            last = f"{current} {ref.lease_id}"
            if (lane and la != lane) or abandoned(ref):
                continue
            h = _decoded_header(raw)
            if h is None:
                continue  # a header that does not decode is left out: the page, and a sweep of every group, go on
            out.append(
                PartitionLag(current, ref.lease_id, h.low, h.high, h.offset_lag(), h.time_lag_ms(now_ms), h.filtered)
            )
        if len(rows) > room:
            left = True
            break
        if group:
            break
        current = _group_after(tr, keys.PROGRESS, current)
    return Lag(group=group, partitions=tuple(out), next_page_token=last if left else "")


def _group_after(tr: Transaction, space: Any, group: str) -> str:
    """The first group with keys in `space` (progress, rejects) after `group` ("" for the first of all); "" when
    none is left."""
    whole = space.range()
    begin = space.range((group,)).stop if group else whole.start
    rows = tr.get_range(begin, whole.stop, limit=1, snapshot=True)
    return str(space.unpack(rows[0][0])[0]) if rows else ""


@transactional
def read_groups_with_progress(tr: Transaction) -> list[str]:
    """Groups that have committed anything (for the lag metrics)."""
    groups: list[str] = []
    while group := _group_after(tr, keys.PROGRESS, groups[-1] if groups else ""):
        groups.append(group)
    return groups
