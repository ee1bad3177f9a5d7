"""One worker holding 1,024 leases, in its own process: its threads and connections do not grow with its
leases, an idle lease costs no commits, and its session is never lost while idle."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from streamplane.client import CoordinatorClient
from streamplane.coordinator import metrics
from streamplane.process import usage
from tests.helpers import Proc, register_local_clusters, wait_until

pytestmark = pytest.mark.e2e

WORKER = str(Path(__file__).with_name("e2e_worker.py"))
LEASES = 1024
IDLE_S = float(os.environ.get("STREAMPLANE_FLEET_IDLE_S", "60"))


def test_a_worker_with_1024_idle_leases_keeps_few_threads_one_connection_per_broker_and_its_session(
    coordinator, local_cluster, tmp_path: Path
) -> None:
    bootstrap, control = local_cluster
    register_local_clusters(coordinator.address, bootstrap, control.endpoint, ("fleet",))
    with CoordinatorClient(coordinator.address) as client:
        client.create_stream("fleet-idle", LEASES, cluster="fleet")
    worker = Proc(
        [sys.executable, WORKER, coordinator.address, "fleet-g", "fleet-idle", "w1", str(tmp_path / "out")],
        env={"STREAMPLANE_LOG_LEVEL": "warning"},
    )
    try:
        pid = int(worker.wait_for(r"\"started\", \"pid\": (\d+)").group(1))

        def held() -> int:
            with CoordinatorClient(coordinator.address) as client:
                return sum(1 for x in client.describe_group("fleet-g").leases if x.worker_id == "w1")

        wait_until(lambda: held() == LEASES, timeout=60, what=lambda: f"{held()} leases granted")
        time.sleep(2.0)  # let the grants' first fetches and commits settle, then watch it idle
        commits_before = metrics.COMMITS.labels("fleet-g")._value.get()
        start, started = usage(pid), time.monotonic()
        peak_threads = peak_sockets = 0
        while time.monotonic() - started < IDLE_S:
            now = usage(pid)
            peak_threads, peak_sockets = max(peak_threads, now.threads), max(peak_sockets, now.sockets)
            assert worker.popen.poll() is None, f"the worker exited: {''.join(worker.stderr)[-2000:]}"
            time.sleep(1.0)  # sampling interval: the idle period is real time by design
        end = usage(pid)
        cores = (end.cpu_s - start.cpu_s) / (time.monotonic() - started)
        print(f"\n1,024 idle leases: {peak_threads} threads, {peak_sockets} sockets, {cores:.3f} cores")
        assert held() == LEASES, "the session was lost while idle (its leases moved)"
        assert not any("session_ended" in line for line in worker.seen + worker.stderr)
        assert peak_threads <= 32, f"{peak_threads} threads for {LEASES} leases"
        # three brokers, two coordinator channels, and the fetch loop's wake-up pair
        assert peak_sockets <= 3 + 4 + 2, f"{peak_sockets} sockets for {LEASES} leases"
        assert metrics.COMMITS.labels("fleet-g")._value.get() == commits_before, "idle leases sent commits"
    finally:
        worker.send("stop")
        worker.stop()
