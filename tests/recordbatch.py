"""Building Kafka RecordBatch v2 bytes in tests: exact batches for edge cases, corruption and bombs."""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, field

import cramjam
import lz4.frame
import zstandard

from streamplane.native.reference import crc32c

NONE, GZIP, SNAPPY, LZ4, ZSTD = range(5)
CODECS = {"none": NONE, "gzip": GZIP, "snappy": SNAPPY, "lz4": LZ4, "zstd": ZSTD}


def varint(value: int) -> bytes:
    v = ((value << 1) ^ (value >> 63)) & ((1 << 64) - 1)
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _field(data: bytes | None) -> bytes:
    return varint(-1) if data is None else varint(len(data)) + data


@dataclass
class Rec:
    key: bytes | None = None
    value: bytes | None = b""
    headers: list[tuple[bytes, bytes | None]] = field(default_factory=list)
    offset_delta: int | None = None
    timestamp_delta: int = 0


def encode_record(rec: Rec, offset_delta: int) -> bytes:
    body = bytes([0]) + varint(rec.timestamp_delta) + varint(offset_delta) + _field(rec.key) + _field(rec.value)
    body += varint(len(rec.headers)) + b"".join(_field(k) + _field(v) for k, v in rec.headers)
    return varint(len(body)) + body


def compress(codec: int, data: bytes) -> bytes:
    if codec == GZIP:
        c = zlib.compressobj(6, zlib.DEFLATED, 31)
        return c.compress(data) + c.flush()
    if codec == SNAPPY:
        return bytes(cramjam.snappy.compress_raw(data))
    if codec == LZ4:
        return lz4.frame.compress(data)
    if codec == ZSTD:
        return zstandard.ZstdCompressor().compress(data)
    return data


def build_batch(
    records: list[Rec],
    *,
    base_offset: int = 0,
    codec: int = NONE,
    first_timestamp: int = 1_700_000_000_000,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    transactional: bool = False,
    control: bool = False,
    log_append_time: bool = False,
    magic: int = 2,
    crc: int | None = None,
    record_count: int | None = None,
    records_bytes: bytes | None = None,
    leader_epoch: int = 0,
) -> bytes:
    """One RecordBatch v2; `records_bytes` replaces the (compressed) records section as given."""
    deltas = [r.offset_delta if r.offset_delta is not None else i for i, r in enumerate(records)]
    raw = b"".join(encode_record(r, d) for r, d in zip(records, deltas, strict=True))
    payload = records_bytes if records_bytes is not None else compress(codec, raw)
    attributes = codec | (8 if log_append_time else 0) | (16 if transactional else 0) | (32 if control else 0)
    last_delta = max(deltas) if deltas else 0
    max_ts = first_timestamp + max((r.timestamp_delta for r in records), default=0)
    after_crc = (
        struct.pack(
            ">hiqqqhii",
            attributes,
            last_delta,
            first_timestamp,
            max_ts,
            producer_id,
            producer_epoch,
            base_sequence,
            len(records) if record_count is None else record_count,
        )
        + payload
    )
    checksum = crc32c(after_crc) if crc is None else crc
    body = struct.pack(">ibI", leader_epoch, magic, checksum) + after_crc
    return struct.pack(">qi", base_offset, len(body)) + body


def control_batch(base_offset: int, producer_id: int, *, commit: bool) -> bytes:
    """A transaction marker: a control batch holding one record whose key is (version 0, type)."""
    key = struct.pack(">hh", 0, 1 if commit else 0)
    return build_batch(
        [Rec(key=key, value=struct.pack(">hi", 0, 0))],
        base_offset=base_offset,
        producer_id=producer_id,
        producer_epoch=0,
        transactional=True,
        control=True,
    )


def bomb(codec: int, inflated: int) -> bytes:
    """A batch whose records section inflates to about `inflated` bytes of one huge record's value."""
    header = b""  # the record framing is irrelevant: decoding must stop while inflating
    chunk = b"\0" * (1 << 20)
    if codec == ZSTD:
        c = zstandard.ZstdCompressor(level=1).compressobj()  # streaming: no content size in the frame
        payload = b"".join(c.compress(chunk) for _ in range(inflated >> 20)) + c.flush()
    elif codec == GZIP:
        c = zlib.compressobj(9, zlib.DEFLATED, 31)
        payload = b"".join(c.compress(chunk) for _ in range(inflated >> 20)) + c.flush()
    elif codec == LZ4:
        c = lz4.frame.LZ4FrameCompressor(compression_level=0)
        payload = c.begin() + b"".join(c.compress(chunk) for _ in range(inflated >> 20)) + c.flush()
    elif codec == SNAPPY:
        payload = bytes(cramjam.snappy.compress_raw(header + b"\0" * inflated))
    else:
        raise ValueError(codec)
    return build_batch([Rec(value=b"x")], codec=codec, records_bytes=payload)


def lying_snappy_bomb(declared: int) -> bytes:
    """A snappy batch whose length header claims `declared` bytes (raw snappy says its size up front)."""
    v, out = declared, bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        out.append(b | (0x80 if v else 0))
        if not v:
            break
    return build_batch([Rec(value=b"x")], codec=SNAPPY, records_bytes=bytes(out) + b"\x00" * 16)
