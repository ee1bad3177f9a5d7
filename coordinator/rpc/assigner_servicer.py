"""The AssignerService servicer: worker sessions over a bidirectional stream, lease checks, group description.

Thin: it decodes messages, hands them to the worker's session stream, and encodes what the stream yields.
Streams run on the event loop (see groups/sessions/hub.py); unary calls on the server's threads.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc
import structlog

from streamplane.coordinator.groups import config as group_config
from streamplane.coordinator.groups import rewind, window
from streamplane.coordinator.groups.assigner import Assigner
from streamplane.coordinator.groups.sessions.hub import EXPECT_AFTER_MS, EXPECT_MS, Renewer, SessionHub, SessionStream
from streamplane.coordinator.rpc import auth
from streamplane.coordinator.rpc.guard import Guard
from streamplane.coordinator.rpc.limits import HELLO_TIMEOUT_S
from streamplane.coordinator.store import Database
from streamplane.coordinator.topology import events
from streamplane.coordinator.topology.cluster_admin import ClusterAdmin, RoutingAdmin
from streamplane.errors import InvalidArgumentError, StreamplaneError, UnauthenticatedError
from streamplane.model import Hello, Welcome
from streamplane.rpc import grpc_errors, grpc_stream_errors, require_decoded
from streamplane.v1 import assigner_pb2 as apb
from streamplane.v1 import assigner_pb2_grpc as apb_grpc
from streamplane.v1 import convert
from streamplane.v1 import topology_pb2 as pb

log = structlog.get_logger(__name__)


async def _feed(stream: SessionStream, requests: AsyncIterator[apb.WorkerMessage]) -> None:
    """Hand the worker's messages to its session; end the session when the worker closes the stream."""
    try:
        async for message in requests:
            require_decoded(message)
            stream.take(convert.worker_message_from_pb(message))
    except StreamplaneError as err:
        await stream.fail(err)
        return
    except grpc.RpcError:
        pass  # the worker went away: end below
    except Exception as err:
        log.exception("session.feed_failed")
        await stream.fail(StreamplaneError(f"internal error handling the session: {err}"))
        return
    await stream.end("the worker closed its session")


def configure_group(db: Database, request: apb.ConfigureGroupRequest) -> None:
    """A group's settings, as ConfigureGroup asks (served by groups; the commit log's old RPC calls this too)."""
    group_config.configure(
        db,
        request.group,
        request.lane,
        request.max_attempts,
        request.lag_target_ms,
        request.expire_after_ms,
        where=request.where if request.HasField("where") else None,
        max_slices=request.max_slices,
        split=(request.split_partition, request.split_slices) if request.split_partition else None,
    )


