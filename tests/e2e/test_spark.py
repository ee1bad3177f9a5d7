"""The Spark source and sink with real Spark (local[2]), a real coordinator, and Kafka: the local mock cluster,
and for the source, the sink and offsets by timestamp a real Kafka broker too.

The end-to-end queries (`on_engine`) run as production does: authentication is on, and each job holds a
least-privilege token. The test acts as an operator with an admin token; producers hold `producer` tokens
scoped to their stream; the query's source and its progress listener hold a `consumer` token scoped to its
stream and group (in STREAMPLANE_TOKEN, where the driver's listener finds it); a sink holds a `producer`
token scoped to the stream it writes (its `token` option)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from streamplane.client import Consumer, CoordinatorClient, Producer
from tests.helpers import cli, read_back, register_local_clusters, register_real_clusters, wait_until
from tests.helpers import issue_token as token

ADMIN = token("admin", "ops")


@pytest.fixture
def address(coordinator, local_cluster) -> str:
    bootstrap, control = local_cluster
    register_local_clusters(coordinator.address, bootstrap, control.endpoint, ("east", "west"))
    return coordinator.address


@pytest.fixture
def on_engine(secured_engine: str) -> str:
    """A coordinator with authentication on and clusters east and west, on both Kafka engines."""
    return secured_engine


def run_as(monkeypatch: pytest.MonkeyPatch, stream: str, group: str) -> str:
    """The query's job holds a consumer token for `stream` and `group` only. Its source takes it as the `token`
    option (Spark's executors do not share the driver's environment); the progress listener, in the driver's
    own process, finds it in STREAMPLANE_TOKEN. Returns the token."""
    job = token("consumer", f"job-{group}", streams=(stream,), groups=(group,))
    monkeypatch.setenv("STREAMPLANE_TOKEN", job)
    return job


def produce(address: str, stream: str, ids: range, lane: str = "realtime") -> None:
    with Producer(address, token=token("producer", "ingest", streams=(stream,)), **{"linger.ms": 20}) as producer:
        for i in ids:
            producer.produce(stream, b"id-%d" % i, key=b"%d" % i, lane=lane)
        assert producer.flush(60) == 0


def cut() -> int:
    """A time later than every record written so far, and earlier than every one written after it."""
    import time

    at = int(time.time() * 1000) + 1
    wait_until(lambda: time.time() * 1000 > at + 5, what=lambda: "the clock to pass the cut")
    return at


def source(spark, address: str, stream: str, **options: str):
    reader = spark.readStream.format("streamplane").option("coordinator", address).option("stream", stream)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def run_available_now(df, out: Path, name: str):
    query = (
        df.writeStream.format("parquet")
        .option("path", str(out / "data"))
        .option("checkpointLocation", str(out / "checkpoint"))
        .queryName(name)
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(180), "the availableNow query did not finish"
    assert query.exception() is None, query.exception()
    return query


def values(spark, out: Path) -> list[bytes]:
    return [bytes(r.value) for r in spark.read.parquet(str(out / "data")).select("value").collect()]


def test_available_now_then_restart_from_the_checkpoint_loses_and_duplicates_nothing(
    spark, on_engine: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    address = on_engine
    with CoordinatorClient(address, token=ADMIN) as client:
        client.create_stream("sp-orders", 4, cluster="east")
    job = run_as(monkeypatch, "sp-orders", "spark-orders")
    produce(address, "sp-orders", range(100_000))
    orders = source(spark, address, "sp-orders", maxRecordsPerTrigger="40000", token=job)
    query = run_available_now(orders, tmp_path, "orders")
    rows = [p["numInputRows"] for p in query.recentProgress]
    assert max(rows) <= 40_000 and sum(rows) == 100_000, rows
    got = values(spark, tmp_path)
    assert len(got) == 100_000 and len(set(got)) == 100_000

    produce(address, "sp-orders", range(100_000, 130_000))
    run_available_now(source(spark, address, "sp-orders", maxRecordsPerTrigger="40000", token=job), tmp_path, "orders")
    got = values(spark, tmp_path)
    assert len(got) == 130_000 and set(got) == {b"id-%d" % i for i in range(130_000)}

    # the query's progress is in the commit log: `streamplane lag` shows its group, caught up
    shown = cli("lag", "spark-orders", coordinator=address, env={"STREAMPLANE_TOKEN": ADMIN})
    assert shown.returncode == 0, shown.stderr
    assert "spark-orders" in shown.stdout and "sp-orders" in shown.stdout
    with CoordinatorClient(address, token=ADMIN) as client:
        lag = client.lag("spark-orders")
    assert lag.offset_lag == 0 and len(lag.partitions) == 4


def test_a_failover_during_a_running_query_delivers_every_record_exactly_once(
    spark, on_engine: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    address = on_engine
    with CoordinatorClient(address, token=ADMIN) as client:
        client.create_stream("sp-moving", 2, cluster="east")
    job = run_as(monkeypatch, "sp-moving", "moving-q")
    produce(address, "sp-moving", range(5_000))
    query = (
        source(spark, address, "sp-moving", group="moving-q", token=job)
        .writeStream.format("parquet")
        .option("path", str(tmp_path / "data"))
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(processingTime="500 milliseconds")
        .start()
    )
    try:
        wait_until(lambda: query.lastProgress is not None and query.lastProgress["numInputRows"] > 0, timeout=60)
        with CoordinatorClient(address, token=ADMIN) as client:
            client.failover("sp-moving", "realtime", "west", reason="spark test")
        produce(address, "sp-moving", range(5_000, 10_000))

        def lag_zero() -> bool:
            with CoordinatorClient(address, token=ADMIN) as client:
                lag = client.lag("moving-q")
            return len(lag.partitions) == 4 and lag.offset_lag == 0

        wait_until(lag_zero, timeout=60)
    finally:
        query.stop()
    assert query.exception() is None
    got = values(spark, tmp_path)
    assert len(got) == 10_000 and set(got) == {b"id-%d" % i for i in range(10_000)}
    generations = {r.generation for r in spark.read.parquet(str(tmp_path / "data")).select("generation").collect()}
    assert generations == {1, 2}


def test_the_sink_writes_a_dataframe_into_a_lane_and_a_consumer_reads_it_back(
    spark, on_engine: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    address = on_engine
    with CoordinatorClient(address, token=ADMIN) as client:
        client.create_stream("sp-in", 2, cluster="east")
        client.create_stream("sp-out", 2, cluster="west")
    produce(address, "sp-in", range(500))
    job = run_as(monkeypatch, "sp-in", "sink-q")
    from pyspark.sql import functions as sf

    df = source(spark, address, "sp-in", group="sink-q", token=job)
    df = df.select("key", sf.concat(sf.lit(b"copy-"), sf.col("value")).alias("value"))
    query = (
        df.writeStream.format("streamplane")
        .option("coordinator", address)
        .option("stream", "sp-out")
        .option("token", token("producer", "sink-job", streams=("sp-out",)))
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(120)
    assert query.exception() is None
    reader = token("consumer", "reader", streams=("sp-out",), groups=("sink-reader",))
    assert read_back(address, "sp-out", "sink-reader", 500, token=reader) == {b"copy-id-%d" % i for i in range(500)}


def test_bad_options_fail_at_load_or_start_with_a_clear_message(spark, address: str, tmp_path: Path) -> None:
    from pyspark.errors import PySparkException

    with CoordinatorClient(address) as client:
        client.create_stream("sp-bad", 1, cluster="east")
    cases = [
        ({"stream": "ghost"}, "stream 'ghost' does not exist"),
        ({"stream": "sp-bad", "lanes": "nolane"}, "lane 'nolane' does not exist"),
        ({"stream": "sp-bad", "startingOffsets": "{not json"}, "startingOffsets is not"),
        ({"stream": "sp-bad", "maxRecordsPerTrigger": "-5"}, "maxRecordsPerTrigger must be at least 1"),
        ({"stream": "sp-bad", "startingTimestamp": "yesterday"}, "startingTimestamp must be a unix time in ms"),
        ({"stream": "sp-bad", "endingTimestamp": "tomorrow"}, "endingTimestamp must be a unix time in ms"),
        ({"stream": "sp-bad", "startingOffsetsByTimestamp": '{"realtime/1": {"0": -4}}'}, "unix time in ms >= 0"),
        ({"stream": "sp-bad", "where": "key ^ 'us'"}, "where, column 5: unexpected '\\^'"),
        ({"stream": "sp-bad", "recordsPerTask": "-1"}, "recordsPerTask must be at least 0, not -1"),
        ({"stream": "sp-bad", "recordsPerTask": "many"}, "recordsPerTask must be an integer, not 'many'"),
        ({"stream": "sp-bad", "kafka.security.protocol": "tls"}, r"option kafka\.\*: security\.protocol must be one"),
        (
            {"stream": "sp-bad", "kafka.security.protocol": "sasl_ssl", "kafka.sasl.mechanism": "PLAIN"},
            r"option kafka\.\*: sasl\.username is required with sasl\.mechanism=PLAIN",
        ),
    ]
    for options, message in cases:
        reader = spark.readStream.format("streamplane").option("coordinator", address)
        for k, v in options.items():
            reader = reader.option(k, v)
        with pytest.raises(PySparkException, match=message):
            reader.load()
    reader = spark.readStream.format("streamplane").option("coordinator", "127.0.0.1:1").option("stream", "sp-bad")
    with pytest.raises(PySparkException, match=r"127\.0\.0\.1:1"):
        reader.load()
    from pyspark.errors import AnalysisException

    with pytest.raises(AnalysisException, match="where, column 7: expected a quoted string"):
        spark.readStream.format("streamplane").option("stream", "sp-bad").option("where", "key = 5").load()


def test_starting_offsets_json_picks_positions_per_generation_and_partition(
    spark, address: str, tmp_path: Path
) -> None:
    with CoordinatorClient(address) as client:
        client.create_stream("sp-start", 1, cluster="east")
    with Producer(address) as producer:
        for i in range(100):
            producer.produce("sp-start", b"id-%d" % i, headers=[("trace", b"t-%d" % i)])
        assert producer.flush(60) == 0
    starting = json.dumps({"realtime/1": {"0": 90}})
    df = source(spark, address, "sp-start", startingOffsets=starting, includeHeaders="true", minPartitions="3")
    run_available_now(df, tmp_path, "start-q")
    rows = spark.read.parquet(str(tmp_path / "data")).collect()
    assert sorted(bytes(r.value) for r in rows) == sorted(b"id-%d" % i for i in range(90, 100))
    assert all([(h.key, bytes(h.value)) for h in r.headers] == [("trace", b"t" + bytes(r.value)[2:])] for r in rows)


def test_the_example_pipeline_counts_per_minute_into_a_stream_and_parquet(spark, address: str, tmp_path: Path) -> None:
    import importlib.util

    path = Path(__file__).resolve().parents[2] / "examples" / "pipeline.py"
    spec = importlib.util.spec_from_file_location("pipeline_example", path)
    assert spec is not None and spec.loader is not None
    pipeline = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(pipeline)
    with CoordinatorClient(address) as client:
        client.create_stream("sp-events", 2, cluster="east")
        client.create_stream("sp-per-minute", 1, cluster="east")
    produce(address, "sp-events", range(3_000))
    query = pipeline.start(
        spark, address, "sp-events", "sp-per-minute", str(tmp_path / "out"), str(tmp_path / "ck"), available_now=True
    )
    assert query.awaitTermination(180)
    assert query.exception() is None
    rows = spark.read.parquet(str(tmp_path / "out")).collect()
    last = {}
    for r in sorted(rows, key=lambda r: r.batch_id):
        last[(r.minute, r.lane)] = r["count"]
    assert sum(last.values()) == 3_000
    counts: dict[str, int] = {}
    with Consumer(address, group="per-minute-reader", stream="sp-per-minute") as consumer:
        for msg in consumer:
            record = json.loads(msg.value)
            counts[record["minute"] + record["lane"]] = record["count"]
            msg.ack()
            if sum(counts.values()) == 3_000:
                break
    assert sum(counts.values()) == 3_000


def test_starting_offsets_by_timestamp_on_real_kafka(spark, real_kafka, coordinator, tmp_path: Path) -> None:
    """As Spark's Kafka source: startingTimestamp for every partition, startingOffsetsByTimestamp per
    partition; a partition with nothing at or after the time starts at its end. (The mock cluster has no
    offset lookup by time.)"""
    import time

    address = coordinator.address
    register_real_clusters(address, real_kafka, ("east",))
    with CoordinatorClient(address) as client:
        client.create_stream("sp-time", 2, cluster="east")
    produce(address, "sp-time", range(0, 300))
    time.sleep(0.05)  # the cut is a later millisecond than every record before it
    cut = int(time.time() * 1000)
    time.sleep(0.05)  # and an earlier one than every record after it
    produce(address, "sp-time", range(300, 600))
    later = {b"id-%d" % i for i in range(300, 600)}

    run_available_now(source(spark, address, "sp-time", startingTimestamp=str(cut)), tmp_path / "all", "by_time")
    assert set(values(spark, tmp_path / "all")) == later

    future = str(cut + 3_600_000)
    by_partition = json.dumps({"realtime/1": {"0": cut, "1": int(future)}})
    run_available_now(
        source(spark, address, "sp-time", startingOffsetsByTimestamp=by_partition), tmp_path / "p0", "by_part"
    )
    rows = spark.read.parquet(str(tmp_path / "p0" / "data")).select("partition", "value").collect()
    assert {r.partition for r in rows} == {0}, "partition 1 has nothing after its time: it starts at its end"
    assert {bytes(r.value) for r in rows} <= later and rows


def test_the_source_and_its_progress_reach_a_coordinator_over_mutual_tls(
    spark, local_cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Options tls.ca, tls.cert and tls.key (and token) reach the coordinator from every Spark process; the
    progress listener, in the driver's own process, finds them in the environment (issue 13)."""
    from streamplane import model
    from streamplane.client.credentials import ClientTls
    from streamplane.coordinator.rpc import server
    from streamplane.coordinator.rpc.auth import ADMIN, CONSUMER, Identity
    from streamplane.coordinator.rpc.guard import Guard
    from streamplane.coordinator.store import StoreConfig, open_store
    from streamplane.coordinator.topology.cluster_admin import RoutingAdmin
    from tests.helpers import make_certificates

    certs = make_certificates(tmp_path / "certs", "ops", "spark-job")
    identities = {"ops": Identity(ADMIN), "spark-job": Identity(CONSUMER, groups=("tls-q",))}
    running = server.start(
        open_store(StoreConfig(driver="embedded", data_dir=tmp_path / "db")),
        admin=RoutingAdmin(),
        guard=Guard(identities=identities),
        tls=server.ServerTls(certs["server.crt"], certs["server.key"], certs["ca"]),
        control_endpoints=[local_cluster[1].endpoint],
    )
    try:
        address = running.address
        ops = ClientTls(str(certs["ca"]), str(certs["ops.crt"]), str(certs["ops.key"]))
        with CoordinatorClient(address, tls=ops) as client:
            client.register_cluster(
                model.Cluster(
                    "east", local_cluster[0], admin=model.ADMIN_LOCAL, control_endpoint=local_cluster[1].endpoint
                )
            )
            client.create_stream("sp-tls", 2)
        with Producer(address, tls=ops, **{"linger.ms": 5}) as producer:
            for i in range(300):  # keyed: both partitions get records (keyless ones may all stick to one)
                producer.produce("sp-tls", b"id-%d" % i, key=b"%d" % i)
            assert producer.flush(30) == 0
        job = {
            "tls.ca": str(certs["ca"]),
            "tls.cert": str(certs["spark-job.crt"]),
            "tls.key": str(certs["spark-job.key"]),
        }
        for name, value in (("CA", "ca"), ("CERT", "spark-job.crt"), ("KEY", "spark-job.key")):
            monkeypatch.setenv(f"STREAMPLANE_TLS_{name}", str(certs[value]))  # for the listener, in this process
        run_available_now(source(spark, address, "sp-tls", group="tls-q", **job), tmp_path, "tls")
        assert sorted(values(spark, tmp_path)) == sorted(b"id-%d" % i for i in range(300))
        with CoordinatorClient(address, tls=ops) as client:
            # the listener recorded the query's progress: both partitions, everything done
            wait_until(
                lambda: len(client.lag("tls-q").partitions) == 2 and client.lag("tls-q").offset_lag == 0,
                timeout=30,
                what=lambda: f"the coordinator's lag of tls-q: {client.lag('tls-q')}",
            )
    finally:
        running.stop(0)


