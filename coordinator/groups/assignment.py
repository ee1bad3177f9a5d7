"""Assignment: which worker holds which partition. A pure function, free of I/O, tested and benchmarked alone.

Rules, in order:
  1. Lanes are served by priority. The highest-priority tier is always assigned; lower tiers only where a
     worker has room under its `max_load` (when it set one), so scarce capacity goes to realtime first.
  2. Sticky: a partition stays with its live holder unless moving it narrows the gap between the most and
     least utilized workers (utilization = load / capacity) by more than the partition's own share of it
     (a move pays for itself: it never just swaps which worker is the busier one), and either that gap
     exceeds `threshold` of the mean or the move narrows the spread of all workers by at least `threshold`.
     With equal loads, no churn at a one-partition difference; within the band, no fixing pair after pair.
     Rebalancing is done only when the previous pass found it worth doing too (`proposed`): a load that
     looks off in one measurement moves nothing. A partition moved to
     balance load is not moved back to where it came from during a cool-down (`pinned`).
  3. Orphaned and new partitions go to the least utilized worker that has room.
Every partition is held by at most one worker in the result, and only live workers appear in it.

Balance bound (checked by the property tests): when nothing is capped by max_load, after a pass confirmed
by the one before it, for any two workers
    u_max - u_min <= max(threshold * u_mean, 1.5 * max_partition_load / min_capacity).
A worker's load includes its base load (the slices it holds, which only the slice planner places): a worker
whose base load alone puts it above the others gives up its partitions, and the bound holds for any two workers
of which the more utilized holds a partition.
"""

from __future__ import annotations

import bisect
import functools
import heapq
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

PartitionKey = Any
"""Any hashable the caller names partitions by (the coordinator uses `PartitionRef`; tests use numbers)."""


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
    base_load: float = 0.0
    """Load it carries outside these partitions, which no move here can take away: the slices of split
    partitions it holds (placed by the slice planner). It counts towards its utilization and its max_load."""


DEFAULT_THRESHOLD = 0.1
SMOOTHING = 0.3
"""Weight of a new load measurement in a partition's smoothed load (an exponential moving average)."""


def smooth(previous: float, measured: float) -> float:
    """A partition's load after a new measurement: measurements are noisy, and a move must follow the load,
    not its noise. The first measurement is taken as it is."""
    if previous <= 0:
        return measured
    return previous + SMOOTHING * (measured - previous)


