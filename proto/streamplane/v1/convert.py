"""Conversion between the typed model (`streamplane.model`) and the streamplane.v1 protobuf messages.

The one place that knows both: the coordinator's servicers and the client's transport call it, nothing else
sees protobuf. Each `*_to_pb` has its `*_from_pb`, so both sides of the wire use the same mapping.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from typing import Any, TypedDict, cast

from streamplane import model as m
from streamplane.errors import InvalidArgumentError, StreamplaneError, UnavailableError
from streamplane.rpc import details_json, error_from_code, status_for
from streamplane.v1 import assigner_pb2 as apb
from streamplane.v1 import commitlog_pb2 as cpb
from streamplane.v1 import topology_pb2 as pb

_ADMIN_TO_PB = {m.ADMIN_KAFKA: pb.CLUSTER_ADMIN_KAFKA, m.ADMIN_LOCAL: pb.CLUSTER_ADMIN_LOCAL}
_ADMIN_FROM_PB: dict[int, m.AdminKind] = {int(v): k for k, v in _ADMIN_TO_PB.items()}


def _admin_from_pb(value: int) -> m.AdminKind:
    """The admin kind of a wire enum value: unspecified means Kafka; one outside the enum is refused."""
    if value == pb.CLUSTER_ADMIN_UNSPECIFIED:
        return m.ADMIN_KAFKA
    if value not in _ADMIN_FROM_PB:
        raise InvalidArgumentError(f"cluster.admin {value} is not a known admin kind (kafka or local)")
    return _ADMIN_FROM_PB[value]


_STATE_TO_PB = {state: i + 1 for i, state in enumerate(m.GENERATION_STATES)}
_STATE_FROM_PB = {v: k for k, v in _STATE_TO_PB.items()}


# -- topology ------------------------------------------------------------------------------------------------------


def cluster_to_pb(c: m.Cluster) -> pb.Cluster:
    return pb.Cluster(
        name=c.name,
        bootstrap_servers=c.bootstrap_servers,
        zone=c.zone,
        capacity_weight=c.capacity_weight,
        health=c.health,
        config_ref=c.config_ref,
        admin=_ADMIN_TO_PB[c.admin],
        control_endpoint=c.control_endpoint,
        health_reasons=list(c.health_reasons),
        health_since_unix_ms=c.health_since_ms,
        cordoned=c.cordoned,
    )


def cluster_from_pb(x: pb.Cluster) -> m.Cluster:
    """An unspecified admin kind means a real Kafka cluster."""
    return m.Cluster(
        name=x.name,
        bootstrap_servers=x.bootstrap_servers,
        zone=x.zone,
        capacity_weight=x.capacity_weight,
        health=x.health,
        config_ref=x.config_ref,
        admin=_admin_from_pb(x.admin),
        control_endpoint=x.control_endpoint,
        health_reasons=list(x.health_reasons),
        health_since_ms=x.health_since_unix_ms,
        cordoned=x.cordoned,
    )


def probe_to_pb(p: m.Probe) -> pb.Probe:
    return pb.Probe(
        at_unix_ms=p.at_ms,
        reachable=p.reachable,
        latency_ms=p.latency_ms,
        brokers=p.brokers,
        partitions=p.partitions,
        leaderless=p.leaderless,
        under_replicated=p.under_replicated,
        error=p.error,
        canary_ms=p.canary_ms,
        canary_error=p.canary_error,
    )


def probe_from_pb(cluster: str, x: pb.Probe) -> m.Probe:
    return m.Probe(
        cluster,
        x.at_unix_ms,
        x.reachable,
        x.latency_ms,
        x.brokers,
        x.partitions,
        x.leaderless,
        x.under_replicated,
        x.error,
        x.canary_ms,
        x.canary_error,
    )


def cluster_errors_to_pb(errors: Iterable[m.ClusterErrors]) -> list[pb.ClusterErrors]:
    return [pb.ClusterErrors(cluster=e.cluster, count=e.count, last_error=e.last_error) for e in errors]


def cluster_errors_from_pb(errors: Iterable[pb.ClusterErrors]) -> list[m.ClusterErrors]:
    return [m.ClusterErrors(e.cluster, e.count, e.last_error) for e in errors]


def failover_policy_to_pb(p: m.FailoverPolicy) -> pb.FailoverPolicy:
    return pb.FailoverPolicy(mode=p.mode, unhealthy_after_ms=p.unhealthy_after_ms, min_interval_ms=p.min_interval_ms)


def failover_policy_from_pb(x: pb.FailoverPolicy) -> m.FailoverPolicy:
    """Unset fields take the defaults."""
    d = m.FailoverPolicy()
    return m.FailoverPolicy(
        mode=x.mode or d.mode,
        unhealthy_after_ms=x.unhealthy_after_ms or d.unhealthy_after_ms,
        min_interval_ms=x.min_interval_ms or d.min_interval_ms,
    )


def fleet_policy_to_pb(p: m.FleetPolicy) -> pb.FleetPolicy:
    return pb.FleetPolicy(
        frozen=p.frozen,
        max_failovers_per_minute=p.max_failovers_per_minute,
        max_evacuations_per_hour=p.max_evacuations_per_hour,
        max_unhealthy_fraction=p.max_unhealthy_fraction,
    )


def fleet_policy_from_pb(x: pb.FleetPolicy) -> m.FleetPolicy:
    default = m.FleetPolicy()
    return m.FleetPolicy(
        frozen=x.frozen,
        max_failovers_per_minute=x.max_failovers_per_minute or default.max_failovers_per_minute,
        max_evacuations_per_hour=x.max_evacuations_per_hour or default.max_evacuations_per_hour,
        max_unhealthy_fraction=x.max_unhealthy_fraction or default.max_unhealthy_fraction,
    )


def state_to_pb(state: m.GenerationState) -> pb.GenerationState:
    return cast("pb.GenerationState", _STATE_TO_PB[state])


def state_from_pb(value: int) -> m.GenerationState:
    """An unspecified state (an older coordinator) reads as active."""
    return _STATE_FROM_PB.get(value, m.ACTIVE)


def generation_to_pb(g: m.Generation) -> pb.Generation:
    return pb.Generation(
        number=g.number,
        cluster=g.cluster,
        topic=g.topic,
        partitions=g.partitions,
        state=state_to_pb(g.state),
        end_offsets=g.end_offsets,
    )


def generation_from_pb(x: pb.Generation) -> m.Generation:
    return m.Generation(
        number=x.number,
        cluster=x.cluster,
        topic=x.topic,
        partitions=x.partitions,
        state=state_from_pb(x.state),
        end_offsets=list(x.end_offsets),
    )


def lane_to_pb(lane: m.Lane) -> pb.Lane:
    return pb.Lane(name=lane.name, priority=lane.priority, generations=[generation_to_pb(g) for g in lane.generations])


def lane_from_pb(x: pb.Lane) -> m.Lane:
    return m.Lane(name=x.name, priority=x.priority, generations=[generation_from_pb(g) for g in x.generations])


def topic_settings_to_pb(t: m.TopicSettings) -> pb.TopicSettings:
    return pb.TopicSettings(
        replication_factor=t.replication_factor,
        min_insync_replicas=t.min_insync_replicas,
        retention_ms=t.retention_ms,
        segment_ms=t.segment_ms,
        segment_bytes=t.segment_bytes,
    )


def topic_settings_from_pb(x: pb.TopicSettings) -> m.TopicSettings:
    return m.TopicSettings(x.replication_factor, x.min_insync_replicas, x.retention_ms, x.segment_ms, x.segment_bytes)


def stream_to_pb(s: m.Stream) -> pb.Stream:
    return pb.Stream(
        name=s.name,
        lanes=[lane_to_pb(lane) for lane in s.lanes],
        topic=topic_settings_to_pb(s.topic),
        failover=failover_policy_to_pb(s.failover),
    )


def stream_from_pb(x: pb.Stream) -> m.Stream:
    return m.Stream(
        name=x.name,
        lanes=[lane_from_pb(lane) for lane in x.lanes],
        topic=topic_settings_from_pb(x.topic),
        failover=failover_policy_from_pb(x.failover),
    )


def generation_abandoned_to_pb(e: m.GenerationAbandoned) -> pb.GenerationAbandoned:
    return pb.GenerationAbandoned(
        stream=e.stream, lane=e.lane, generation=generation_to_pb(e.generation), reason=e.reason, lost=list(e.lost)
    )


def generation_abandoned_from_pb(a: pb.GenerationAbandoned, **head: Any) -> m.GenerationAbandoned:
    return m.GenerationAbandoned(
        **head,
        stream=a.stream,
        lane=a.lane,
        generation=generation_from_pb(a.generation),
        reason=a.reason,
        lost=tuple(a.lost),
    )


def group_deleted_to_pb(e: m.GroupDeleted) -> pb.GroupDeleted:
    return pb.GroupDeleted(
        group=e.group, reason=e.reason, expired=e.expired, members=list(e.members), generations=list(e.generations)
    )


def group_deleted_from_pb(d: pb.GroupDeleted, **head: Any) -> m.GroupDeleted:
    return m.GroupDeleted(
        **head,
        group=d.group,
        reason=d.reason,
        expired=d.expired,
        members=tuple(d.members),
        generations=tuple(d.generations),
    )


def stream_deleted_to_pb(e: m.StreamDeleted) -> pb.StreamDeleted:
    return pb.StreamDeleted(
        stream=e.stream, reason=e.reason, topics=list(e.topics), producers=list(e.producers), groups=list(e.groups)
    )


def stream_deleted_from_pb(d: pb.StreamDeleted, **head: Any) -> m.StreamDeleted:
    return m.StreamDeleted(
        **head,
        stream=d.stream,
        reason=d.reason,
        topics=tuple(d.topics),
        producers=tuple(d.producers),
        groups=tuple(d.groups),
    )


def stream_deletion_to_pb(x: m.StreamDeletion) -> pb.DeleteStreamResponse:
    return pb.DeleteStreamResponse(
        deleted=stream_deleted_to_pb(x.deleted),
        version=x.version,
        topics_deleted=list(x.topics_deleted),
        topics_left=list(x.topics_left),
    )


def stream_deletion_from_pb(x: pb.DeleteStreamResponse) -> m.StreamDeletion:
    return m.StreamDeletion(
        stream_deleted_from_pb(x.deleted, version=x.version),
        x.version,
        tuple(x.topics_deleted),
        tuple(x.topics_left),
    )


def event_to_pb(e: m.TopologyEvent) -> pb.TopologyEvent:
    msg = pb.TopologyEvent(version=e.version, time_unix_ms=e.time_ms, actor=e.actor)
    match e:
        case m.ClusterRegistered(cluster=c):
            msg.cluster_registered.CopyFrom(cluster_to_pb(c))
        case m.ClusterUpdated(cluster=c):
            msg.cluster_updated.CopyFrom(cluster_to_pb(c))
        case m.ClusterHealthChanged(cluster=c):
            msg.cluster_health_changed.CopyFrom(pb.ClusterHealthChanged(cluster=cluster_to_pb(c), previous=e.previous))
        case m.ClusterRemoved():
            msg.cluster_removed = e.cluster
        case m.GenerationAbandoned():
            msg.generation_abandoned.CopyFrom(generation_abandoned_to_pb(e))
        case m.GroupDeleted():
            msg.group_deleted.CopyFrom(group_deleted_to_pb(e))
        case m.StreamDeleted():
            msg.stream_deleted.CopyFrom(stream_deleted_to_pb(e))
        case m.PolicyChanged():
            changed = pb.PolicyChanged(stream=e.stream)
            if e.failover is not None:
                changed.failover.CopyFrom(failover_policy_to_pb(e.failover))
            if e.fleet is not None:
                changed.fleet.CopyFrom(fleet_policy_to_pb(e.fleet))
            msg.policy_changed.CopyFrom(changed)
        case m.StreamCreated(stream=s):
            msg.stream_created.CopyFrom(stream_to_pb(s))
        case m.LaneAdded():
            msg.lane_added.CopyFrom(pb.LaneAdded(stream=e.stream, lane=lane_to_pb(e.lane)))
        case m.FailedOver():
            msg.failed_over.CopyFrom(
                pb.FailedOver(
                    stream=e.stream,
                    lane=e.lane,
                    reason=e.reason,
                    previous=generation_to_pb(e.previous),
                    current=generation_to_pb(e.current),
                )
            )
        case m.GenerationSealed():
            msg.generation_sealed.CopyFrom(
                pb.GenerationSealed(
                    stream=e.stream, lane=e.lane, generation=generation_to_pb(e.generation), reason=e.reason
                )
            )
        case m.GenerationDrained():
            msg.generation_drained.CopyFrom(
                pb.GenerationDrained(
                    stream=e.stream, lane=e.lane, generation=generation_to_pb(e.generation), groups=e.groups
                )
            )
    return msg


class _Head(TypedDict):
    """What every event carries, as keyword arguments of its class."""

    version: str
    time_ms: int
    actor: str


def event_from_pb(x: pb.TopologyEvent) -> m.TopologyEvent:
    """The typed event; a kind this client does not know (a newer coordinator, or an older one's group event)
    comes back as the base class."""
    head = _Head(version=x.version, time_ms=x.time_unix_ms, actor=x.actor)
    match x.WhichOneof("kind"):
        case "cluster_registered":
            return m.ClusterRegistered(**head, cluster=cluster_from_pb(x.cluster_registered))
        case "cluster_updated":
            return m.ClusterUpdated(**head, cluster=cluster_from_pb(x.cluster_updated))
        case "cluster_health_changed":
            h = x.cluster_health_changed
            return m.ClusterHealthChanged(**head, cluster=cluster_from_pb(h.cluster), previous=h.previous)
        case "cluster_removed":
            return m.ClusterRemoved(**head, cluster=x.cluster_removed)
        case "generation_abandoned":
            return generation_abandoned_from_pb(x.generation_abandoned, **head)
        case "group_deleted":
            return group_deleted_from_pb(x.group_deleted, **head)
        case "stream_deleted":
            return stream_deleted_from_pb(x.stream_deleted, **head)
        case "policy_changed":
            p = x.policy_changed
            return m.PolicyChanged(
                **head,
                stream=p.stream,
                failover=failover_policy_from_pb(p.failover) if p.HasField("failover") else None,
                fleet=fleet_policy_from_pb(p.fleet) if p.HasField("fleet") else None,
            )
        case "stream_created":
            return m.StreamCreated(**head, stream=stream_from_pb(x.stream_created))
        case "lane_added":
            a = x.lane_added
            return m.LaneAdded(**head, stream=a.stream, lane=lane_from_pb(a.lane))
        case "failed_over":
            f = x.failed_over
            return m.FailedOver(
                **head,
                stream=f.stream,
                lane=f.lane,
                reason=f.reason,
                previous=generation_from_pb(f.previous),
                current=generation_from_pb(f.current),
            )
        case "generation_sealed":
            s = x.generation_sealed
            return m.GenerationSealed(
                **head, stream=s.stream, lane=s.lane, generation=generation_from_pb(s.generation), reason=s.reason
            )
        case "generation_drained":
            d = x.generation_drained
            return m.GenerationDrained(
                **head,
                stream=d.stream,
                lane=d.lane,
                generation=generation_from_pb(d.generation),
                groups=tuple(d.groups),
            )
    return m.TopologyEvent(**head)


def group_event_to_pb(e: m.GroupChanged) -> pb.GroupEvent:
    return pb.GroupEvent(
        group=e.group,
        type=e.change,
        worker_id=e.worker_id,
        lease_id=e.lease_id,
        epoch=e.epoch,
        reason=e.reason,
        version=e.version,
        time_unix_ms=e.time_ms,
        actor=e.actor,
    )


def group_event_from_pb(x: pb.GroupEvent) -> m.GroupChanged:
    return m.GroupChanged(
        version=x.version,
        time_ms=x.time_unix_ms,
        actor=x.actor,
        group=x.group,
        change=x.type,
        worker_id=x.worker_id,
        lease_id=x.lease_id,
        epoch=x.epoch,
        reason=x.reason,
    )


def generation_refs_to_pb(refs: Iterable[tuple[str, str, int]]) -> list[pb.GenerationRef]:
    return [pb.GenerationRef(stream=s, lane=lane, generation=g) for s, lane, g in refs]


# -- worker sessions -----------------------------------------------------------------------------------------------


def partition_to_pb(p: m.PartitionRef) -> apb.PartitionRef:
    return apb.PartitionRef(stream=p.stream, lane=p.lane, generation=p.generation, partition=p.partition)


def partition_from_pb(x: apb.PartitionRef) -> m.PartitionRef:
    return m.PartitionRef(x.stream, x.lane, x.generation, x.partition)


def partition_offsets_to_pb(pairs: Iterable[tuple[m.PartitionRef, int]], out: Any) -> None:
    """Append (partition, offset) pairs to a repeated PartitionOffset field."""
    for ref, offset in pairs:
        out.add(partition=partition_to_pb(ref), offset=offset)


def partition_offsets_from_pb(xs: Iterable[apb.PartitionOffset]) -> list[tuple[m.PartitionRef, int]]:
    """A repeated PartitionOffset field as (partition, offset) pairs."""
    return [(partition_from_pb(x.partition), x.offset) for x in xs]


def subscription_to_pb(s: m.Subscription) -> apb.Subscription:
    return apb.Subscription(stream=s.stream, lanes=list(s.lanes))


def subscription_from_pb(x: apb.Subscription) -> m.Subscription:
    return m.Subscription(x.stream, tuple(x.lanes))


def worker_message_to_pb(x: m.WorkerMessage) -> apb.WorkerMessage:
    match x:
        case m.Hello():
            return apb.WorkerMessage(
                hello=apb.Hello(
                    group=x.group,
                    worker_id=x.worker_id,
                    capacity=x.capacity,
                    max_load=x.max_load,
                    subscriptions=[subscription_to_pb(s) for s in x.subscriptions],
                    resume_session=x.resume_session,
                    where=x.where,
                    takes_batches=x.takes_batches,
                    takes_slices=x.takes_slices,
                    takes_hints=x.takes_hints,
                )
            )
        case m.Heartbeat():
            return apb.WorkerMessage(
                heartbeat=apb.Heartbeat(
                    cpu=x.cpu,
                    records_per_s=x.records_per_s,
                    leases=[
                        apb.LeaseLoad(
                            lease_id=lid, records_per_s=y.records_per_s, lag_records=y.lag_records, lag_ms=y.lag_ms
                        )
                        for lid, y in x.leases
                    ],
                    errors=cluster_errors_to_pb(x.errors),
                )
            )
        case m.Release():
            return apb.WorkerMessage(release=apb.Release(lease_id=x.lease_id, epoch=x.epoch))
        case m.Renew():
            return apb.WorkerMessage(renew=apb.Renew(token=x.token))


def worker_message_from_pb(x: apb.WorkerMessage) -> m.WorkerMessage | None:
    """The typed message; None for an empty one."""
    match x.WhichOneof("kind"):
        case "hello":
            h = x.hello
            subs = tuple(subscription_from_pb(s) for s in h.subscriptions)
            return m.Hello(
                h.group,
                h.worker_id,
                subs,
                capacity=h.capacity,
                max_load=h.max_load,
                resume_session=h.resume_session,
                where=h.where,
                takes_batches=h.takes_batches,
                takes_slices=h.takes_slices,
                takes_hints=h.takes_hints,
            )
        case "heartbeat":
            b = x.heartbeat
            loads = tuple((y.lease_id, m.LeaseLoad(y.records_per_s, y.lag_records, y.lag_ms)) for y in b.leases)
            return m.Heartbeat(b.cpu, b.records_per_s, loads, tuple(cluster_errors_from_pb(b.errors)))
        case "release":
            return m.Release(x.release.lease_id, x.release.epoch)
        case "renew":
            return m.Renew(x.renew.token)
    return None


def welcome_to_pb(w: m.Welcome) -> apb.AssignerMessage:
    return apb.AssignerMessage(
        welcome=apb.Welcome(
            session_id=w.session_id, heartbeat_interval_ms=w.heartbeat_interval_ms, ttl_ms=w.ttl_ms, where=w.where
        )
    )


def welcome_from_pb(x: apb.AssignerMessage) -> m.Welcome | None:
    """The welcome of the first message of a session; None when it is something else."""
    if x.WhichOneof("kind") != "welcome":
        return None
    w = x.welcome
    return m.Welcome(w.session_id, w.heartbeat_interval_ms, w.ttl_ms, w.where)


def session_event_to_pb(event: m.SessionEvent) -> apb.AssignerMessage:
    match event:
        case m.Grant():
            sealed = event.sealed
            return apb.AssignerMessage(
                grant=apb.Grant(
                    lease_id=event.lease_id,
                    partition=partition_to_pb(event.partition),
                    epoch=event.epoch,
                    topic=event.topic,
                    cluster=event.cluster,
                    bootstrap_servers=event.bootstrap_servers,
                    start_offset=event.start_offset,
                    generation_state=state_to_pb(m.SEALED if sealed else m.ACTIVE),
                    end_offset=event.end_offset,
                    clean=event.clean,
                    slice_index=event.slice.index if event.slice is not None else 0,
                    slice_count=event.slice.count if event.slice is not None else 0,
                )
            )
        case m.Revoke():
            return apb.AssignerMessage(
                revoke=apb.Revoke(
                    lease_id=event.lease_id,
                    epoch=event.epoch,
                    deadline_unix_ms=event.deadline_ms,
                    reason=event.reason,
                )
            )
        case m.Sealed():
            return apb.AssignerMessage(
                generation_change=apb.GenerationChange(
                    lease_id=event.lease_id,
                    partition=partition_to_pb(event.partition),
                    state=pb.GENERATION_STATE_SEALED,
                    end_offset=event.end_offset,
                )
            )
        case m.Finished():
            return apb.AssignerMessage(finished=apb.GroupFinished(reason=event.reason))
        case m.Expect():
            return apb.AssignerMessage(expect=apb.Expect(for_ms=event.for_ms))


def session_events_to_pb(events: list[m.SessionEvent]) -> apb.AssignerMessage:
    """Several events in one message (EventBatch), in their order; one alone goes as itself."""
    if len(events) == 1:
        return session_event_to_pb(events[0])
    return apb.AssignerMessage(batch=apb.EventBatch(events=[session_event_to_pb(e) for e in events]))


def session_events_from_pb(x: apb.AssignerMessage) -> list[m.SessionEvent]:
    """The typed events of a message, one or a batch's, in order (a welcome, a generation change that is not a
    seal, and a batch inside a batch carry none)."""
    if x.WhichOneof("kind") == "batch":
        found = (session_event_from_pb(y) for y in x.batch.events if y.WhichOneof("kind") != "batch")
        return [e for e in found if e is not None]
    event = session_event_from_pb(x)
    return [] if event is None else [event]


def session_event_from_pb(x: apb.AssignerMessage) -> m.SessionEvent | None:
    """The typed event of a message; None for a welcome, or a generation change that is not a seal."""
    match x.WhichOneof("kind"):
        case "grant":
            g = x.grant
            return m.Grant(
                lease_id=g.lease_id,
                partition=partition_from_pb(g.partition),
                epoch=g.epoch,
                topic=g.topic,
                cluster=g.cluster,
                bootstrap_servers=g.bootstrap_servers,
                start_offset=g.start_offset,
                end_offset=g.end_offset if g.generation_state == pb.GENERATION_STATE_SEALED else -1,
                clean=g.clean,
                slice=m.Slice.check(g.slice_index, g.slice_count) if g.slice_count else None,
            )
        case "revoke":
            r = x.revoke
            return m.Revoke(lease_id=r.lease_id, epoch=r.epoch, deadline_ms=r.deadline_unix_ms, reason=r.reason)
        case "generation_change" if x.generation_change.state == pb.GENERATION_STATE_SEALED:
            c = x.generation_change
            return m.Sealed(lease_id=c.lease_id, partition=partition_from_pb(c.partition), end_offset=c.end_offset)
        case "finished":
            return m.Finished(x.finished.reason)
        case "expect":
            return m.Expect(x.expect.for_ms)
    return None


def group_to_pb(d: m.GroupDescription) -> apb.GroupDescription:
    return apb.GroupDescription(
        group=d.group,
        leader_replica=d.leader_replica,
        unknown=d.unknown,
        members=[
            apb.MemberInfo(
                worker_id=x.worker_id,
                session_id=x.session_id,
                capacity=x.capacity,
                max_load=x.max_load,
                cpu=x.cpu,
                records_per_s=x.records_per_s,
                alive_until_unix_ms=x.alive_until_ms,
                subscriptions=[subscription_to_pb(s) for s in x.subscriptions],
            )
            for x in d.members
        ],
        leases=[
            apb.LeaseInfo(
                lease_id=x.lease_id,
                partition=partition_to_pb(x.partition),
                epoch=x.epoch,
                state=x.state,
                worker_id=x.worker_id,
                records_per_s=x.load.records_per_s,
                lag_records=x.load.lag_records,
                lag_ms=x.load.lag_ms,
            )
            for x in d.leases
        ],
    )


def group_from_pb(x: apb.GroupDescription) -> m.GroupDescription:
    return m.GroupDescription(
        group=x.group,
        leader_replica=x.leader_replica,
        unknown=x.unknown,
        members=tuple(
            m.MemberInfo(
                worker_id=y.worker_id,
                session_id=y.session_id,
                subscriptions=tuple(subscription_from_pb(s) for s in y.subscriptions),
                capacity=y.capacity,
                max_load=y.max_load,
                cpu=y.cpu,
                records_per_s=y.records_per_s,
                alive_until_ms=y.alive_until_unix_ms,
            )
            for y in x.members
        ),
        leases=tuple(
            m.LeaseInfo(
                partition=partition_from_pb(y.partition),
                epoch=y.epoch,
                state=y.state,
                worker_id=y.worker_id,
                load=m.LeaseLoad(y.records_per_s, y.lag_records, y.lag_ms),
                slice=m.parse_lease(y.lease_id)[1] if "/s" in y.lease_id else None,
            )
            for y in x.leases
        ),
    )


# -- commits, progress, lag ----------------------------------------------------------------------------------------


def _dlq_to_pb(d: m.DlqLocation) -> cpb.DlqLocation:
    return cpb.DlqLocation(
        stream=d.stream, lane=d.lane, generation=d.generation, partition=d.partition, offset=d.offset
    )


def _dlq_from_pb(d: cpb.DlqLocation) -> m.DlqLocation:
    return m.DlqLocation(d.stream, d.lane, d.generation, d.partition, d.offset)


def _reject_to_pb(r: m.Reject) -> cpb.RejectEntry:
    entry = cpb.RejectEntry(offset=r.offset, reason=r.reason, copy=r.copy)
    if r.dlq is not None:
        entry.dlq.CopyFrom(_dlq_to_pb(r.dlq))
    return entry


def _reject_from_pb(x: cpb.RejectEntry) -> m.Reject:
    return m.Reject(x.offset, x.reason, _dlq_from_pb(x.dlq) if x.HasField("dlq") else None, x.copy)


def _rejected_to_pb(r: m.RejectedRecord, out: cpb.RejectedRecord) -> None:
    """Set in place, field by field (a redrive batch converts thousands)."""
    out.group, out.offset, out.reason, out.attempts = r.group, r.offset, r.reason, r.attempts
    ref, p = r.partition, out.partition
    p.stream, p.lane, p.generation, p.partition = ref.stream, ref.lane, ref.generation, ref.partition
    out.rejected_unix_ms, out.state = r.rejected_ms, r.state
    if r.dlq is not None:
        d = out.dlq
        d.stream, d.lane, d.generation, d.partition, d.offset = (
            r.dlq.stream, r.dlq.lane, r.dlq.generation, r.dlq.partition, r.dlq.offset
        )  # fmt: skip


def _rejected_from_pb(y: cpb.RejectedRecord) -> m.RejectedRecord:
    return m.RejectedRecord(
        partition=partition_from_pb(y.partition),
        offset=y.offset,
        reason=y.reason,
        attempts=y.attempts,
        rejected_ms=y.rejected_unix_ms,
        dlq=_dlq_from_pb(y.dlq) if y.HasField("dlq") else None,
        group=y.group,
        state=y.state,
    )


def reject_page_to_pb(page: m.RejectPage) -> cpb.ListRejectsResponse:
    out = cpb.ListRejectsResponse(next_page_token=page.next_page_token)
    for r in page.rejects:
        _rejected_to_pb(r, out.rejects.add())
    return out


def reject_page_from_pb(x: cpb.ListRejectsResponse) -> m.RejectPage:
    return m.RejectPage([_rejected_from_pb(y) for y in x.rejects], x.next_page_token)


def redrive_claim_to_pb(c: m.RedriveClaim, *, packed: bool = False) -> cpb.ClaimRedriveResponse:
    """The claim, its batch as runs when `packed` (what the client asked), else a message a record."""
    out = cpb.ClaimRedriveResponse(
        cursor=c.cursor, in_doubt=c.in_doubt, done=c.done, wait_ms=c.wait_ms, batch_id=c.batch_id, last=c.last
    )
    if packed:
        for run in c.reject_runs():
            y, ref = out.runs.add(), run.partition
            p = y.partition
            p.stream, p.lane, p.generation, p.partition = ref.stream, ref.lane, ref.generation, ref.partition
            y.dlq_stream, y.dlq_lane = run.dlq_stream, run.dlq_lane
            y.offsets.extend(run.offsets)
            y.dlq_generations.extend(run.dlq_generations)
            y.dlq_partitions.extend(run.dlq_partitions)
            y.dlq_offsets.extend(run.dlq_offsets)
    else:
        for r in c.batch:
            _rejected_to_pb(r, out.batch.add())
    if c.target is not None:
        t = c.target
        out.target.CopyFrom(
            cpb.RedriveTarget(
                stream=t.stream,
                lane=t.lane,
                generation=t.generation,
                topic=t.topic,
                bootstrap_servers=t.bootstrap_servers,
                from_offsets=list(t.from_offsets),
            )
        )
    return out


def redrive_claim_from_pb(x: cpb.ClaimRedriveResponse) -> m.RedriveClaim:
    t = x.target
    target = (
        m.RedriveTarget(t.stream, t.lane, t.generation, t.topic, t.bootstrap_servers, tuple(t.from_offsets))
        if x.HasField("target")
        else None
    )
    batch = tuple(_rejected_from_pb(y) for y in x.batch)
    runs = tuple(
        m.RejectRun(
            partition_from_pb(y.partition),
            y.dlq_stream,
            y.dlq_lane,
            tuple(y.offsets),
            tuple(y.dlq_generations),
            tuple(y.dlq_partitions),
            tuple(y.dlq_offsets),
        )
        for y in x.runs
    )
    if any(not len(r.offsets) == len(r.dlq_generations) == len(r.dlq_partitions) == len(r.dlq_offsets) for r in runs):
        raise UnavailableError("the coordinator answered a redrive claim whose runs do not line up: run it again")
    return m.RedriveClaim(
        batch, target, x.cursor, x.in_doubt, x.done, x.wait_ms, x.batch_id, x.last, runs, completes=x.completes
    )


def commit_to_pb(group: str, c: m.LeaseCommit) -> cpb.CommitRequest:
    body = c.commit
    out = cpb.CommitRequest(
        group=group,
        lease_id=c.lease_id,
        epoch=c.epoch,
        retries=[
            cpb.RetryEntry(offset=r.offset, attempt=r.attempt, error=r.error, backoff_ms=r.backoff_ms)
            for r in body.retries
        ],
        rejects=[_reject_to_pb(r) for r in body.rejects],
        oldest_pending_ts_ms=body.oldest_pending_ts_ms,
        high_watermark=body.high_watermark,
        high_watermark_ts_ms=body.high_watermark_ts_ms,
        acked_bitmap=body.acked_bitmap,
        acked_bitmap_base=body.acked_bitmap_base,
        copying=[_reject_to_pb(r) for r in body.copying],
    )
    # added in place: a third of the cost of building each range as a message and copying it in
    add = out.acked.add
    for s, e in body.acked:
        add(start=s, end=e)
    # a sparse where's commit carries thousands: as packed numbers, a fifth of the cost to build, a third to read
    out.filtered_bounds.extend(itertools.chain.from_iterable(body.filtered))
    return out


def commit_from_pb(x: cpb.CommitRequest) -> m.LeaseCommit:
    body = m.Commit(
        acked=[(r.start, r.end) for r in x.acked],
        retries=[m.Retry(r.offset, r.attempt, r.error, r.backoff_ms) for r in x.retries],
        rejects=[_reject_from_pb(r) for r in x.rejects],
        oldest_pending_ts_ms=x.oldest_pending_ts_ms,
        high_watermark=x.high_watermark,
        high_watermark_ts_ms=x.high_watermark_ts_ms,
        acked_bitmap=x.acked_bitmap,
        acked_bitmap_base=x.acked_bitmap_base,
        copying=[_reject_from_pb(r) for r in x.copying],
        filtered=_filtered_from_pb(x),
    )
    return m.LeaseCommit(x.lease_id, x.epoch, body)


def _filtered_from_pb(x: cpb.CommitRequest) -> list[tuple[int, int]]:
    """A commit's filtered ranges: from their packed bounds, or as messages from a client that predates them."""
    bounds = x.filtered_bounds
    if not bounds:
        return [(r.start, r.end) for r in x.filtered]
    if len(bounds) % 2:
        raise InvalidArgumentError(
            f"filtered_bounds holds {len(bounds)} numbers: its ranges are start, end pairs, an even count"
        )
    return list(zip(bounds[0::2], bounds[1::2], strict=True))


