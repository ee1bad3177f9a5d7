"""The AssignerService servicer: worker sessions over a bidirectional stream, lease checks, group description.

Thin: it decodes messages, hands them to the Assigner's session, and encodes what the session yields.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import grpc
import structlog

from streamplane.coordinator import auth, events
from streamplane.coordinator.assigner import Assigner, Session
from streamplane.coordinator.guard import Guard
from streamplane.coordinator.limits import HELLO_TIMEOUT_S, Deadlines
from streamplane.coordinator.servicer import WATCH_POLL_S
from streamplane.errors import InvalidArgumentError, StreamplaneError
from streamplane.model import Heartbeat, Hello, Release, Welcome
from streamplane.rpc import grpc_errors, grpc_stream_errors
from streamplane.v1 import assigner_pb2 as apb
from streamplane.v1 import assigner_pb2_grpc as apb_grpc
from streamplane.v1 import convert
from streamplane.v1 import topology_pb2 as pb

log = structlog.get_logger(__name__)


def _feed(session: Session, requests: Iterator[apb.WorkerMessage]) -> None:
    """Hand the worker's messages to its session; end the session when the worker closes the stream."""
    try:
        for message in requests:
            match convert.worker_message_from_pb(message):
                case Heartbeat() as beat:
                    session.heartbeat(beat)
                case Release(lease_id=lid, epoch=epoch):
                    session.release(lid, epoch)
                case other:
                    what = type(other).__name__.lower() if other else "an empty message"
                    raise InvalidArgumentError(f"a session takes one hello, then heartbeats and releases, not {what}")
    except StreamplaneError as err:
        session.fail(err)
        return
    except grpc.RpcError:
        pass  # the worker went away: close below
    except Exception as err:
        log.exception("session.feed_failed")
        session.fail(StreamplaneError(f"internal error handling the session: {err}"))
        return
    session.close("the worker closed its session")


class AssignerServicer(apb_grpc.AssignerServiceServicer):
    def __init__(
        self,
        assigner: Assigner,
        *,
        guard: Guard | None = None,
        deadlines: Deadlines | None = None,
        hello_timeout_s: float = HELLO_TIMEOUT_S,
    ) -> None:
        self._assigner = assigner
        self._guard = guard or Guard()
        self._deadlines = deadlines or Deadlines()
        self._hello_timeout_s = hello_timeout_s

    @grpc_stream_errors
    def Session(
        self, request_iterator: Iterator[apb.WorkerMessage], context: grpc.ServicerContext
    ) -> Iterator[apb.AssignerMessage]:
        principal = self._guard.principal(context)
        waiting = self._deadlines.watch(context, self._hello_timeout_s)  # no hello in time: the call is cancelled
        try:
            first = next(request_iterator, None)
        except grpc.RpcError:
            return  # cancelled (no hello in time) or gone
        finally:
            self._deadlines.met(waiting)
        hello = convert.worker_message_from_pb(first) if first is not None else None
        if not isinstance(hello, Hello):
            raise InvalidArgumentError("a session must start with a hello")
        auth.check(principal, auth.CONSUME, group=hello.group)
        for sub in hello.subscriptions:
            auth.check(principal, auth.CONSUME, stream=sub.stream, group=hello.group)
        session = self._assigner.open_session(
            hello.group,
            hello.worker_id,
            list(hello.subscriptions),
            capacity=hello.capacity,
            max_load=hello.max_load,
            resume_session=hello.resume_session,
            principal=principal.name,
        )
        context.add_callback(lambda: session.close("the session's stream ended"))
        cfg = self._assigner.config
        yield convert.welcome_to_pb(Welcome(session.session_id, cfg.heartbeat_interval_ms, cfg.ttl_ms))
        threading.Thread(
            target=_feed, args=(session, request_iterator), name=f"session-{hello.worker_id}", daemon=True
        ).start()
        for event in session.updates(context.is_active):
            yield convert.session_event_to_pb(event)

    @grpc_errors
    def CheckLease(self, request: apb.CheckLeaseRequest, context: grpc.ServicerContext) -> apb.CheckLeaseResponse:
        self._guard.require(context, auth.CONSUME, group=request.group)
        lease = self._assigner.check_lease(request.group, request.lease_id, request.epoch)
        return apb.CheckLeaseResponse(worker_id=lease.worker_id, epoch=lease.epoch)

    @grpc_stream_errors
    def WatchGroup(self, request: apb.WatchGroupRequest, context: grpc.ServicerContext) -> Iterator[pb.GroupEvent]:
        self._guard.require(context, auth.READ, group=request.group)
        after = events.parse_version(request.from_version)
        for event in self._assigner.group_events(request.group, after, context.is_active, WATCH_POLL_S):
            yield convert.group_event_to_pb(event)

    @grpc_errors
    def DescribeGroup(self, request: apb.DescribeGroupRequest, context: grpc.ServicerContext) -> apb.GroupDescription:
        self._guard.require(context, auth.READ, group=request.group)
        return convert.group_to_pb(self._assigner.describe(request.group))
