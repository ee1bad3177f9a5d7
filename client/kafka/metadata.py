"""Metadata (key 3), versions 1 to 8: brokers (with racks), and each partition's leader and leader epoch."""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from streamplane.client.kafka import codec
from streamplane.client.kafka.codec import Reader

KEY = 3
VERSIONS = (1, 8)


@dataclass(frozen=True)
class Broker:
    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(frozen=True)
class PartitionMetadata:
    partition: int
    leader: int
    error_code: int
    leader_epoch: int = -1
    replicas: tuple[int, ...] = ()
    isr: tuple[int, ...] = ()


@dataclass(frozen=True)
class Metadata:
    brokers: dict[int, Broker]
    topics: dict[str, list[PartitionMetadata]]
    topic_errors: dict[str, int] = field(default_factory=dict)


def encode(version: int, topics: list[str] | None) -> bytes:
    body = struct.pack(">i", -1) if topics is None else codec.array([codec.string(t) for t in topics])
    if version >= 4:
        body += b"\0"  # allow_auto_topic_creation: never create topics by reading them
    if version >= 8:
        body += b"\0\0"  # include cluster / topic authorized operations
    return body


def decode(version: int, r: Reader) -> Metadata:
    if version >= 3:
        r.i32()  # throttle time
    brokers: dict[int, Broker] = {}
    for _ in range(r.i32()):
        node, host, port = r.i32(), r.string() or "", r.i32()
        brokers[node] = Broker(node, host, port, r.string())
    if version >= 2:
        r.string()  # cluster id
    r.i32()  # controller id
    topics: dict[str, list[PartitionMetadata]] = {}
    errors: dict[str, int] = {}
    for _ in range(r.i32()):
        code, name = r.i16(), r.string() or ""
        r.i8()  # is_internal
        parts = []
        for _ in range(r.i32()):
            p_code, index, leader = r.i16(), r.i32(), r.i32()
            epoch = r.i32() if version >= 7 else -1
            replicas = tuple(r.array(r.i32))
            isr = tuple(r.array(r.i32))
            if version >= 5:
                r.array(r.i32)  # offline replicas
            parts.append(PartitionMetadata(index, leader, p_code, epoch, replicas, isr))
        if version >= 8:
            r.i32()  # topic authorized operations
        topics[name] = sorted(parts, key=lambda p: p.partition)
        if code:
            errors[name] = code
    if version >= 8:
        r.i32()  # cluster authorized operations
    return Metadata(brokers, topics, errors)