def outcome_to_pb(o: m.CommitOutcome) -> cpb.CommitResult:
    if o.error is not None:
        return cpb.CommitResult(
            lease_id=o.lease_id,
            code=status_for(o.error).value[0],
            message=o.error.message,
            kind=type(o.error).__name__,
            details=details_json(o.error),
        )
    return cpb.CommitResult(
        lease_id=o.lease_id,
        low_watermark=o.low_watermark,
        exhausted=o.exhausted,
        retries=o.retries,
        copies=copies_to_pb(o.copies),
    )


def copies_to_pb(copies: tuple[m.DlqCopy, ...]) -> list[cpb.DlqCopy]:
    return [cpb.DlqCopy(offset=c.offset, copy=c.copy) for c in copies]


def copies_from_pb(copies: Iterable[cpb.DlqCopy]) -> tuple[m.DlqCopy, ...]:
    return tuple(m.DlqCopy(c.offset, c.copy) for c in copies)


def outcome_from_pb(x: cpb.CommitResult) -> m.CommitOutcome:
    error: StreamplaneError | None = None
    if x.code:
        error = error_from_code(x.code, x.message, x.kind, x.details)
    return m.CommitOutcome(
        lease_id=x.lease_id,
        low_watermark=x.low_watermark,
        exhausted=tuple(x.exhausted),
        retries=x.retries,
        error=error,
        copies=copies_from_pb(x.copies),
    )


