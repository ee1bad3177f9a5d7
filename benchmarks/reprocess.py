"""Reprocessing (issue 38): how fast a running group goes back to a time, how fast a dlq redrive produces, and
Kafka's own way of going back, side by side in one run.

- `rewind_apply_s`: a group of 3 workers on a 64-partition stream that failed over once (2 generations, 128
  partitions to read again); from `group rewind --to-time` to the first record processed again on every
  partition. The workers keep running. Goal <= 2 s.
- `redrive_records_per_s`: `dlq redrive` of 100,000 rejected records (20,000 with --quick): read from the
  dlq lane, produced into realtime with their provenance, each batch completed in the commit log. Goal >=
  50,000/s. The run's process has its collector tuned as the command's has (`streamplane.process`).
- `redrive_vs_kafka_reset`: the peer is Kafka's own way on one cluster, on a real broker: stop the group (3
  confluent-kafka consumers with their default settings: the classic group protocol, as librdkafka's and
  Kafka's Java clients default to), run `kafka-consumer-groups.sh --reset-offsets --to-datetime
  --execute` (ConsumerGroupCommand, from Maven Central), start the group again; from the moment it is
  stopped to the first record consumed again on every partition. The figure is the peer's time to resume
  divided by ours (`rewind_apply_s`). Goal >= 5.

Each figure is the median of `--rounds` rounds (3; 1 with --quick), each round taking all three, ours and the
peer in turn, who goes first alternating: this machine's noise moves a single run's figures by 1.5x and more
both ways (the same redrive took 41,800 and 70,800 records a second, minutes apart), and the peer's restart
twofold. Every round's figures are printed before the medians. Our coordinator stays up while the peer runs,
idle (its workers closed), as the peer's broker stays up while ours does.

Ours runs on a real broker too (`--engine kafka`, the default) or on librdkafka's mock cluster (`--engine
mock`); the peer always needs a real broker. The last line is `rewind_apply_s=<x> redrive_records_per_s=<x>
redrive_vs_kafka_reset=<ratio>`.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from contextlib import nullcontext, suppress
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer as KafkaConsumer
from confluent_kafka import KafkaException
from confluent_kafka import Producer as KafkaProducer

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _local import coordinator_process, engine

from streamplane.client import Consumer, CoordinatorClient, Message, Producer
from streamplane.client.redrive import Redrive
from streamplane.log import configure_logging
from streamplane.model import Cluster, RewindTarget, RewindTo
from streamplane.process import tune_collector

PARTITIONS, WORKERS = 64, 3


def _wait(predicate: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.01)


def _cut() -> int:
    """A time later than every record written so far, and earlier than every one written after it."""
    at = int(time.time() * 1000) + 1
    _wait(lambda: time.time() * 1000 > at + 5, 5, "the clock")
    return at


class Seen:
    """What the workers processed: per value how often, and per partition when a record was first processed
    a second time."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.count: dict[bytes, int] = {}
        self.again: dict[str, float] = {}

    def handle(self, msg: Message) -> None:
        with self.lock:
            n = self.count.get(msg.value, 0) + 1
            self.count[msg.value] = n
            if n == 2 and msg.lease_id not in self.again:
                self.again[msg.lease_id] = time.monotonic()


