"""The AssignerService servicer: worker sessions over a bidirectional stream, lease checks, group description.

Thin: it decodes messages, hands them to the Assigner's session, and encodes what the session yields.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import grpc
import structlog

from streamplane.coordinator.assigner import Assigner, Session, Update
from streamplane.coordinator.convert import generation_state_to_pb
from streamplane.coordinator.leases import Lease, Subscription
from streamplane.errors import InvalidArgumentError, StreamplaneError
from streamplane.rpc import grpc_errors, grpc_stream_errors
from streamplane.v1 import assigner_pb2 as apb
from streamplane.v1 import assigner_pb2_grpc as apb_grpc

log = structlog.get_logger(__name__)


def _partition(lease: Lease) -> apb.PartitionRef:
    return apb.PartitionRef(
        stream=lease.stream, lane=lease.lane, generation=lease.generation, partition=lease.partition
    )


def _encode(update: Update) -> apb.AssignerMessage:
    lease = update.lease
    if update.kind == "grant":
        d = update.details
        return apb.AssignerMessage(
            grant=apb.Grant(
                lease_id=lease.lease_id,
                partition=_partition(lease),
                epoch=lease.epoch,
                topic=d["topic"],
                cluster=d["cluster"],
                bootstrap_servers=d["bootstrap_servers"],
                start_offset=d["start_offset"],
                generation_state=generation_state_to_pb(d["state"]),
                end_offset=d["end_offset"],
            )
        )
    if update.kind == "generation":
        return apb.AssignerMessage(
            generation_change=apb.GenerationChange(
                lease_id=lease.lease_id,
                partition=_partition(lease),
                state=generation_state_to_pb(update.details["state"]),
                end_offset=update.details["end_offset"],
            )
        )
    if update.kind == "revoke":
        return apb.AssignerMessage(
            revoke=apb.Revoke(
                lease_id=lease.lease_id, epoch=lease.epoch, deadline_unix_ms=update.deadline_ms, reason=update.reason
            )
        )
    raise ValueError(f"no message for a {update.kind!r} update")


def _feed(session: Session, requests: Iterator[apb.WorkerMessage]) -> None:
    """Hand the worker's messages to its session; end the session when the worker closes the stream."""
    try:
        for message in requests:
            kind = message.WhichOneof("kind")
            if kind == "heartbeat":
                hb = message.heartbeat
                session.heartbeat(
                    hb.cpu,
                    hb.records_per_s,
                    [(x.lease_id, x.records_per_s, x.lag_records, x.lag_ms) for x in hb.leases],
                )
            elif kind == "release":
                session.release(message.release.lease_id, message.release.epoch)
            else:
                raise InvalidArgumentError(f"a session takes one hello, then heartbeats and releases, not {kind}")
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
    def __init__(self, assigner: Assigner) -> None:
        self._assigner = assigner

    @grpc_stream_errors
    def Session(
        self, request_iterator: Iterator[apb.WorkerMessage], context: grpc.ServicerContext
    ) -> Iterator[apb.AssignerMessage]:
        first = next(request_iterator, None)
        if first is None or first.WhichOneof("kind") != "hello":
            raise InvalidArgumentError("a session must start with a hello")
        hello = first.hello
        subs = [Subscription(s.stream, tuple(s.lanes)) for s in hello.subscriptions]
        session = self._assigner.open_session(
            hello.group, hello.worker_id, subs, capacity=hello.capacity, max_load=hello.max_load
        )
        context.add_callback(lambda: session.close("the session's stream ended"))
        cfg = self._assigner.config
        yield apb.AssignerMessage(
            welcome=apb.Welcome(
                session_id=session.session_id, heartbeat_interval_ms=cfg.heartbeat_interval_ms, ttl_ms=cfg.ttl_ms
            )
        )
        threading.Thread(
            target=_feed, args=(session, request_iterator), name=f"session-{hello.worker_id}", daemon=True
        ).start()
        for update in session.updates(context.is_active):
            if update.kind == "end":
                assert update.error is not None
                raise update.error
            yield _encode(update)

    @grpc_errors
    def CheckLease(self, request: apb.CheckLeaseRequest, context: grpc.ServicerContext) -> apb.CheckLeaseResponse:
        lease = self._assigner.check_lease(request.group, request.lease_id, request.epoch)
        return apb.CheckLeaseResponse(worker_id=lease.worker_id, epoch=lease.epoch)

    @grpc_errors
    def DescribeGroup(self, request: apb.DescribeGroupRequest, context: grpc.ServicerContext) -> apb.GroupDescription:
        members, leases, leader = self._assigner.describe(request.group)
        return apb.GroupDescription(
            group=request.group,
            leader_replica=leader,
            members=[
                apb.MemberInfo(
                    worker_id=m.worker_id,
                    session_id=m.session_id,
                    capacity=m.capacity,
                    max_load=m.max_load,
                    cpu=m.cpu,
                    records_per_s=m.records_per_s,
                    alive_until_unix_ms=m.alive_until_ms,
                    subscriptions=[apb.Subscription(stream=s.stream, lanes=list(s.lanes)) for s in m.subscriptions],
                )
                for m in members.values()
            ],
            leases=[
                apb.LeaseInfo(
                    lease_id=lease.lease_id,
                    partition=_partition(lease),
                    epoch=lease.epoch,
                    state=lease.state,
                    worker_id=lease.worker_id,
                    records_per_s=lease.records_per_s,
                    lag_records=lease.lag_records,
                    lag_ms=lease.lag_ms,
                )
                for lease in sorted(leases.values(), key=lambda x: x.key)
            ],
        )
