"""The TopologyService servicer: decode the request, call the topology domain, encode the answer.

Errors are mapped to gRPC statuses by `streamplane.rpc`; nothing here decides anything.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import grpc

from streamplane.coordinator.rpc import auth
from streamplane.coordinator.rpc.guard import Guard
from streamplane.coordinator.topology import events
from streamplane.coordinator.topology import lifecycle as stream_lifecycle
from streamplane.coordinator.topology.sealing import Sealer
from streamplane.coordinator.topology.topology import Topology
from streamplane.model import Probe, TopologyEvent
from streamplane.rpc import grpc_errors, grpc_stream_errors
from streamplane.v1 import convert
from streamplane.v1 import topology_pb2 as pb
from streamplane.v1 import topology_pb2_grpc as pb_grpc


class TopologyServicer(pb_grpc.TopologyServiceServicer):
    def __init__(
        self,
        topology: Topology,
        sealer: Sealer,
        *,
        guard: Guard | None = None,
        probes: Callable[[str], list[Probe]] = lambda name: [],
    ):
        self._topology = topology
        self._sealer = sealer
        self._guard = guard or Guard()
        self._probes = probes

    @grpc_errors
    def RegisterCluster(
        self, request: pb.RegisterClusterRequest, context: grpc.ServicerContext
    ) -> pb.RegisterClusterResponse:
        actor = self._guard.change(context, auth.CHANGE_CLUSTERS)
        done = self._topology.register_cluster(
            convert.cluster_from_pb(request.cluster), update_existing=request.update_existing, actor=actor
        )
        return pb.RegisterClusterResponse(cluster=convert.cluster_to_pb(done.value), version=done.version)

    @grpc_errors
    def ListClusters(self, request: pb.ListClustersRequest, context: grpc.ServicerContext) -> pb.ListClustersResponse:
        self._guard.require(context, auth.READ)
        page = self._topology.cluster_page(
            prefix=request.prefix, page_size=request.page_size, page_token=request.page_token, health=request.health
        )
        return pb.ListClustersResponse(
            clusters=[convert.cluster_to_pb(c) for c in page.clusters],
            next_page_token=page.next_page_token,
            total=page.total,
        )

    @grpc_errors
    def CreateStream(self, request: pb.CreateStreamRequest, context: grpc.ServicerContext) -> pb.StreamResponse:
        actor = self._guard.change(context, auth.CHANGE_STREAMS, stream=request.name)
        done = self._topology.create_stream(
            request.name,
            request.partitions,
            request.cluster,
            topic=convert.topic_settings_from_pb(request.topic),
            actor=actor,
        )
        return pb.StreamResponse(stream=convert.stream_to_pb(done.value), version=done.version)

    @grpc_errors
    def DescribeStream(self, request: pb.DescribeStreamRequest, context: grpc.ServicerContext) -> pb.StreamResponse:
        self._guard.require(context, auth.READ)
        done = self._topology.describe_stream(request.name)
        return pb.StreamResponse(stream=convert.stream_to_pb(done.value), version=done.version)

    @grpc_errors
    def ListStreams(self, request: pb.ListStreamsRequest, context: grpc.ServicerContext) -> pb.ListStreamsResponse:
        self._guard.require(context, auth.READ)
        page = self._topology.stream_page(
            prefix=request.prefix, page_size=request.page_size, page_token=request.page_token, cluster=request.cluster
        )
        return pb.ListStreamsResponse(
            streams=[convert.stream_to_pb(s) for s in page.streams],
            next_page_token=page.next_page_token,
            total=page.total,
            unreadable=page.unreadable,
        )

    @grpc_errors
    def AddLane(self, request: pb.AddLaneRequest, context: grpc.ServicerContext) -> pb.StreamResponse:
        actor = self._guard.change(context, auth.CHANGE_STREAMS, stream=request.stream)
        done = self._topology.add_lane(
            request.stream, request.lane, request.priority, request.partitions, request.cluster, actor=actor
        )
        return pb.StreamResponse(stream=convert.stream_to_pb(done.value), version=done.version)

    @grpc_errors
    def Failover(self, request: pb.FailoverRequest, context: grpc.ServicerContext) -> pb.FailoverResponse:
        actor = self._guard.change(context, auth.CHANGE_STREAMS, stream=request.stream)
        done = self._topology.failover(
            request.stream,
            request.lane,
            request.target_cluster,
            request.partitions,
            request.reason,
            actor=actor,
        )
        previous, current = done.value
        return pb.FailoverResponse(
            previous=convert.generation_to_pb(previous), current=convert.generation_to_pb(current), version=done.version
        )

    @grpc_stream_errors
    async def WatchTopology(
        self, request: pb.WatchTopologyRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.TopologyEvent]:
        self._guard.require(context, auth.READ)
        after = events.parse_version(request.from_version)
        read = self._topology.read_events_and_watch
        async for event in events.follow(read, after, until_head=request.until_head):
            if isinstance(event, TopologyEvent):  # not a group event an older store kept in this log
                yield convert.event_to_pb(event)

    @grpc_errors
    def ProducerHeartbeat(
        self, request: pb.ProducerHeartbeatRequest, context: grpc.ServicerContext
    ) -> pb.ProducerHeartbeatResponse:
        principal = self._guard.principal(context)
        auth.check_any_write(principal)
        for w in request.writes:
            auth.check_write(principal, w.stream, w.lane)
        for g in request.in_flight:
            auth.check_write(principal, g.stream, g.lane)
        cfg = self._sealer.config
        if request.declares_writes:
            streams: list[str] | None = [w.stream for w in request.writes]
        else:  # an older client: every stream its token reaches (all, unscoped)
            streams = list(principal.streams) if principal.streams else None
        head = self._sealer.producer_heartbeat(
            request.producer_id,
            request.topology_version,
            [(g.stream, g.lane, g.generation) for g in request.in_flight],
            principal=principal.name,
            errors=convert.cluster_errors_from_pb(request.errors),
            streams=streams,
        )
        return pb.ProducerHeartbeatResponse(
            heartbeat_interval_ms=cfg.producer_heartbeat_ms, ttl_ms=cfg.producer_ttl_ms, topology_version=head
        )

    @grpc_errors
    def ClusterHealth(
        self, request: pb.ClusterHealthRequest, context: grpc.ServicerContext
    ) -> pb.ClusterHealthResponse:
        self._guard.require(context, auth.READ)
        cluster = self._topology.get_cluster(request.name)
        probes = [convert.probe_to_pb(p) for p in self._probes(cluster.name)]
        return pb.ClusterHealthResponse(cluster=convert.cluster_to_pb(cluster), probes=probes)

    @grpc_errors
    def CordonCluster(self, request: pb.CordonClusterRequest, context: grpc.ServicerContext) -> pb.Cluster:
        actor = self._guard.change(context, auth.CHANGE_CLUSTERS)
        return convert.cluster_to_pb(self._topology.cordon(request.name, request.cordoned, actor=actor).value)

    @grpc_errors
    def RemoveCluster(
        self, request: pb.RemoveClusterRequest, context: grpc.ServicerContext
    ) -> pb.RemoveClusterResponse:
        actor = self._guard.change(context, auth.CHANGE_CLUSTERS)
        return pb.RemoveClusterResponse(version=self._topology.remove_cluster(request.name, actor=actor).version)

    @grpc_errors
    def SetStreamPolicy(self, request: pb.SetStreamPolicyRequest, context: grpc.ServicerContext) -> pb.StreamResponse:
        actor = self._guard.change(context, auth.CHANGE_STREAMS, stream=request.stream)
        policy = convert.failover_policy_from_pb(request.policy)
        done = self._topology.set_stream_policy(request.stream, policy, actor=actor)
        return pb.StreamResponse(stream=convert.stream_to_pb(done.value), version=done.version)

    @grpc_errors
    def SetFleetPolicy(self, request: pb.FleetPolicy, context: grpc.ServicerContext) -> pb.FleetPolicy:
        actor = self._guard.change(context, auth.CHANGE_CLUSTERS)
        done = self._topology.set_fleet_policy(convert.fleet_policy_from_pb(request), actor=actor)
        return convert.fleet_policy_to_pb(done.value)

    @grpc_errors
    def GetFleetPolicy(self, request: pb.GetFleetPolicyRequest, context: grpc.ServicerContext) -> pb.FleetPolicy:
        self._guard.require(context, auth.READ)
        return convert.fleet_policy_to_pb(self._topology.fleet_policy())

    @grpc_errors
    def AbandonGeneration(
        self, request: pb.AbandonGenerationRequest, context: grpc.ServicerContext
    ) -> pb.GenerationAbandoned:
        actor = self._guard.change(context, auth.CHANGE_STREAMS, stream=request.stream)
        done = self._topology.abandon_generation(
            request.stream, request.lane, request.generation, request.reason, actor=actor
        )
        return convert.generation_abandoned_to_pb(done.value)

    @grpc_errors
    def DeleteStream(self, request: pb.DeleteStreamRequest, context: grpc.ServicerContext) -> pb.DeleteStreamResponse:
        actor = self._guard.change(context, auth.CHANGE_STREAMS, stream=request.name)
        done = stream_lifecycle.delete_stream(
            self._topology, request.name, force=request.force, reason=request.reason, actor=actor
        )
        return convert.stream_deletion_to_pb(done)

    @grpc_errors
    def CloseProducer(
        self, request: pb.CloseProducerRequest, context: grpc.ServicerContext
    ) -> pb.CloseProducerResponse:
        principal = self._guard.principal(context)
        auth.check_any_write(principal)
        self._sealer.close_producer(request.producer_id, principal.name)
        return pb.CloseProducerResponse()
