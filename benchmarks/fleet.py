"""The fleet (issue 37), measured: a dead cluster's lanes emptied, a departure's moves, a page of a big topology.

- `evacuate_200_lanes_s`: a coordinator in its own process with three local clusters (each its own process,
  3 brokers); 100 streams (200 lanes) on cluster a, with the default policy (fail over after 10 s unhealthy).
  Every broker of a goes down; the figure is the time from then to the last lane's `failed_over` event.
  Goal <= 15 s; before this round, at the old cap of 10 lane failovers a minute, about 20 minutes.
- Printed beside it, not in the last line: 100 lanes failed over to a real Kafka 4.4 broker one at a time (as an
  operator's `failover` does) and together (as the autopilot's pass does: their topics created in one request,
  their leaders waited for together). The local clusters above make a topic's leaders as they create it; a
  real broker takes tens of milliseconds a topic.
- `moves_per_orphan_50k_1k`: the Balancer with 1,000 workers settled on 50,000 partitions with measured
  (lognormal) loads; one worker leaves; holders changed until the group settles again, per orphan. Goal <= 2;
  before this round 11.2.
- `stream_list_page_ms_10k`: 10,000 streams in the store (written in bulk, the fleet frozen); the median time
  of a default `ListStreams` page (500 streams) with a prefix matching 1,000 of them, and of the first page of
  all, over gRPC, the slower of the two. Goal <= 100 ms. The largest page (1,000) is printed too.
- `start_s_1m_partitions` and `coordinator_rss_mb_1m_partitions`: 10,000 streams of two lanes of 50 partitions
  each (1,000,000 partitions) written into the store; a coordinator started on it, timed from its process's
  start to its first answered page of streams, and its resident memory once it has answered pages, a describe
  and a fleet lag. The topology only: no group holds those partitions (a group's leases are read by the
  replica owning it, a page at a time). Goals <= 10 s and <= 1,024 MB. On the same coordinator, `doctor` on
  one stream is timed beyond the interval between its two looks (goal under a second); printed, not in the
  last line.
- `probe_cores_1k_clusters`: a coordinator in its own process with 1,000 clusters registered, each a stand-in
  (`streamplane.testing.kafka_fleet`, one process serving them all); every cluster is probed every 2 s and
  gets a canary every 10 s (the defaults). The figure is the coordinator process's CPU over a window of whole
  canary rounds, once every cluster is healthy and has its canary topic, in cores. Goal <= 0.2. Its threads
  and sockets are printed beside it: one connection a cluster, a pool of 8 probe threads.

The peer is a gateway: Conduktor publishes 6 to 46 minutes for a failover end to end. Its best case, 6
minutes, is the reference of `gateway_failover_vs_ours`: a published figure, not one measured here.
`--quick` (CI) evacuates the same 200 lanes and lists the same 10,000 streams, with fewer samples.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

from _local import coordinator_process, engine, local_cluster

from streamplane import model
from streamplane.cli import doctor
from streamplane.client import CoordinatorClient
from streamplane.clock import SYSTEM
from streamplane.coordinator import keys
from streamplane.coordinator.groups.assignment import Balancer, PartitionSpec, WorkerSpec
from streamplane.coordinator.store import StoreConfig, Transaction, open_store
from streamplane.coordinator.topology.cluster_admin import RoutingAdmin
from streamplane.coordinator.topology.health import Move
from streamplane.coordinator.topology.topology import Topology
from streamplane.names import topic_name
from streamplane.process import usage
from streamplane.testing.cluster_admin import MemoryClusterAdmin

GATEWAY_FAILOVER_S = 360.0
"""Conduktor's published best case for a failover end to end (6 minutes); not measured here."""


