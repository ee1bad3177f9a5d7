"""A dead cluster holding 200 lanes is emptied in seconds, end to end (issue 37).

Three local clusters, each its own process; 100 streams (200 lanes) on cluster a, five of them with a
producer and a consumer group running. Every broker of a goes down: every lane is active elsewhere within the
policy's unhealthy threshold plus seconds (not the minutes of a per-lane rate cap), the streams with traffic
keep flowing on their new generations, and once a is back every acknowledged record has been processed.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from streamplane import model
from streamplane.client import Consumer, CoordinatorClient, Message, Producer
from streamplane.coordinator.rpc import server
from streamplane.coordinator.store import StoreConfig, open_store
from streamplane.coordinator.topology.cluster_admin import RoutingAdmin
from streamplane.devstack.cluster_control import LocalClusterControl
from tests.helpers import Proc, wait_until

STREAMS = 100
BUSY = 5
THRESHOLD_S = model.FailoverPolicy().unhealthy_after_ms / 1000


@pytest.fixture
def three_clusters() -> Iterator[dict[str, tuple[str, LocalClusterControl]]]:
    procs, found = [], {}
    try:
        for name in ("a", "b", "c"):
            proc = Proc([sys.executable, "-m", "streamplane.devstack.mockcluster", "--name", f"ev-{name}"])
            procs.append(proc)
            info = proc.wait_for(r'"bootstrap_servers": "([^"]+)", "control_endpoint": "([^"]+)"')
            found[name] = (info.group(1), LocalClusterControl(info.group(2), name=f"ev-{name}"))
        yield found
    finally:
        for proc in procs:
            proc.stop()


def test_every_lane_of_a_dead_cluster_leaves_within_the_threshold_and_nothing_acknowledged_is_lost(
    tmp_path: Path, three_clusters: dict[str, tuple[str, LocalClusterControl]]
) -> None:
    running = server.start(
        open_store(StoreConfig(driver="embedded", data_dir=tmp_path / "db")),
        admin=RoutingAdmin(),
        control_endpoints=[control.endpoint for _, control in three_clusters.values()],
    )
    address = running.address
    acked: set[bytes] = set()
    processed: set[bytes] = set()
    new_acked: set[bytes] = set()
    lock = threading.Lock()
    stop, stop_consuming = threading.Event(), threading.Event()
    try:
        with CoordinatorClient(address) as c:
            for name, (bootstrap, control) in three_clusters.items():
                c.register_cluster(
                    model.Cluster(name, bootstrap, admin=model.ADMIN_LOCAL, control_endpoint=control.endpoint)
                )
            for i in range(STREAMS):
                c.create_stream(f"ev-{i:03d}", 2, cluster="a")
        busy = [f"ev-{i:03d}" for i in range(BUSY)]

        def on_delivery(err: object, msg: object) -> None:
            if err is None:
                with lock:
                    acked.add(msg.value())  # type: ignore[attr-defined]
                    if not msg.topic().endswith(".g1"):  # type: ignore[attr-defined]
                        new_acked.add(msg.value())  # type: ignore[attr-defined]

        def produce() -> None:
            with Producer(address, **{"linger.ms": 5}) as producer:
                i = 0
                while not stop.is_set():
                    for stream in busy:
                        producer.produce(stream, b"%s-%d" % (stream.encode(), i), on_delivery=on_delivery)
                    i += 1
                    stop.wait(0.01)  # about 500 records a second over the five streams
                producer.flush(60)

        def handle(msg: Message) -> None:
            with lock:
                processed.add(msg.value)

        producer = threading.Thread(target=produce, daemon=True)
        producer.start()
        consumers = [Consumer(address, group=f"{s}-g", stream=s) for s in busy]
        for consumer in consumers:
            threading.Thread(target=consumer.run, args=(handle,), kwargs={"stop": stop_consuming}, daemon=True).start()
        wait_until(lambda: len(processed) > 500, timeout=60, what=lambda: f"{len(processed)} processed")

        control_a = three_clusters["a"][1]
        down_at = time.time()
        for broker in (1, 2, 3):
            control_a.broker_down(broker)
        with CoordinatorClient(address) as c:
            moved: dict[tuple[str, str], model.FailedOver] = {}
            version = ""

            def all_moved() -> bool:
                nonlocal version
                for e in c.watch_topology(version, follow=False):
                    version = e.version
                    if isinstance(e, model.FailedOver) and e.previous.cluster == "a":
                        moved[(e.stream, e.lane)] = e
                return len(moved) == 2 * STREAMS

            wait_until(all_moved, timeout=THRESHOLD_S + 60, what=lambda: f"{len(moved)} of {2 * STREAMS} lanes moved")
            last_s = max(e.time_ms for e in moved.values()) / 1000 - down_at
            # the lanes leave together: at the old cap of 10 failovers a minute, 200 took 20 minutes. How fast is
            # benchmarks/fleet.py's figure (about 3 s past the threshold, the coordinator in its own process);
            # here it shares one process, and its GIL, with a producer and five consumers retrying the dead
            # cluster, and a slow machine took 17 s
            assert last_s <= THRESHOLD_S + 30, f"the last lane moved {last_s:.1f} s after a went down"
            assert {e.current.cluster for e in moved.values()} <= {"b", "c"}
            assert all(e.actor == "autopilot" for e in moved.values())
            lanes = {(s.name, lane.name): lane.active.cluster for s in c.list_streams(prefix="ev-") for lane in s.lanes}
            assert len(lanes) == 2 * STREAMS and "a" not in lanes.values()

        # the busy streams keep flowing on their new generations
        wait_until(lambda: len(new_acked) > 200, timeout=30, what=lambda: f"{len(new_acked)} acked after the move")
        with lock:
            so_far = set(new_acked)  # traffic goes on: what was acknowledged by now must be processed soon
        wait_until(
            lambda: so_far <= processed,
            timeout=30,
            what=lambda: f"{len(so_far - processed)} of {len(so_far)} records of the new generations not processed",
        )
        for broker in (1, 2, 3):  # a comes back: what it holds is read to the end
            control_a.broker_up(broker)
        stop.set()
        producer.join(timeout=90)
        wait_until(
            lambda: acked <= processed, timeout=120, what=lambda: f"{len(acked - processed)} acked, not processed"
        )
        for consumer in consumers:
            consumer.close()
    finally:
        stop.set()
        stop_consuming.set()
        running.stop(0)