def rewind_apply(address: str, produce_each: int) -> float:
    """Seconds from the rewind to the first record processed again on every partition (the slowest one)."""
    stream, group = f"rw-{uuid.uuid4().hex[:6]}", "rewound"
    with CoordinatorClient(address) as client:
        client.create_stream(stream, PARTITIONS, cluster="local")

    def produce(tag: str) -> None:
        with Producer(address, **{"linger.ms": 20}) as producer:
            for i in range(produce_each * PARTITIONS):
                producer.produce(stream, b"%s-%d" % (tag.encode(), i), key=b"%d" % i)
            if producer.flush(120):
                raise SystemExit("records left unacknowledged")

    produce("before")
    cut = _cut()
    produce("after")
    with CoordinatorClient(address) as client:
        client.failover(stream, "realtime", "local-b", reason="benchmark")
    produce("moved")
    seen = Seen()
    workers = [Consumer(address, group=group, stream=stream, worker_id=f"w{i}") for i in range(WORKERS)]
    threads = [threading.Thread(target=w.run, args=(seen.handle,), daemon=True) for w in workers]
    for t in threads:
        t.start()
    total = 3 * produce_each * PARTITIONS
    try:
        _wait(lambda: len(seen.count) == total, 180, f"{total} records processed")
        target = RewindTarget(RewindTo.TIME, time_ms=cut)
        with CoordinatorClient(address) as client:
            # committed too: a rewind counts what the commit log says was processed (the rest is read anyway);
            # lag alone can read 0 from a high watermark a worker reported before its last records came
            again = 2 * produce_each * PARTITIONS
            _wait(lambda: client.rewind_group(group, stream, target, dry_run=True).again == again, 30, "the commits")
            began = time.monotonic()
            done = client.rewind_group(group, stream, target)
            rpc_s = time.monotonic() - began
        partitions = len(done.positions)
        if partitions != 2 * PARTITIONS or done.again != 2 * produce_each * PARTITIONS:
            raise SystemExit(f"the rewind moved {partitions} partitions, {done.again} records: not all written after")
        _wait(lambda: len(seen.again) >= partitions, 60, f"every one of {partitions} partitions processed again")
        slowest = max(seen.again.values()) - began
        print(
            f"rewind: {partitions} partitions, {done.again:,} records again; the last began {slowest:.2f} s later "
            f"(the rewind's RPC {rpc_s:.2f} s)"
        )
        return slowest
    finally:
        for w in workers:
            w.close()


def redrive_rate(address: str, records: int) -> float:
    """Records a second a redrive of `records` rejects produces (claims, reads, produces and completes)."""
    stream, group = f"rd-{uuid.uuid4().hex[:6]}", "rejecting"
    with CoordinatorClient(address) as client:
        client.create_stream(stream, 16, cluster="local")
    with Producer(address, **{"linger.ms": 20}) as producer:
        for i in range(records):
            producer.produce(stream, b"r-%d" % i, key=b"%d" % i)
        if producer.flush(120):
            raise SystemExit("records left unacknowledged")

    def reject(msg: Message) -> None:
        msg.reject("benchmark: every record")

    worker = Consumer(address, group=group, stream=stream, lanes=("realtime",))
    thread = threading.Thread(target=worker.run, args=(reject,), daemon=True)
    thread.start()
    with CoordinatorClient(address) as client:

        def pending() -> int:
            return sum(x.dlq_pending for x in client.lag(group, stream, partitions=False).lanes)

        _wait(lambda: pending() == records, 600, f"{records} rejects recorded")
        worker.close()
        run = Redrive(client, stream, group)
        threshold = gc.get_threshold()
        tune_collector()  # as `streamplane dlq redrive` runs it; undone after, for the other figures
        try:
            began = time.perf_counter()
            report = run.run()
            took = time.perf_counter() - began
        finally:
            gc.unfreeze()
            gc.set_threshold(*threshold)
    if report.produced != records:
        raise SystemExit(f"the redrive produced {report.produced} of {records}")
    rate = records / took
    print(f"redrive: {records:,} records in {took:.2f} s ({rate:,.0f}/s), {report.batches} batches")
    return rate