def evacuate(streams: int) -> float:
    """Seconds from every broker of cluster a going down to the last of its lanes failed over."""
    with ExitStack() as stack, tempfile.TemporaryDirectory() as data_dir:
        clusters = {name: stack.enter_context(local_cluster(3)) for name in ("a", "b", "c")}
        address = stack.enter_context(coordinator_process(data_dir, *(c for _, c in clusters.values())))
        with CoordinatorClient(address) as c:
            for name, (bootstrap, control) in clusters.items():
                c.register_cluster(
                    model.Cluster(name, bootstrap, admin=model.ADMIN_LOCAL, control_endpoint=control.endpoint)
                )
            for i in range(streams):
                c.create_stream(f"ev-{i:03d}", 2, cluster="a")
            lanes = 2 * streams
            print(f"{streams} streams ({lanes} lanes) on cluster a; taking every broker of a down", flush=True)
            control = clusters["a"][1]
            down_at = time.time()
            for broker in (1, 2, 3):
                control.broker_down(broker)
            moved: dict[tuple[str, str], int] = {}
            version = ""
            deadline = time.monotonic() + 600
            while len(moved) < lanes:
                if time.monotonic() > deadline:
                    raise SystemExit(f"only {len(moved)} of {lanes} lanes moved in 600 s")
                for e in c.watch_topology(version, follow=False):
                    version = e.version
                    if isinstance(e, model.FailedOver) and e.previous.cluster == "a":
                        moved[(e.stream, e.lane)] = e.time_ms
                print(f"\r  moved {len(moved)}/{lanes}", end="", flush=True)
                time.sleep(0.2)  # the log's head again in a moment
            print()
            return max(moved.values()) / 1000 - down_at


def failovers_on_kafka(lanes: int) -> tuple[float, float]:
    """Seconds to fail `lanes` lanes over to a real Kafka broker one at a time (`failover`, as an operator's
    command does), and as the autopilot's pass does (`failover_many`: their topics created in one request and
    their leaders waited for together). The store is embedded; the same broker is registered as three clusters."""
    with engine("kafka") as kafka, tempfile.TemporaryDirectory() as data_dir:
        db = open_store(StoreConfig(driver="embedded", data_dir=Path(data_dir)))
        try:
            topology = Topology(db, RoutingAdmin(), SYSTEM)
            for name in ("k1", "k2", "k3"):
                topology.register_cluster(model.Cluster(name, kafka.bootstrap))
            for i in range(2 * lanes):
                topology.create_stream(f"fo-{i:03d}", 4, "k1")
            started = time.perf_counter()
            for i in range(lanes):
                topology.failover(f"fo-{i:03d}", "realtime", "k2", 0, "one at a time")
            one_at_a_time = time.perf_counter() - started
            started = time.perf_counter()
            moves = [Move(f"fo-{i:03d}", "realtime", "k1", "k3", "together") for i in range(lanes, 2 * lanes)]
            failed = [r for r in topology.failover_many(moves) if isinstance(r, Exception)]
            together = time.perf_counter() - started
            if failed:
                raise SystemExit(f"{len(failed)} of {lanes} failovers failed: {failed[0]}")
            return one_at_a_time, together
        finally:
            db.close()


def moves_per_orphan(workers: int, partitions: int, seed: int) -> float:
    rng = random.Random(seed)
    b = Balancer()
    names = [f"w{i:04d}" for i in range(workers)]
    for w in names:
        b.put_worker(WorkerSpec(w))
    for p in range(partitions):
        b.put_partition(PartitionSpec(p, load=rng.lognormvariate(0, 1)))
    b.step()

    def settle() -> None:
        step = b.step(proposed=frozenset())
        while step.proposed:
            step = b.step(proposed=step.proposed)

    settle()
    gone = names[rng.randrange(workers)]
    orphans = sum(1 for w in b.holders.values() if w == gone)
    before = dict(b.holders)
    b.remove_worker(gone)
    settle()
    return sum(1 for k, w in b.holders.items() if before[k] != w) / orphans


