"""The last hour of time lag per group, lane and partition, for the console's live charts.

One sampler loop (the coordinator's `BackgroundLoop`) takes every group's lag (what a Prometheus scrape
shows) every `sample_ms` and keeps a ring of samples per group: each lane's time lag, and the partitions with
the most lag (at most `top_partitions` per sample), so memory stays bounded whatever the partition count.
Watchers wait on `wait_for(seq)` and are woken by each new sample.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import structlog

from streamplane.clock import SYSTEM, Clock
from streamplane.coordinator.loop import BackgroundLoop
from streamplane.model import Lag

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class Sample:
    """One look at a group's lag."""

    at_ms: int
    lanes: dict[str, int] = field(default_factory=dict)
    """{"stream/lane": time lag ms}"""
    partitions: dict[str, int] = field(default_factory=dict)
    """{lease id: time lag ms} of the most lagged partitions"""
    offset_lag: dict[str, int] = field(default_factory=dict)
    """{"stream/lane": records not yet processed}"""


class LagHistory:
    def __init__(
        self,
        source: Callable[[], Lag],
        *,
        sample_ms: int = 5000,
        keep_ms: int = 3_600_000,
        top_partitions: int = 16,
        clock: Clock = SYSTEM,
    ) -> None:
        self._source = source
        self.sample_ms = sample_ms
        self._clock = clock
        self._top = top_partitions
        self._samples: dict[str, deque[Sample]] = {}
        self._capacity = max(2, keep_ms // max(1, sample_ms))
        self._changed = threading.Condition()
        self.seq = 0
        self._stop = threading.Event()
        self._loop = BackgroundLoop("console-lag", self.sample, interval_ms=sample_ms, clock=clock)
        """A sample every `sample_ms`; one that fails (a store hiccup) is logged, and the next tries again."""

    def sample(self) -> None:
        """Take one sample of every group's lag (the sampler calls this; tests may call it directly)."""
        lag = self._source()
        now = self._clock.now_ms()
        by_group: dict[str, Sample] = {}
        for lane in lag.lanes:
            s = by_group.setdefault(lane.group, Sample(now))
            s.lanes[f"{lane.stream}/{lane.lane}"] = lane.time_lag_ms
            s.offset_lag[f"{lane.stream}/{lane.lane}"] = lane.offset_lag
        worst: dict[str, list[tuple[int, str]]] = {}
        for p in lag.partitions:
            worst.setdefault(p.group, []).append((p.time_lag_ms, p.lease_id))
        for group, rows in worst.items():
            rows.sort(reverse=True)
            s = by_group.setdefault(group, Sample(now))
            s.partitions.update({lid: ms for ms, lid in rows[: self._top]})
        with self._changed:
            for group, s in by_group.items():
                self._samples.setdefault(group, deque(maxlen=self._capacity)).append(s)
            self.seq += 1
            self._changed.notify_all()

    def series(self, group: str) -> list[Sample]:
        with self._changed:
            return list(self._samples.get(group, ()))

    def latest(self, group: str) -> Sample | None:
        with self._changed:
            ring = self._samples.get(group)
            return ring[-1] if ring else None

    def wait_for(self, seq: int, timeout_s: float) -> int:
        """Block until a sample newer than `seq` is taken (or `timeout_s` passes); returns the current seq."""
        with self._changed:
            self._changed.wait_for(lambda: self.seq != seq or self._stop.is_set(), timeout=timeout_s)
            return self.seq

    def start(self) -> None:
        self._loop.start()

    def stop(self) -> None:
        self._stop.set()
        with self._changed:
            self._changed.notify_all()
        self._loop.stop()
