"""The worker sessions a replica hosts: opening and resuming them, and what they share.

A session is one worker's stream on this replica. It reads its member's leases from the store (whichever replica
owns the group decides them), tells the worker what changed, and hands on what the worker sends: heartbeats
and releases, written with the replica's others by one writer (`writer`), looks batched by one reader
(`reader`). The host follows the topology log's head with one watch for all of them, and keeps where each
generation is, read once per topology change.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator

import structlog

from streamplane.clock import SYSTEM, Clock
from streamplane.coordinator import keys
from streamplane.coordinator.commitlog import log as commitlog
from streamplane.coordinator.groups import config as group_config
from streamplane.coordinator.groups import leases, window
from streamplane.coordinator.groups.leases import REVOKING, Lease, Member
from streamplane.coordinator.groups.sessions.reader import SessionReader
from streamplane.coordinator.groups.sessions.writer import SessionWriter
from streamplane.coordinator.groups.timing import AssignerConfig
from streamplane.coordinator.loop import BackgroundLoop
from streamplane.coordinator.store import Database, Transaction
from streamplane.coordinator.store.api import Watch, read_counter
from streamplane.coordinator.topology import events
from streamplane.errors import FencedError, StreamplaneError, UnavailableError
from streamplane.model import (
    Finished,
    Grant,
    Heartbeat,
    Release,
    Revoke,
    Sealed,
    SessionEvent,
    Subscription,
)

log = structlog.get_logger(__name__)

FOLLOW_CHECK_MS = 5000
"""How often the topology follower reads the head when its watch has not fired (a watch lost with its
connection is found again at the latest then)."""

PLACEMENTS_KEPT = 10_000
"""Generations whose placement a replica keeps decoded (the cache starts over past that)."""


class Session:
    """One worker's session on this replica."""

    def __init__(self, host: SessionHost, group: str, member: Member, where: str = "") -> None:
        self.host = host
        self.where = where
        """The group's record predicate, as the worker is told it in its welcome."""
        self.clock = host.clock
        self.group = group
        self.worker_id = member.worker_id
        self.session_id = member.session_id
        self._last_heard = self.clock.monotonic()
        self._failure: StreamplaneError | None = None
        self._closed = threading.Event()
        self._sent_grants: set[tuple[str, int]] = set()
        self._sent_revokes: dict[tuple[str, int], int] = {}  # (lease id, epoch): the deadline the worker was told
        self._sent_ends: dict[str, int] = {}  # lease: the end offset it was told (-1: not sealed yet)
        self._told_finished = False
        self._seen_versions: tuple[int, int] = (-1, -1)  # (member version, event head) of the last snapshot
        self._next_versions = self._seen_versions  # the versions of a look not yet told
        self._leases: leases.LeaseCache = {}  # the member's leases as last read
        self._written: tuple[float, float] | None = None  # (cpu, records/s) of the last heartbeat handed on
        self.on_change: Callable[[], None] = lambda: None
        """Called (from any thread) when the session ends on this replica's side: its stream wakes to say so."""

    @property
    def db(self) -> Database:
        return self.host.db

    def heartbeat(self, beat: Heartbeat) -> None:
        """Take the worker's heartbeat: checked now (bad input raises), and written with the replica's others
        only when it reports something new. That it came is kept here: this replica ends the session when its
        worker falls silent (`silent`), and the store keeps the member alive while this replica is registered
        (`leases.live_until`), so an idle fleet's heartbeats write nothing."""
        leases.check_heartbeat(beat)
        self._last_heard = self.clock.monotonic()
        figures = (beat.cpu, beat.records_per_s)
        if beat.leases or beat.errors or figures != self._written:
            self.host.writer.heartbeat(self.group, self.worker_id, self.session_id, beat, self.fail)
            self._written = figures

    def release(self, lid: str, epoch: int) -> None:
        """Hand one lease back (written with the replica's others, at once). A release that cannot apply (late,
        or of a lease this worker never held) concerns that lease only: it is logged and the session goes on;
        only an ended session ends it."""
        self._last_heard = self.clock.monotonic()
        self.host.writer.release(self.group, self.worker_id, self.session_id, Release(lid, epoch), self.fail)

    def fail(self, error: StreamplaneError, reason: str = "bad input") -> None:
        """End the session because the worker sent something wrong, its credential ran out, or the store says
        it ended (blocks on the store); its stream reports `error`, woken through `on_change`."""
        self._failure = error
        self.close(f"{reason}: {error.message}")
        self.on_change()

    def close(self, reason: str) -> None:
        """End the session and free its leases at once (idempotent; if the store cannot be reached, the session
        writer tries again until it can: while this replica lives, nobody else ends its sessions). While this
        coordinator stops, a stream that ends leaves its session as it is: the worker resumes it at the next
        coordinator (or it expires there after its TTL)."""
        if not self._closed.is_set():
            self._closed.set()
            if self.host.stopping:
                return
            self.host.writer.leave(self.group, self.worker_id, self.session_id, reason)

    @property
    def failure(self) -> StreamplaneError | None:
        """Why the session ended on this replica's side (bad input from its worker, or ended in the store)."""
        return self._failure

    @property
    def seen_topology_head(self) -> int:
        """The topology log's head at the last look told to the worker (-1 before the first)."""
        return self._seen_versions[1]

    def silent(self) -> bool:
        """Whether the worker sent nothing for longer than the session TTL."""
        return self.clock.monotonic() - self._last_heard > self.host.config.ttl_ms / 1000

    def expire(self) -> FencedError:
        """End the session for its silence; returns what its worker is told."""
        self.close("no heartbeat within the session TTL")
        ttl = self.host.config.ttl_ms
        return FencedError(f"session {self.session_id} ended: no heartbeat within {ttl} ms; its leases were revoked")

    def look(
        self, tr: Transaction
    ) -> tuple[tuple[Member | None, list[Lease], dict[str, Grant], dict[str, int], bool] | None, Watch]:
        """The member's leases, their end offsets and the grants not sent yet, with a watch of the member's
        version; None for the first when nothing changed since the last look."""
        member_key = keys.member_version_key(self.group, self.worker_id)
        versions = (read_counter(tr, member_key), events.head(tr))
        watch = tr.watch(member_key)
        if versions == self._seen_versions:
            return None, watch
        member, held = leases.read_member_leases(tr, self.group, self.worker_id, self._leases)
        ends = leases.end_offsets(tr, held)
        finished = window.session_view(tr, self.group, held, ends)
        grants: dict[str, Grant] = {}
        placements: dict[tuple[str, str, int], leases.Placement] = {}
        for lease in held:  # topology lookups only for new grants, once per generation
            if (lease.lease_id, lease.epoch) not in self._sent_grants:
                gen = (lease.stream, lease.lane, lease.generation)
                if gen not in placements:
                    placements[gen] = self.host.placement(tr, lease, versions[1])
                where = placements[gen]
                header = commitlog.read_header(tr, self.group, lease.key)
                grants[lease.lease_id] = Grant(
                    lease_id=lease.lease_id,
                    partition=lease.key,
                    epoch=lease.epoch,
                    topic=where.topic,
                    cluster=where.cluster,
                    bootstrap_servers=where.bootstrap_servers,
                    start_offset=header.low if header.updated_ms else -1,
                    end_offset=ends[lease.lease_id],
                    clean=bool(header.updated_ms) and header.done_above == 0 and header.retries == 0,
                    slice=lease.slice,
                )
        self._next_versions = versions
        return (member, held, grants, ends, finished), watch

    def tell(
        self, member: Member | None, held: list[Lease], grants: dict[str, Grant], ends: dict[str, int], finished: bool
    ) -> Iterator[SessionEvent]:
        """What changed since the last look, as the worker hears it."""
        if member is None or member.session_id != self.session_id:
            self._closed.set()
            # fail() records its error before it removes the member: report that cause, if it was one
            raise self._failure or FencedError(
                f"session {self.session_id} of worker {self.worker_id!r} has ended (expired or replaced); "
                "its leases were revoked"
            )
        self._seen_versions = self._next_versions
        now_held = {(lease.lease_id, lease.epoch) for lease in held}
        for lease in held:
            ident = (lease.lease_id, lease.epoch)
            end = ends[lease.lease_id]
            if ident not in self._sent_grants:
                self._sent_grants.add(ident)
                self._sent_ends[lease.lease_id] = end
                yield grants[lease.lease_id]
            elif end >= 0 > self._sent_ends.get(lease.lease_id, -1):
                self._sent_ends[lease.lease_id] = end
                yield Sealed(lease.lease_id, lease.key, end)
            # told again when a new owner moved its deadline (the holder's replica died with the old one)
            if lease.state == REVOKING and self._sent_revokes.get(ident) != lease.deadline_ms:
                self._sent_revokes[ident] = lease.deadline_ms
                yield Revoke(
                    lease.lease_id,
                    lease.epoch,
                    deadline_ms=lease.deadline_ms,
                    reason=f"moving to {lease.target}" if lease.target else "no longer assigned",
                )
        for lid, epoch in sorted(self._sent_grants - now_held):
            self._sent_grants.discard((lid, epoch))
            self._sent_ends.pop(lid, None)
            yield Revoke(lid, epoch, reason="lease is gone (released, moved after its deadline, or partition removed)")
            self._sent_revokes.pop((lid, epoch), None)
        if finished and not self._told_finished:
            self._told_finished = True
            yield Finished("the group's replay window is processed to its end")