def _bulk_streams(data_dir: str, count: int, partitions: int = 4) -> None:
    """`count` streams of two lanes (`partitions` each) on cluster "far", written straight into the store in
    large transactions (creating them one by one over the API is not what is measured)."""
    db = open_store(StoreConfig(driver="embedded", data_dir=Path(data_dir)))
    try:
        for start in range(0, count, 1000):

            def write(tr: Transaction, start: int = start) -> None:
                for i in range(start, min(count, start + 1000)):
                    name = f"s{i:05d}"
                    tr.set(keys.stream_key(name), model.Stream(name).to_json())
                    for lane, priority in (("realtime", 100), ("dlq", 0)):
                        tr.set(keys.lane_key(name, lane), model.Lane(lane, priority).to_json())
                        gen = model.Generation(1, "far", topic_name(name, lane, 1), partitions)
                        tr.set(keys.generation_key(name, lane, 1), gen.to_json())

            db.transact(write)
        db.transact(lambda tr: tr.add(keys.STREAM_COUNT, count))  # as CreateStream keeps it
    finally:
        db.close()


def rss_mb(pid: int) -> float:
    """A process's resident memory now, in MB (Linux)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise SystemExit("no VmRSS: resident memory is measured on Linux only")


def start_at_size(streams: int, partitions: int) -> tuple[float, float, float]:
    """A coordinator started on a store holding `streams` streams of two lanes of `partitions` partitions each
    (the topology only: no group holds them): seconds from its process starting to its first answered page of
    streams, its resident memory (MB) once it has answered a page of every kind and described a stream, and
    what `doctor` on one stream costs beyond its two looks' interval (s)."""
    with tempfile.TemporaryDirectory() as data_dir:
        _bulk_streams(data_dir, streams, partitions)
        started = time.monotonic()
        with coordinator_process(data_dir) as address, CoordinatorClient(address, timeout_s=60) as c:
            first = next(c.stream_pages(page_size=100))
            ready_s = time.monotonic() - started
            assert first.total == streams, first.total
            c.set_fleet_policy(model.FleetPolicy(frozen=True))
            next(c.stream_pages(prefix="s09", page_size=500))
            c.describe_stream(f"s{streams - 1:05d}")
            c.lag(partitions=False)
            started = time.monotonic()  # the doctor looks twice, 0.2 s apart: the rest is what it costs
            doctor.run(c, f"s{streams - 1:05d}", "", interval_s=0.2, target_ms=5_000)
            doctor_s = time.monotonic() - started - 0.2
            return ready_s, rss_mb(address.pid), doctor_s


def page_ms(streams: int, samples: int, page_size: int) -> tuple[float, float]:
    """Median ms of a page (of `page_size`) with a prefix matching 1,000 streams, and of the first of all."""
    with tempfile.TemporaryDirectory() as data_dir:
        _bulk_streams(data_dir, streams)
        with coordinator_process(data_dir) as address, CoordinatorClient(address) as c:
            c.set_fleet_policy(model.FleetPolicy(frozen=True))
            first = next(c.stream_pages(page_size=page_size))
            assert first.total == streams and len(first.streams) == page_size, (first.total, len(first.streams))
            timings: dict[str, list[float]] = {"prefix": [], "all": []}
            for i in range(samples):
                for kind, prefix in (("prefix", f"s0{i % 10}"), ("all", "")):
                    started = time.perf_counter()
                    page = next(c.stream_pages(prefix=prefix, page_size=page_size))
                    timings[kind].append((time.perf_counter() - started) * 1000)
                    assert len(page.streams) == page_size
            return statistics.median(timings["prefix"]), statistics.median(timings["all"])


