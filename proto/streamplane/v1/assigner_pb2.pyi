from streamplane.v1 import topology_pb2 as _topology_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class PartitionRef(_message.Message):
    __slots__ = ("stream", "lane", "generation", "partition")
    STREAM_FIELD_NUMBER: _ClassVar[int]
    LANE_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    stream: str
    lane: str
    generation: int
    partition: int
    def __init__(self, stream: _Optional[str] = ..., lane: _Optional[str] = ..., generation: _Optional[int] = ..., partition: _Optional[int] = ...) -> None: ...

class Subscription(_message.Message):
    __slots__ = ("stream", "lanes")
    STREAM_FIELD_NUMBER: _ClassVar[int]
    LANES_FIELD_NUMBER: _ClassVar[int]
    stream: str
    lanes: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, stream: _Optional[str] = ..., lanes: _Optional[_Iterable[str]] = ...) -> None: ...

class Hello(_message.Message):
    __slots__ = ("group", "worker_id", "capacity", "max_load", "subscriptions", "resume_session", "where", "takes_batches", "takes_slices", "takes_hints")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_FIELD_NUMBER: _ClassVar[int]
    MAX_LOAD_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTIONS_FIELD_NUMBER: _ClassVar[int]
    RESUME_SESSION_FIELD_NUMBER: _ClassVar[int]
    WHERE_FIELD_NUMBER: _ClassVar[int]
    TAKES_BATCHES_FIELD_NUMBER: _ClassVar[int]
    TAKES_SLICES_FIELD_NUMBER: _ClassVar[int]
    TAKES_HINTS_FIELD_NUMBER: _ClassVar[int]
    group: str
    worker_id: str
    capacity: float
    max_load: float
    subscriptions: _containers.RepeatedCompositeFieldContainer[Subscription]
    resume_session: str
    where: str
    takes_batches: bool
    takes_slices: bool
    takes_hints: bool
    def __init__(self, group: _Optional[str] = ..., worker_id: _Optional[str] = ..., capacity: _Optional[float] = ..., max_load: _Optional[float] = ..., subscriptions: _Optional[_Iterable[_Union[Subscription, _Mapping]]] = ..., resume_session: _Optional[str] = ..., where: _Optional[str] = ..., takes_batches: _Optional[bool] = ..., takes_slices: _Optional[bool] = ..., takes_hints: _Optional[bool] = ...) -> None: ...

class LeaseLoad(_message.Message):
    __slots__ = ("lease_id", "records_per_s", "lag_records", "lag_ms")
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    RECORDS_PER_S_FIELD_NUMBER: _ClassVar[int]
    LAG_RECORDS_FIELD_NUMBER: _ClassVar[int]
    LAG_MS_FIELD_NUMBER: _ClassVar[int]
    lease_id: str
    records_per_s: float
    lag_records: int
    lag_ms: int
    def __init__(self, lease_id: _Optional[str] = ..., records_per_s: _Optional[float] = ..., lag_records: _Optional[int] = ..., lag_ms: _Optional[int] = ...) -> None: ...

class Heartbeat(_message.Message):
    __slots__ = ("cpu", "records_per_s", "leases", "errors")
    CPU_FIELD_NUMBER: _ClassVar[int]
    RECORDS_PER_S_FIELD_NUMBER: _ClassVar[int]
    LEASES_FIELD_NUMBER: _ClassVar[int]
    ERRORS_FIELD_NUMBER: _ClassVar[int]
    cpu: float
    records_per_s: float
    leases: _containers.RepeatedCompositeFieldContainer[LeaseLoad]
    errors: _containers.RepeatedCompositeFieldContainer[_topology_pb2.ClusterErrors]
    def __init__(self, cpu: _Optional[float] = ..., records_per_s: _Optional[float] = ..., leases: _Optional[_Iterable[_Union[LeaseLoad, _Mapping]]] = ..., errors: _Optional[_Iterable[_Union[_topology_pb2.ClusterErrors, _Mapping]]] = ...) -> None: ...

class Release(_message.Message):
    __slots__ = ("lease_id", "epoch")
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    lease_id: str
    epoch: int
    def __init__(self, lease_id: _Optional[str] = ..., epoch: _Optional[int] = ...) -> None: ...

