from streamplane.v1 import assigner_pb2 as _assigner_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class OffsetRange(_message.Message):
    __slots__ = ("start", "end")
    START_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    start: int
    end: int
    def __init__(self, start: _Optional[int] = ..., end: _Optional[int] = ...) -> None: ...

class RetryEntry(_message.Message):
    __slots__ = ("offset", "attempt", "error", "backoff_ms")
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    BACKOFF_MS_FIELD_NUMBER: _ClassVar[int]
    offset: int
    attempt: int
    error: str
    backoff_ms: int
    def __init__(self, offset: _Optional[int] = ..., attempt: _Optional[int] = ..., error: _Optional[str] = ..., backoff_ms: _Optional[int] = ...) -> None: ...

class DlqLocation(_message.Message):
    __slots__ = ("stream", "lane", "generation", "partition", "offset")
    STREAM_FIELD_NUMBER: _ClassVar[int]
    LANE_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    stream: str
    lane: str
    generation: int
    partition: int
    offset: int
    def __init__(self, stream: _Optional[str] = ..., lane: _Optional[str] = ..., generation: _Optional[int] = ..., partition: _Optional[int] = ..., offset: _Optional[int] = ...) -> None: ...

class RejectEntry(_message.Message):
    __slots__ = ("offset", "reason", "dlq", "copy")
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    DLQ_FIELD_NUMBER: _ClassVar[int]
    COPY_FIELD_NUMBER: _ClassVar[int]
    offset: int
    reason: str
    dlq: DlqLocation
    copy: int
    def __init__(self, offset: _Optional[int] = ..., reason: _Optional[str] = ..., dlq: _Optional[_Union[DlqLocation, _Mapping]] = ..., copy: _Optional[int] = ...) -> None: ...

class CommitRequest(_message.Message):
    __slots__ = ("group", "lease_id", "epoch", "acked", "retries", "rejects", "oldest_pending_ts_ms", "high_watermark", "high_watermark_ts_ms", "acked_bitmap", "acked_bitmap_base", "copying", "session_id", "filtered_bounds", "filtered")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    ACKED_FIELD_NUMBER: _ClassVar[int]
    RETRIES_FIELD_NUMBER: _ClassVar[int]
    REJECTS_FIELD_NUMBER: _ClassVar[int]
    OLDEST_PENDING_TS_MS_FIELD_NUMBER: _ClassVar[int]
    HIGH_WATERMARK_FIELD_NUMBER: _ClassVar[int]
    HIGH_WATERMARK_TS_MS_FIELD_NUMBER: _ClassVar[int]
    ACKED_BITMAP_FIELD_NUMBER: _ClassVar[int]
    ACKED_BITMAP_BASE_FIELD_NUMBER: _ClassVar[int]
    COPYING_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    FILTERED_BOUNDS_FIELD_NUMBER: _ClassVar[int]
    FILTERED_FIELD_NUMBER: _ClassVar[int]
    group: str
    lease_id: str
    epoch: int
    acked: _containers.RepeatedCompositeFieldContainer[OffsetRange]
    retries: _containers.RepeatedCompositeFieldContainer[RetryEntry]
    rejects: _containers.RepeatedCompositeFieldContainer[RejectEntry]
    oldest_pending_ts_ms: int
    high_watermark: int
    high_watermark_ts_ms: int
    acked_bitmap: bytes
    acked_bitmap_base: int
    copying: _containers.RepeatedCompositeFieldContainer[RejectEntry]
    session_id: str
    filtered_bounds: _containers.RepeatedScalarFieldContainer[int]
    filtered: _containers.RepeatedCompositeFieldContainer[OffsetRange]
    def __init__(self, group: _Optional[str] = ..., lease_id: _Optional[str] = ..., epoch: _Optional[int] = ..., acked: _Optional[_Iterable[_Union[OffsetRange, _Mapping]]] = ..., retries: _Optional[_Iterable[_Union[RetryEntry, _Mapping]]] = ..., rejects: _Optional[_Iterable[_Union[RejectEntry, _Mapping]]] = ..., oldest_pending_ts_ms: _Optional[int] = ..., high_watermark: _Optional[int] = ..., high_watermark_ts_ms: _Optional[int] = ..., acked_bitmap: _Optional[bytes] = ..., acked_bitmap_base: _Optional[int] = ..., copying: _Optional[_Iterable[_Union[RejectEntry, _Mapping]]] = ..., session_id: _Optional[str] = ..., filtered_bounds: _Optional[_Iterable[int]] = ..., filtered: _Optional[_Iterable[_Union[OffsetRange, _Mapping]]] = ...) -> None: ...

