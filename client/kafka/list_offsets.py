"""ListOffsets (key 2), versions 1 to 5: the earliest, latest or first-at-a-time offset of partitions."""

from __future__ import annotations

import struct

from streamplane.client.kafka import codec
from streamplane.client.kafka.codec import Reader

KEY = 2
VERSIONS = (1, 5)
EARLIEST, LATEST = -2, -1


def encode(
    version: int, topic: str, partitions: dict[int, int], *, read_committed: bool = False, leader_epoch: int = -1
) -> bytes:
    """`partitions` is {partition: timestamp}, the timestamp EARLIEST, LATEST or milliseconds."""
    body = struct.pack(">i", -1)  # replica id: a consumer
    if version >= 2:
        body += struct.pack(">b", 1 if read_committed else 0)
    if version >= 4:
        items = [struct.pack(">iiq", p, leader_epoch, ts) for p, ts in partitions.items()]
    else:
        items = [struct.pack(">iq", p, ts) for p, ts in partitions.items()]
    return body + codec.array([codec.string(topic) + codec.array(items)])


def decode(version: int, r: Reader) -> dict[int, tuple[int, int, int]]:
    """{partition: (error_code, offset, timestamp)}; offset -1 when no record is at or after the timestamp."""
    if version >= 2:
        r.i32()  # throttle time
    out: dict[int, tuple[int, int, int]] = {}
    for _ in range(r.i32()):
        r.string()
        for _ in range(r.i32()):
            partition, code, ts, offset = r.i32(), r.i16(), r.i64(), r.i64()
            if version >= 4:
                r.i32()  # leader epoch
            out[partition] = (code, offset, ts)
    return out
