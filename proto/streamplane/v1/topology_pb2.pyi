from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ClusterAdmin(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CLUSTER_ADMIN_UNSPECIFIED: _ClassVar[ClusterAdmin]
    CLUSTER_ADMIN_KAFKA: _ClassVar[ClusterAdmin]
    CLUSTER_ADMIN_LOCAL: _ClassVar[ClusterAdmin]

class GenerationState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    GENERATION_STATE_UNSPECIFIED: _ClassVar[GenerationState]
    GENERATION_STATE_ACTIVE: _ClassVar[GenerationState]
    GENERATION_STATE_DRAINING: _ClassVar[GenerationState]
    GENERATION_STATE_SEALED: _ClassVar[GenerationState]
    GENERATION_STATE_DRAINED: _ClassVar[GenerationState]
    GENERATION_STATE_ABANDONED: _ClassVar[GenerationState]
CLUSTER_ADMIN_UNSPECIFIED: ClusterAdmin
CLUSTER_ADMIN_KAFKA: ClusterAdmin
CLUSTER_ADMIN_LOCAL: ClusterAdmin
GENERATION_STATE_UNSPECIFIED: GenerationState
GENERATION_STATE_ACTIVE: GenerationState
GENERATION_STATE_DRAINING: GenerationState
GENERATION_STATE_SEALED: GenerationState
GENERATION_STATE_DRAINED: GenerationState
GENERATION_STATE_ABANDONED: GenerationState

class Cluster(_message.Message):
    __slots__ = ("name", "bootstrap_servers", "zone", "capacity_weight", "health", "config_ref", "admin", "control_endpoint", "health_reasons", "health_since_unix_ms", "cordoned")
    NAME_FIELD_NUMBER: _ClassVar[int]
    BOOTSTRAP_SERVERS_FIELD_NUMBER: _ClassVar[int]
    ZONE_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_WEIGHT_FIELD_NUMBER: _ClassVar[int]
    HEALTH_FIELD_NUMBER: _ClassVar[int]
    CONFIG_REF_FIELD_NUMBER: _ClassVar[int]
    ADMIN_FIELD_NUMBER: _ClassVar[int]
    CONTROL_ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    HEALTH_REASONS_FIELD_NUMBER: _ClassVar[int]
    HEALTH_SINCE_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    CORDONED_FIELD_NUMBER: _ClassVar[int]
    name: str
    bootstrap_servers: str
    zone: str
    capacity_weight: float
    health: str
    config_ref: str
    admin: ClusterAdmin
    control_endpoint: str
    health_reasons: _containers.RepeatedScalarFieldContainer[str]
    health_since_unix_ms: int
    cordoned: bool
    def __init__(self, name: _Optional[str] = ..., bootstrap_servers: _Optional[str] = ..., zone: _Optional[str] = ..., capacity_weight: _Optional[float] = ..., health: _Optional[str] = ..., config_ref: _Optional[str] = ..., admin: _Optional[_Union[ClusterAdmin, str]] = ..., control_endpoint: _Optional[str] = ..., health_reasons: _Optional[_Iterable[str]] = ..., health_since_unix_ms: _Optional[int] = ..., cordoned: _Optional[bool] = ...) -> None: ...

class FailoverPolicy(_message.Message):
    __slots__ = ("mode", "unhealthy_after_ms", "min_interval_ms")
    MODE_FIELD_NUMBER: _ClassVar[int]
    UNHEALTHY_AFTER_MS_FIELD_NUMBER: _ClassVar[int]
    MIN_INTERVAL_MS_FIELD_NUMBER: _ClassVar[int]
    mode: str
    unhealthy_after_ms: int
    min_interval_ms: int
    def __init__(self, mode: _Optional[str] = ..., unhealthy_after_ms: _Optional[int] = ..., min_interval_ms: _Optional[int] = ...) -> None: ...

class FleetPolicy(_message.Message):
    __slots__ = ("frozen", "max_failovers_per_minute", "max_evacuations_per_hour", "max_unhealthy_fraction")
    FROZEN_FIELD_NUMBER: _ClassVar[int]
    MAX_FAILOVERS_PER_MINUTE_FIELD_NUMBER: _ClassVar[int]
    MAX_EVACUATIONS_PER_HOUR_FIELD_NUMBER: _ClassVar[int]
    MAX_UNHEALTHY_FRACTION_FIELD_NUMBER: _ClassVar[int]
    frozen: bool
    max_failovers_per_minute: int
    max_evacuations_per_hour: int
    max_unhealthy_fraction: float
    def __init__(self, frozen: _Optional[bool] = ..., max_failovers_per_minute: _Optional[int] = ..., max_evacuations_per_hour: _Optional[int] = ..., max_unhealthy_fraction: _Optional[float] = ...) -> None: ...

class Probe(_message.Message):
    __slots__ = ("at_unix_ms", "reachable", "latency_ms", "brokers", "partitions", "leaderless", "under_replicated", "error", "canary_ms", "canary_error")
    AT_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    REACHABLE_FIELD_NUMBER: _ClassVar[int]
    LATENCY_MS_FIELD_NUMBER: _ClassVar[int]
    BROKERS_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    LEADERLESS_FIELD_NUMBER: _ClassVar[int]
    UNDER_REPLICATED_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    CANARY_MS_FIELD_NUMBER: _ClassVar[int]
    CANARY_ERROR_FIELD_NUMBER: _ClassVar[int]
    at_unix_ms: int
    reachable: bool
    latency_ms: float
    brokers: int
    partitions: int
    leaderless: int
    under_replicated: int
    error: str
    canary_ms: float
    canary_error: str
    def __init__(self, at_unix_ms: _Optional[int] = ..., reachable: _Optional[bool] = ..., latency_ms: _Optional[float] = ..., brokers: _Optional[int] = ..., partitions: _Optional[int] = ..., leaderless: _Optional[int] = ..., under_replicated: _Optional[int] = ..., error: _Optional[str] = ..., canary_ms: _Optional[float] = ..., canary_error: _Optional[str] = ...) -> None: ...

class ClusterHealthRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class ClusterHealthResponse(_message.Message):
    __slots__ = ("cluster", "probes")
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    PROBES_FIELD_NUMBER: _ClassVar[int]
    cluster: Cluster
    probes: _containers.RepeatedCompositeFieldContainer[Probe]
    def __init__(self, cluster: _Optional[_Union[Cluster, _Mapping]] = ..., probes: _Optional[_Iterable[_Union[Probe, _Mapping]]] = ...) -> None: ...

class CordonClusterRequest(_message.Message):
    __slots__ = ("name", "cordoned")
    NAME_FIELD_NUMBER: _ClassVar[int]
    CORDONED_FIELD_NUMBER: _ClassVar[int]
    name: str
    cordoned: bool
    def __init__(self, name: _Optional[str] = ..., cordoned: _Optional[bool] = ...) -> None: ...

class RemoveClusterRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class RemoveClusterResponse(_message.Message):
    __slots__ = ("version",)
    VERSION_FIELD_NUMBER: _ClassVar[int]
    version: str
    def __init__(self, version: _Optional[str] = ...) -> None: ...

class SetStreamPolicyRequest(_message.Message):
    __slots__ = ("stream", "policy")
    STREAM_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    stream: str
    policy: FailoverPolicy
    def __init__(self, stream: _Optional[str] = ..., policy: _Optional[_Union[FailoverPolicy, _Mapping]] = ...) -> None: ...

class GetFleetPolicyRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GenerationAbandoned(_message.Message):
    __slots__ = ("stream", "lane", "generation", "reason", "lost")
    STREAM_FIELD_NUMBER: _ClassVar[int]
    LANE_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    LOST_FIELD_NUMBER: _ClassVar[int]
    stream: str
    lane: str
    generation: Generation
    reason: str
    lost: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, stream: _Optional[str] = ..., lane: _Optional[str] = ..., generation: _Optional[_Union[Generation, _Mapping]] = ..., reason: _Optional[str] = ..., lost: _Optional[_Iterable[str]] = ...) -> None: ...

