"""The commit log under load: out-of-order per-record acks from 4 workers, commit latency, storage size.

A real coordinator process (embedded store, gRPC server) and 4 worker sessions, each holding its own lease. Each
worker acks offsets in a shuffled order inside windows of 10,000 and sends them in batched commits, as
acked bitmaps (what the client does every ~100 ms). Then the storage of a
million offsets acked every other one first, before and after the gaps are filled.
acks_per_s is the saturation throughput (workers committing back to back); commit_p99_ms the latency at
the goal's load (4 workers x 2,500 acks every 100 ms = 100,000 acks/s).
The last line is `acks_per_s=<n> commit_p99_ms=<n>`. Goals: >= 100,000 acks/s, p99 <= 10 ms.
`--quick` runs in under 45 s.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _local import local_cluster

from streamplane.client import CoordinatorClient, WorkerSession
from streamplane.coordinator import keys
from streamplane.coordinator.commitlog import log as cl
from streamplane.coordinator.store import Database, StoreConfig, open_store
from streamplane.log import configure_logging
from streamplane.model import ADMIN_LOCAL, Cluster, Commit, LeaseCommit

WINDOW = 10_000
BATCH = 2_500  # acks per commit: 25k acks/s per worker at one commit per 100 ms


def requests_for(lease: str, epoch: int, count: int, seed: int) -> list[LeaseCommit]:
    """`count` commits of BATCH acks each, shuffled within windows of WINDOW offsets, sent as acked bitmaps
    (the dense form for scattered acks: 1,250 bytes a commit instead of ~2,000 ranges)."""
    rng = random.Random(seed)
    out: list[LeaseCommit] = []
    base = 0
    while len(out) < count:
        window = list(range(base, base + WINDOW))
        rng.shuffle(window)
        for i in range(0, WINDOW, BATCH):
            bits = bytearray(WINDOW // 8)
            for o in window[i : i + BATCH]:
                bits[(o - base) >> 3] |= 1 << ((o - base) & 7)
            out.append(
                LeaseCommit(
                    lease,
                    epoch,
                    Commit(
                        acked_bitmap=bytes(bits),
                        acked_bitmap_base=base,
                        high_watermark=base + WINDOW,
                        oldest_pending_ts_ms=1,
                    ),
                )
            )
        base += WINDOW
    return out[:count]


def worker(
    address: str,
    requests: list[LeaseCommit],
    seconds: float,
    latencies: list[float],
    acked: list[int],
    interval_s: float,
    phase_s: float,
) -> None:
    """Send the commits back to back (interval 0), or one every `interval_s` starting after `phase_s`."""
    deadline = time.monotonic() + seconds
    next_at = time.monotonic() + phase_s
    with CoordinatorClient(address) as client:
        for request in requests:
            if interval_s:
                time.sleep(max(0.0, next_at - time.monotonic()))
                next_at += interval_s
            started = time.perf_counter()
            client.commit("bench", request)
            latencies.append((time.perf_counter() - started) * 1000)
            acked.append(BATCH)
            if time.monotonic() >= deadline:
                return


def load(seconds: float, interval_s: float) -> tuple[float, list[float]]:
    """The load run against a coordinator in its own process (clients here), as in production."""
    with local_cluster() as (bootstrap, control), tempfile.TemporaryDirectory() as tmp:
        coordinator = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "streamplane.cli.main",
                "coordinator",
                "--port",
                "0",
                "--data-dir",
                tmp,
                "--allow-control-endpoint",
                control.endpoint,
            ],
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "STREAMPLANE_LOG_LEVEL": "warning"},
        )
        try:
            line = coordinator.stdout.readline() if coordinator.stdout else ""
            if "coordinator=" not in line:
                raise SystemExit("the coordinator did not start")
            address = line.split("coordinator=")[1].split()[0]
            return _load(address, bootstrap, control, seconds, interval_s)
        finally:
            coordinator.terminate()
            coordinator.wait(timeout=10)


def _load(address: str, bootstrap: str, control, seconds: float, interval_s: float) -> tuple[float, list[float]]:
    with CoordinatorClient(address) as client:
        client.register_cluster(
            Cluster(name="c", bootstrap_servers=bootstrap, control_endpoint=control.endpoint, admin=ADMIN_LOCAL)
        )
        client.create_stream("events", 4)
    sessions = [
        WorkerSession(address, group="bench", worker_id=f"w{i}", subscriptions={"events": []}) for i in range(4)
    ]
    for s in sessions:
        s.join()
        threading.Thread(target=lambda s=s: [None for _ in s.events()], daemon=True).start()
    deadline = time.monotonic() + 15
    while any(len(s.leases) != 1 for s in sessions):
        if time.monotonic() > deadline:
            raise SystemExit("the 4 workers did not get one lease each")
        time.sleep(0.02)
    latencies: list[float] = []
    acked: list[int] = []
    count = (
        int(seconds / interval_s) + 1 if interval_s else int(seconds * 40)
    )  # back to back: about what the coordinator takes
    work = [
        (requests_for(lid, grant.epoch, count, i), i) for i, s in enumerate(sessions) for lid, grant in s.leases.items()
    ]
    # paced workers are spread over the interval, as independent clients are
    threads = [
        threading.Thread(
            target=worker, args=(address, requests, seconds, latencies, acked, interval_s, i * interval_s / len(work))
        )
        for requests, i in work
    ]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - started
    for s in sessions:
        s.close()
    return sum(acked) / elapsed, latencies


def storage_bytes(db: Database) -> tuple[int, int]:
    """Keys and bytes the commit log holds for the benchmark's partition."""
    pk = ("scatter", "events", "realtime", 1, 0)

    def measure(tr) -> tuple[int, int]:
        n = size = 0
        for sub in (keys.PROGRESS, keys.DONE, keys.RETRIES, keys.REJECTS):
            r = sub.range(pk) if sub is not keys.PROGRESS else None
            rows = tr.get_range(r.start, r.stop) if r else [(keys.PROGRESS.pack(pk), tr.get(keys.PROGRESS.pack(pk)))]
            for k, v in rows:
                if v is not None:
                    n += 1
                    size += len(k) + len(v)
        return n, size

    return db.transact(measure)