class _Board:
    """Who holds what and each worker's load: the state both the pure function and the Balancer work on."""

    def __init__(self, workers: list[WorkerSpec]) -> None:
        self.by_id = {w.id: w for w in workers}
        self.load = {w.id: w.base_load for w in workers}
        self.held: dict[str, dict[PartitionKey, PartitionSpec]] = {w: {} for w in self.by_id}
        self.result: dict[PartitionKey, str] = {}
        self._names: dict[PartitionKey, str] = {}  # repr of keys, the last tie-break (kept: keys are reused)

    def name(self, key: PartitionKey) -> str:
        name = self._names.get(key)
        if name is None:
            name = self._names[key] = repr(key)
        return name

    def util(self, worker: str) -> float:
        return self.load[worker] / self.by_id[worker].capacity

    def place(self, p: PartitionSpec, worker: str) -> None:
        self.result[p.key] = worker
        self.load[worker] += p.load
        self.held[worker][p.key] = p

    def unplace(self, p: PartitionSpec, worker: str) -> None:
        del self.result[p.key], self.held[worker][p.key]
        self.load[worker] -= p.load

    def place_orphans(self, orphans: list[PartitionSpec], fits: Callable[[str, PartitionSpec], bool]) -> None:
        """Each orphan, in order, to the least utilized worker with room (a heap of (utilization, id))."""
        heap = [(self.util(w), w) for w in self.by_id]
        heapq.heapify(heap)
        for p in orphans:
            skipped = []
            while heap:
                util, w = heapq.heappop(heap)
                if util != self.util(w):  # stale entry
                    heapq.heappush(heap, (self.util(w), w))
                    continue
                if fits(w, p):
                    self.place(p, w)
                    heapq.heappush(heap, (self.util(w), w))
                    break
                skipped.append((util, w))
            for item in skipped:
                heapq.heappush(heap, item)

    def rebalance(
        self,
        threshold: float,
        pinned: Mapping[PartitionKey, str] | None,
        max_moves: int | None,
        fits: Callable[[str, PartitionSpec], bool],
    ) -> list[tuple[PartitionSpec, str, str]]:
        """Move from the most to the least utilized worker while that narrows their gap, either because the
        gap is past the tolerance, or because the move narrows it by at least that fraction (an exact fix of a
        small imbalance is worth it; shuffling within measurement noise is not). Returns the moves made, as
        (partition, from, to)."""
        by_id, load, held = self.by_id, self.load, self.held
        moves: list[tuple[PartitionSpec, str, str]] = []
        if not by_id:
            return moves
        # the most and least utilized workers come from two heaps, refreshed only for the pair a move changes
        # (ties go to the greatest id as the most utilized and the least id as the least, as max/min would)
        rank = {w: i for i, w in enumerate(sorted(by_id))}
        utils = {w: load[w] / by_id[w].capacity for w in by_id}
        total = sum(utils.values())
        # only a worker that holds partitions can give one: one whose load is all base load (slices) is no source,
        # and must not stop the others' balancing by being the most utilized
        tops = [(-u, -rank[w], w) for w, u in utils.items() if held[w]]
        bottoms = [(u, rank[w], w) for w, u in utils.items()]
        heapq.heapify(tops)
        heapq.heapify(bottoms)
        sorted_held: dict[str, list[tuple[float, int, str, PartitionSpec]]] = {}
        while max_moves is None or len(moves) < max_moves:
            while tops and (-tops[0][0] != utils[tops[0][2]] or not held[tops[0][2]]):  # stale entry
                heapq.heappop(tops)
            while bottoms[0][0] != utils[bottoms[0][2]]:
                heapq.heappop(bottoms)
            if not tops:
                break
            hi, lo = tops[0][2], bottoms[0][2]
            gap = utils[hi] - utils[lo]
            mean = total / len(utils)
            if gap <= 1e-12:
                break
            wide = gap > threshold * mean
            c_hi, c_lo = by_id[hi].capacity, by_id[lo].capacity
            ideal = (load[hi] * c_lo - load[lo] * c_hi) / (c_hi + c_lo)  # the load whose move equalizes the pair
            l_hi, l_lo, narrow = load[hi], load[lo], gap * (1 - threshold)
            # within the band, a move must narrow the spread of every worker, not only of this pair: with many
            # workers another pair is nearly as far apart, and fixing pair after pair churned the whole group
            # for no visible gain (a worker's departure moved ten times its orphans)
            others = (_next(tops, utils, hi, lo, -1), _next(bottoms, utils, hi, lo, 1)) if not wide else None
            # the candidate that makes the exact transfer (ties: lowest priority, then key), searched outward
            # from `ideal` in the worker's partitions sorted by load: a busy worker holds thousands
            best = self._closest(
                self._sorted(sorted_held, hi),
                ideal,
                functools.partial(
                    _worth,
                    gap=gap,
                    l_hi=l_hi,
                    l_lo=l_lo,
                    c_hi=c_hi,
                    c_lo=c_lo,
                    wide=wide,
                    narrow=narrow,
                    others=others,
                ),
                functools.partial(_movable, to=lo, pinned=pinned, fits=fits),
            )
            if best is None:
                break
            p = best
            self.unplace(p, hi)
            self.place(p, lo)
            item = (p.load, p.priority, self.name(p.key), p)
            hi_sorted = sorted_held[hi]
            del hi_sorted[bisect.bisect_left(hi_sorted, item[:3])]
            if lo in sorted_held:
                bisect.insort(sorted_held[lo], item)
            moves.append((p, hi, lo))
            for w in (hi, lo):
                u = load[w] / by_id[w].capacity
                total += u - utils[w]
                utils[w] = u
                if held[w]:
                    heapq.heappush(tops, (-u, -rank[w], w))
                heapq.heappush(bottoms, (u, rank[w], w))
        return moves

    def _sorted(
        self, cache: dict[str, list[tuple[float, int, str, PartitionSpec]]], worker: str
    ) -> list[tuple[float, int, str, PartitionSpec]]:
        """A worker's partitions as (load, priority, name, spec), sorted, kept for one rebalance."""
        found = cache.get(worker)
        if found is None:  # `name` inlined: a step after a worker's death sorts thousands of workers' partitions
            names, found = self._names, []
            for p in self.held[worker].values():
                name = names.get(p.key)
                if name is None:
                    name = names[p.key] = repr(p.key)
                found.append((p.load, p.priority, name, p))
            found.sort()
            cache[worker] = found
        return found

    @staticmethod
    def _closest(
        items: list[tuple[float, int, str, PartitionSpec]],
        ideal: float,
        worth: Callable[[float], bool],
        ok: Callable[[PartitionSpec], bool],
    ) -> PartitionSpec | None:
        """The item whose load is closest to `ideal` (ties: the least (priority, name)) among those whose load
        is `worth` moving and that are `ok` to move. Loads worth moving form an interval around `ideal`, so the
        search goes outward from it a run of equal loads at a time, and a side ends at its first load that is
        not worth it: a step costs what it looks at, not what the worker holds."""
        best: tuple[float, int, str, PartitionSpec] | None = None
        best_d = 0.0
        down = up = bisect.bisect_left(items, (ideal,))  # items[:down] are below ideal, items[up:] at or above
        low_end, high_end = 0, len(items)
        while down > low_end or up < high_end:
            d_down = ideal - items[down - 1][0] if down > low_end else math.inf
            d_up = items[up][0] - ideal if up < high_end else math.inf
            if best is not None and min(d_down, d_up) > best_d:
                break
            if d_down <= d_up:
                x = items[down - 1][0]
                start = bisect.bisect_left(items, (x,), low_end, down)
                run, down = items[start:down], start
                if not worth(x):
                    low_end = down
                    continue
            else:
                x = items[up][0]
                end = bisect.bisect_left(items, (x, math.inf), up, high_end)
                run, up = items[up:end], end
                if not worth(x):
                    high_end = up
                    continue
            found = next((item for item in run if ok(item[3])), None)
            if found is not None and (best is None or abs(x - ideal) < best_d or found[1:3] < best[1:3]):
                best, best_d = found, abs(x - ideal)
        return best[3] if best is not None else None

    def undo(self, moves: list[tuple[PartitionSpec, str, str]]) -> None:
        for p, src, dst in reversed(moves):
            self.unplace(p, dst)
            self.place(p, src)