class AbandonGenerationRequest(_message.Message):
    __slots__ = ("stream", "lane", "generation", "reason")
    STREAM_FIELD_NUMBER: _ClassVar[int]
    LANE_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    stream: str
    lane: str
    generation: int
    reason: str
    def __init__(self, stream: _Optional[str] = ..., lane: _Optional[str] = ..., generation: _Optional[int] = ..., reason: _Optional[str] = ...) -> None: ...

class ClusterHealthChanged(_message.Message):
    __slots__ = ("cluster", "previous")
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_FIELD_NUMBER: _ClassVar[int]
    cluster: Cluster
    previous: str
    def __init__(self, cluster: _Optional[_Union[Cluster, _Mapping]] = ..., previous: _Optional[str] = ...) -> None: ...

class PolicyChanged(_message.Message):
    __slots__ = ("stream", "failover", "fleet")
    STREAM_FIELD_NUMBER: _ClassVar[int]
    FAILOVER_FIELD_NUMBER: _ClassVar[int]
    FLEET_FIELD_NUMBER: _ClassVar[int]
    stream: str
    failover: FailoverPolicy
    fleet: FleetPolicy
    def __init__(self, stream: _Optional[str] = ..., failover: _Optional[_Union[FailoverPolicy, _Mapping]] = ..., fleet: _Optional[_Union[FleetPolicy, _Mapping]] = ...) -> None: ...