def progress_to_pb(p: m.Progress) -> cpb.Progress:
    return cpb.Progress(
        lease_id=p.lease_id,
        low_watermark=p.low_watermark,
        high_watermark=p.high_watermark,
        done=[cpb.OffsetRange(start=a, end=b) for a, b in p.done],
        done_above_low_watermark=p.done_above_low_watermark,
        retries=p.retries,
        rejects=p.rejects,
        offset_lag=p.offset_lag,
        time_lag_ms=p.time_lag_ms,
        oldest_pending_ts_ms=p.oldest_pending_ts_ms,
        retrying=p.retrying,
    )


def progress_from_pb(x: cpb.Progress) -> m.Progress:
    return m.Progress(
        lease_id=x.lease_id,
        low_watermark=x.low_watermark,
        high_watermark=x.high_watermark,
        done=tuple((r.start, r.end) for r in x.done),
        done_above_low_watermark=x.done_above_low_watermark,
        retries=x.retries,
        rejects=x.rejects,
        offset_lag=x.offset_lag,
        time_lag_ms=x.time_lag_ms,
        oldest_pending_ts_ms=x.oldest_pending_ts_ms,
        retrying=tuple(x.retrying),
    )


def retry_state_to_pb(r: m.RetryState) -> cpb.RetryState:
    return cpb.RetryState(
        offset=r.offset,
        attempts=r.attempts,
        next_attempt_unix_ms=r.next_attempt_ms,
        last_error=r.last_error,
        exhausted=r.exhausted,
        copies=r.copies,
    )


