"""Automatic failover, measured (issue 12).

Per run: a fresh stream on cluster A with a producer writing (acks tracked) and a consumer group reading;
every broker of A goes down; measured are the time from "A down" to "every lane moved" (the autopilot's
FailedOver events), and from that event to the producer's first acknowledged record in the new generation.
A then comes back; its old generations seal and drain, and every acknowledged record must have been
processed (lost = acknowledged and never processed).

Goals: failover p99 within the policy's threshold (10 s) plus 2 s; producer switch p99 at most 0.5 s after the
failover event; 0 lost. The last line is `auto_failover_p99_s=<x> producer_switch_p99_s=<x> lost=<n>`.
`--quick` (3 runs) takes about two minutes; the default is 10 runs.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path

from _local import local_cluster

from streamplane import model
from streamplane.client import Consumer, CoordinatorClient, Message, Producer
from streamplane.coordinator.rpc import server
from streamplane.coordinator.store import StoreConfig, open_store
from streamplane.coordinator.topology.cluster_admin import RoutingAdmin

THRESHOLD_S = model.FailoverPolicy().unhealthy_after_ms / 1000


def p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


def wait(predicate, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"gave up waiting for {what}")
        time.sleep(0.05)


def one_run(address: str, controls: dict[str, object], run: int) -> tuple[float, float, int]:
    stream = f"bench-{run}"
    with CoordinatorClient(address) as c:
        wait(lambda: c.cluster_health("a")[0].health == "healthy", 60, "cluster a to be healthy again")
        c.create_stream(stream, 2, cluster="a")
    acked: set[bytes] = set()
    processed: set[bytes] = set()
    first_new: list[float] = []
    lock = threading.Lock()
    stop_producing, stop_consuming = threading.Event(), threading.Event()

    def on_delivery(err: object, msg: object) -> None:
        if err is None:
            with lock:
                acked.add(msg.value())  # type: ignore[attr-defined]
                if msg.topic().endswith(".g2") and not first_new:  # type: ignore[attr-defined]
                    first_new.append(time.time())

    def produce() -> None:
        with Producer(address, **{"linger.ms": 5}) as producer:
            i = 0
            while not stop_producing.is_set():
                producer.produce(stream, b"%d-%d" % (run, i), on_delivery=on_delivery)
                i += 1
                time.sleep(0.002)
            producer.flush(60)

    def handle(msg: Message) -> None:
        with lock:
            processed.add(msg.value)

    producer = threading.Thread(target=produce, daemon=True)
    producer.start()
    control = controls["a"]
    with Consumer(address, group=f"bench-g{run}", stream=stream) as consumer:
        threading.Thread(target=consumer.run, args=(handle,), kwargs={"stop": stop_consuming}, daemon=True).start()
        wait(lambda: len(processed) > 500, 30, "the consumer to read")
        down_at = time.time()
        control.broker_down(1)  # type: ignore[attr-defined]
        with CoordinatorClient(address) as c:

            def moved() -> list[model.FailedOver]:
                return [
                    e
                    for e in c.watch_topology("", follow=False)
                    if isinstance(e, model.FailedOver) and e.stream == stream
                ]

            wait(lambda: len(moved()) == 2, 60, "every lane to move")
            failover_ms = max(e.time_ms for e in moved())
        wait(lambda: bool(first_new), 30, "the producer to switch")
        time.sleep(1)
        control.broker_up(1)  # type: ignore[attr-defined]
        stop_producing.set()
        producer.join(timeout=90)
        wait(lambda: acked <= processed, 120, "every acknowledged record to be processed")
        stop_consuming.set()
    lost = len(acked - processed)
    failover_s = failover_ms / 1000 - down_at
    switch_s = max(0.0, first_new[0] - failover_ms / 1000)
    print(
        f"run {run + 1}: failover {failover_s:.2f} s, producer switch {switch_s:.3f} s, "
        f"{len(acked)} acked, {lost} lost",
        flush=True,
    )
    return failover_s, switch_s, lost


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="3 runs")
    args = parser.parse_args()
    runs = 3 if args.quick else 10
    os.environ.setdefault("STREAMPLANE_LOG_LEVEL", "warning")
    from streamplane.log import configure_logging

    configure_logging("warning")
    with (
        local_cluster(1) as (boot_a, control_a),
        local_cluster(1) as (boot_b, control_b),
        tempfile.TemporaryDirectory() as tmp,
    ):
        running = server.start(
            open_store(StoreConfig(driver="embedded", data_dir=Path(tmp))),
            admin=RoutingAdmin(),
            control_endpoints=[control_a.endpoint, control_b.endpoint],
        )
        try:
            with CoordinatorClient(running.address) as c:
                c.register_cluster(
                    model.Cluster("a", boot_a, zone="z1", admin=model.ADMIN_LOCAL, control_endpoint=control_a.endpoint)
                )
                c.register_cluster(
                    model.Cluster("b", boot_b, zone="z2", admin=model.ADMIN_LOCAL, control_endpoint=control_b.endpoint)
                )
                c.set_fleet_policy(model.FleetPolicy(max_failovers_per_minute=100))
            print(f"{runs} runs; policy: fail over after {THRESHOLD_S:g} s unhealthy, probes every 2 s", flush=True)
            results = [one_run(running.address, {"a": control_a}, r) for r in range(runs)]
        finally:
            running.stop(0)
    failovers, switches, lost = [r[0] for r in results], [r[1] for r in results], sum(r[2] for r in results)
    print(
        f"failover: p50 {statistics.median(failovers):.2f} s, p99 {p99(failovers):.2f} s "
        f"(goal <= {THRESHOLD_S + 2:g} s)"
    )
    print(f"producer switch: p50 {statistics.median(switches):.3f} s, p99 {p99(switches):.3f} s (goal <= 0.5 s)")
    print(f"auto_failover_p99_s={p99(failovers):.2f} producer_switch_p99_s={p99(switches):.3f} lost={lost}")


if __name__ == "__main__":
    main()
