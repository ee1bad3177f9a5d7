"""The Spark source on a stream with history: a pipeline started after the stream's first failover.

The stream has 4 partitions on cluster east; 10,000 records are written, its lane fails over to west, 10,000
more are written, and generation 1 is sealed before any query starts, with no group having read it. The query's
own group is its first reader, so its own commits drain generation 1 while it runs. Before the fix the drained
generation came back into the plan at its earliest offset and was read again, forever.

Both Kafka engines; Spark as `local[2]` (the suite's session) and as a standalone cluster (a master and a worker,
each its own JVM, executors with the installed package).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from pyspark.sql.streaming.datasource import ReadMaxRows

from streamplane.client import CoordinatorClient, Producer
from streamplane.client.kafka.watermarks import Watermarks
from streamplane.model import SEALED, SETTLED
from streamplane.spark.options import SourceOptions
from streamplane.spark.reader import StreamReader
from tests.helpers import cli, issue_token, read_back, register_local_clusters, register_real_clusters, wait_until

RECORDS = 20_000
EXPECTED = {b"id-%d" % i for i in range(RECORDS)}


@pytest.fixture(params=["mock", "kafka"])
def on_engine(request: pytest.FixtureRequest, coordinator, local_cluster) -> str:
    """A coordinator with clusters east and west: the local mock cluster, or a real Kafka broker."""
    if request.param == "mock":
        bootstrap, control = local_cluster
        register_local_clusters(coordinator.address, bootstrap, control.endpoint, ("east", "west"))
    else:
        register_real_clusters(coordinator.address, request.getfixturevalue("real_kafka"), ("east", "west"))
    return coordinator.address


def produce(address: str, stream: str, ids: range) -> None:
    with Producer(address, **{"linger.ms": 20}) as producer:
        for i in ids:
            producer.produce(stream, b"id-%d" % i, key=b"%d" % i)
        assert producer.flush(60) == 0


def stream_with_history(address: str, stream: str) -> None:
    """10,000 records on east, a failover to west, 10,000 more; generation 1 sealed and read by no group."""
    with CoordinatorClient(address) as client:
        client.create_stream(stream, 4, cluster="east")
    produce(address, stream, range(RECORDS // 2))
    with CoordinatorClient(address) as client:
        client.failover(stream, "realtime", "west", reason="history before the query")
    produce(address, stream, range(RECORDS // 2, RECORDS))

    def sealed() -> bool:
        with CoordinatorClient(address) as client:
            gen = client.describe_stream(stream).require_lane("realtime").generation(1)
        return gen is not None and gen.state == SEALED

    wait_until(sealed, timeout=60, what=lambda: "generation 1 was not sealed")


def records_in(address: str, stream: str) -> int:
    """How many records the stream's topics hold, all generations: what a sink wrote, counted by Kafka."""
    with CoordinatorClient(address) as client:
        described = client.describe_stream(stream)
        clusters = {c.name: c.bootstrap_servers for c in client.list_clusters()}
    marks = Watermarks()
    try:
        return sum(
            high - low
            for gen in described.require_lane("realtime").generations
            for low, high in (marks.get(clusters[gen.cluster], gen.topic, p) for p in range(gen.partitions))
        )
    finally:
        marks.close()


def lag_reaches_zero(address: str, group: str) -> None:
    def zero() -> bool:
        with CoordinatorClient(address) as client:
            lag = client.lag(group)
        return len(lag.partitions) >= 4 and lag.offset_lag == 0

    wait_until(zero, timeout=60, what=lambda: f"the lag of {group} did not reach zero")
    shown = cli("lag", group, coordinator=address)
    assert shown.returncode == 0, shown.stderr
    assert group in shown.stdout


def test_an_available_now_query_on_a_stream_that_failed_over_before_it_started_ends_with_every_record_once(
    spark, on_engine: str, tmp_path: Path
) -> None:
    address = on_engine
    stream_with_history(address, "sp-history")
    with CoordinatorClient(address) as client:
        client.create_stream("sp-history-copy", 2, cluster="west")

    # with a limit, into parquet
    df = (
        spark.readStream.format("streamplane")
        .option("coordinator", address)
        .option("stream", "sp-history")
        .option("maxRecordsPerTrigger", "6000")
        .load()
    )
    query = (
        df.writeStream.format("parquet")
        .option("path", str(tmp_path / "data"))
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .queryName("history")
        .trigger(availableNow=True)
        .start()
    )
    ended = query.awaitTermination(180)
    if not ended:
        query.stop()
    assert ended, f"the availableNow query did not end: {len(query.recentProgress)} batches"
    assert query.exception() is None, query.exception()
    got = [bytes(r.value) for r in spark.read.parquet(str(tmp_path / "data")).select("value").collect()]
    assert len(got) == RECORDS and set(got) == EXPECTED
    generations = {r.generation for r in spark.read.parquet(str(tmp_path / "data")).select("generation").collect()}
    assert generations == {1, 2}
    lag_reaches_zero(address, "spark-history")
    with CoordinatorClient(address) as client:  # its commits were generation 1's only reads: it drained
        wait_until(
            lambda: client.describe_stream("sp-history").require_lane("realtime").generation(1).state in SETTLED,
            timeout=30,
        )

    # without a limit, into the streamplane sink, on a stream of its own: generation 1 of sp-history is drained
    # now (every group that read it finished it), so a new query, like a new group, starts after it
    stream_with_history(address, "sp-history-2")
    query = (
        spark.readStream.format("streamplane")
        .option("coordinator", address)
        .option("stream", "sp-history-2")
        .load()
        .select("key", "value")
        .writeStream.format("streamplane")
        .option("coordinator", address)
        .option("stream", "sp-history-copy")
        .option("checkpointLocation", str(tmp_path / "sink-checkpoint"))
        .queryName("history-sink")
        .trigger(availableNow=True)
        .start()
    )
    ended = query.awaitTermination(180)
    if not ended:
        query.stop()
    assert ended, f"the availableNow query into the sink did not end: {len(query.recentProgress)} batches"
    assert query.exception() is None, query.exception()
    assert records_in(address, "sp-history-copy") == RECORDS  # Kafka holds each record once
    assert read_back(address, "sp-history-copy", "sp-history-copy-reader", RECORDS) == EXPECTED
    lag_reaches_zero(address, "spark-history-sink")


