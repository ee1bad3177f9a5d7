"""The pure-Python reference decoder: the same contract as the C core (`decode_columns`), written for
clarity. It is the tests' oracle, and the fallback when the extension is not built or
STREAMPLANE_PURE_PYTHON=1.

The result is a dict of columns (see `streamplane.native.batch.DecodedBatch`), with an `error` tuple
(kind, message, position, base_offset, last_offset, size, limit) when decoding stopped at a bad batch.
"""

from __future__ import annotations

import io
import struct
import zlib
from array import array
from collections.abc import Callable
from functools import partial
from typing import Any

from streamplane.predicate import Predicate, matches

# Error kinds and stop reasons, as in native/src/spdecode.h.
OK, CORRUPT, CRC, MAGIC, CODEC, DECOMPRESS, LIMIT, NOMEM = range(8)
STOP_END, STOP_INCOMPLETE, STOP_BUDGET, STOP_ERROR = range(4)

LOG_OVERHEAD = 12
HEADER_SIZE = 61
MIN_RECORD_BYTES = 7
CODECS = ("none", "gzip", "snappy", "lz4", "zstd", "?", "?", "?")
XERIAL_MAGIC = b"\x82SNAPPY\x00"
_HEADER = struct.Struct(">qiibIhiqqqhii")
_I64 = (1 << 64) - 1


def _wrap(value: int) -> int:
    """Two's-complement int64 wrap-around, as the C core (and Java) do."""
    value &= _I64
    return value - (1 << 64) if value >= 1 << 63 else value


def records_end(data: bytes | memoryview) -> int:
    """The offset after the last whole batch of a record set, from the batches' headers alone (nothing is
    decompressed or checked); -1 when it holds none. Where its decoding ends when nothing in it is bad."""
    pos, n, end = 0, len(data), -1
    while n - pos >= 27:  # up to and with the last offset delta
        base, length = struct.unpack_from(">qi", data, pos)
        total = length + LOG_OVERHEAD
        if length < HEADER_SIZE - LOG_OVERHEAD or total > n - pos or struct.unpack_from(">b", data, pos + 16)[0] != 2:
            break
        (delta,) = struct.unpack_from(">i", data, pos + 23)
        if delta < 0:
            break
        end = _wrap(_wrap(base + delta) + 1)
        pos += total
    return end


def _crc_table() -> list[int]:
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_CRC_TABLE = _crc_table()


def crc32c(data: bytes | memoryview) -> int:
    """CRC32C (Castagnoli) of `data`."""
    crc = 0xFFFFFFFF
    table = _CRC_TABLE
    for byte in bytes(data):
        crc = (crc >> 8) ^ table[(crc ^ byte) & 0xFF]
    return crc ^ 0xFFFFFFFF


class _StopError(Exception):
    def __init__(self, kind: int, message: str, position: int, base_offset: int = -1) -> None:
        super().__init__(message)
        self.kind, self.message, self.position, self.base_offset = kind, message, position, base_offset


class _LimitError(Exception):
    pass


# -- bounded decompression ---------------------------------------------------------------------------------------


STEP = 1 << 20  # inflate in steps into one growing buffer: the codecs' own buffers would double peak memory


def _gzip(data: bytes, limit: int) -> bytes:
    out = bytearray()
    d, pending = zlib.decompressobj(15 + 32), data
    try:
        while True:
            chunk = d.decompress(pending, min(STEP, limit + 1 - len(out)))
            out += chunk
            if len(out) > limit:
                raise _LimitError(f"inflates past the limit of {limit} bytes")
            pending = d.unconsumed_tail
            if d.eof:
                if not d.unused_data:
                    return bytes(out)
                d, pending = zlib.decompressobj(15 + 32), d.unused_data  # another gzip member follows
            elif not pending and not chunk:
                raise ValueError("gzip data is truncated")
    except zlib.error as err:
        raise ValueError(f"gzip data is invalid: {err}") from err