class Generation(_message.Message):
    __slots__ = ("number", "cluster", "topic", "partitions", "state", "end_offsets")
    NUMBER_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    END_OFFSETS_FIELD_NUMBER: _ClassVar[int]
    number: int
    cluster: str
    topic: str
    partitions: int
    state: GenerationState
    end_offsets: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, number: _Optional[int] = ..., cluster: _Optional[str] = ..., topic: _Optional[str] = ..., partitions: _Optional[int] = ..., state: _Optional[_Union[GenerationState, str]] = ..., end_offsets: _Optional[_Iterable[int]] = ...) -> None: ...

class Lane(_message.Message):
    __slots__ = ("name", "priority", "generations")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    GENERATIONS_FIELD_NUMBER: _ClassVar[int]
    name: str
    priority: int
    generations: _containers.RepeatedCompositeFieldContainer[Generation]
    def __init__(self, name: _Optional[str] = ..., priority: _Optional[int] = ..., generations: _Optional[_Iterable[_Union[Generation, _Mapping]]] = ...) -> None: ...

class TopicSettings(_message.Message):
    __slots__ = ("replication_factor", "min_insync_replicas", "retention_ms", "segment_ms", "segment_bytes")
    REPLICATION_FACTOR_FIELD_NUMBER: _ClassVar[int]
    MIN_INSYNC_REPLICAS_FIELD_NUMBER: _ClassVar[int]
    RETENTION_MS_FIELD_NUMBER: _ClassVar[int]
    SEGMENT_MS_FIELD_NUMBER: _ClassVar[int]
    SEGMENT_BYTES_FIELD_NUMBER: _ClassVar[int]
    replication_factor: int
    min_insync_replicas: int
    retention_ms: int
    segment_ms: int
    segment_bytes: int
    def __init__(self, replication_factor: _Optional[int] = ..., min_insync_replicas: _Optional[int] = ..., retention_ms: _Optional[int] = ..., segment_ms: _Optional[int] = ..., segment_bytes: _Optional[int] = ...) -> None: ...

class Stream(_message.Message):
    __slots__ = ("name", "lanes", "topic", "failover")
    NAME_FIELD_NUMBER: _ClassVar[int]
    LANES_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    FAILOVER_FIELD_NUMBER: _ClassVar[int]
    name: str
    lanes: _containers.RepeatedCompositeFieldContainer[Lane]
    topic: TopicSettings
    failover: FailoverPolicy
    def __init__(self, name: _Optional[str] = ..., lanes: _Optional[_Iterable[_Union[Lane, _Mapping]]] = ..., topic: _Optional[_Union[TopicSettings, _Mapping]] = ..., failover: _Optional[_Union[FailoverPolicy, _Mapping]] = ...) -> None: ...

