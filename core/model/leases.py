"""Partitions and leases: the lease identity (`PartitionRef`), worker-session messages, group descriptions."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import NamedTuple

from streamplane.errors import InvalidArgumentError, quoted
from streamplane.model.topology import (
    ClusterErrors,
)
from streamplane.predicate import SLICE_SPACE

_LEASE_ID = re.compile(
    r"([a-z0-9][a-z0-9_-]{0,62})/([a-z][a-z0-9_-]{0,31})/g(\d{1,18})/p(\d{1,9})(?:/s(\d{1,2})of(\d{1,2}))?"
)
"""stream/lane/g<generation>/p<partition>[/s<index>of<count>]: names as `streamplane.names` allows them, numbers
that fit a store key, and for a slice of a split partition, which of how many."""

MAX_SLICES = 16
"""The most slices a partition is ever split into (a group's `max_slices` is at most this)."""


@dataclass(frozen=True)
class Slice:
    """One of `count` slices of a split partition: the records whose key hash (the predicate subject `slice`,
    the same in C and in Python) falls in [lo, hi). A key always falls in the same slice, so order per key
    holds across the slices' holders."""

    index: int
    count: int

    @property
    def lo(self) -> int:
        return self.index * SLICE_SPACE // self.count

    @property
    def hi(self) -> int:
        return (self.index + 1) * SLICE_SPACE // self.count

    @property
    def name(self) -> str:
        """s<index>of<count>, as lease ids end."""
        return f"s{self.index}of{self.count}"

    @property
    def predicate(self) -> str:
        """The record predicate a holder of this slice reads with (its `mine`)."""
        tests = ([f"slice >= {self.lo}"] if self.lo else []) + ([f"slice < {self.hi}"] if self.hi < SLICE_SPACE else [])
        return " and ".join(tests)

    @classmethod
    def check(cls, index: int, count: int) -> Slice:
        if not 2 <= count <= MAX_SLICES or not 0 <= index < count:
            raise InvalidArgumentError(
                f"slice {index} of {count} does not exist: a partition splits into 2 to {MAX_SLICES} slices, "
                "numbered from 0"
            )
        return cls(index, count)


class PartitionRef(NamedTuple):
    """One partition of one generation of a lane: what a lease covers, and the one identity of a lease
    everywhere (the Assigner's maps, the commit log's keys, Spark's offsets). A named tuple, not a dataclass:
    the Balancer hashes and sorts these by the hundred thousand per pass, and a tuple's hash and order are
    C's (a frozen dataclass costs 3x to look up and 5x to sort). Ordered stream, lane, generation, partition.
    """

    stream: str
    lane: str
    generation: int
    partition: int

    @property
    def lease_id(self) -> str:
        """stream/lane/g<generation>/p<partition>: stable for a partition; the epoch tells grants apart."""
        return f"{self.stream}/{self.lane}/g{self.generation}/p{self.partition}"

    @classmethod
    def parse(cls, lease_id: str) -> PartitionRef:
        """The partition a lease id names (of a slice's id: the partition it is a slice of)."""
        return parse_lease(lease_id)[0]


@functools.lru_cache(maxsize=1 << 15)  # the same leases' ids come with every commit and heartbeat
def parse_lease(lease_id: str) -> tuple[PartitionRef, Slice | None]:
    """The partition a lease id names, and the slice of it (None: the whole partition); InvalidArgumentError
    for one that is not a lease id. Both are immutable, so the answers are kept."""
    m = _LEASE_ID.fullmatch(lease_id or "")
    if not m:
        raise InvalidArgumentError(
            f"lease_id {quoted(lease_id)} is not of the form stream/lane/g<generation>/p<partition> (a stream "
            "name, a lane name, a generation below 10^18 and a partition below 10^9), with /s<index>of<count> "
            "for a slice"
        )
    ref = PartitionRef(m.group(1), m.group(2), int(m.group(3)), int(m.group(4)))
    if m.group(5) is None:
        return ref, None
    return ref, Slice.check(int(m.group(5)), int(m.group(6)))


def slice_lease_id(ref: PartitionRef, piece: Slice | None) -> str:
    """The lease id of a partition, or of one slice of it."""
    return f"{ref.lease_id}/{piece.name}" if piece is not None else ref.lease_id


@dataclass(frozen=True)
class Grant:
    """A lease granted to this worker: read `partition` of `topic` on `cluster` from `start_offset`."""

    lease_id: str
    partition: PartitionRef
    epoch: int
    topic: str
    cluster: str
    bootstrap_servers: str
    start_offset: int = -1
    """Where the group's progress resumes; -1 when the group never committed on this partition."""
    end_offset: int = -1
    """The offset after the partition's last record once its generation is sealed; -1 before."""
    clean: bool = False
    """Nothing above `start_offset` is done or retrying yet: the worker need not read the progress (a handoff
    after a clean revoke, a rewind). False when unknown: it reads it."""
    slice: Slice | None = None
    """The slice of the partition this lease covers (None: all of it): its holder hands its handlers only the
    records whose key hash is in it, and commits only those; the other slices' holders do the rest."""

    @property
    def sealed(self) -> bool:
        return self.end_offset >= 0


@dataclass(frozen=True)
class Revoke:
    """Hand the lease back by `deadline_ms` (0: it is already gone; stop at once)."""

    lease_id: str
    epoch: int
    deadline_ms: int = 0
    reason: str = ""


@dataclass(frozen=True)
class Sealed:
    """The generation of a held lease was sealed: the partition ends at `end_offset`."""

    lease_id: str
    partition: PartitionRef
    end_offset: int


@dataclass(frozen=True)
class Finished:
    """The group's replay window is processed to its end: the worker's `run()` returns."""

    reason: str


@dataclass(frozen=True)
class Expect:
    """Grants for this worker are on their way (a rewind of its group is being applied): it keeps its brokers'
    long polls short until they come, or for `for_ms` at most, so that it reads them at once."""

    for_ms: int


SessionEvent = Grant | Revoke | Sealed | Finished | Expect


@dataclass(frozen=True)
class Subscription:
    stream: str
    lanes: tuple[str, ...] = ()
    """Empty: every lane but dlq."""


@dataclass(frozen=True)
class LeaseLoad:
    """One lease's load as its holder measured it."""

    records_per_s: float = 0.0
    lag_records: int = 0
    lag_ms: int = 0


@dataclass(frozen=True)
class Hello:
    """The first message of a worker's session: who it is and what it reads."""

    group: str
    worker_id: str
    subscriptions: tuple[Subscription, ...]
    capacity: float = 1.0
    max_load: float = 0.0
    resume_session: str = ""
    """The session its stream lost: resumed with its leases while it lives (see the proto)."""
    where: str = ""
    """The record predicate it filters with, as rendered ("" for none): a group configured with one refuses
    a worker whose own differs."""
    takes_batches: bool = False
    """It reads several events in one message (what one change means for it arrives at once)."""
    takes_slices: bool = False
    """It reads slices of split partitions (handles only a slice's records); one that does not is never granted
    a slice."""
    takes_hints: bool = False
    """It reads `Expect` (grants on their way); one that does not is never sent one."""


@dataclass(frozen=True)
class Welcome:
    """The coordinator's answer to a hello: the session, and how often it wants heartbeats."""

    session_id: str
    heartbeat_interval_ms: int
    ttl_ms: int
    where: str = ""
    """The group's record predicate, as rendered ("" for none): a worker that has none of its own filters with
    it, so that every member filters alike."""


@dataclass(frozen=True)
class Heartbeat:
    """A worker's liveness and load; `leases` carries only the leases whose load changed."""

    cpu: float = 0.0
    records_per_s: float = 0.0
    leases: tuple[tuple[str, LeaseLoad], ...] = ()
    errors: tuple[ClusterErrors, ...] = ()
    """Errors the worker's fetches met per cluster since its last report (sent once, like lease loads)."""

    def merged(self, later: Heartbeat) -> Heartbeat:
        """This heartbeat and a later one of the same session, neither sent (or written) yet, as one: the later
        figures, every lease's latest load, errors added up per cluster (the later last error kept). Lease
        loads and errors go out once: one replaced by the next would be lost for good."""
        if not self.leases and not self.errors:
            return later
        loads = dict(self.leases)
        loads.update(later.leases)
        errors = {e.cluster: e for e in self.errors}
        for e in later.errors:
            was = errors.get(e.cluster)
            errors[e.cluster] = (
                e if was is None else ClusterErrors(e.cluster, was.count + e.count, e.last_error or was.last_error)
            )
        return Heartbeat(later.cpu, later.records_per_s, tuple(loads.items()), tuple(errors.values()))


@dataclass(frozen=True)
class Release:
    """A worker hands a lease back (after a revoke, once in-flight work is done)."""

    lease_id: str
    epoch: int


@dataclass(frozen=True)
class Renew:
    """A fresh bearer token for an open session, before the one it opened with expires."""

    token: str = field(repr=False)


WorkerMessage = Hello | Heartbeat | Release | Renew


@dataclass(frozen=True)
class MemberInfo:
    worker_id: str
    session_id: str
    subscriptions: tuple[Subscription, ...] = ()
    capacity: float = 1.0
    max_load: float = 0.0
    cpu: float = 0.0
    records_per_s: float = 0.0
    alive_until_ms: int = 0
    principal: str = ""
    """Who opened the session (its authenticated principal): only they commit for its leases."""
    takes_slices: bool = False
    """Its worker handles slices of split partitions (see Hello.takes_slices)."""


@dataclass(frozen=True)
class LeaseInfo:
    partition: PartitionRef
    epoch: int
    state: str
    worker_id: str
    load: LeaseLoad = LeaseLoad()
    slice: Slice | None = None
    """A slice lease of a split partition (None: the whole partition's)."""

    @property
    def lease_id(self) -> str:
        return slice_lease_id(self.partition, self.slice)


@dataclass(frozen=True)
class GroupDescription:
    group: str
    leader_replica: str = ""
    members: tuple[MemberInfo, ...] = ()
    leases: tuple[LeaseInfo, ...] = ()
    unknown: bool = False
    """No worker ever joined the group, nor was it configured, nor has it progress: most likely a mistyped
    name (the description is then empty)."""