def _zstd(data: bytes, limit: int) -> bytes:
    import zstandard

    if not data:
        raise ValueError("zstd data is truncated")
    try:
        declared = zstandard.frame_content_size(data)
    except zstandard.ZstdError:
        declared = -1  # an unreadable frame header: decompression says what is wrong
    if declared > limit:
        raise _LimitError(f"declares {declared} decompressed bytes, past the limit of {limit} bytes")
    # Any declared window: the bounded read below is what caps memory (as in the C core).
    decompressor = zstandard.ZstdDecompressor(max_window_size=1 << 31)
    try:
        # First a bounded read, to stop a bomb at the limit ...
        with decompressor.stream_reader(io.BytesIO(data), read_across_frames=True) as reader:
            out = reader.read(limit + 1)
            while len(out) <= limit:
                more = reader.read(limit + 1 - len(out))
                if not more:
                    break
                out += more
        if len(out) > limit:
            raise _LimitError(f"inflates past the limit of {limit} bytes")
        # ... then, with the output known to fit, frame by frame to notice truncated frames.
        out, rest = b"", data
        while rest:
            frame = decompressor.decompressobj()
            out += frame.decompress(rest)
            if not frame.eof:
                raise ValueError("zstd data is truncated")
            rest = frame.unused_data
    except zstandard.ZstdError as err:
        if "window" in str(err).lower():
            raise _LimitError(f"inflates past the limit of {limit} bytes") from err
        raise ValueError(f"zstd data is invalid: {err}") from err
    return out


def _lz4(data: bytes, limit: int) -> bytes:
    import lz4.frame

    if not data:
        raise ValueError("lz4 data is truncated")
    out = bytearray()
    d, pending = lz4.frame.LZ4FrameDecompressor(), data
    try:
        while True:
            chunk = d.decompress(pending, max_length=min(STEP, limit + 1 - len(out)))
            out += chunk
            if len(out) > limit:
                raise _LimitError(f"inflates past the limit of {limit} bytes")
            pending = b""
            if d.eof:
                if not d.unused_data:
                    return bytes(out)
                d, pending = lz4.frame.LZ4FrameDecompressor(), d.unused_data  # another frame follows
            elif d.needs_input and not chunk:
                raise ValueError("lz4 data is truncated")
    except RuntimeError as err:
        raise ValueError(f"lz4 data is invalid: {err}") from err


def _snappy_block(data: bytes, limit: int, have: int) -> bytes:
    import cramjam

    n, shift, i = 0, 0, 0
    while True:  # the uncompressed length: an unsigned varint of at most 5 bytes
        if i >= len(data) or i >= 5:
            raise ValueError("snappy data is invalid: bad length header")
        b = data[i]
        n |= (b & 0x7F) << shift
        i += 1
        shift += 7
        if not b & 0x80:
            break
    if n > 0xFFFFFFFF:
        raise ValueError("snappy data is invalid: bad length header")
    if n > limit - have:
        raise _LimitError(f"declares {n} more decompressed bytes, past the limit of {limit} bytes")
    try:
        out = bytes(cramjam.snappy.decompress_raw(data))
    except Exception as err:
        raise ValueError("snappy data is invalid") from err
    if len(out) != n:
        raise ValueError("snappy data is invalid")
    return out


def _snappy(data: bytes, limit: int) -> bytes:
    if len(data) < 16 or data[:8] != XERIAL_MAGIC:
        return _snappy_block(data, limit, 0)
    out = bytearray()
    pos = 16
    while pos < len(data):
        if len(data) - pos < 4:
            raise ValueError("xerial snappy block header is truncated")
        (n,) = struct.unpack_from(">I", data, pos)
        pos += 4
        if n > len(data) - pos:
            raise ValueError(f"xerial snappy block of {n} bytes overruns the data")
        out += _snappy_block(data[pos : pos + n], limit, len(out))
        pos += n
    return bytes(out)


_DECOMPRESSORS = {1: _gzip, 2: _snappy, 3: _lz4, 4: _zstd}


# -- records ---------------------------------------------------------------------------------------------------------


def _varint(data: bytes, pos: int, end: int, maxbytes: int) -> tuple[int, int]:
    value, shift = 0, 0
    for i in range(maxbytes):
        if pos >= end:
            raise IndexError("varint runs past the end")
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            value &= _I64
            return _wrap((value >> 1) ^ -(value & 1)), pos
        _ = i
    raise IndexError("varint too long")