class Renew(_message.Message):
    __slots__ = ("token",)
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    token: str
    def __init__(self, token: _Optional[str] = ...) -> None: ...

class WorkerMessage(_message.Message):
    __slots__ = ("hello", "heartbeat", "release", "renew")
    HELLO_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    RELEASE_FIELD_NUMBER: _ClassVar[int]
    RENEW_FIELD_NUMBER: _ClassVar[int]
    hello: Hello
    heartbeat: Heartbeat
    release: Release
    renew: Renew
    def __init__(self, hello: _Optional[_Union[Hello, _Mapping]] = ..., heartbeat: _Optional[_Union[Heartbeat, _Mapping]] = ..., release: _Optional[_Union[Release, _Mapping]] = ..., renew: _Optional[_Union[Renew, _Mapping]] = ...) -> None: ...

class Welcome(_message.Message):
    __slots__ = ("session_id", "heartbeat_interval_ms", "ttl_ms", "where")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_INTERVAL_MS_FIELD_NUMBER: _ClassVar[int]
    TTL_MS_FIELD_NUMBER: _ClassVar[int]
    WHERE_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    heartbeat_interval_ms: int
    ttl_ms: int
    where: str
    def __init__(self, session_id: _Optional[str] = ..., heartbeat_interval_ms: _Optional[int] = ..., ttl_ms: _Optional[int] = ..., where: _Optional[str] = ...) -> None: ...

class Grant(_message.Message):
    __slots__ = ("lease_id", "partition", "epoch", "topic", "cluster", "bootstrap_servers", "start_offset", "generation_state", "end_offset", "clean", "slice_index", "slice_count")
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    BOOTSTRAP_SERVERS_FIELD_NUMBER: _ClassVar[int]
    START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    GENERATION_STATE_FIELD_NUMBER: _ClassVar[int]
    END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    CLEAN_FIELD_NUMBER: _ClassVar[int]
    SLICE_INDEX_FIELD_NUMBER: _ClassVar[int]
    SLICE_COUNT_FIELD_NUMBER: _ClassVar[int]
    lease_id: str
    partition: PartitionRef
    epoch: int
    topic: str
    cluster: str
    bootstrap_servers: str
    start_offset: int
    generation_state: _topology_pb2.GenerationState
    end_offset: int
    clean: bool
    slice_index: int
    slice_count: int
    def __init__(self, lease_id: _Optional[str] = ..., partition: _Optional[_Union[PartitionRef, _Mapping]] = ..., epoch: _Optional[int] = ..., topic: _Optional[str] = ..., cluster: _Optional[str] = ..., bootstrap_servers: _Optional[str] = ..., start_offset: _Optional[int] = ..., generation_state: _Optional[_Union[_topology_pb2.GenerationState, str]] = ..., end_offset: _Optional[int] = ..., clean: _Optional[bool] = ..., slice_index: _Optional[int] = ..., slice_count: _Optional[int] = ...) -> None: ...

class Revoke(_message.Message):
    __slots__ = ("lease_id", "epoch", "deadline_unix_ms", "reason")
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    lease_id: str
    epoch: int
    deadline_unix_ms: int
    reason: str
    def __init__(self, lease_id: _Optional[str] = ..., epoch: _Optional[int] = ..., deadline_unix_ms: _Optional[int] = ..., reason: _Optional[str] = ...) -> None: ...

class GenerationChange(_message.Message):
    __slots__ = ("lease_id", "partition", "state", "end_offset")
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    lease_id: str
    partition: PartitionRef
    state: _topology_pb2.GenerationState
    end_offset: int
    def __init__(self, lease_id: _Optional[str] = ..., partition: _Optional[_Union[PartitionRef, _Mapping]] = ..., state: _Optional[_Union[_topology_pb2.GenerationState, str]] = ..., end_offset: _Optional[int] = ...) -> None: ...

class GroupFinished(_message.Message):
    __slots__ = ("reason",)
    REASON_FIELD_NUMBER: _ClassVar[int]
    reason: str
    def __init__(self, reason: _Optional[str] = ...) -> None: ...

