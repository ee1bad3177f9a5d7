"""The simulated world: the production domain code over an in-memory store with injected failures, workers,
producers and clusters, faults by seed, and the invariants checked as it runs (see the package's docstring)."""

from __future__ import annotations

import bisect
import json
import math
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, NoReturn, TypeVar

from streamplane import offsets
from streamplane.clock import ManualClock
from streamplane.coordinator import keys, planted
from streamplane.coordinator.commitlog import log as commitlog
from streamplane.coordinator.commitlog.service import CommitLog
from streamplane.coordinator.groups import config as group_config
from streamplane.coordinator.groups import leases, rewind, slices
from streamplane.coordinator.groups.assigner import Assigner
from streamplane.coordinator.groups.sessions.host import Session, SessionHost
from streamplane.coordinator.groups.timing import AssignerConfig
from streamplane.coordinator.loop import Schedule
from streamplane.coordinator.store.api import Watch, read_counter
from streamplane.coordinator.store.embedded import EmbeddedDatabase
from streamplane.coordinator.topology import events
from streamplane.coordinator.topology.records import get_stream, list_clusters
from streamplane.coordinator.topology.sealing import Sealer, SealingConfig
from streamplane.coordinator.topology.topology import Topology
from streamplane.errors import FencedError, StreamplaneError, UnavailableError
from streamplane.model import (
    ACTIVE,
    DRAINED,
    Cluster,
    ClusterRegistered,
    ClusterUpdated,
    Commit,
    FailedOver,
    Generation,
    GenerationDrained,
    GenerationSealed,
    Heartbeat,
    Lane,
    LaneAdded,
    PartitionRef,
    Reject,
    Retry,
    RewindTarget,
    RewindTo,
    Stream,
    StreamCreated,
    Subscription,
    parse_lease,
)
from streamplane.predicate import slice_hash
from streamplane.testing.chaos_store import ChaosDatabase, Faults
from streamplane.testing.cluster_admin import MemoryClusterAdmin

T = TypeVar("T")
STEP_MS = 100
GROUP, STREAM, LANE = "sim", "events", "realtime"
CLUSTERS = ("c1", "c2", "c3")
STORE_FAULTS = Faults(conflict=0.03, too_old=0.02, unknown_committed=0.03, unknown_lost=0.02)


FAULT_RATES = {  # per 100 ms step while faults run
    "crash": 0.004,
    "pause": 0.004,
    "cluster_down": 0.002,
    "clusters_up": 0.003,
    "failover": 0.002,
    "clock_jump": 0.001,
    "coordinator_restart": 0.001,
    "heartbeat_lost": 0.003,
    "producer_restart": 0.002,
    "rewind": 0.002,
    "split": 0.008,
}


@dataclass(frozen=True)
class Fault:
    """One fault of a run's schedule: when (ms after the start), what, and the draw that makes its choices."""

    at_ms: int
    kind: str
    pick: float


