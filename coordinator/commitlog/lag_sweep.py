"""Every group's lag at fleet size: read a bounded number of commit-log pages a pass, never all at once.

The metrics' scrape and the console's lag chart want every group's lag, per lane. Reading it whole at each
scrape costs a read of every partition's header, a million at fleet size, on every scrape. Instead one sweep
per replica walks the commit log page by page (`commitlog.lag_page`), `pages_per_pass` pages a pass, and
folds what it reads into per-lane totals: records not processed, and the ingestion time of the oldest of them.
A finished sweep replaces the one before; readers take the last finished sweep, and its time lag is computed
when they read it (now minus that oldest time), so time lag keeps growing while a lane is stuck. A small fleet
is swept whole in every pass; a fleet of a million partitions in about `partitions / (pages_per_pass x 1000)`
passes, and what is shown is that old at most.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field, replace

from streamplane.clock import SYSTEM, Clock
from streamplane.coordinator.commitlog import log as commitlog
from streamplane.coordinator.groups.leases import parse_lease_id
from streamplane.coordinator.store import Database
from streamplane.model import Lag, LaneLag, PartitionLag

READ_LAPSE_MS = 60_000
"""How long after the last read of lag the sweep goes on (a Prometheus scrape interval is well under it)."""


@dataclass(frozen=True)
class LaneTotals:
    """One group's lane as a sweep found it: records not processed, and when the oldest was ingested (ms since
    the epoch; 0 when none is pending)."""

    group: str
    stream: str
    lane: str
    offset_lag: int
    oldest_pending_ts_ms: int


@dataclass(frozen=True)
class Sweep:
    """One finished pass over every group's commit log."""

    started_ms: int
    finished_ms: int
    lanes: tuple[LaneTotals, ...]
    worst: tuple[tuple[PartitionLag, int], ...]
    """Per group, its most lagged partitions (at most `top_partitions`), each with its oldest pending time."""

    def lag(self, now_ms: int) -> Lag:
        """Every group's lag as of this sweep's positions, its time lag as of `now_ms` (group "")."""

        def since(oldest: int) -> int:
            return max(0, now_ms - oldest) if oldest > 0 else 0

        return Lag(
            group="",
            partitions=tuple(replace(p, time_lag_ms=since(oldest)) for p, oldest in self.worst),
            lanes=tuple(
                LaneLag(x.group, x.stream, x.lane, x.offset_lag, since(x.oldest_pending_ts_ms)) for x in self.lanes
            ),
        )


@dataclass
class _Folding:
    started_ms: int
    lanes: dict[tuple[str, str, str], list[int]] = field(default_factory=dict)  # [offset lag, oldest pending]
    worst: dict[str, list[tuple[int, int, str, PartitionLag, int]]] = field(default_factory=dict)  # min-heaps


class LagSweeper:
    """Sweeps every group's commit log, `pages_per_pass` pages at each `step` (see the module)."""

    def __init__(
        self,
        db: Database,
        clock: Clock = SYSTEM,
        *,
        pages_per_pass: int = 10,
        page_size: int = commitlog.LAG_PAGE_SIZE,
        top_partitions: int = 16,
    ) -> None:
        if pages_per_pass < 1 or page_size < 1 or top_partitions < 0:
            raise ValueError("pages_per_pass and page_size must be positive and top_partitions not negative")
        self.page_size = page_size
        self.db = db
        self.clock = clock
        self.pages_per_pass = pages_per_pass
        self.top_partitions = top_partitions
        self.latest: Sweep | None = None
        """The last finished sweep (None before the first ends)."""
        self._token = ""
        self._folding: _Folding | None = None
        self._read_ms = clock.now_ms()  # when lag was last read (a coordinator starts as if just read)

    def step(self) -> None:
        """Read up to `pages_per_pass` pages from where the sweep is; publish the sweep when it ends. Nothing
        while nobody has read lag for READ_LAPSE_MS (no scrape, no console): an unwatched coordinator's idle
        cost does not grow with its partitions. The first read after such a pause shows the last sweep, the
        next ones a fresh one."""
        if self.latest is not None and self.clock.now_ms() - self._read_ms > READ_LAPSE_MS:
            return
        for _ in range(self.pages_per_pass):
            now = self.clock.now_ms()
            folding = self._folding or _Folding(now)
            self._folding = folding
            page = commitlog.lag_page(self.db, "", now_ms=now, page_size=self.page_size, page_token=self._token)
            for p in page.partitions:
                self._fold(folding, p, now - p.time_lag_ms if p.time_lag_ms > 0 else 0)
            self._token = page.next_page_token
            if not self._token:
                self.latest = self._finish(folding, self.clock.now_ms())
                self._folding = None
                return

    def lag(self, now_ms: int) -> Lag:
        """Every group's lag as of the last finished sweep (none before the first)."""
        self._read_ms = self.clock.now_ms()
        return self.latest.lag(now_ms) if self.latest is not None else Lag(group="")

    def _fold(self, folding: _Folding, p: PartitionLag, oldest: int) -> None:
        stream, lane, _, _ = parse_lease_id(p.lease_id)
        totals = folding.lanes.setdefault((p.group, stream, lane), [0, 0])
        totals[0] += p.offset_lag
        if oldest > 0 and p.offset_lag > 0:
            totals[1] = min(totals[1], oldest) if totals[1] else oldest
        if self.top_partitions and p.offset_lag > 0:
            heap = folding.worst.setdefault(p.group, [])
            item = (p.time_lag_ms, p.offset_lag, p.lease_id, p, oldest)
            if len(heap) < self.top_partitions:
                heapq.heappush(heap, item)
            elif item[:3] > heap[0][:3]:
                heapq.heapreplace(heap, item)

    def _finish(self, folding: _Folding, now_ms: int) -> Sweep:
        lanes = tuple(LaneTotals(g, s, la, off, oldest) for (g, s, la), (off, oldest) in sorted(folding.lanes.items()))
        worst = tuple(
            (p, oldest)
            for group in sorted(folding.worst)
            for _, _, _, p, oldest in sorted(folding.worst[group], key=lambda x: x[:3], reverse=True)
        )
        return Sweep(folding.started_ms, now_ms, lanes, worst)