def _worth(
    x: float,
    *,
    gap: float,
    l_hi: float,
    l_lo: float,
    c_hi: float,
    c_lo: float,
    wide: bool,
    narrow: float,
    others: tuple[float, float] | None = None,
) -> bool:
    """Whether moving a partition of load `x` from the most to the least utilized worker is worth it: it
    narrows their gap by more than the partition's own share of it (how far the move shifts each side, on
    average), and either the gap is wide or the move narrows the spread of all workers by the threshold
    (`others`: the highest and lowest utilization of the workers other than the pair). True on an interval
    of loads."""
    u_hi, u_lo = (l_hi - x) / c_hi, (l_lo + x) / c_lo
    if not gap - abs(u_hi - u_lo) > x * (1 / c_hi + 1 / c_lo) / 2 + 1e-12:
        return False
    if wide:
        return True
    top, bottom = others if others is not None else (-math.inf, math.inf)
    return max(top, u_hi, u_lo) - min(bottom, u_hi, u_lo) <= narrow


def _next(heap: list[tuple[float, int, str]], utils: dict[str, float], hi: str, lo: str, sign: int) -> float:
    """The highest (`sign` -1, from the heap of the most utilized) or lowest (1) utilization among workers
    other than `hi` and `lo` (-inf or inf when there are none). Stale entries are dropped on the way; the
    live ones looked at are put back."""
    kept = []
    found = sign * math.inf
    while heap:
        item = heapq.heappop(heap)
        u, w = sign * item[0], item[2]
        if utils[w] != u:
            continue  # stale
        kept.append(item)
        if w not in (hi, lo):
            found = u
            break
    for item in kept:
        heapq.heappush(heap, item)
    return found


