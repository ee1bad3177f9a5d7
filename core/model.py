"""The typed model every part shares: topology, events, worker-session messages, commits, progress and lag.

Frozen dataclasses cross every seam (domain, servicers, client, CLI, Spark); protobuf stays in the
servicers and the client's transport (`streamplane.v1.convert` maps both ways). Topology records also have
a JSON form: it is how the coordinator stores them, and newer coordinators may add keys older ones ignore.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
from dataclasses import asdict, dataclass, field, fields
from enum import Enum, StrEnum
from typing import Any, ClassVar

from streamplane.errors import InvalidArgumentError, NotFoundError, StreamplaneError, quoted


class GenerationState(StrEnum):
    """The states a generation passes through, in order."""

    ACTIVE = "active"
    DRAINING = "draining"
    SEALED = "sealed"
    DRAINED = "drained"
    ABANDONED = "abandoned"
    """Given up by an operator (its cluster is gone for good): what was unread is recorded as lost."""


ACTIVE, DRAINING, SEALED, DRAINED, ABANDONED = GenerationState
SETTLED = (DRAINED, ABANDONED)
"""States after which nobody reads a generation again."""
GENERATION_STATES = tuple(GenerationState)


class AdminKind(StrEnum):
    """How topics are created on a cluster: Kafka's admin API, or a local engine's control endpoint."""

    KAFKA = "kafka"
    LOCAL = "local"


ADMIN_KAFKA, ADMIN_LOCAL = AdminKind


class ClusterHealth(StrEnum):
    """A cluster's health as the autopilot's monitor judges it (the client, console and doctor read it too)."""

    HEALTHY = "healthy"
    DEGRADED = "degraded"
    UNHEALTHY = "unhealthy"
    UNKNOWN = "unknown"


class LeaseState(StrEnum):
    """A lease's state: held, being handed back after a revoke, or free to grant."""

    GRANTED = "granted"
    REVOKING = "revoking"
    FREE = "free"


class RecordOutcome(StrEnum):
    """What became of a record handed to the application."""

    PENDING = "pending"
    ACKED = "acked"
    RETRIED = "retried"
    REJECTED = "rejected"


DEFAULT_LANES: dict[str, int] = {"realtime": 100, "dlq": 10}
"""Lanes every stream gets at creation, with their priorities (higher is served first)."""


@functools.cache
def _field_names(cls: Any) -> frozenset[str]:
    """A record class's field names, looked up once (a page of streams decodes thousands of records)."""
    return frozenset(f.name for f in fields(cls))


class _Record:
    """JSON round trip shared by the topology records; unknown keys from newer coordinators are ignored."""

    _nested: ClassVar[dict[str, Any]] = {}

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), separators=(",", ":"), sort_keys=True).encode()  # type: ignore[call-overload]

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Any:
        names = _field_names(cls)  # type: ignore[arg-type]  # a class is hashable; mypy sees a dataclass without __hash__
        kwargs = {k: v for k, v in data.items() if k in names}
        for name, kind in cls._nested.items():
            if isinstance(kwargs.get(name), dict):
                kwargs[name] = kind.from_dict(kwargs[name])
            elif name in kwargs:
                kwargs[name] = [kind.from_dict(item) for item in kwargs[name]]
        return cls(**kwargs)

    @classmethod
    def from_json(cls, raw: bytes) -> Any:
        return cls.from_dict(json.loads(raw))


# -- topology ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Cluster(_Record):
    """A registered Kafka cluster."""

    name: str
    bootstrap_servers: str
    zone: str = ""
    capacity_weight: float = 1.0
    health: str = ClusterHealth.HEALTHY
    """A ClusterHealth (healthy, degraded, unhealthy or unknown): the autopilot's health monitor keeps it current."""
    config_ref: str = ""
    admin: AdminKind = ADMIN_KAFKA
    control_endpoint: str = ""
    health_reasons: list[str] = field(default_factory=list)
    health_since_ms: int = 0
    """When the cluster entered its health state."""
    cordoned: bool = False
    """No new generation lands on a cordoned cluster (its existing ones stay until drained)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "admin", AdminKind(self.admin))


@dataclass(frozen=True)
class Generation(_Record):
    """The physical placement of one lane at one time."""

    number: int
    cluster: str
    topic: str
    partitions: int
    state: GenerationState = ACTIVE
    end_offsets: list[int] = field(default_factory=list)
    """Fixed when sealed: per partition, the offset after its last record."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "state", GenerationState(self.state))


