"""Cost per partition: one streamplane worker beside one confluent-kafka consumer on the same topic.

For each partition count (256, 1,024 and, without --quick, 4,096) on a real Apache Kafka broker (the
default when its jars can be had: what users run, with fetch sessions) or librdkafka's 3-broker mock cluster
(--engine mock, which has no fetch sessions and serves fetches slower than either client reads), and a
coordinator in its own process: the idle cost of each worker (threads, sockets, CPU cores, resident memory)
and of the coordinator, sessions lost; then records/s through each over the same records, one at a time: `run`
with a no-op handler on 4 threads against confluent-kafka's poll() loop, and `run_batches` against its
consume(num_messages=1000) loop, three times each, interleaved, the best run counting, with each one's peak
resident memory (from its start, through its join, to the end of its read). Each figure is printed beside its
peer's in one run.

    .venv/bin/python benchmarks/scale.py --quick                  # about 3 minutes
    .venv/bin/python benchmarks/scale.py --quick --engine mock    # the same on the mock cluster
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

from _local import coordinator_process, engine
from confluent_kafka import Producer as KafkaProducer

from streamplane.client import CoordinatorClient
from streamplane.devstack.kafka import ensure_jars
from streamplane.errors import UnavailableError
from streamplane.process import usage

WORKER = str(Path(__file__).with_name("_scale_worker.py"))
ROUNDS = 3


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

    def count(self) -> tuple[int, float, int | None]:
        """Records processed so far, the worker's monotonic clock when it read that count, and the leases it
        holds (None for a confluent-kafka consumer)."""
        assert self.proc.stdin is not None
        self.proc.stdin.write("count\n")
        self.proc.stdin.flush()
        answer = json.loads(self._line())
        return int(answer["count"]), float(answer["t"]), answer["leases"]

    def stop(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.write("stop\n")
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def idle_cost(pids: list[int], seconds: float) -> list[tuple[int, int, float, float]]:
    """(peak threads, peak sockets, cores, peak resident MiB) of each process over `seconds`."""
    start = [usage(p) for p in pids]
    peaks = [(u.threads, u.sockets, u.rss_kib) for u in start]
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        time.sleep(0.5)
        now = [usage(p) for p in pids]
        peaks = [
            (max(a, u.threads), max(b, u.sockets), max(m, u.rss_kib)) for (a, b, m), u in zip(peaks, now, strict=True)
        ]
    elapsed = time.monotonic() - t0
    end = [usage(p) for p in pids]
    return [(a, b, (e.cpu_s - s.cpu_s) / elapsed, m / 1024) for (a, b, m), s, e in zip(peaks, start, end, strict=True)]


def drain(worker: Worker, total: int, timeout: float, partitions: int) -> float:
    """Records/s of a worker in the steady middle of reading `total` records: from 10 % to 90 % of them, so
    neither joining a group nor a slow tail counts. A streamplane worker reads each partition as soon as its
    grant arrives, so its middle starts only once it holds all of them (else the count measures how fast
    grants arrive); when that is late, the middle runs on to the last record."""
    deadline = time.monotonic() + timeout
    t0 = t1 = 0.0
    n0 = n1 = 0
    while time.monotonic() < deadline:
        n, now, leases = worker.count()
        if not t0 and n >= total // 10 and leases in (None, partitions):
            t0, n0 = now, n
        if t0 and n >= (total * 9 // 10 if n0 < total * 7 // 10 else total):
            t1, n1 = now, n
            break
        time.sleep(0.02)
    return (n1 - n0) / max(1e-9, t1 - t0) if t1 else 0.0


def wait_granted(client: CoordinatorClient, group: str, n: int) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if sum(1 for x in client.describe_group(group).leases if x.state == "granted") == n:
            return
        time.sleep(0.5)
    raise SystemExit(f"{group}: not every one of {n} leases was granted within 120 s")


def produce(bootstrap: str, topic: str, partitions: int, records: int) -> None:
    # a queue that holds every record, so writing never waits on a broker still creating 1,000s of logs
    producer = KafkaProducer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 200,
            "acks": 1,
            "compression.type": "zstd",
            "queue.buffering.max.messages": records,
        }
    )
    value = b'{"level":"info","msg":"request served","status":200,"bytes":5120}'
    for i in range(records):
        while True:
            try:
                producer.produce(topic, value, partition=i % partitions)
                break
            except BufferError:  # librdkafka's queue is full: let it send
                producer.poll(0.05)
    left = producer.flush(120)
    if left:  # else every drain would wait out its 300 s for records that are not there, and look hung
        raise SystemExit(f"{left:,} of {records:,} records were not written to {topic} within 120 s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="256 and 1,024 partitions, shorter samples")
    parser.add_argument(
        "--engine",
        choices=["auto", "mock", "kafka"],
        default="auto",
        help="a real Apache Kafka broker from Maven Central (auto: when it can be had), or a 3-broker mock cluster",
    )
    args = parser.parse_args()
    if args.engine == "auto":
        try:
            ensure_jars()
            args.engine = "kafka"
        except UnavailableError as err:
            print(f"engine: mock, because {err.message}", flush=True)
            args.engine = "mock"
    counts = [256, 1024] if args.quick else [256, 1024, 4096]
    idle_s = 8.0 if args.quick else 30.0
    # enough records that the measured middle (10 % to 90 %) lasts half a second at three million records/s
    records = 2_000_000 if args.quick else 4_000_000
    results: dict[int, dict[str, float]] = {}
    with (
        engine(args.engine) as kafka,
        tempfile.TemporaryDirectory() as tmp,
        coordinator_process(tmp, kafka.control) as address,
        CoordinatorClient(address) as client,
    ):
        bootstrap = kafka.bootstrap
        kafka.register(client)
        print(f"engine: {args.engine} ({bootstrap})", flush=True)
        for n in counts:
            stream = f"scale{n}"
            client.create_stream(stream, n, cluster="local")
            topic = f"sp.{stream}.realtime.g1"
            print(f"\n{n} partitions: one streamplane worker and one confluent-kafka consumer, idle", flush=True)
            ours = Worker("streamplane", address, f"idle-{n}", stream)
            theirs = Worker("confluent", bootstrap, f"idle-ck-{n}", topic)
            wait_granted(client, f"idle-{n}", n)
            time.sleep(8.0)  # let the first fetches, commits and load reports settle
            before = {x.lease_id: x.epoch for x in client.describe_group(f"idle-{n}").leases}
            (ot, osk, oc, om), (tt, tsk, tc, tm), (_, _, cc, _) = idle_cost([ours.pid, theirs.pid, address.pid], idle_s)
            after = {x.lease_id: x.epoch for x in client.describe_group(f"idle-{n}").leases}
            lost = sum(1 for lid, e in after.items() if before.get(lid) != e)
            ours.stop()
            theirs.stop()
            print(f"  streamplane worker:  {ot:4d} threads {osk:4d} sockets {oc:.3f} cores {om:6.1f} MiB")
            print(f"  confluent consumer:  {tt:4d} threads {tsk:4d} sockets {tc:.3f} cores {tm:6.1f} MiB")
            print(f"  coordinator:         {cc:.3f} cores; sessions lost (leases regranted): {lost}")
            produce(bootstrap, topic, n, records)
            rates: dict[str, float] = {}
            memory: dict[str, float] = {}
            lost_loaded = 0
            for rep in range(ROUNDS):  # each side ROUNDS times, interleaved; the best of each counts (noisy hosts)
                for kind, target, name in (
                    ("streamplane", address, stream),
                    ("confluent", bootstrap, topic),
                    ("streamplane-batches", address, stream),
                    ("confluent-consume", bootstrap, topic),
                ):  # one at a time over the same records, each in a group of its own
                    group = f"{kind}-{n}-{rep}"
                    w = Worker(kind, target, group, name)
                    rates[kind] = max(rates.get(kind, 0.0), drain(w, records, 300, n))
                    memory[kind] = max(memory.get(kind, 0.0), usage(w.pid).peak_rss_kib / 1024)
                    if kind.startswith("streamplane"):  # a lease granted more than once: its session was lost
                        lost_loaded += sum(1 for x in client.describe_group(group).leases if x.epoch > 1)
                    w.stop()
            print(
                f"  load: streamplane run() {rates['streamplane']:,.0f} records/s, "
                f"confluent poll() {rates['confluent']:,.0f}; streamplane run_batches() "
                f"{rates['streamplane-batches']:,.0f}, confluent consume(1000) {rates['confluent-consume']:,.0f}; "
                f"leases regranted under load: {lost_loaded}",
                flush=True,
            )
            print(
                f"  peak resident memory under load: streamplane run() {memory['streamplane']:.0f} MiB, confluent "
                f"poll() {memory['confluent']:.0f}; streamplane run_batches() {memory['streamplane-batches']:.0f}, "
                f"confluent consume(1000) {memory['confluent-consume']:.0f}",
                flush=True,
            )
            results[n] = {
                "worker_cores": oc,
                "coordinator_cores": cc,
                "threads": ot,
                "rss": om,
                "rss_ratio": om / max(1.0, tm),
                "ratio": rates["streamplane"] / max(1.0, rates["confluent"]),
                "batches": rates["streamplane-batches"] / max(1.0, rates["confluent-consume"]),
                "lost": lost + lost_loaded,
            }
    k = results[1024]
    print(f"\nsessions lost (leases granted again), idle and under load: {sum(r['lost'] for r in results.values())}")
    print(
        f"\nidle_worker_cores_1k={k['worker_cores']:.3f} idle_coordinator_cores_1k={k['coordinator_cores']:.3f} "
        f"worker_threads_1k={int(k['threads'])} consume_1k_vs_confluent={k['ratio']:.2f} "
        f"batches_vs_confluent_consume={k['batches']:.2f} idle_worker_mib_1k={k['rss']:.0f} "
        f"idle_mib_vs_confluent_1k={k['rss_ratio']:.1f}"
    )


if __name__ == "__main__":
    main()
