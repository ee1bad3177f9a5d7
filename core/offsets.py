"""Sets of Kafka offsets in the three forms they cross the wire and the store in, and the conversions.

- ranges: sorted, disjoint half-open [start, end) pairs (commits, GetProgress);
- a bitmap: bit i (little-endian) set = offset base + i (a commit's scattered acks, smaller than ranges);
- chunk masks: the commit log's store form, one int per CHUNK-aligned block of offsets (bit i = chunk*CHUNK+i).

Pure functions, used by the client (building commits) and the commit log (applying them).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

Range = tuple[int, int]
"""[start, end): start included, end excluded."""

CHUNK = 4096
"""Offsets per chunk mask: a stored value of at most 512 bytes."""


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


def subtract(ranges: list[Range], minus: list[Range]) -> list[Range]:
    """The offsets of normalized `ranges` that are not in normalized `minus`, as normalized ranges (one walk
    of both)."""
    if not minus:
        return ranges
    out: list[Range] = []
    i = 0
    for start, end in ranges:
        while i < len(minus) and minus[i][1] <= start:
            i += 1
        j = i
        while start < end:
            if j >= len(minus) or minus[j][0] >= end:
                out.append((start, end))
                break
            if minus[j][0] > start:
                out.append((start, minus[j][0]))
            start = max(start, minus[j][1])
            j += 1
    return out


def to_ranges(offsets: Iterable[int]) -> list[Range]:
    """Offsets, in any order and with repeats, as normalized ranges."""
    out: list[Range] = []
    for o in sorted(offsets):
        if out and out[-1][1] == o:
            out[-1] = (out[-1][0], o + 1)
        elif not out or o >= out[-1][1]:
            out.append((o, o + 1))
    return out


def runs(offsets: list[int]) -> list[Range]:
    """Ascending offsets as ranges; one range, at once, when they are contiguous (the common case)."""
    if offsets and offsets[-1] - offsets[0] + 1 == len(offsets):
        return [(offsets[0], offsets[-1] + 1)]
    return to_ranges(offsets)


def to_bitmap(offsets: Iterable[int]) -> tuple[bytes, int]:
    """(bitmap, base) with bit i set for offset base + i; base is the smallest offset (b"", 0 for none)."""
    ordered = sorted(set(offsets))
    if not ordered:
        return b"", 0
    base = ordered[0]
    bits = bytearray((ordered[-1] - base) // 8 + 1)
    for o in ordered:
        bits[(o - base) >> 3] |= 1 << ((o - base) & 7)
    return bytes(bits), base


def bitmap_ranges(bitmap: bytes, base: int) -> list[Range]:
    """The offsets a bitmap holds, as ranges."""
    return mask_ranges(int.from_bytes(bitmap, "little"), base)


def mask_ranges(mask: int, base: int) -> list[Range]:
    """The runs of set bits of an int (bit i = offset base + i), as ranges."""
    out, shift = [], 0
    while mask:
        skip = (mask & -mask).bit_length() - 1  # zeros before the next run
        mask >>= skip
        shift += skip
        run = (~mask & (mask + 1)).bit_length() - 1  # ones in the run
        out.append((base + shift, base + shift + run))
        mask >>= run
        shift += run
    return out


def chunk_masks(ranges: Iterable[Range], *, floor: int = 0) -> dict[int, int]:
    """{chunk: mask} of the offsets in `ranges` at or above `floor` (offsets below it are left out)."""
    masks: dict[int, int] = {}
    for start, end in ranges:
        start = max(start, floor)
        while start < end:
            chunk = start // CHUNK
            stop = min(end, (chunk + 1) * CHUNK)
            masks[chunk] = masks.get(chunk, 0) | (((1 << (stop - start)) - 1) << (start - chunk * CHUNK))
            start = stop
    return masks


def bitmap_chunk_masks(bitmap: bytes, base: int, *, floor: int = 0) -> dict[int, int]:
    """{chunk: mask} of a bitmap's offsets at or above `floor`: the bitmap shifted onto chunk boundaries."""
    first, shift = divmod(base, CHUNK)
    dense = int.from_bytes(bitmap, "little") << shift
    masks: dict[int, int] = {}
    chunk = first
    while dense:
        bits = dense & ((1 << CHUNK) - 1)
        if bits and (chunk + 1) * CHUNK > floor:
            if chunk * CHUNK < floor:
                bits &= ~((1 << (floor - chunk * CHUNK)) - 1)
            if bits:
                masks[chunk] = bits
        dense >>= CHUNK
        chunk += 1
    return masks


def merge_masks(*parts: Mapping[int, int]) -> dict[int, int]:
    """The union of several {chunk: mask} maps."""
    out: dict[int, int] = {}
    for part in parts:
        for chunk, mask in part.items():
            out[chunk] = out.get(chunk, 0) | mask
    return out


def contiguous_from(mask: int, start: int) -> int:
    """How many set bits run from bit `start` of `mask` on (0 when bit `start` is clear)."""
    rest = mask >> start
    return (~rest & (rest + 1)).bit_length() - 1