class SessionHost:
    """The sessions of one coordinator replica (`replica_id`, the Assigner's), with their shared writer,
    reader and topology follower; `start` and `stop` them once each."""

    def __init__(
        self,
        db: Database,
        config: AssignerConfig | None = None,
        *,
        replica_id: str,
        clock: Clock = SYSTEM,
        new_session_id: Callable[[], str] = lambda: uuid.uuid4().hex[:12],
    ) -> None:
        self.db = db
        self.config = config or AssignerConfig()
        self.clock = clock
        self.replica_id = replica_id
        self._new_session_id = new_session_id
        self._stop = threading.Event()
        self.writer = SessionWriter(
            db, ttl_ms=self.config.ttl_ms, flush_ms=self.config.heartbeat_flush_ms, clock=clock, replica=replica_id
        )
        """Writes what the sessions' workers send, batched."""
        self.reader = SessionReader(db, clock)
        """Reads what the sessions look at, batched."""
        self._placements: dict[tuple[str, str, int], tuple[int, leases.Placement]] = {}
        self.topology_head = -1
        """The topology log's head as this replica's follower last read it (-1: not followed, so sessions
        look at the store at every heartbeat interval): sessions compare it with the head of their last look
        to learn of seals without a read."""
        self._follower = BackgroundLoop(
            "session-topology",
            self._follow_topology,
            interval_ms=FOLLOW_CHECK_MS,
            clock=clock,
            wake=lambda: db.transact(lambda tr: tr.watch(keys.EVENT_HEAD)),
        )

    def open_session(
        self,
        group: str,
        worker_id: str,
        subscriptions: list[Subscription],
        *,
        capacity: float,
        max_load: float,
        resume_session: str = "",
        principal: str = "",
        where: str = "",
        takes_slices: bool = False,
    ) -> Session:
        """A worker's session: a new one, or with `resume_session` the worker's live session of that id (its
        leases and epochs kept: its stream broke, not the worker)."""

        session_id = self._new_session_id()

        def join(tr: Transaction) -> tuple[Member | None, str]:  # the group's predicate, as join checked it
            member = leases.join(
                tr,
                group,
                worker_id,
                session_id,
                subscriptions,
                capacity=capacity,
                max_load=max_load,
                now_ms=self.clock.now_ms(),
                ttl_ms=self.config.ttl_ms,
                resume_session=resume_session,
                principal=principal,
                replica=self.replica_id,
                where=where,
                takes_slices=takes_slices,
            )
            return member, group_config.group_where(tr, group)

        member, group_where = self.db.transact(join)
        if member is None:
            raise UnavailableError(
                f"worker {worker_id!r}'s previous session still holds leases being freed; join again in a moment"
            )
        resumed = member.session_id == resume_session
        log.info(
            "session.resumed" if resumed else "session.opened", group=group, worker=worker_id, session=member.session_id
        )
        return Session(self, group, member, group_where)

    def placement(self, tr: Transaction, lease: Lease, topology_head: int) -> leases.Placement:
        """Where a lease's generation is, read once per topology change for all of this replica's sessions
        (a generation's topic and cluster are fixed, and a cluster's address changes only with an event):
        a fleet joining at once would otherwise decode its stream once per worker."""
        gen = (lease.stream, lease.lane, lease.generation)
        known = self._placements.get(gen)
        if known is not None and known[0] == topology_head:
            return known[1]
        where = leases.placement(tr, lease)
        if len(self._placements) >= PLACEMENTS_KEPT:
            self._placements.clear()
        self._placements[gen] = (topology_head, where)
        return where

    def check_lease(self, group: str, lid: str, epoch: int) -> Lease:
        return leases.check_lease(self.db, group, lid, epoch)

    def start(self) -> None:
        self.writer.start()
        self.reader.start()
        self._follower.start()

    @property
    def stopping(self) -> bool:
        """Whether this coordinator is stopping: a stream that ends then leaves its session as it is."""
        return self._stop.is_set()

    def stop(self) -> None:
        self._stop.set()
        self._follower.stop()
        self.topology_head = -1
        self.writer.stop()
        self.reader.stop()

    def _follow_topology(self) -> None:
        """Keep `topology_head` current (one pass of the follower: its watch of the head, taken before the
        read, starts the next as soon as the log moves): one watch for every session of this replica."""
        try:
            self.topology_head = events.head(self.db)
        except StreamplaneError:
            self.topology_head = -1  # not followed: sessions look at every heartbeat interval meanwhile
            raise
