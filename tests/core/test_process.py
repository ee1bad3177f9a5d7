"""Foreground processes (`streamplane.process`): a stop signal ends the wait, and nothing else does, even a
SIGSTOP and SIGCONT as `fault coordinator --pause` and a debugger's attach deliver them."""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

from tests.helpers import Proc, wait_until

WAITER = """
from streamplane.process import block_stop_signals, wait_for_stop
block_stop_signals()
print("waiting", flush=True)
print("ended by", wait_for_stop(interval_s=0.05), flush=True)
"""


def _state(pid: int) -> str:
    """The process's state letter in /proc (T: stopped)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def test_a_process_stopped_longer_than_its_wait_carries_on_when_woken_and_stops_on_sigterm() -> None:
    waiter = Proc([sys.executable, "-c", WAITER])
    waiter.wait_for("waiting")
    pid = waiter.popen.pid
    for _ in range(3):
        waiter.popen.send_signal(signal.SIGSTOP)
        wait_until(lambda: _state(pid) == "T", what=lambda: "the process did not stop")
        time.sleep(0.3)  # the fault itself: stopped for six of its wait's intervals
        waiter.popen.send_signal(signal.SIGCONT)
        wait_until(lambda: _state(pid) != "T", what=lambda: "the process did not wake")
    waiter.popen.send_signal(signal.SIGTERM)
    assert waiter.wait_for(r"ended by (\S+)").group(1) == "SIGTERM"
    assert waiter.popen.wait(timeout=10) == 0