@dataclass(frozen=True)
class Lane(_Record):
    """A quality-of-service class of a stream, with its generations oldest first."""

    name: str
    priority: int
    generations: list[Generation] = field(default_factory=list)
    _nested: ClassVar[dict[str, Any]] = {"generations": Generation}

    @property
    def active(self) -> Generation:
        """The generation producers write to (always the newest)."""
        return self.generations[-1]

    def generation(self, number: int) -> Generation | None:
        return next((g for g in self.generations if g.number == number), None)


MIN_SEGMENT_BYTES = 1 << 20
"""Kafka 4's smallest segment.bytes."""


@dataclass(frozen=True)
class TopicSettings(_Record):
    """Kafka settings of every topic of a stream (each lane's generations, on whichever cluster); 0 leaves a
    setting to the cluster's default."""

    replication_factor: int = 0
    min_insync_replicas: int = 0
    """With acks=all, a write is acknowledged once this many replicas have it."""
    retention_ms: int = 0
    """How long records are kept; -1 keeps them forever."""
    segment_ms: int = 0
    segment_bytes: int = 0

    def check(self) -> None:
        """InvalidArgumentError naming the first setting out of range."""
        if not 0 <= self.replication_factor <= 32767:
            raise InvalidArgumentError(
                "replication_factor must be between 1 and 32767 (0: the cluster's default), "
                f"not {self.replication_factor}"
            )
        if self.min_insync_replicas < 0:
            raise InvalidArgumentError(f"min_insync_replicas must not be negative, not {self.min_insync_replicas}")
        if self.replication_factor and self.min_insync_replicas > self.replication_factor:
            raise InvalidArgumentError(
                f"min_insync_replicas ({self.min_insync_replicas}) cannot exceed replication_factor "
                f"({self.replication_factor}): no write with acks=all could be acknowledged"
            )
        if self.retention_ms < -1:
            raise InvalidArgumentError(
                f"retention_ms must be -1 (forever), 0 (default) or positive, not {self.retention_ms}"
            )
        if self.segment_ms < 0:
            raise InvalidArgumentError(f"segment_ms must not be negative, not {self.segment_ms}")
        if self.segment_bytes and self.segment_bytes < MIN_SEGMENT_BYTES:
            raise InvalidArgumentError(
                f"segment_bytes must be at least {MIN_SEGMENT_BYTES} (Kafka's minimum), not {self.segment_bytes}"
            )

    def configs(self) -> dict[str, str]:
        """The topic configs to create topics with (the ones not left to the cluster's default)."""
        named = {
            "min.insync.replicas": self.min_insync_replicas,
            "retention.ms": self.retention_ms,
            "segment.ms": self.segment_ms,
            "segment.bytes": self.segment_bytes,
        }
        return {k: str(v) for k, v in named.items() if v}

    def describe(self) -> str:
        """One line, Kafka's names: what is set, and that the rest is the cluster's default."""
        shown = (
            {"replication.factor": str(self.replication_factor)} if self.replication_factor else {}
        ) | self.configs()
        return " ".join(f"{k}={v}" for k, v in shown.items()) or "cluster defaults"


@dataclass(frozen=True)
class Probe:
    """One look of the health monitor at a cluster."""

    cluster: str
    at_ms: int
    reachable: bool
    latency_ms: float = 0.0
    brokers: int = 0
    partitions: int = 0
    """Partitions of our topics (sp.*) the metadata lists."""
    leaderless: int = 0
    under_replicated: int = 0
    error: str = ""
    canary_ms: float = -1.0
    """A record produced to the cluster's health topic and fetched back, in ms; -1 when this probe ran none."""
    canary_error: str = ""


@dataclass(frozen=True)
class ClusterErrors:
    """Errors a client saw talking to a cluster (connections refused, brokers down) since its last report."""

    cluster: str
    count: int
    last_error: str = ""


FAILOVER_MODES = ("auto", "manual")