def scattered() -> tuple[tuple[int, int], tuple[int, int], float]:
    """1M offsets, every other one acked first: storage then, and after the gaps are filled."""
    import time as _t

    from streamplane.coordinator.groups import leases
    from streamplane.coordinator.groups import state as group_state
    from streamplane.coordinator.topology.cluster_admin import RoutingAdmin
    from streamplane.coordinator.topology.topology import Topology

    with local_cluster() as (bootstrap, control), tempfile.TemporaryDirectory() as tmp:
        db = open_store(StoreConfig(driver="embedded", data_dir=Path(tmp)))
        topology = Topology(db, RoutingAdmin(), control_endpoints=[control.endpoint])
        topology.register_cluster(Cluster("c", bootstrap, admin=ADMIN_LOCAL, control_endpoint=control.endpoint))
        topology.create_stream("events", 1, "c")
        now = int(_t.time() * 1000)
        leases.join(
            db,
            "scatter",
            "w",
            "s",
            [leases.Subscription("events")],
            capacity=1,
            max_load=0,
            now_ms=now,
            ttl_ms=3_600_000,
        )
        group_state.apply_assignment(db, "scatter", now_ms=now, revoke_ms=1000)
        n = 1_000_000
        started = _t.perf_counter()
        for parity in (1, 0):
            for i in range(parity, n, 40_000):
                batch = [(o, o + 1) for o in range(i, min(n, i + 40_000), 2)]
                cl.commit(
                    db, "scatter", "events/realtime/g1/p0", 1, cl.Commit(acked=batch, high_watermark=n), now_ms=now
                )
            if parity == 1:
                before = storage_bytes(db)
        elapsed = _t.perf_counter() - started
        after = storage_bytes(db)
        db.close()
    return before, after, elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a 10 s load run (under 45 s in all)")
    args = parser.parse_args()
    configure_logging("warning")
    seconds = 8 if args.quick else 30
    rate, busy = load(seconds, 0.0)
    print(
        f"saturation: 4 workers committing back to back, acks shuffled in windows of {WINDOW:,}, {BATCH:,} per "
        f"commit: {rate:,.0f} acks/s (commit p50 {statistics.median(busy):.1f} ms under that queue)",
        flush=True,
    )
    paced_rate, latencies = load(seconds, 0.1)
    p50 = statistics.median(latencies)
    p99 = statistics.quantiles(latencies, n=100)[98]
    print(
        f"at the goal's load: 4 workers each committing {BATCH:,} acks every 100 ms ({paced_rate:,.0f} acks/s): "
        f"commit latency p50 {p50:.2f} ms, p99 {p99:.2f} ms over {len(latencies):,} commits",
        flush=True,
    )
    before, after, seconds = scattered()
    print(
        f"1,000,000 offsets acked every other one first ({seconds:.1f} s for 1M acks in 50 commits): "
        f"{before[0]} keys / {before[1] / 1024:,.0f} KiB before the gaps are filled, "
        f"{after[0]} key(s) / {after[1]} bytes after"
    )
    print(f"goals: {rate / 100_000:.1f}x of 100,000 acks/s; p99 {p99:.2f} ms (<= 10 ms)")
    print(f"acks_per_s={rate:.0f} commit_p99_ms={p99:.2f}")


if __name__ == "__main__":
    main()
