"""Kafka wire primitives: a bounds-checked reader over a response, writers for request fields, and the
Kafka error codes by name.

Every parse failure is one MalformedBatchError naming the byte where the response stopped making sense.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from enum import IntEnum
from typing import Any, TypeVar

from streamplane.errors import MalformedBatchError, StreamplaneError

T = TypeVar("T")


class ErrorCode(IntEnum):
    """Kafka error codes we branch on or name in messages, by name (the protocol guide's table)."""

    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    UNKNOWN_TOPIC_OR_PARTITION = 3
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    REPLICA_NOT_AVAILABLE = 9
    NETWORK_EXCEPTION = 13
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    NOT_ENOUGH_REPLICAS = 19
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
    UNSUPPORTED_SASL_MECHANISM = 33
    ILLEGAL_SASL_STATE = 34
    UNSUPPORTED_VERSION = 35
    KAFKA_STORAGE_ERROR = 56
    SASL_AUTHENTICATION_FAILED = 58
    FETCH_SESSION_ID_NOT_FOUND = 70
    INVALID_FETCH_SESSION_EPOCH = 71
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75
    OFFSET_NOT_AVAILABLE = 78


RETRIABLE = frozenset(
    {
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.REQUEST_TIMED_OUT,
        ErrorCode.REPLICA_NOT_AVAILABLE,
        ErrorCode.NETWORK_EXCEPTION,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.NOT_ENOUGH_REPLICAS,
        ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        ErrorCode.KAFKA_STORAGE_ERROR,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.UNKNOWN_LEADER_EPOCH,
        ErrorCode.OFFSET_NOT_AVAILABLE,
    }
)
"""Codes that mean "try again, perhaps elsewhere" (leadership moved, broker busy)."""
RELOOKUP = frozenset(
    {
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.UNKNOWN_LEADER_EPOCH,
    }
)
"""Codes after which a partition's leader must be looked up again."""


class KafkaProtocolError(StreamplaneError):
    """A broker answered with a Kafka error code; `code` is it, `retryable` says whether to try again."""

    RETRIABLE = RETRIABLE

    def __init__(self, message: str, *, code: int) -> None:
        super().__init__(f"{message} ({error_name(code)})", retryable=code in RETRIABLE)
        self.code = code


def error_name(code: int) -> str:
    """A Kafka error code as the protocol guide names it (e.g. NOT_LEADER_OR_FOLLOWER), or its number."""
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"Kafka error code {code}"


class KafkaAuthenticationError(KafkaProtocolError):
    """SASL authentication failed: bad credentials or a mechanism the broker does not enable. Never retried."""


class Reader:
    """Reads fields from one response body; running past its end raises MalformedBatchError."""

    __slots__ = ("data", "pos")

    def __init__(self, data: bytes | bytearray) -> None:
        self.data, self.pos = data, 0

    def take(self, fmt: str) -> tuple[Any, ...]:
        size = struct.calcsize(fmt)
        if self.pos + size > len(self.data):
            raise MalformedBatchError(f"Kafka response ends at byte {len(self.data)}, inside a field at {self.pos}")
        values = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += size
        return values

    def i8(self) -> int:
        return int(self.take(">b")[0])

    def i16(self) -> int:
        return int(self.take(">h")[0])

    def i32(self) -> int:
        return int(self.take(">i")[0])

    def i64(self) -> int:
        return int(self.take(">q")[0])

    def uvarint(self) -> int:
        shift = value = 0
        while True:
            (b,) = self.take(">B")
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return int(value)
            shift += 7
            if shift > 35:
                raise MalformedBatchError(f"Kafka response has a varint longer than 5 bytes at {self.pos}")

    def _raw(self, n: int) -> bytes | bytearray:
        if n < 0 or self.pos + n > len(self.data):
            raise MalformedBatchError(f"Kafka response declares {n} bytes at {self.pos}, past its end")
        raw = self.data[self.pos : self.pos + n]
        self.pos += n
        return raw

    def string(self) -> str | None:
        n = self.i16()
        return None if n < 0 else self._raw(n).decode("utf-8", "replace")

    def compact_string(self) -> str | None:
        n = self.uvarint() - 1
        return None if n < 0 else self._raw(n).decode("utf-8", "replace")

    def bytes_(self) -> memoryview | None:
        n = self.i32()
        if n < 0:
            return None
        if self.pos + n > len(self.data):
            raise MalformedBatchError(f"Kafka response declares {n} bytes at {self.pos}, past its end")
        view = memoryview(self.data)[self.pos : self.pos + n]
        self.pos += n
        return view

    def array(self, item: Callable[[], T]) -> list[T]:
        n = self.i32()
        if n > len(self.data):
            raise MalformedBatchError(f"Kafka response declares an array of {n} items at {self.pos}")
        return [] if n < 0 else [item() for _ in range(n)]

    def compact_array(self, item: Callable[[], T]) -> list[T]:
        n = self.uvarint() - 1
        if n > len(self.data):
            raise MalformedBatchError(f"Kafka response declares an array of {n} items at {self.pos}")
        return [] if n < 0 else [item() for _ in range(n)]

    def tagged_fields(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()  # tag
            self._raw(self.uvarint())


def string(value: str | None) -> bytes:
    if value is None:
        return struct.pack(">h", -1)
    raw = value.encode()
    return struct.pack(">h", len(raw)) + raw


def bytes_(value: bytes | None) -> bytes:
    if value is None:
        return struct.pack(">i", -1)
    return struct.pack(">i", len(value)) + value


def array(items: list[bytes]) -> bytes:
    return struct.pack(">i", len(items)) + b"".join(items)


def uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def compact_string(value: str | None) -> bytes:
    if value is None:
        return b"\0"
    raw = value.encode()
    return uvarint(len(raw) + 1) + raw


NO_TAGS = b"\0"
"""An empty tagged-fields section of a flexible message."""