@dataclass(frozen=True)
class FailoverPolicy(_Record):
    """When the autopilot fails a stream's lanes over by itself."""

    mode: str = "auto"
    """auto: lanes leave a cluster that stays unhealthy; manual: only operators fail over."""
    unhealthy_after_ms: int = 10_000
    """How long a cluster must be unhealthy before lanes move."""
    min_interval_ms: int = 60_000
    """Hysteresis: a lane that failed over stays where it is this long, whatever its cluster does."""

    def check(self) -> FailoverPolicy:
        if self.mode not in FAILOVER_MODES:
            raise InvalidArgumentError(f"policy.mode must be auto or manual, not {quoted(self.mode)}")
        if not 1_000 <= self.unhealthy_after_ms <= 3_600_000:
            raise InvalidArgumentError(
                f"policy.unhealthy_after_ms must be between 1000 and 3600000, not {self.unhealthy_after_ms}"
            )
        if not 0 <= self.min_interval_ms <= 86_400_000:
            raise InvalidArgumentError(
                f"policy.min_interval_ms must be between 0 and 86400000, not {self.min_interval_ms}"
            )
        return self


@dataclass(frozen=True)
class FleetPolicy(_Record):
    """Fleet-wide limits of the autopilot."""

    frozen: bool = False
    """During an incident: health is still watched and recorded, but nothing moves by itself."""
    max_failovers_per_minute: int = 600
    """Lanes moved per minute across the fleet: the pace of topic creations on the targets' controllers, not
    the blast radius (that is `max_evacuations_per_hour`). It was 10, which took a dead cluster holding 200
    lanes about 20 minutes to empty."""
    max_evacuations_per_hour: int = 3
    """Clusters the autopilot may declare dead and evacuate in an hour: a monitoring outage cannot move the
    whole fleet at once. Once a cluster's evacuation starts, all its lanes leave together, top priority first."""
    max_unhealthy_fraction: float = 0.5
    """Past this share of the fleet unhealthy at once the autopilot moves nothing and says why (a monitoring
    fault is likelier than so many dead clusters); an operator fails over by hand."""

    def check(self) -> FleetPolicy:
        if not 1 <= self.max_failovers_per_minute <= 100_000:
            raise InvalidArgumentError(
                f"max_failovers_per_minute must be between 1 and 100000, not {self.max_failovers_per_minute}"
            )
        if not 1 <= self.max_evacuations_per_hour <= 10_000:
            raise InvalidArgumentError(
                f"max_evacuations_per_hour must be between 1 and 10000, not {self.max_evacuations_per_hour}"
            )
        if not 0 < self.max_unhealthy_fraction <= 1:
            raise InvalidArgumentError(
                f"max_unhealthy_fraction must be more than 0 and at most 1, not {self.max_unhealthy_fraction}"
            )
        return self


@dataclass(frozen=True)
class Stream(_Record):
    """A named logical topic: its lanes and their generations."""

    name: str
    lanes: list[Lane] = field(default_factory=list)
    topic: TopicSettings = field(default_factory=TopicSettings)
    """Settings of its topics."""
    failover: FailoverPolicy = field(default_factory=FailoverPolicy)
    _nested: ClassVar[dict[str, Any]] = {"lanes": Lane, "topic": TopicSettings, "failover": FailoverPolicy}

    def lane(self, name: str) -> Lane | None:
        return next((lane for lane in self.lanes if lane.name == name), None)

    def require_lane(self, name: str) -> Lane:
        """The lane, or NotFoundError naming the lanes the stream has."""
        found = self.lane(name)
        if found is None:
            raise NotFoundError(
                f"lane {quoted(name)} does not exist in stream {self.name!r} "
                f"(it has {sorted(x.name for x in self.lanes)})",
                kind="lane",
                name=f"{self.name}/{name}",
            )
        return found


@dataclass(frozen=True)
class Versioned:
    """A result of a change or a read, with the newest event version it reflects (watch from there)."""

    version: str


@dataclass(frozen=True)
class StreamPage:
    """One page of streams in name order; `next_page_token` is "" on the last; `total` counts the streams with
    the page's prefix (up to a bound, see topology.COUNT_LIMIT), on the first page only (0 on later ones)."""

    streams: list[Stream]
    next_page_token: str = ""
    total: int = 0


@dataclass(frozen=True)
class ClusterPage:
    """One page of clusters in name order; `next_page_token` is "" on the last; `total` counts the clusters
    with the page's prefix, on the first page only (0 on later ones)."""

    clusters: list[Cluster]
    next_page_token: str = ""
    total: int = 0


