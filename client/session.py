"""A worker's session with the Assigner: join a group, receive grants and revokes, release, report load.

    session = WorkerSession("127.0.0.1:7400", group="billing", worker_id="w1", subscriptions={"logs": []})
    session.join()
    for event in session.events():
        if isinstance(event, Grant): ...start reading event.partition from event.topic...
        elif isinstance(event, Revoke): ...finish in-flight work...; session.release(event.lease_id, event.epoch)
    session.close()

Heartbeats go out in the background at the interval the coordinator asks for, with the load last set by
`report_load`. The session ends (SessionEndedError from `events`) when the coordinator ends it: after its
TTL without heartbeats, or on bad input.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

import grpc

from streamplane.client.coordinator import CoordinatorClient
from streamplane.errors import FencedError, StreamplaneError
from streamplane.rpc import error_from_rpc_error
from streamplane.v1 import assigner_pb2 as apb

Grant = apb.Grant
Revoke = apb.Revoke
GenerationChange = apb.GenerationChange


class SessionEndedError(FencedError):
    """The coordinator ended the session; its leases are gone. `cause` is the status it gave."""

    def __init__(self, message: str, *, cause: StreamplaneError | None = None) -> None:
        super().__init__(message)
        self.cause = cause


@dataclass
class LeaseLoad:
    records_per_s: float = 0.0
    lag_records: int = 0
    lag_ms: int = 0


@dataclass
class _Load:
    cpu: float = 0.0
    records_per_s: float = 0.0
    leases: dict[str, LeaseLoad] = field(default_factory=dict)


_CLOSE = object()


class WorkerSession:
    """One worker's membership in a group.

    Args:
        coordinator: host:port of any coordinator replica.
        group: the consumer group.
        worker_id: unique in the group while the session lives.
        subscriptions: {stream: [lanes]}; an empty list means every lane but dlq.
        capacity: relative processing power (twice the capacity, twice the load).
        max_load: records/s it takes beyond the top-priority lanes; 0 = no limit.
    """

    def __init__(
        self,
        coordinator: str,
        *,
        group: str,
        worker_id: str,
        subscriptions: Mapping[str, list[str]],
        capacity: float = 1.0,
        max_load: float = 0.0,
    ) -> None:
        self._client = CoordinatorClient(coordinator)
        self._stub = self._client.assigner
        self.group, self.worker_id = group, worker_id
        self._hello = apb.Hello(
            group=group,
            worker_id=worker_id,
            capacity=capacity,
            max_load=max_load,
            subscriptions=[apb.Subscription(stream=s, lanes=list(lanes)) for s, lanes in subscriptions.items()],
        )
        self._outbox: queue.Queue[object] = queue.Queue()
        self._load = _Load()
        self._held: dict[str, apb.Grant] = {}
        self._call: grpc.Future | None = None
        self._stop = threading.Event()
        self.session_id = ""
        self.heartbeat_interval_s = 0.25

    @property
    def leases(self) -> dict[str, apb.Grant]:
        """The leases this worker holds now, by lease id."""
        return dict(self._held)

    def _requests(self) -> Iterator[apb.WorkerMessage]:
        yield apb.WorkerMessage(hello=self._hello)
        while True:
            item = self._outbox.get()
            if item is _CLOSE:
                return
            yield item  # type: ignore[misc]

    def join(self, timeout_s: float = 10.0) -> None:
        """Open the session; raises the coordinator's error (unknown stream, duplicate worker id, ...)."""
        self._call = self._stub.Session(self._requests(), metadata=self._client.metadata)
        try:
            first = next(self._call)
        except grpc.RpcError as err:
            raise self._error(err) from err
        self.session_id = first.welcome.session_id
        self.heartbeat_interval_s = first.welcome.heartbeat_interval_ms / 1000 or 0.25
        threading.Thread(target=self._heartbeats, name=f"heartbeat-{self.worker_id}", daemon=True).start()

    def _error(self, err: grpc.RpcError) -> StreamplaneError:
        return error_from_rpc_error(err, self._client.target)

    def _heartbeats(self) -> None:
        while not self._stop.wait(self.heartbeat_interval_s):
            load = self._load
            if load.leases:  # lease loads go out once; later heartbeats carry only the worker's totals
                self._load = _Load(load.cpu, load.records_per_s)
            self._outbox.put(
                apb.WorkerMessage(
                    heartbeat=apb.Heartbeat(
                        cpu=load.cpu,
                        records_per_s=load.records_per_s,
                        leases=[
                            apb.LeaseLoad(
                                lease_id=lid, records_per_s=x.records_per_s, lag_records=x.lag_records, lag_ms=x.lag_ms
                            )
                            for lid, x in load.leases.items()
                        ],
                    )
                )
            )

    def report_load(
        self, *, cpu: float = 0.0, records_per_s: float = 0.0, leases: Mapping[str, LeaseLoad] | None = None
    ) -> None:
        """The load sent with the next heartbeats (the Assigner balances by it). Lease loads are sent once,
        with the next heartbeat: report only the leases whose load changed."""
        self._load = _Load(cpu, records_per_s, dict(leases or {}))

    def events(self) -> Iterator[apb.Grant | apb.Revoke | apb.GenerationChange]:
        """Grants, revokes and generation changes as they come; ends when the session is closed, raises
        SessionEndedError when the coordinator ends it."""
        assert self._call is not None, "join() first"
        try:
            for message in self._call:
                kind = message.WhichOneof("kind")
                if kind == "grant":
                    self._held[message.grant.lease_id] = message.grant
                    yield message.grant
                elif kind == "revoke":
                    if message.revoke.deadline_unix_ms == 0:
                        self._held.pop(message.revoke.lease_id, None)
                    yield message.revoke
                elif kind == "generation_change":
                    grant = self._held.get(message.generation_change.lease_id)
                    if grant is not None:
                        grant.generation_state = message.generation_change.state
                        grant.end_offset = message.generation_change.end_offset
                    yield message.generation_change
        except grpc.RpcError as err:
            if self._stop.is_set() and err.code() == grpc.StatusCode.CANCELLED:
                return
            self._stop.set()
            self._held.clear()
            cause = self._error(err)
            raise SessionEndedError(f"session {self.session_id} ended: {cause.message}", cause=cause) from err

    def release(self, lease_id: str, epoch: int) -> None:
        """Hand a lease back (after a revoke, once in-flight work is done)."""
        self._held.pop(lease_id, None)
        self._outbox.put(apb.WorkerMessage(release=apb.Release(lease_id=lease_id, epoch=epoch)))

    def check(self, lease_id: str, epoch: int) -> None:
        """Raise FencedError unless this lease is still held at `epoch` (before a side effect that must not
        happen twice)."""
        try:
            self._stub.CheckLease(
                apb.CheckLeaseRequest(group=self.group, lease_id=lease_id, epoch=epoch),
                timeout=10,
                metadata=self._client.metadata,
            )
        except grpc.RpcError as err:
            raise self._error(err) from err

    def close(self) -> None:
        """Leave the group: the coordinator frees every lease at once and regrants them to others."""
        self._stop.set()
        self._outbox.put(_CLOSE)
        if self._call is not None:
            self._call.cancel()
        self._client.close()

    def __enter__(self) -> WorkerSession:
        self.join()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