def _movable(
    p: PartitionSpec, *, to: str, pinned: Mapping[PartitionKey, str] | None, fits: Callable[[str, PartitionSpec], bool]
) -> bool:
    """Not a move back within its cool-down, and room for it."""
    return not (pinned and pinned.get(p.key) == to) and fits(to, p)


def _order(p: PartitionSpec) -> tuple[int, float, str]:
    """The order partitions are served in: priority first, then the heaviest (placed while room is widest)."""
    return (-p.priority, -p.load, repr(p.key))


def _always(worker: str, p: PartitionSpec) -> bool:
    return True


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
    board = _Board(workers)
    top = max((p.priority for p in partitions), default=0)
    capped = any(w.max_load > 0 for w in workers)

    def fits(worker: str, p: PartitionSpec) -> bool:
        limit = board.by_id[worker].max_load
        return p.priority >= top or limit <= 0 or board.load[worker] + p.load <= limit

    check = fits if capped else _always
    # 1. keep live holders (priority first, so scarce room goes to higher tiers)
    ordered = sorted(partitions, key=_order)
    orphans = []
    for p in ordered:
        owner = current.get(p.key)
        if owner in board.by_id and check(owner, p):
            board.place(p, owner)
        else:
            orphans.append(p)
    # 2. orphans to the least utilized worker with room
    board.place_orphans(orphans, check)
    # 3. rebalance; unless confirmed, plan only: nothing held moves before the next pass sees the same imbalance
    planned = board.rebalance(threshold, pinned, max_moves, check)
    wanted: frozenset[tuple[PartitionKey, str]] = frozenset()
    if proposed is not None and not proposed and planned:
        board.undo(planned)
        wanted = frozenset((p.key, dst) for p, _, dst in planned)
    # 4. where room is capped, a waiting partition takes the place of a lower-priority one it fits instead of
    #    (rebalancing may have freed room after it was turned away); repeat until nothing changes
    if capped:
        _serve_priority_first(ordered, board.by_id, board.load, board.held, board.result, board.place)
    return Assignment(board.result, wanted)


@dataclass(frozen=True)
class Step:
    """What one step of the Balancer changed."""

    changed: dict[PartitionKey, str]
    """{partition: its new holder ("" for none)} for every partition whose holder differs from the last step's."""
    proposed: frozenset[tuple[PartitionKey, str]] = frozenset()
    """As `Assignment.proposed`."""