class DlqCopy(_message.Message):
    __slots__ = ("offset", "copy")
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    COPY_FIELD_NUMBER: _ClassVar[int]
    offset: int
    copy: int
    def __init__(self, offset: _Optional[int] = ..., copy: _Optional[int] = ...) -> None: ...

class CommitResponse(_message.Message):
    __slots__ = ("low_watermark", "exhausted", "copies")
    LOW_WATERMARK_FIELD_NUMBER: _ClassVar[int]
    EXHAUSTED_FIELD_NUMBER: _ClassVar[int]
    COPIES_FIELD_NUMBER: _ClassVar[int]
    low_watermark: int
    exhausted: _containers.RepeatedScalarFieldContainer[int]
    copies: _containers.RepeatedCompositeFieldContainer[DlqCopy]
    def __init__(self, low_watermark: _Optional[int] = ..., exhausted: _Optional[_Iterable[int]] = ..., copies: _Optional[_Iterable[_Union[DlqCopy, _Mapping]]] = ...) -> None: ...

class CommitBatchRequest(_message.Message):
    __slots__ = ("group", "commits", "session_id")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    COMMITS_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    group: str
    commits: _containers.RepeatedCompositeFieldContainer[CommitRequest]
    session_id: str
    def __init__(self, group: _Optional[str] = ..., commits: _Optional[_Iterable[_Union[CommitRequest, _Mapping]]] = ..., session_id: _Optional[str] = ...) -> None: ...

class CommitResult(_message.Message):
    __slots__ = ("lease_id", "code", "message", "kind", "low_watermark", "exhausted", "retries", "details", "copies")
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    LOW_WATERMARK_FIELD_NUMBER: _ClassVar[int]
    EXHAUSTED_FIELD_NUMBER: _ClassVar[int]
    RETRIES_FIELD_NUMBER: _ClassVar[int]
    DETAILS_FIELD_NUMBER: _ClassVar[int]
    COPIES_FIELD_NUMBER: _ClassVar[int]
    lease_id: str
    code: int
    message: str
    kind: str
    low_watermark: int
    exhausted: _containers.RepeatedScalarFieldContainer[int]
    retries: int
    details: str
    copies: _containers.RepeatedCompositeFieldContainer[DlqCopy]
    def __init__(self, lease_id: _Optional[str] = ..., code: _Optional[int] = ..., message: _Optional[str] = ..., kind: _Optional[str] = ..., low_watermark: _Optional[int] = ..., exhausted: _Optional[_Iterable[int]] = ..., retries: _Optional[int] = ..., details: _Optional[str] = ..., copies: _Optional[_Iterable[_Union[DlqCopy, _Mapping]]] = ...) -> None: ...

class CommitBatchResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[CommitResult]
    def __init__(self, results: _Optional[_Iterable[_Union[CommitResult, _Mapping]]] = ...) -> None: ...

class GetProgressRequest(_message.Message):
    __slots__ = ("group", "lease_id", "max_ranges")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    MAX_RANGES_FIELD_NUMBER: _ClassVar[int]
    group: str
    lease_id: str
    max_ranges: int
    def __init__(self, group: _Optional[str] = ..., lease_id: _Optional[str] = ..., max_ranges: _Optional[int] = ...) -> None: ...

class GetProgressBatchRequest(_message.Message):
    __slots__ = ("group", "lease_ids", "max_ranges")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    LEASE_IDS_FIELD_NUMBER: _ClassVar[int]
    MAX_RANGES_FIELD_NUMBER: _ClassVar[int]
    group: str
    lease_ids: _containers.RepeatedScalarFieldContainer[str]
    max_ranges: int
    def __init__(self, group: _Optional[str] = ..., lease_ids: _Optional[_Iterable[str]] = ..., max_ranges: _Optional[int] = ...) -> None: ...

