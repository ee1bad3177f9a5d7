"""Sets of offsets as sorted, disjoint, non-adjacent half-open ranges [start, end).

Clients coalesce the offsets they acked into ranges before committing; GetProgress lists done offsets as
ranges. (The commit log itself keeps done offsets as bitmaps: see commitlog.py.)
"""

from __future__ import annotations

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
