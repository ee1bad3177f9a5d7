"""Fetch (key 1), versions 4 to 11, and the client side of incremental fetch sessions (KIP-227).

A worker's fetch loop sends one Fetch per broker for every partition that broker leads for it. With a
session (v7+), the broker remembers the partitions and their positions, so a steady-state request lists only
the partitions whose position changed, and a response lists only partitions with news. `FetchSession`
decides what the next request carries; it is pure and tested alone.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import NamedTuple

from streamplane.client.kafka import codec
from streamplane.client.kafka.codec import Reader
from streamplane.errors import MalformedBatchError

KEY = 1
VERSIONS = (4, 11)
SESSIONS_FROM = 7
INITIAL_EPOCH = 0
"""A session epoch of 0 with session id 0 asks the broker to open a session."""
NO_SESSION_EPOCH = -1
"""Session id 0 with epoch -1: a full fetch that opens no session (one-off reads)."""

TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class PartitionFetch:
    """What to fetch from one partition: the offset, the broker's log start we know, the size cap, and the
    leader epoch we believe current (-1 when unknown; the broker then skips the fencing check)."""

    offset: int
    max_bytes: int
    log_start_offset: int = -1
    leader_epoch: int = -1


class FetchedPartition(NamedTuple):
    """One partition of a Fetch response; `records` is the raw record set (may end in a truncated batch).
    A named tuple: a response lists hundreds of partitions, and tuples are the cheapest to build."""

    topic: str
    partition: int
    error_code: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    aborted: list[tuple[int, int]] | None
    preferred_read_replica: int
    records: memoryview


@dataclass(frozen=True, slots=True)
class FetchResponse:
    error_code: int
    session_id: int
    partitions: list[FetchedPartition]


def encode(
    version: int,
    partitions: dict[TopicPartition, PartitionFetch],
    *,
    max_wait_ms: int,
    min_bytes: int = 1,
    max_bytes: int = 50 << 20,
    read_committed: bool = False,
    session_id: int = 0,
    session_epoch: int = NO_SESSION_EPOCH,
    forgotten: list[TopicPartition] = (),  # type: ignore[assignment]
    rack: str = "",
) -> bytes:
    body = struct.pack(">iiiib", -1, max_wait_ms, min_bytes, max_bytes, 1 if read_committed else 0)
    if version >= SESSIONS_FROM:
        body += struct.pack(">ii", session_id, session_epoch)
    by_topic: dict[str, list[bytes]] = {}
    for (topic, p), f in partitions.items():
        item = struct.pack(">i", p)
        if version >= 9:
            item += struct.pack(">i", f.leader_epoch)
        item += struct.pack(">q", f.offset)
        if version >= 5:
            item += struct.pack(">q", f.log_start_offset)
        by_topic.setdefault(topic, []).append(item + struct.pack(">i", f.max_bytes))
    body += codec.array([codec.string(t) + codec.array(items) for t, items in by_topic.items()])
    if version >= SESSIONS_FROM:
        gone: dict[str, list[bytes]] = {}
        for topic, p in forgotten:
            gone.setdefault(topic, []).append(struct.pack(">i", p))
        body += codec.array([codec.string(t) + codec.array(items) for t, items in gone.items()])
    if version >= 11:
        body += codec.string(rack)
    return body


_I32 = struct.Struct(">i")
_I16_I32 = struct.Struct(">hi")
_PART_V4 = struct.Struct(">ihqqi")  # partition, error, high watermark, last stable offset, aborted count
_PART_V5 = struct.Struct(">ihqqqi")  # ... log start offset before the aborted count
_ABORTED = struct.Struct(">qq")
_TAIL_V11 = struct.Struct(">ii")  # preferred read replica, record bytes
_EMPTY = memoryview(b"")


def decode(version: int, r: Reader) -> FetchResponse:
    """Parse a Fetch response. The per-partition fields are read with precompiled structs: a worker's
    response lists hundreds of partitions, and this is the loop's hot path when they are idle."""
    r.i32()  # throttle time
    error, session = (r.i16(), r.i32()) if version >= SESSIONS_FROM else (0, 0)
    data, pos = r.data, r.pos
    view = memoryview(data)
    v5, v11 = version >= 5, version >= 11
    head = _PART_V5 if v5 else _PART_V4
    head_size, end = head.size, len(data)
    out = []
    try:
        (topics,) = _I32.unpack_from(data, pos)
        pos += 4
        for _ in range(topics):
            (n,) = struct.unpack_from(">h", data, pos)
            topic = bytes(data[pos + 2 : pos + 2 + n]).decode("utf-8", "replace")
            pos += 2 + max(n, 0)
            (parts,) = _I32.unpack_from(data, pos)
            pos += 4
            for _ in range(parts):
                fields = head.unpack_from(data, pos)
                pos += head_size
                n = fields[-1]
                aborted = None
                if n > 0:
                    aborted = [_ABORTED.unpack_from(data, pos + 16 * i) for i in range(n)]
                    pos += 16 * n
                elif n == 0:
                    aborted = []
                if v11:
                    preferred, size = _TAIL_V11.unpack_from(data, pos)
                    pos += 8
                else:
                    preferred = -1
                    (size,) = _I32.unpack_from(data, pos)
                    pos += 4
                if size > 0:
                    if size > end - pos:
                        raise MalformedBatchError(f"Fetch response declares {size} record bytes at {pos}, past the end")
                    records = view[pos : pos + size]
                    pos += size
                else:
                    records = _EMPTY
                out.append(
                    FetchedPartition(
                        topic,
                        fields[0],
                        fields[1],
                        fields[2],
                        fields[3],
                        fields[4] if v5 else -1,
                        aborted,
                        preferred,
                        records,
                    )
                )
    except struct.error as err:
        raise MalformedBatchError(f"Kafka Fetch response ends inside a field near byte {pos}: {err}") from err
    r.pos = pos
    return FetchResponse(error, session, out)


