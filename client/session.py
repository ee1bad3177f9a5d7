"""A worker's session with the Assigner: join a group, receive grants and revokes, release, report load.

    session = WorkerSession("127.0.0.1:7400", group="billing", worker_id="w1", subscriptions={"logs": []})
    session.join()
    for event in session.events():
        match event:
            case Grant(): ...start reading event.partition from event.topic...
            case Revoke(): ...finish in-flight work...; session.release(event.lease_id, event.epoch)
            case Sealed(): ...the partition ends at event.end_offset...
    session.close()

Heartbeats go out in the background at the interval the coordinator asks for, with the load `report_load`
set (lease loads and errors reported between two heartbeats go out together with the next one); when the
credential changes (a token file rotated, a callback renewed it), the new token goes out on the open stream
too. The session ends (SessionEndedError from `events`) when the coordinator ends it: after its TTL without
heartbeats, on bad input, or when its token expired without renewal.
"""

from __future__ import annotations

import dataclasses
import queue
import threading
from collections.abc import Iterator, Mapping, Sequence

from streamplane.client.background import start_thread
from streamplane.client.coordinator import CoordinatorClient, SessionCall
from streamplane.client.credentials import ClientTls, TokenSource
from streamplane.errors import FencedError, StreamplaneError
from streamplane.model import (
    ClusterErrors,
    Grant,
    Heartbeat,
    Hello,
    LeaseLoad,
    Release,
    Renew,
    Revoke,
    Sealed,
    SessionEvent,
    Subscription,
)

__all__ = ["Grant", "LeaseLoad", "Revoke", "Sealed", "SessionEndedError", "WorkerSession"]


