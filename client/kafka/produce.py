"""Produce (key 0), versions 3 to 8, for one small uncompressed batch: what the health canary writes.

Data is produced through confluent-kafka; this is the wire client's own Produce, so that a canary costs one
request on a connection the health monitor keeps, not a producer with its threads for every round.
"""

from __future__ import annotations

import struct

from streamplane.client.kafka import codec
from streamplane.client.kafka.codec import Reader
from streamplane.native import crc32c

KEY = 0
VERSIONS = (3, 8)
ACKS_ALL = -1


def _varint(value: int) -> bytes:
    """A zig-zag varint, as a record's fields are framed."""
    return codec.uvarint(((value << 1) ^ (value >> 63)) & ((1 << 64) - 1))


def record_batch(value: bytes, timestamp_ms: int, key: bytes | None = None) -> bytes:
    """A RecordBatch v2 of one record (no compression, no producer id), base offset 0."""
    key_field = _varint(-1) if key is None else _varint(len(key)) + key
    body = b"\0" + _varint(0) + _varint(0) + key_field + _varint(len(value)) + value + _varint(0)
    record = _varint(len(body)) + body
    after_crc = struct.pack(">hiqqqhii", 0, 0, timestamp_ms, timestamp_ms, -1, -1, -1, 1) + record
    header = struct.pack(">ibI", -1, 2, crc32c(after_crc))
    return struct.pack(">qi", 0, len(header) + len(after_crc)) + header + after_crc


def encode(version: int, topic: str, partition: int, batch: bytes, *, timeout_ms: int, acks: int = ACKS_ALL) -> bytes:
    """A Produce request of one batch to one partition (no transaction)."""
    body = codec.string(None) + struct.pack(">hi", acks, timeout_ms)
    partitions = codec.array([struct.pack(">i", partition) + codec.bytes_(batch)])
    return body + codec.array([codec.string(topic) + partitions])


def decode(version: int, r: Reader) -> tuple[int, int]:
    """(error_code, base offset) of the one partition produced to."""
    found = (codec.ErrorCode.UNKNOWN_TOPIC_OR_PARTITION.value, -1)
    for _ in range(r.i32()):
        r.string()
        for _ in range(r.i32()):
            r.i32()  # partition
            code, base = r.i16(), r.i64()
            r.i64()  # log append time
            if version >= 5:
                r.i64()  # log start offset
            if version >= 8:
                r.array(lambda: (r.i32(), r.string()))  # record errors
                r.string()  # error message
            found = (code, base)
    return found
