"""The CommitLogService servicer: decode, call the commit log, encode; count commits for the metrics."""

from __future__ import annotations

import time

import grpc

from streamplane.coordinator import commitlog as cl
from streamplane.coordinator import metrics
from streamplane.coordinator.store import Database
from streamplane.errors import FencedError, StreamplaneError
from streamplane.rpc import grpc_errors, status_for
from streamplane.v1 import commitlog_pb2 as cpb
from streamplane.v1 import commitlog_pb2_grpc as cpb_grpc


def _now_ms() -> int:
    return int(time.time() * 1000)


def lag_response(db: Database, group: str, stream: str = "", lane: str = "") -> cpb.GetLagResponse:
    """Lag of one group (or of every group that committed, when `group` is empty)."""
    groups = [group] if group else cl.read_groups_with_progress(db)
    out = cpb.GetLagResponse(group=group)
    for g in groups:
        lag = cl.lag(db, g, stream=stream, lane=lane, now_ms=_now_ms())
        prefix = "" if group else f"{g}:"
        for lid, h in lag.partitions:
            out.partitions.append(
                cpb.PartitionLag(
                    lease_id=prefix + lid,
                    low_watermark=h.low,
                    high_watermark=h.high,
                    offset_lag=h.offset_lag(),
                    time_lag_ms=h.time_lag_ms(lag.now_ms),
                )
            )
        for (s, la), (off, t) in sorted(lag.lanes().items()):
            out.lanes.append(cpb.LaneLag(stream=prefix + s, lane=la, offset_lag=off, time_lag_ms=t))
    out.offset_lag = sum(x.offset_lag for x in out.lanes)
    out.time_lag_ms = max((x.time_lag_ms for x in out.lanes), default=0)
    return out


def commit_from_pb(request: cpb.CommitRequest) -> cl.Commit:
    return cl.Commit(
        acked=[(r.start, r.end) for r in request.acked],
        retries=[cl.Retry(r.offset, r.attempt, r.error, r.backoff_ms) for r in request.retries],
        rejects=[
            cl.Reject(
                r.offset,
                r.reason,
                {
                    "stream": r.dlq.stream,
                    "lane": r.dlq.lane,
                    "generation": r.dlq.generation,
                    "partition": r.dlq.partition,
                    "offset": r.dlq.offset,
                }
                if r.HasField("dlq")
                else {},
            )
            for r in request.rejects
        ],
        oldest_pending_ts_ms=request.oldest_pending_ts_ms,
        high_watermark=request.high_watermark,
        high_watermark_ts_ms=request.high_watermark_ts_ms,
        acked_bitmap=request.acked_bitmap,
        acked_bitmap_base=request.acked_bitmap_base,
    )


def _count(group: str, request: cpb.CommitRequest, result: cl.CommitResult) -> None:
    metrics.COMMITS.labels(group).inc()
    metrics.ACKED.labels(group).inc(result.newly_done)
    metrics.RETRIES.labels(group).inc(len(request.retries))
    metrics.REJECTS.labels(group).inc(len(request.rejects))


class CommitLogServicer(cpb_grpc.CommitLogServiceServicer):
    def __init__(self, db: Database) -> None:
        self._db = db

    @grpc_errors
    def Commit(self, request: cpb.CommitRequest, context: grpc.ServicerContext) -> cpb.CommitResponse:
        try:
            result = cl.commit(
                self._db, request.group, request.lease_id, request.epoch, commit_from_pb(request), now_ms=_now_ms()
            )
        except FencedError:
            metrics.STALE_EPOCH.labels(request.group).inc()
            raise
        _count(request.group, request, result)
        return cpb.CommitResponse(low_watermark=result.low_watermark, exhausted=result.exhausted)

    @grpc_errors
    def CommitBatch(self, request: cpb.CommitBatchRequest, context: grpc.ServicerContext) -> cpb.CommitBatchResponse:
        items = [(c.lease_id, c.epoch, commit_from_pb(c)) for c in request.commits]
        results = cl.commit_many(self._db, request.group, items, now_ms=_now_ms())
        out = cpb.CommitBatchResponse()
        for c, result in zip(request.commits, results, strict=True):
            if isinstance(result, StreamplaneError):
                if isinstance(result, FencedError):
                    metrics.STALE_EPOCH.labels(request.group).inc()
                out.results.append(
                    cpb.CommitResult(
                        lease_id=c.lease_id,
                        code=status_for(result).value[0],
                        message=result.message,
                        kind=type(result).__name__,
                    )
                )
                continue
            _count(request.group, c, result)
            out.results.append(
                cpb.CommitResult(
                    lease_id=c.lease_id,
                    low_watermark=result.low_watermark,
                    exhausted=result.exhausted,
                    retries=result.retries,
                )
            )
        return out

    @grpc_errors
    def GetProgress(self, request: cpb.GetProgressRequest, context: grpc.ServicerContext) -> cpb.Progress:
        p = cl.progress(self._db, request.group, request.lease_id, max_ranges=request.max_ranges or 1000)
        h = p.header
        return cpb.Progress(
            lease_id=request.lease_id,
            low_watermark=h.low,
            high_watermark=h.high,
            done=[cpb.OffsetRange(start=a, end=b) for a, b in p.done],
            done_above_low_watermark=h.done_above,
            retries=h.retries,
            rejects=h.rejects,
            offset_lag=h.offset_lag(),
            time_lag_ms=h.time_lag_ms(_now_ms()),
            oldest_pending_ts_ms=h.oldest_pending_ts_ms,
        )

    @grpc_errors
    def DueRetries(self, request: cpb.DueRetriesRequest, context: grpc.ServicerContext) -> cpb.DueRetriesResponse:
        due = cl.due_retries(
            self._db, request.group, request.lease_id, request.epoch, now_ms=_now_ms(), limit=request.limit or 1000
        )
        return cpb.DueRetriesResponse(
            due=[
                cpb.RetryState(
                    offset=d["offset"],
                    attempts=d["attempts"],
                    next_attempt_unix_ms=d["next_ms"],
                    last_error=d["error"],
                    exhausted=d["exhausted"],
                )
                for d in due
            ]
        )

    @grpc_errors
    def GetLag(self, request: cpb.GetLagRequest, context: grpc.ServicerContext) -> cpb.GetLagResponse:
        return lag_response(self._db, request.group, request.stream, request.lane)

    @grpc_errors
    def ConfigureGroup(
        self, request: cpb.ConfigureGroupRequest, context: grpc.ServicerContext
    ) -> cpb.ConfigureGroupResponse:
        cl.configure(self._db, request.group, request.lane, request.max_attempts)
        return cpb.ConfigureGroupResponse()