def test_register_says_which_python_the_executors_run_when_it_cannot_import_streamplane(tmp_path: Path) -> None:
    """The venv's Python run without activating the venv: PySpark would start its workers with `python3` from
    PATH, which has no streamplane, and every task would fail. register() says so at once, in one sentence."""
    import subprocess
    import sys

    script = (
        "from pyspark.sql import SparkSession\n"
        "from streamplane.spark import register\n"
        "spark = SparkSession.builder.master('local[1]').config('spark.ui.enabled', 'false').getOrCreate()\n"
        "try:\n"
        "    register(spark)\n"
        "except Exception as err:\n"
        "    print('REFUSED', type(err).__name__, err)\n"
        "else:\n"
        "    print('REGISTERED')\n"
        "spark.stop()\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "VIRTUAL_ENV")}
    env["PATH"] = "/usr/bin:/bin"  # python3 here is the system's, without streamplane
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    env["SPARK_CONF_DIR"] = str(Path(__file__).parents[1] / "spark_conf")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=180, env=env)
    assert "REFUSED InvalidArgumentError Spark's executors will run 'python3'" in done.stdout, done.stderr[-2000:]
    assert "cannot import streamplane" in done.stdout and "PYSPARK_PYTHON" in done.stdout
    env["PYSPARK_PYTHON"] = sys.executable
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=180, env=env)
    assert "REGISTERED" in done.stdout, done.stdout + done.stderr[-2000:]


