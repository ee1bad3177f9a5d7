"""What a fetch of one partition yields, decoded: the records currency the single-partition fetcher (Spark's
reader) and the consumer's fetch loop and ledgers share.

A bad batch never stalls a partition: `decode_records` steps over it as a `Skipped` range, and the caller
reports it as rejected. With a `where` predicate, records it does not match are left out by the decoder (the
batch's `filtered`); the offsets they leave are gaps, done by being stepped over. With a `mine` predicate (a
slice of a split partition), records outside it are left out too, as the batch's foreign ranges: another
reader's to do, never done here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from streamplane.errors import DecodeError
from streamplane.native import DecodedBatch, Where, decode


@dataclass(frozen=True)
class Skipped:
    """A batch the fetcher stepped over: [first_offset, next_offset) with the reason (a DecodeError)."""

    first_offset: int
    next_offset: int
    error: DecodeError


@dataclass
class Fetched:
    """What one fetch of a partition produced: decoded records, skipped bad batches, the partition's high
    watermark, and the position it was read from and the one to read next."""

    batch: DecodedBatch | None
    skipped: list[Skipped] = field(default_factory=list)
    high_watermark: int = -1
    position: int = -1
    next_position: int = -1


def decode_records(
    records: memoryview,
    position: int,
    high_watermark: int,
    *,
    max_decompressed: int,
    aborted: list[Any] | None,
    where: Where | None = None,
    partition: int = -1,
    mine: Where | None = None,
) -> Fetched:
    """Decode one partition's fetched record set read from `position`. Fetch v3+ always carries the first
    batch whole (KIP-74); a bad batch after good ones ends the result early and comes first in the next
    fetch, where it is stepped over as Skipped, so the partition keeps flowing."""
    if not len(records):
        return Fetched(None, high_watermark=high_watermark, position=position, next_position=position)
    try:
        batch = decode(
            records,
            max_decompressed=max_decompressed,
            aborted=aborted,
            min_offset=position,
            where=where,
            partition=partition,
            mine=mine,
        )
    except DecodeError as err:
        # past the bad batch; when its header is unreadable, record by record
        after = err.last_offset + 1 if err.last_offset >= position else position + 1
        return Fetched(None, [Skipped(position, after, err)], high_watermark, position, after)
    after = max(position, batch.next_offset) if batch.next_offset >= 0 else position
    return Fetched(batch, [], high_watermark, position, after)
