"""Our client beside Kafka's own answers to the same jobs, on the same real Apache Kafka broker (KRaft, its
own JVM), in one run:

- share groups (KIP-932): confluent-kafka's ShareConsumer acknowledging every record explicitly, against our
  Consumer acknowledging every record (`msg.ack()`), both reading the same number of preloaded records:
  records/s from the first to the last acknowledgement;
- redelivery after kill -9: a worker holds records it received without finishing them, a second one
  processes everything else; the first is killed with SIGKILL; the time until the second has processed every
  record the first held (a share group waits for the records' acquisition locks, or the member's session, to
  run out; we regrant the killed worker's leases and the new holder reads from the low watermark);
- 0.1% poison records: a share consumer releases each one for redelivery until the group's delivery limit (5)
  archives it (it is then gone), against our handler raising, retried up to the same 5 attempts, then copied to
  the stream's dlq lane with its reason; the time until every good record is processed and every poison record
  ended, and where the poison records are afterwards;
- regrant after kill -9: three worker processes read a topic under steady traffic; the one holding the most
  partitions is killed with SIGKILL; the time until every one of its partitions is read again elsewhere.
  Kafka's classic group protocol at its lowest allowed session timeout (6 s, the broker's
  group.min.session.timeout.ms) and, without --quick, at its default (45 s); the KIP-848 protocol
  (group.protocol=consumer) at the broker's session timeout (45 s, which is also the lowest it allows by
  default; skipped with --quick); and our Assigner.

- Spark's own Kafka source (spark-sql-kafka-0-10 at the installed PySpark's version, fetched with Maven)
  against `format("streamplane")`: the same preloaded records of one topic, one availableNow query each into
  `noop` on local[2], rows/s over the time Spark spent in the batches (the best of the rounds).

Last line: `share_group_vs_streamplane=<ours / theirs, records/s> regrant_vs_classic=<theirs / ours, seconds>
regrant_vs_kip848=<theirs / ours, seconds, or n/a> spark_vs_kafka_source=<ours / theirs, rows/s>
redelivery_vs_share_group=<theirs / ours, seconds>`; above 1 means we are ahead.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _local import cleaned_up_on_sigterm, coordinator_process

from streamplane import model
from streamplane.client import Consumer, CoordinatorClient, Message, Producer
from streamplane.coordinator.topology.cluster_admin import KafkaAdmin
from streamplane.devstack.kafka import KafkaBroker
from streamplane.errors import UnavailableError
from streamplane.log import configure_logging

PARTITIONS = 6
VALUE = b"x" * 100


def _admin(bootstrap: str):
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})


def _topic(bootstrap: str, name: str, partitions: int) -> None:
    KafkaAdmin().ensure_topic(model.Cluster("peer", bootstrap), name, partitions)


def _fill(bootstrap: str, topic: str, n: int, poison_every: int = 0) -> set[bytes]:
    """`n` records keyed k0..k<n-1> (every `poison_every`-th a poison record); the poison keys."""
    from confluent_kafka import Producer as KafkaProducer

    p = KafkaProducer({"bootstrap.servers": bootstrap, "linger.ms": 20, "compression.type": "zstd"})
    poison = set()
    for i in range(n):
        key = b"k%d" % i
        bad = bool(poison_every) and i % poison_every == poison_every // 2
        if bad:
            poison.add(key)
        while True:
            try:
                p.produce(topic, (b"poison-" if bad else b"") + VALUE, key=key)
                break
            except BufferError:  # its queue is full: let deliveries drain it
                p.poll(0.1)
        if i % 10_000 == 0:
            p.poll(0)
    assert p.flush(60) == 0
    return poison


def share_group_rps(bootstrap: str, n: int) -> float:
    from confluent_kafka import ShareConsumer

    topic, group = "peer-share", "peer-share-g"
    _topic(bootstrap, topic, PARTITIONS)
    _share_group(bootstrap, group)
    _fill(bootstrap, topic, n)
    c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "share.acknowledgement.mode": "explicit"})
    c.subscribe([topic])
    # timed from the first record to the last one acknowledged, as ours is: both commit acknowledgements in
    # the background (commit_async here, our batched commit there)
    done, first, last, deadline = 0, 0.0, 0.0, time.monotonic() + 300
    while done < n and time.monotonic() < deadline:
        for m in c.poll(1.0):
            if m.error() is None:
                first = first or time.monotonic()
                c.acknowledge(m)
                done += 1
        last = time.monotonic()
        c.commit_async()
    c.commit_sync()
    c.close()
    return done / (last - first)


def ours_rps(address: str, n: int, stream: str, *, iterator: bool) -> float:
    """Our Consumer, every record acknowledged on its own: by the handler API (a record is acked when its handler
    returns; 4 threads) or by the iterator API (`msg.ack()` in the caller's loop)."""
    with CoordinatorClient(address) as client:
        client.create_stream(stream, PARTITIONS, cluster="real")
    with Producer(address, **{"linger.ms": 20}) as producer:
        for i in range(n):
            producer.produce(stream, VALUE, key=b"%d" % i)
        assert producer.flush(60) == 0
    # timed from the first record to the last, as the share group's loop is (not until run() has returned:
    # its handler threads look at `stop` every 100 ms, which 50,000 records at 1 M/s would count twice over)
    done, first, last, stop = [0], [0.0], [0.0], threading.Event()
    lock = threading.Lock()
    with Consumer(address, group=f"{stream}-g", stream=stream, concurrency=4) as consumer:
        if iterator:
            for msg in consumer:
                first[0] = first[0] or time.monotonic()
                msg.ack()
                done[0] += 1
                if done[0] == n:
                    last[0] = time.monotonic()
                    break
        else:

            def handle(msg: Message) -> None:
                with lock:
                    first[0] = first[0] or time.monotonic()
                    done[0] += 1
                    if done[0] == n:
                        last[0] = time.monotonic()
                        stop.set()

            consumer.run(handle, stop=stop)
    return done[0] / (last[0] - first[0])


def _count_records(bootstrap: str, topic: str, partitions: int) -> int:
    """Records in a topic (end offsets; nothing is compacted or deleted here)."""
    from confluent_kafka import Consumer as KafkaConsumer
    from confluent_kafka import TopicPartition

    c = KafkaConsumer({"bootstrap.servers": bootstrap, "group.id": "peer-count", "log_level": 3})
    try:
        return sum(c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions))
    finally:
        c.close()


