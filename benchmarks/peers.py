"""Our client beside Kafka's own answers to the same jobs, on the same real Apache Kafka broker (KRaft, its
own JVM), in one run:

- share groups (KIP-932): confluent-kafka's ShareConsumer acknowledging every record explicitly, against our
  Consumer acknowledging every record (`msg.ack()`), both reading the same number of preloaded records:
  records/s from the first to the last acknowledgement;
- regrant after kill -9: three worker processes read a topic under steady traffic; the one holding the most
  partitions is killed with SIGKILL; the time until every one of its partitions is read again elsewhere.
  Kafka's classic group protocol at its lowest allowed session timeout (6 s, the broker's
  group.min.session.timeout.ms), the KIP-848 protocol (group.protocol=consumer) at the broker's default
  session timeout (45 s; skipped with --quick), and our Assigner.

- Spark's own Kafka source (spark-sql-kafka-0-10 at the installed PySpark's version, fetched with Maven)
  against `format("streamplane")`: the same preloaded records of one topic, one availableNow query each into
  `noop` on local[2], rows/s over the time Spark spent in the batches (the best of the rounds).

Last line: `share_group_vs_streamplane=<ours / theirs, records/s> regrant_vs_classic=<theirs / ours, seconds>
regrant_vs_kip848=<theirs / ours, seconds, or n/a> spark_vs_kafka_source=<ours / theirs, rows/s>`; above 1
means we are ahead.
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
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _local import coordinator_process

from streamplane import model
from streamplane.client import Consumer, CoordinatorClient, Message, Producer
from streamplane.devstack.kafka import KafkaBroker
from streamplane.errors import UnavailableError
from streamplane.log import configure_logging

PARTITIONS = 6
VALUE = b"x" * 100


def _admin(bootstrap: str):
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})


def _topic(bootstrap: str, name: str, partitions: int) -> None:
    from confluent_kafka.admin import NewTopic

    admin = _admin(bootstrap)  # kept alive until its futures resolve
    for f in admin.create_topics([NewTopic(name, partitions, 1)]).values():
        f.result(30)


def _fill(bootstrap: str, topic: str, n: int) -> None:
    from confluent_kafka import Producer as KafkaProducer

    p = KafkaProducer({"bootstrap.servers": bootstrap, "linger.ms": 20, "compression.type": "zstd"})
    for i in range(n):
        while True:
            try:
                p.produce(topic, VALUE, key=b"%d" % i)
                break
            except BufferError:  # its queue is full: let deliveries drain it
                p.poll(0.1)
        if i % 10_000 == 0:
            p.poll(0)
    assert p.flush(60) == 0


# -- share groups against per-record acks ----------------------------------------------------------------------


def share_group_rps(bootstrap: str, n: int) -> float:
    from confluent_kafka import ShareConsumer
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    topic, group = "peer-share", "peer-share-g"
    _topic(bootstrap, topic, PARTITIONS)
    earliest = ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)
    admin = _admin(bootstrap)  # kept alive until its futures resolve
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[earliest])
    for f in admin.incremental_alter_configs([resource]).values():
        f.result(30)
    _fill(bootstrap, topic, n)
    c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "share.acknowledgement.mode": "explicit"})
    c.subscribe([topic])
    done, first, deadline = 0, 0.0, time.monotonic() + 300
    while done < n and time.monotonic() < deadline:
        for m in c.poll(1.0):
            if m.error() is None:
                first = first or time.monotonic()
                c.acknowledge(m)
                done += 1
        c.commit_async()
    c.commit_sync()
    took = time.monotonic() - first
    c.close()
    return done / took


def ours_rps(address: str, n: int, stream: str, *, iterator: bool) -> float:
    """Our Consumer, every record acknowledged on its own: by the handler API (a record is acked when its handler
    returns; 4 threads) or by the iterator API (`msg.ack()` in the caller's loop)."""
    with CoordinatorClient(address) as client:
        client.create_stream(stream, PARTITIONS, cluster="real")
    with Producer(address, **{"linger.ms": 20}) as producer:
        for i in range(n):
            producer.produce(stream, VALUE, key=b"%d" % i)
        assert producer.flush(60) == 0
    done, first, stop = [0], [0.0], threading.Event()
    lock = threading.Lock()
    with Consumer(address, group=f"{stream}-g", stream=stream, concurrency=4) as consumer:
        if iterator:
            for msg in consumer:
                first[0] = first[0] or time.monotonic()
                msg.ack()
                done[0] += 1
                if done[0] == n:
                    break
        else:

            def handle(msg: Message) -> None:
                with lock:
                    first[0] = first[0] or time.monotonic()
                    done[0] += 1
                    if done[0] == n:
                        stop.set()

            consumer.run(handle, stop=stop)
        took = time.monotonic() - first[0]
    return done[0] / took


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
    else:
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
    from pyspark.sql import SparkSession
    from spark import timed_rows_per_s

    from streamplane.devstack.kafka import spark_kafka_jars
    from streamplane.spark import register

    jars = spark_kafka_jars(pyspark.__version__)
    with CoordinatorClient(address) as client:
        client.create_stream("peer-spark", PARTITIONS, cluster="real")
    topic = "sp.peer-spark.realtime.g1"
    _fill(bootstrap, topic, n)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_CONF_DIR", str(Path(__file__).resolve().parent.parent / "tests" / "spark_conf"))
    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.jars", ",".join(str(j) for j in jars))
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    register(spark)
    ours, theirs = [], []
    try:
        with tempfile.TemporaryDirectory(prefix="peers-spark-") as tmp:
            for r in range(rounds):
                df = (
                    spark.readStream.format("streamplane")
                    .option("coordinator", address)
                    .option("stream", "peer-spark")
                    .option("group", f"peer-spark-{r}")
                    .load()
                )
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
    args = parser.parse_args()
    if args.worker:
        worker(*args.worker)
        return
    configure_logging("error")
    n = 50_000 if args.quick else 300_000
    with tempfile.TemporaryDirectory(prefix="peers-") as tmp:
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
        f"regrant_vs_kip848={kip848} spark_vs_kafka_source={spark_ratio}"
    )


if __name__ == "__main__":
    os.environ.setdefault("STREAMPLANE_LOG_LEVEL", "error")
    main()
