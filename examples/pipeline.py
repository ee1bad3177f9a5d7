"""A Spark pipeline on streamplane: read a stream, count its records per minute and lane, and write the counts
both to another stream (as JSON records keyed by the minute) and to parquet.

    streamplane dev                       # in another terminal: a coordinator and two local clusters
    streamplane stream create logs --partitions 4
    streamplane stream create logs-per-minute --partitions 1
    python examples/pipeline.py --source logs --sink logs-per-minute --out /tmp/per-minute --available-now

Counts are emitted in update mode: each micro-batch writes the minutes it changed, so a minute may be written
again with a higher count (readers keep the last one per key). foreachBatch writes each batch to parquet and
to the stream; a replayed batch is written again, with the same batch id in the parquet rows.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as sf

from streamplane.spark import register


def per_minute(events: DataFrame) -> DataFrame:
    """Records per minute of ingestion time and lane."""
    return events.groupBy(sf.window("timestamp", "1 minute").alias("minute"), "lane").count()


def start(
    spark: SparkSession,
    coordinator: str,
    source: str,
    sink: str,
    out: str,
    checkpoint: str,
    *,
    available_now: bool = False,
) -> Any:
    """Start the pipeline; returns its StreamingQuery."""
    events = (
        spark.readStream.format("streamplane")
        .option("coordinator", coordinator)
        .option("stream", source)
        .option("maxRecordsPerTrigger", "100000")
        .load()
    )

    def write(batch: DataFrame, batch_id: int) -> None:
        rows = batch.select(sf.col("minute.start").alias("minute"), "lane", "count", sf.lit(batch_id).alias("batch_id"))
        rows.write.mode("append").parquet(out)
        (
            rows.select(
                sf.col("minute").cast("string").cast("binary").alias("key"),
                sf.to_json(sf.struct("minute", "lane", "count")).cast("binary").alias("value"),
            )
            .write.format("streamplane")
            .option("coordinator", coordinator)
            .option("stream", sink)
            .mode("append")
            .save()
        )

    writer = (
        per_minute(events)
        .writeStream.outputMode("update")
        .foreachBatch(write)
        .option("checkpointLocation", checkpoint)
        .queryName(f"{source}-per-minute")
    )
    writer = writer.trigger(availableNow=True) if available_now else writer.trigger(processingTime="10 seconds")
    return writer.start()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--coordinator", default=os.environ.get("STREAMPLANE_COORDINATOR", "127.0.0.1:7400"))
    parser.add_argument("--source", default="logs")
    parser.add_argument("--sink", default="logs-per-minute")
    parser.add_argument("--out", default="/tmp/streamplane-per-minute")
    parser.add_argument("--checkpoint", default=None, help="default: <out>.checkpoint")
    parser.add_argument("--available-now", action="store_true", help="process what is there, then stop")
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = SparkSession.builder.master("local[2]").appName("streamplane-pipeline").getOrCreate()
    register(spark)
    query = start(
        spark,
        args.coordinator,
        args.source,
        args.sink,
        args.out,
        args.checkpoint or args.out + ".checkpoint",
        available_now=args.available_now,
    )
    query.awaitTermination()


if __name__ == "__main__":
    main()
