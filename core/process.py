"""Foreground processes that stop cleanly on SIGINT or SIGTERM.

Stop signals are blocked and then waited for with `sigtimedwait`, rather than handled: a Python handler
runs between bytecodes of the main thread and can deadlock on a lock the main thread holds (seen with
`Event.set` in a handler while the main thread was in `Event.wait`, when several SIGTERMs arrived).
"""

from __future__ import annotations

import signal
from collections.abc import Callable

STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM}


def block_stop_signals() -> None:
    """Block SIGINT and SIGTERM in this thread; call first in main, so that threads started later inherit it."""
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)


def wait_for_stop(should_stop: Callable[[], bool] = lambda: False, interval_s: float = 0.5) -> str:
    """Block until SIGINT/SIGTERM arrives or `should_stop()` is true; return what ended the wait."""
    while True:
        info = signal.sigtimedwait(STOP_SIGNALS, interval_s)
        if info is not None:
            return signal.Signals(info.si_signo).name
        if should_stop():
            return "condition"
