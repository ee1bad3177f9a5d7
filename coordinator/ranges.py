"""Sets of offsets as sorted, disjoint, non-adjacent half-open ranges [start, end): the commit log's core.

Pure functions over plain lists of (start, end) tuples, plus a compact binary form for one store value
(varint gaps and lengths), so a million scattered offsets fit in about a megabyte of values.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable

Range = tuple[int, int]


def normalize(ranges: Iterable[Range]) -> list[Range]:
    """Sorted, merged (overlapping or touching ranges joined), empty ranges dropped."""
    out: list[Range] = []
    for start, end in sorted(r for r in ranges if r[0] < r[1]):
        if out and start <= out[-1][1]:
            if end > out[-1][1]:
                out[-1] = (out[-1][0], end)
        else:
            out.append((start, end))
    return out


def union(a: list[Range], b: Iterable[Range]) -> list[Range]:
    """The union of a and b, normalized (a must already be)."""
    b = normalize(b)
    if not b:
        return a
    if not a:
        return b
    if len(b) < 8:  # few new ranges (the common case): splice them in
        out = list(a)
        for start, end in b:
            i = bisect_left(out, (start, start))
            if i > 0 and out[i - 1][1] >= start:
                i -= 1
            j = i
            while j < len(out) and out[j][0] <= end:
                start, end = min(start, out[j][0]), max(end, out[j][1])
                j += 1
            out[i:j] = [(start, end)]
        return out
    return normalize([*a, *b])


def advance(low: int, ranges: list[Range]) -> tuple[int, list[Range]]:
    """Move the low watermark over the done ranges it touches; drop ranges below it."""
    i = 0
    while i < len(ranges) and ranges[i][0] <= low:
        low = max(low, ranges[i][1])
        i += 1
    return low, ranges[i:]


def count(ranges: Iterable[Range]) -> int:
    return sum(end - start for start, end in ranges)


def contains(ranges: list[Range], offset: int) -> bool:
    i = bisect_left(ranges, (offset + 1, offset + 1)) - 1
    return i >= 0 and ranges[i][0] <= offset < ranges[i][1]


def clip(ranges: list[Range], start: int, end: int) -> list[Range]:
    """The part of the ranges inside [start, end)."""
    out = []
    for a, b in ranges:
        a, b = max(a, start), min(b, end)
        if a < b:
            out.append((a, b))
    return out


def _varint(value: int, out: bytearray) -> None:
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def encode(ranges: list[Range], base: int) -> bytes:
    """Normalized ranges at or above `base` as varints: (gap from the previous end, length) pairs."""
    out = bytearray()
    prev = base
    for start, end in ranges:
        _varint(start - prev, out)
        _varint(end - start, out)
        prev = end
    return bytes(out)


def decode(data: bytes, base: int) -> list[Range]:
    out: list[Range] = []
    prev, pos, n = base, 0, len(data)
    values = []
    while pos < n:
        value, shift = 0, 0
        while True:
            b = data[pos]
            pos += 1
            value |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                break
        values.append(value)
    for i in range(0, len(values) - 1, 2):
        start = prev + values[i]
        end = start + values[i + 1]
        out.append((start, end))
        prev = end
    return out
