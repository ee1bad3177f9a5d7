"""kill -9 in the middle of a stream of writes: every acknowledged transaction survives, none is half-applied."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

from streamplane import model
from streamplane.client.coordinator import CoordinatorClient
from streamplane.coordinator.store import StoreConfig, open_store
from tests.helpers import Proc, start_coordinator, wait_until

WRITER = """
import sys
from streamplane.coordinator.store import StoreConfig, open_store
db = open_store(StoreConfig(driver="embedded", data_dir=sys.argv[1]))
i = 0
while True:
    def body(tr, i=i):
        for part in (b"a", b"b", b"c"):
            tr.set(part + b"/%08d" % i, b"x" * 2000)
        tr.add(b"count", 1)
    db.transact(body)
    print(i, flush=True)
    i += 1
"""


def test_embedded_store_survives_kill9_mid_writes(tmp_path: Path) -> None:
    proc = Proc([sys.executable, "-c", WRITER, str(tmp_path)])
    proc.wait_for(r"^500$", timeout=60)
    proc.kill9()
    acked = {int(line) for line in proc.seen}
    while not proc.lines.empty():
        acked.add(int(proc.lines.get()))

    db = open_store(StoreConfig(driver="embedded", data_dir=tmp_path))
    rows = db.transact(lambda tr: tr.get_range(b"", b"\xff"))
    count = int.from_bytes(db.transact(lambda tr: tr.get(b"count")), "little")
    db.close()

    by_txn: dict[int, set[bytes]] = {}
    for key, _ in rows:
        if key != b"count":
            part, num = key.split(b"/")
            by_txn.setdefault(int(num), set()).add(part)
    assert acked <= set(by_txn), "an acknowledged transaction was lost"
    assert all(parts == {b"a", b"b", b"c"} for parts in by_txn.values()), "a transaction was half-applied"
    assert count == len(by_txn), "the counter disagrees with the transactions that landed"
    assert max(by_txn) <= max(acked) + 1, "only the one in-flight transaction may land unacknowledged"


def test_coordinator_survives_kill9_mid_writes(tmp_path: Path) -> None:
    proc, address = start_coordinator(tmp_path)
    acked: list[str] = []
    stop = threading.Event()

    def writer() -> None:
        with CoordinatorClient(address, timeout_s=5, retries=0) as client:
            i = 0
            while not stop.is_set():
                name = f"c-{i:05d}"
                try:
                    client.register_cluster(model.Cluster(name=name, bootstrap_servers=f"h{i}:9092"))
                except Exception:
                    return  # the coordinator died under us
                acked.append(name)
                i += 1

    thread = threading.Thread(target=writer)
    thread.start()
    wait_until(lambda: len(acked) >= 150, timeout=60)  # kill it mid-stream, with changes in flight
    proc.kill9()
    stop.set()
    thread.join(timeout=30)
    assert len(acked) >= 150

    proc, address = start_coordinator(tmp_path)
    try:
        with CoordinatorClient(address) as client:
            clusters = {c.name: c for c in client.list_clusters()}
            events = list(client.watch_topology("", follow=False))
    finally:
        proc.stop()
    assert set(acked) <= set(clusters)
    assert all(c.bootstrap_servers == f"h{int(name[2:])}:9092" for name, c in clusters.items())
    registered = [e.cluster.name for e in events if isinstance(e, model.ClusterRegistered)]
    assert sorted(registered) == sorted(clusters), "state and event log disagree: a change was half-applied"
    assert registered == sorted(registered), "events are not in commit order"


def test_cli_reports_an_unreachable_coordinator(tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "streamplane.cli.main",
            "--coordinator",
            "127.0.0.1:1",
            "--timeout",
            "2",
            "stream",
            "list",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 6
    assert "127.0.0.1:1" in result.stderr and "unreachable" in result.stderr
    assert "Traceback" not in result.stderr


def test_cli_reports_a_busy_port_and_a_bad_cluster_count(tmp_path: Path) -> None:
    proc, address = start_coordinator(tmp_path / "first")
    try:
        port = address.rsplit(":", 1)[1]
        busy = subprocess.run(
            [
                sys.executable,
                "-m",
                "streamplane.cli.main",
                "coordinator",
                "--port",
                port,
                "--data-dir",
                str(tmp_path / "second"),
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        proc.stop()
    assert busy.returncode == 6 and f"cannot listen on 127.0.0.1:{port}" in busy.stderr
    assert "Traceback" not in busy.stderr
    bad = subprocess.run(
        [
            sys.executable,
            "-m",
            "streamplane.cli.main",
            "dev",
            "--clusters",
            "30",
            "--data-dir",
            str(tmp_path / "dev"),
            "--port",
            "0",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2 and "--clusters must be between 1 and 26" in bad.stderr
    assert "Traceback" not in bad.stderr