class RegisterClusterRequest(_message.Message):
    __slots__ = ("cluster", "update_existing")
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    UPDATE_EXISTING_FIELD_NUMBER: _ClassVar[int]
    cluster: Cluster
    update_existing: bool
    def __init__(self, cluster: _Optional[_Union[Cluster, _Mapping]] = ..., update_existing: _Optional[bool] = ...) -> None: ...

class RegisterClusterResponse(_message.Message):
    __slots__ = ("cluster", "version")
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    cluster: Cluster
    version: str
    def __init__(self, cluster: _Optional[_Union[Cluster, _Mapping]] = ..., version: _Optional[str] = ...) -> None: ...

class ListClustersRequest(_message.Message):
    __slots__ = ("prefix", "page_size", "page_token", "health")
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    HEALTH_FIELD_NUMBER: _ClassVar[int]
    prefix: str
    page_size: int
    page_token: str
    health: str
    def __init__(self, prefix: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., health: _Optional[str] = ...) -> None: ...

class ListClustersResponse(_message.Message):
    __slots__ = ("clusters", "next_page_token", "total")
    CLUSTERS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    clusters: _containers.RepeatedCompositeFieldContainer[Cluster]
    next_page_token: str
    total: int
    def __init__(self, clusters: _Optional[_Iterable[_Union[Cluster, _Mapping]]] = ..., next_page_token: _Optional[str] = ..., total: _Optional[int] = ...) -> None: ...

class CreateStreamRequest(_message.Message):
    __slots__ = ("name", "partitions", "cluster", "topic")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    name: str
    partitions: int
    cluster: str
    topic: TopicSettings
    def __init__(self, name: _Optional[str] = ..., partitions: _Optional[int] = ..., cluster: _Optional[str] = ..., topic: _Optional[_Union[TopicSettings, _Mapping]] = ...) -> None: ...

class StreamResponse(_message.Message):
    __slots__ = ("stream", "version")
    STREAM_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    stream: Stream
    version: str
    def __init__(self, stream: _Optional[_Union[Stream, _Mapping]] = ..., version: _Optional[str] = ...) -> None: ...

class DescribeStreamRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class ListStreamsRequest(_message.Message):
    __slots__ = ("prefix", "page_size", "page_token", "cluster")
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    prefix: str
    page_size: int
    page_token: str
    cluster: str
    def __init__(self, prefix: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., cluster: _Optional[str] = ...) -> None: ...

class ListStreamsResponse(_message.Message):
    __slots__ = ("streams", "next_page_token", "total", "unreadable")
    STREAMS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    UNREADABLE_FIELD_NUMBER: _ClassVar[int]
    streams: _containers.RepeatedCompositeFieldContainer[Stream]
    next_page_token: str
    total: int
    unreadable: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, streams: _Optional[_Iterable[_Union[Stream, _Mapping]]] = ..., next_page_token: _Optional[str] = ..., total: _Optional[int] = ..., unreadable: _Optional[_Iterable[str]] = ...) -> None: ...

class AddLaneRequest(_message.Message):
    __slots__ = ("stream", "lane", "priority", "partitions", "cluster")
    STREAM_FIELD_NUMBER: _ClassVar[int]
    LANE_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    stream: str
    lane: str
    priority: int
    partitions: int
    cluster: str
    def __init__(self, stream: _Optional[str] = ..., lane: _Optional[str] = ..., priority: _Optional[int] = ..., partitions: _Optional[int] = ..., cluster: _Optional[str] = ...) -> None: ...

class FailoverRequest(_message.Message):
    __slots__ = ("stream", "lane", "target_cluster", "partitions", "reason")
    STREAM_FIELD_NUMBER: _ClassVar[int]
    LANE_FIELD_NUMBER: _ClassVar[int]
    TARGET_CLUSTER_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    stream: str
    lane: str
    target_cluster: str
    partitions: int
    reason: str
    def __init__(self, stream: _Optional[str] = ..., lane: _Optional[str] = ..., target_cluster: _Optional[str] = ..., partitions: _Optional[int] = ..., reason: _Optional[str] = ...) -> None: ...

