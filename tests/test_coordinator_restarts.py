"""Coordinator restarts under a running worker on real Kafka (issue 20/34): ten restarts, alternately graceful
(SIGTERM) and kill -9, on the same address and data dir. Each costs the worker a reconnect and a resumed
session, never a redelivery: every record is handled exactly once."""

from __future__ import annotations

import threading
from collections import Counter
from pathlib import Path

import pytest

from streamplane.client import Consumer, CoordinatorClient, Message, Producer
from tests.helpers import register_real_clusters, start_coordinator, wait_until

pytestmark = pytest.mark.e2e

RESTARTS = 10


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
