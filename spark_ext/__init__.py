"""streamplane for Spark Structured Streaming: a source and a sink on PySpark's Python Data Source API.

    from streamplane.spark import register
    register(spark)
    df = (spark.readStream.format("streamplane")
          .option("coordinator", "127.0.0.1:7400").option("stream", "logs").load())

`register` adds the data source and the listener that records each query's progress in the commit log.
"""

from __future__ import annotations

from typing import Any

from streamplane.spark.progress import ProgressListener
from streamplane.spark.source import StreamplaneDataSource

_listening: set[int] = set()


def register(spark: Any) -> None:
    """Make format("streamplane") available in this session and record queries' progress (idempotent)."""
    spark.dataSource.register(StreamplaneDataSource)
    if id(spark) not in _listening:
        spark.streams.addListener(ProgressListener())
        _listening.add(id(spark))


__all__ = ["ProgressListener", "StreamplaneDataSource", "register"]
