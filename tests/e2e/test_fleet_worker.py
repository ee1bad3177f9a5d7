"""One worker holding 1,024 leases, in its own process: its threads and connections do not grow with its
leases, an idle lease costs no commits, and its session is never lost while idle."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from streamplane.client import CoordinatorClient
from streamplane.coordinator.rpc import metrics
from streamplane.process import usage
from tests.helpers import Proc, register_local_clusters, start_coordinator, wait_until

WORKER = str(Path(__file__).parents[1] / "e2e_worker.py")
LEASES = 1024
IDLE_S = float(os.environ.get("STREAMPLANE_FLEET_IDLE_S", "20"))
"""How long the worker idles: over three session TTLs (6 s) by default; a soak sets more."""


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


def test_a_worker_with_1024_leases_processes_every_record_through_retries_rejects_and_a_failover(
    local_cluster, tmp_path: Path
) -> None:
    bootstrap, control = local_cluster
    proc, address = start_coordinator(
        tmp_path / "coordinator", control_endpoints=[control.endpoint]
    )  # as in production
    try:
        _busy_worker(address, bootstrap, control)
    finally:
        proc.stop()


def _busy_worker(address: str, bootstrap: str, control) -> None:  # type: ignore[no-untyped-def]
    from collections import Counter
    from threading import Event, Lock, Thread

    from streamplane import model
    from streamplane.client import Consumer, Message, Producer
    from streamplane.client.consumer import REASON_HEADER
    from streamplane.client.partition_fetcher import PartitionFetcher

    register_local_clusters(address, bootstrap, control.endpoint, ("wide-a", "wide-b"))
    with CoordinatorClient(address) as client:
        client.create_stream("fleet-busy", LEASES, cluster="wide-a")
        client.configure_group("fleet-busy-g", "realtime", 2)

    def produce(prefix: bytes, n: int) -> list[bytes]:
        values = [(b"poison-" if i % 997 == 0 else b"") + prefix + b"%d" % i for i in range(n)]
        with Producer(address, **{"linger.ms": 20}) as producer:
            for v in values:
                producer.produce("fleet-busy", v, key=v)
            assert producer.flush() == 0
        return values

    seen: Counter[bytes] = Counter()
    lock = Lock()

    def handle(msg: Message) -> None:
        if msg.value.startswith(b"poison-"):
            raise ValueError("cannot parse")
        with lock:
            seen[msg.value] += 1

    old = produce(b"a", 20_000)
    stop = Event()
    with Consumer(address, group="fleet-busy-g", stream="fleet-busy", retry_backoff_s=0.05) as consumer:
        runner = Thread(target=consumer.run, args=(handle,), kwargs={"stop": stop})
        runner.start()
        wait_until(lambda: len(seen) > 5_000, timeout=60)
        with CoordinatorClient(address) as client:
            client.failover("fleet-busy", "realtime", "wide-b")
        new = produce(b"b", 20_000)

        def states() -> list[int]:
            with CoordinatorClient(address) as client:
                lane = next(x for x in client.describe_stream("fleet-busy").lanes if x.name == "realtime")
            return [g.state for g in lane.generations]

        good = {v for v in old + new if not v.startswith(b"poison-")}
        wait_until(lambda: good <= set(seen), timeout=120, what=lambda: f"{len(good - set(seen))} not processed")

        def behind() -> str:
            with CoordinatorClient(address) as client:
                lag = client.lag("fleet-busy-g")
            rows = [(x.lease_id, x.low_watermark, x.offset_lag) for x in lag.partitions if x.offset_lag]
            return f"{states()} {len(rows)} partitions behind: {rows[:5]} leases={len(consumer.leases)}"

        wait_until(lambda: states()[0] == model.DRAINED, timeout=60, what=behind)
        with CoordinatorClient(address) as client:
            wait_until(lambda: client.lag("fleet-busy-g").offset_lag == 0, timeout=60)
        stop.set()
        runner.join()
    duplicates = sum(n - 1 for n in seen.values())
    print(f"\n40,000 records over 2 x 1,024 partitions: {duplicates} processed twice")
    with CoordinatorClient(address) as client:
        dlq = next(x for x in client.describe_stream("fleet-busy").lanes if x.name == "dlq").generations[-1]
    rejected = []
    for p in range(dlq.partitions):
        fetcher = PartitionFetcher(bootstrap, dlq.topic, p, max_wait_ms=0)  # all written: no need to wait
        while (got := fetcher.fetch()).batch is not None:
            rejected += [r for r in got.batch.records()]
        fetcher.close()
    poison = {v for v in old + new if v.startswith(b"poison-")}
    assert {r.value for r in rejected} == poison, "every poison record reached the dlq lane"
    assert all(b"max attempts reached" in dict(r.headers)[REASON_HEADER] for r in rejected)