class Expect(_message.Message):
    __slots__ = ("for_ms",)
    FOR_MS_FIELD_NUMBER: _ClassVar[int]
    for_ms: int
    def __init__(self, for_ms: _Optional[int] = ...) -> None: ...

class AssignerMessage(_message.Message):
    __slots__ = ("welcome", "grant", "revoke", "generation_change", "finished", "batch", "expect")
    WELCOME_FIELD_NUMBER: _ClassVar[int]
    GRANT_FIELD_NUMBER: _ClassVar[int]
    REVOKE_FIELD_NUMBER: _ClassVar[int]
    GENERATION_CHANGE_FIELD_NUMBER: _ClassVar[int]
    FINISHED_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    EXPECT_FIELD_NUMBER: _ClassVar[int]
    welcome: Welcome
    grant: Grant
    revoke: Revoke
    generation_change: GenerationChange
    finished: GroupFinished
    batch: EventBatch
    expect: Expect
    def __init__(self, welcome: _Optional[_Union[Welcome, _Mapping]] = ..., grant: _Optional[_Union[Grant, _Mapping]] = ..., revoke: _Optional[_Union[Revoke, _Mapping]] = ..., generation_change: _Optional[_Union[GenerationChange, _Mapping]] = ..., finished: _Optional[_Union[GroupFinished, _Mapping]] = ..., batch: _Optional[_Union[EventBatch, _Mapping]] = ..., expect: _Optional[_Union[Expect, _Mapping]] = ...) -> None: ...

class EventBatch(_message.Message):
    __slots__ = ("events",)
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    events: _containers.RepeatedCompositeFieldContainer[AssignerMessage]
    def __init__(self, events: _Optional[_Iterable[_Union[AssignerMessage, _Mapping]]] = ...) -> None: ...

class CheckLeaseRequest(_message.Message):
    __slots__ = ("group", "lease_id", "epoch")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    group: str
    lease_id: str
    epoch: int
    def __init__(self, group: _Optional[str] = ..., lease_id: _Optional[str] = ..., epoch: _Optional[int] = ...) -> None: ...

class CheckLeaseResponse(_message.Message):
    __slots__ = ("worker_id", "epoch")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    epoch: int
    def __init__(self, worker_id: _Optional[str] = ..., epoch: _Optional[int] = ...) -> None: ...

class DescribeGroupRequest(_message.Message):
    __slots__ = ("group",)
    GROUP_FIELD_NUMBER: _ClassVar[int]
    group: str
    def __init__(self, group: _Optional[str] = ...) -> None: ...

class LeaseInfo(_message.Message):
    __slots__ = ("lease_id", "partition", "epoch", "state", "worker_id", "records_per_s", "lag_records", "lag_ms")
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    RECORDS_PER_S_FIELD_NUMBER: _ClassVar[int]
    LAG_RECORDS_FIELD_NUMBER: _ClassVar[int]
    LAG_MS_FIELD_NUMBER: _ClassVar[int]
    lease_id: str
    partition: PartitionRef
    epoch: int
    state: str
    worker_id: str
    records_per_s: float
    lag_records: int
    lag_ms: int
    def __init__(self, lease_id: _Optional[str] = ..., partition: _Optional[_Union[PartitionRef, _Mapping]] = ..., epoch: _Optional[int] = ..., state: _Optional[str] = ..., worker_id: _Optional[str] = ..., records_per_s: _Optional[float] = ..., lag_records: _Optional[int] = ..., lag_ms: _Optional[int] = ...) -> None: ...

class MemberInfo(_message.Message):
    __slots__ = ("worker_id", "session_id", "capacity", "max_load", "cpu", "records_per_s", "alive_until_unix_ms", "subscriptions")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_FIELD_NUMBER: _ClassVar[int]
    MAX_LOAD_FIELD_NUMBER: _ClassVar[int]
    CPU_FIELD_NUMBER: _ClassVar[int]
    RECORDS_PER_S_FIELD_NUMBER: _ClassVar[int]
    ALIVE_UNTIL_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTIONS_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    session_id: str
    capacity: float
    max_load: float
    cpu: float
    records_per_s: float
    alive_until_unix_ms: int
    subscriptions: _containers.RepeatedCompositeFieldContainer[Subscription]
    def __init__(self, worker_id: _Optional[str] = ..., session_id: _Optional[str] = ..., capacity: _Optional[float] = ..., max_load: _Optional[float] = ..., cpu: _Optional[float] = ..., records_per_s: _Optional[float] = ..., alive_until_unix_ms: _Optional[int] = ..., subscriptions: _Optional[_Iterable[_Union[Subscription, _Mapping]]] = ...) -> None: ...

