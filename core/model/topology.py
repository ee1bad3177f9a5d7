"""Topology: clusters, streams, their lanes and generations, policies, and the pages they are listed in."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from streamplane.errors import InvalidArgumentError, NotFoundError, quoted
from streamplane.model.base import (
    ACTIVE,
    ADMIN_KAFKA,
    AdminKind,
    ClusterHealth,
    GenerationState,
    _Record,
)


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
    unreadable: list[str] = field(default_factory=list)
    """Streams of this page's range whose stored records do not decode (bad data in the store): left out of
    `streams`, named here so that nobody takes the page for the whole story."""


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