class GetProgressBatchResponse(_message.Message):
    __slots__ = ("progress",)
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    progress: _containers.RepeatedCompositeFieldContainer[Progress]
    def __init__(self, progress: _Optional[_Iterable[_Union[Progress, _Mapping]]] = ...) -> None: ...

class RetryState(_message.Message):
    __slots__ = ("offset", "attempts", "next_attempt_unix_ms", "last_error", "exhausted", "copies")
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    NEXT_ATTEMPT_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_FIELD_NUMBER: _ClassVar[int]
    EXHAUSTED_FIELD_NUMBER: _ClassVar[int]
    COPIES_FIELD_NUMBER: _ClassVar[int]
    offset: int
    attempts: int
    next_attempt_unix_ms: int
    last_error: str
    exhausted: bool
    copies: int
    def __init__(self, offset: _Optional[int] = ..., attempts: _Optional[int] = ..., next_attempt_unix_ms: _Optional[int] = ..., last_error: _Optional[str] = ..., exhausted: _Optional[bool] = ..., copies: _Optional[int] = ...) -> None: ...

class Progress(_message.Message):
    __slots__ = ("lease_id", "low_watermark", "high_watermark", "done", "done_above_low_watermark", "retries", "rejects", "offset_lag", "time_lag_ms", "oldest_pending_ts_ms", "retrying")
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    LOW_WATERMARK_FIELD_NUMBER: _ClassVar[int]
    HIGH_WATERMARK_FIELD_NUMBER: _ClassVar[int]
    DONE_FIELD_NUMBER: _ClassVar[int]
    DONE_ABOVE_LOW_WATERMARK_FIELD_NUMBER: _ClassVar[int]
    RETRIES_FIELD_NUMBER: _ClassVar[int]
    REJECTS_FIELD_NUMBER: _ClassVar[int]
    OFFSET_LAG_FIELD_NUMBER: _ClassVar[int]
    TIME_LAG_MS_FIELD_NUMBER: _ClassVar[int]
    OLDEST_PENDING_TS_MS_FIELD_NUMBER: _ClassVar[int]
    RETRYING_FIELD_NUMBER: _ClassVar[int]
    lease_id: str
    low_watermark: int
    high_watermark: int
    done: _containers.RepeatedCompositeFieldContainer[OffsetRange]
    done_above_low_watermark: int
    retries: int
    rejects: int
    offset_lag: int
    time_lag_ms: int
    oldest_pending_ts_ms: int
    retrying: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, lease_id: _Optional[str] = ..., low_watermark: _Optional[int] = ..., high_watermark: _Optional[int] = ..., done: _Optional[_Iterable[_Union[OffsetRange, _Mapping]]] = ..., done_above_low_watermark: _Optional[int] = ..., retries: _Optional[int] = ..., rejects: _Optional[int] = ..., offset_lag: _Optional[int] = ..., time_lag_ms: _Optional[int] = ..., oldest_pending_ts_ms: _Optional[int] = ..., retrying: _Optional[_Iterable[int]] = ...) -> None: ...

class DueRetriesRequest(_message.Message):
    __slots__ = ("group", "lease_id", "epoch", "limit")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    group: str
    lease_id: str
    epoch: int
    limit: int
    def __init__(self, group: _Optional[str] = ..., lease_id: _Optional[str] = ..., epoch: _Optional[int] = ..., limit: _Optional[int] = ...) -> None: ...

class DueRetriesResponse(_message.Message):
    __slots__ = ("due",)
    DUE_FIELD_NUMBER: _ClassVar[int]
    due: _containers.RepeatedCompositeFieldContainer[RetryState]
    def __init__(self, due: _Optional[_Iterable[_Union[RetryState, _Mapping]]] = ...) -> None: ...