class FailoverResponse(_message.Message):
    __slots__ = ("previous", "current", "version")
    PREVIOUS_FIELD_NUMBER: _ClassVar[int]
    CURRENT_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    previous: Generation
    current: Generation
    version: str
    def __init__(self, previous: _Optional[_Union[Generation, _Mapping]] = ..., current: _Optional[_Union[Generation, _Mapping]] = ..., version: _Optional[str] = ...) -> None: ...

class WatchTopologyRequest(_message.Message):
    __slots__ = ("from_version", "until_head")
    FROM_VERSION_FIELD_NUMBER: _ClassVar[int]
    UNTIL_HEAD_FIELD_NUMBER: _ClassVar[int]
    from_version: str
    until_head: bool
    def __init__(self, from_version: _Optional[str] = ..., until_head: _Optional[bool] = ...) -> None: ...

class LaneAdded(_message.Message):
    __slots__ = ("stream", "lane")
    STREAM_FIELD_NUMBER: _ClassVar[int]
    LANE_FIELD_NUMBER: _ClassVar[int]
    stream: str
    lane: Lane
    def __init__(self, stream: _Optional[str] = ..., lane: _Optional[_Union[Lane, _Mapping]] = ...) -> None: ...

class FailedOver(_message.Message):
    __slots__ = ("stream", "lane", "previous", "current", "reason")
    STREAM_FIELD_NUMBER: _ClassVar[int]
    LANE_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_FIELD_NUMBER: _ClassVar[int]
    CURRENT_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    stream: str
    lane: str
    previous: Generation
    current: Generation
    reason: str
    def __init__(self, stream: _Optional[str] = ..., lane: _Optional[str] = ..., previous: _Optional[_Union[Generation, _Mapping]] = ..., current: _Optional[_Union[Generation, _Mapping]] = ..., reason: _Optional[str] = ...) -> None: ...

class GenerationSealed(_message.Message):
    __slots__ = ("stream", "lane", "generation", "reason")
    STREAM_FIELD_NUMBER: _ClassVar[int]
    LANE_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    stream: str
    lane: str
    generation: Generation
    reason: str
    def __init__(self, stream: _Optional[str] = ..., lane: _Optional[str] = ..., generation: _Optional[_Union[Generation, _Mapping]] = ..., reason: _Optional[str] = ...) -> None: ...

class GenerationDrained(_message.Message):
    __slots__ = ("stream", "lane", "generation", "groups")
    STREAM_FIELD_NUMBER: _ClassVar[int]
    LANE_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    stream: str
    lane: str
    generation: Generation
    groups: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, stream: _Optional[str] = ..., lane: _Optional[str] = ..., generation: _Optional[_Union[Generation, _Mapping]] = ..., groups: _Optional[_Iterable[str]] = ...) -> None: ...

class GenerationRef(_message.Message):
    __slots__ = ("stream", "lane", "generation")
    STREAM_FIELD_NUMBER: _ClassVar[int]
    LANE_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    stream: str
    lane: str
    generation: int
    def __init__(self, stream: _Optional[str] = ..., lane: _Optional[str] = ..., generation: _Optional[int] = ...) -> None: ...

class ProducerHeartbeatRequest(_message.Message):
    __slots__ = ("producer_id", "topology_version", "in_flight", "errors", "writes", "declares_writes")
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    TOPOLOGY_VERSION_FIELD_NUMBER: _ClassVar[int]
    IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    ERRORS_FIELD_NUMBER: _ClassVar[int]
    WRITES_FIELD_NUMBER: _ClassVar[int]
    DECLARES_WRITES_FIELD_NUMBER: _ClassVar[int]
    producer_id: str
    topology_version: str
    in_flight: _containers.RepeatedCompositeFieldContainer[GenerationRef]
    errors: _containers.RepeatedCompositeFieldContainer[ClusterErrors]
    writes: _containers.RepeatedCompositeFieldContainer[LaneRef]
    declares_writes: bool
    def __init__(self, producer_id: _Optional[str] = ..., topology_version: _Optional[str] = ..., in_flight: _Optional[_Iterable[_Union[GenerationRef, _Mapping]]] = ..., errors: _Optional[_Iterable[_Union[ClusterErrors, _Mapping]]] = ..., writes: _Optional[_Iterable[_Union[LaneRef, _Mapping]]] = ..., declares_writes: _Optional[bool] = ...) -> None: ...