@dataclass(frozen=True)
class StreamAt(Versioned):
    stream: Stream


@dataclass(frozen=True)
class ClusterAt(Versioned):
    cluster: Cluster


@dataclass(frozen=True)
class FailoverResult(Versioned):
    previous: Generation
    current: Generation


@dataclass(frozen=True)
class ProducerLease:
    """The coordinator's answer to a producer heartbeat: when to beat again, and the newest topology version."""

    heartbeat_interval_ms: int
    ttl_ms: int
    topology_version: str


# -- partitions and leases -----------------------------------------------------------------------------------------

_LEASE_ID = re.compile(r"([a-z0-9][a-z0-9_-]{0,62})/([a-z][a-z0-9_-]{0,31})/g(\d{1,18})/p(\d{1,9})")
"""stream/lane/g<generation>/p<partition>: names as `streamplane.names` allows them, numbers that fit a store key."""


@dataclass(frozen=True, order=True)
class PartitionRef:
    """One partition of one generation of a lane: what a lease covers."""

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
        m = _LEASE_ID.fullmatch(lease_id or "")
        if not m:
            raise InvalidArgumentError(
                f"lease_id {quoted(lease_id)} is not of the form stream/lane/g<generation>/p<partition> (a stream "
                "name, a lane name, a generation below 10^18 and a partition below 10^9)"
            )
        return cls(m.group(1), m.group(2), int(m.group(3)), int(m.group(4)))


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


SessionEvent = Grant | Revoke | Sealed


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


@dataclass(frozen=True)
class Welcome:
    """The coordinator's answer to a hello: the session, and how often it wants heartbeats."""

    session_id: str
    heartbeat_interval_ms: int
    ttl_ms: int


@dataclass(frozen=True)
class Heartbeat:
    """A worker's liveness and load; `leases` carries only the leases whose load changed."""

    cpu: float = 0.0
    records_per_s: float = 0.0
    leases: tuple[tuple[str, LeaseLoad], ...] = ()
    errors: tuple[ClusterErrors, ...] = ()
    """Errors the worker's fetches met per cluster since its last report (sent once, like lease loads)."""


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


@dataclass(frozen=True)
class LeaseInfo:
    partition: PartitionRef
    epoch: int
    state: str
    worker_id: str
    load: LeaseLoad = LeaseLoad()

    @property
    def lease_id(self) -> str:
        return self.partition.lease_id


@dataclass(frozen=True)
class GroupDescription:
    group: str
    leader_replica: str = ""
    members: tuple[MemberInfo, ...] = ()
    leases: tuple[LeaseInfo, ...] = ()


# -- commits, progress and lag -------------------------------------------------------------------------------------

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


@dataclass(frozen=True)
class LaneLag:
    group: str
    stream: str
    lane: str
    offset_lag: int
    time_lag_ms: int


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


# -- the event log -------------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Event:
    """One committed change. `version` (24 hex digits) orders events of one log: string order is commit order."""

    version: str = ""
    time_ms: int = 0
    actor: str = ""
    kind: ClassVar[str] = ""


@dataclass(frozen=True, kw_only=True)
class TopologyEvent(Event):
    """A change of clusters, streams, lanes or generations (what WatchTopology delivers)."""


@dataclass(frozen=True, kw_only=True)
class ClusterRegistered(TopologyEvent):
    cluster: Cluster
    kind: ClassVar[str] = "cluster_registered"


@dataclass(frozen=True, kw_only=True)
class ClusterUpdated(TopologyEvent):
    cluster: Cluster
    kind: ClassVar[str] = "cluster_updated"


@dataclass(frozen=True, kw_only=True)
class ClusterHealthChanged(TopologyEvent):
    """The health monitor saw a cluster change state (`cluster` carries the new state and its reasons)."""

    cluster: Cluster
    previous: str = ""
    kind: ClassVar[str] = "cluster_health_changed"


@dataclass(frozen=True, kw_only=True)
class ClusterRemoved(TopologyEvent):
    cluster: str
    kind: ClassVar[str] = "cluster_removed"


