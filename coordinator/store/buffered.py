"""A transaction that keeps its writes in memory until commit, and watches fired by key: what the embedded
and PostgreSQL drivers share. Reads merge what the transaction wrote with what `rows` says is committed; the
driver writes `values` and `cleared_ranges` at commit, then fires the watches of what changed."""

from __future__ import annotations

import bisect
import struct
import threading
from collections.abc import Callable, Sequence
from typing import Protocol

from streamplane.coordinator.store.api import (
    MAX_TRANSACTION_BYTES,
    StoreLimitError,
    StoreUnavailableError,
    check_key,
    check_value,
)
from streamplane.coordinator.store.ranges import RangeSet


class RowsReader(Protocol):
    """What a buffered transaction reads: the committed rows."""

    def get(self, key: bytes) -> bytes | None: ...

    def range(self, begin: bytes, end: bytes, limit: int, reverse: bool) -> list[tuple[bytes, bytes]]: ...


class BufferedWatch:
    """A watch: an event set when a commit that may have changed its key is known (the embedded driver's own
    commits, or PostgreSQL's notifications)."""

    def __init__(self, registry: WatchRegistry, key: bytes) -> None:
        self._registry = registry
        self.key = key
        self._fired = threading.Event()
        self._callbacks: list[Callable[[], None]] = []
        self._lock = threading.Lock()

    def fire(self) -> None:
        with self._lock:
            self._fired.set()
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback()

    def on_fire(self, callback: Callable[[], None]) -> None:
        with self._lock:
            if not self._fired.is_set():
                self._callbacks.append(callback)
                return
        callback()

    def wait(self, timeout: float | None = None) -> bool:
        if timeout == 0:  # a look, not a wait: what the simulator does for every watch at every step
            return self._fired.is_set()
        return self._fired.wait(timeout)

    def cancel(self) -> None:
        self._registry.remove(self)
        with self._lock:
            self._callbacks = []


class WatchRegistry:
    """The live watches of one database handle, by key."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_key: dict[bytes, set[BufferedWatch]] = {}

    def add(self, watch: BufferedWatch) -> None:
        with self._lock:
            self._by_key.setdefault(watch.key, set()).add(watch)

    def remove(self, watch: BufferedWatch) -> None:
        with self._lock:
            watches = self._by_key.get(watch.key)
            if watches is not None:
                watches.discard(watch)
                if not watches:
                    del self._by_key[watch.key]

    def fire_all(self) -> None:
        """Fire every watch (a change too large to name: a spurious fire is allowed, a missed one is not)."""
        with self._lock:
            fired = [w for ws in self._by_key.values() for w in ws]
            self._by_key.clear()
        for watch in fired:
            watch.fire()

    def fire(self, keys: set[bytes], ranges: RangeSet) -> None:
        with self._lock:
            if not self._by_key:
                return
            hit = [k for k in self._by_key if k in keys or k in ranges]
            fired = [w for k in hit for w in self._by_key.pop(k)]
        for watch in fired:
            watch.fire()


class StampAfterCommit:
    """A transaction's versionstamp, readable once it committed."""

    def __init__(self, stamp: bytes) -> None:
        self._stamp = stamp
        self.committed = False

    def wait(self) -> bytes:
        if not self.committed:
            raise StoreUnavailableError("the transaction did not commit, so it has no versionstamp")
        return self._stamp


