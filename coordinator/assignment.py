"""Assignment: which worker holds which partition. A pure function, free of I/O, tested and benchmarked alone.

Rules, in order:
  1. Lanes are served by priority. The highest-priority tier is always assigned; lower tiers only where a
     worker has room under its `max_load` (when it set one), so scarce capacity goes to realtime first.
  2. Sticky: a partition stays with its live holder unless moving it narrows the gap between the most and
     least utilized workers (utilization = load / capacity) by more than the partition's own share of it
     (a move pays for itself: it never just swaps which worker is the busier one), and either that gap
     exceeds `threshold` of the mean or the move narrows it by at least `threshold`. With equal loads, no
     churn at a one-partition difference. Rebalancing is done only when the previous pass found it worth
     doing too (`proposed`): a load that looks off in one measurement moves nothing. A partition moved to
     balance load is not moved back to where it came from during a cool-down (`pinned`).
  3. Orphaned and new partitions go to the least utilized worker that has room.
Every partition is held by at most one worker in the result, and only live workers appear in it.

Balance bound (checked by the property tests): when nothing is capped by max_load, after a pass confirmed
by the one before it, for any two workers
    u_max - u_min <= max(threshold * u_mean, 1.5 * max_partition_load / min_capacity).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

PartitionKey = Any
"""Any hashable the caller names partitions by (the coordinator uses (stream, lane, generation, partition))."""


@dataclass(frozen=True)
class PartitionSpec:
    """One unit of work: a partition of a lane's generation."""

    key: PartitionKey
    priority: int = 0
    """The lane's priority; higher is served first."""
    load: float = 1.0
    """Measured throughput (records/s), or 1.0 while unknown."""


@dataclass(frozen=True)
class Assignment:
    """A pass's result: the holders, and the rebalancing moves it would make if the next pass agrees."""

    holders: dict[PartitionKey, str]
    """{partition key: worker id}; partitions left out are unassigned (no room)."""
    proposed: frozenset[tuple[PartitionKey, str]] = frozenset()
    """(partition, worker) rebalancing moves found worth making but left for the next pass to confirm."""


@dataclass(frozen=True)
class WorkerSpec:
    """A live worker."""

    id: str
    capacity: float = 1.0
    """Relative processing power: a worker with twice the capacity gets twice the load."""
    max_load: float = 0.0
    """The most load it accepts beyond the top-priority tier; 0 means no limit."""


DEFAULT_THRESHOLD = 0.1
SMOOTHING = 0.3
"""Weight of a new load measurement in a partition's smoothed load (an exponential moving average)."""


def smooth(previous: float, measured: float) -> float:
    """A partition's load after a new measurement: measurements are noisy, and a move must follow the load,
    not its noise. The first measurement is taken as it is."""
    if previous <= 0:
        return measured
    return previous + SMOOTHING * (measured - previous)


