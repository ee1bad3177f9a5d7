"""The CommitLogService servicer: decode, call the commit log, encode; count commits for the metrics."""

from __future__ import annotations

import grpc

from streamplane.clock import SYSTEM, Clock
from streamplane.coordinator import auth, group_config, metrics
from streamplane.coordinator import commitlog as cl
from streamplane.coordinator.guard import Guard
from streamplane.coordinator.leases import parse_lease_id
from streamplane.coordinator.store import Database
from streamplane.errors import FencedError, InvalidArgumentError, StreamplaneError
from streamplane.model import Commit, CommitOutcome, Lag, Progress
from streamplane.rpc import grpc_errors
from streamplane.v1 import commitlog_pb2 as cpb
from streamplane.v1 import commitlog_pb2_grpc as cpb_grpc
from streamplane.v1 import convert


def lag(db: Database, group: str, stream: str = "", lane: str = "", *, now_ms: int) -> Lag:
    """Lag of one group (of every group that committed, when `group` is empty)."""
    if group:
        return cl.lag(db, group, stream=stream, lane=lane, now_ms=now_ms)
    return cl.lag_of_every_group(db, stream=stream, lane=lane, now_ms=now_ms)


def _count(group: str, commit: Commit, result: cl.CommitResult) -> None:
    metrics.COMMITS.labels(group).inc()
    metrics.ACKED.labels(group).inc(result.newly_done)
    metrics.RETRIES.labels(group).inc(len(commit.retries))
    metrics.REJECTS.labels(group).inc(len(commit.rejects))


class CommitLogServicer(cpb_grpc.CommitLogServiceServicer):
    def __init__(self, db: Database, *, clock: Clock = SYSTEM, guard: Guard | None = None) -> None:
        self._db = db
        self._clock = clock
        self._guard = guard or Guard()

    def _writer(self, context: grpc.ServicerContext, group: str, lease_ids: list[str]) -> str:
        """The principal that may write the group's progress of these leases' streams."""
        principal = self._guard.require(context, auth.CONSUME, group=group)
        streams = set()
        for lid in lease_ids:
            try:
                streams.add(parse_lease_id(lid)[0])
            except InvalidArgumentError:
                continue  # a malformed lease id is refused on its own, in its result
        for stream in sorted(streams):
            auth.check(principal, auth.CONSUME, stream=stream, group=group)
        return principal.name

    @grpc_errors
    def Commit(self, request: cpb.CommitRequest, context: grpc.ServicerContext) -> cpb.CommitResponse:
        principal = self._writer(context, request.group, [request.lease_id])
        c = convert.commit_from_pb(request)
        try:
            result = cl.commit(
                self._db, request.group, c.lease_id, c.epoch, c.commit, now_ms=self._clock.now_ms(), principal=principal
            )
        except FencedError:
            metrics.STALE_EPOCH.labels(request.group).inc()
            raise
        _count(request.group, c.commit, result)
        return cpb.CommitResponse(
            low_watermark=result.low_watermark,
            exhausted=result.exhausted,
            copies=convert.copies_to_pb(tuple(result.copies)),
        )

    @grpc_errors
    def CommitBatch(self, request: cpb.CommitBatchRequest, context: grpc.ServicerContext) -> cpb.CommitBatchResponse:
        cl.check_batch_size(len(request.commits))
        principal = self._writer(context, request.group, [c.lease_id for c in request.commits])
        commits = [convert.commit_from_pb(c) for c in request.commits]
        results = cl.commit_many(
            self._db,
            request.group,
            [(c.lease_id, c.epoch, c.commit) for c in commits],
            now_ms=self._clock.now_ms(),
            principal=principal,
        )
        out = cpb.CommitBatchResponse()
        for c, result in zip(commits, results, strict=True):
            if isinstance(result, StreamplaneError):
                if isinstance(result, FencedError):
                    metrics.STALE_EPOCH.labels(request.group).inc()
                outcome = CommitOutcome(c.lease_id, error=result)
            else:
                _count(request.group, c.commit, result)
                outcome = CommitOutcome(
                    c.lease_id,
                    result.low_watermark,
                    tuple(result.exhausted),
                    result.retries,
                    copies=tuple(result.copies),
                )
            out.results.append(convert.outcome_to_pb(outcome))
        return out

    @grpc_errors
    def GetProgress(self, request: cpb.GetProgressRequest, context: grpc.ServicerContext) -> cpb.Progress:
        self._guard.require(context, auth.READ, group=request.group)
        p = cl.progress(self._db, request.group, request.lease_id, max_ranges=request.max_ranges or 1000)
        h = p.header
        return convert.progress_to_pb(
            Progress(
                lease_id=request.lease_id,
                low_watermark=h.low,
                high_watermark=h.high,
                done=tuple(p.done),
                done_above_low_watermark=h.done_above,
                retries=h.retries,
                rejects=h.rejects,
                offset_lag=h.offset_lag(),
                time_lag_ms=h.time_lag_ms(self._clock.now_ms()),
                oldest_pending_ts_ms=h.oldest_pending_ts_ms,
                retrying=tuple(p.retrying),
            )
        )

    @grpc_errors
    def DueRetries(self, request: cpb.DueRetriesRequest, context: grpc.ServicerContext) -> cpb.DueRetriesResponse:
        self._writer(context, request.group, [request.lease_id])
        due = cl.due_retries(
            self._db,
            request.group,
            request.lease_id,
            request.epoch,
            now_ms=self._clock.now_ms(),
            limit=request.limit or 1000,
        )
        return cpb.DueRetriesResponse(due=[convert.retry_state_to_pb(d) for d in due])

    @grpc_errors
    def GetLag(self, request: cpb.GetLagRequest, context: grpc.ServicerContext) -> cpb.GetLagResponse:
        self._guard.require(context, auth.READ, group=request.group)
        now = self._clock.now_ms()
        return convert.lag_to_pb(lag(self._db, request.group, request.stream, request.lane, now_ms=now))

    @grpc_errors
    def ConfigureGroup(
        self, request: cpb.ConfigureGroupRequest, context: grpc.ServicerContext
    ) -> cpb.ConfigureGroupResponse:
        self._guard.change(context, auth.CONFIGURE_GROUPS, group=request.group)
        group_config.configure(self._db, request.group, request.lane, request.max_attempts, request.lag_target_ms)
        return cpb.ConfigureGroupResponse()
