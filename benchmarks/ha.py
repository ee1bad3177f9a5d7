"""The highly available control plane, measured: coordinator replicas on PostgreSQL killed under load.

Two parts, in one run:

1. A `streamplane dev --store postgres --replicas 3` stack (mock engine), a producer writing about 1,000 records
   a second and a group of 3 workers on a 12-partition stream. The replica leading the sealer and the autopilot
   is killed (-9) once: `leader_takeover_s` is the time until another replica leads. Then, KILLS times, the
   replica serving most of the workers' sessions is killed. For each kill:
   - `replica_kill_resume` is the time from the kill to the first record processed again on every lease (the
     data path does not go through the coordinator, so records keep flowing);
   - `commit_resume` is the time until every lease's committed progress moved past where it was at the kill
     (the workers' sessions resumed on a live replica and their commits were accepted again).
   At the end every acknowledged record must have been processed (`lost`) and no partition may have had two
   holders processing at once (`double_holders`).
   The peers: a Kafka group member's death is noticed after KIP-848's 45 s minimum session; PostHog's
   kafka-assigner's etcd leases last 30 s.
2. The commit log's batched commits (64 leases a call, 4 committers) straight on the store: PostgreSQL (a
   throwaway server) against the embedded store, the same code path, back to back.

The last line is `replica_kill_resume_p99_s=<x> leader_takeover_s=<x> lost=<n> double_holders=<n>
pg_commit_p99_ms=<x> pg_vs_embedded_commits=<ratio> commit_resume_p99_s=<x> vs_kip848_session=<45 s / commit
resume>`. Goals: resume <= 2 s, lost and
double_holders 0, pg_vs_embedded_commits >= 0.5. `--quick` runs 4 kills and 5 s of commits per store.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import defaultdict
from pathlib import Path
from typing import Any

from streamplane.client import Consumer, CoordinatorClient, Producer
from streamplane.clock import SYSTEM
from streamplane.coordinator.commitlog import log as commitlog
from streamplane.coordinator.groups import leadership, leases
from streamplane.coordinator.store import Database, StoreConfig, open_store
from streamplane.coordinator.topology.topology import Topology
from streamplane.devstack.postgres import PostgresServer
from streamplane.model import Cluster, Commit, PartitionRef
from streamplane.testing.cluster_admin import MemoryClusterAdmin

STREAM, GROUP, PARTITIONS = "ha", "ha-bench", 12
KIP848_SESSION_S = 45.0
"""The peer: a Kafka group member's death is noticed after KIP-848's minimum session timeout."""
COMMIT_LEASES, COMMITTERS, PER_CALL = 256, 4, 64


def p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] if ordered else float("nan")


# -- part 1: replicas killed under load ----------------------------------------------------------------------


class Stack:
    """`streamplane dev --store postgres --replicas 3` in a temporary data dir."""

    def __init__(self, data: Path) -> None:
        self.data = data
        self.proc = subprocess.Popen(
            [
                sys.executable, "-m", "streamplane.cli.main", "dev", "--store", "postgres", "--replicas", "3",
                "--clusters", "1", "--port", "0", "--data-dir", str(data), "--console-port", "-1",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env={**os.environ, "STREAMPLANE_LOG_LEVEL": "error"},
        )  # fmt: skip
        fields: dict[str, str] = {}
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            for part in line.split():
                if "=" in part:
                    fields.setdefault(*part.split("=", 1))
            if line.startswith("ready"):
                break
        else:
            raise SystemExit("the dev stack did not start")
        self.address, self.url, self.control = fields["coordinator"], fields["postgres"], fields["control"]

    def call(self, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        request = urllib.request.Request(
            f"http://{self.control}{path}", data=json.dumps(body or {}).encode(), method="POST"
        )
        with urllib.request.urlopen(request, timeout=60) as answer:
            return dict(json.loads(answer.read()))

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=60)


class Log:
    """(value, lease, epoch, time) of every processing."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.rows: list[tuple[bytes, str, int, float]] = []

    def handle(self, msg: Any) -> None:
        with self.lock:
            self.rows.append((msg.value, msg.lease_id, msg.epoch, time.monotonic()))

    def double_holders(self) -> int:
        windows: dict[str, dict[int, list[float]]] = defaultdict(dict)
        with self.lock:
            for _, lease, epoch, at in self.rows:
                w = windows[lease].setdefault(epoch, [at, at])
                w[0], w[1] = min(w[0], at), max(w[1], at)
        return sum(
            1
            for by_epoch in windows.values()
            for (_, (_, end1)), (_, (start2, _)) in itertools.pairwise(sorted(by_epoch.items()))
            if end1 >= start2
        )

    def first_after(self, t0: float) -> dict[str, float]:
        """Per lease, the first processing after `t0`."""
        out: dict[str, float] = {}
        with self.lock:
            for _, lease, _, at in self.rows:
                if at > t0 and (lease not in out or at < out[lease]):
                    out[lease] = at
        return out