# -- redelivery after kill -9, and poison records --------------------------------------------------------------

DELIVERY_LIMIT = 5
"""The share group's delivery limit (group.share.delivery.count.limit's default), and our max attempts here."""


def holder(kind: str, where: str, topic: str, group: str) -> None:
    """A worker process that prints `r <key>` for the records it receives first and then never finishes them."""
    held = 0
    if kind == "share":
        from confluent_kafka import ShareConsumer

        c = ShareConsumer({"bootstrap.servers": where, "group.id": group, "share.acknowledgement.mode": "explicit"})
        c.subscribe([topic])
        while not held:
            for m in c.poll(1.0):
                if m.error() is None:
                    print("r", m.key().decode(), flush=True)
                    held += 1
    else:
        configure_logging("error")
        consumer = Consumer(where, group=group, stream=topic, worker_id="holder")
        partitions = set()
        for msg in consumer:  # until it holds records of every partition: the ones it keeps hold some too
            print("r", msg.key.decode(), flush=True)
            partitions.add(msg.partition)
            if len(partitions) == PARTITIONS:
                break
    time.sleep(3600)  # holds them until killed


def finisher(kind: str, where: str, topic: str, group: str) -> None:
    """A worker process that finishes every record and prints `d <key>` (poison ones it fails: `p <key>`)."""
    if kind == "share":
        from confluent_kafka import AcknowledgeType, ShareConsumer

        c = ShareConsumer({"bootstrap.servers": where, "group.id": group, "share.acknowledgement.mode": "explicit"})
        c.subscribe([topic])
        while True:
            for m in c.poll(1.0):
                if m.error() is not None:
                    continue
                if m.value().startswith(b"poison-"):
                    print("p", m.key().decode(), flush=True)
                    c.acknowledge(m, AcknowledgeType.RELEASE)  # delivered again, until the delivery limit
                else:
                    print("d", m.key().decode(), flush=True)
                    c.acknowledge(m)
            c.commit_async()
    configure_logging("error")
    lock = threading.Lock()

    def handle(msg: Message) -> None:
        if msg.value.startswith(b"poison-"):
            with lock:
                print("p", msg.key.decode(), flush=True)
            raise ValueError("cannot parse")
        with lock:
            print("d", msg.key.decode(), flush=True)

    with Consumer(where, group=group, stream=topic, worker_id="finisher", retry_backoff_s=0.05) as consumer:
        consumer.run(handle)


