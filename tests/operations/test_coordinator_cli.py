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


def test_a_second_coordinator_on_a_data_dir_in_use_is_refused_and_inspect_still_reads_it(tmp_path: Path) -> None:
    args = ["coordinator", "--port", "0", "--data-dir", str(tmp_path)]
    first = Proc([sys.executable, "-m", "streamplane.cli.main", *args])
    try:
        first.wait_for(r"coordinator=(\S+)")
        second = cli(*args, timeout=30)
        assert second.returncode == 6, second.stderr
        assert f"is in use by process {first.popen.pid}" in second.stderr and "Traceback" not in second.stderr
        inspected = cli("inspect", env={"STREAMPLANE_DATA_DIR": str(tmp_path)})
        assert inspected.returncode == 0, inspected.stderr
    finally:
        assert first.stop() == 0
    again = Proc([sys.executable, "-m", "streamplane.cli.main", *args])  # released when the first stopped
    try:
        again.wait_for(r"coordinator=(\S+)")
    finally:
        again.stop()


def test_a_second_dev_stack_on_a_port_in_use_ends_at_once_with_the_childs_sentence(tmp_path: Path) -> None:
    from tests.helpers import start_dev

    proc, address, _ = start_dev(tmp_path / "one", "--clusters", "1")
    try:
        port = address.rsplit(":", 1)[1]
        second = cli("dev", "--data-dir", str(tmp_path / "two"), "--port", port, "--clusters", "1", timeout=60)
        assert second.returncode == 6, second.stdout + second.stderr
        assert "cannot listen on" in second.stderr and "exited with code 6 before serving" in second.stderr
        assert "Traceback" not in second.stderr
    finally:
        proc.stop()