def assign(
    partitions: list[PartitionSpec],
    workers: list[WorkerSpec],
    current: Mapping[PartitionKey, str],
    *,
    threshold: float = DEFAULT_THRESHOLD,
    max_moves: int | None = None,
    proposed: frozenset[tuple[PartitionKey, str]] | None = None,
    pinned: Mapping[PartitionKey, str] | None = None,
) -> Assignment:
    """The new assignment, and the rebalancing moves it proposes for the next pass.

    Args:
        partitions: every partition that needs a holder.
        workers: the live workers.
        current: the present holders; entries for unknown partitions or dead workers are ignored.
        threshold: imbalance (relative to the mean utilization) tolerated before moving a held partition.
        max_moves: cap on rebalancing moves of held partitions in one call (None: no cap).
        proposed: the previous pass's proposals. Held partitions are rebalanced only when it is not empty
            (the imbalance was seen twice); otherwise the moves are returned as this pass's proposals. None
            rebalances at once (a fresh assignment, or tests of the rule alone).
        pinned: {partition: the worker it was moved away from} for partitions in their cool-down after a
            move: rebalancing does not move them back there (anything else still may, and a holder that leaves
            takes nothing with it).
    """
    if not workers:
        return Assignment({})
    by_id = {w.id: w for w in workers}
    load = dict.fromkeys(by_id, 0.0)
    held: dict[str, dict[PartitionKey, PartitionSpec]] = {w: {} for w in by_id}
    result: dict[PartitionKey, str] = {}
    top = max((p.priority for p in partitions), default=0)

    def fits(worker: str, p: PartitionSpec) -> bool:
        limit = by_id[worker].max_load
        return p.priority >= top or limit <= 0 or load[worker] + p.load <= limit

    def place(p: PartitionSpec, worker: str) -> None:
        result[p.key] = worker
        load[worker] += p.load
        held[worker][p.key] = p

    # 1. keep live holders (priority first, so scarce room goes to higher tiers)
    ordered = sorted(partitions, key=lambda p: (-p.priority, -p.load, repr(p.key)))
    orphans = []
    for p in ordered:
        owner = current.get(p.key)
        if owner in by_id and fits(owner, p):
            place(p, owner)
        else:
            orphans.append(p)

    # 2. orphans to the least utilized worker with room (heap of (utilization, id))
    heap = [(load[w] / by_id[w].capacity, w) for w in by_id]
    heapq.heapify(heap)
    for p in orphans:
        skipped = []
        while heap:
            util, w = heapq.heappop(heap)
            if util != load[w] / by_id[w].capacity:  # stale entry
                heapq.heappush(heap, (load[w] / by_id[w].capacity, w))
                continue
            if fits(w, p):
                place(p, w)
                heapq.heappush(heap, (load[w] / by_id[w].capacity, w))
                break
            skipped.append((util, w))
        for item in skipped:
            heapq.heappush(heap, item)

    # 3. rebalance: move from the most to the least utilized worker while that narrows their gap, either
    #    because the gap is past the tolerance, or because the move narrows it by at least that fraction
    #    (an exact fix of a small imbalance is worth it; shuffling within measurement noise is not)
    moves = 0
    planned: list[tuple[PartitionKey, str]] = []
    confirmed = proposed is None or bool(proposed)
    if not confirmed:  # plan on copies: nothing held moves before the next pass sees the same imbalance
        saved = dict(result), dict(load), {w: dict(h) for w, h in held.items()}
    while max_moves is None or moves < max_moves:
        utils = {w: load[w] / by_id[w].capacity for w in by_id}
        hi = max(utils, key=lambda w: (utils[w], w))
        lo = min(utils, key=lambda w: (utils[w], w))
        gap = utils[hi] - utils[lo]
        mean = sum(utils.values()) / len(utils)
        if gap <= 1e-12 or not held[hi]:
            break
        wide = gap > threshold * mean
        c_hi, c_lo = by_id[hi].capacity, by_id[lo].capacity
        ideal = (load[hi] * c_lo - load[lo] * c_hi) / (c_hi + c_lo)  # the load whose move equalizes the pair
        best = None
        for p in held[hi].values():
            if pinned and pinned.get(p.key) == lo:
                continue  # that would reverse a recent move
            new_gap = abs((load[hi] - p.load) / c_hi - (load[lo] + p.load) / c_lo)
            share = p.load * (1 / c_hi + 1 / c_lo) / 2  # how far the move shifts each side, on average
            worth = gap - new_gap > share + 1e-12 and (wide or new_gap <= gap * (1 - threshold))
            if worth and fits(lo, p):
                score = (abs(p.load - ideal), p.priority, repr(p.key))  # prefer the exact transfer
                if best is None or score < best[0]:
                    best = (score, p)
        if best is None:
            break
        p = best[1]
        del held[hi][p.key]
        load[hi] -= p.load
        place(p, lo)
        planned.append((p.key, lo))
        moves += 1
    if not confirmed and planned:
        (result, load, held), wanted = saved, frozenset(planned)
    else:
        wanted = frozenset()

    # 4. where room is capped, a waiting partition takes the place of a lower-priority one it fits instead of
    #    (rebalancing may have freed room after it was turned away); repeat until nothing changes
    if any(w.max_load > 0 for w in workers):
        _serve_priority_first(ordered, by_id, load, held, result, place)
    return Assignment(result, wanted)


def _serve_priority_first(
    ordered: list[PartitionSpec],
    by_id: dict[str, WorkerSpec],
    load: dict[str, float],
    held: dict[str, dict[PartitionKey, PartitionSpec]],
    result: dict[PartitionKey, str],
    place: Callable[[PartitionSpec, str], None],
) -> None:
    changed = True
    while changed:
        changed = False
        for p in ordered:  # priority first
            if p.key in result:
                continue
            fitting = [w for w in by_id if by_id[w].max_load <= 0 or load[w] + p.load <= by_id[w].max_load]
            if fitting:
                place(p, min(fitting, key=lambda w: (load[w] / by_id[w].capacity, w)))
                changed = True
                continue
            swaps = [
                (q.priority, q.load, repr(q.key), w, q)
                for w in by_id
                if by_id[w].max_load > 0
                for q in held[w].values()
                if q.priority < p.priority and load[w] - q.load + p.load <= by_id[w].max_load
            ]
            if swaps:
                *_, w, q = min(swaps, key=lambda s: s[:3])
                del held[w][q.key], result[q.key]
                load[w] -= q.load
                place(p, w)
                changed = True
