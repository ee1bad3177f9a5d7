"""The coordinator's one background loop: passes that fail never end it, a watch wakes it early, only the
leader runs leader-only work, and the time a pass names is kept."""

from __future__ import annotations

import threading
import time

from streamplane.coordinator.loop import BackgroundLoop, Schedule, Signal
from streamplane.coordinator.store import StoreConfig, open_store
from streamplane.errors import UnavailableError
from tests.helpers import wait_until

WAKE = b"\x02test/wake"


def test_a_failing_pass_is_logged_and_the_loop_goes_on() -> None:
    passes: list[int] = []

    def run_once() -> None:
        passes.append(1)
        if len(passes) % 2:
            raise UnavailableError("store away") if len(passes) % 4 == 1 else RuntimeError("a bug")

    loop = BackgroundLoop("t", run_once, interval_ms=10)
    loop.start()
    try:
        wait_until(lambda: len(passes) >= 6)
    finally:
        loop.stop()


def test_only_the_leader_runs_passes() -> None:
    leader = threading.Event()
    passes: list[int] = []
    loop = BackgroundLoop("t", lambda: passes.append(1), interval_ms=10, is_leader=leader.is_set)
    loop.start()
    try:
        time.sleep(0.2)  # time for passes a follower must not run
        assert passes == []
        leader.set()
        wait_until(lambda: len(passes) >= 2)
    finally:
        loop.stop()


def test_a_watched_change_wakes_it_before_the_time_its_pass_named(tmp_path) -> None:
    db = open_store(StoreConfig(driver="embedded", data_dir=tmp_path))
    passes: list[float] = []

    def run_once() -> int:
        passes.append(time.monotonic())
        return int(time.time() * 1000) + 60_000  # nothing due for a minute

    loop = BackgroundLoop("t", run_once, interval_ms=10, wake=lambda: db.transact(lambda tr: tr.watch(WAKE)))
    loop.start()
    try:
        wait_until(lambda: len(passes) == 1)
        time.sleep(0.3)  # time for interval passes, which must not come
        assert len(passes) == 1  # the named time is kept: no pass every interval
        db.transact(lambda tr: tr.set(WAKE, b"1"))
        wait_until(lambda: len(passes) == 2, timeout=2)
    finally:
        started = time.monotonic()
        loop.stop()
        assert time.monotonic() - started < 2  # a stop does not wait out the minute
        db.close()


def test_the_schedule_alone_says_when_a_pass_runs_and_what_a_standby_does() -> None:
    """The policy without a thread or a clock (what the simulator ticks): a pass runs when its named time comes
    or its watch fired, never sooner than the interval after the last; a standby runs no pass and takes no
    watch; a pass that fails leaves the interval."""
    leading = threading.Event()
    named: list[int | None] = [5_000]
    passes: list[int] = []

    def run_once() -> int | None:
        passes.append(1)
        if named[0] is None:
            raise UnavailableError("store away")
        return named[0]

    schedule = Schedule("t", run_once, interval_ms=100, is_leader=leading.is_set, wake=lambda: DummyWatch())
    assert schedule.is_due(0) and schedule.watch() is None, "a standby takes no watch"
    assert schedule.run(lambda: 1_000) == 1_100 and passes == [], "a standby looks again after the interval"
    leading.set()
    assert isinstance(schedule.watch(), DummyWatch)
    assert schedule.run(lambda: 1_100) == 5_000 and passes == [1], "the time the pass named"
    assert not schedule.is_due(4_999) and schedule.is_due(4_999, woken=True) and schedule.is_due(5_000)
    named[0] = 1_150
    assert schedule.run(lambda: 1_120) == 1_220, "never sooner than the interval"
    named[0] = None
    assert schedule.run(lambda: 2_000) == 2_100 and len(passes) == 3, "a failed pass: the interval"


class DummyWatch:
    def wait(self, timeout_s: float) -> bool:
        return False

    def cancel(self) -> None:
        pass


def test_a_signal_is_never_missed_whenever_it_is_set() -> None:
    """Work handed over in memory (a session's release, a look) wakes a schedule through a Signal: set before
    any watch, while one is out, or after the loop cancelled its watch and before it takes the next."""
    signal = Signal()
    signal.set()
    assert signal.watch().wait(0), "set before any watch: the first one taken has fired"
    out = signal.watch()
    assert not out.wait(0)
    signal.set()
    assert out.wait(0), "set while a watch is out: it fires"
    cancelled = signal.watch()
    cancelled.cancel()
    signal.set()
    assert not cancelled.wait(0)
    assert signal.watch().wait(0), "set after the loop cancelled its watch: the next one has fired"


def test_work_handed_over_runs_a_pass_at_once_whatever_the_interval() -> None:
    """A loop with an hour between passes still takes every item handed to it at once: each hand-over sets
    its Signal, and no hand-over falls between two passes unseen."""
    signal = Signal()
    handed, taken = [0], [0]
    lock = threading.Lock()

    def run_once() -> None:
        with lock:
            taken[0] = handed[0]

    loop = BackgroundLoop("t", run_once, interval_ms=3_600_000, signal=signal)
    loop.start()
    try:
        for _ in range(50):
            with lock:
                handed[0] += 1
            signal.set()
            wait_until(lambda: taken[0] == handed[0], timeout=5, what=lambda: f"{taken[0]} of {handed[0]} taken")
    finally:
        started = time.monotonic()
        loop.stop()
    # it sleeps on the signal alone (no wake-up every STOP_CHECK_S while idle), so stop must wake it
    assert time.monotonic() - started < 1.0, "stop waited for the loop's hour-long sleep"
