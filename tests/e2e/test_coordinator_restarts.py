"""Coordinator restarts under running workers (issue 20/34): ten restarts, alternately graceful (SIGTERM) and
kill -9, on the same address and data dir, on real Kafka; and a kill in the middle of a revoke. Each costs the
workers a reconnect and a resumed session, never a redelivery: every record is handled exactly once."""

from __future__ import annotations

import threading
import time
from collections import Counter
from pathlib import Path

from streamplane.client import Consumer, CoordinatorClient, Message, Producer
from streamplane.model import LeaseState
from tests.helpers import register_local_clusters, register_real_clusters, start_coordinator, wait_until

RESTARTS = 10
REVOKE_S = 1.0
"""The coordinator's revoke deadline (AssignerConfig.revoke_ms)."""


def test_ten_coordinator_restarts_under_a_worker_on_real_kafka_redeliver_nothing(real_kafka, tmp_path: Path) -> None:
    proc, address = start_coordinator(tmp_path / "coordinator")
    port = int(address.rsplit(":", 1)[1])
    try:
        register_real_clusters(address, real_kafka, ("east",))
        with CoordinatorClient(address) as client:
            client.create_stream("restarts", 4, cluster="east")
        seen: Counter[bytes] = Counter()
        lock, stop = threading.Lock(), threading.Event()

        def handle(msg: Message) -> None:
            with lock:
                seen[msg.value] += 1

        def committed() -> bool:
            try:
                with CoordinatorClient(address, retries=0) as client:
                    lag = client.lag("restarts-g")
            except Exception:
                return False  # the coordinator is still coming back
            return len(lag.partitions) == 4 and lag.offset_lag == 0

        written = [0]

        def produce_while_restarting() -> None:
            """About 1,000 records a second, through every restart (the producer rides them out)."""
            with Producer(address, **{"linger.ms": 5}) as producer:
                while not done_producing.is_set():
                    lo = written[0]
                    for i in range(lo, lo + 100):
                        producer.produce("restarts", b"%d" % i, key=b"%d" % i)
                    written[0] = lo + 100
                    done_producing.wait(0.1)
                assert producer.flush(120) == 0

        done_producing = threading.Event()
        with Consumer(address, group="restarts-g", stream="restarts", commit_interval_s=0.05) as consumer:
            runner = threading.Thread(target=consumer.run, args=(handle,), kwargs={"stop": stop}, daemon=True)
            runner.start()
            feeder = threading.Thread(target=produce_while_restarting, daemon=True)
            feeder.start()
            for restart in range(RESTARTS):  # mid-stream: records in flight, commits in flight
                target = len(seen) + 500
                wait_until(lambda t=target: len(seen) >= t, timeout=60, what=lambda r=restart: f"restart {r}: stalled")
                if restart % 2:
                    proc.kill9()
                else:
                    assert proc.stop() == 0
                proc, _ = start_coordinator(tmp_path / "coordinator", port)
            done_producing.set()
            feeder.join(150)
            total = written[0]
            wait_until(lambda: len(seen) >= total, timeout=90, what=lambda: f"{len(seen)} of {total}")
            wait_until(committed, timeout=60, what=lambda: "the group's lag is not 0")
            stop.set()
            runner.join(10)
            assert consumer.error is None, consumer.error
        assert set(seen) == {b"%d" % i for i in range(total)}
        redelivered = {v: n for v, n in seen.items() if n > 1}
        print(f"{RESTARTS} coordinator restarts on real Kafka: redelivered={sum(n - 1 for n in seen.values())}")
        assert not redelivered, f"{len(redelivered)} records redelivered, e.g. {sorted(redelivered)[:5]}"
    finally:
        proc.stop()


def test_a_revoke_cut_by_the_coordinators_kill_is_committed_before_it_is_handed_back(
    local_cluster, tmp_path: Path
) -> None:
    """The coordinator dies (kill -9) just after revoking a lease from a worker with a backlog, in the middle of
    the records a handler thread took of it. The coordinator is away past the revoke's 1 s deadline. The worker
    acks what it handled, keeps the lease's outcomes until its commit lands (handing the lease back first, or
    on a failed commit, would drop them), and the restarted coordinator, in its first TTL, does not force a
    revoke whose holder could not reach it: the lease moves with everything done, nothing is processed twice."""
    bootstrap, control = local_cluster
    proc, address = start_coordinator(tmp_path / "coordinator", control_endpoints=[control.endpoint])
    port = int(address.rsplit(":", 1)[1])
    stream, group, records = "cut-revoke", "cut-revoke-g", 600
    consumers: list[Consumer] = []
    stop = threading.Event()
    try:
        register_local_clusters(address, bootstrap, control.endpoint, ["c"])
        with CoordinatorClient(address) as client:
            client.create_stream(stream, 2, cluster="c")
        with Producer(address, **{"linger.ms": 5}) as producer:
            for i in range(records):
                producer.produce(stream, b"%d" % i, key=b"%d" % i)
            assert producer.flush(30) == 0
        seen: Counter[bytes] = Counter()
        lock = threading.Lock()

        def handle(msg: Message) -> None:
            with lock:
                seen[msg.value] += 1
            time.sleep(0.01)  # a backlog: the first worker has records of both leases queued when a revoke comes

        def revoking() -> list[str]:
            with CoordinatorClient(address, retries=0) as client:
                return [x.lease_id for x in client.describe_group(group).leases if x.state == LeaseState.REVOKING]

        # it commits every second: the kill usually finds outcomes not yet committed too
        first = Consumer(address, group=group, stream=stream, worker_id="w1", commit_interval_s=1.0)
        consumers = [first]
        runners = [threading.Thread(target=first.run, args=(handle,), kwargs={"stop": stop}, daemon=True)]
        runners[0].start()
        wait_until(lambda: len(seen) >= 50, timeout=30, what=lambda: "the first worker handled nothing")
        second = Consumer(address, group=group, stream=stream, worker_id="w2", commit_interval_s=0.05)
        consumers.append(second)
        runners.append(threading.Thread(target=second.run, args=(handle,), kwargs={"stop": stop}, daemon=True))
        runners[1].start()  # a lease moves to it: revoked from the first
        wait_until(revoking, timeout=30, what=lambda: "no lease was revoked from the first worker")
        proc.kill9()
        back_at = time.monotonic() + 2 * REVOKE_S  # the fault's length: away past the revoke's deadline
        wait_until(lambda: time.monotonic() >= back_at, timeout=10)
        proc, _ = start_coordinator(tmp_path / "coordinator", port, control_endpoints=[control.endpoint])
        wait_until(lambda: len(seen) >= records, timeout=60, what=lambda: f"{len(seen)} of {records} handled")
        stop.set()
        for runner in runners:
            runner.join(15)
        assert [c.error for c in consumers] == [None, None]
        twice = sorted(v for v, n in seen.items() if n > 1)
        assert not twice, f"{len(twice)} records handled twice, e.g. {twice[:5]}"
    finally:
        stop.set()  # a failure leaves no worker running into the next tests
        for consumer in consumers:
            consumer.close()
        proc.stop()