class Balancer:
    """The assignment's working state, kept between passes and updated from changes (a worker joined or died,
    a load measured, a generation opened or drained): each step costs what changed, not the group's size.

    A step gives the same holders as `assign()` over the same partitions, workers and the previous step's
    holders (the property tests compare them). Groups whose workers cap their load (`max_load`) are the
    exception in cost, not in result: their steps recompute with `assign()`, since a capped worker's room
    depends on every partition's priority.
    """

    def __init__(self) -> None:
        self.partitions: dict[PartitionKey, PartitionSpec] = {}
        self._board = _Board([])
        self._orphans: set[PartitionKey] = set()
        self._before: dict[PartitionKey, str] = {}  # holders before their first change since the last step

    @property
    def holders(self) -> Mapping[PartitionKey, str]:
        """{partition: worker} as of the last step (a live view: do not keep it across steps)."""
        return self._board.result

    @property
    def workers(self) -> Mapping[str, WorkerSpec]:
        return self._board.by_id

    def partition_loads(self) -> dict[str, float]:
        """{worker: the load of the partitions it holds as of the last step}, its base load left out."""
        board = self._board
        return {w: board.load[w] - spec.base_load for w, spec in board.by_id.items()}

    def _changing(self, key: PartitionKey) -> None:
        if key not in self._before:
            self._before[key] = self._board.result.get(key, "")

    def put_worker(self, spec: WorkerSpec) -> None:
        """A worker joined, or changed its capacity, limit or base load."""
        board = self._board
        old = board.by_id.get(spec.id)
        if old is None:
            board.load[spec.id] = spec.base_load
            board.held[spec.id] = {}
        else:
            board.load[spec.id] += spec.base_load - old.base_load
        board.by_id[spec.id] = spec

    def remove_worker(self, worker: str) -> None:
        """A worker is gone: its partitions are orphans for the next step."""
        board = self._board
        if worker not in board.by_id:
            return
        for key in board.held[worker]:
            self._changing(key)
            del board.result[key]
            self._orphans.add(key)
        del board.by_id[worker], board.load[worker], board.held[worker]

    def put_partition(self, spec: PartitionSpec) -> None:
        """A new partition (an orphan), or a new load or priority for a known one."""
        board = self._board
        old = self.partitions.get(spec.key)
        self.partitions[spec.key] = spec
        owner = board.result.get(spec.key)
        if owner is None:
            self._orphans.add(spec.key)
        elif old != spec:
            board.load[owner] += spec.load - old.load  # type: ignore[union-attr]
            board.held[owner][spec.key] = spec

    def hold(self, key: PartitionKey, worker: str) -> None:
        """Seat a known partition with its present holder, a known worker (the state read from a store)."""
        if key in self._orphans and worker in self._board.by_id:
            self._orphans.discard(key)
            self._board.place(self.partitions[key], worker)

    def remove_partition(self, key: PartitionKey) -> None:
        """A partition needs no holder any more (its generation drained, or nobody subscribes to it)."""
        spec = self.partitions.pop(key, None)
        if spec is None:
            return
        self._orphans.discard(key)
        self._board._names.pop(key, None)
        owner = self._board.result.get(key)
        if owner is not None:
            self._changing(key)
            self._board.unplace(spec, owner)

    def step(
        self,
        *,
        threshold: float = DEFAULT_THRESHOLD,
        max_moves: int | None = None,
        proposed: frozenset[tuple[PartitionKey, str]] | None = None,
        pinned: Mapping[PartitionKey, str] | None = None,
    ) -> Step:
        """Place the orphans and rebalance, with `assign()`'s arguments and rules."""
        board = self._board
        if board.by_id and any(w.max_load > 0 for w in board.by_id.values()):
            return self._done(self._recompute(threshold, max_moves, proposed, pinned))
        if board.by_id:
            for key in self._orphans:
                self._changing(key)
            board.place_orphans(sorted((self.partitions[k] for k in self._orphans), key=_order), _always)
            self._orphans.clear()
            planned = board.rebalance(threshold, pinned, max_moves, _always)
            for p, src, _ in planned:  # the first move of each starts from its holder before rebalancing
                self._before.setdefault(p.key, src)
            if proposed is not None and not proposed and planned:
                board.undo(planned)
                return self._done(frozenset((p.key, dst) for p, _, dst in planned))
        return self._done(frozenset())

    def _recompute(
        self,
        threshold: float,
        max_moves: int | None,
        proposed: frozenset[tuple[PartitionKey, str]] | None,
        pinned: Mapping[PartitionKey, str] | None,
    ) -> frozenset[tuple[PartitionKey, str]]:
        old = self._board
        plan = assign(
            list(self.partitions.values()),
            list(old.by_id.values()),
            old.result,
            threshold=threshold,
            max_moves=max_moves,
            proposed=proposed,
            pinned=pinned,
        )
        for key in set(old.result) | set(plan.holders):
            if old.result.get(key) != plan.holders.get(key):
                self._changing(key)
        self._board = _Board(list(old.by_id.values()))
        for key, worker in plan.holders.items():
            self._board.place(self.partitions[key], worker)
        self._orphans = set(self.partitions) - set(plan.holders)
        return plan.proposed

    def _done(self, proposed: frozenset[tuple[PartitionKey, str]]) -> Step:
        result = self._board.result
        changed = {k: result.get(k, "") for k, old in self._before.items() if result.get(k, "") != old}
        self._before = {}
        return Step(changed, proposed)


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