def wait(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out: {what}")
        time.sleep(0.02)


def replicas_under_load(kills: int) -> tuple[list[float], list[float], float, int, int]:
    with tempfile.TemporaryDirectory(prefix="streamplane-ha-") as tmp:
        stack = Stack(Path(tmp) / "dev")
        store = open_store(StoreConfig.from_env(Path(tmp), stack.url))
        try:
            return _under_load(stack, store, kills)
        finally:
            store.close()
            stack.stop()


def _under_load(stack: Stack, store: Database, kills: int) -> tuple[list[float], list[float], float, int, int]:
    with CoordinatorClient(stack.address) as client:
        client.create_stream(STREAM, PARTITIONS)
    log, stop, acked, lock = Log(), threading.Event(), set(), threading.Lock()
    stop_producing = threading.Event()

    def delivered(err: Any, msg: Any) -> None:
        if err is None:
            with lock:
                acked.add(msg.value())

    def produce() -> None:
        with Producer(stack.address, **{"linger.ms": 5}) as producer:
            for i in itertools.count():
                if stop_producing.is_set():
                    break
                producer.produce(STREAM, b"%d" % i, key=b"%d" % i, on_delivery=delivered)
                if i % 50 == 49:
                    time.sleep(0.05)
            producer.flush(60)

    consumers = [Consumer(stack.address, group=GROUP, stream=STREAM, commit_interval_s=0.05) for _ in range(3)]
    threads = [
        threading.Thread(target=c.run, args=(log.handle,), kwargs={"stop": stop}, daemon=True) for c in consumers
    ]
    threads.append(threading.Thread(target=produce, daemon=True))
    for t in threads:
        t.start()

    def committed() -> dict[str, int]:
        with CoordinatorClient(stack.address) as client:
            return {p.lease_id: p.low_watermark for p in client.lag(GROUP).partitions}

    def replica_ids() -> dict[str, int]:
        return {r["replica_id"]: r["replica"] for r in stack.call("/state")["replicas"]}

    try:
        wait(lambda: len(log.first_after(0)) == PARTITIONS, 60, "every lease processing")
        wait(lambda: len(committed()) == PARTITIONS, 60, "every lease committing")
        # the leader of the sealer and the autopilot
        dead = store.transact(leadership.leader)
        t0 = time.monotonic()
        stack.call("/coordinator/kill", {"leader": True})
        wait(lambda: store.transact(leadership.leader) not in ("", dead), 30, "a new leader")
        takeover = time.monotonic() - t0
        print(f"leader takeover after kill -9: {takeover:.2f} s", flush=True)
        resumes, commits = [], []
        for k in range(kills):
            members = store.transact(lambda tr: leases.read_members(tr, GROUP)).values()
            busiest, number = max(replica_ids().items(), key=lambda r: sum(m.replica == r[0] for m in members))
            served = sum(m.replica == busiest for m in members)
            before, killed_at = committed(), time.monotonic()
            stack.call("/coordinator/kill", {"replica": number})
            wait(lambda t=killed_at: len(log.first_after(t)) == PARTITIONS, 60, "processing on every lease")
            resumes.append(max(log.first_after(killed_at).values()) - killed_at)
            wait(
                lambda b=before: all(low > b.get(lid, -1) for lid, low in committed().items()),
                60,
                "commits on every lease",
            )
            commits.append(time.monotonic() - killed_at)
            print(
                f"kill {k + 1}: replica {number} (the sessions of {served} workers): processing on every lease "
                f"after {resumes[-1]:.3f} s, commits after {commits[-1]:.2f} s",
                flush=True,
            )
        stop_producing.set()
        threads[-1].join(90)
        wait(lambda: acked <= {r[0] for r in log.rows}, 90, "every acknowledged record processed")
        lost = len(acked - {r[0] for r in log.rows})
        return resumes, commits, takeover, lost, log.double_holders()
    finally:
        stop.set()
        for c in consumers:
            c.close()


# -- part 2: the commit log on PostgreSQL against the embedded store ------------------------------------------


def commits_per_s(db: Database, seconds: float) -> tuple[float, list[float]]:
    """Batched commits (PER_CALL leases a call) from COMMITTERS threads for `seconds`: leases a second and the
    latency of each call."""
    topology = Topology(db, MemoryClusterAdmin(), SYSTEM)
    topology.register_cluster(Cluster("c", "c:9092"))
    topology.create_stream("bench", COMMIT_LEASES, "c")
    lids = [PartitionRef("bench", "realtime", 1, p).lease_id for p in range(COMMIT_LEASES)]
    latencies: list[float] = []
    done = [0]
    lock = threading.Lock()
    deadline = time.monotonic() + seconds

    def committer(mine: list[str]) -> None:
        for offset in itertools.count(1):
            if time.monotonic() >= deadline:
                return
            for i in range(0, len(mine), PER_CALL):
                calls = [
                    (lid, 0, Commit(acked=[(0, offset * 10)], high_watermark=offset * 10))
                    for lid in mine[i : i + PER_CALL]
                ]
                began = time.perf_counter()
                commitlog.commit_many(db, "bench-group", calls, now_ms=SYSTEM.now_ms())
                with lock:
                    latencies.append((time.perf_counter() - began) * 1000)
                    done[0] += len(calls)

    share = COMMIT_LEASES // COMMITTERS
    threads = [threading.Thread(target=committer, args=(lids[i * share : (i + 1) * share],)) for i in range(COMMITTERS)]
    began = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return done[0] / (time.monotonic() - began), latencies


def pg_against_embedded(seconds: float) -> tuple[float, float, float]:
    with tempfile.TemporaryDirectory(prefix="streamplane-ha-store-") as tmp:
        os.chmod(tmp, 0o755)  # PostgreSQL may run as another user
        embedded = open_store(StoreConfig(driver="embedded", data_dir=Path(tmp) / "embedded"))
        try:
            embedded_rate, embedded_ms = commits_per_s(embedded, seconds)
        finally:
            embedded.close()
        server = PostgresServer(Path(tmp) / "pg").start()
        try:
            pg = open_store(StoreConfig.from_env(Path(tmp), server.ensure_database("bench")))
            try:
                pg_rate, pg_ms = commits_per_s(pg, seconds)
            finally:
                pg.close()
        finally:
            server.stop("immediate")
    print(
        f"batched commits ({PER_CALL} leases a call, {COMMITTERS} committers): embedded {embedded_rate:.0f} leases/s "
        f"(p99 {p99(embedded_ms):.1f} ms a call), PostgreSQL {pg_rate:.0f} leases/s (p99 {p99(pg_ms):.1f} ms a call)",
        flush=True,
    )
    return pg_rate / embedded_rate, p99(pg_ms), pg_rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="4 kills and 5 s of commits per store")
    args = parser.parse_args()
    kills, seconds = (4, 5.0) if args.quick else (10, 20.0)
    ratio, pg_p99, _ = pg_against_embedded(seconds)
    resumes, commits, takeover, lost, double = replicas_under_load(kills)
    print(
        f"over {kills} kills: processing resumed on every lease p50 {statistics.median(resumes):.3f} s, "
        f"commits p50 {statistics.median(commits):.2f} s; peers notice a dead member after 30 s (etcd leases) to "
        "45 s (KIP-848's minimum session)"
    )
    print(
        f"replica_kill_resume_p99_s={p99(resumes):.3f} leader_takeover_s={takeover:.2f} lost={lost} "
        f"double_holders={double} pg_commit_p99_ms={pg_p99:.1f} pg_vs_embedded_commits={ratio:.2f} "
        f"commit_resume_p99_s={p99(commits):.2f} vs_kip848_session={KIP848_SESSION_S / p99(commits):.0f}x"
    )


if __name__ == "__main__":
    main()