class _Lines:
    """What a worker process prints, with when each line came."""

    def __init__(self, args: list[str]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, __file__, *args], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
        )
        self.seen: dict[str, dict[str, float]] = {"r": {}, "d": {}, "p": {}}
        self.poisoned: dict[str, int] = {}
        self.lock = threading.Lock()
        threading.Thread(target=self._follow, daemon=True).start()

    def _follow(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            kind, _, key = line.strip().partition(" ")
            if kind in self.seen:
                with self.lock:
                    self.seen[kind].setdefault(key, time.monotonic())
                    if kind == "p":
                        self.poisoned[key] = self.poisoned.get(key, 0) + 1

    def keys(self, kind: str) -> set[str]:
        with self.lock:
            return set(self.seen[kind])

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()


def _share_group(bootstrap: str, group: str) -> None:
    """A share group that starts at the earliest records (its default is the latest)."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    earliest = ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)
    admin = _admin(bootstrap)  # kept alive until its futures resolve
    for f in admin.incremental_alter_configs(
        [ConfigResource(ResourceType.GROUP, group, incremental_configs=[earliest])]
    ).values():
        f.result(30)


def _quiet(lines: _Lines, quiet_s: float, timeout_s: float) -> None:
    """Until a worker has finished no new record for `quiet_s` (after finishing some)."""
    deadline, last, count = time.monotonic() + timeout_s, time.monotonic(), 0
    while time.monotonic() < deadline:
        now_count = len(lines.keys("d"))
        if now_count != count:
            last, count = time.monotonic(), now_count
        elif count and time.monotonic() - last >= quiet_s:
            return
        time.sleep(0.1)


def _wait(condition: Callable[[], bool], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return False


def redelivery_s(kind: str, where: str, bootstrap: str, topic: str, n: int) -> float:
    """Seconds from SIGKILL of the worker holding records until the other has finished every one of them."""
    group = f"peer-redeliver-{kind}"
    if kind == "share":
        _share_group(bootstrap, group)
    holding = _Lines(["--holder", kind, where, topic, group])
    finishing: _Lines | None = None
    try:
        if not _wait(lambda: len(holding.keys("r")) > 0, 60):
            raise SystemExit(f"{kind}: the holding worker received nothing")
        time.sleep(0.5)
        finishing = _Lines(["--finisher", kind, where, topic, group])
        _quiet(finishing, 2.0, 60)  # settled: the second worker finishes what it can get
        held = holding.keys("r") - finishing.keys("d")  # still held: not finished elsewhere already
        if not held:
            raise SystemExit(f"{kind}: the holding worker held nothing any more when it was to be killed")
        killed = time.monotonic()
        holding.kill()
        if not _wait(lambda: held <= finishing.keys("d"), 180):
            return float("inf")
        with finishing.lock:
            return max(finishing.seen["d"][k] for k in held) - killed
    finally:
        holding.kill()
        if finishing is not None:
            finishing.kill()


def poison_run(
    kind: str, where: str, bootstrap: str, topic: str, n: int, poison: set[bytes], landed: Callable[[], bool]
) -> tuple[float, dict[str, int]]:
    """Seconds until every good record is finished and every poison one ended: delivered up to the limit (each
    attempt printed) and `landed()` (ours: its copy is in the dlq lane); the attempts each poison record got."""
    group = f"peer-poison-{kind}"
    if kind == "share":
        _share_group(bootstrap, group)
    good = {f"k{i}" for i in range(n)} - {k.decode() for k in poison}
    bad = {k.decode() for k in poison}
    started = time.monotonic()
    finishing = _Lines(["--finisher", kind, where, topic, group])
    try:

        def ended() -> bool:
            with finishing.lock:
                attempts = dict(finishing.poisoned)
            return good <= finishing.keys("d") and all(attempts.get(k, 0) >= DELIVERY_LIMIT for k in bad)

        _wait(lambda: ended() and landed(), 300)
        took = time.monotonic() - started
        with finishing.lock:
            return took, dict(finishing.poisoned)
    finally:
        finishing.kill()


# -- regrant after kill -9 ----------------------------------------------------------------------------------------


def worker(kind: str, where: str, topic: str, group: str, name: str) -> None:
    """A worker process: prints `<partition>` each time it reads a partition (at most every 100 ms each)."""
    last: dict[int, float] = {}
    lock = threading.Lock()  # handler threads share stdout

    def seen(p: int) -> None:
        now = time.monotonic()
        if now - last.get(p, 0.0) >= 0.1:
            with lock:
                last[p] = now
                print(p, flush=True)

    if kind == "ours":
        configure_logging("error")
        with Consumer(where, group=group, stream=topic, worker_id=name) as consumer:
            consumer.run(lambda m: seen(m.partition))
        return
    from confluent_kafka import Consumer as KafkaConsumer

    config = {"bootstrap.servers": where, "group.id": group, "auto.offset.reset": "latest", "log_level": 3}
    if kind == "classic":
        config |= {"session.timeout.ms": 6000, "heartbeat.interval.ms": 1000}
    elif kind == "kip848":
        config |= {"group.protocol": "consumer"}
    c = KafkaConsumer(config)
    c.subscribe([topic])
    while True:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            seen(m.partition())


def regrant_s(kind: str, where: str, topic: str, group: str, produce: threading.Event) -> float:
    """Seconds from SIGKILL of the busiest of three workers until each of its partitions is read elsewhere."""
    procs: dict[str, subprocess.Popen[str]] = {}
    reads: dict[str, dict[int, float]] = {}
    lock = threading.Lock()

    def follow(name: str, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.strip().isdigit():
                with lock:
                    reads[name][int(line)] = time.monotonic()

    for i in range(3):
        name = f"{kind}-{i}"
        reads[name] = {}
        procs[name] = subprocess.Popen(
            [sys.executable, __file__, "--worker", kind, where, topic, group, name],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        threading.Thread(target=follow, args=(name, procs[name]), daemon=True).start()
    produce.set()
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # settled: every partition read in the last second, by one worker
            now = time.monotonic()
            with lock:
                owners = {p: [w for w, r in reads.items() if now - r.get(p, -9) < 1.0] for p in range(PARTITIONS)}
            if all(len(o) == 1 for o in owners.values()) and all(procs[w].poll() is None for w in procs):
                break
            time.sleep(0.2)
        time.sleep(2.0)
        with lock:  # who reads what now (a rebalance may have moved partitions since it settled)
            now = time.monotonic()
            owners = {p: [w for w, r in reads.items() if now - r.get(p, -9) < 1.0] for p in range(PARTITIONS)}
            held: dict[str, list[int]] = {w: [p for p, o in owners.items() if o == [w]] for w in reads}
        victim = max(held, key=lambda w: len(held[w]))
        killed = time.monotonic()
        procs[victim].send_signal(signal.SIGKILL)
        while time.monotonic() < killed + 180:
            with lock:
                again = {
                    p: min((r[p] for w, r in reads.items() if w != victim and r.get(p, 0) > killed), default=None)
                    for p in held[victim]
                }
            if all(t is not None for t in again.values()):
                return max(t for t in again.values() if t is not None) - killed
            time.sleep(0.05)
        return float("inf")
    finally:
        produce.clear()
        for proc in procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
            proc.wait()


def steady(bootstrap: str, topic: str, produce: threading.Event, stop: threading.Event) -> None:
    from confluent_kafka import Producer as KafkaProducer

    p = KafkaProducer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    i = 0
    while not stop.is_set():
        if not produce.wait(0.1):
            continue
        for _ in range(60):  # about 3,000 records/s over every partition
            p.produce(topic, VALUE, partition=i % PARTITIONS)
            i += 1
        p.poll(0)
        time.sleep(0.02)
    p.flush(10)


# -- Spark's own Kafka source against ours ----------------------------------------------------------------------


def spark_rows_per_s(address: str, bootstrap: str, n: int, rounds: int) -> tuple[float, float]:
    """Best rows/s of each source over `rounds` availableNow queries into noop on local[2], both reading the same
    `n` records of the stream's topic: (ours, Spark's Kafka source)."""
    import pyspark
    from spark import local_spark, streamplane_stream, timed_rows_per_s

    from streamplane.devstack.kafka import spark_kafka_jars

    jars = spark_kafka_jars(pyspark.__version__)
    with CoordinatorClient(address) as client:
        client.create_stream("peer-spark", PARTITIONS, cluster="real")
    topic = "sp.peer-spark.realtime.g1"
    _fill(bootstrap, topic, n)
    spark = local_spark(jars)
    ours, theirs = [], []
    try:
        with tempfile.TemporaryDirectory(prefix="peers-spark-") as tmp:
            for r in range(rounds):
                df = streamplane_stream(spark, address, "peer-spark", f"peer-spark-{r}")
                ours.append(timed_rows_per_s(df, f"{tmp}/ours-{r}"))
                df = (
                    spark.readStream.format("kafka")
                    .option("kafka.bootstrap.servers", bootstrap)
                    .option("subscribe", topic)
                    .option("startingOffsets", "earliest")
                    .load()
                )
                theirs.append(timed_rows_per_s(df, f"{tmp}/kafka-{r}"))
                print(
                    f"spark round {r + 1}: streamplane {ours[-1]:>12,.0f} rows/s   Spark's Kafka source "
                    f"{theirs[-1]:>12,.0f} rows/s",
                    flush=True,
                )
    finally:
        spark.stop()
    return max(ours), max(theirs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer records, no KIP-848 run (45 s session)")
    parser.add_argument("--worker", nargs=5, help=argparse.SUPPRESS)
    parser.add_argument("--holder", nargs=4, help=argparse.SUPPRESS)
    parser.add_argument("--finisher", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(*args.worker)
        return
    if args.holder:
        holder(*args.holder)
        return
    if args.finisher:
        finisher(*args.finisher)
        return
    configure_logging("error")
    n = 50_000 if args.quick else 300_000
    with cleaned_up_on_sigterm(), tempfile.TemporaryDirectory(prefix="peers-") as tmp:
        broker = KafkaBroker(Path(tmp) / "kafka").start()
        try:
            with coordinator_process(str(Path(tmp) / "coordinator")) as address:
                with CoordinatorClient(address) as client:
                    client.register_cluster(model.Cluster("real", broker.bootstrap_servers, admin=model.ADMIN_KAFKA))
                theirs = share_group_rps(broker.bootstrap_servers, n)
                ours = ours_rps(address, n, "peer-acks", iterator=False)
                ours_iter = ours_rps(address, n, "peer-acks-iter", iterator=True)
                print(
                    f"per-record acks, {n} records: share group (explicit acks) {theirs:,.0f} records/s; streamplane "
                    f"handler API {ours:,.0f}, iterator API (msg.ack()) {ours_iter:,.0f}"
                )

                bootstrap = broker.bootstrap_servers
                redelivery: dict[str, float] = {}
                with CoordinatorClient(address) as client:
                    client.create_stream("peer-held", PARTITIONS, cluster="real")
                _topic(bootstrap, "peer-held-share", PARTITIONS)
                held_n = 3_000
                _fill(bootstrap, "peer-held-share", held_n)
                _fill(bootstrap, "sp.peer-held.realtime.g1", held_n)
                redelivery["share"] = redelivery_s("share", bootstrap, bootstrap, "peer-held-share", held_n)
                redelivery["ours"] = redelivery_s("ours", address, bootstrap, "peer-held", held_n)
                print(
                    f"redelivery after kill -9 of a worker holding records: share group {redelivery['share']:.2f} s, "
                    f"streamplane {redelivery['ours']:.2f} s",
                    flush=True,
                )

                poison_n = 20_000
                with CoordinatorClient(address) as client:
                    client.create_stream("peer-poison", PARTITIONS, cluster="real")
                    client.configure_group("peer-poison-ours", "realtime", DELIVERY_LIMIT)
                _topic(bootstrap, "peer-poison-share", PARTITIONS)
                poison = _fill(bootstrap, "peer-poison-share", poison_n, poison_every=1000)
                _fill(bootstrap, "sp.peer-poison.realtime.g1", poison_n, poison_every=1000)
                share_s, share_attempts = poison_run(
                    "share", bootstrap, bootstrap, "peer-poison-share", poison_n, poison, lambda: True
                )
                with CoordinatorClient(address) as client:
                    dlq = next(x for x in client.describe_stream("peer-poison").lanes if x.name == "dlq")
                dlq_gen = dlq.generations[-1]

                def in_dlq() -> int:
                    return _count_records(bootstrap, dlq_gen.topic, dlq_gen.partitions)

                ours_s, ours_attempts = poison_run(
                    "ours", address, bootstrap, "peer-poison", poison_n, poison, lambda: in_dlq() >= len(poison)
                )
                print(
                    f"{len(poison)} poison records in {poison_n} (0.1%): share group done in {share_s:.1f} s, each "
                    f"delivered up to {max(share_attempts.values(), default=0)} times, then archived by the broker "
                    f"(kept nowhere); streamplane done in {ours_s:.1f} s, each tried up to "
                    f"{max(ours_attempts.values(), default=0)} times, {in_dlq()} in the dlq lane with their reason",
                    flush=True,
                )

                with CoordinatorClient(address) as client:
                    client.create_stream("peer-regrant", PARTITIONS, cluster="real")
                _topic(broker.bootstrap_servers, "peer-regrant", PARTITIONS)
                times: dict[str, float] = {}
                runs = [
                    ("ours", address, "peer-regrant", "sp.peer-regrant.realtime.g1"),
                    ("classic", broker.bootstrap_servers, "peer-regrant", "peer-regrant"),
                ]
                if not args.quick:
                    runs.append(("kip848", broker.bootstrap_servers, "peer-regrant", "peer-regrant"))
                    runs.append(("classic-default", broker.bootstrap_servers, "peer-regrant", "peer-regrant"))
                for kind, where, topic, written in runs:
                    produce, stop = threading.Event(), threading.Event()
                    t = threading.Thread(target=steady, args=(broker.bootstrap_servers, written, produce, stop))
                    t.start()
                    try:
                        times[kind] = regrant_s(kind, where, topic, f"peer-{kind}", produce)
                    finally:
                        stop.set()
                        t.join()
                    print(f"regrant after kill -9 of 1 of 3 workers, {kind}: {times[kind]:.2f} s", flush=True)

                spark_n, rounds = (200_000, 3) if args.quick else (1_000_000, 3)  # the first round warms the JVM
                try:
                    spark_ours, spark_theirs = spark_rows_per_s(address, broker.bootstrap_servers, spark_n, rounds)
                    print(
                        f"Spark into noop on local[2], {spark_n} records: streamplane {spark_ours:,.0f} rows/s, "
                        f"Spark's Kafka source {spark_theirs:,.0f} rows/s (best of {rounds})"
                    )
                    spark_ratio = f"{spark_ours / spark_theirs:.2f}"
                except UnavailableError as err:
                    print(f"Spark's Kafka source not measured: {err.message}")
                    spark_ratio = "n/a"
        finally:
            broker.stop()
    kip848 = f"{times['kip848'] / times['ours']:.2f}" if "kip848" in times else "n/a"
    print(
        f"share_group_vs_streamplane={ours / theirs:.2f} regrant_vs_classic={times['classic'] / times['ours']:.2f} "
        f"regrant_vs_kip848={kip848} spark_vs_kafka_source={spark_ratio} "
        f"redelivery_vs_share_group={redelivery['share'] / max(redelivery['ours'], 0.01):.2f}"
    )


if __name__ == "__main__":
    os.environ.setdefault("STREAMPLANE_LOG_LEVEL", "error")
    main()