def kafka_reset_resume(bootstrap: str, produce_each: int) -> float:
    """Kafka's own way, on one cluster: seconds from stopping the group to the first record consumed again on
    every partition, through kafka-consumer-groups.sh --reset-offsets --to-datetime and a restart."""
    from streamplane.coordinator.topology.cluster_admin import KafkaAdmin
    from streamplane.devstack.kafka import jar_dir, tools_jars

    topic, group = f"peer-{uuid.uuid4().hex[:6]}", f"peer-{uuid.uuid4().hex[:6]}"
    KafkaAdmin().ensure_topic(Cluster("peer", bootstrap), topic, PARTITIONS)
    producer = KafkaProducer({"bootstrap.servers": bootstrap, "linger.ms": 20})

    def produce(tag: str) -> None:
        for i in range(produce_each * PARTITIONS):
            producer.produce(topic, b"%s-%d" % (tag.encode(), i), key=b"%d" % i)
            producer.poll(0)
        if producer.flush(120):
            raise SystemExit("records left unacknowledged")

    produce("before")
    cut = _cut()
    produce("after")
    seen = Seen()
    stop = threading.Event()

    def consume(name: str) -> None:
        consumer = KafkaConsumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": True,
                "auto.commit.interval.ms": 100,
                "client.id": name,
            }
        )
        consumer.subscribe([topic])
        try:
            while not stop.is_set():
                for m in consumer.consume(1000, 0.1):
                    if m.error() is None:
                        with seen.lock:
                            n = seen.count.get(m.value(), 0) + 1
                            seen.count[m.value()] = n
                            lid = f"{m.partition()}"
                            if n == 2 and lid not in seen.again:
                                seen.again[lid] = time.monotonic()
            with suppress(KafkaException):  # nothing new to commit since the last auto-commit
                consumer.commit(asynchronous=False)
        finally:
            consumer.close()

    def start() -> list[threading.Thread]:
        threads = [threading.Thread(target=consume, args=(f"c{i}",), daemon=True) for i in range(WORKERS)]
        for t in threads:
            t.start()
        return threads

    threads = start()
    _wait(lambda: len(seen.count) == 2 * produce_each * PARTITIONS, 180, "the peer group to consume everything")
    began = time.monotonic()
    stop.set()
    for t in threads:
        t.join(60)
    when = datetime.fromtimestamp(cut / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3]
    lib, tools = jar_dir(), tools_jars()
    command = [
        "java", "-Xmx256m", "-XX:TieredStopAtLevel=1", "-cp", f"{tools}/*:{lib}/*",
        "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand", "--bootstrap-server", bootstrap,
        "--group", group, "--topic", topic, "--reset-offsets", "--to-datetime", when, "--execute",
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise SystemExit(f"kafka-consumer-groups --reset-offsets failed: {done.stderr.strip()[-500:]}")
    stop.clear()
    threads = start()
    try:
        _wait(lambda: len(seen.again) >= PARTITIONS, 120, "every partition consumed again by the peer")
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    resumed = max(seen.again.values()) - began
    print(f"kafka reset: stop, --reset-offsets --to-datetime, restart: the last partition began {resumed:.2f} s later")
    return resumed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer records (CI-sized)")
    parser.add_argument("--engine", choices=["mock", "kafka"], default="kafka", help="where ours runs")
    parser.add_argument("--rounds", type=int, default=None, help="rounds whose medians are the figures (3; 1 quick)")
    args = parser.parse_args()
    if args.rounds is not None and args.rounds < 1:
        parser.error(f"--rounds must be 1 or more, not {args.rounds}")
    configure_logging("warning")
    each = 50 if args.quick else 200
    rejects = 20_000 if args.quick else 100_000
    rounds = args.rounds if args.rounds is not None else (1 if args.quick else 3)
    rewinds: list[float] = []
    peers: list[float] = []
    rates: list[float] = []
    with (
        engine("kafka", heap_mb=1024) as broker,
        tempfile.TemporaryDirectory() as tmp,
        engine("mock") if args.engine == "mock" else nullcontext(broker) as ours,
        coordinator_process(tmp, ours.control) as address,
        CoordinatorClient(address) as client,
    ):
        ours.register(client)
        local = client.list_clusters()[0]
        client.register_cluster(
            Cluster("local-b", local.bootstrap_servers, admin=local.admin, control_endpoint=local.control_endpoint)
        )
        for r in range(rounds):
            if r % 2:
                peers.append(kafka_reset_resume(broker.bootstrap, each))
            rewinds.append(rewind_apply(address, each))
            if not r % 2:
                peers.append(kafka_reset_resume(broker.bootstrap, each))
            rates.append(redrive_rate(address, rejects))
            print(
                f"round {r + 1} of {rounds}: rewind {rewinds[-1]:.2f} s, Kafka's reset {peers[-1]:.2f} s "
                f"({peers[-1] / rewinds[-1]:.1f}x), redrive {rates[-1]:,.0f} records/s"
            )
    rewind_s, peer_s, rate = statistics.median(rewinds), statistics.median(peers), statistics.median(rates)
    of = f"medians of {rounds} rounds" if rounds > 1 else "one round"
    print(f"{of} (goals: rewind <= 2 s, redrive >= 50,000/s, >= 5x Kafka's reset)")
    print(
        f"rewind_apply_s={rewind_s:.2f} redrive_records_per_s={rate:.0f} redrive_vs_kafka_reset={peer_s / rewind_s:.1f}"
    )


if __name__ == "__main__":
    main()