def test_the_source_reads_a_time_window_across_a_failover_with_starting_and_ending_timestamps(
    spark, on_engine: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """startingTimestamp and endingTimestamp (issue 38): exactly the records of [T1, T2), on every generation
    that holds part of it, and the availableNow query ends. The mock cluster cannot look offsets up by time:
    the source searches the records' own timestamps there."""

    address = on_engine
    with CoordinatorClient(address, token=ADMIN) as client:
        client.create_stream("sp-window", 2, cluster="east")

    produce(address, "sp-window", range(0, 500))
    t1 = cut()
    produce(address, "sp-window", range(500, 800))
    with CoordinatorClient(address, token=ADMIN) as client:
        client.failover("sp-window", "realtime", "west", reason="drill")
    produce(address, "sp-window", range(800, 1_100))
    t2 = cut()
    produce(address, "sp-window", range(1_100, 1_500))

    job = run_as(monkeypatch, "sp-window", "spark-window")
    df = source(spark, address, "sp-window", startingTimestamp=str(t1), endingTimestamp=str(t2), token=job)
    run_available_now(df, tmp_path / "w", "window")
    got = values(spark, tmp_path / "w")
    assert sorted(got) == sorted(b"id-%d" % i for i in range(500, 1_100)), "exactly the window, once"


def test_the_source_leaves_out_in_the_decoder_what_its_where_option_does_not_match(
    spark, on_engine: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`.option("where", ...)` (issue 39): exactly the matching records, once, across a failover."""
    address = on_engine
    with CoordinatorClient(address, token=ADMIN) as client:
        client.create_stream("sp-where", 2, cluster="east")

    def write(ids: range) -> None:
        with Producer(address, token=token("producer", "ingest", streams=("sp-where",))) as producer:
            for i in ids:
                producer.produce(
                    "sp-where", b"id-%d" % i, key=b"%d" % i, headers=[("service", b"api" if i % 10 == 0 else b"web")]
                )
            assert producer.flush(60) == 0

    write(range(0, 600))
    with CoordinatorClient(address, token=ADMIN) as client:
        client.failover("sp-where", "realtime", "west", reason="drill")
    write(range(600, 1_000))
    job = run_as(monkeypatch, "sp-where", "spark-where")
    df = source(spark, address, "sp-where", where="header(service) = 'api'", token=job)
    run_available_now(df, tmp_path / "w", "where")
    assert sorted(values(spark, tmp_path / "w")) == sorted(b"id-%d" % i for i in range(0, 1_000, 10))


def test_the_batch_reader_returns_the_same_rows_with_and_without_pushdown(
    spark, on_engine: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spark.read over a time window across a failover (issue 39): the filters Spark pushes (key, timestamp,
    partition, generation) give the rows Spark's own filtering gives, and explain() lists them."""
    import time
    from datetime import UTC, datetime

    from pyspark.sql import functions as sf

    address = on_engine
    with CoordinatorClient(address, token=ADMIN) as client:
        client.create_stream("sp-batch", 2, cluster="east")

    produce(address, "sp-batch", range(0, 300))
    t1 = cut()
    produce(address, "sp-batch", range(300, 600))
    with CoordinatorClient(address, token=ADMIN) as client:
        client.failover("sp-batch", "realtime", "west", reason="drill")
    produce(address, "sp-batch", range(600, 900))
    t2 = cut()
    produce(address, "sp-batch", range(900, 1_000))
    job = run_as(monkeypatch, "sp-batch", "spark-batch")

    def window(pushdown: str, **extra: str):
        return (
            spark.read.format("streamplane")
            .option("coordinator", address)
            .option("stream", "sp-batch")
            .option("startingTimestamp", str(t1))
            .option("endingTimestamp", str(t2))
            .option("token", job)
            .option("pushdown", pushdown)
            .options(**extra)
            .load()
        )

    everything = sorted(bytes(r.value) for r in window("true").select("value").collect())
    assert everything == sorted(b"id-%d" % i for i in range(300, 900)), "the window [t1, t2), once"
    # its four ranges (two partitions of two generations, on two clusters) are one task; one a range without packing
    assert window("true").rdd.getNumPartitions() == 1
    unpacked = window("true", recordsPerTask="0").select("value")
    assert unpacked.rdd.getNumPartitions() == 4
    assert sorted(bytes(r.value) for r in unpacked.collect()) == everything
    later = int(time.time() * 1000) + 3_600_000
    empty = spark.read.format("streamplane").option("coordinator", address).option("stream", "sp-batch")
    empty = empty.option("startingTimestamp", str(later)).option("token", job).load()
    assert empty.count() == 0, "a window that holds no record is an empty batch"

    keys = [b"%d" % i for i in range(0, 1_000, 7)]
    since = datetime.fromtimestamp((t1 + 1) / 1000, UTC)

    def query(df):
        return df.filter(
            sf.col("key").isin(keys)
            & (sf.col("partition") == 1)
            & (sf.col("timestamp") >= sf.lit(since))
            & (sf.col("generation") == 2)
        ).select("generation", "partition", "offset", "key", "value")

    pushed, plain = query(window("true")), query(window("false"))
    got = sorted(tuple(r) for r in pushed.collect())
    assert got == sorted(tuple(r) for r in plain.collect())
    assert got and all(r[0] == 2 and r[1] == 1 and r[3] in keys for r in got)
    # Spark 4.2 describes a Python scan as "(Python)" without its pushed filters: explain() shows them as the
    # comparisons gone from the Filter above the scan, which Spark keeps when nothing is pushed
    filters = {
        name: next(line for line in df._jdf.queryExecution().executedPlan().toString().splitlines() if "Filter" in line)
        for name, df in (("pushed", pushed), ("plain", plain))
    }
    for comparison in ("AND key#", "AND (partition#", "AND (timestamp#", "AND (generation#"):  # isnotnull() stays
        assert comparison in filters["plain"] and comparison not in filters["pushed"], filters


def test_the_source_sink_and_progress_reach_a_cluster_behind_sasl_with_kafka_options(
    spark, real_kafka, tmp_path: Path
) -> None:
    """A stream on a cluster reachable only over SASL_SSL (the coordinator given its settings by reference):
    the source reads it and the sink writes it with the options `kafka.<setting>`, and the progress listener
    (`register(spark, kafka=...)`) records the query's progress with the same settings."""
    from streamplane import model
    from streamplane.coordinator.rpc import server
    from streamplane.coordinator.store import StoreConfig, open_store
    from streamplane.coordinator.topology.kafka_settings import KafkaSettings
    from streamplane.spark import register
    from tests.e2e.test_real_kafka import sasl

    settings = sasl(real_kafka, "SCRAM-SHA-256")
    running = server.start(
        open_store(StoreConfig(driver="embedded", data_dir=tmp_path / "store")),
        kafka_settings=KafkaSettings({"alice": settings}),
    )
    register(spark, kafka=settings)
    try:
        address = running.address
        with CoordinatorClient(address) as client:
            client.register_cluster(model.Cluster("secure", real_kafka.sasl_bootstrap_servers, config_ref="alice"))
            client.create_stream("sp-sasl-in", 2, cluster="secure")
            client.create_stream("sp-sasl-out", 2, cluster="secure")
        with Producer(address, **{"linger.ms": 5, **settings}) as producer:
            for i in range(300):
                producer.produce("sp-sasl-in", b"id-%d" % i, key=b"%d" % i)
            assert producer.flush(30) == 0
        kafka = {f"kafka.{k}": v for k, v in settings.items()}
        df = source(spark, address, "sp-sasl-in", group="sasl-q", **kafka)
        writer = df.select("key", "value").writeStream.format("streamplane").option("coordinator", address)
        for k, v in {**kafka, "stream": "sp-sasl-out", "checkpointLocation": str(tmp_path / "checkpoint")}.items():
            writer = writer.option(k, v)
        query = writer.trigger(availableNow=True).start()
        assert query.awaitTermination(120)
        assert query.exception() is None, query.exception()
        seen = read_back(address, "sp-sasl-out", "sasl-reader", 300, kafka_config=settings)
        assert seen == {b"id-%d" % i for i in range(300)}
        with CoordinatorClient(address) as client:
            wait_until(lambda: client.lag("sasl-q").partitions and client.lag("sasl-q").offset_lag == 0, timeout=30)
    finally:
        register(spark, kafka={})  # the session's listener reads plaintext again, for the tests after
        running.stop(0)