class LaneRef(_message.Message):
    __slots__ = ("stream", "lane")
    STREAM_FIELD_NUMBER: _ClassVar[int]
    LANE_FIELD_NUMBER: _ClassVar[int]
    stream: str
    lane: str
    def __init__(self, stream: _Optional[str] = ..., lane: _Optional[str] = ...) -> None: ...

class ClusterErrors(_message.Message):
    __slots__ = ("cluster", "count", "last_error")
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_FIELD_NUMBER: _ClassVar[int]
    cluster: str
    count: int
    last_error: str
    def __init__(self, cluster: _Optional[str] = ..., count: _Optional[int] = ..., last_error: _Optional[str] = ...) -> None: ...

class ProducerHeartbeatResponse(_message.Message):
    __slots__ = ("heartbeat_interval_ms", "ttl_ms", "topology_version")
    HEARTBEAT_INTERVAL_MS_FIELD_NUMBER: _ClassVar[int]
    TTL_MS_FIELD_NUMBER: _ClassVar[int]
    TOPOLOGY_VERSION_FIELD_NUMBER: _ClassVar[int]
    heartbeat_interval_ms: int
    ttl_ms: int
    topology_version: str
    def __init__(self, heartbeat_interval_ms: _Optional[int] = ..., ttl_ms: _Optional[int] = ..., topology_version: _Optional[str] = ...) -> None: ...

class CloseProducerRequest(_message.Message):
    __slots__ = ("producer_id",)
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    producer_id: str
    def __init__(self, producer_id: _Optional[str] = ...) -> None: ...

class CloseProducerResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GroupEvent(_message.Message):
    __slots__ = ("group", "type", "worker_id", "lease_id", "epoch", "reason", "version", "time_unix_ms", "actor")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    TIME_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    group: str
    type: str
    worker_id: str
    lease_id: str
    epoch: int
    reason: str
    version: str
    time_unix_ms: int
    actor: str
    def __init__(self, group: _Optional[str] = ..., type: _Optional[str] = ..., worker_id: _Optional[str] = ..., lease_id: _Optional[str] = ..., epoch: _Optional[int] = ..., reason: _Optional[str] = ..., version: _Optional[str] = ..., time_unix_ms: _Optional[int] = ..., actor: _Optional[str] = ...) -> None: ...

class GroupDeleted(_message.Message):
    __slots__ = ("group", "reason", "expired", "members", "generations")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    EXPIRED_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    GENERATIONS_FIELD_NUMBER: _ClassVar[int]
    group: str
    reason: str
    expired: bool
    members: _containers.RepeatedScalarFieldContainer[str]
    generations: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, group: _Optional[str] = ..., reason: _Optional[str] = ..., expired: _Optional[bool] = ..., members: _Optional[_Iterable[str]] = ..., generations: _Optional[_Iterable[str]] = ...) -> None: ...

class StreamDeleted(_message.Message):
    __slots__ = ("stream", "reason", "topics", "producers", "groups")
    STREAM_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    PRODUCERS_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    stream: str
    reason: str
    topics: _containers.RepeatedScalarFieldContainer[str]
    producers: _containers.RepeatedScalarFieldContainer[str]
    groups: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, stream: _Optional[str] = ..., reason: _Optional[str] = ..., topics: _Optional[_Iterable[str]] = ..., producers: _Optional[_Iterable[str]] = ..., groups: _Optional[_Iterable[str]] = ...) -> None: ...

class DeleteStreamRequest(_message.Message):
    __slots__ = ("name", "force", "reason")
    NAME_FIELD_NUMBER: _ClassVar[int]
    FORCE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    name: str
    force: bool
    reason: str
    def __init__(self, name: _Optional[str] = ..., force: _Optional[bool] = ..., reason: _Optional[str] = ...) -> None: ...

