"""The key ranges a transaction cleared, as a set: whether a key is in one is a bisection, not a scan.

A transaction that clears a few ranges for each of many partitions (a rewind of a stream's 128 partitions
clears 640) had every later read, and every watch at commit, test each range in turn: the rewind's own
reads cost more than its writes.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator


class RangeSet:
    """Half-open ranges [begin, end) of keys, kept sorted and merged (ranges that overlap or touch become one),
    so that both their starts and their ends are in order."""

    __slots__ = ("_begins", "_ends")

    def __init__(self, ranges: Iterable[tuple[bytes, bytes]] = ()) -> None:
        self._begins: list[bytes] = []
        self._ends: list[bytes] = []
        for begin, end in ranges:
            self.add(begin, end)

    def add(self, begin: bytes, end: bytes) -> None:
        """Add [begin, end); an empty range (end <= begin) holds no key and adds nothing."""
        if end <= begin:
            return
        i = bisect.bisect_left(self._ends, begin)  # the first range ending at or after `begin`
        j = bisect.bisect_right(self._begins, end)  # past the last range starting at or before `end`
        if i < j:  # ranges i..j-1 overlap or touch the new one: one range now
            begin, end = min(begin, self._begins[i]), max(end, self._ends[j - 1])
        self._begins[i:j] = [begin]
        self._ends[i:j] = [end]

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, bytes):
            return False
        i = bisect.bisect_right(self._begins, key) - 1
        return i >= 0 and key < self._ends[i]

    def meets(self, begin: bytes, end: bytes) -> bool:
        """Whether some range holds a key of [begin, end) (two bisections: a read asks it of every range)."""
        i = bisect.bisect_right(self._ends, begin)  # the first range ending after `begin`
        return i < len(self._begins) and self._begins[i] < end

    def __iter__(self) -> Iterator[tuple[bytes, bytes]]:
        return iter(list(zip(self._begins, self._ends, strict=True)))

    def __len__(self) -> int:
        return len(self._begins)

    def __repr__(self) -> str:
        return f"RangeSet({list(self)!r})"