@dataclass(frozen=True, kw_only=True)
class PolicyChanged(TopologyEvent):
    """A stream's failover policy (`stream` set) or the fleet's (`stream` empty) changed."""

    stream: str = ""
    failover: FailoverPolicy | None = None
    fleet: FleetPolicy | None = None
    kind: ClassVar[str] = "policy_changed"


@dataclass(frozen=True, kw_only=True)
class StreamCreated(TopologyEvent):
    stream: Stream
    kind: ClassVar[str] = "stream_created"


@dataclass(frozen=True, kw_only=True)
class LaneAdded(TopologyEvent):
    stream: str
    lane: Lane
    kind: ClassVar[str] = "lane_added"


@dataclass(frozen=True, kw_only=True)
class FailedOver(TopologyEvent):
    stream: str
    lane: str
    previous: Generation
    current: Generation
    reason: str = ""
    kind: ClassVar[str] = "failed_over"


@dataclass(frozen=True, kw_only=True)
class GenerationSealed(TopologyEvent):
    stream: str
    lane: str
    generation: Generation
    reason: str = ""
    kind: ClassVar[str] = "generation_sealed"


@dataclass(frozen=True, kw_only=True)
class GenerationAbandoned(TopologyEvent):
    """An operator gave a generation up; `lost` says, per group and partition, what was never processed."""

    stream: str
    lane: str
    generation: Generation
    reason: str = ""
    lost: tuple[str, ...] = ()
    kind: ClassVar[str] = "generation_abandoned"


@dataclass(frozen=True, kw_only=True)
class GenerationDrained(TopologyEvent):
    stream: str
    lane: str
    generation: Generation
    groups: tuple[str, ...] = ()
    kind: ClassVar[str] = "generation_drained"


@dataclass(frozen=True, kw_only=True)
class StreamDeleted(TopologyEvent):
    """A stream and every group's progress on it were removed. `topics` ("cluster/topic") are those of its
    generations, deleted from their clusters after this commit; `producers` and `groups` are the live ones a
    forced deletion cut off."""

    stream: str
    reason: str = ""
    topics: tuple[str, ...] = ()
    producers: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()
    kind: ClassVar[str] = "stream_deleted"


@dataclass(frozen=True)
class StreamDeletion:
    """What `stream delete` did: its event, and the topics deleted from their clusters and those left (each
    "cluster/topic: why"; the stream is deleted either way)."""

    deleted: StreamDeleted
    version: str = ""
    topics_deleted: tuple[str, ...] = ()
    topics_left: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class GroupDeleted(TopologyEvent):
    """A consumer group and everything it kept (members, leases, progress, retries, rejects, settings) were
    removed: by an operator, or because it stayed inactive past its expiry (`expired`). `members` names the
    live sessions a forced deletion ended; `generations` the draining or sealed generations it had read."""

    group: str
    reason: str = ""
    expired: bool = False
    members: tuple[str, ...] = ()
    generations: tuple[str, ...] = ()
    kind: ClassVar[str] = "group_deleted"


@dataclass(frozen=True, kw_only=True)
class GroupChanged(Event):
    """A lease or member change in one consumer group (`change`: member_joined, lease_granted, ...), in the
    group's own log (WatchGroup): group churn never reaches the topology's watchers."""

    group: str
    change: str
    worker_id: str = ""
    lease_id: str = ""
    epoch: int = 0
    reason: str = ""
    kind: ClassVar[str] = "group_event"


EVENT_KINDS: dict[str, type[TopologyEvent]] = {
    k.kind: k
    for k in (
        ClusterRegistered,
        ClusterUpdated,
        ClusterHealthChanged,
        ClusterRemoved,
        PolicyChanged,
        StreamCreated,
        LaneAdded,
        FailedOver,
        GenerationSealed,
        GenerationDrained,
        GenerationAbandoned,
        GroupDeleted,
        StreamDeleted,
    )
}
"""The topology log's stored kinds. (Group events were in it before they had a log of their own; readers of
an older store skip them.)"""


def event_stream(event: Event) -> str:
    """The stream an event concerns ("" for cluster and fleet events); group events by their lease."""
    match event:
        case StreamCreated(stream=s):
            return s.name
        case GroupChanged(lease_id=lid):
            return lid.split("/", 1)[0] if lid else ""
    value = getattr(event, "stream", "")
    return value if isinstance(value, str) else ""