class AssignerServicer(apb_grpc.AssignerServiceServicer):
    def __init__(
        self,
        assigner: Assigner,
        hub: SessionHub,
        *,
        guard: Guard | None = None,
        hello_timeout_s: float = HELLO_TIMEOUT_S,
        admin: ClusterAdmin | None = None,
    ) -> None:
        self._assigner = assigner
        self._admin = admin or RoutingAdmin()
        self._hub = hub
        self._guard = guard or Guard()
        self._hello_timeout_s = hello_timeout_s

    @grpc_stream_errors
    async def Session(
        self, request_iterator: AsyncIterator[apb.WorkerMessage], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[apb.AssignerMessage]:
        principal = self._guard.principal(context)
        try:
            first = await asyncio.wait_for(anext(request_iterator, None), self._hello_timeout_s)
        except TimeoutError:
            await context.abort(
                grpc.StatusCode.DEADLINE_EXCEEDED, f"no hello within {self._hello_timeout_s:g} s of opening the session"
            )
        require_decoded(first)
        hello = convert.worker_message_from_pb(first) if first is not None else None
        if not isinstance(hello, Hello):
            raise InvalidArgumentError("a session must start with a hello")
        auth.check(principal, auth.CONSUME, group=hello.group)
        for sub in hello.subscriptions:
            auth.check(principal, auth.CONSUME, stream=sub.stream, group=hello.group)
        enabled = self._guard.enabled
        stream = await self._hub.open(
            hello, principal, self._renewer(hello) if enabled else None, self._guard.revoked if enabled else None
        )
        context.add_done_callback(lambda _: stream.end_soon("the session's stream ended"))
        cfg = self._hub.host.config
        welcome = Welcome(stream.session.session_id, cfg.heartbeat_interval_ms, cfg.ttl_ms, stream.session.where)
        yield convert.welcome_to_pb(welcome)
        feed = asyncio.create_task(_feed(stream, request_iterator), name=f"session-{hello.worker_id}")
        try:
            async for told in stream.events():
                if hello.takes_batches:
                    yield convert.session_events_to_pb(told)
                    continue
                for event in told:  # a worker that reads one event a message
                    yield convert.session_event_to_pb(event)
        finally:
            feed.cancel()

    def _renewer(self, hello: Hello) -> Renewer:
        """How a session's Renew is checked: a valid token of the same subject that may still consume the
        group and every stream the session reads."""

        def renew(current: auth.Principal, token: str) -> auth.Principal:
            fresh = self._guard.bearer(f"Bearer {token}")
            if fresh.name != current.name:
                raise UnauthenticatedError(
                    f"a session opened by {current.name} cannot be renewed with a token of {fresh.name}"
                )
            auth.check(fresh, auth.CONSUME, group=hello.group)
            for sub in hello.subscriptions:
                auth.check(fresh, auth.CONSUME, stream=sub.stream, group=hello.group)
            return fresh

        return renew

    @grpc_errors
    def CheckLease(self, request: apb.CheckLeaseRequest, context: grpc.ServicerContext) -> apb.CheckLeaseResponse:
        self._guard.require(context, auth.CONSUME, group=request.group)
        lease = self._hub.host.check_lease(request.group, request.lease_id, request.epoch)
        return apb.CheckLeaseResponse(worker_id=lease.worker_id, epoch=lease.epoch)

    @grpc_stream_errors
    async def WatchGroup(
        self, request: apb.WatchGroupRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.GroupEvent]:
        self._guard.require(context, auth.READ, group=request.group)
        after = events.parse_version(request.from_version)
        async for event in self._assigner.group_events(request.group, after, until_head=request.until_head):
            yield convert.group_event_to_pb(event)

    @grpc_errors
    def DeleteGroup(self, request: apb.DeleteGroupRequest, context: grpc.ServicerContext) -> pb.GroupDeleted:
        actor = self._guard.change(context, auth.CONFIGURE_GROUPS, group=request.group)
        deleted = self._assigner.delete_group(request.group, force=request.force, reason=request.reason, actor=actor)
        return convert.group_deleted_to_pb(deleted)

    @grpc_errors
    def ConfigureGroup(
        self, request: apb.ConfigureGroupRequest, context: grpc.ServicerContext
    ) -> apb.ConfigureGroupResponse:
        self._guard.change(context, auth.CONFIGURE_GROUPS, group=request.group)
        configure_group(self._assigner.db, request)
        return apb.ConfigureGroupResponse()

    @grpc_errors
    def RewindGroup(self, request: apb.RewindGroupRequest, context: grpc.ServicerContext) -> apb.RewindGroupResponse:
        actor = self._guard.change(context, auth.CONFIGURE_GROUPS, stream=request.stream, group=request.group)
        applied = False
        target = convert.rewind_target_from_pb(request)  # a request without a target hints nobody
        if not request.dry_run:  # its workers served here keep their polls short until the new grants come
            self._hub.expect(request.group, EXPECT_MS)
        try:
            done = rewind.rewind_group(
                self._assigner.db,
                self._admin,
                request.group,
                request.stream,
                target,
                lane=request.lane,
                dry_run=request.dry_run,
                force=request.force,
                actor=actor,
                now_ms=self._assigner.clock.now_ms(),
            )
            applied = done.applied
        finally:
            if not request.dry_run:  # a while more for the grants to arrive; none when nothing was applied
                self._hub.expect(request.group, EXPECT_AFTER_MS if applied else 0)
        if done.applied:
            log.info("group.rewound", group=done.group, stream=done.stream, partitions=len(done.positions), actor=actor)
        return convert.rewind_plan_to_pb(done)

    @grpc_errors
    def CreateWindowGroup(
        self, request: apb.CreateWindowGroupRequest, context: grpc.ServicerContext
    ) -> apb.CreateWindowGroupResponse:
        actor = self._guard.change(context, auth.CONFIGURE_GROUPS, stream=request.stream, group=request.group)
        made = window.create(
            self._assigner.db,
            self._admin,
            request.group,
            request.stream,
            from_ms=request.from_unix_ms,
            until_ms=request.until_unix_ms,
            lane=request.lane,
            force=request.force,
            dry_run=request.dry_run,
            actor=actor,
            now_ms=self._assigner.clock.now_ms(),
        )
        if made.applied:
            log.info("group.window_created", group=made.group, stream=made.stream, partitions=len(made.positions))
        return convert.window_to_pb(made)

    @grpc_errors
    def DescribeGroup(self, request: apb.DescribeGroupRequest, context: grpc.ServicerContext) -> apb.GroupDescription:
        self._guard.require(context, auth.READ, group=request.group)
        return convert.group_to_pb(self._assigner.describe(request.group))