def _field(data: bytes, p: int, end: int, what: str, bad: Callable[[str, int], Exception]) -> tuple[bytes | None, int]:
    """A length-prefixed field ending by `end`: (None, p) for length -1."""
    start = p
    try:
        flen, p = _varint(data, p, end, 5)
    except IndexError:
        raise bad(what, start) from None
    if flen < -1 or flen > end - p:
        raise bad(what, start)
    if flen < 0:
        return None, p
    return data[p : p + flen], p + flen


class _Columns:
    def __init__(self) -> None:
        self.count = 0
        self.filtered = 0
        self.filtered_ranges: list[list[int]] = []
        self.foreign = 0
        self.foreign_ranges: list[list[int]] = []
        self.offsets = array("q")
        self.timestamps = array("q")
        self.key_offsets = array("i", [0])
        self.keys = bytearray()
        self.key_valid: list[bool] = []
        self.value_offsets = array("i", [0])
        self.values = bytearray()
        self.value_valid: list[bool] = []
        self.header_offsets = array("i", [0])
        self.hkey_offsets = array("i", [0])
        self.hkeys = bytearray()
        self.hvalue_offsets = array("i", [0])
        self.hvalues = bytearray()
        self.hvalue_valid: list[bool] = []

    def _columns(self) -> list[Any]:
        return [
            self.offsets,
            self.timestamps,
            self.key_offsets,
            self.keys,
            self.key_valid,
            self.value_offsets,
            self.values,
            self.value_valid,
            self.header_offsets,
            self.hkey_offsets,
            self.hkeys,
            self.hvalue_offsets,
            self.hvalues,
            self.hvalue_valid,
        ]

    def mark(self) -> tuple[Any, ...]:
        left_out = [
            (n, len(runs), [list(r) for r in runs[-1:]])  # the last run, which the batch may extend
            for n, runs in ((self.filtered, self.filtered_ranges), (self.foreign, self.foreign_ranges))
        ]
        return self.count, left_out, [len(c) for c in self._columns()]

    def roll_back(self, mark: tuple[Any, ...]) -> None:
        self.count, left_out, lens = mark
        (self.filtered, runs, last), (self.foreign, foreign_runs, foreign_last) = left_out
        del self.filtered_ranges[runs:]
        self.filtered_ranges[-1:] = last
        del self.foreign_ranges[foreign_runs:]
        self.foreign_ranges[-1:] = foreign_last
        for column, length in zip(self._columns(), lens, strict=True):
            del column[length:]


def _add_run(runs: list[list[int]], offset: int) -> None:
    """One more offset left out, in [start, end) runs: the last run goes on when it ends at `offset`."""
    if runs and runs[-1][1] == offset:
        runs[-1][1] = _wrap(offset + 1)
    else:
        runs.append([offset, _wrap(offset + 1)])