class GroupDescription(_message.Message):
    __slots__ = ("group", "members", "leases", "leader_replica", "unknown")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    LEASES_FIELD_NUMBER: _ClassVar[int]
    LEADER_REPLICA_FIELD_NUMBER: _ClassVar[int]
    UNKNOWN_FIELD_NUMBER: _ClassVar[int]
    group: str
    members: _containers.RepeatedCompositeFieldContainer[MemberInfo]
    leases: _containers.RepeatedCompositeFieldContainer[LeaseInfo]
    leader_replica: str
    unknown: bool
    def __init__(self, group: _Optional[str] = ..., members: _Optional[_Iterable[_Union[MemberInfo, _Mapping]]] = ..., leases: _Optional[_Iterable[_Union[LeaseInfo, _Mapping]]] = ..., leader_replica: _Optional[str] = ..., unknown: _Optional[bool] = ...) -> None: ...

class WatchGroupRequest(_message.Message):
    __slots__ = ("group", "from_version", "until_head")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    FROM_VERSION_FIELD_NUMBER: _ClassVar[int]
    UNTIL_HEAD_FIELD_NUMBER: _ClassVar[int]
    group: str
    from_version: str
    until_head: bool
    def __init__(self, group: _Optional[str] = ..., from_version: _Optional[str] = ..., until_head: _Optional[bool] = ...) -> None: ...

class DeleteGroupRequest(_message.Message):
    __slots__ = ("group", "force", "reason")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    FORCE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    group: str
    force: bool
    reason: str
    def __init__(self, group: _Optional[str] = ..., force: _Optional[bool] = ..., reason: _Optional[str] = ...) -> None: ...

class ConfigureGroupRequest(_message.Message):
    __slots__ = ("group", "lane", "max_attempts", "lag_target_ms", "expire_after_ms", "where", "max_slices", "split_partition", "split_slices")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    LANE_FIELD_NUMBER: _ClassVar[int]
    MAX_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    LAG_TARGET_MS_FIELD_NUMBER: _ClassVar[int]
    EXPIRE_AFTER_MS_FIELD_NUMBER: _ClassVar[int]
    WHERE_FIELD_NUMBER: _ClassVar[int]
    MAX_SLICES_FIELD_NUMBER: _ClassVar[int]
    SPLIT_PARTITION_FIELD_NUMBER: _ClassVar[int]
    SPLIT_SLICES_FIELD_NUMBER: _ClassVar[int]
    group: str
    lane: str
    max_attempts: int
    lag_target_ms: int
    expire_after_ms: int
    where: str
    max_slices: int
    split_partition: str
    split_slices: int
    def __init__(self, group: _Optional[str] = ..., lane: _Optional[str] = ..., max_attempts: _Optional[int] = ..., lag_target_ms: _Optional[int] = ..., expire_after_ms: _Optional[int] = ..., where: _Optional[str] = ..., max_slices: _Optional[int] = ..., split_partition: _Optional[str] = ..., split_slices: _Optional[int] = ...) -> None: ...

class ConfigureGroupResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class PartitionOffset(_message.Message):
    __slots__ = ("partition", "offset")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    partition: PartitionRef
    offset: int
    def __init__(self, partition: _Optional[_Union[PartitionRef, _Mapping]] = ..., offset: _Optional[int] = ...) -> None: ...

class PartitionOffsets(_message.Message):
    __slots__ = ("offsets",)
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    offsets: _containers.RepeatedCompositeFieldContainer[PartitionOffset]
    def __init__(self, offsets: _Optional[_Iterable[_Union[PartitionOffset, _Mapping]]] = ...) -> None: ...

