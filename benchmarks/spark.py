"""Spark: rows/s from the streamplane source into a `noop` sink on local[2], side by side with a trivial
in-memory Arrow data source that yields the same rows (the ceiling of Spark's Python data source path).

The stream gets ~100-byte records on 4 partitions of a local cluster (a coordinator and the cluster run in
their own processes). Each side runs one availableNow query into `noop`; rows/s is the rows read over the
time Spark spent in the batches that read them (progress' triggerExecution), so query start-up is left out
on both sides. The ceiling source yields, per partition, Arrow batches of the same schema and size as ours,
built once in memory. The best of the rounds is kept for each.

The last line is `spark_source_vs_ceiling=<ratio>`. Goal: >= 0.7. `--quick` runs in under 3 minutes
including Spark's start.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _local import coordinator_process, local_cluster, register_local
from decode import make_value

from streamplane.client import CoordinatorClient
from streamplane.log import configure_logging

PARTITIONS = 4
BATCH_ROWS = 10_000


def ceiling_source(rows_per_partition: int) -> type:
    """A Python streaming data source whose reader yields prebuilt Arrow batches: nothing to fetch or decode."""
    from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

    from streamplane.spark.source import SCHEMA

    class Part(InputPartition):
        def __init__(self, index: int) -> None:
            self.index = index

    class Reader(DataSourceStreamReader):
        def initialOffset(self) -> dict:  # noqa: N802
            return {"rows": 0}

        def latestOffset(self, start: dict | None = None, limit: object = None) -> dict:  # noqa: N802
            return {"rows": rows_per_partition}

        def partitions(self, start: dict, end: dict) -> list:
            return [Part(i) for i in range(PARTITIONS)] if end["rows"] > start["rows"] else []

        def read(self, partition: Part):  # type: ignore[no-untyped-def]
            import pyarrow as pa

            # ~100-byte JSON-like values, as the stream holds (built here: executors cannot import this file)
            values = pa.array(
                [
                    (b'{"ts":%d,"level":"info","svc":"api-%d","msg":"request served","id":%d}' % (i, i % 17, i)).ljust(
                        100
                    )
                    for i in range(BATCH_ROWS)
                ],
                pa.binary(),
            )
            batch = pa.RecordBatch.from_arrays(
                [
                    pa.repeat(pa.scalar("bench", pa.string()), BATCH_ROWS),
                    pa.repeat(pa.scalar("realtime", pa.string()), BATCH_ROWS),
                    pa.repeat(pa.scalar(1, pa.int32()), BATCH_ROWS),
                    pa.repeat(pa.scalar(partition.index, pa.int32()), BATCH_ROWS),
                    pa.array(range(BATCH_ROWS), pa.int64()),
                    pa.array([1_700_000_000_000_000] * BATCH_ROWS, pa.timestamp("us", tz="UTC")),
                    pa.nulls(BATCH_ROWS, pa.binary()),
                    values,
                ],
                names=["stream", "lane", "generation", "partition", "offset", "timestamp", "key", "value"],
            )
            left = rows_per_partition
            while left > 0:
                n = min(left, BATCH_ROWS)
                yield batch.slice(0, n)
                left -= n

    class Ceiling(DataSource):
        @classmethod
        def name(cls) -> str:
            return "arrowceiling"

        def schema(self) -> str:
            return SCHEMA

        def streamReader(self, schema: object) -> Reader:  # noqa: N802
            return Reader()

    return Ceiling


def local_spark(jars: list[Path] | tuple[Path, ...] = ()) -> Any:
    """A quiet local[2] SparkSession with `format("streamplane")` registered (and `jars` on its classpath)."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_CONF_DIR", str(Path(__file__).resolve().parent.parent / "tests" / "spark_conf"))
    from pyspark.sql import SparkSession

    from streamplane.spark import register

    builder = SparkSession.builder.master("local[2]")
    if jars:
        builder = builder.config("spark.jars", ",".join(str(j) for j in jars))
    spark = builder.config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false").getOrCreate()
    register(spark)
    return spark


def streamplane_stream(spark: Any, address: str, stream: str, group: str) -> Any:
    """A streaming DataFrame of `stream` read by `group` through our source."""
    return (
        spark.readStream.format("streamplane")
        .option("coordinator", address)
        .option("stream", stream)
        .option("group", group)
        .load()
    )


def timed_rows_per_s(df: object, checkpoint: str) -> float:
    query = df.writeStream.format("noop").option("checkpointLocation", checkpoint).trigger(availableNow=True).start()  # type: ignore[attr-defined]
    query.awaitTermination()
    progress = [p for p in query.recentProgress if p["numInputRows"]]
    rows = sum(p["numInputRows"] for p in progress)
    seconds = sum(p["durationMs"]["triggerExecution"] for p in progress) / 1000
    return rows / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer rows and rounds (under 3 minutes)")
    args = parser.parse_args()
    configure_logging("warning")
    per_partition = 60_000 if args.quick else 120_000  # the local cluster keeps ~5 MiB of batches per partition
    rounds = 3 if args.quick else 5
    total = per_partition * PARTITIONS
    started = time.monotonic()
    with (
        tempfile.TemporaryDirectory() as tmp,
        local_cluster(brokers=1) as (bootstrap, control),
        coordinator_process(tmp + "/db", control) as address,
    ):
        with CoordinatorClient(address) as client:
            register_local(client, bootstrap, control)
            client.create_stream("bench", PARTITIONS)
        from confluent_kafka import Producer

        producer = Producer(
            {"bootstrap.servers": bootstrap, "compression.type": "zstd", "linger.ms": 50, "batch.size": 1_000_000}
        )
        rng = random.Random(1)
        for i in range(total):
            producer.produce("sp.bench.realtime.g1", make_value(i, rng), partition=i % PARTITIONS)
            if i % 50_000 == 0:
                producer.poll(0)
        producer.flush(60)
        print(f"{total:,} rows of ~100 bytes on {PARTITIONS} partitions; starting Spark", flush=True)

        spark = local_spark()
        spark.dataSource.register(ceiling_source(per_partition))
        print(f"Spark ready after {time.monotonic() - started:.0f} s", flush=True)
        ours, ceiling = [], []
        for r in range(rounds):
            ours.append(timed_rows_per_s(streamplane_stream(spark, address, "bench", f"bench-{r}"), f"{tmp}/ours-{r}"))
            ceiling.append(timed_rows_per_s(spark.readStream.format("arrowceiling").load(), f"{tmp}/ceil-{r}"))
            print(
                f"round {r + 1}: streamplane {ours[-1]:>12,.0f} rows/s   ceiling {ceiling[-1]:>12,.0f} rows/s",
                flush=True,
            )
        spark.stop()
    print(
        f"best: streamplane source {max(ours):,.0f} rows/s, in-memory Arrow source {max(ceiling):,.0f} rows/s "
        f"(goal >= 0.7x); {time.monotonic() - started:.0f} s in all"
    )
    print(f"spark_source_vs_ceiling={max(ours) / max(ceiling):.2f}")


if __name__ == "__main__":
    main()