def schedule(seed: int, fault_s: int = 30) -> list[Fault]:
    """A seed's faults, drawn apart from everything else, so that a shrinker can drop some and keep the rest."""
    rng = random.Random(f"faults-{seed}")
    out = []
    for step in range(fault_s * 1000 // STEP_MS):
        x = rng.random()
        for kind, rate in FAULT_RATES.items():
            if x < rate:
                out.append(Fault(step * STEP_MS, kind, rng.random()))
                break
            x -= rate
    return out


@dataclass(frozen=True)
class _Read:
    """What a worker read of one lease, and the commit that says so."""

    lid: str
    epoch: int
    body: Commit
    upto: int
    poison: list[int]
    rejects: list[int]
    copying: list[int]
    cluster: str
    topic: str


@dataclass(frozen=True)
class _Late:
    """A message the network delivers a second time, later, after what was sent since (reordered): a commit
    (`read`), a release (`epoch`), or a heartbeat (neither)."""

    at_ms: int
    kind: str
    session: str
    lid: str = ""
    epoch: int = 0
    read: _Read | None = None


LATE_RATE = {"commit": 0.08, "release": 0.3, "heartbeat": 0.1}
"""How often, while the faults run, each kind of message is delivered again up to 8 s later."""


@dataclass
class _Loop:
    """A coordinator's background loop in simulated time: the production `Schedule` itself (its due times, its
    watch policy, its leadership check), ticked on the simulated clock instead of a thread."""

    schedule: Schedule
    watch: Watch | None = None

    def tick(self, world: World) -> None:
        fired = self.watch is not None and self.watch.wait(0)
        if not self.schedule.is_due(world.now, fired):
            return
        if self.watch is None or fired:  # one that has not fired still watches (the loop takes a new one per pass)
            self.watch = self.schedule.watch()
        self.schedule.run(lambda: world.now)


class InvariantError(AssertionError):
    """An invariant broke: what, and at which simulated millisecond."""


@dataclass
class Worker:
    name: str
    session: str = ""
    up: bool = True
    paused_until: int = 0
    down_until: int = 0
    beat_at: int = 0
    poll_at: int = 0
    """When it next reads and commits records (a consumer's poll)."""
    watch: Watch | None = None
    """Fires when its member's leases change: what makes its session tell it of grants and revokes."""
    alive_until: int = 0
    """Until when the coordinator may count its session as live: its last join or heartbeat plus the TTL (the
    replica serving it ends it then), or longer if that replica died (see `_serve_sessions`)."""
    stream: Session | None = None
    """Its session's stream to the replica serving it (None: broken, or never opened)."""
    held: dict[str, int] = field(default_factory=dict)
    """lease id: the epoch this worker believes it holds (stale while paused)."""
    position: dict[str, int] = field(default_factory=dict)
    late: list[_Late] = field(default_factory=list)
    """Messages the network delivers again, late: commits, releases and heartbeats."""
    retrying: dict[str, set[int]] = field(default_factory=dict)
    """Poison records it asked to retry, per lease: on its next pass it asks to write their dlq copies."""
    copied: dict[str, set[int]] = field(default_factory=dict)
    """Poison records whose dlq copy it wrote, per lease: it rejects them on its next pass."""
    skip: dict[str, set[int]] = field(default_factory=dict)
    """Per lease, offsets above the low watermark that were done, or had retry state, when it was granted: as
    the client, it does not hand them out as first attempts (the retry path has the latter)."""

    def forget(self, lid: str | None = None) -> None:
        """Drop what it knew of a lease (of every lease, with None, when its session ended)."""
        if lid is None:
            self.held, self.position, self.retrying, self.copied, self.skip = {}, {}, {}, {}, {}
            return
        for known in (self.held, self.position, self.retrying, self.copied, self.skip):
            known.pop(lid, None)


@dataclass
class Producer:
    name: str
    version: str = ""
    """The newest topology event this producer routes by."""
    generation: int = 1
    partitions: int = 0
    cluster: str = "c1"
    learns_at: int = 0
    """When it next reads the event log (producers hear of failovers late)."""


class World:
    """One seeded run."""

    def __init__(self, seed: int, *, partitions: int = 4, workers: int = 3) -> None:
        self.seed, self.rng = seed, random.Random(seed)
        self.clock = ManualClock(1_800_000_000_000)
        self.inner = EmbeddedDatabase(None)  # in memory: the transactions of the embedded store, without SQLite
        idempotent = planted.UNKNOWN_AS_FAILURE not in planted.active
        self.db = ChaosDatabase(self.inner, seed=seed, faults=STORE_FAULTS, idempotent=idempotent)
        self.admin = MemoryClusterAdmin()
        self.topology = Topology(self.db, self.admin, self.clock)
        self.commit_log = CommitLog(self.db, clock=self.clock)
        self.ttl_ms = 3000
        self._start_coordinator()
        for name in CLUSTERS:
            self.topology.register_cluster(_cluster(name))
        self.topology.create_stream(STREAM, partitions, "c1")
        self.start_version, self.partitions = events.head_version(self.db), partitions
        self.workers = [Worker(f"w{i}") for i in range(workers)]
        self.producers = [Producer(f"p{i}", self.start_version, 1, partitions) for i in range(2)]
        self.done: dict[str, set[int]] = {}
        """Reference model: per lease id, the offsets whose ack or reject was accepted..."""
        self.retried: dict[str, set[int]] = {}
        """... those sent as retries (pending until done) ..."""
        self.rejected: dict[str, set[int]] = {}
        """... and those rejected."""
        self.dlq: dict[tuple[str, int], dict[int, str]] = {}
        """The dlq copies written: per (lease id, offset), copy number: the session that wrote it."""
        self.prefix: dict[str, int] = {}
        """Per lease id, offsets below this are all done (see `_done_below`)."""
        self.reopened: set[tuple[str, int]] = set()
        """(lane, generation) a rewind sent the group back into: its workers read them, drained or not."""
        self.faults_until = 0
        self.stream, self.stream_watch = self._read_stream()
        self.appended: dict[tuple[str, str, int], list[tuple[int, int]]] = {}
        """(cluster, topic, partition): (end offset, when) of each append, for the records' ages."""
        self._checked_version = -1
        """The group's version when `_check_one_holder` last looked."""
        self.streams: list[Session] = []
        """The sessions the replicas serve (a crashed worker's until its silence ends it, as a hung host's)."""

    def _start_coordinator(self, replica: int | None = None) -> None:
        """Coordinator processes, with nothing in memory but their config: two Assigner replicas (one runs the
        group, the other stands by to take it over) and the sealer. With `replica`, only that one restarts, as a
        new process with a new replica id (its group, if it ran it, waits a TTL, then either replica takes it)."""
        config = AssignerConfig(ttl_ms=self.ttl_ms, heartbeat_interval_ms=500, revoke_ms=1000, rebalance_ms=500)

        def start(name: str) -> tuple[Assigner, SessionHost]:
            host = SessionHost(
                self.db, config, replica_id=name, clock=self.clock, new_session_id=lambda: self.rng.randbytes(6).hex()
            )
            return Assigner(self.db, config, replica_id=name, clock=self.clock), host

        if replica is None:
            (a, host_a), (b, host_b) = start("sim-a"), start("sim-b")
            self.assigners, self.hosts = [a, b], [host_a, host_b]
        else:
            self.assigners[replica], self.hosts[replica] = start(f"sim-{'ab'[replica]}-{self.now}")
        self.host = self.hosts[0]  # sessions may open on any replica
        self.sealer = Sealer(self.db, self.admin, lambda: True, SealingConfig(producer_ttl_ms=4000), clock=self.clock)
        self.loops = [*(_Loop(a.schedule) for a in self.assigners), _Loop(self.sealer.schedule)]

    def _start_producer(self, p: Producer) -> None:
        """As the client's Producer starts: open its session first (with no version, it holds back every seal),
        then describe the stream and route by its newest generation and version."""
        p.name = f"{p.name.split('.')[0]}.{self.now}"
        self.sealer.producer_heartbeat(p.name, "", [])
        gen = self._active()
        p.version, p.generation, p.partitions, p.cluster = (
            events.head_version(self.db),
            gen.number,
            gen.partitions,
            gen.cluster,
        )

    @property
    def now(self) -> int:
        return self.clock.now_ms()

    def fail(self, what: str) -> NoReturn:
        raise InvariantError(f"seed {self.seed} at +{(self.now - 1_800_000_000_000) / 1000:.1f} s: {what}")

    # -- the run
    def run(self, faults: list[Fault], fault_s: int = 30, quiet_s: int = 30) -> None:
        start = self.now
        self.faults_until = start + fault_s * 1000
        end = self.faults_until + quiet_s * 1000
        due = sorted(faults, key=lambda f: f.at_ms, reverse=True)
        while self.now < end:
            while due and due[-1].at_ms <= self.now - start:
                self._inject(due.pop())
            if self.now >= self.faults_until and self.admin.down:
                self.admin.down.clear()  # the faults are over: every cluster is back
            self._produce()
            for loop in self.loops[:2]:  # the Assigner replicas
                loop.tick(self)
            self._serve_sessions()
            self.loops[2].tick(self)  # the sealer
            if self.stream_watch.wait(0):  # the topology changed: what workers see from now on
                self.stream, self.stream_watch = self._read_stream()
            for w in self.workers:
                self._work(w)
            self._check_one_holder()
            self.clock.advance(STEP_MS)
        self._check_quiesced()

    def _watch(self, key: bytes) -> Watch:
        return self.inner.transact(lambda tr: tr.watch(key))

    def _read_stream(self) -> tuple[Stream, Watch]:
        return self.inner.transact(lambda tr: (get_stream(tr, STREAM), tr.watch(keys.EVENT_HEAD)))

    def _inject(self, fault: Fault) -> None:
        pick = random.Random(fault.pick)  # the fault's own choices, the same whatever else was removed
        match fault.kind:
            case "crash":  # a worker is killed (-9): its session ends by TTL, its memory is gone
                w = pick.choice(self.workers)
                w.up, w.down_until, w.session, w.stream = False, self.now + pick.randrange(500, 4000), "", None
                w.forget()
                w.watch = None  # what it sent may still arrive: the network keeps its late copies
            case "pause":  # a worker pauses (GC, VM), then resumes believing it still holds its leases
                pick.choice(self.workers).paused_until = self.now + pick.randrange(1000, 6000)
            case "cluster_down":  # the active cluster is down for a while
                self.admin.down.add(self._active().cluster)
            case "clusters_up":
                self.admin.down.clear()
            case "failover":  # fail the lane over, sometimes with more partitions
                gen = self._active()
                target = pick.choice([c for c in CLUSTERS if c != gen.cluster])
                grow = pick.choice([0, 0, gen.partitions + 2])
                self._change(partial(self.topology.failover, STREAM, LANE, target, grow, reason="sim"))
            case "clock_jump":
                self.clock.advance(pick.randrange(500, 2500))
            case "coordinator_restart":  # a replica's process restarts (or both): nothing survives but the store;
                # each worker resumes its session at a replica that runs, keeping its leases within the TTL
                for replica in (0, 1) if pick.random() < 0.3 else (pick.randrange(2),):
                    self._start_coordinator(replica)
            case "heartbeat_lost":
                pick.choice(self.workers).beat_at = self.now + 500
            case "producer_restart":  # a new session (holding seals back) before its route
                self._start_producer(pick.choice(self.producers))
            case "rewind":  # an operator sends the group back on one partition, to an offset it had done
                self._rewind(pick)
            case "split":  # an operator splits a partition of the active generation into slices, or merges it
                gen = self._active()
                part = PartitionRef(STREAM, LANE, gen.number, pick.randrange(gen.partitions)).lease_id
                try:
                    group_config.configure(self.db, GROUP, split=(part, pick.choice([1, 2, 2, 3])))
                except UnavailableError:
                    return
                except StreamplaneError as err:
                    self.fail(f"a split of {part}: {type(err).__name__}: {err.message}")

    def _rewind(self, pick: random.Random) -> None:
        """`group rewind --to-offsets` on one partition with progress, applied on the store itself (an operator's
        call, not a worker's); the reference model forgets what the commit log forgets."""
        started = sorted(lid for lid, done in self.done.items() if done)
        if not started:
            return
        lid = pick.choice(started)
        ref = leases.parse_lease_id(lid)
        to = pick.randrange(0, self._done_below(lid) + 1)
        target = RewindTarget(RewindTo.OFFSETS, offsets={ref: to})
        try:
            planned = rewind.plan(self.inner, self.admin, GROUP, STREAM, target, now_ms=self.now)
            if planned.lost:
                return  # its cluster is down: an operator would not force it
            rewind.apply(self.inner, planned, actor="sim", now_ms=self.now)
        except StreamplaneError:
            return
        self.reopened.update((p.partition.lane, p.partition.generation) for p in planned.positions)
        for model in (self.done, self.rejected, self.retried):
            model[lid] = {o for o in model.get(lid, set()) if o < to}
        self.prefix[lid] = min(self.prefix.get(lid, 0), to)
        for key in [k for k in self.dlq if k[0] == lid and k[1] >= to]:
            del self.dlq[key]  # their copies stay in the dlq lane; copies of what is rejected again are new

    def _active(self) -> Generation:
        return get_stream(self.inner, STREAM).require_lane(LANE).active

    def _change(self, call: Callable[[], T]) -> T | None:
        """A domain change whose only acceptable error is a cluster being down (the caller tries later)."""
        try:
            return call()
        except UnavailableError:
            return None  # a cluster is down: the caller tries again later
        except StreamplaneError as err:
            self.fail(f"{type(err).__name__}: {err.message}")

    # -- producers
    def _produce(self) -> None:
        for p in self.producers:
            if self.now >= p.learns_at:  # read the log from its version: a failover moves it
                p.learns_at = self.now + self.rng.randrange(200, 3000)
                after = events.parse_version(p.version)
                for event in events.read_events(self.inner, after):
                    p.version = event.version
                    if isinstance(event, FailedOver) and event.lane == LANE:
                        p.generation, p.partitions = event.current.number, event.current.partitions
                        p.cluster = event.current.cluster
                self.sealer.producer_heartbeat(p.name, p.version, [])
            if self.now >= self.faults_until + 10_000 or p.cluster in self.admin.down:
                continue  # the last 20 s are quiet: everything written is in; a down cluster takes nothing
            topic = f"sp.{STREAM}.{LANE}.g{p.generation}"
            partition = self.rng.randrange(p.partitions)
            self.admin.append(p.cluster, topic, partition, self.rng.randrange(1, 6), ts_ms=self.now)
            end = self.admin.topics[(p.cluster, topic)][partition]
            self.appended.setdefault((p.cluster, topic, partition), []).append((end, self.now))

    def _written_ms(self, cluster: str, topic: str, partition: int, offset: int) -> int:
        """When the record at `offset` was written."""
        appends = self.appended[(cluster, topic, partition)]
        return appends[bisect.bisect_right(appends, (offset, math.inf))][1]

    # -- workers
    def _serve_sessions(self) -> None:
        """What each replica's session hub does: end a session whose worker fell silent past the TTL. A session
        of a replica that restarted lost its stream with that process; its worker resumes it elsewhere."""
        for session in list(self.streams):
            if session.host not in self.hosts:
                self.streams.remove(session)
                for w in self.workers:  # its member lives until the replica's registration lapses, and the
                    # group's next owner ends no session within a TTL of taking it over
                    if w.name == session.worker_id:
                        w.alive_until = max(w.alive_until, self.now + 2 * self.ttl_ms + 500)
            elif session.silent():
                self.streams.remove(session)
                self._change(session.expire)
        for w in self.workers:
            if w.stream is not None and w.stream not in self.streams:
                w.stream = None

    def _open(self, w: Worker) -> Session | None:
        """Open the worker's session at a replica, or resume the one it has (None: its crashed session is still
        live; the worker tries again later). A session that ended meanwhile is replaced: the worker starts over."""
        try:
            session = self.host.open_session(
                GROUP,
                w.name,
                [Subscription(STREAM)],
                capacity=1.0,
                max_load=0.0,
                resume_session=w.session,
                takes_slices=True,
            )
        except StreamplaneError as err:
            if "live session" in err.message and self.now < w.alive_until:
                return None  # its crashed session has not expired yet
            self.fail(f"join of {w.name}: {type(err).__name__}: {err.message}")
        if session.session_id != w.session:
            w.forget()
            w.session, w.watch = session.session_id, None
        w.alive_until = self.now + self.ttl_ms + STEP_MS
        self.streams.append(session)
        return session

    def _work(self, w: Worker) -> None:
        if not w.up:
            if self.now >= w.down_until:
                w.up = True
            return
        if self.now < w.paused_until:
            return
        if self.now >= w.poll_at:
            w.poll_at = self.now + self.rng.randrange(2, 6) * STEP_MS
            self._process(w, list(w.held.items()))  # a zombie first finishes what it believes it holds
        self._deliver_late(w)
        if w.stream is None:
            w.stream = self._open(w)
            if w.stream is None:
                return
        if self.now >= w.beat_at:
            w.beat_at = self.now + 500
            w.stream.heartbeat(Heartbeat())
            if isinstance(w.stream.failure, FencedError):  # its session ended while it was away: join again
                w.forget()
                w.session, w.stream = "", None
                return
            self._maybe_late(w, _Late(0, "heartbeat", w.session))
            w.alive_until = max(w.alive_until, self.now + self.ttl_ms + STEP_MS)  # the hub looks every step
        if w.watch is None or w.watch.wait(0):
            self._sync(w)

    def _maybe_late(self, w: Worker, message: _Late) -> None:
        """While the faults run, the network may deliver `message` again, up to 8 s later."""
        if self.now < self.faults_until and self.rng.random() < LATE_RATE[message.kind]:
            w.late.append(replace(message, at_ms=self.now + self.rng.randrange(0, 8000)))

    def _deliver_late(self, w: Worker) -> None:
        """Deliver the messages whose second copy is due. Whatever happened since, none may change anything: a
        commit is refused (its epoch is stale) or changes nothing; a release does not touch the lease granted
        since; a heartbeat of a session that ended does not touch the worker's member."""
        due = [x for x in w.late if x.at_ms <= self.now]
        w.late = [x for x in w.late if x.at_ms > self.now]
        for message in due:
            match message.kind:
                case "commit":
                    self._late_commit(w, message)
                case "release":
                    self._late_release(w, message)
                case "heartbeat":
                    self._late_heartbeat(w, message)

    def _late_commit(self, w: Worker, message: _Late) -> None:
        assert message.read is not None
        r = message.read
        try:
            self.commit_log.commit(GROUP, r.lid, r.epoch, r.body)
        except (FencedError, UnavailableError):
            return  # the lease moved on (a stale epoch), or the store is away: nothing changed
        if w.held.get(r.lid) == r.epoch and w.session == message.session:
            self._check_commits(w, [r])  # accepted: the commit log still holds exactly what was committed
        else:
            self._check_commit_log(r.lid, self._progress(r.lid))

    def _late_release(self, w: Worker, message: _Late) -> None:
        lid, epoch = message.lid, message.epoch
        before = leases.read_lease_id(self.inner, GROUP, lid)
        try:
            leases.release(self.db, GROUP, w.name, message.session, lid, epoch, now_ms=self.now)
        except (FencedError, UnavailableError):
            return  # its session has ended since (refused whole), or the store is away: nothing changed
        after = leases.read_lease_id(self.inner, GROUP, lid)
        if before is not None and before.epoch != epoch and after != before:
            self.fail(f"a late release of {lid} at epoch {epoch} changed the lease held at epoch {before.epoch}")

    def _late_heartbeat(self, w: Worker, message: _Late) -> None:
        member_key = keys.member_key(GROUP, w.name)
        before = self.inner.transact(lambda tr: tr.get(member_key))
        if before is None or json.loads(before)["session_id"] == message.session:
            return  # its session is still the worker's: a late heartbeat of a live session is an early one's twin
        try:
            leases.heartbeat(
                self.db, GROUP, w.name, message.session, Heartbeat(cpu=0.5), now_ms=self.now, ttl_ms=self.ttl_ms
            )
        except (FencedError, UnavailableError):
            return
        if self.inner.transact(lambda tr: tr.get(member_key)) != before:
            self.fail(f"a late heartbeat of ended session {message.session} of {w.name} changed its next session")

    def _progress(self, lid: str) -> commitlog.Progress:
        return self.inner.transact(lambda tr: commitlog.progress(tr, GROUP, lid, max_ranges=100_000))

    def _sync(self, w: Worker) -> None:
        """Learn the leases held now (a session's grants and revokes); hand back the revoked ones."""
        if w.watch is not None:
            w.watch.cancel()
        (member, held), w.watch = self.inner.transact(
            lambda tr: (leases.read_member_leases(tr, GROUP, w.name), tr.watch(keys.member_version_key(GROUP, w.name)))
        )
        if member is None or member.session_id != w.session:
            w.forget()
            w.session = ""
            return
        now = {x.lease_id: x for x in held}
        for lid in [lid for lid in w.held if lid not in now or now[lid].epoch != w.held[lid]]:
            w.forget(lid)
        for lid, lease in now.items():
            if lid not in w.held:  # granted: start where the commit log says, as the client does
                progress = self._progress(lid)
                w.held[lid], w.position[lid] = lease.epoch, progress.header.low
                w.skip[lid] = {o for a, b in progress.done for o in range(a, b)} | set(progress.retrying)
                w.retrying[lid] = set(progress.retrying)  # due again: a poison record's copy is asked for next
            if lease.state == leases.REVOKING:
                self._process(w, [(lid, lease.epoch)])
                self._change(
                    partial(leases.release, self.db, GROUP, w.name, w.session, lid, lease.epoch, now_ms=self.now)
                )
                self._maybe_late(w, _Late(0, "release", w.session, lid, lease.epoch))
                w.forget(lid)

    def _process(self, w: Worker, held: Iterable[tuple[str, int]]) -> None:
        """Read what is there for each lease (up to a sealed end) and commit it as done in one call, each fenced
        by its epoch, as the client's batched commit does. A poison record is retried once; then its dlq copy
        is asked for (the commit log numbers it) and written; then it is rejected."""
        reads = [r for lid, epoch in held if (r := self._read(w, lid, epoch)) is not None]
        if not reads:
            return
        outcomes = self.commit_log.commit_many(GROUP, [(r.lid, r.epoch, r.body) for r in reads])
        accepted = []
        for r, outcome in zip(reads, outcomes, strict=True):
            if isinstance(outcome.error, FencedError):  # a zombie, or a lease that moved: drop it
                w.forget(r.lid)
                continue
            if outcome.error is not None:
                self.fail(f"a commit of {r.lid} failed: {type(outcome.error).__name__}: {outcome.error.message}")
            granted = {c.offset: c.copy for c in outcome.copies}
            for offset, number in granted.items():
                self._write_dlq_copy(w, r.lid, offset, number)
            w.position[r.lid] = r.upto
            w.copied[r.lid] = set(granted)
            w.retrying[r.lid] = {o for o in (*r.copying, *r.poison) if o not in granted}
            part = _part(r.lid)  # the reference model is per partition: its slices share its progress
            self.done.setdefault(part, set()).update(o for a, b in r.body.acked for o in range(a, b))
            self.done[part].update(r.rejects)
            self.rejected.setdefault(part, set()).update(r.rejects)
            self.retried.setdefault(part, set()).update(r.poison)
            accepted.append(r)
        self._check_commits(w, accepted)
        for r in accepted:
            self._maybe_late(w, _Late(0, "commit", w.session, r.lid, r.epoch, r))

    def _write_dlq_copy(self, w: Worker, lid: str, offset: int, number: int) -> None:
        """Write the dlq copy the commit log granted: each copy number of a record is one holder's to write."""
        writers = self.dlq.setdefault((_part(lid), offset), {})
        if writers.setdefault(number, w.session) != w.session:
            self.fail(f"dlq copy {number} of {lid}@{offset} was granted to two holders: {writers[number]}, {w.session}")

    def _read(self, w: Worker, lid: str, epoch: int) -> _Read | None:
        """What the worker read of a lease since its last commit, and the commit that says so (None: nothing)."""
        stream, lane, number, partition = leases.parse_lease_id(lid)
        topic = f"sp.{stream}.{lane}.g{number}"
        found = self.stream.lane(lane)
        gen = found.generation(number) if found else None
        if gen is None or (gen.state == DRAINED and (lane, number) not in self.reopened):
            return None  # a drained generation is read only when a rewind reopened it for the group
        cluster_ends = self.admin.topics.get((gen.cluster, topic))
        if gen.cluster in self.admin.down or cluster_ends is None:
            return None
        end = cluster_ends[partition] if not gen.end_offsets else gen.end_offsets[partition]
        start = w.position.get(lid, 0)
        upto = min(end, start + self.rng.randrange(1, 40))
        copying = sorted(w.retrying.get(lid, ()))  # poison records retried on an earlier pass: their copy next
        rejects = sorted(w.copied.get(lid, ()))  # poison records copied to the dlq: now rejected
        if upto <= start and not rejects and not copying:
            return None
        skip = w.skip.get(lid, set())
        piece = parse_lease(lid)[1]  # a slice holder handles its slice's records only; the others are not its own
        read = [
            o
            for o in range(start, max(start, upto))
            if o not in skip and (piece is None or piece.lo <= slice_hash(None, o) < piece.hi)
        ]
        poison = [o for o in read if _poison(number, partition, o)]
        pending = min([*poison, *copying, max(start, upto)]) if poison or copying or upto < end else None
        body = Commit(
            acked=offsets.to_ranges(o for o in read if o not in poison),
            retries=[Retry(o, 1, "poison") for o in poison],
            rejects=[Reject(o, "poison, again") for o in rejects],
            copying=[Reject(o, "poison, again") for o in copying],
            high_watermark=end,
            high_watermark_ts_ms=self._written_ms(gen.cluster, topic, partition, end - 1) if end else 0,
            oldest_pending_ts_ms=0 if pending is None else self._written_ms(gen.cluster, topic, partition, pending),
        )
        return _Read(lid, epoch, body, max(start, upto), poison, rejects, copying, gen.cluster, topic)

    def _low(self, ref: PartitionRef) -> int:
        return self.inner.transact(lambda tr: commitlog.read_header(tr, GROUP, ref).low)

    # -- invariants
    def _check_commits(self, w: Worker, accepted: list[_Read]) -> None:
        """After commits were accepted: their sender holds each lease at its epoch, the commit log holds what the
        reference model holds, and its time lag is not less than the age of the oldest record not processed.
        One read of the store for all of them."""
        if not accepted:
            return
        stored = self.inner.transact(
            lambda tr: [
                (
                    leases.read_lease_id(tr, GROUP, r.lid),
                    commitlog.progress(tr, GROUP, r.lid, max_ranges=100_000),
                )
                for r in accepted
            ]
        )
        for r, (lease, progress) in zip(accepted, stored, strict=True):
            if lease is None or lease.epoch != r.epoch or lease.worker_id != w.name:
                self.fail(f"a commit of {r.lid} by {w.name} at epoch {r.epoch} was accepted; the lease is at {lease}")
            self._check_commit_log(r.lid, progress)
            self._check_time_lag(r.lid, progress.header, r.cluster, r.topic)

    def _check_one_holder(self) -> None:
        """Every offset has one live holder at most: a partition is held whole or in the slices of one split,
        never both, and no worker holds two slices of one partition. Looked at again whenever a lease changed
        (every change bumps the group's version)."""

        def read(tr: Any) -> tuple[int, list[leases.Lease], dict[PartitionRef, list[leases.Lease]]]:
            version = read_counter(tr, keys.group_version_key(GROUP))
            if version == self._checked_version:
                return version, [], {}
            return version, list(leases.read_leases(tr, GROUP).values()), slices.stored(tr, GROUP)

        self._checked_version, whole, split = self.inner.transact(read)
        held = {x.key for x in whole if x.state != leases.FREE}
        for ref, pieces in split.items():
            live = [x for x in pieces if x.state != leases.FREE]
            if live and ref in held:
                self.fail(f"{ref.lease_id} is held whole and in slices at once: {[x.lease_id for x in live]}")
            if len({x.slices for x in live}) > 1:
                self.fail(f"{ref.lease_id} has slices of two splits held at once: {[x.lease_id for x in live]}")
            holders = [x.worker_id for x in live]
            if len(holders) != len(set(holders)):
                self.fail(f"a worker holds two slices of {ref.lease_id}: {[(x.lease_id, x.worker_id) for x in live]}")

    def _done_below(self, lid: str) -> int:
        """The first offset of `lid`'s partition the reference model does not hold as done (kept, as it only
        grows)."""
        lid = _part(lid)
        done, below = self.done[lid], self.prefix.get(lid, 0)
        while below in done:
            below += 1
        self.prefix[lid] = below
        return below

    def _check_commit_log(self, lid: str, progress: commitlog.Progress) -> None:
        """The stored offsets (all below the header's low, and the done ranges above it) are exactly the reference
        model's; its retry and reject counts are those pending and rejected."""
        lid = _part(lid)
        done, low = self.done[lid], progress.header.low
        above = [(a, b) for a, b in progress.done if b > low]
        stored = low + sum(b - max(a, low) for a, b in above)
        missing_range = next(((a, b) for a, b in above if any(o not in done for o in range(max(a, low), b))), None)
        if self._done_below(lid) < low or missing_range is not None or stored != len(done):
            stored_set = set(range(low)) | {o for a, b in progress.done for o in range(a, b)}
            missing, extra = sorted(done - stored_set)[:5], sorted(stored_set - done)[:5]
            self.fail(f"the commit log of {lid} differs from what was committed: missing {missing}, extra {extra}")
        pending = self.retried.get(lid, set()) - done
        rejected = self.rejected.get(lid, set())
        if (progress.header.retries, progress.header.rejects) != (len(pending), len(rejected)):
            self.fail(
                f"the commit log of {lid} counts {progress.header.retries} retries and {progress.header.rejects} "
                f"rejects; {len(pending)} retries are pending and {len(rejected)} were rejected"
            )

    def _check_time_lag(self, lid: str, header: commitlog.Header, cluster: str, topic: str) -> None:
        """The time lag the commit log reports is never less than the age of the oldest record it knows of (below
        its high watermark) that was not processed."""
        done = self.done.get(_part(lid), set())
        oldest = next((o for o in range(header.low, header.high) if o not in done), None)
        if oldest is None:
            return
        if commitlog.UNKNOWN in header.slice_pending.values():
            return  # a slice of a partition split before any commit has said nothing yet: its holder's first
            # commit (one commit interval later) says how far behind it is; until then nothing bounds it
        age = self.now - self._written_ms(cluster, topic, leases.parse_lease_id(lid)[3], oldest)
        if header.time_lag_ms(self.now) < age:
            self.fail(
                f"{lid} reports a time lag of {header.time_lag_ms(self.now)} ms, but record {oldest}, written "
                f"{age} ms ago, is not processed"
            )

    def _check_replay(self) -> None:
        """The topology log, replayed from the start, rebuilds the stored clusters and streams."""
        clusters: dict[str, Cluster] = {}
        lanes: dict[tuple[str, str], Lane] = {}
        for event in events.read_events(self.inner, None, limit=1_000_000):
            match event:
                case ClusterRegistered(cluster=c) | ClusterUpdated(cluster=c):
                    clusters[c.name] = c
                case StreamCreated(stream=s):
                    lanes.update({(s.name, lane.name): lane for lane in s.lanes})
                case LaneAdded(stream=s, lane=lane):
                    lanes[(s, lane.name)] = lane
                case FailedOver(stream=s, lane=name, previous=prev, current=cur):
                    lanes[(s, name)] = _with(_with(lanes[(s, name)], prev), cur)
                case (
                    GenerationSealed(stream=s, lane=name, generation=g)
                    | GenerationDrained(stream=s, lane=name, generation=g)
                ):
                    lanes[(s, name)] = _with(lanes[(s, name)], g)
        stored = {(STREAM, lane.name): lane for lane in get_stream(self.inner, STREAM).lanes}
        if {c.name: c for c in list_clusters(self.inner)} != clusters or stored != lanes:
            self.fail("replaying the event log does not rebuild the stored topology")

    def _check_quiesced(self) -> None:
        self._check_replay()
        lane = get_stream(self.inner, STREAM).require_lane(LANE)
        for gen in lane.generations:
            written = self.admin.topics.get((gen.cluster, gen.topic), [])
            if gen.state != ACTIVE and gen.end_offsets != written:
                self.fail(
                    f"g{gen.number} is {gen.state} with end offsets {gen.end_offsets}, but {written} were written"
                )
            for p, end in enumerate(written):
                low = self._low(PartitionRef(STREAM, LANE, gen.number, p))
                if low < end:
                    self.fail(f"g{gen.number}/p{p}: records {low}..{end} were written and never processed")
            if gen is not lane.active and gen.state != DRAINED:
                self.fail(f"g{gen.number} is still {gen.state} after the faults stopped")
        for lid, rejected in self.rejected.items():
            if uncopied := sorted(o for o in rejected if (lid, o) not in self.dlq):
                self.fail(f"{lid}: records {uncopied[:5]} were rejected and never copied to the dlq")

    def close(self) -> None:
        self.inner.close()


def _part(lid: str) -> str:
    """The partition a lease id is of (a slice's: the partition it is a slice of)."""
    return parse_lease(lid)[0].lease_id


def _poison(generation: int, partition: int, offset: int) -> bool:
    """About one record in 23 fails its handler: retried once, then rejected."""
    return (offset * 7919 + partition * 31 + generation) % 23 == 0


def _with(lane: Lane, gen: Generation) -> Lane:
    """The lane with `gen` in place of its generation of that number, or added (kept in number order)."""
    kept = [g for g in lane.generations if g.number != gen.number]
    return replace(lane, generations=sorted([*kept, gen], key=lambda g: g.number))


def _cluster(name: str) -> Cluster:
    return Cluster(name, f"{name}:9092")