class FetchSession:
    """The client's half of one broker's fetch session: what the broker holds, and the next request's epoch.

    `next_request(wanted)` returns (session_id, epoch, partitions to send, partitions to forget); after the
    response, `handled(response, sent)` moves the session on, or resets it when the broker lost it.
    """

    def __init__(self) -> None:
        self.session_id = 0
        self.epoch = INITIAL_EPOCH
        self._held: dict[TopicPartition, PartitionFetch] = {}  # what the broker's session holds

    @property
    def incremental(self) -> bool:
        return self.session_id != 0

    def next_request(
        self, wanted: dict[TopicPartition, PartitionFetch]
    ) -> tuple[int, int, dict[TopicPartition, PartitionFetch], list[TopicPartition]]:
        if not self.incremental:
            return 0, INITIAL_EPOCH, dict(wanted), []
        held = self._held
        send = {tp: f for tp, f in wanted.items() if held.get(tp) != f}
        forget = [tp for tp in held if tp not in wanted]
        return self.session_id, self.epoch, send, forget

    def handled(
        self,
        response: FetchResponse,
        sent: dict[TopicPartition, PartitionFetch],
        forgotten: list[TopicPartition],
    ) -> None:
        if response.error_code in (
            codec.ErrorCode.FETCH_SESSION_ID_NOT_FOUND,
            codec.ErrorCode.INVALID_FETCH_SESSION_EPOCH,
        ):
            self.reset()
            return
        if response.error_code:
            return
        if not self.incremental:
            self._held = dict(sent)
            self.session_id = response.session_id
            self.epoch = 1 if response.session_id else INITIAL_EPOCH
            return
        self._held.update(sent)
        for tp in forgotten:
            self._held.pop(tp, None)
        self.epoch = 1 if self.epoch >= 0x7FFFFFFF else self.epoch + 1

    def reset(self) -> None:
        """Start over with a full fetch (after an error, a lost connection or a changed leader)."""
        self.session_id, self.epoch, self._held = 0, INITIAL_EPOCH, {}
