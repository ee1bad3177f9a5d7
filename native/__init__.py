"""Decoding Kafka record sets: RecordBatch v2 in C with bounded decompression, and its pure-Python reference.

`decode()` uses the C extension `streamplane._native` when it is built, the reference otherwise or when
STREAMPLANE_PURE_PYTHON=1. Both implement one contract (`decode_columns`), and the tests hold them to it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from streamplane.errors import DecodeError, DecodeLimitExceeded, InvalidArgumentError
from streamplane.native import reference
from streamplane.native._loaded import USE_NATIVE, _native
from streamplane.native.batch import BatchInfo, DecodedBatch, PyRecord, Record, error_from_tuple
from streamplane.native.where import Where, compile_where

DEFAULT_MAX_DECOMPRESSED = 64 * 1024 * 1024

DecodeColumns = Callable[..., dict[str, Any]]
IMPLEMENTATIONS: dict[str, DecodeColumns] = {"python": reference.decode_columns}
if _native is not None:
    IMPLEMENTATIONS["native"] = _native.decode_columns

implementation = "native" if USE_NATIVE else "python"
"""The implementation `decode` uses: 'native' or 'python'."""
crc32c: Callable[[bytes | memoryview], int] = _native.crc32c if _native is not None else reference.crc32c
"""CRC-32C (Castagnoli), as a RecordBatch's checksum: in C when the extension is built."""
records_end: Callable[[bytes | memoryview], int] = (
    _native.records_end if _native is not None and USE_NATIVE else reference.records_end
)
"""The offset after a record set's last whole batch, from its batch headers alone (-1: none): where decoding it
ends when nothing in it is bad (a fetch sent before it is decoded asks from there)."""


def decode(
    record_set: bytes | bytearray | memoryview,
    *,
    max_decompressed: int = DEFAULT_MAX_DECOMPRESSED,
    verify_crc: bool = True,
    aborted: Sequence[tuple[int, int]] | None = None,
    min_offset: int | None = None,
    where: Where | None = None,
    partition: int = -1,
    mine: Where | None = None,
    impl: str | None = None,
) -> DecodedBatch:
    """Decode a Fetch response's records for one partition into a columnar batch.

    Args:
        record_set: the raw bytes of the partition's `records` field.
        max_decompressed: the most bytes any batch, and this call in total, may inflate to. Inflating stops
            at the limit: a batch alone past it raises DecodeLimitExceeded; a batch that only overflows what
            is left of the call ends the batch early (`budget_exhausted`) so the caller fetches it again.
        verify_crc: check each batch's CRC32C.
        aborted: the Fetch response's aborted transactions as (producer_id, first_offset), to drop their
            records (read committed); None returns every record (read uncommitted).
        min_offset: leave out records below it (Kafka returns whole batches, so a fetch from the middle of
            one starts earlier than asked).
        where: a compiled record predicate (`compile_where`): records it does not match are left out before
            anything is built for them, and counted in `DecodedBatch.filtered`.
        partition: the partition the record set is of (what a predicate's `partition` tests compare).
        mine: a compiled predicate saying which records are this reader's at all (a key slice of the
            partition): one outside it is another reader's, left out without being matched against `where`,
            and counted apart in `DecodedBatch.foreign` (it is not done by being left out, unlike a filtered
            one).
        impl: 'native' or 'python' to force an implementation (tests and benchmarks).

    Raises:
        DecodeError: a subclass saying what is wrong and where, when the first batch cannot be decoded.
            Later bad batches end the result early and are reported in `DecodedBatch.error`.
    """
    if not isinstance(max_decompressed, int) or max_decompressed <= 0:
        raise InvalidArgumentError(f"max_decompressed must be a positive number of bytes, not {max_decompressed!r}")
    fn = IMPLEMENTATIONS.get(impl or implementation)
    if fn is None:
        raise InvalidArgumentError(f"impl must be one of {sorted(IMPLEMENTATIONS)}, not {impl!r}")
    chosen = impl or implementation
    for given in (where, mine):
        if given is not None and chosen == "native" and given.native is None:
            raise InvalidArgumentError("this predicate was compiled without the native extension")

    def form(given: Where | None) -> Any:
        return None if given is None else given.native if chosen == "native" else given.tree

    columns = fn(
        record_set,
        max_decompressed,
        verify_crc,
        None if aborted is None else list(aborted),
        -(1 << 63) if min_offset is None else min_offset,
        form(where),
        partition,
        form(mine),
    )
    if columns["error"] and not columns["batches"]:
        raise error_from_tuple(columns["error"])
    return DecodedBatch(columns)


__all__ = [
    "DEFAULT_MAX_DECOMPRESSED",
    "IMPLEMENTATIONS",
    "BatchInfo",
    "DecodeError",
    "DecodeLimitExceeded",
    "DecodedBatch",
    "PyRecord",
    "Record",
    "Where",
    "compile_where",
    "crc32c",
    "decode",
    "implementation",
    "records_end",
]