class GetLagRequest(_message.Message):
    __slots__ = ("group", "stream", "lane", "page_size", "page_token", "lanes_only")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    STREAM_FIELD_NUMBER: _ClassVar[int]
    LANE_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    LANES_ONLY_FIELD_NUMBER: _ClassVar[int]
    group: str
    stream: str
    lane: str
    page_size: int
    page_token: str
    lanes_only: bool
    def __init__(self, group: _Optional[str] = ..., stream: _Optional[str] = ..., lane: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., lanes_only: _Optional[bool] = ...) -> None: ...

class PartitionLag(_message.Message):
    __slots__ = ("lease_id", "low_watermark", "high_watermark", "offset_lag", "time_lag_ms", "group", "filtered")
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    LOW_WATERMARK_FIELD_NUMBER: _ClassVar[int]
    HIGH_WATERMARK_FIELD_NUMBER: _ClassVar[int]
    OFFSET_LAG_FIELD_NUMBER: _ClassVar[int]
    TIME_LAG_MS_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    FILTERED_FIELD_NUMBER: _ClassVar[int]
    lease_id: str
    low_watermark: int
    high_watermark: int
    offset_lag: int
    time_lag_ms: int
    group: str
    filtered: int
    def __init__(self, lease_id: _Optional[str] = ..., low_watermark: _Optional[int] = ..., high_watermark: _Optional[int] = ..., offset_lag: _Optional[int] = ..., time_lag_ms: _Optional[int] = ..., group: _Optional[str] = ..., filtered: _Optional[int] = ...) -> None: ...

class LaneLag(_message.Message):
    __slots__ = ("stream", "lane", "offset_lag", "time_lag_ms", "group", "dlq_pending", "dlq_redriven", "dlq_purged", "filtered")
    STREAM_FIELD_NUMBER: _ClassVar[int]
    LANE_FIELD_NUMBER: _ClassVar[int]
    OFFSET_LAG_FIELD_NUMBER: _ClassVar[int]
    TIME_LAG_MS_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    DLQ_PENDING_FIELD_NUMBER: _ClassVar[int]
    DLQ_REDRIVEN_FIELD_NUMBER: _ClassVar[int]
    DLQ_PURGED_FIELD_NUMBER: _ClassVar[int]
    FILTERED_FIELD_NUMBER: _ClassVar[int]
    stream: str
    lane: str
    offset_lag: int
    time_lag_ms: int
    group: str
    dlq_pending: int
    dlq_redriven: int
    dlq_purged: int
    filtered: int
    def __init__(self, stream: _Optional[str] = ..., lane: _Optional[str] = ..., offset_lag: _Optional[int] = ..., time_lag_ms: _Optional[int] = ..., group: _Optional[str] = ..., dlq_pending: _Optional[int] = ..., dlq_redriven: _Optional[int] = ..., dlq_purged: _Optional[int] = ..., filtered: _Optional[int] = ...) -> None: ...