def retry_state_from_pb(x: cpb.RetryState) -> m.RetryState:
    return m.RetryState(x.offset, x.attempts, x.next_attempt_unix_ms, x.last_error, x.exhausted, x.copies)


def lag_to_pb(lag: m.Lag) -> cpb.GetLagResponse:
    return cpb.GetLagResponse(
        group=lag.group,
        next_page_token=lag.next_page_token,
        partitions=[
            cpb.PartitionLag(
                group=x.group,
                lease_id=x.lease_id,
                low_watermark=x.low_watermark,
                high_watermark=x.high_watermark,
                offset_lag=x.offset_lag,
                time_lag_ms=x.time_lag_ms,
                filtered=x.filtered,
            )
            for x in lag.partitions
        ],
        lanes=[
            cpb.LaneLag(
                group=x.group,
                stream=x.stream,
                lane=x.lane,
                offset_lag=x.offset_lag,
                time_lag_ms=x.time_lag_ms,
                dlq_pending=x.dlq_pending,
                dlq_redriven=x.dlq_redriven,
                dlq_purged=x.dlq_purged,
                filtered=x.filtered,
            )
            for x in lag.lanes
        ],
        offset_lag=lag.offset_lag,
        time_lag_ms=lag.time_lag_ms,
    )


def lag_from_pb(x: cpb.GetLagResponse) -> m.Lag:
    return m.Lag(
        group=x.group,
        partitions=tuple(
            m.PartitionLag(
                y.group, y.lease_id, y.low_watermark, y.high_watermark, y.offset_lag, y.time_lag_ms, y.filtered
            )
            for y in x.partitions
        ),
        lanes=tuple(
            m.LaneLag(
                y.group,
                y.stream,
                y.lane,
                y.offset_lag,
                y.time_lag_ms,
                y.dlq_pending,
                y.dlq_redriven,
                y.dlq_purged,
                y.filtered,
            )
            for y in x.lanes
        ),
        next_page_token=x.next_page_token,
    )


