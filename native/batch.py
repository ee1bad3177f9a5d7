"""The decoder's output: a columnar batch of records, with cheap Arrow conversion and light record objects."""

from __future__ import annotations

from array import array
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple, cast

from streamplane.errors import (
    CrcMismatchError,
    DecodeError,
    DecodeLimitExceeded,
    DecompressionError,
    MalformedBatchError,
    UnsupportedCodecError,
    UnsupportedMagicError,
)
from streamplane.native._loaded import USE_NATIVE, _native

# Error kinds of the decoder contract (native/src/spdecode.h) -> exception classes.
_ERRORS: dict[int, type[DecodeError]] = {
    1: MalformedBatchError,
    2: CrcMismatchError,
    3: UnsupportedMagicError,
    4: UnsupportedCodecError,
    5: DecompressionError,
    6: DecodeLimitExceeded,
    7: DecodeError,
}
STOP_END, STOP_INCOMPLETE, STOP_BUDGET, STOP_ERROR = range(4)
CODEC_NAMES = ("none", "gzip", "snappy", "lz4", "zstd")
BATCH_FIELDS = 18
"""int64s a batch in the decoder's `batches` column: BatchInfo's fields, in order."""


def error_from_tuple(error: tuple[Any, ...]) -> DecodeError:
    """The exception for an `error` entry (kind, message, position, base_offset, last_offset, size, limit)."""
    kind, message, position, base_offset, last_offset, size, limit = error
    cls = _ERRORS.get(kind, DecodeError)
    if cls is DecodeLimitExceeded:
        return DecodeLimitExceeded(
            message, position=position, base_offset=base_offset, last_offset=last_offset, size=size, limit=limit
        )
    return cls(message, position=position, base_offset=base_offset, last_offset=last_offset)


@dataclass(frozen=True, slots=True)
class BatchInfo:
    """Facts about one record batch of the input (the decoder's `batches` column holds them as BATCH_FIELDS int64s
    a batch, in this order)."""

    base_offset: int
    last_offset: int
    partition_leader_epoch: int
    first_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int
    attributes: int
    codec: int
    transactional: bool
    control: bool
    aborted: bool
    log_append_time: bool
    position: int
    compressed_size: int
    decompressed_size: int

    @property
    def codec_name(self) -> str:
        return CODEC_NAMES[self.codec] if self.codec < len(CODEC_NAMES) else f"codec-{self.codec}"


class PyRecord(NamedTuple):
    """One decoded record (the pure-Python twin of the C extension's Record)."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]


Record: Any = _native.Record if _native is not None else PyRecord
"""One decoded record: a named tuple (offset, timestamp in ms, key, value, headers)."""


def _nulls(bitmap: bytes, n: int) -> set[int]:
    """Indices of the cleared bits among the first n of an Arrow validity bitmap."""
    full = n >> 3
    nulls = set()
    for byte_index, byte in enumerate(bitmap[: (n + 7) >> 3]):
        if byte == 0xFF and byte_index < full:
            continue
        for bit in range(8):
            i = (byte_index << 3) | bit
            if i < n and not byte >> bit & 1:
                nulls.add(i)
    return nulls


def _utf8(count: int, offsets: Any, data: Any) -> Any:
    """Header keys as Arrow strings, from their offsets and bytes. Kafka does not enforce UTF-8, so invalid
    sequences are replaced with U+FFFD, as Java's client and `records()` do. ASCII keys (the rule) are taken as
    they are: they are UTF-8, and checking that costs less than Arrow's cast, which took about half of a small
    batch's conversion. Other valid keys are cast without copying."""
    import pyarrow as pa

    if bytes(data).isascii():
        return pa.Array.from_buffers(pa.string(), count, [None, pa.py_buffer(offsets), pa.py_buffer(data)])
    keys = pa.Array.from_buffers(pa.binary(), count, [None, pa.py_buffer(offsets), pa.py_buffer(data)])
    try:
        return keys.cast(pa.string())
    except pa.ArrowInvalid:
        return pa.array([k.decode("utf-8", "replace") for k in keys.to_pylist()], pa.string())


_CACHE: dict[str, Any] = {}


def _header_type(pa: Any) -> Any:
    if "type" not in _CACHE:
        _CACHE["type"] = pa.struct([("key", pa.string()), ("value", pa.binary())])
    return _CACHE["type"]


def _no_headers(pa: Any) -> Any:
    """An empty header entries array (built once)."""
    if "empty" not in _CACHE:
        _CACHE["empty"] = pa.array([], _header_type(pa))
    return _CACHE["empty"]


