"""`streamplane coordinator`'s Assigner settings: bad values are refused with a sentence and exit code 2,
before anything is opened."""

from __future__ import annotations

import sys
from pathlib import Path

from tests.helpers import Proc, cli


def test_bad_assigner_settings_are_refused_before_anything_starts(tmp_path: Path) -> None:
    base = ["coordinator", "--port", "0", "--data-dir", str(tmp_path / "db")]
    done = cli(*base, "--join-window-ms", "-1")
    assert done.returncode == 2 and "--join-window-ms must be between 0 and 60000, not -1" in done.stderr
    done = cli(*base, "--session-ttl-ms", "50")
    assert done.returncode == 2 and "--session-ttl-ms must be between 100 and 60000, not 50" in done.stderr
    assert not (tmp_path / "db").exists(), "a refused start left a store behind"


def test_a_coordinator_starts_with_no_join_window(tmp_path: Path) -> None:
    args = ["coordinator", "--port", "0", "--data-dir", str(tmp_path), "--join-window-ms", "0"]
    proc = Proc([sys.executable, "-m", "streamplane.cli.main", *args])
    try:
        assert proc.wait_for(r"coordinator=(\S+)")
    finally:
        assert proc.stop() == 0
