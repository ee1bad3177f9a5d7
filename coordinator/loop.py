"""The one background loop of the coordinator's leader-only work (the Sealer, the Autopilot): a thread that runs
a pass every interval while this replica leads, and logs, never dies of, a pass that fails."""

from __future__ import annotations

import threading
from collections.abc import Callable

import structlog

from streamplane.errors import StreamplaneError

log = structlog.get_logger(__name__)


class LeaderLoop:
    """Runs `run_once` every `interval_s` while `is_leader()`; `start` and `stop` it once each."""

    def __init__(self, name: str, run_once: Callable[[], object], is_leader: Callable[[], bool], interval_s: float):
        self.name = name
        self._run_once = run_once
        self._is_leader = is_leader
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 15.0) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=timeout_s)

    def _loop(self) -> None:
        while not self._stop.wait(self._interval_s):
            if not self._is_leader():
                continue
            try:
                self._run_once()
            except StreamplaneError as err:
                log.warning(f"{self.name}.pass_failed", error=err.message)
            except Exception:
                log.exception(f"{self.name}.pass_crashed")