class DecodedBatch:
    """The records decoded from one record set, as columns.

    Attributes:
        count: records in the batch (control and aborted records, and those a `where` predicate left out, are
            not included).
        next_offset: the offset to fetch next (after the last decoded batch), -1 if none was decoded.
        consumed: input bytes taken by the decoded batches.
        incomplete: the input ended in a truncated batch, as Kafka returns at the end of a fetch.
        budget_exhausted: the next batch did not fit in what was left of the call's decompression budget.
        error: the DecodeError that stopped decoding after at least one good batch (the next call with the
            next offset raises it); None otherwise.
    """

    def __init__(self, columns: dict[str, Any]) -> None:
        self._c = columns
        self.count: int = columns["count"]
        self.filtered: int = columns.get("filtered", 0)
        """Records a `where` predicate left out (not in `count`)."""
        self.foreign: int = columns.get("foreign", 0)
        """Records outside a `mine` predicate: another reader's (not in `count`, nor in `filtered`)."""
        self.next_offset: int = columns["next_offset"]
        self.consumed: int = columns["consumed"]
        stop = columns["stop"]
        self.incomplete = stop == STOP_INCOMPLETE
        self.budget_exhausted = stop == STOP_BUDGET
        self.error: DecodeError | None = error_from_tuple(columns["error"]) if columns["error"] else None

    def __len__(self) -> int:
        return self.count

    @property
    def nbytes(self) -> int:
        """Bytes its column buffers hold: the memory the decoded records take."""
        buffers = (v for v in self._c.values() if not (v is None or isinstance(v, int | list | tuple)))
        return sum(memoryview(v).nbytes for v in buffers)

    @property
    def filtered_ranges(self) -> list[tuple[int, int]]:
        """The offsets a `where` predicate left out, as [start, end) ranges in order."""
        return self._ranges("filtered_ranges")

    @property
    def foreign_ranges(self) -> list[tuple[int, int]]:
        """The offsets outside a `mine` predicate (another reader's), as [start, end) ranges in order."""
        return self._ranges("foreign_ranges")

    def _ranges(self, column: str) -> list[tuple[int, int]]:
        raw = self._c.get(column)
        if not raw:
            return []
        flat = memoryview(raw).cast("B").cast("q").tolist()
        return list(zip(flat[0::2], flat[1::2], strict=True))

    @property
    def last_leader_epoch(self) -> int:
        """The partition leader epoch of the last batch decoded (-1 when none was)."""
        rows = self._ints("batches", "q")
        return int(rows[len(rows) - BATCH_FIELDS + 2]) if len(rows) else -1

    @property
    def batches(self) -> list[BatchInfo]:
        """Facts about each decoded record batch, in input order (built when asked: the decoder hands them over
        as one buffer of int64s, BATCH_FIELDS a batch)."""
        flat = self._ints("batches", "q").tolist()
        return [
            BatchInfo(*row[:11], *map(bool, row[11:15]), *row[15:])  # type: ignore[arg-type]
            for row in (flat[i : i + BATCH_FIELDS] for i in range(0, len(flat), BATCH_FIELDS))
        ]

    @property
    def columns(self) -> dict[str, Any]:
        """The raw columns of the decoder contract (buffers and counts; see native/src/spdecode.h)."""
        return self._c

    def _ints(self, name: str, fmt: str) -> memoryview:
        raw: Any = memoryview(self._c[name]).cast("B")  # typeshed knows cast() by literal formats only
        return cast("memoryview[int]", raw.cast(fmt))

    @property
    def offsets(self) -> memoryview:
        """int64 offsets, one per record."""
        return self._ints("offsets", "q")

    @property
    def timestamps(self) -> memoryview:
        """int64 timestamps in milliseconds, one per record."""
        return self._ints("timestamps", "q")

    def records(self) -> Iterator[Any]:
        """The records as light named tuples (`Record`), built in C when the extension is loaded."""
        if USE_NATIVE and _native is not None:
            return iter(_native.records(self._c))
        return self.records_python()

    def records_python(self) -> Iterator[PyRecord]:
        """`records()` in pure Python: the fallback, and the tests' oracle for the C version."""
        c, n = self._c, self.count
        if n == 0:
            return
        offsets, timestamps = self.offsets.tolist(), self.timestamps.tolist()
        keys, values = bytes(c["keys"]), bytes(c["values"])
        ko, vo = self._ints("key_offsets", "i").tolist(), self._ints("value_offsets", "i").tolist()
        key_nulls, value_nulls = _nulls(bytes(c["key_valid"]), n), _nulls(bytes(c["value_valid"]), n)
        ho = self._ints("header_offsets", "i").tolist()
        hk, hv = bytes(c["hkeys"]), bytes(c["hvalues"])
        hko, hvo = self._ints("hkey_offsets", "i").tolist(), self._ints("hvalue_offsets", "i").tolist()
        hnulls = _nulls(bytes(c["hvalue_valid"]), c["header_count"])
        for i in range(n):
            key = None if i in key_nulls else keys[ko[i] : ko[i + 1]]
            value = None if i in value_nulls else values[vo[i] : vo[i + 1]]
            headers = tuple(
                (hk[hko[j] : hko[j + 1]].decode("utf-8", "replace"), None if j in hnulls else hv[hvo[j] : hvo[j + 1]])
                for j in range(ho[i], ho[i + 1])
            )
            yield PyRecord(offsets[i], timestamps[i], key, value, headers)

    def to_arrow(self) -> Any:
        """A pyarrow.RecordBatch (offset, timestamp, key, value, headers) over the decoder's buffers, no copies."""
        import pyarrow as pa

        c, n = self._c, self.count

        def buf(name: str) -> Any:
            return pa.py_buffer(c[name])

        offsets = pa.Array.from_buffers(pa.int64(), n, [None, buf("offsets")])
        timestamps = pa.Array.from_buffers(pa.timestamp("ms", tz="UTC"), n, [None, buf("timestamps")])
        keys = pa.Array.from_buffers(pa.binary(), n, [buf("key_valid"), buf("key_offsets"), buf("keys")])
        values = pa.Array.from_buffers(pa.binary(), n, [buf("value_valid"), buf("value_offsets"), buf("values")])
        h = c["header_count"]
        if h:
            hkeys = _utf8(h, c["hkey_offsets"], c["hkeys"])
            hvalues = pa.Array.from_buffers(
                pa.binary(), h, [buf("hvalue_valid"), buf("hvalue_offsets"), buf("hvalues")]
            )
            entries = pa.StructArray.from_arrays([hkeys, hvalues], fields=list(_header_type(pa)))
        else:  # the common case: no headers at all
            entries = _no_headers(pa)
        headers = pa.ListArray.from_arrays(
            pa.Array.from_buffers(pa.int32(), n + 1, [None, buf("header_offsets")]), entries
        )
        return pa.RecordBatch.from_arrays(
            [offsets, timestamps, keys, values, headers], names=["offset", "timestamp", "key", "value", "headers"]
        )


