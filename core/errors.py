"""The one error hierarchy of streamplane.

Every error a caller can act on is a `StreamplaneError` subclass naming its kind; `retryable` says whether
the same call may succeed later unchanged. The mapping to and from gRPC status codes lives in
`streamplane.rpc`, in one table.
"""

from __future__ import annotations


class StreamplaneError(Exception):
    """Root of every streamplane error.

    Args:
        message: one sentence for a person, naming the field or object at fault.
        retryable: True when the same call may succeed later without change.
    """

    default_retryable = False

    def __init__(self, message: str, *, retryable: bool | None = None) -> None:
        super().__init__(message)
        self._retryable = self.default_retryable if retryable is None else retryable

    @property
    def message(self) -> str:
        """The sentence describing what went wrong."""
        return str(self.args[0]) if self.args else ""

    @property
    def retryable(self) -> bool:
        """Whether retrying the same call unchanged may succeed."""
        return self._retryable


class InvalidArgumentError(StreamplaneError):
    """A request field is malformed or out of range; the message names the field."""


class NotFoundError(StreamplaneError):
    """A named object (cluster, stream, lane, lease) does not exist."""


class AlreadyExistsError(StreamplaneError):
    """An object of that name exists already."""


class FailedPreconditionError(StreamplaneError):
    """The request is well-formed but the current state does not allow it."""


class FencedError(FailedPreconditionError):
    """A call carried a stale lease epoch: another holder owns the lease now."""


class LimitExceededError(StreamplaneError):
    """A size limit was exceeded (request, store transaction, decompressed batch)."""


class CorruptBatchError(StreamplaneError):
    """Bytes read from Kafka are not a valid record batch."""


class UnavailableError(StreamplaneError):
    """A service (coordinator, store, Kafka) cannot be reached right now."""

    default_retryable = True
