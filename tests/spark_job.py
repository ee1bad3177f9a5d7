"""A Spark job the tests run in its own process, against any master (a standalone cluster's `spark://…`): a
SparkSession cannot change its master inside one Python process, and the suite's session is `local[2]`.

    python -m tests.spark_job --master spark://127.0.0.1:7077 --coordinator HOST:PORT --stream s --out DIR \
        --query NAME [--max-records N] [--sink STREAM] [--token T] [--sink-token T]

--token is the source's `token` option and --sink-token the sink's; the progress listener, in this (the
driver's) process, takes its token from STREAMPLANE_TOKEN, as any driver does.

Reads the stream with trigger(availableNow=True) into parquet at DIR/data (or into the sink stream), waits for
the query to end, and prints one JSON line: {"terminated": bool, "batches": n, "rows": [...values...]}.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--master", required=True)
    parser.add_argument("--coordinator", required=True)
    parser.add_argument("--stream", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--query", required=True)
    parser.add_argument("--max-records", default="")
    parser.add_argument("--sink", default="")
    parser.add_argument("--token", default="")
    parser.add_argument("--sink-token", default="")
    parser.add_argument("--timeout", type=float, default=240)
    args = parser.parse_args()

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # PySpark's driver takes the executors' Python from PYSPARK_PYTHON only (spark.pyspark.python is not read
    # there): without it they run `python3` from PATH, which has no streamplane, and register() says so.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["SPARK_CONF_DIR"] = str(Path(__file__).with_name("spark_conf"))
    from pyspark.sql import SparkSession

    from streamplane.spark import register

    spark = (
        SparkSession.builder.master(args.master)
        .appName(f"streamplane-tests-{args.query}")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.executor.memory", "1g")
        .getOrCreate()
    )
    register(spark)
    reader = spark.readStream.format("streamplane").option("coordinator", args.coordinator)
    reader = reader.option("stream", args.stream)
    if args.token:
        reader = reader.option("token", args.token)
    if args.max_records:
        reader = reader.option("maxRecordsPerTrigger", args.max_records)
    df = reader.load()
    out = Path(args.out)
    if args.sink:
        writer = df.select("key", "value").writeStream.format("streamplane")
        writer = writer.option("coordinator", args.coordinator).option("stream", args.sink)
        if args.sink_token:
            writer = writer.option("token", args.sink_token)
    else:
        writer = df.writeStream.format("parquet").option("path", str(out / "data"))
    query = (
        writer.option("checkpointLocation", str(out / "checkpoint"))
        .queryName(args.query)
        .trigger(availableNow=True)
        .start()
    )
    terminated = query.awaitTermination(args.timeout)
    if not terminated:
        query.stop()
    error = query.exception()
    rows = [] if args.sink else [bytes(r.value).decode() for r in spark.read.parquet(str(out / "data")).collect()]
    result = {
        "terminated": bool(terminated),
        "error": str(error) if error else None,
        "batches": len(query.recentProgress),
        "rows": rows,
    }
    print(json.dumps(result), flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