def rewind_request_to_pb(
    group: str, stream: str, target: m.RewindTarget, *, lane: str = "", dry_run: bool = False, force: bool = False
) -> apb.RewindGroupRequest:
    out = apb.RewindGroupRequest(group=group, stream=stream, lane=lane, dry_run=dry_run, force=force)
    if target.to == m.RewindTo.TIME:
        out.time_ms = target.time_ms
    elif target.to == m.RewindTo.EARLIEST:
        out.earliest = True
    else:
        partition_offsets_to_pb(target.offsets.items(), out.offsets.offsets)
    return out


def rewind_target_from_pb(x: apb.RewindGroupRequest) -> m.RewindTarget:
    """The target a request names; InvalidArgumentError when it names none."""
    which = x.WhichOneof("to")
    if which == "time_ms":
        return m.RewindTarget(m.RewindTo.TIME, time_ms=x.time_ms)
    if which == "earliest" and x.earliest:
        return m.RewindTarget(m.RewindTo.EARLIEST)
    if which == "offsets":
        return m.RewindTarget(m.RewindTo.OFFSETS, offsets=dict(partition_offsets_from_pb(x.offsets.offsets)))
    raise InvalidArgumentError("a rewind needs where to: time_ms, earliest or offsets")


def window_to_pb(w: m.Window) -> apb.CreateWindowGroupResponse:
    out = apb.CreateWindowGroupResponse(
        lost=list(w.lost), applied=w.applied, from_unix_ms=w.from_ms, until_unix_ms=w.until_ms
    )
    _positions_to_pb(w.positions, out.positions)
    return out