class BufferedTransaction:
    """A transaction whose writes wait in memory until its commit: the embedded driver's (created by
    `EmbeddedDatabase.transact`, under its lock) and the PostgreSQL driver's (where one flush at commit saves
    a round trip per write). `rows` reads what is committed (`RowsReader`).

    Writes are kept in memory (reads see them) and reach SQLite together at commit: each SQLite call lets go
    of the GIL, and with hundreds of session threads waiting for it, a pass writing thousands of leases one
    call at a time held the store's lock for seconds while it waited to get the GIL back."""

    def __init__(self, rows: RowsReader, commit_version: int, *, read_only: bool = False) -> None:
        self._rows = rows
        self._read_only = read_only
        self._stamp = struct.pack(">QH", commit_version, 0)
        self._versionstamp = StampAfterCommit(self._stamp)
        self._bytes = 0
        self._dirty = False
        self.values: dict[bytes, bytes | None] = {}
        """What this transaction wrote (None: cleared), written to the store at commit."""
        self._keys: list[bytes] = []  # the keys of `values`, sorted: a range read finds its own by bisection
        self.written: set[bytes] = set()
        self.cleared_ranges = RangeSet()
        """The ranges this transaction cleared, merged: the driver clears them first at commit."""
        self.new_watches: list[BufferedWatch] = []
        self.registry: WatchRegistry | None = None
        self._read: dict[bytes, bytes | None] = {}
        """Committed values this transaction read (its snapshot: a second read of a key costs nothing)."""
        self._spans: list[tuple[bytes, bytes, list[tuple[bytes, bytes]]]] = []
        """Whole ranges read by `prefetch`, sorted by start: (begin, end, rows). Gets and range reads inside one
        are answered from it, absent keys included."""

    def run_alone(self) -> None:
        """The embedded store runs transactions one at a time already (the PostgreSQL driver overrides it)."""

    # -- reads
    def prefetch(self, keys: Sequence[bytes], ranges: Sequence[tuple[bytes, bytes]] = ()) -> None:
        """Nothing to gather in a store inside the process: a read costs no round trip. A driver whose reads do
        (PostgreSQL) reads them together and keeps them with `_keep`; gets and range reads then use them."""

    def _keep(
        self,
        keys: Sequence[bytes],
        found: dict[bytes, bytes],
        ranges: Sequence[tuple[bytes, bytes]],
        rows: Sequence[list[tuple[bytes, bytes]]],
    ) -> None:
        """Keep what a driver's `prefetch` read: the values of `keys` (absent ones too) and whole ranges."""
        for key in keys:
            self._read[key] = found.get(key)
        for (b, e), got in zip(ranges, rows, strict=True):
            bisect.insort(self._spans, (b, e, got), key=lambda span: span[0])

    def _unread(
        self, keys: Sequence[bytes], ranges: Sequence[tuple[bytes, bytes]]
    ) -> tuple[list[bytes], list[tuple[bytes, bytes]]]:
        """The keys and ranges not read by this transaction yet."""
        wanted = [k for k in dict.fromkeys(keys) if k not in self._read and self._span(k, k) is None]
        return wanted, [(b, e) for b, e in dict.fromkeys(ranges) if self._span(b, e) is None]

    def _span(self, begin: bytes, end: bytes) -> list[tuple[bytes, bytes]] | None:
        """The prefetched rows of a whole range holding [begin, end] (a key: begin == end), or None."""
        i = bisect.bisect_right(self._spans, begin, key=lambda span: span[0]) - 1
        if i >= 0:
            b, e, rows = self._spans[i]
            if b <= begin and (begin < e if begin == end else end <= e):
                return rows
        return None

    def get(self, key: bytes) -> bytes | None:
        check_key(key)
        if key in self.values:
            return self.values[key]
        if key in self.cleared_ranges:
            return None
        if key in self._read:
            return self._read[key]
        rows = self._span(key, key) if self._spans else None
        if rows is not None:
            i = bisect.bisect_left(rows, key, key=lambda row: row[0])
            return rows[i][1] if i < len(rows) and rows[i][0] == key else None
        value = self._read[key] = self._rows.get(key)
        return value

    def _committed_range(self, begin: bytes, end: bytes, limit: int, reverse: bool) -> list[tuple[bytes, bytes]]:
        rows = self._span(begin, end) if self._spans else None
        if rows is None:
            return self._rows.range(begin, end, limit, reverse)
        inside = rows[
            bisect.bisect_left(rows, begin, key=lambda r: r[0]) : bisect.bisect_left(rows, end, key=lambda r: r[0])
        ]
        if reverse:
            inside = inside[::-1]
        return inside[:limit] if limit > 0 else inside

    def get_range(
        self, begin: bytes, end: bytes, *, limit: int = 0, reverse: bool = False, snapshot: bool = False
    ) -> list[tuple[bytes, bytes]]:
        mine = self._written_in(begin, end)
        cleared = self.cleared_ranges.meets(begin, end)
        if not mine and not cleared:
            return self._committed_range(begin, end, limit, reverse)
        rows = self._committed_range(begin, end, 0, reverse)  # merged with this transaction's writes, then limited
        merged = {k: v for k, v in rows if k not in self.cleared_ranges} if cleared else dict(rows)
        for k in mine:
            value = self.values[k]
            if value is None:
                merged.pop(k, None)
            else:
                merged[k] = value
        out = sorted(merged.items(), reverse=reverse)
        return out[:limit] if limit > 0 else out

    def _written_in(self, begin: bytes, end: bytes) -> list[bytes]:
        """The keys this transaction wrote in [begin, end), in order (O(log n), not a scan of every write)."""
        return self._keys[bisect.bisect_left(self._keys, begin) : bisect.bisect_left(self._keys, end)]

    # -- writes
    def _account(self, key: bytes, value: bytes = b"") -> None:
        if self._read_only:
            raise StoreUnavailableError("this embedded store was opened read-only; writes go through the coordinator")
        check_key(key)
        check_value(key, value)
        self._bytes += len(key) + len(value)
        if self._bytes > MAX_TRANSACTION_BYTES:
            raise StoreLimitError(
                f"transaction of more than {self._bytes} bytes exceeds the store's limit of "
                f"{MAX_TRANSACTION_BYTES} bytes"
            )
        self._dirty = True

    def _write(self, key: bytes, value: bytes | None) -> None:
        if key not in self.values:
            bisect.insort(self._keys, key)
        self.values[key] = value
        self.written.add(key)

    def set(self, key: bytes, value: bytes) -> None:
        self._account(key, value)
        self._write(key, value)

    def clear(self, key: bytes) -> None:
        self._account(key)
        self._write(key, None)

    def clear_range(self, begin: bytes, end: bytes) -> None:
        self._account(begin, end)
        for k in self._written_in(begin, end):
            self.values[k] = None
        self.cleared_ranges.add(begin, end)

    def add(self, key: bytes, delta: int) -> None:
        old = self.get(key) or b""
        current = int.from_bytes(old[:8].ljust(8, b"\0"), "little", signed=True)
        self.set(key, ((current + delta) & 0xFFFF_FFFF_FFFF_FFFF).to_bytes(8, "little"))

    def max(self, key: bytes, value: int) -> None:
        old = self.get(key)
        current = -1 if old is None else int.from_bytes(old[:8].ljust(8, b"\0"), "little")
        if value > current:
            self.set(key, value.to_bytes(8, "little"))

    def set_versionstamped_key(self, key: bytes, value: bytes) -> None:
        if len(key) < 14:
            raise StoreLimitError("a versionstamped key needs a 10-byte stamp and a 4-byte position")
        pos = struct.unpack("<I", key[-4:])[0]
        body = key[:-4]
        if pos + 10 > len(body):
            raise StoreLimitError(f"versionstamp position {pos} lies outside the {len(body)}-byte key")
        self.set(body[:pos] + self._stamp + body[pos + 10 :], value)

    def watch(self, key: bytes) -> BufferedWatch:
        check_key(key)
        assert self.registry is not None
        watch = BufferedWatch(self.registry, key)
        self.new_watches.append(watch)
        return watch

    def get_versionstamp(self) -> StampAfterCommit:
        return self._versionstamp