def event_kind(event: Event) -> str:
    """An event's kind as listed: a group event's change (member_joined, ...), otherwise its type's kind."""
    return event.change if isinstance(event, GroupChanged) else event.kind


@dataclass(frozen=True)
class EventFilter:
    """Which events a log listing shows (the console's and `streamplane events`): each given field must match;
    `actor` is a case-insensitive substring, the others exact."""

    stream: str = ""
    group: str = ""
    actor: str = ""
    kind: str = ""

    def matches(self, event: Event) -> bool:
        return (
            (not self.stream or event_stream(event) == self.stream)
            and (not self.group or (isinstance(event, GroupChanged) and event.group == self.group))
            and (not self.actor or self.actor.lower() in event.actor.lower())
            and (not self.kind or event_kind(event) == self.kind)
        )


def describe_event(event: Event) -> str:
    """One line saying what an event changed."""
    match event:
        case ClusterRegistered(cluster=c) | ClusterUpdated(cluster=c):
            return f"{event.kind} {c.name} bootstrap={c.bootstrap_servers}"
        case StreamCreated(stream=s):
            lanes = ", ".join(f"{lane.name}:g{lane.active.number}@{lane.active.cluster}" for lane in s.lanes)
            return f"stream_created {s.name} lanes=[{lanes}]"
        case LaneAdded(stream=stream, lane=lane):
            return f"lane_added {stream}/{lane.name} g{lane.active.number}@{lane.active.cluster}"
        case GroupChanged() as g:
            lease = f" {g.lease_id}@{g.epoch}" if g.lease_id else ""
            reason = f" ({g.reason})" if g.reason else ""
            return f"{g.change} {g.group}/{g.worker_id}{lease}{reason}"
        case FailedOver() as f:
            reason = f" reason={f.reason!r}" if f.reason else ""
            return (
                f"failed_over {f.stream}/{f.lane} g{f.previous.number}@{f.previous.cluster} "
                f"({f.previous.state}) -> g{f.current.number}@{f.current.cluster}{reason}"
            )
        case GenerationSealed() as s:
            ends = ",".join(str(x) for x in s.generation.end_offsets)
            return f"generation_sealed {s.stream}/{s.lane} g{s.generation.number} end_offsets=[{ends}] ({s.reason})"
        case GenerationDrained() as d:
            return f"generation_drained {d.stream}/{d.lane} g{d.generation.number} groups={','.join(d.groups)}"
        case GenerationAbandoned() as a:
            return f"generation_abandoned {a.stream}/{a.lane} g{a.generation.number} ({a.reason}) lost={len(a.lost)}"
        case ClusterHealthChanged(cluster=c, previous=previous):
            reasons = f" ({'; '.join(c.health_reasons)})" if c.health_reasons else ""
            return f"cluster_health_changed {c.name} {previous or '?'} -> {c.health}{reasons}"
        case ClusterRemoved(cluster=name):
            return f"cluster_removed {name}"
        case StreamDeleted() as d:
            cut = f" cut_off={','.join(d.producers + d.groups)}" if d.producers or d.groups else ""
            return f"stream_deleted {d.stream} ({d.reason}) topics={len(d.topics)}{cut}"
        case GroupDeleted() as d:
            how = "expired" if d.expired else "deleted"
            ended = f" ended={','.join(d.members)}" if d.members else ""
            return f"group_deleted {d.group} ({how}: {d.reason}){ended}"
        case PolicyChanged(stream=stream, failover=failover, fleet=fleet):
            if fleet is not None:
                return (
                    f"policy_changed fleet frozen={fleet.frozen} max_failovers_per_minute="
                    f"{fleet.max_failovers_per_minute} max_evacuations_per_hour={fleet.max_evacuations_per_hour} "
                    f"max_unhealthy_fraction={fleet.max_unhealthy_fraction:g}"
                )
            return f"policy_changed {stream} {failover}"
    return event.kind or "unknown"


def to_jsonable(value: Any) -> Any:
    """Model objects (also inside lists and dicts) as plain JSON values; an event says its kind."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out = {f.name: to_jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
        kind = getattr(value, "kind", None)
        if isinstance(kind, str) and kind:
            out["kind"] = kind
        return out
    if isinstance(value, StreamplaneError):
        return {"error": type(value).__name__, "message": value.message}
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, list | tuple):
        return [to_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    return value
