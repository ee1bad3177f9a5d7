"""Embedded store throughput and watch propagation latency.

Measures, on the embedded driver:
- single-key read-modify-write transactions/s with 1 and with 16 concurrent clients (threads);
- the latency from a committed topology change to a WatchTopology client (real gRPC server) receiving it.

Goals (issue 2): >= 5,000 transactions/s and watch p99 <= 50 ms. The last line is
`store_txn_per_s=<n> watch_p99_ms=<n>`, where store_txn_per_s is the lower of the two client counts.
`--quick` runs in well under 45 s.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from streamplane.client.coordinator import CoordinatorClient
from streamplane.coordinator.rpc import server
from streamplane.coordinator.store import StoreConfig, Transaction, open_store
from streamplane.coordinator.topology.topology import Topology
from streamplane.log import configure_logging
from streamplane.model import Cluster


def rmw_throughput(data_dir: Path, clients: int, seconds: float) -> float:
    """Transactions/s of `clients` threads each incrementing its own key with get + set."""
    db = open_store(StoreConfig(driver="embedded", data_dir=data_dir))
    done = [0] * clients
    stop = threading.Event()

    def worker(n: int) -> None:
        key = b"bench/%d" % n

        def body(tr: Transaction) -> None:
            tr.set(key, b"%d" % (int(tr.get(key) or b"0") + 1))

        while not stop.is_set():
            db.transact(body)
            done[n] += 1

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(clients)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - started
    total = sum(int(db.transact(lambda tr, n=n: tr.get(b"bench/%d" % n))) for n in range(clients))
    db.close()
    assert total == sum(done), "lost increments"
    return total / elapsed


def watch_latency_ms(data_dir: Path, changes: int) -> list[float]:
    """Commit `changes` topology changes; return commit-to-delivery latencies of a WatchTopology client, in ms."""
    db = open_store(StoreConfig(driver="embedded", data_dir=data_dir))
    running = server.start(db)
    topology = Topology(db, admin=None)  # type: ignore[arg-type] - cluster registration creates no topics
    committed_at: dict[str, float] = {}
    latencies: list[float] = []
    all_seen = threading.Event()

    def follow() -> None:
        with CoordinatorClient(running.address) as client:
            for event in client.watch_topology(""):
                name = event.cluster_registered.name
                latencies.append((time.perf_counter() - committed_at[name]) * 1000)
                if len(latencies) == changes:
                    all_seen.set()
                    return

    # The watcher must be connected before the first change; it receives the change committed after it joins.
    topology.register_cluster(Cluster("warmup", "h:1"))
    committed_at["warmup"] = time.perf_counter()
    changes += 1
    threading.Thread(target=follow, daemon=True).start()
    time.sleep(0.5)
    for i in range(changes - 1):
        name = f"c{i}"
        # set before commit so the watcher never sees an event without its timestamp; fixed up right after
        committed_at[name] = time.perf_counter()
        topology.register_cluster(Cluster(name, "h:1"))
        committed_at[name] = time.perf_counter()
        time.sleep(0.005)
    if not all_seen.wait(30):
        raise SystemExit(f"the watcher received {len(latencies)} of {changes} events")
    running.stop(0)
    return latencies[1:]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="short run (under 45 s)")
    args = parser.parse_args()
    configure_logging("warning")
    seconds, changes = (3.0, 300) if args.quick else (10.0, 2000)
    with tempfile.TemporaryDirectory() as tmp:
        one = rmw_throughput(Path(tmp) / "one", 1, seconds)
        print(f"embedded store, 1 client:   {one:10,.0f} read-modify-write txn/s", flush=True)
        many = rmw_throughput(Path(tmp) / "many", 16, seconds)
        print(f"embedded store, 16 clients: {many:10,.0f} read-modify-write txn/s", flush=True)
        lat = watch_latency_ms(Path(tmp) / "watch", changes)
    p50, p99 = statistics.median(lat), percentile(lat, 0.99)
    print(
        f"watch propagation over gRPC ({len(lat)} changes): p50 {p50:.2f} ms, p99 {p99:.2f} ms, max {max(lat):.2f} ms"
    )
    txn = min(one, many)
    print(f"vs goals: txn/s {txn / 5000:.1f}x of 5,000; watch p99 {50 / p99:.1f}x under 50 ms")
    print(f"store_txn_per_s={txn:.0f} watch_p99_ms={p99:.2f}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
