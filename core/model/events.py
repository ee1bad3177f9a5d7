"""The event log: every change to topology and groups, as typed events, with their filter and one-line form."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from streamplane.model.topology import (
    Cluster,
    FailoverPolicy,
    FleetPolicy,
    Generation,
    Lane,
    Stream,
)


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


@dataclass(frozen=True, kw_only=True)
class UnreadableEvent(Event):
    """An event whose stored form does not decode (never written so by this code, or a kind from a newer
    coordinator): listed with its version, passed over by watchers, so a log never stops at it."""

    kind: ClassVar[str] = "unreadable"


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
    if isinstance(event, UnreadableEvent):
        return "unreadable: its stored form does not decode"
    return event.kind or "unknown"
