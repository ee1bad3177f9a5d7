"""The `streamplane` data source: `spark.readStream.format("streamplane")`, `spark.read.format("streamplane")`
(a window of a stream as one batch) and `df.writeStream.format("streamplane")` (register it first with
`streamplane.spark.register(spark)`)."""

from __future__ import annotations

from pyspark.sql.datasource import DataSource
from pyspark.sql.types import StructType

from streamplane.errors import InvalidArgumentError, NotFoundError
from streamplane.spark.batch import BatchReader, PushdownBatchReader
from streamplane.spark.options import Access, SinkOptions, SourceOptions
from streamplane.spark.reader import StreamReader, lanes_of
from streamplane.spark.writer import BatchWriter, StreamWriter

SCHEMA = (
    "stream string, lane string, generation int, partition int, offset long, timestamp timestamp, "
    "key binary, value binary"
)
HEADERS = ", headers array<struct<key: string, value: binary>>"


class StreamplaneDataSource(DataSource):
    """Streams as a Spark source and sink. Options: see streamplane.spark.options."""

    @classmethod
    def name(cls) -> str:
        return "streamplane"

    def schema(self) -> str:
        opts = SourceOptions.parse(self.options)
        _check_lanes(opts.access, opts.stream, opts.lanes)  # at load(): a bad name fails there
        return SCHEMA + (HEADERS if opts.include_headers else "")

    def streamReader(self, schema: StructType) -> StreamReader:
        return StreamReader(SourceOptions.parse(self.options))

    def reader(self, schema: StructType) -> BatchReader:
        opts = SourceOptions.parse(self.options)
        return PushdownBatchReader(opts) if opts.pushdown else BatchReader(opts)

    def streamWriter(self, schema: StructType, overwrite: bool) -> StreamWriter:
        return StreamWriter(*self._sink(schema))

    def writer(self, schema: StructType, overwrite: bool) -> BatchWriter:
        return BatchWriter(*self._sink(schema))

    def _sink(self, schema: StructType) -> tuple[SinkOptions, bool, bool]:
        opts = SinkOptions.parse(self.options)
        names = set(schema.fieldNames())
        if "value" not in names:
            raise InvalidArgumentError(f"the streamplane sink needs a value column; the DataFrame has {sorted(names)}")
        _check_lanes(opts.access, opts.stream, (opts.lane,), allow_dlq=True)
        return opts, "key" in names, "headers" in names


def _check_lanes(access: Access, stream: str, lanes: tuple[str, ...], *, allow_dlq: bool = False) -> None:
    with access.client(retries=1) as client:
        described = client.describe_stream(stream)
    for lane in lanes:
        described.require_lane(lane)
    if not lanes_of(described, lanes) and not allow_dlq:
        raise NotFoundError(f"stream {stream!r} has no lane to read")
