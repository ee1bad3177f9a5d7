"""OffsetForLeaderEpoch (key 23), versions 2 and 3: where a leader's log ends for a given leader epoch.

A consumer asks after its partition's leader changed (KIP-320): the end offset of the epoch of the last batch
it read. An end offset below its position means the new leader's log was truncated under it (an unclean
election, or a leader that lost unreplicated records): the records past that offset are gone or replaced.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from streamplane.client.kafka import codec
from streamplane.client.kafka.codec import Reader

KEY = 23
VERSIONS = (2, 3)
"""Kafka 4 removed versions 0 and 1 (KIP-896); 4 is the flexible encoding of 3."""


@dataclass(frozen=True)
class EpochEnd:
    error_code: int
    leader_epoch: int
    """The largest epoch at or below the one asked about (-1 when the broker knows none)."""
    end_offset: int
    """The first offset after that epoch's records (-1 when unknown)."""


def encode(version: int, topic: str, partitions: dict[int, tuple[int, int]]) -> bytes:
    """`partitions` is {partition: (current leader epoch, epoch of the last batch read)}."""
    body = struct.pack(">i", -1) if version >= 3 else b""  # replica id: a consumer
    items = [struct.pack(">iii", p, current, last) for p, (current, last) in partitions.items()]
    return body + codec.array([codec.string(topic) + codec.array(items)])


def decode(r: Reader) -> dict[tuple[str, int], EpochEnd]:
    r.i32()  # throttle time
    out: dict[tuple[str, int], EpochEnd] = {}
    for _ in range(r.i32()):
        topic = r.string() or ""
        for _ in range(r.i32()):
            code, partition, epoch, end = r.i16(), r.i32(), r.i32(), r.i64()
            out[(topic, partition)] = EpochEnd(code, epoch, end)
    return out