class GetLagResponse(_message.Message):
    __slots__ = ("group", "partitions", "lanes", "offset_lag", "time_lag_ms", "next_page_token")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    LANES_FIELD_NUMBER: _ClassVar[int]
    OFFSET_LAG_FIELD_NUMBER: _ClassVar[int]
    TIME_LAG_MS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    group: str
    partitions: _containers.RepeatedCompositeFieldContainer[PartitionLag]
    lanes: _containers.RepeatedCompositeFieldContainer[LaneLag]
    offset_lag: int
    time_lag_ms: int
    next_page_token: str
    def __init__(self, group: _Optional[str] = ..., partitions: _Optional[_Iterable[_Union[PartitionLag, _Mapping]]] = ..., lanes: _Optional[_Iterable[_Union[LaneLag, _Mapping]]] = ..., offset_lag: _Optional[int] = ..., time_lag_ms: _Optional[int] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class ListRejectsRequest(_message.Message):
    __slots__ = ("stream", "group", "lane", "since_unix_ms", "page_size", "page_token", "include_purged")
    STREAM_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    LANE_FIELD_NUMBER: _ClassVar[int]
    SINCE_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_PURGED_FIELD_NUMBER: _ClassVar[int]
    stream: str
    group: str
    lane: str
    since_unix_ms: int
    page_size: int
    page_token: str
    include_purged: bool
    def __init__(self, stream: _Optional[str] = ..., group: _Optional[str] = ..., lane: _Optional[str] = ..., since_unix_ms: _Optional[int] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., include_purged: _Optional[bool] = ...) -> None: ...

class RejectedRecord(_message.Message):
    __slots__ = ("group", "partition", "offset", "reason", "attempts", "rejected_unix_ms", "dlq", "state")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    REJECTED_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    DLQ_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    group: str
    partition: _assigner_pb2.PartitionRef
    offset: int
    reason: str
    attempts: int
    rejected_unix_ms: int
    dlq: DlqLocation
    state: str
    def __init__(self, group: _Optional[str] = ..., partition: _Optional[_Union[_assigner_pb2.PartitionRef, _Mapping]] = ..., offset: _Optional[int] = ..., reason: _Optional[str] = ..., attempts: _Optional[int] = ..., rejected_unix_ms: _Optional[int] = ..., dlq: _Optional[_Union[DlqLocation, _Mapping]] = ..., state: _Optional[str] = ...) -> None: ...

class PurgeRejectsRequest(_message.Message):
    __slots__ = ("stream", "group", "before_unix_ms", "page_token", "dry_run")
    STREAM_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    BEFORE_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    stream: str
    group: str
    before_unix_ms: int
    page_token: str
    dry_run: bool
    def __init__(self, stream: _Optional[str] = ..., group: _Optional[str] = ..., before_unix_ms: _Optional[int] = ..., page_token: _Optional[str] = ..., dry_run: _Optional[bool] = ...) -> None: ...

class PurgeRejectsResponse(_message.Message):
    __slots__ = ("purged", "next_page_token")
    PURGED_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    purged: int
    next_page_token: str
    def __init__(self, purged: _Optional[int] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class ListRejectsResponse(_message.Message):
    __slots__ = ("rejects", "next_page_token")
    REJECTS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    rejects: _containers.RepeatedCompositeFieldContainer[RejectedRecord]
    next_page_token: str
    def __init__(self, rejects: _Optional[_Iterable[_Union[RejectedRecord, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class ClaimRedriveRequest(_message.Message):
    __slots__ = ("stream", "group", "owner", "to_lane", "since_unix_ms", "until_unix_ms", "cursor", "batch_size", "in_flight", "packed", "complete_batch_id", "left")
    STREAM_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    TO_LANE_FIELD_NUMBER: _ClassVar[int]
    SINCE_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    UNTIL_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    CURSOR_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    PACKED_FIELD_NUMBER: _ClassVar[int]
    COMPLETE_BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    LEFT_FIELD_NUMBER: _ClassVar[int]
    stream: str
    group: str
    owner: str
    to_lane: str
    since_unix_ms: int
    until_unix_ms: int
    cursor: str
    batch_size: int
    in_flight: int
    packed: bool
    complete_batch_id: int
    left: _containers.RepeatedCompositeFieldContainer[_assigner_pb2.PartitionOffset]
    def __init__(self, stream: _Optional[str] = ..., group: _Optional[str] = ..., owner: _Optional[str] = ..., to_lane: _Optional[str] = ..., since_unix_ms: _Optional[int] = ..., until_unix_ms: _Optional[int] = ..., cursor: _Optional[str] = ..., batch_size: _Optional[int] = ..., in_flight: _Optional[int] = ..., packed: _Optional[bool] = ..., complete_batch_id: _Optional[int] = ..., left: _Optional[_Iterable[_Union[_assigner_pb2.PartitionOffset, _Mapping]]] = ...) -> None: ...

class RejectRun(_message.Message):
    __slots__ = ("partition", "dlq_stream", "dlq_lane", "offsets", "dlq_generations", "dlq_partitions", "dlq_offsets")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    DLQ_STREAM_FIELD_NUMBER: _ClassVar[int]
    DLQ_LANE_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    DLQ_GENERATIONS_FIELD_NUMBER: _ClassVar[int]
    DLQ_PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    DLQ_OFFSETS_FIELD_NUMBER: _ClassVar[int]
    partition: _assigner_pb2.PartitionRef
    dlq_stream: str
    dlq_lane: str
    offsets: _containers.RepeatedScalarFieldContainer[int]
    dlq_generations: _containers.RepeatedScalarFieldContainer[int]
    dlq_partitions: _containers.RepeatedScalarFieldContainer[int]
    dlq_offsets: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, partition: _Optional[_Union[_assigner_pb2.PartitionRef, _Mapping]] = ..., dlq_stream: _Optional[str] = ..., dlq_lane: _Optional[str] = ..., offsets: _Optional[_Iterable[int]] = ..., dlq_generations: _Optional[_Iterable[int]] = ..., dlq_partitions: _Optional[_Iterable[int]] = ..., dlq_offsets: _Optional[_Iterable[int]] = ...) -> None: ...

class RedriveTarget(_message.Message):
    __slots__ = ("stream", "lane", "generation", "topic", "bootstrap_servers", "from_offsets")
    STREAM_FIELD_NUMBER: _ClassVar[int]
    LANE_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    BOOTSTRAP_SERVERS_FIELD_NUMBER: _ClassVar[int]
    FROM_OFFSETS_FIELD_NUMBER: _ClassVar[int]
    stream: str
    lane: str
    generation: int
    topic: str
    bootstrap_servers: str
    from_offsets: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, stream: _Optional[str] = ..., lane: _Optional[str] = ..., generation: _Optional[int] = ..., topic: _Optional[str] = ..., bootstrap_servers: _Optional[str] = ..., from_offsets: _Optional[_Iterable[int]] = ...) -> None: ...

class ClaimRedriveResponse(_message.Message):
    __slots__ = ("batch", "target", "cursor", "in_doubt", "done", "wait_ms", "batch_id", "last", "runs", "completes")
    BATCH_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    CURSOR_FIELD_NUMBER: _ClassVar[int]
    IN_DOUBT_FIELD_NUMBER: _ClassVar[int]
    DONE_FIELD_NUMBER: _ClassVar[int]
    WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    LAST_FIELD_NUMBER: _ClassVar[int]
    RUNS_FIELD_NUMBER: _ClassVar[int]
    COMPLETES_FIELD_NUMBER: _ClassVar[int]
    batch: _containers.RepeatedCompositeFieldContainer[RejectedRecord]
    target: RedriveTarget
    cursor: str
    in_doubt: bool
    done: bool
    wait_ms: int
    batch_id: int
    last: bool
    runs: _containers.RepeatedCompositeFieldContainer[RejectRun]
    completes: bool
    def __init__(self, batch: _Optional[_Iterable[_Union[RejectedRecord, _Mapping]]] = ..., target: _Optional[_Union[RedriveTarget, _Mapping]] = ..., cursor: _Optional[str] = ..., in_doubt: _Optional[bool] = ..., done: _Optional[bool] = ..., wait_ms: _Optional[int] = ..., batch_id: _Optional[int] = ..., last: _Optional[bool] = ..., runs: _Optional[_Iterable[_Union[RejectRun, _Mapping]]] = ..., completes: _Optional[bool] = ...) -> None: ...

class CompleteRedriveRequest(_message.Message):
    __slots__ = ("stream", "group", "owner", "left", "batch_id")
    STREAM_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    LEFT_FIELD_NUMBER: _ClassVar[int]
    BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    stream: str
    group: str
    owner: str
    left: _containers.RepeatedCompositeFieldContainer[_assigner_pb2.PartitionOffset]
    batch_id: int
    def __init__(self, stream: _Optional[str] = ..., group: _Optional[str] = ..., owner: _Optional[str] = ..., left: _Optional[_Iterable[_Union[_assigner_pb2.PartitionOffset, _Mapping]]] = ..., batch_id: _Optional[int] = ...) -> None: ...

class CompleteRedriveResponse(_message.Message):
    __slots__ = ("redriven",)
    REDRIVEN_FIELD_NUMBER: _ClassVar[int]
    redriven: int
    def __init__(self, redriven: _Optional[int] = ...) -> None: ...