class SessionEndedError(FencedError):
    """The coordinator ended the session; its leases are gone. `cause` is the status it gave."""

    def __init__(self, message: str, *, cause: StreamplaneError | None = None) -> None:
        super().__init__(message)
        self.cause = cause


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
        token, tls: the coordinator credential and TLS (default: found as `streamplane.client.credentials` says).
        where: the record predicate it filters with, as rendered (a group configured with one refuses another).
        hints: it reads `Expect` events too (grants on their way: a rewind is being applied), which `events`
            then yields; a worker that fetches with long polls shortens them until the grants come.
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
        token: TokenSource = None,
        tls: ClientTls | None = None,
        where: str = "",
        hints: bool = False,
    ) -> None:
        self._client = CoordinatorClient(coordinator, token=token, tls=tls)
        self.group, self.worker_id = group, worker_id
        self._hello = Hello(
            group,
            worker_id,
            tuple(Subscription(s, tuple(lanes)) for s, lanes in subscriptions.items()),
            capacity=capacity,
            max_load=max_load,
            where=where,
            takes_batches=True,
            takes_slices=True,
            takes_hints=hints,
        )
        self._outbox: queue.Queue[object] = queue.Queue()
        self._load = Heartbeat()
        self._load_lock = threading.Lock()  # a report and a heartbeat's taking of it never interleave
        self._held: dict[str, Grant] = {}
        self._call: SessionCall | None = None
        self._stop = threading.Event()
        self.session_id = ""
        self.group_where = ""
        """The group's record predicate, from the welcome ("" for none)."""
        self.heartbeat_interval_s = 0.25
        self._sent_token = ""  # the credential the coordinator knows this session by

    @property
    def leases(self) -> dict[str, Grant]:
        """The leases this worker holds now, by lease id (a sealed one with its end offset)."""
        return dict(self._held)

    def _requests(self) -> Iterator[Heartbeat | Release | Renew]:
        while True:
            item = self._outbox.get()
            if item is _CLOSE:
                return
            yield item  # type: ignore[misc]

    def join(self, timeout_s: float = 10.0, *, resume: str = "") -> None:
        """Open the session; raises the coordinator's error (unknown stream, duplicate worker id, ...). With
        `resume`, the session of that id is resumed while it lives (`session_id` then equals `resume`; the
        coordinator sends its grants again), and a new one opened otherwise."""
        self._hello = dataclasses.replace(self._hello, resume_session=resume)
        self._sent_token = self._client.credentials.token()
        self._call = self._client.open_session(self._hello, self._requests())
        welcome = self._call.welcome()
        self.session_id = welcome.session_id
        self.group_where = welcome.where
        self.heartbeat_interval_s = welcome.heartbeat_interval_ms / 1000 or 0.25
        start_thread(f"heartbeat-{self.worker_id}", self._heartbeats, self._heartbeats_crashed)

    def _heartbeats(self) -> None:
        while not self._stop.wait(self.heartbeat_interval_s):
            self._beat()

    def _beat(self) -> None:
        """One heartbeat: a new token first if the credential changed, then the load."""
        credentials = self._client.credentials
        if credentials.renewable and (token := credentials.token()) != self._sent_token:
            self._sent_token = token  # the open stream carries the new token: the session is renewed on it
            self._outbox.put(Renew(token))
        with self._load_lock:
            load = self._load
            if load.leases or load.errors:  # lease loads and errors go out once; later beats carry the totals
                self._load = Heartbeat(load.cpu, load.records_per_s)
        self._outbox.put(load)

    def _heartbeats_crashed(self, error: StreamplaneError) -> None:
        """Without heartbeats the session would lapse while looking alive here: end its stream now, so that
        `events` raises and the owner resumes the session (a new stream, a new heartbeat thread)."""
        self._outbox.put(_CLOSE)
        if self._call is not None:
            self._call.cancel()

    def report_load(
        self,
        *,
        cpu: float = 0.0,
        records_per_s: float = 0.0,
        leases: Mapping[str, LeaseLoad] | None = None,
        errors: Sequence[ClusterErrors] = (),
    ) -> None:
        """The load sent with the next heartbeats (the Assigner balances by it). Lease loads are sent once,
        with the next heartbeat: report only the leases whose load changed. `errors`: what fetches met per
        cluster since the last report (the coordinator's health monitor counts workers that see errors).

        Reports may come faster than heartbeats (a consumer reports every second, heartbeats go every two by
        default): what an earlier report left unsent is kept, a lease's latest load winning and errors adding
        up per cluster. A report that replaced it would lose a lease's load for good, its reporter counting it
        as told (a split's slices, last seen behind, then never merged back)."""
        with self._load_lock:
            self._load = self._load.merged(Heartbeat(cpu, records_per_s, tuple((leases or {}).items()), tuple(errors)))

    def events(self) -> Iterator[SessionEvent]:
        """Grants, revokes and seals (and `Expect` hints, with `hints`) as they come; ends when the session is
        closed, raises SessionEndedError when the coordinator ends it."""
        for batch in self.batches():
            yield from batch

    def batches(self) -> Iterator[list[SessionEvent]]:
        """The events as `events` gives them, one list per message the coordinator sent (a change's grants come
        together, so their holder can read what it needs for all of them at once)."""
        assert self._call is not None, "join() first"
        try:
            for batch in self._call.batches():
                for event in batch:
                    match event:
                        case Grant():
                            self._held[event.lease_id] = event
                        case Revoke(deadline_ms=0):
                            self._held.pop(event.lease_id, None)
                        case Sealed():
                            grant = self._held.get(event.lease_id)
                            if grant is not None:
                                self._held[event.lease_id] = dataclasses.replace(grant, end_offset=event.end_offset)
                yield batch
        except StreamplaneError as cause:
            self._stop.set()
            self._held.clear()
            raise SessionEndedError(f"session {self.session_id} ended: {cause.message}", cause=cause) from cause

    def release(self, lease_id: str, epoch: int) -> None:
        """Hand a lease back (after a revoke, once in-flight work is done). A release at an epoch other than the
        one held leaves the held lease in place (the coordinator refuses it too)."""
        held = self._held.get(lease_id)
        if held is not None and held.epoch == epoch:
            self._held.pop(lease_id, None)  # (the session's thread may have dropped it meanwhile)
        self._outbox.put(Release(lease_id, epoch))

    def check(self, lease_id: str, epoch: int) -> None:
        """Raise FencedError unless this lease is still held at `epoch` (before a side effect that must not
        happen twice)."""
        self._client.check_lease(self.group, lease_id, epoch)

    @property
    def resumed(self) -> bool:
        """This session continues the one named in `join(resume=...)`."""
        return bool(self._hello.resume_session) and self.session_id == self._hello.resume_session

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
