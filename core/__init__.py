"""streamplane: streams that never stop, over a fleet of Kafka clusters.

The package is split by architecture part: `streamplane.coordinator` (the Assigner service and its store),
`streamplane.client` (producer and consumer), `streamplane.spark` (the Spark source), `streamplane.devstack`
(the local stack) and `streamplane.cli`. The root holds what every part shares: errors and names.
"""

from streamplane.errors import (
    AlreadyExistsError,
    CorruptBatchError,
    CrcMismatchError,
    DecodeError,
    DecodeLimitExceeded,
    DecompressionError,
    FailedPreconditionError,
    FencedError,
    InvalidArgumentError,
    LimitExceededError,
    MalformedBatchError,
    NotFoundError,
    PermissionDeniedError,
    StreamplaneError,
    UnauthenticatedError,
    UnavailableError,
    UnsupportedCodecError,
    UnsupportedMagicError,
)

__version__ = "0.1.0"

__all__ = [
    "AlreadyExistsError",
    "CorruptBatchError",
    "CrcMismatchError",
    "DecodeError",
    "DecodeLimitExceeded",
    "DecompressionError",
    "FailedPreconditionError",
    "FencedError",
    "InvalidArgumentError",
    "LimitExceededError",
    "MalformedBatchError",
    "NotFoundError",
    "PermissionDeniedError",
    "StreamplaneError",
    "UnauthenticatedError",
    "UnavailableError",
    "UnsupportedCodecError",
    "UnsupportedMagicError",
    "__version__",
]