def test_a_processing_time_query_plans_nothing_once_the_history_is_read(spark, on_engine: str, tmp_path: Path) -> None:
    address = on_engine
    stream_with_history(address, "sp-idle")
    spark.conf.set("spark.sql.streaming.noDataProgressEventInterval", "0")  # a progress event for every trigger
    query = (
        spark.readStream.format("streamplane")
        .option("coordinator", address)
        .option("stream", "sp-idle")
        .option("maxRecordsPerTrigger", "6000")
        .load()
        .writeStream.format("parquet")
        .option("path", str(tmp_path / "data"))
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .queryName("idle")
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:
        wait_until(lambda: sum(p["numInputRows"] for p in query.recentProgress) >= RECORDS, timeout=120)
        read_at = len(query.recentProgress)
        wait_until(lambda: len(query.recentProgress) >= read_at + 10, timeout=60, what=lambda: "no idle triggers")
        after = query.recentProgress[read_at:]
        assert [p["numInputRows"] for p in after] == [0] * len(after)
        assert len({p["batchId"] for p in after}) <= 1, "a batch ran after the data was read"
        lag_reaches_zero(address, "spark-idle")
    finally:
        query.stop()
        spark.conf.unset("spark.sql.streaming.noDataProgressEventInterval")
    assert query.exception() is None
    got = [bytes(r.value) for r in spark.read.parquet(str(tmp_path / "data")).select("value").collect()]
    assert len(got) == RECORDS and set(got) == EXPECTED


def test_the_reader_plans_every_record_once_then_nothing_for_ten_triggers(on_engine: str) -> None:
    """The source's driver side as Spark drives it, with no Spark: plan, read each range, plan again."""
    address = on_engine
    stream_with_history(address, "sp-plans")
    reader = StreamReader(SourceOptions.parse({"coordinator": address, "stream": "sp-plans"}))
    try:
        start, seen, idle = reader.initialOffset(), [], 0
        for _ in range(40):
            end = reader.latestOffset(start, ReadMaxRows(6000))
            if end == start:
                idle += 1
                if idle == 10:
                    break
                continue
            assert idle == 0, "a plan found data after plans that found none"
            for piece in reader.partitions(start, end):
                seen += [v for batch in reader.read(piece) for v in batch.column("value").to_pylist()]
            reader.commit(end)
            start = end
        assert idle == 10
        assert len(seen) == RECORDS and set(seen) == EXPECTED
        assert json.loads(json.dumps(start))["done"] == ["realtime/1"]
    finally:
        reader.stop()


def test_on_a_standalone_spark_cluster_the_query_ends_and_the_sink_holds_every_record_once(
    spark_standalone: str, secured_engine: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As production runs it: authentication on, and the job holds least-privilege tokens. Its source (in the
    executors' JVM and Python workers) a `consumer` token for its stream and group, as the `token` option; its
    sink a `producer` token for the stream it writes; its progress listener (the driver's process) the consumer
    token, from STREAMPLANE_TOKEN. This test acts as an operator, with an admin token."""
    address = secured_engine
    monkeypatch.setenv("STREAMPLANE_TOKEN", issue_token("admin", "ops"))
    stream_with_history(address, "sp-cluster")
    with CoordinatorClient(address) as client:
        client.create_stream("sp-cluster-copy", 2, cluster="west")

    def job(query: str, stream: str, *extra: str) -> dict:
        own = issue_token("consumer", f"job-{query}", streams=(stream,), groups=(f"spark-{query}",))
        args = [
            sys.executable, "-m", "tests.spark_job", "--master", spark_standalone, "--coordinator", address,
            "--stream", stream, "--out", str(tmp_path / query), "--query", query, "--token", own, *extra,
        ]  # fmt: skip
        done = subprocess.run(
            args,
            capture_output=True,
            text=True,
            timeout=400,
            cwd=Path(__file__).parents[2],
            env={**os.environ, "STREAMPLANE_TOKEN": own},
        )
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads(done.stdout.strip().splitlines()[-1])

    got = job("cluster", "sp-cluster", "--max-records", "6000")
    assert got["terminated"] and got["error"] is None, got["error"]
    assert len(got["rows"]) == RECORDS and {v.encode() for v in got["rows"]} == EXPECTED
    lag_reaches_zero(address, "spark-cluster")

    stream_with_history(address, "sp-cluster-2")
    writes = issue_token("producer", "sink-job", streams=("sp-cluster-copy",))
    got = job("cluster-sink", "sp-cluster-2", "--sink", "sp-cluster-copy", "--sink-token", writes)
    assert got["terminated"] and got["error"] is None, got["error"]
    assert records_in(address, "sp-cluster-copy") == RECORDS
    assert read_back(address, "sp-cluster-copy", "sp-cluster-copy-reader", RECORDS) == EXPECTED
    lag_reaches_zero(address, "spark-cluster-sink")
