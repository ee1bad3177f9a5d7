"""The one background loop of the coordinator (the Assigner, the Sealer, the Autopilot): a thread that runs a
pass, then waits until the next is due or something it watches changes, and logs, never dies of, a pass that
fails."""

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


class BackgroundLoop:
    """Runs `run_once` again and again; `start` and `stop` it once each.

    Args:
        name: the thread's name, and the prefix of the log events of a pass that fails.
        run_once: one pass; returns when the next is due (ms on `clock`), or None for `interval_ms` from now.
        interval_ms: the shortest wait between two passes, and the wait after a pass that named no time.
        is_leader: passes run only while it is true (leader-only work); the loop looks again every interval.
        wake: a watch taken before each pass; its firing starts the next pass early (a change the pass must
            see at once). A watch that cannot be taken (the store is away) leaves the plain wait.
    """

    def __init__(
        self,
        name: str,
        run_once: Callable[[], int | None],
        *,
        interval_ms: int,
        clock: Clock = SYSTEM,
        is_leader: Callable[[], bool] = _always,
        wake: Callable[[], Watch] | None = None,
    ) -> None:
        self.name = name
        self._run_once = run_once
        self._interval_ms = interval_ms
        self._clock = clock
        self._is_leader = is_leader
        self._wake = wake
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = STOP_WAIT_S) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=timeout_s)

    def _loop(self) -> None:
        while not self._stop.is_set():
            leader = self._is_leader()
            watch = self._watch() if leader else None  # a standby only looks again at every interval
            due = self._pass() if leader else None
            now = self._clock.now_ms()
            wait_ms = next_pass_ms(due, now, self._interval_ms) - now
            if watch is None:
                self._stop.wait(wait_ms / 1000)
                continue
            try:
                self._sleep_on(watch, wait_ms / 1000)
            finally:
                watch.cancel()

    def _sleep_on(self, watch: Watch, wait_s: float) -> None:
        """Until the watch fires, `wait_s` passes or the loop stops (looked at every STOP_CHECK_S)."""
        end = time.monotonic() + wait_s
        while not self._stop.is_set():
            left = end - time.monotonic()
            if left <= 0 or watch.wait(min(left, STOP_CHECK_S)):
                return

    def _watch(self) -> Watch | None:
        if self._wake is None:
            return None
        try:
            return self._wake()
        except StreamplaneError as err:
            log.warning(f"{self.name}.watch_failed", error=err.message)
            return None

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