class DeleteStreamResponse(_message.Message):
    __slots__ = ("deleted", "version", "topics_deleted", "topics_left")
    DELETED_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    TOPICS_DELETED_FIELD_NUMBER: _ClassVar[int]
    TOPICS_LEFT_FIELD_NUMBER: _ClassVar[int]
    deleted: StreamDeleted
    version: str
    topics_deleted: _containers.RepeatedScalarFieldContainer[str]
    topics_left: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, deleted: _Optional[_Union[StreamDeleted, _Mapping]] = ..., version: _Optional[str] = ..., topics_deleted: _Optional[_Iterable[str]] = ..., topics_left: _Optional[_Iterable[str]] = ...) -> None: ...

class TopologyEvent(_message.Message):
    __slots__ = ("version", "time_unix_ms", "actor", "cluster_registered", "cluster_updated", "stream_created", "lane_added", "failed_over", "group_event", "generation_sealed", "generation_drained", "cluster_health_changed", "cluster_removed", "policy_changed", "generation_abandoned", "group_deleted", "stream_deleted")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    TIME_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_REGISTERED_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_UPDATED_FIELD_NUMBER: _ClassVar[int]
    STREAM_CREATED_FIELD_NUMBER: _ClassVar[int]
    LANE_ADDED_FIELD_NUMBER: _ClassVar[int]
    FAILED_OVER_FIELD_NUMBER: _ClassVar[int]
    GROUP_EVENT_FIELD_NUMBER: _ClassVar[int]
    GENERATION_SEALED_FIELD_NUMBER: _ClassVar[int]
    GENERATION_DRAINED_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_HEALTH_CHANGED_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_REMOVED_FIELD_NUMBER: _ClassVar[int]
    POLICY_CHANGED_FIELD_NUMBER: _ClassVar[int]
    GENERATION_ABANDONED_FIELD_NUMBER: _ClassVar[int]
    GROUP_DELETED_FIELD_NUMBER: _ClassVar[int]
    STREAM_DELETED_FIELD_NUMBER: _ClassVar[int]
    version: str
    time_unix_ms: int
    actor: str
    cluster_registered: Cluster
    cluster_updated: Cluster
    stream_created: Stream
    lane_added: LaneAdded
    failed_over: FailedOver
    group_event: GroupEvent
    generation_sealed: GenerationSealed
    generation_drained: GenerationDrained
    cluster_health_changed: ClusterHealthChanged
    cluster_removed: str
    policy_changed: PolicyChanged
    generation_abandoned: GenerationAbandoned
    group_deleted: GroupDeleted
    stream_deleted: StreamDeleted
    def __init__(self, version: _Optional[str] = ..., time_unix_ms: _Optional[int] = ..., actor: _Optional[str] = ..., cluster_registered: _Optional[_Union[Cluster, _Mapping]] = ..., cluster_updated: _Optional[_Union[Cluster, _Mapping]] = ..., stream_created: _Optional[_Union[Stream, _Mapping]] = ..., lane_added: _Optional[_Union[LaneAdded, _Mapping]] = ..., failed_over: _Optional[_Union[FailedOver, _Mapping]] = ..., group_event: _Optional[_Union[GroupEvent, _Mapping]] = ..., generation_sealed: _Optional[_Union[GenerationSealed, _Mapping]] = ..., generation_drained: _Optional[_Union[GenerationDrained, _Mapping]] = ..., cluster_health_changed: _Optional[_Union[ClusterHealthChanged, _Mapping]] = ..., cluster_removed: _Optional[str] = ..., policy_changed: _Optional[_Union[PolicyChanged, _Mapping]] = ..., generation_abandoned: _Optional[_Union[GenerationAbandoned, _Mapping]] = ..., group_deleted: _Optional[_Union[GroupDeleted, _Mapping]] = ..., stream_deleted: _Optional[_Union[StreamDeleted, _Mapping]] = ...) -> None: ...
