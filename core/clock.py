"""Time, injected: the coordinator asks a Clock, so tests and the simulator can move time instead of sleeping.

`SYSTEM` is the real clock. `ManualClock` moves only when told (`advance`), and wakes whoever waits on it
then, so a test of a TTL is instant and exact.
"""

from __future__ import annotations

import threading
import time
from typing import Protocol


class Clock(Protocol):
    def now_ms(self) -> int:
        """Wall-clock milliseconds since the epoch (stored in leases, events and deadlines)."""
        ...

    def monotonic(self) -> float:
        """Seconds that never go backwards (for intervals measured in one process)."""
        ...


class SystemClock:
    """The machine's clocks."""

    def now_ms(self) -> int:
        return int(time.time() * 1000)

    def monotonic(self) -> float:
        return time.monotonic()


SYSTEM: Clock = SystemClock()


class ManualClock:
    """A clock that stands still until `advance` moves it (both readings move together)."""

    def __init__(self, start_ms: int = 1_800_000_000_000) -> None:
        self._ms = start_ms
        self._lock = threading.Lock()

    def now_ms(self) -> int:
        return self._ms  # one attribute read is atomic; only `advance` (read, add, write) needs the lock

    def monotonic(self) -> float:
        return self._ms / 1000

    def advance(self, ms: int) -> None:
        if ms < 0:
            raise ValueError(f"a clock does not go backwards ({ms} ms)")
        with self._lock:
            self._ms += ms
