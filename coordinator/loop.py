"""The one schedule of the coordinator's background work (the Assigner, the sealer, the autopilot, the reaper,
the lag sweep), and the thread that drives it in production.

A `Schedule` is the policy, with no thread and no clock of its own: when a pass is due (the time the last pass
named, never sooner than the interval), which watch may start it early, and that passes run only while the
replica may do that work (`is_leader`). A pass that fails is logged and counted, never fatal. `BackgroundLoop`
runs a schedule on a thread against the real time; the simulator ticks the very same schedule objects on its
simulated time, so its seeds test the schedule production runs.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import structlog

from streamplane.clock import SYSTEM, Clock
from streamplane.coordinator.rpc import metrics
from streamplane.coordinator.store.api import Watch
from streamplane.errors import StreamplaneError

log = structlog.get_logger(__name__)

STOP_CHECK_S = 0.25
"""How often a loop waiting on a watch looks whether it was stopped."""
STOP_WAIT_S = 2.0
"""How long `stop` waits for a pass under way. A pass stuck in a call to a dead cluster (up to its timeout) is
left to end on its own: its thread is a daemon, and it changes nothing once the store is closed."""


def next_pass_ms(due_ms: int | None, now_ms: int, interval_ms: int) -> int:
    """When the pass after one that returned `due_ms` runs, unless a watch fires first: at the time it named,
    but never sooner than `interval_ms` from now (None: `interval_ms` from now)."""
    return max(due_ms or 0, now_ms + interval_ms)


def _always() -> bool:
    return True


class _SignalWatch:
    """One watch of a `Signal` (the store's `Watch`, for work handed over in memory)."""

    def __init__(self) -> None:
        self._fired = threading.Event()
        self._lock = threading.Lock()
        self._callbacks: list[Callable[[], None]] = []
        self._cancelled = False

    def fire(self) -> bool:
        """Fire it; False if it had fired or was cancelled (nobody waits on it)."""
        with self._lock:
            if self._fired.is_set() or self._cancelled:
                return False
            self._fired.set()
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback()
        return True

    def wait(self, timeout: float | None = None) -> bool:
        return self._fired.wait(timeout) and not self._cancelled

    def cancel(self) -> None:
        with self._lock:
            self._cancelled = True
            self._callbacks = []

    def on_fire(self, callback: Callable[[], None]) -> None:
        with self._lock:
            if not self._fired.is_set():
                if not self._cancelled:
                    self._callbacks.append(callback)
                return
        callback()


class Signal:
    """Wakes a schedule for work handed to it in memory (a session's release, a look to read), as a store
    watch wakes one for a key. One schedule takes its watches: `set` fires the one taken last, or, when it has
    fired already, the next one taken (so work handed over between two passes is never missed)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._current: _SignalWatch | None = None
        self._missed = False

    def watch(self) -> Watch:
        w = _SignalWatch()
        with self._lock:
            missed, self._missed = self._missed, False
            self._current = None if missed else w
            if missed:
                w.fire()
        return w

    def set(self) -> None:
        with self._lock:  # a watch's callbacks are quick by contract: fired under the lock, nothing is missed
            current, self._current = self._current, None
            if current is None or not current.fire():
                self._missed = True


class Schedule:
    """When a background loop's passes run (see the module).

    Args:
        name: the loop's name: its thread's, and the prefix of the log events of a pass that fails.
        run_once: one pass; returns when the next is due (ms on the clock), or None for `interval_ms` from now.
        interval_ms: the shortest wait between two passes, and the wait after a pass that named no time.
        is_leader: passes run only while it is true (leader-only work); a standby looks again every interval.
        wake: a watch taken before each pass; its firing starts the next pass early (a change the pass must
            see at once). A watch that cannot be taken (the store is away) leaves the plain wait. A standby
            takes none.
    """

    def __init__(
        self,
        name: str,
        run_once: Callable[[], int | None],
        *,
        interval_ms: int,
        is_leader: Callable[[], bool] = _always,
        wake: Callable[[], Watch] | None = None,
    ) -> None:
        self.name = name
        self._run_once = run_once
        self.interval_ms = interval_ms
        self.is_leader = is_leader
        self._wake = wake
        self.due_ms = 0
        """When the next pass is due, unless its watch fires first (0: at once)."""

    def is_due(self, now_ms: int, woken: bool = False) -> bool:
        """Whether a pass runs now: its time has come, or the watch taken before the last one fired."""
        return woken or now_ms >= self.due_ms

    def watch(self) -> Watch | None:
        """The watch that may start the next pass early (None: none, or this replica does not lead)."""
        if self._wake is None or not self.is_leader():
            return None
        try:
            return self._wake()
        except StreamplaneError as err:
            log.warning(f"{self.name}.watch_failed", error=err.message)
            return None

    def run(self, now: Callable[[], int]) -> int:
        """One pass if this replica leads (a failure is logged and counted); returns when the next is due."""
        due = self._pass() if self.is_leader() else None
        self.due_ms = next_pass_ms(due, now(), self.interval_ms)
        return self.due_ms

    def _pass(self) -> int | None:
        try:
            return self._run_once()
        except StreamplaneError as err:
            metrics.LOOP_FAILURES.labels(self.name, "failed").inc()
            log.warning(f"{self.name}.pass_failed", error=err.message)
        except Exception:
            metrics.LOOP_FAILURES.labels(self.name, "crashed").inc()
            log.exception(f"{self.name}.pass_crashed")
        return None


class BackgroundLoop:
    """Drives a `Schedule` on a thread against `clock`; `start` and `stop` it once each. The arguments are the
    schedule's (see `Schedule`), but for `signal`: a loop woken by work handed to it in memory takes its watches
    from that Signal, and sleeps on them without looking every STOP_CHECK_S whether it was stopped (`stop`
    sets the signal), so an idle one costs no wake-up at all."""

    def __init__(
        self,
        name: str,
        run_once: Callable[[], int | None],
        *,
        interval_ms: int,
        clock: Clock = SYSTEM,
        is_leader: Callable[[], bool] = _always,
        wake: Callable[[], Watch] | None = None,
        signal: Signal | None = None,
    ) -> None:
        if signal is not None:
            wake = signal.watch
        self.schedule = Schedule(name, run_once, interval_ms=interval_ms, is_leader=is_leader, wake=wake)
        """What this loop runs and when: the simulator ticks it on its own time."""
        self._clock = clock
        self._signal = signal
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def name(self) -> str:
        return self.schedule.name

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = STOP_WAIT_S) -> None:
        self._stop.set()
        if self._signal is not None:
            self._signal.set()  # it sleeps on the signal alone
        if self._thread:
            self._thread.join(timeout=timeout_s)

    def _loop(self) -> None:
        schedule = self.schedule
        while not self._stop.is_set():
            watch = schedule.watch()  # taken before the pass: a change during it starts the next at once
            due = schedule.run(self._clock.now_ms)
            wait_ms = due - self._clock.now_ms()
            if watch is None:
                self._stop.wait(max(0, wait_ms) / 1000)
                continue
            try:
                self._sleep_on(watch, wait_ms / 1000)
            finally:
                watch.cancel()

    def _sleep_on(self, watch: Watch, wait_s: float) -> None:
        """Until the watch fires, `wait_s` passes or the loop stops (looked at every STOP_CHECK_S)."""
        end = time.monotonic() + wait_s
        check_s = wait_s if self._signal is not None else STOP_CHECK_S
        while not self._stop.is_set():
            left = end - time.monotonic()
            if left <= 0 or watch.wait(min(left, check_s)):
                return
