"""Cost per partition: one streamplane worker beside one confluent-kafka consumer on the same topic.

For each partition count (256, 1,024 and, without --quick, 4,096) on a local 3-broker cluster and a
coordinator in its own process: the idle cost of each worker (threads, sockets, CPU cores) and of the
coordinator, sessions lost, then records/s through each over the same records (a no-op handler on 4
threads against confluent-kafka's poll() loop). Each figure is printed beside its peer's in one run.

    .venv/bin/python benchmarks/scale.py --quick     # under 3 minutes
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _local import coordinator_process, local_cluster, register_local
from confluent_kafka import Producer as KafkaProducer

from streamplane.client import CoordinatorClient
from streamplane.process import usage

WORKER = str(Path(__file__).with_name("_scale_worker.py"))


class Worker:
    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, WORKER, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        self.pid = json.loads(self._line())["pid"]

    def _line(self) -> str:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit(f"a worker ({self.proc.args}) exited early")
        return line

    def count(self) -> int:
        assert self.proc.stdin is not None
        self.proc.stdin.write("count\n")
        self.proc.stdin.flush()
        return int(json.loads(self._line())["count"])

    def stop(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.write("stop\n")
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def idle_cost(pids: list[int], seconds: float) -> list[tuple[int, int, float]]:
    """(peak threads, peak sockets, cores) of each process over `seconds`."""
    start = [usage(p) for p in pids]
    peaks = [(u.threads, u.sockets) for u in start]
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        time.sleep(0.5)
        now = [usage(p) for p in pids]
        peaks = [(max(a, u.threads), max(b, u.sockets)) for (a, b), u in zip(peaks, now, strict=True)]
    elapsed = time.monotonic() - t0
    end = [usage(p) for p in pids]
    return [(a, b, (e.cpu_s - s.cpu_s) / elapsed) for (a, b), s, e in zip(peaks, start, end, strict=True)]


def drain(workers: list[Worker], total: int, timeout: float) -> list[float]:
    """Records/s of each worker, side by side, from its first record until it has processed `total`."""
    deadline = time.monotonic() + timeout
    first: list[float | None] = [None] * len(workers)
    done: list[float | None] = [None] * len(workers)
    counts = [0] * len(workers)
    while time.monotonic() < deadline and not all(done):
        for i, w in enumerate(workers):
            if done[i] is not None:
                continue
            counts[i] = w.count()
            now = time.monotonic()
            if counts[i] and first[i] is None:
                first[i] = now
            if counts[i] >= total:
                done[i] = now
        time.sleep(0.05)
    end = time.monotonic()
    return [c / max(1e-9, (d or end) - (f or end)) for c, f, d in zip(counts, first, done, strict=True)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="256 and 1,024 partitions, shorter samples")
    args = parser.parse_args()
    counts = [256, 1024] if args.quick else [256, 1024, 4096]
    idle_s = 8.0 if args.quick else 30.0
    records = 200_000 if args.quick else 1_000_000
    results: dict[int, dict[str, float]] = {}
    with (
        local_cluster(3) as (bootstrap, control),
        tempfile.TemporaryDirectory() as tmp,
        coordinator_process(tmp) as address,
        CoordinatorClient(address) as client,
    ):
        register_local(client, bootstrap, control, "local")
        for n in counts:
            stream = f"scale{n}"
            client.create_stream(stream, n, cluster="local")
            topic = f"sp.{stream}.realtime.g1"
            print(f"\n{n} partitions: starting one streamplane worker and one confluent-kafka consumer", flush=True)
            ours = Worker("streamplane", address, f"sp-{n}", stream)
            theirs = Worker("confluent", bootstrap, f"ck-{n}", topic)
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                held = sum(1 for x in client.describe_group(f"sp-{n}").leases if x.state == "granted")
                if held == n:
                    break
                time.sleep(0.5)
            time.sleep(3.0)
            before = {x.lease_id: x.epoch for x in client.describe_group(f"sp-{n}").leases}
            (ot, osk, oc), (tt, tsk, tc), (_, _, cc) = idle_cost([ours.pid, theirs.pid, address.pid], idle_s)
            after = {x.lease_id: x.epoch for x in client.describe_group(f"sp-{n}").leases}
            lost = sum(1 for lid, e in after.items() if before.get(lid) != e)
            print(f"  idle streamplane worker:  {ot:4d} threads {osk:4d} sockets {oc:.3f} cores")
            print(f"  idle confluent consumer:  {tt:4d} threads {tsk:4d} sockets {tc:.3f} cores")
            print(f"  idle coordinator:         {cc:.3f} cores; leases regranted while idle: {lost}")
            producer = KafkaProducer(
                {"bootstrap.servers": bootstrap, "linger.ms": 50, "compression.type": "zstd"}
            )
            value = b'{"level":"info","msg":"request served","status":200,"bytes":5120}'
            for i in range(records):
                producer.produce(topic, value, partition=i % n)
                if i % 50_000 == 0:
                    producer.poll(0)
            producer.flush(60)
            ours_rate = drain(ours, records, 120)
            theirs_rate = drain(theirs, records, 120)
            print(f"  load: streamplane run() {ours_rate:,.0f} records/s, confluent poll() {theirs_rate:,.0f}")
            ours.stop()
            theirs.stop()
            results[n] = {
                "worker_cores": oc,
                "coordinator_cores": cc,
                "threads": ot,
                "ratio": ours_rate / max(1.0, theirs_rate),
                "lost": lost,
            }
    k = results[1024]
    print(
        "\nrun_batches() does not exist yet: batches_vs_confluent_consume is n/a (see the issue's note)"
        f"\nidle_worker_cores_1k={k['worker_cores']:.3f} idle_coordinator_cores_1k={k['coordinator_cores']:.3f} "
        f"worker_threads_1k={int(k['threads'])} consume_1k_vs_confluent={k['ratio']:.2f} "
        "batches_vs_confluent_consume=n/a"
    )


if __name__ == "__main__":
    main()