class RewindGroupRequest(_message.Message):
    __slots__ = ("group", "stream", "lane", "time_ms", "earliest", "offsets", "dry_run", "force")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    STREAM_FIELD_NUMBER: _ClassVar[int]
    LANE_FIELD_NUMBER: _ClassVar[int]
    TIME_MS_FIELD_NUMBER: _ClassVar[int]
    EARLIEST_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    FORCE_FIELD_NUMBER: _ClassVar[int]
    group: str
    stream: str
    lane: str
    time_ms: int
    earliest: bool
    offsets: PartitionOffsets
    dry_run: bool
    force: bool
    def __init__(self, group: _Optional[str] = ..., stream: _Optional[str] = ..., lane: _Optional[str] = ..., time_ms: _Optional[int] = ..., earliest: _Optional[bool] = ..., offsets: _Optional[_Union[PartitionOffsets, _Mapping]] = ..., dry_run: _Optional[bool] = ..., force: _Optional[bool] = ...) -> None: ...

class RewindPosition(_message.Message):
    __slots__ = ("partition", "offset", "again", "generation_state", "pending_unix_ms")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    AGAIN_FIELD_NUMBER: _ClassVar[int]
    GENERATION_STATE_FIELD_NUMBER: _ClassVar[int]
    PENDING_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    partition: PartitionRef
    offset: int
    again: int
    generation_state: str
    pending_unix_ms: int
    def __init__(self, partition: _Optional[_Union[PartitionRef, _Mapping]] = ..., offset: _Optional[int] = ..., again: _Optional[int] = ..., generation_state: _Optional[str] = ..., pending_unix_ms: _Optional[int] = ...) -> None: ...

class CreateWindowGroupRequest(_message.Message):
    __slots__ = ("group", "stream", "lane", "from_unix_ms", "until_unix_ms", "force", "dry_run")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    STREAM_FIELD_NUMBER: _ClassVar[int]
    LANE_FIELD_NUMBER: _ClassVar[int]
    FROM_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    UNTIL_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    FORCE_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    group: str
    stream: str
    lane: str
    from_unix_ms: int
    until_unix_ms: int
    force: bool
    dry_run: bool
    def __init__(self, group: _Optional[str] = ..., stream: _Optional[str] = ..., lane: _Optional[str] = ..., from_unix_ms: _Optional[int] = ..., until_unix_ms: _Optional[int] = ..., force: _Optional[bool] = ..., dry_run: _Optional[bool] = ...) -> None: ...

class CreateWindowGroupResponse(_message.Message):
    __slots__ = ("positions", "lost", "applied", "from_unix_ms", "until_unix_ms")
    POSITIONS_FIELD_NUMBER: _ClassVar[int]
    LOST_FIELD_NUMBER: _ClassVar[int]
    APPLIED_FIELD_NUMBER: _ClassVar[int]
    FROM_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    UNTIL_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    positions: _containers.RepeatedCompositeFieldContainer[RewindPosition]
    lost: _containers.RepeatedScalarFieldContainer[str]
    applied: bool
    from_unix_ms: int
    until_unix_ms: int
    def __init__(self, positions: _Optional[_Iterable[_Union[RewindPosition, _Mapping]]] = ..., lost: _Optional[_Iterable[str]] = ..., applied: _Optional[bool] = ..., from_unix_ms: _Optional[int] = ..., until_unix_ms: _Optional[int] = ...) -> None: ...

class RewindGroupResponse(_message.Message):
    __slots__ = ("positions", "lost", "applied", "leases_regranted")
    POSITIONS_FIELD_NUMBER: _ClassVar[int]
    LOST_FIELD_NUMBER: _ClassVar[int]
    APPLIED_FIELD_NUMBER: _ClassVar[int]
    LEASES_REGRANTED_FIELD_NUMBER: _ClassVar[int]
    positions: _containers.RepeatedCompositeFieldContainer[RewindPosition]
    lost: _containers.RepeatedScalarFieldContainer[str]
    applied: bool
    leases_regranted: int
    def __init__(self, positions: _Optional[_Iterable[_Union[RewindPosition, _Mapping]]] = ..., lost: _Optional[_Iterable[str]] = ..., applied: _Optional[bool] = ..., leases_regranted: _Optional[int] = ...) -> None: ...
