"""The CommitLogService servicer: authorize, decode, call the commit log's service, encode."""

from __future__ import annotations

import grpc

from streamplane.coordinator.commitlog import log as cl
from streamplane.coordinator.commitlog import redrive
from streamplane.coordinator.commitlog.service import CommitLog
from streamplane.coordinator.groups.leases import parse_lease_id
from streamplane.coordinator.rpc import auth
from streamplane.coordinator.rpc.assigner_servicer import configure_group
from streamplane.coordinator.rpc.guard import Guard
from streamplane.errors import InvalidArgumentError, PermissionDeniedError
from streamplane.model import MAX_PROGRESS_LEASES
from streamplane.rpc import grpc_errors
from streamplane.v1 import assigner_pb2 as apb
from streamplane.v1 import commitlog_pb2 as cpb
from streamplane.v1 import commitlog_pb2_grpc as cpb_grpc
from streamplane.v1 import convert


class CommitLogServicer(cpb_grpc.CommitLogServiceServicer):
    def __init__(self, log: CommitLog, *, guard: Guard | None = None) -> None:
        self._log = log
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
        self._require_session(request.session_id, [c.epoch])
        result = self._log.commit(
            request.group, c.lease_id, c.epoch, c.commit, principal=principal, session_id=request.session_id
        )
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
        self._require_session(request.session_id, [c.epoch for c in commits])
        outcomes = self._log.commit_many(
            request.group,
            [(c.lease_id, c.epoch, c.commit) for c in commits],
            principal=principal,
            session_id=request.session_id,
        )
        return cpb.CommitBatchResponse(results=[convert.outcome_to_pb(o) for o in outcomes])

    def _require_session(self, session_id: str, epochs: list[int]) -> None:
        """With credentials checked, a lease's commit names the session holding it (who did what is never
        asserted by the client alone); epoch 0 (an unmanaged group such as a Spark query) has no session."""
        if self._guard.enabled and not session_id and any(epochs):
            raise InvalidArgumentError(
                "a commit of a leased partition (epoch > 0) must carry the session id that holds the lease"
            )

    @grpc_errors
    def GetProgress(self, request: cpb.GetProgressRequest, context: grpc.ServicerContext) -> cpb.Progress:
        self._guard.require(context, auth.READ, group=request.group)
        return convert.progress_to_pb(
            self._log.progress(request.group, request.lease_id, max_ranges=request.max_ranges or 1000)
        )

    @grpc_errors
    def GetProgressBatch(
        self, request: cpb.GetProgressBatchRequest, context: grpc.ServicerContext
    ) -> cpb.GetProgressBatchResponse:
        self._guard.require(context, auth.READ, group=request.group)
        if len(request.lease_ids) > MAX_PROGRESS_LEASES:  # before any read
            raise InvalidArgumentError(
                f"lease_ids: at most {MAX_PROGRESS_LEASES} leases a call, not {len(request.lease_ids)}"
            )
        found = self._log.progress_many(
            request.group, list(request.lease_ids), max_ranges=request.max_ranges or 100_000
        )
        return cpb.GetProgressBatchResponse(progress=[convert.progress_to_pb(p) for p in found])

    @grpc_errors
    def DueRetries(self, request: cpb.DueRetriesRequest, context: grpc.ServicerContext) -> cpb.DueRetriesResponse:
        self._writer(context, request.group, [request.lease_id])
        due = self._log.due_retries(request.group, request.lease_id, request.epoch, limit=request.limit or 1000)
        return cpb.DueRetriesResponse(due=[convert.retry_state_to_pb(d) for d in due])

    @grpc_errors
    def GetLag(self, request: cpb.GetLagRequest, context: grpc.ServicerContext) -> cpb.GetLagResponse:
        self._guard.require(context, auth.READ, group=request.group)
        if request.page_size:
            page = self._log.lag_page(
                request.group, request.stream, request.lane, request.page_size, request.page_token
            )
            return convert.lag_to_pb(page)
        lag = self._log.lag(request.group, request.stream, request.lane, partitions=not request.lanes_only)
        return convert.lag_to_pb(lag)

    @grpc_errors
    def ListRejects(self, request: cpb.ListRejectsRequest, context: grpc.ServicerContext) -> cpb.ListRejectsResponse:
        principal = self._guard.require(context, auth.READ, group=request.group, stream=request.stream)
        _one_of_its_groups(principal, request.group)
        page = self._log.reject_page(
            request.stream,
            group=request.group,
            lane=request.lane,
            since_ms=request.since_unix_ms,
            page_size=request.page_size,
            page_token=request.page_token,
            purged=request.include_purged,
        )
        return convert.reject_page_to_pb(page)

    @grpc_errors
    def PurgeRejects(self, request: cpb.PurgeRejectsRequest, context: grpc.ServicerContext) -> cpb.PurgeRejectsResponse:
        principal = self._guard.require(context, auth.CONFIGURE_GROUPS, group=request.group, stream=request.stream)
        _one_of_its_groups(principal, request.group)
        purged, token = self._log.purge_rejects(
            request.stream,
            before_ms=request.before_unix_ms,
            group=request.group,
            page_token=request.page_token,
            dry_run=request.dry_run,
        )
        return cpb.PurgeRejectsResponse(purged=purged, next_page_token=token)

    @grpc_errors
    def ClaimRedrive(self, request: cpb.ClaimRedriveRequest, context: grpc.ServicerContext) -> cpb.ClaimRedriveResponse:
        self._guard.require(context, auth.CONFIGURE_GROUPS, group=request.group, stream=request.stream)
        redrive.check_left(len(request.left))  # before any read
        claimed = self._log.claim_redrive(
            request.stream,
            request.group,
            request.owner,
            to_lane=request.to_lane or "realtime",
            since_ms=request.since_unix_ms,
            until_ms=request.until_unix_ms,
            cursor=request.cursor,
            batch_size=request.batch_size or redrive.MAX_BATCH,
            in_flight=request.in_flight,
            packed=request.packed,
            complete_batch_id=request.complete_batch_id,
            left=frozenset(convert.partition_offsets_from_pb(request.left)),
        )
        response = convert.redrive_claim_to_pb(claimed, packed=request.packed)
        response.completes = True  # this coordinator completes the batch a claim names
        return response

    @grpc_errors
    def CompleteRedrive(
        self, request: cpb.CompleteRedriveRequest, context: grpc.ServicerContext
    ) -> cpb.CompleteRedriveResponse:
        self._guard.require(context, auth.CONFIGURE_GROUPS, group=request.group, stream=request.stream)
        redrive.check_left(len(request.left))  # before any read
        return cpb.CompleteRedriveResponse(
            redriven=self._log.complete_redrive(
                request.stream,
                request.group,
                request.owner,
                frozenset(convert.partition_offsets_from_pb(request.left)),
                request.batch_id,
            )
        )

    @grpc_errors
    def ConfigureGroup(
        self, request: apb.ConfigureGroupRequest, context: grpc.ServicerContext
    ) -> apb.ConfigureGroupResponse:
        """Deprecated here: AssignerService.ConfigureGroup serves it (this one is kept for older clients)."""
        self._guard.change(context, auth.CONFIGURE_GROUPS, group=request.group)
        configure_group(self._log.db, request)
        return apb.ConfigureGroupResponse()


def _one_of_its_groups(principal: auth.Principal, group: str) -> None:
    """Rejects carry handlers' error texts: a token scoped to groups names one of them (its own)."""
    if principal.groups and not group:
        raise PermissionDeniedError(
            f"{principal.name} may reach the rejects of groups {', '.join(principal.groups)} only; name one"
        )
