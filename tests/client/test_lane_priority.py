"""Lanes are served by priority: a backlog on a lower lane never raises the top lane's time lag above its
target while workers have capacity (a real coordinator, local cluster, producer and consumer)."""

from __future__ import annotations

import threading
import time

from streamplane.client import Consumer, CoordinatorClient, Message, Producer
from tests.helpers import register_local_clusters, wait_until

TARGET_S = 5.0


def test_a_lower_lane_backlog_never_delays_the_top_lane_past_its_target(coordinator, local_cluster) -> None:
    bootstrap, control = local_cluster
    register_local_clusters(coordinator.address, bootstrap, control.endpoint, ("east",))
    with CoordinatorClient(coordinator.address) as client:
        client.create_stream("prio", 2, cluster="east")
        client.add_lane("prio", "backlog", 50, 2)
    with Producer(coordinator.address, **{"linger.ms": 20}) as producer:
        for i in range(30_000):  # about 15 s of work for the two handler threads below
            producer.produce("prio", b"old %d" % i, lane="backlog")
        assert producer.flush() == 0

    realtime_lag: list[float] = []
    backlog_done = []
    lock = threading.Lock()

    def handle(msg: Message) -> None:
        if msg.lane == "backlog":
            time.sleep(0.001)  # stands for the handler's work on a backlog record
            with lock:
                backlog_done.append(msg.offset)
        else:
            with lock:
                realtime_lag.append(time.time() - msg.timestamp / 1000)

    stop = threading.Event()
    with Consumer(coordinator.address, group="prio-g", stream="prio", concurrency=2) as consumer:
        runner = threading.Thread(target=consumer.run, args=(handle,), kwargs={"stop": stop}, daemon=True)
        runner.start()
        wait_until(lambda: len(backlog_done) > 1000, timeout=30)  # the backlog is being worked off
        with Producer(coordinator.address, **{"linger.ms": 5}) as producer:
            for _ in range(60):  # 6 s of live traffic on the top lane, beside the backlog
                for _ in range(20):
                    producer.produce("prio", b"live")
                producer.poll(0)
                time.sleep(0.1)  # paces the live traffic
            assert producer.flush() == 0
        left = 30_000 - len(backlog_done)  # the backlog still waiting when the live traffic ended
        wait_until(lambda: len(realtime_lag) == 1200, timeout=60)
        stop.set()
        runner.join()
    assert left > 1000, "the backlog must still be there while the live traffic ran (else the test shows nothing)"
    worst = max(realtime_lag)
    print(f"top lane: 1,200 records, worst time lag {worst:.2f} s beside a backlog of {left:,} records")
    assert worst < TARGET_S, f"the top lane waited {worst:.1f} s behind the lower lane's backlog"
