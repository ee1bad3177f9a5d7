"""Conversion between the topology's domain objects and their streamplane.v1 protobuf messages."""

from __future__ import annotations

from streamplane.coordinator.model import (
    ADMIN_KAFKA,
    ADMIN_LOCAL,
    GENERATION_STATES,
    Cluster,
    Event,
    Generation,
    Lane,
    Stream,
)
from streamplane.v1 import topology_pb2 as pb

_ADMIN_TO_PB = {ADMIN_KAFKA: pb.CLUSTER_ADMIN_KAFKA, ADMIN_LOCAL: pb.CLUSTER_ADMIN_LOCAL}
_ADMIN_FROM_PB = {v: k for k, v in _ADMIN_TO_PB.items()}
_STATE_TO_PB = {state: i + 1 for i, state in enumerate(GENERATION_STATES)}


def cluster_to_pb(c: Cluster) -> pb.Cluster:
    return pb.Cluster(
        name=c.name,
        bootstrap_servers=c.bootstrap_servers,
        zone=c.zone,
        capacity_weight=c.capacity_weight,
        health=c.health,
        config_ref=c.config_ref,
        admin=_ADMIN_TO_PB.get(c.admin, pb.CLUSTER_ADMIN_UNSPECIFIED),
        control_endpoint=c.control_endpoint,
    )


def cluster_from_pb(m: pb.Cluster) -> Cluster:
    """A domain cluster from a request; an unspecified admin kind means a real Kafka cluster."""
    return Cluster(
        name=m.name,
        bootstrap_servers=m.bootstrap_servers,
        zone=m.zone,
        capacity_weight=m.capacity_weight,
        health=m.health,
        config_ref=m.config_ref,
        admin=_ADMIN_FROM_PB.get(m.admin, ADMIN_KAFKA),
        control_endpoint=m.control_endpoint,
    )


def generation_state_to_pb(state: str) -> int:
    """The GenerationState enum value of a domain generation state."""
    return _STATE_TO_PB.get(state, pb.GENERATION_STATE_UNSPECIFIED)


def generation_to_pb(g: Generation) -> pb.Generation:
    return pb.Generation(
        number=g.number,
        cluster=g.cluster,
        topic=g.topic,
        partitions=g.partitions,
        state=generation_state_to_pb(g.state),
        end_offsets=g.end_offsets,
    )


def lane_to_pb(lane: Lane) -> pb.Lane:
    return pb.Lane(name=lane.name, priority=lane.priority, generations=[generation_to_pb(g) for g in lane.generations])


def stream_to_pb(s: Stream) -> pb.Stream:
    return pb.Stream(name=s.name, lanes=[lane_to_pb(lane) for lane in s.lanes])


def event_to_pb(e: Event) -> pb.TopologyEvent:
    msg = pb.TopologyEvent(version=e.version, time_unix_ms=e.time_ms, actor=e.actor)
    d = e.data
    if e.type in ("cluster_registered", "cluster_updated"):
        getattr(msg, e.type).CopyFrom(cluster_to_pb(Cluster.from_dict(d["cluster"])))
    elif e.type == "stream_created":
        msg.stream_created.CopyFrom(stream_to_pb(Stream.from_dict(d["stream"])))
    elif e.type == "lane_added":
        msg.lane_added.CopyFrom(pb.LaneAdded(stream=d["stream"], lane=lane_to_pb(Lane.from_dict(d["lane"]))))
    elif e.type == "group_event":
        msg.group_event.CopyFrom(pb.GroupEvent(**d))
    elif e.type == "failed_over":
        msg.failed_over.CopyFrom(
            pb.FailedOver(
                stream=d["stream"],
                lane=d["lane"],
                reason=d.get("reason", ""),
                previous=generation_to_pb(Generation.from_dict(d["previous"])),
                current=generation_to_pb(Generation.from_dict(d["current"])),
            )
        )
    elif e.type == "generation_sealed":
        msg.generation_sealed.CopyFrom(
            pb.GenerationSealed(
                stream=d["stream"],
                lane=d["lane"],
                generation=generation_to_pb(Generation.from_dict(d["generation"])),
                reason=d.get("reason", ""),
            )
        )
    elif e.type == "generation_drained":
        msg.generation_drained.CopyFrom(
            pb.GenerationDrained(
                stream=d["stream"],
                lane=d["lane"],
                generation=generation_to_pb(Generation.from_dict(d["generation"])),
                groups=d.get("groups", []),
            )
        )
    return msg
