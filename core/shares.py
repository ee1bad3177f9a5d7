"""Cutting work into shares of about equal size, in order: a fetch response's partitions among decode threads,
a Spark read's ranges among its tasks."""

from __future__ import annotations


def even_runs(sizes: list[int], n: int) -> list[tuple[int, int]]:
    """[start, end) index ranges cutting `sizes` into at most `n` runs of about equal total size, in order, none
    empty (fewer than `n` when there are fewer items, or when big items take a run's share each)."""
    out: list[tuple[int, int]] = []
    total, start, acc = sum(sizes), 0, 0
    for i, size in enumerate(sizes):
        acc += size
        if len(out) < n - 1 and acc * n >= total * (len(out) + 1) and i + 1 < len(sizes):
            out.append((start, i + 1))
            start = i + 1
    out.append((start, len(sizes)))
    return out
