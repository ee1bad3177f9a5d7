"""Commits, progress and lag: what a worker records per lease, and what the commit log answers."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from streamplane.errors import StreamplaneError
from streamplane.model.leases import PartitionRef

OffsetRange = tuple[int, int]
"""[start, end): start included, end excluded."""


@dataclass(frozen=True)
class Retry:
    offset: int
    attempt: int
    error: str = ""
    backoff_ms: int = 0


@dataclass(frozen=True)
class DlqLocation:
    """Where a rejected record was written in the dlq lane."""

    stream: str
    lane: str
    generation: int
    partition: int
    offset: int


@dataclass(frozen=True)
class Reject:
    offset: int
    reason: str
    dlq: DlqLocation | None = None
    copy: int = 0
    """In `Commit.copying`: the number of the dlq copy asked for (the copies begun so far, plus one)."""


@dataclass(frozen=True)
class Commit:
    """One batched commit of a lease holder."""

    acked: list[OffsetRange] = field(default_factory=list)
    retries: list[Retry] = field(default_factory=list)
    rejects: list[Reject] = field(default_factory=list)
    oldest_pending_ts_ms: int = 0
    high_watermark: int = 0
    high_watermark_ts_ms: int = 0
    acked_bitmap: bytes = b""
    """Scattered acks: bit i (little-endian) set = offset acked_bitmap_base + i acked."""
    acked_bitmap_base: int = 0
    copying: list[Reject] = field(default_factory=list)
    """Rejects whose dlq copy the holder is about to write: recorded first, so that a copy is written once per
    reject decision (the outcome's `copies` names the ones to write)."""
    filtered: list[OffsetRange] = field(default_factory=list)
    """Offsets the holder's `where` predicate left out: done, as acked ones are, and counted apart (each once,
    however often the commit is sent)."""


GAVE_UP = "max attempts reached; last error"
"""How the reject reason of a record whose retries used up the group's max attempts begins."""
DLQ_COPY_TIMEOUT_MS = 10_000
"""A dlq copy is delivered or has failed this long after it was begun (the consumer's dlq producer gives up
then); until it is over (and a margin), nobody begins another copy of that record, so a copy stuck behind a
broker fault while its lease moves does not get a sibling."""


@dataclass(frozen=True)
class DlqCopy:
    """Leave to write one dlq copy of `offset`; `copy` counts the copies begun for it (1 unless a holder began
    one before and was not seen to finish it)."""

    offset: int
    copy: int


@dataclass(frozen=True)
class LeaseCommit:
    """A commit for one lease, fenced by its epoch."""

    lease_id: str
    epoch: int
    commit: Commit


@dataclass(frozen=True)
class CommitOutcome:
    """What the commit log made of one lease's commit: recorded (error None), or refused with `error`."""

    lease_id: str
    low_watermark: int = 0
    exhausted: tuple[int, ...] = ()
    """Offsets whose attempts ran out with this commit: the holder rejects them."""
    retries: int = 0
    """Offsets with retry state after the commit."""
    error: StreamplaneError | None = None
    copies: tuple[DlqCopy, ...] = ()
    """The dlq copies to write now: of the commit's `copying` entries not done yet, and of `exhausted`."""


@dataclass(frozen=True)
class RetryState:
    offset: int
    attempts: int
    next_attempt_ms: int
    last_error: str = ""
    exhausted: bool = False
    copies: int = 0
    """Dlq copies begun for this offset."""


MAX_PROGRESS_LEASES = 1000
"""Leases one GetProgressBatch names at most: the coordinator refuses more, and a client asks no more."""


@dataclass(frozen=True)
class Progress:
    lease_id: str
    low_watermark: int
    high_watermark: int
    done: tuple[OffsetRange, ...] = ()
    done_above_low_watermark: int = 0
    retries: int = 0
    rejects: int = 0
    offset_lag: int = 0
    time_lag_ms: int = 0
    oldest_pending_ts_ms: int = 0
    retrying: tuple[int, ...] = ()
    """Offsets above the low watermark with retry state: a new holder leaves them to `due_retries`, which knows
    their attempts so far, instead of handing them out as first attempts."""


@dataclass(frozen=True)
class PartitionLag:
    group: str
    lease_id: str
    low_watermark: int
    high_watermark: int
    offset_lag: int
    time_lag_ms: int
    filtered: int = 0
    """Records the group's `where` predicate left out (done without reaching a handler)."""


@dataclass(frozen=True)
class LaneLag:
    group: str
    stream: str
    lane: str
    offset_lag: int
    time_lag_ms: int
    dlq_pending: int = 0
    """Records the group rejected whose dlq copies wait (neither redriven nor purged)."""
    dlq_redriven: int = 0
    """Rejected records `dlq redrive` produced again."""
    dlq_purged: int = 0
    """Rejected records `dlq purge` stopped listing."""
    filtered: int = 0
    """Records the group's `where` predicate left out (done without reaching a handler)."""


@dataclass(frozen=True)
class Lag:
    """Lag of one group, or of every group that committed (group "")."""

    group: str
    partitions: tuple[PartitionLag, ...] = ()
    lanes: tuple[LaneLag, ...] = ()
    next_page_token: str = ""
    """For a page of partitions (see `commitlog.lag_page`): "" on the last."""

    @property
    def offset_lag(self) -> int:
        return sum(x.offset_lag for x in self.lanes)

    @property
    def time_lag_ms(self) -> int:
        return max((x.time_lag_ms for x in self.lanes), default=0)


@dataclass(frozen=True)
class RejectedRecord:
    """A record a group rejected: where it came from, why, after how many attempts, when, and where its dlq
    copy went (None: not recorded, as by a Spark query or a reject from before copies were recorded)."""

    partition: PartitionRef
    offset: int
    reason: str
    attempts: int = 0
    """Attempts the record had when it was rejected (0: not recorded, a reject from before they were)."""
    rejected_ms: int = 0
    """When the commit log recorded the reject (0: not recorded)."""
    dlq: DlqLocation | None = None
    group: str = ""
    state: str = "pending"
    """pending (its record waits in the dlq lane), or purged (`dlq purge`: no longer listed)."""


@dataclass(frozen=True)
class RejectRun:
    """A claimed batch's rejects of one partition whose dlq copies went to one lane, packed (a redrive claims
    thousands at a time, and builds no object a record): index i of each tuple is one record, its offset and
    where its copy is (generation 0: none recorded; then `dlq_stream` and `dlq_lane` are "")."""

    partition: PartitionRef
    dlq_stream: str
    dlq_lane: str
    offsets: tuple[int, ...]
    dlq_generations: tuple[int, ...]
    dlq_partitions: tuple[int, ...]
    dlq_offsets: tuple[int, ...]


RunRow = tuple[PartitionRef, int, str, str, int, int, int]
"""One reject as a run holds it: its partition and offset, and its dlq copy's stream, lane, generation,
partition and offset ("", "", 0, 0, 0: none recorded, or none with a generation and a lane)."""


def run_row(
    ref: PartitionRef,
    offset: int,
    dlq_stream: str = "",
    dlq_lane: str = "",
    generation: int = 0,
    partition: int = 0,
    at: int = 0,
) -> RunRow:
    """A reject as a run's row: its dlq copy's place kept only for a copy with a generation and a lane."""
    if generation > 0 and dlq_lane:
        return (ref, offset, dlq_stream, dlq_lane, generation, partition, at)
    return (ref, offset, "", "", 0, 0, 0)


def pack_runs(rows: Iterable[RunRow]) -> tuple[RejectRun, ...]:
    """Rejects as runs, one per (partition, dlq stream, dlq lane), in the rows' order within each."""
    grouped: dict[tuple[PartitionRef, str, str], tuple[list[int], list[int], list[int], list[int]]] = {}
    for ref, offset, dlq_stream, dlq_lane, generation, partition, at in rows:
        run = grouped.get((ref, dlq_stream, dlq_lane))
        if run is None:
            run = grouped[(ref, dlq_stream, dlq_lane)] = ([], [], [], [])
        run[0].append(offset)
        run[1].append(generation)
        run[2].append(partition)
        run[3].append(at)
    return tuple(
        RejectRun(ref, s, la, tuple(o), tuple(g), tuple(p), tuple(d)) for (ref, s, la), (o, g, p, d) in grouped.items()
    )


def reject_runs(records: tuple[RejectedRecord, ...]) -> tuple[RejectRun, ...]:
    """Records as runs (see `pack_runs`)."""
    return pack_runs(
        run_row(r.partition, r.offset)
        if r.dlq is None
        else run_row(r.partition, r.offset, r.dlq.stream, r.dlq.lane, r.dlq.generation, r.dlq.partition, r.dlq.offset)
        for r in records
    )


@dataclass(frozen=True)
class RedriveTarget:
    """Where a redrive produces: a lane's active generation, with each partition's end offset when the batch
    was claimed (from where a later run looks for what a killed one may have produced already)."""

    stream: str
    lane: str
    generation: int
    topic: str
    bootstrap_servers: str
    from_offsets: tuple[int, ...]


@dataclass(frozen=True)
class RedriveClaim:
    """The next batch of rejected records a redrive produces again, claimed for one run.

    `in_doubt`: a run that claimed this batch ended before completing it, so some of it may be in the target
    already (look from `target.from_offsets` for their provenance header). `cursor`: where the next claim goes
    on from. `done`: nothing is left in the window (the claim is released once the run's batches in flight are
    completed). `wait_ms`: see below. `batch_id`: what completing this batch names."""

    batch: tuple[RejectedRecord, ...]
    target: RedriveTarget | None
    cursor: str = ""
    in_doubt: bool = False
    done: bool = False
    wait_ms: int = 0
    """Over 0: another run holds the claim for this long yet (unless it makes progress); nothing was claimed."""
    batch_id: int = 0
    last: bool = False
    """The walk's last batch: no claim follows it, and its completion releases the claim (a claim after it
    would walk again from the start, over every reject this run redrove, to find nothing). Said by the commit
    log, so that a run of a coordinator that does not say it claims until done, as before."""
    runs: tuple[RejectRun, ...] = ()
    """The batch packed, as a claim that asked for it so is answered (then `batch` is empty)."""
    completes: bool = False
    """The commit log completes a batch a claim names (and did, when this claim named one): a run completes each
    batch in its next claim, one call a batch. Not said by a coordinator from before: its runs complete apart."""

    def reject_runs(self) -> tuple[RejectRun, ...]:
        """The batch as runs, however it was answered."""
        return self.runs or reject_runs(self.batch)

    @property
    def size(self) -> int:
        """Rejects in the batch."""
        return sum(len(run.offsets) for run in self.runs) + len(self.batch)


@dataclass(frozen=True)
class RejectPage:
    """One page of rejected records, oldest partition first, and the token of the next ("" on the last)."""

    rejects: list[RejectedRecord]
    next_page_token: str = ""