_STRINGS: dict[str, Any] = {}
"""Constant string columns (stream and lane names) by value, sliced for each batch; few distinct values."""
_STRINGS_MAX = 256


def _constant_string(pa: Any, value: str, n: int) -> Any:
    column = _STRINGS.get(value)
    if column is None or len(column) < n:
        if len(_STRINGS) >= _STRINGS_MAX:
            _STRINGS.clear()
        column = _STRINGS[value] = pa.repeat(pa.scalar(value, pa.string()), max(n, 4096))
    return column.slice(0, n)


def _constant_int32(pa: Any, value: int, n: int) -> Any:
    return pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(array("i", [value]) * n)])


def with_origin(
    batch: Any,
    stream: str,
    lane: str,
    generation: int,
    partition: int,
    *,
    headers: bool = True,
    attempt: int = 0,
    micros: bool = True,
) -> Any:
    """A decoded Arrow batch (`DecodedBatch.to_arrow`) with where its records come from in front: stream,
    lane, generation, partition, then offset, timestamp (microseconds, as Spark wants, unless `micros` is
    False), key, value, and headers when asked; `attempt` (when > 0) adds an attempt column last.
    The constant columns cost a few microseconds a batch, whatever the number of partitions."""
    import pyarrow as pa

    n = batch.num_rows
    ts = batch.column(1)
    columns = [
        _constant_string(pa, stream, n),
        _constant_string(pa, lane, n),
        _constant_int32(pa, generation, n),
        _constant_int32(pa, partition, n),
        batch.column(0),
        ts.cast(pa.timestamp("us", tz="UTC")) if micros else ts,
        batch.column(2),
        batch.column(3),
    ]
    names = ["stream", "lane", "generation", "partition", "offset", "timestamp", "key", "value"]
    if headers:
        columns.append(batch.column(4))
        names.append("headers")
    if attempt:
        columns.append(_constant_int32(pa, attempt, n))
        names.append("attempt")
    return pa.RecordBatch.from_arrays(columns, names=names)