def probe_cores(clusters: int, window_s: float) -> tuple[float, int, int]:
    """(cores, threads, sockets) of a coordinator probing `clusters` stand-in clusters, over `window_s`."""
    with ExitStack() as stack, tempfile.TemporaryDirectory() as data_dir:
        fleet = subprocess.Popen(
            [sys.executable, "-m", "streamplane.testing.kafka_fleet", "--clusters", str(clusters)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        stack.callback(fleet.wait, 30)
        stack.callback(lambda: fleet.stdin.close() if fleet.stdin else None)  # the stand-ins stop with stdin
        bootstraps = json.loads(fleet.stdout.readline() if fleet.stdout else "[]")
        db = open_store(StoreConfig(driver="embedded", data_dir=Path(data_dir)))
        try:  # registered through the topology's own path before the coordinator starts: the API's rate limit
            topology = Topology(db, MemoryClusterAdmin())  # would take a minute, which is not what is measured
            for i, bootstrap in enumerate(bootstraps):
                topology.register_cluster(model.Cluster(f"fake-{i:04d}", bootstrap))
        finally:
            db.close()
        address = stack.enter_context(coordinator_process(data_dir))
        with CoordinatorClient(address) as c:
            deadline = time.monotonic() + 120
            healthy = 0
            while healthy < clusters:  # the first probe of each creates its canary topic and runs it
                if time.monotonic() > deadline:
                    raise SystemExit(f"only {healthy} of {clusters} stand-in clusters became healthy in 120 s")
                time.sleep(1)
                healthy = len(c.list_clusters(health="healthy"))
                print(f"  probing: {healthy}/{clusters} clusters healthy", flush=True)
        time.sleep(10)  # past the first round of canaries, which create the topics
        before, started = usage(address.pid).cpu_s, time.monotonic()
        time.sleep(window_s)
        after = usage(address.pid)
        return (after.cpu_s - before) / (time.monotonic() - started), after.threads, after.sockets


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer samples (CI)")
    args = parser.parse_args()
    samples = 5 if args.quick else 20

    evacuate_s = evacuate(100)
    print(f"evacuation: 200 lanes off a dead cluster in {evacuate_s:.1f} s (goal <= 15 s, policy threshold 10 s)")
    one_s, together_s = failovers_on_kafka(100)
    print(
        f"failovers to a real Kafka broker: 100 lanes in {one_s:.1f} s one at a time, {together_s:.1f} s together "
        f"as the autopilot's pass moves them ({one_s / together_s:.1f}x)"
    )
    moves = statistics.median(moves_per_orphan(1000, 50_000, seed) for seed in range(1 if args.quick else 3))
    print(f"stickiness: {moves:.2f} holders changed per orphan, 1,000 workers on 50,000 partitions (goal <= 2)")
    prefix_ms, all_ms = page_ms(10_000, samples, 500)
    print(
        f"paging: a default page (500) of 10,000 streams in {prefix_ms:.0f} ms with a prefix, {all_ms:.0f} ms without"
    )
    big = page_ms(10_000, samples, 1000)
    print(f"        the largest page (1,000) in {big[0]:.0f} ms with a prefix, {big[1]:.0f} ms without")
    start_s, rss, doctor_s = start_at_size(10_000, 50)
    print(
        f"size: a coordinator on 10,000 streams of 2 x 50 partitions (1,000,000, the topology only) answers after "
        f"{start_s:.1f} s and holds {rss:.0f} MB resident; doctor on one stream answers in {doctor_s:.2f} s "
        "beyond its 0.2 s between looks (goal < 1 s)"
    )
    cores, threads, sockets = probe_cores(1000, 20 if args.quick else 60)
    print(
        f"probing: 1,000 clusters probed every 2 s, a canary each every 10 s: {cores:.3f} cores, {threads} threads, "
        f"{sockets} sockets in the coordinator (goal <= 0.2 cores)"
    )
    print(
        f"evacuate_200_lanes_s={evacuate_s:.1f} probe_cores_1k_clusters={cores:.2f} "
        f"coordinator_rss_mb_1m_partitions={rss:.0f} "
        f"start_s_1m_partitions={start_s:.1f} stream_list_page_ms_10k={max(prefix_ms, all_ms):.0f} "
        f"moves_per_orphan_50k_1k={moves:.2f} gateway_failover_vs_ours={GATEWAY_FAILOVER_S / evacuate_s:.0f}x"
    )


if __name__ == "__main__":
    main()