def window_from_pb(x: apb.CreateWindowGroupResponse, group: str, stream: str) -> m.Window:
    positions = _positions_from_pb(x.positions)
    return m.Window(group, stream, x.from_unix_ms, x.until_unix_ms, positions, tuple(x.lost), x.applied)


def _positions_to_pb(positions: Iterable[m.RewindPosition], out: Any) -> None:
    for p in positions:
        out.add(
            partition=partition_to_pb(p.partition),
            offset=p.offset,
            again=p.again,
            generation_state=p.generation_state,
            pending_unix_ms=p.pending_ts_ms,
        )


def _positions_from_pb(positions: Iterable[apb.RewindPosition]) -> tuple[m.RewindPosition, ...]:
    return tuple(
        m.RewindPosition(partition_from_pb(p.partition), p.offset, p.again, p.generation_state, p.pending_unix_ms)
        for p in positions
    )


def rewind_plan_to_pb(plan: m.RewindPlan) -> apb.RewindGroupResponse:
    out = apb.RewindGroupResponse(lost=list(plan.lost), applied=plan.applied, leases_regranted=plan.leases_regranted)
    _positions_to_pb(plan.positions, out.positions)
    return out


def rewind_plan_from_pb(x: apb.RewindGroupResponse, group: str, stream: str, target: m.RewindTarget) -> m.RewindPlan:
    positions = _positions_from_pb(x.positions)
    return m.RewindPlan(group, stream, target, positions, tuple(x.lost), x.applied, x.leases_regranted)
