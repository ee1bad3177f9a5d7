"""A record handed to application code, and how it ends: `ack()`, `retry(...)` or `reject(...)`.

Outcomes: the first call decides. Repeating it is a no-op (so acking twice is harmless); a different outcome
after it (ack after reject, say) raises OutcomeError. A record whose lease moved to another worker before
its outcome keeps its outcome here, but nothing is recorded: the new holder reads it again (at least once).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, cast

from streamplane.errors import FailedPreconditionError
from streamplane.model import RecordOutcome
from streamplane.native._loaded import USE_NATIVE, _native

if TYPE_CHECKING:
    from streamplane.client.consumer.ledger import LeaseLedger

PENDING, ACKED, RETRIED, REJECTED = RecordOutcome


class OutcomeError(FailedPreconditionError):
    """A record already ended one way was asked to end another way."""


if TYPE_CHECKING:

    class _Record(Protocol):
        offset: int
        timestamp: int
        key: bytes | None
        value: bytes | None
        headers: tuple[tuple[str, bytes | None], ...]

    class _Storage:
        """What the C MessageBase (or the slots below) holds, as mypy sees it."""

        _ledger: LeaseLedger
        _record: _Record
        _held: Any
        _outcome: str
        attempt: int

elif _native is not None:
    _Storage = _native.MessageBase  # its fields live in C, so the decoder can build messages in bulk
else:

    class _Storage:
        __slots__ = ("_held", "_ledger", "_outcome", "_record", "attempt")


class Message(_Storage):
    """One record of a stream, as the consumer delivers it.

    Attributes:
        offset, timestamp (ms, the ingestion time), key, value, headers ((name, value) pairs).
        attempt: 1 on first delivery; n on its n-th attempt after retries.
    """

    __slots__ = ()

    def __init__(self, ledger: LeaseLedger, record: Any, attempt: int = 1, held: Any = None) -> None:
        self._ledger = ledger
        self._record = record  # the decoder's record: fields are read from it when asked for
        self._held = held  # the decoded batch's memory account, released when its last record ends
        self._outcome = PENDING
        self.attempt = attempt

    @property
    def offset(self) -> int:
        return self._record.offset

    @property
    def timestamp(self) -> int:
        return self._record.timestamp

    @property
    def key(self) -> bytes | None:
        return self._record.key

    @property
    def value(self) -> bytes | None:
        return self._record.value

    @property
    def headers(self) -> tuple[tuple[str, bytes | None], ...]:
        return self._record.headers

    @property
    def stream(self) -> str:
        return self._ledger.stream

    @property
    def lane(self) -> str:
        return self._ledger.lane

    @property
    def generation(self) -> int:
        return self._ledger.generation

    @property
    def partition(self) -> int:
        return self._ledger.partition

    @property
    def lease_id(self) -> str:
        return self._ledger.lease_id

    @property
    def epoch(self) -> int:
        """The lease's epoch when this record was read: a fencing token for side effects outside Kafka (a sink
        that keeps the highest epoch per partition refuses writes of a holder the lease has moved from)."""
        return self._ledger.epoch

    @property
    def outcome(self) -> str:
        """pending, acked, retried or rejected."""
        return self._outcome

    def ack(self) -> None:
        """Done: the offset is recorded as processed."""
        self._ledger.finish(self, ACKED)

    def retry(self, error: str | BaseException = "", backoff_s: float | None = None) -> None:
        """Try again later (after `backoff_s`, default the consumer's retry_backoff_s); live records go on
        meanwhile. After the group's max attempts the record is rejected instead."""
        self._ledger.finish(self, RETRIED, error=_text(error), backoff_s=backoff_s)

    def reject(self, reason: str) -> None:
        """Never processable: copy it to the stream's dlq lane with its origin, and mark it rejected."""
        if not str(reason).strip():
            raise ValueError("reject needs a reason")
        self._ledger.finish(self, REJECTED, error=str(reason))

    def header(self, name: str) -> bytes | None:
        """The value of the first header called `name`, or None."""
        return next((v for k, v in self.headers if k == name), None)

    def __repr__(self) -> str:
        return f"Message({self.lease_id}@{self.offset}, attempt={self.attempt}, {self._outcome})"


def messages(ledger: LeaseLedger, decoded: Any, held: Any) -> list[Message]:
    """A Message for every record of a decode result (`DecodedBatch`), first attempt: built in C when the
    extension is loaded (no Python call per record: a worker makes a million a second)."""
    if USE_NATIVE and _native is not None:
        return cast(list[Message], _native.messages(decoded.columns, Message, ledger, held, 1, PENDING))
    return [Message(ledger, r, 1, held) for r in decoded.records()]


@dataclass(frozen=True)
class BatchOutcome:
    """What a `run_batches` handler decided for a batch: every record it does not name is acked.

    Attributes:
        retry: {offset: error} to try again later (after `backoff_s`, default the consumer's).
        reject: {offset: reason} never processable: copied to the dlq lane and marked rejected.
        backoff_s: the wait before the retried records are tried again.
    """

    retry: Mapping[int, str] = field(default_factory=dict)
    reject: Mapping[int, str] = field(default_factory=dict)
    backoff_s: float | None = None


def _text(error: str | BaseException) -> str:
    if isinstance(error, BaseException):
        return f"{type(error).__name__}: {error}"[:1000]
    return str(error)[:1000]