def _bitmap(bits: list[bool]) -> bytes:
    out = bytearray((len(bits) + 7) // 8)
    for i, bit in enumerate(bits):
        if bit:
            out[i >> 3] |= 1 << (i & 7)
    return bytes(out)


def _parse_records(
    cols: _Columns,
    info: dict[str, Any],
    data: bytes,
    emit: bool,
    records_pos: int,
    compressed: bool,
    min_offset: int,
    where: Predicate | None = None,
    partition: int = -1,
    mine: Predicate | None = None,
) -> int:
    """Parse a batch's records; append them to `cols` when `emit` (and, with `where`, the record matches it;
    one it does not is counted in `cols.filtered`; with `mine`, one outside it is another reader's, counted in
    `cols.foreign` and not matched against `where`). Returns the control type (-1 if none)."""
    n, end, pos = info["record_count"], len(data), 0
    bpos, base = info["position"], info["base_offset"]
    if n < 0 or n > end // MIN_RECORD_BYTES + (1 if end else 0):
        raise _StopError(
            CORRUPT, f"batch at byte {bpos} (base offset {base}) claims {n} records in {end} bytes", bpos + 57, base
        )
    control_type = -1
    for i in range(n):

        def bad(what: str, at: int, i: int = i) -> _StopError:
            if compressed:
                return _StopError(
                    CORRUPT,
                    f"record {i} of the batch at byte {bpos} (base offset {base}): {what}, at byte "
                    f"{at} of its decompressed records",
                    bpos,
                    base,
                )
            return _StopError(
                CORRUPT,
                f"record {i} of the batch at byte {bpos} (base offset {base}): {what}, at byte "
                f"{records_pos + at} of the input",
                records_pos + at,
                base,
            )

        at = pos  # errors point at the start of the field at fault
        try:
            length, pos = _varint(data, pos, end, 5)
        except IndexError:
            raise bad("bad record length", at) from None
        if length < MIN_RECORD_BYTES - 1 or length > end - pos:
            raise bad("bad record length", at)
        rec_end = pos + length
        p = pos + 1  # attributes
        pos = rec_end

        try:
            ts_delta, p = _varint(data, p, rec_end, 10)
        except IndexError:
            raise bad("bad timestamp delta", p) from None
        at = p
        try:
            off_delta, p = _varint(data, p, rec_end, 5)
        except IndexError:
            raise bad("bad offset delta", at) from None
        if off_delta < 0:
            raise bad("bad offset delta", at)
        key, p = _field(data, p, rec_end, "bad key length", bad)
        value, p = _field(data, p, rec_end, "bad value length", bad)
        at = p
        try:
            hcount, p = _varint(data, p, rec_end, 5)
        except IndexError:
            raise bad("bad header count", at) from None
        if hcount < 0 or hcount > (rec_end - p) // 2:
            raise bad("bad header count", at)
        if info["control"] and i == 0:
            control_type = struct.unpack_from(">h", key, 2)[0] if key is not None and len(key) >= 4 else -1
        headers = []
        for _ in range(hcount):
            at = p
            hk, p = _field(data, p, rec_end, "bad header key", bad)
            if hk is None:
                raise bad("bad header key", at)
            hv, p = _field(data, p, rec_end, "bad header value", bad)
            headers.append((hk, hv))
        if p != rec_end:
            raise bad("record length disagrees with its fields", p)
        ts = info["max_timestamp"] if info["log_append_time"] else _wrap(info["first_timestamp"] + ts_delta)
        record_offset = _wrap(base + off_delta)
        wanted = emit and record_offset >= min_offset
        if wanted and (where is not None or mine is not None):
            named = [(hk.decode("utf-8", "surrogateescape"), hv) for hk, hv in headers]
            holds = partial(
                matches, key=key, value=value, timestamp=ts, partition=partition, headers=named, offset=record_offset
            )
            if mine is not None and not holds(mine):
                wanted = False
                cols.foreign += 1
                _add_run(cols.foreign_ranges, record_offset)
            elif where is not None and not holds(where):
                wanted = False
                cols.filtered += 1
                _add_run(cols.filtered_ranges, record_offset)
        if wanted:
            cols.offsets.append(_wrap(base + off_delta))
            cols.timestamps.append(ts)
            cols.keys += key or b""
            cols.values += value or b""
            cols.key_offsets.append(len(cols.keys))
            cols.value_offsets.append(len(cols.values))
            cols.key_valid.append(key is not None)
            cols.value_valid.append(value is not None)
            for hk, hv in headers:
                cols.hkeys += hk
                cols.hvalues += hv or b""
                cols.hkey_offsets.append(len(cols.hkeys))
                cols.hvalue_offsets.append(len(cols.hvalues))
                cols.hvalue_valid.append(hv is not None)
            cols.header_offsets.append(len(cols.hvalue_valid))
            cols.count += 1
    if pos != end:
        raise _StopError(
            CORRUPT,
            f"batch at byte {bpos} (base offset {base}) has {end - pos} bytes after its {n} records",
            bpos,
            base,
        )
    return control_type


# -- batches -----------------------------------------------------------------------------------------------------------


def decode_columns(
    data: bytes | memoryview,
    max_decompressed: int,
    verify_crc: bool = True,
    aborted: list[tuple[int, int]] | None = None,
    min_offset: int = -(1 << 63),
    where: Predicate | None = None,
    partition: int = -1,
    mine: Predicate | None = None,
) -> dict[str, Any]:
    """Decode a record set into the column dict of the C core's `decode_columns` (`where` and `mine` are the
    predicates' trees here, where the C core takes their compiled programs)."""
    if max_decompressed <= 0:
        raise ValueError("max_decompressed must be a positive number of bytes")
    data = bytes(data)
    cols = _Columns()
    batches: list[tuple[Any, ...]] = []
    pending = sorted(aborted or [], key=lambda t: t[1])
    active: set[int] = set()
    next_aborted = 0
    pos, total, stop, error = 0, 0, STOP_END, None
    next_offset = -1
    consumed = 0
    while pos < len(data):
        left = len(data) - pos
        if left < LOG_OVERHEAD:
            stop = STOP_INCOMPLETE
            break
        base_offset, batch_len = struct.unpack_from(">qi", data, pos)
        try:
            if batch_len < HEADER_SIZE - LOG_OVERHEAD:
                raise _StopError(
                    CORRUPT,
                    f"batch at byte {pos} (base offset {base_offset}) has length {batch_len}, "
                    "shorter than a batch header",
                    pos,
                    base_offset,
                )
            if left < 17:
                stop = STOP_INCOMPLETE
                break
            magic = struct.unpack_from(">b", data, pos + 16)[0]
            if magic != 2:
                raise _StopError(
                    MAGIC,
                    f"batch at byte {pos} (base offset {base_offset}) has magic {magic}: only "
                    "RecordBatch v2 (magic 2) is supported (v0 and v1 message sets come from brokers older "
                    "than 0.11)",
                    pos + 16,
                    base_offset,
                )
            size = batch_len + LOG_OVERHEAD
            if size > left:
                stop = STOP_INCOMPLETE
                break
            (_, _, epoch, _, crc, attributes, last_delta, first_ts, max_ts, pid, pepoch, base_seq, count) = (
                _HEADER.unpack_from(data, pos)
            )
            info = {
                "base_offset": base_offset,
                "last_offset": _wrap(base_offset + last_delta),
                "epoch": epoch,
                "first_timestamp": first_ts,
                "max_timestamp": max_ts,
                "producer_id": pid,
                "producer_epoch": pepoch,
                "base_sequence": base_seq,
                "record_count": count,
                "attributes": attributes,
                "codec": attributes & 7,
                "transactional": (attributes >> 4) & 1,
                "control": (attributes >> 5) & 1,
                "aborted": 0,
                "log_append_time": (attributes >> 3) & 1,
                "position": pos,
                "compressed_size": size - HEADER_SIZE,
            }
            if last_delta < 0:
                raise _StopError(
                    CORRUPT,
                    f"batch at byte {pos} (base offset {base_offset}) has a negative last offset delta {last_delta}",
                    pos + 23,
                    base_offset,
                )
            if verify_crc:
                actual = crc32c(memoryview(data)[pos + 21 : pos + size])
                if actual != crc:
                    raise _StopError(
                        CRC,
                        f"batch at byte {pos} (base offset {base_offset}) fails its CRC32C check: "
                        f"stored {crc:08x}, computed {actual:08x}",
                        pos + 17,
                        base_offset,
                    )
            records = data[pos + HEADER_SIZE : pos + size]
            budget = max_decompressed - total
            codec = info["codec"]
            if codec != 0:
                if codec not in _DECOMPRESSORS:
                    raise _StopError(
                        CODEC,
                        f"batch at byte {pos} (base offset {base_offset}, {CODECS[codec]}, "
                        f"{len(records)} bytes): unknown compression codec {codec}",
                        pos,
                        base_offset,
                    )
                try:
                    records = _DECOMPRESSORS[codec](records, budget)
                except (_LimitError, ValueError) as err:
                    kind = LIMIT if isinstance(err, _LimitError) else DECOMPRESS
                    if kind == LIMIT and batches and budget < max_decompressed:
                        stop = STOP_BUDGET
                        break
                    batch_at = (
                        f"batch at byte {pos} (base offset {base_offset}, {CODECS[codec]}, {size - HEADER_SIZE} bytes)"
                    )
                    error = (
                        kind,
                        f"{batch_at}: {err}",
                        pos,
                        base_offset,
                        info["last_offset"],
                        size - HEADER_SIZE,
                        budget,
                    )
                    stop = STOP_ERROR
                    break
            elif len(records) > budget:
                if batches and budget < max_decompressed:
                    stop = STOP_BUDGET
                    break
                error = (
                    LIMIT,
                    f"batch at byte {pos} (base offset {base_offset}) holds {len(records)} bytes of "
                    f"records, past the limit of {budget} bytes",
                    pos,
                    base_offset,
                    info["last_offset"],
                    len(records),
                    budget,
                )
                stop = STOP_ERROR
                break
            info["decompressed_size"] = len(records)
            emit = True
            if aborted is not None and pid >= 0:
                while next_aborted < len(pending) and pending[next_aborted][1] <= info["last_offset"]:
                    active.add(pending[next_aborted][0])
                    next_aborted += 1
                if not info["control"] and info["transactional"] and pid in active:
                    info["aborted"] = 1
                    emit = False
            if info["control"]:
                emit = False
            before = cols.mark()
            try:
                control_type = _parse_records(
                    cols, info, records, emit, pos + HEADER_SIZE, codec != 0, min_offset, where, partition, mine
                )
            except _StopError:
                cols.roll_back(before)  # a batch that fails half way contributes nothing
                raise
            if info["control"] and control_type == 0 and aborted is not None:
                active.discard(pid)
        except _StopError as err:
            error = (err.kind, err.message, err.position, err.base_offset, -1, 0, 0)
            stop = STOP_ERROR
            break
        batches.append(
            tuple(
                info[k]
                for k in (
                    "base_offset",
                    "last_offset",
                    "epoch",
                    "first_timestamp",
                    "max_timestamp",
                    "producer_id",
                    "producer_epoch",
                    "base_sequence",
                    "record_count",
                    "attributes",
                    "codec",
                    "transactional",
                    "control",
                    "aborted",
                    "log_append_time",
                    "position",
                    "compressed_size",
                    "decompressed_size",
                )
            )
        )
        total += info["decompressed_size"]
        next_offset = _wrap(info["last_offset"] + 1)
        pos += size
        consumed = pos
    if error is not None:  # the failed batch's last offset, when its header is there to say it
        last = _wrap(base_offset + struct.unpack_from(">i", data, pos + 23)[0]) if len(data) - pos >= 27 else -1
        error = (*error[:4], last, *error[5:])
    return {
        "count": cols.count,
        "filtered": cols.filtered,
        "filtered_ranges": array("q", [x for r in cols.filtered_ranges for x in r]).tobytes(),
        "foreign": cols.foreign,
        "foreign_ranges": array("q", [x for r in cols.foreign_ranges for x in r]).tobytes(),
        "offsets": cols.offsets.tobytes(),
        "timestamps": cols.timestamps.tobytes(),
        "key_offsets": cols.key_offsets.tobytes(),
        "keys": bytes(cols.keys),
        "key_valid": _bitmap(cols.key_valid),
        "value_offsets": cols.value_offsets.tobytes(),
        "values": bytes(cols.values),
        "value_valid": _bitmap(cols.value_valid),
        "header_offsets": cols.header_offsets.tobytes(),
        "header_count": len(cols.hvalue_valid),
        "hkey_offsets": cols.hkey_offsets.tobytes(),
        "hkeys": bytes(cols.hkeys),
        "hvalue_offsets": cols.hvalue_offsets.tobytes(),
        "hvalues": bytes(cols.hvalues),
        "hvalue_valid": _bitmap(cols.hvalue_valid),
        "batches": array("q", [int(x) for b in batches for x in b]).tobytes(),
        "next_offset": next_offset,
        "consumed": consumed,
        "stop": stop,
        "error": error,
    }
