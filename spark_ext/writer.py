"""The sink: writes a DataFrame's `key`, `value` and optional `headers` to a stream lane through the Producer,
at least once (a replayed batch is written again). Streaming (`writeStream`) and batch (`write`, for
foreachBatch) share one write path."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter, WriterCommitMessage

from streamplane.client import Producer
from streamplane.spark.options import SinkOptions


@dataclass
class Written(WriterCommitMessage):
    records: int


class _Writing:
    def __init__(self, opts: SinkOptions, has_key: bool, has_headers: bool) -> None:
        self.opts = opts
        self.has_key = has_key
        self.has_headers = has_headers

    def write(self, iterator: Iterator[Any]) -> Written:
        count = 0
        access = self.opts.access
        settings = access.kafka_settings()
        with Producer(access.coordinator or None, token=access.token, tls=access.tls, **settings) as producer:
            for row in iterator:
                headers = [(h["key"], h["value"]) for h in row["headers"] or ()] if self.has_headers else None
                producer.produce(
                    self.opts.stream,
                    _bytes(row["value"]),
                    key=_bytes(row["key"]) if self.has_key else None,
                    lane=self.opts.lane,
                    headers=headers,
                )
                count += 1
            left = producer.flush(120)
        if left:
            raise RuntimeError(f"{left} records were not acknowledged by {self.opts.stream}/{self.opts.lane}")
        return Written(count)


class StreamWriter(_Writing, DataSourceStreamWriter):
    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        pass  # every task flushed its records before it reported: nothing left to do

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        pass  # records already written stay written (at least once); Spark replays the batch


class BatchWriter(_Writing, DataSourceWriter):
    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        pass

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        pass


def _bytes(value: Any) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    return str(value).encode()
