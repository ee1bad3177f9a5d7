"""The one error hierarchy of streamplane.

Every error a caller can act on is a `StreamplaneError` subclass naming its kind; `retryable` says whether
the same call may succeed later unchanged. Kinds a program acts on carry fields too (`FencedError.lease_id`,
`NotFoundError.kind`, ...), readable as properties and kept across gRPC. The mapping to and from gRPC status
codes lives in `streamplane.rpc`, in one table.
"""

from __future__ import annotations

from typing import ClassVar

Detail = str | int


class StreamplaneError(Exception):
    """Root of every streamplane error.

    Args:
        message: one sentence for a person, naming the field or object at fault.
        retryable: True when the same call may succeed later without change.
        details: the kind's fields (`field_names`), for programs; what is not given reads as "" or 0.
    """

    default_retryable = False
    field_names: ClassVar[tuple[str, ...]] = ()

    def __init__(self, message: str, *, retryable: bool | None = None, **details: Detail) -> None:
        super().__init__(message)
        self._retryable = self.default_retryable if retryable is None else retryable
        unknown = set(details) - set(self.field_names)
        if unknown:
            raise TypeError(f"{type(self).__name__} has no field {sorted(unknown)[0]!r}")
        self._details: dict[str, Detail] = details

    @property
    def details(self) -> dict[str, Detail]:
        """The fields given at construction (what crosses the wire)."""
        return dict(self._details)

    def _detail(self, name: str, default: Detail) -> Detail:
        return self._details.get(name, default)

    @property
    def message(self) -> str:
        """The sentence describing what went wrong."""
        return str(self.args[0]) if self.args else ""

    @property
    def retryable(self) -> bool:
        """Whether retrying the same call unchanged may succeed."""
        return self._retryable


class InvalidArgumentError(StreamplaneError, ValueError):
    """A request field or a setting is malformed or out of range; the message names it. Also a ValueError,
    so invalid client configuration can be caught as one."""


class _NamedError(StreamplaneError):
    """An error about one named object: `kind` (cluster, stream, lane, lease, ...) and `name`."""

    field_names = ("kind", "name")

    @property
    def kind(self) -> str:
        return str(self._detail("kind", ""))

    @property
    def name(self) -> str:
        return str(self._detail("name", ""))


class NotFoundError(_NamedError):
    """A named object (cluster, stream, lane, lease) does not exist."""


class AlreadyExistsError(_NamedError):
    """An object of that name exists already."""


class FailedPreconditionError(StreamplaneError):
    """The request is well-formed but the current state does not allow it."""


class FencedError(FailedPreconditionError):
    """A call carried a stale lease epoch: another holder owns the lease now.

    `lease_id` is the lease, `held_epoch` the epoch the caller holds and `current_epoch` the lease's epoch now
    (0 and 0 when a whole session ended rather than one lease moving on).
    """

    field_names = ("lease_id", "held_epoch", "current_epoch")

    @property
    def lease_id(self) -> str:
        return str(self._detail("lease_id", ""))

    @property
    def held_epoch(self) -> int:
        return int(self._detail("held_epoch", 0))

    @property
    def current_epoch(self) -> int:
        return int(self._detail("current_epoch", 0))


class LimitExceededError(StreamplaneError):
    """A size limit was exceeded (request, store transaction, decompressed batch)."""


class UnauthenticatedError(StreamplaneError):
    """The call carried no credential, or one that is malformed, forged or expired."""


class PermissionDeniedError(StreamplaneError):
    """The caller is known but lacks a permission; `permission` names it (e.g. `stream.failover`) and
    `resource` what it was asked for (e.g. `stream/logs`)."""

    field_names = ("permission", "resource")

    @property
    def permission(self) -> str:
        return str(self._detail("permission", ""))

    @property
    def resource(self) -> str:
        return str(self._detail("resource", ""))


QUOTE_LIMIT = 64
"""Characters of a bad value an error message quotes: enough to recognise it, never the whole input."""


def quoted(value: object, limit: int = QUOTE_LIMIT) -> str:
    """A bad value as an error message shows it: its repr, cut to a short prefix with its full length."""
    text = repr(value)
    if len(text) <= limit:
        return text
    size = len(value) if isinstance(value, str | bytes) else len(text)
    return f"{text[:limit]}... ({size} characters)"


class CorruptBatchError(StreamplaneError):
    """Bytes read from Kafka are not a valid record batch."""


class UnavailableError(StreamplaneError):
    """A service (coordinator, store, Kafka) cannot be reached right now."""

    default_retryable = True


class UnimplementedError(StreamplaneError):
    """The coordinator does not serve this call: it is older than the client (which then does without)."""


class ThreadCrashedError(StreamplaneError):
    """A client's background thread failed with an unexpected exception (a bug); its owner ended loudly rather
    than live on without it."""


class DecodeError(CorruptBatchError):
    """Bytes from Kafka could not be decoded; `position` is the byte of the input where decoding failed.

    Args:
        message: what failed and where.
        position: byte position in the input record set.
        base_offset: base offset of the batch that failed, -1 if unknown.
        last_offset: last offset of that batch (skip past it to move on), -1 if unknown.
    """

    def __init__(self, message: str, *, position: int = -1, base_offset: int = -1, last_offset: int = -1) -> None:
        super().__init__(message)
        self._position = position
        self._base_offset = base_offset
        self._last_offset = last_offset

    @property
    def position(self) -> int:
        return self._position

    @property
    def base_offset(self) -> int:
        return self._base_offset

    @property
    def last_offset(self) -> int:
        return self._last_offset


class MalformedBatchError(DecodeError):
    """A batch or record is structurally invalid."""


class CrcMismatchError(DecodeError):
    """A batch fails its CRC32C check."""


class UnsupportedMagicError(DecodeError):
    """A batch is not RecordBatch v2 (magic 2); v0 and v1 message sets are not supported."""


class UnsupportedCodecError(DecodeError):
    """A batch names a compression codec that Kafka does not define."""


class DecompressionError(DecodeError):
    """A compressed batch is invalid for its codec."""


class DecodeLimitExceeded(DecodeError, LimitExceededError):  # noqa: N818 - the name issue 3 gives it
    """A batch inflates past the decompressed-size limit; it was stopped while inflating.

    `size` is the batch's compressed size and `limit` the limit that applied, both in bytes.
    """

    def __init__(
        self,
        message: str,
        *,
        position: int = -1,
        base_offset: int = -1,
        last_offset: int = -1,
        size: int = -1,
        limit: int = -1,
    ) -> None:
        super().__init__(message, position=position, base_offset=base_offset, last_offset=last_offset)
        self._size = size
        self._limit = limit

    @property
    def size(self) -> int:
        return self._size

    @property
    def limit(self) -> int:
        return self._limit
