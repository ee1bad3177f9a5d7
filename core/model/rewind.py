"""Rewinds: a group sent back to a time or to offsets, across its stream's generations and clusters.

A rewind is planned (where each partition starts again, read from each generation's own cluster) and then
applied in one transaction. `RewindPlan` is both the preview (`--dry-run`) and the record of what was done.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from streamplane.model.leases import PartitionRef


class RewindTo(StrEnum):
    """What a rewind goes back to."""

    TIME = "time"
    """The first record at or after a time, in every partition (ListOffsets by timestamp)."""
    EARLIEST = "earliest"
    """The first record each partition still keeps."""
    OFFSETS = "offsets"
    """Offsets given per partition."""


@dataclass(frozen=True)
class RewindTarget:
    """Where to rewind to: a time (`time_ms`), the earliest records kept, or `offsets` per partition."""

    to: RewindTo
    time_ms: int = 0
    offsets: dict[PartitionRef, int] = field(default_factory=dict)


@dataclass(frozen=True)
class PartitionBounds:
    """What a cluster keeps of one partition: [earliest, end), and the first offset at or after a time (`at` is
    `end` when no record is that late; -1 when no time was asked)."""

    earliest: int
    end: int
    at: int = -1


@dataclass(frozen=True)
class RewindPosition:
    """One partition of a rewind: the group reads it again from `offset`; `again` of its records, done
    before, are processed again (records never processed yet are not counted)."""

    partition: PartitionRef
    offset: int
    again: int
    generation_state: str
    """The generation's state when planned (a drained one is read again by this group only)."""
    pending_ts_ms: int = 0
    """The timestamp of the record at `offset` (or a bound below it): the time lag counts from it until the
    group's next commit says better (0: not known)."""


@dataclass(frozen=True)
class RewindPlan:
    """A rewind, previewed or applied: each partition's new position, and what cannot be reprocessed (one
    sentence per generation whose cluster is gone or whose records retention removed)."""

    group: str
    stream: str
    target: RewindTarget
    positions: tuple[RewindPosition, ...]
    lost: tuple[str, ...] = ()
    applied: bool = False
    leases_regranted: int = 0
    """Leases freed to be granted again at a new epoch (their holders are fenced)."""

    @property
    def again(self) -> int:
        return sum(p.again for p in self.positions)


@dataclass(frozen=True)
class Window:
    """A side group's replay window: [from_ms, until_ms) of a stream, each partition from `offset` to the
    window's end (`again`: its records in the window), and what cannot be read."""

    group: str
    stream: str
    from_ms: int
    until_ms: int
    positions: tuple[RewindPosition, ...]
    lost: tuple[str, ...] = ()
    applied: bool = False

    @property
    def records(self) -> int:
        return sum(p.again for p in self.positions)
