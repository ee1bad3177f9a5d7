"""Foreground processes that stop cleanly on SIGINT or SIGTERM, their collector tuned (`tune_collector`), and
what a process costs (`usage`).

Stop signals are blocked and then waited for with `sigtimedwait`, rather than handled: a Python handler
runs between bytecodes of the main thread and can deadlock on a lock the main thread holds (seen with
`Event.set` in a handler while the main thread was in `Event.wait`, when several SIGTERMs arrived). A process
that reloads something on SIGHUP (the coordinator its Kafka settings) has it blocked and waited for the same way.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import os
import signal
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM}


GC_YOUNG_OBJECTS = 20_000
"""Container objects allocated (net) before the collector looks at the youngest ones: Python's 700 had it run
about 30 times in each 2,000-reject redrive claim, and a full collection every dozen claims (a quarter of the
coordinator's CPU in a redrive, a fifth of the redriving process's). A request's garbage is freed by reference
counts; the rare cycles wait at most 20,000 allocations (a few MB) for a collection."""


def tune_collector() -> None:
    """For a process of ours (the coordinator, a CLI command), never a library's caller (the setting is the
    whole process's): what start-up built stays for good, so full collections leave it out (`gc.freeze`), and
    the young generation is collected every GC_YOUNG_OBJECTS allocations."""
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_OBJECTS, older, oldest)


def block_stop_signals(*, hangup: bool = False) -> None:
    """Block SIGINT and SIGTERM (and SIGHUP with `hangup`, for a process that reloads on it) in this thread;
    call first in main, so that threads started later inherit it."""
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS | ({signal.SIGHUP} if hangup else set()))


def wait_for_stop(
    should_stop: Callable[[], bool] = lambda: False,
    interval_s: float = 0.5,
    on_hangup: Callable[[], None] | None = None,
) -> str:
    """Block until SIGINT/SIGTERM arrives or `should_stop()` is true; return what ended the wait. With
    `on_hangup` (SIGHUP blocked by `block_stop_signals(hangup=True)`), each SIGHUP calls it and the wait goes on.

    A wait that a SIGSTOP outlasts ends, after SIGCONT, with EINTR past its deadline, and CPython 3.11 then
    returns a siginfo it never filled (seen as SIGHUP, or as a number that is no signal at all); only a stop
    signal that was really taken ends the wait, so a paused process carries on when it is woken (such a
    SIGHUP calls `on_hangup` once more: a reload must be harmless when nothing changed)."""
    wanted = {int(s) for s in STOP_SIGNALS}
    waited = STOP_SIGNALS | ({signal.SIGHUP} if on_hangup is not None else set())
    while True:
        info = signal.sigtimedwait(waited, interval_s)
        if info is not None and info.si_signo in wanted:
            return signal.Signals(info.si_signo).name
        if info is not None and on_hangup is not None and info.si_signo == signal.SIGHUP:
            on_hangup()
            continue
        if should_stop():
            return "condition"


def die_with_parent(parent_pid: int) -> bool:
    """Ask Linux to SIGTERM this process when its parent dies (even by kill -9); False when `parent_pid` (if
    given) is gone already, before that took effect."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass
    return not parent_pid or os.getppid() == parent_pid


@dataclass(frozen=True)
class Usage:
    """What a process holds and has used, read from /proc (Linux)."""

    threads: int
    sockets: int
    cpu_s: float
    """User plus system CPU time since it started."""
    rss_kib: int
    peak_rss_kib: int
    """The most it has held resident since it started (the kernel's high-water mark)."""


def usage(pid: int) -> Usage:
    """Threads, open sockets, CPU time and resident memory (now and at its peak) of a running process."""
    status = Path(f"/proc/{pid}/status").read_text()
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    sockets = 0
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            sockets += os.readlink(fd).startswith("socket:")
    stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return Usage(
        threads=int(fields["Threads"]),
        sockets=sockets,
        cpu_s=(int(stat[11]) + int(stat[12])) / ticks,
        rss_kib=int(fields["VmRSS"].split()[0]),
        peak_rss_kib=int(fields["VmHWM"].split()[0]),
    )
