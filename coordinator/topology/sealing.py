"""Producer sessions, and the life of a generation after a failover: draining -> sealed -> drained.

A failover leaves generation g draining: producers may still hold records for it. g is *sealed* once no live
producer can write to it again: every producer session routes by a topology version that includes the
failover and has nothing in flight to g (a session that stops heartbeating expires and no longer counts).
Sealing reads g's end offsets from its cluster and commits them with a `generation_sealed` event in one
transaction. g is *drained* once every group with leases on it has processed it to those end offsets (a
generation no group has read stays sealed, for groups still to come); the Assigner then stops handing out its
partitions.

Producers that write without a session (other Kafka clients) are invisible here: for them a seal may come
before their last write, which consumers will then not read. Route every producer through streamplane.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import structlog

from streamplane.clock import SYSTEM, Clock
from streamplane.coordinator import keys, planted
from streamplane.coordinator.commitlog import log as commitlog
from streamplane.coordinator.groups import leases, rewind, window
from streamplane.coordinator.loop import BackgroundLoop, Schedule
from streamplane.coordinator.store import Database, Transaction, transactional
from streamplane.coordinator.topology import events, health
from streamplane.coordinator.topology.cluster_admin import ClusterAdmin
from streamplane.coordinator.topology.records import UNDECODABLE, decoded_generation, get_cluster, write_generation
from streamplane.errors import InvalidArgumentError, StreamplaneError
from streamplane.model import (
    DRAINED,
    DRAINING,
    SEALED,
    ClusterErrors,
    Generation,
    GenerationDrained,
    GenerationSealed,
    PartitionRef,
)
from streamplane.names import check_lane_name, check_object_name

log = structlog.get_logger(__name__)

GenerationKey = tuple[str, str, int]  # (stream, lane, generation)


@dataclass(frozen=True)
class SealingConfig:
    """Timing of producer sessions and of the sealing loop."""

    producer_ttl_ms: int = 10_000
    """A producer session silent this long no longer holds back seals."""
    producer_heartbeat_ms: int = 1_000
    """How often producers are asked to heartbeat."""
    loop_ms: int = 200
    """How often the leader looks for generations to seal or mark drained while some are draining or sealed."""
    idle_ms: int = 10_000
    """How often it looks while none are: a failover (a topology event) wakes it at once."""


END_OFFSETS_BACKOFF_MS = (1_000, 10_000)
"""First and longest wait before the end offsets of a cluster that did not answer are asked again. A try on a
dead cluster can last the admin's whole timeout, and every stream failed over from it has a generation to seal
there: asked at every pass, one dead cluster held up the seals of all the others."""


@dataclass(frozen=True)
class ProducerSession:
    producer_id: str
    topology_version: str
    in_flight: list[GenerationKey] = field(default_factory=list)
    alive_until_ms: int = 0
    principal: str = ""
    """Who opened the session: only they renew or close it."""
    errors: list[list[Any]] = field(default_factory=list)
    """[cluster, count, last error, at ms]: what it saw of clusters since its previous heartbeat."""
    streams: list[str] | None = None
    """The streams it may write to: those it routes to, or (a client that does not say) its token's scope;
    None for every stream. It holds back no other stream's seal."""

    def holds_back(self, gen: GenerationKey, wait_version: str) -> bool:
        """Whether this producer may still write records to `gen` (seal waits for it)."""
        if planted.EARLY_SEAL in planted.active:
            return False
        if self.streams is not None and gen[0] not in self.streams:
            return False
        return self.topology_version < wait_version or gen in self.in_flight


def _check_version(text: str) -> str:
    events.parse_version(text, "topology_version")
    return text


# -- producer sessions -------------------------------------------------------------------------------------


@transactional
def producer_heartbeat(
    tr: Transaction,
    producer_id: str,
    topology_version: str,
    in_flight: list[GenerationKey],
    *,
    now_ms: int,
    ttl_ms: int,
    principal: str = "",
    errors: list[ClusterErrors] | None = None,
    streams: list[str] | None = None,
) -> str:
    """Open or renew a producer session; return the newest event version (producers with no routes adopt it).
    Only the principal that opened a session renews it. `streams`: those it may write (see ProducerSession)."""
    leases.check_worker_id(producer_id, "producer_id")
    _check_version(topology_version)
    if len(in_flight) > 10_000:
        raise InvalidArgumentError(f"in_flight lists {len(in_flight)} generations; the limit is 10000")
    for stream, lane, number in in_flight:
        check_object_name("in_flight.stream", stream)
        check_lane_name("in_flight.lane", lane)
        if number < 1:
            raise InvalidArgumentError(f"in_flight.generation must be at least 1, not {number}")
    _check_owner(tr, producer_id, principal)
    reported = health.stored_reports(errors or [], now_ms, "errors")
    if streams is not None:
        streams = sorted(set(streams) | {g[0] for g in in_flight})
    session = ProducerSession(
        producer_id, topology_version, sorted(set(in_flight)), now_ms + ttl_ms, principal, reported, streams
    )
    tr.set(keys.producer_key(producer_id), json.dumps(asdict(session)).encode())
    seen = [r for r in reported if r[1] > 0]
    if seen:  # kept apart, and only while there are errors: the health monitor reads these, not every session
        tr.set(keys.producer_errors_key(producer_id), json.dumps(seen).encode())
    else:
        tr.clear(keys.producer_errors_key(producer_id))
    return events.head_version(tr)


@transactional
def close_producer(tr: Transaction, producer_id: str, principal: str = "") -> None:
    leases.check_worker_id(producer_id, "producer_id")
    _check_owner(tr, producer_id, principal)
    tr.clear(keys.producer_key(producer_id))
    tr.clear(keys.producer_errors_key(producer_id))


def _check_owner(tr: Transaction, producer_id: str, principal: str) -> None:
    key = keys.producer_key(producer_id)
    raw = tr.get(key)
    stored = _stored_session(raw) if raw else None
    if stored is not None:  # a torn one is nobody's: its producer's next heartbeat writes it anew
        leases.check_principal(stored.principal, principal, f"producer session {producer_id}")


def _stored_session(raw: bytes) -> ProducerSession | None:
    """A stored producer session; None for a torn one (never written so by this code)."""
    try:
        data = json.loads(raw)
        data["in_flight"] = [tuple(g) for g in data.get("in_flight", [])]
        return ProducerSession(**data)
    except UNDECODABLE:
        return None


@transactional
def reported_errors(tr: Transaction, since_ms: int) -> dict[str, ClusterErrors]:
    """{cluster: errors} the producers reported in heartbeats since `since_ms`; `count` counts producers. Only
    producers whose last heartbeat reported errors have a key here: a fleet of quiet producers costs nothing."""
    r = keys.PRODUCER_ERRORS.range()
    return health.count_reporters((raw for _, raw in tr.get_range(r.start, r.stop, snapshot=True)), since_ms)


@transactional
def read_producers(tr: Transaction) -> list[ProducerSession]:
    """Every producer session as stored; a torn one is left out (the sealer repairs it: `_expire_producers`)."""
    r = keys.PRODUCERS.range()
    return [p for p in (_stored_session(raw) for _, raw in tr.get_range(r.start, r.stop)) if p is not None]


def _expire_producers(
    tr: Transaction, now_ms: int, expired: list[str] | None = None, *, ttl_ms: int
) -> list[ProducerSession]:
    """Drop expired sessions (their ids appended to `expired`, to log after commit); return the live ones.

    A torn session (never written so by this code) is written again as one that holds back every seal for
    `ttl_ms`: what it said is lost, and a seal must not pass a producer that may still write. If its producer
    lives, its next heartbeat writes it anew; if not, it expires as any other."""
    live = []
    r = keys.PRODUCERS.range()
    for key, raw in tr.get_range(r.start, r.stop):
        p = _stored_session(raw)
        if p is None:
            p = ProducerSession(str(keys.PRODUCERS.unpack(key)[0]), "", alive_until_ms=now_ms + ttl_ms)
            tr.set(key, json.dumps(asdict(p)).encode())
        if p.alive_until_ms <= now_ms:
            tr.clear(keys.producer_key(p.producer_id))
            tr.clear(keys.producer_errors_key(p.producer_id))
            if expired is not None:
                expired.append(p.producer_id)
        else:
            live.append(p)
    return live


# -- generations -------------------------------------------------------------------------------------------


def _index_unsettled(tr: Transaction) -> None:
    """Build the index of unsettled generations once, for a store written before the index existed."""
    if tr.get(keys.UNSETTLED_INDEXED) is not None:
        return
    r = keys.GENERATIONS.range()
    for key, raw in tr.get_range(r.start, r.stop):
        gen = decoded_generation(raw)  # a torn one is left out: it never drains, and the others do
        if gen is not None and gen.state in (DRAINING, SEALED):
            tr.set(keys.unsettled_key(*keys.GENERATIONS.unpack(key)), b"")
    tr.set(keys.UNSETTLED_INDEXED, b"1")


def _generations_in(tr: Transaction, state: str) -> list[tuple[str, str, Generation]]:
    """Unsettled generations in `state`, through the index: the cost is the sealer's work, not the fleet's size.
    One whose record does not decode is left out (it stays where it is; the pass goes on for the others)."""
    r = keys.UNSETTLED.range()
    found = []
    for key, _ in tr.get_range(r.start, r.stop):
        stream, lane, number = keys.UNSETTLED.unpack(key)
        gen = decoded_generation(tr.get(keys.generation_key(stream, lane, number)))
        if gen is not None and gen.state == state:
            found.append((stream, lane, gen))
    return found


@dataclass(frozen=True)
class SealPlan:
    stream: str
    lane: str
    generation: Generation
    reason: str


def _wait_version(raw: bytes | None) -> str:
    """The event version a draining generation's seal waits for producers to route by ("": none, or torn)."""
    try:
        return raw.decode() if raw is not None else ""
    except UnicodeDecodeError:
        return ""


@transactional
def plan_seals(tr: Transaction, now_ms: int, *, ttl_ms: int) -> tuple[list[SealPlan], list[str]]:
    """Draining generations no live producer can write to any more, and the producer sessions it found expired
    (and removed). Records, the first time it sees a draining generation, the event version every producer
    must route by before it can be sealed. With nothing draining, it reads nothing else (expired producer
    sessions wait until they could matter). It logs nothing: a retried body would log twice."""
    _index_unsettled(tr)
    draining = _generations_in(tr, DRAINING)
    expired: list[str] = []
    if not draining:
        return [], expired
    live = _expire_producers(tr, now_ms, expired, ttl_ms=ttl_ms)
    plans = []
    for stream, lane, gen in draining:
        ref = (stream, lane, gen.number)
        wait_version = _wait_version(tr.get(keys.seal_wait_key(*ref)))
        if not wait_version:  # none yet, or torn (never written so by this code): recorded from now
            # The failover's event is already in the log, so the head is at or after it.
            tr.set(keys.seal_wait_key(*ref), events.head_version(tr).encode())
            continue
        waiting = [p.producer_id for p in live if p.holds_back(ref, wait_version)]
        if not waiting:
            reason = "every live producer has switched" if live else "no live producer session"
            plans.append(SealPlan(stream, lane, gen, reason))
    return plans, expired


@transactional
def _commit_seal(
    tr: Transaction, plan: SealPlan, end_offsets: list[int], now_ms: int, *, ttl_ms: int
) -> Generation | None:
    """Seal in one transaction with its event, if nothing changed since the plan (else None)."""
    key = keys.generation_key(plan.stream, plan.lane, plan.generation.number)
    raw = tr.get(key)
    if decoded_generation(raw) != plan.generation:
        return None
    ref = (plan.stream, plan.lane, plan.generation.number)
    wait_version = _wait_version(tr.get(keys.seal_wait_key(*ref)))
    live = _expire_producers(tr, now_ms, ttl_ms=ttl_ms)
    if not wait_version or any(p.holds_back(ref, wait_version) for p in live):  # "": torn since the plan
        return None
    sealed = replace(plan.generation, state=SEALED, end_offsets=end_offsets)
    write_generation(tr, plan.stream, plan.lane, sealed)
    tr.clear(keys.seal_wait_key(*ref))
    events.append_event(
        tr,
        GenerationSealed(stream=plan.stream, lane=plan.lane, generation=sealed, reason=plan.reason),
        actor="sealer",
        time_ms=now_ms,
    )
    return sealed


def _groups_on(tr: Transaction, stream: str, lane: str, number: int) -> list[str]:
    """Groups that have had leases on a generation, or recorded progress on it (unmanaged groups such as Spark
    queries): the ones that must process it before it is drained."""
    found = []
    for group in sorted(set(leases.read_groups(tr)) | set(commitlog.read_groups_with_progress(tr))):
        for space in (keys.LEASES, keys.PROGRESS):
            r = space.range((group, stream, lane, number))
            if tr.get_range(r.start, r.stop, limit=1):
                found.append(group)
                break
    return found


@transactional
def mark_drained(tr: Transaction, now_ms: int) -> list[tuple[str, str, Generation, list[str]]]:
    """Mark drained every sealed generation that holds nothing for anybody: sealed empty (whoever reads the
    stream, or nobody), or processed to its end offsets by each of its groups (none left is enough when a
    deleted group had read it). One that holds records no group has read stays sealed: a group may still start
    and want them (`generation abandon` gives them up)."""
    done: list[tuple[str, str, Generation, list[str]]] = []
    for stream, lane, gen in _generations_in(tr, SEALED):
        groups = _groups_on(tr, stream, lane, gen.number)
        short = 1 if planted.EARLY_DRAIN in planted.active else 0
        retired = tr.get(keys.retired_reader_key(stream, lane, gen.number)) is not None  # a deleted group read it
        lows = (
            (commitlog.low_or_none(tr, group, PartitionRef(stream, lane, gen.number, p)), end)
            for group in groups
            for p, end in enumerate(gen.end_offsets)
        )
        # a group's torn progress header holds this generation back, alone: never the pass over the fleet
        finished = not any(gen.end_offsets) or (
            (bool(groups) or retired) and all(low is not None and low >= end - short for low, end in lows)
        )
        if not finished:
            continue
        drained = replace(gen, state=DRAINED)
        write_generation(tr, stream, lane, drained)
        events.append_event(  # one user version per event: two events of one transaction need two keys
            tr,
            GenerationDrained(stream=stream, lane=lane, generation=drained, groups=tuple(groups)),
            actor="sealer",
            time_ms=now_ms,
            user_version=len(done),
        )
        done.append((stream, lane, drained, groups))
    return done


@transactional
def _drain(tr: Transaction, now_ms: int) -> tuple[list[tuple[str, str, Generation, list[str]]], bool]:
    """`mark_drained`, `finish_rewinds` and `finish_windows`, and whether every generation is settled after
    them (active or drained, reopened by no rewind, read by no running replay window)."""
    done = mark_drained(tr, now_ms)
    reopened = rewind.finish_rewinds(tr, now_ms)
    replaying = window.finish_windows(tr, now_ms)
    r = keys.UNSETTLED.range()
    return done, not reopened and not replaying and not tr.get_range(r.start, r.stop, limit=1)


class Sealer:
    """The sealing area's service: producer sessions, and the loop that seals and drains generations (it runs
    on every replica but acts only while `is_leader()` is true)."""

    def __init__(
        self,
        db: Database,
        admin: ClusterAdmin,
        is_leader: Callable[[], bool],
        config: SealingConfig | None = None,
        clock: Clock = SYSTEM,
    ) -> None:
        self.db = db
        self.clock = clock
        self.admin = admin
        self.is_leader = is_leader
        self.config = config or SealingConfig()
        self._unreachable: dict[str, tuple[int, int]] = {}  # cluster: (not asked again before, its backoff) in ms
        self._loop = BackgroundLoop(
            "sealer",
            self.run_once,
            interval_ms=self.config.loop_ms,
            clock=clock,
            is_leader=is_leader,
            wake=lambda: db.transact(lambda tr: tr.watch(keys.SEALER_WAKE)),
        )

    @property
    def schedule(self) -> Schedule:
        """When this loop's passes run: the thread's, and the simulator's on its own time."""
        return self._loop.schedule

    def start(self) -> None:
        self._loop.start()

    def stop(self) -> None:
        self._loop.stop()

    def producer_heartbeat(
        self,
        producer_id: str,
        topology_version: str,
        in_flight: list[GenerationKey],
        *,
        principal: str = "",
        errors: list[ClusterErrors] | None = None,
        streams: list[str] | None = None,
    ) -> str:
        """Open or renew a producer session for the configured TTL; the newest event version."""
        return producer_heartbeat(
            self.db,
            producer_id,
            topology_version,
            in_flight,
            now_ms=self.clock.now_ms(),
            ttl_ms=self.config.producer_ttl_ms,
            principal=principal,
            errors=errors,
            streams=streams,
        )

    def close_producer(self, producer_id: str, principal: str = "") -> None:
        """End a producer session at once: it no longer holds back seals."""
        close_producer(self.db, producer_id, principal)

    def run_once(self) -> int | None:
        """Seal what can be sealed, then mark drained what every group has finished. Returns when to look again
        with no topology event meanwhile: soon (None: every loop_ms) while any generation is unsettled, else after
        idle_ms."""
        plans, expired = plan_seals(self.db, self.clock.now_ms(), ttl_ms=self.config.producer_ttl_ms)
        for producer in expired:
            log.info("producer.expired", producer=producer)
        for plan in plans:
            name = plan.generation.cluster
            not_before, backoff_ms = self._unreachable.get(name, (0, 0))
            if self.clock.now_ms() < not_before:
                continue  # it did not answer a moment ago: its generations wait, the others' are sealed
            try:
                cluster = get_cluster(self.db, name)
                ends = self.admin.end_offsets(cluster, plan.generation.topic, plan.generation.partitions)
            except Exception as err:  # the old cluster may be the one that failed (or a bad entry): try later;
                if not isinstance(err, StreamplaneError):  # one cluster never holds back the others' seals
                    log.exception("sealer.end_offsets_failed", stream=plan.stream, lane=plan.lane, cluster=name)
                    err = StreamplaneError(f"reading end offsets failed: {err!r}")
                first, longest = END_OFFSETS_BACKOFF_MS
                backoff_ms = min(longest, backoff_ms * 2 or first)
                self._unreachable[name] = (self.clock.now_ms() + backoff_ms, backoff_ms)
                log.warning(
                    "sealer.end_offsets_unavailable",
                    stream=plan.stream,
                    lane=plan.lane,
                    cluster=name,
                    error=err.message,
                    retry_in_ms=backoff_ms,
                )
                continue
            self._unreachable.pop(name, None)
            sealed = _commit_seal(self.db, plan, ends, self.clock.now_ms(), ttl_ms=self.config.producer_ttl_ms)
            if sealed is not None:
                log.info(
                    "generation.sealed",
                    stream=plan.stream,
                    lane=plan.lane,
                    generation=sealed.number,
                    end_offsets=sealed.end_offsets,
                    reason=plan.reason,
                )
        drained, settled = _drain(self.db, self.clock.now_ms())
        for stream, lane, gen, groups in drained:
            log.info("generation.drained", stream=stream, lane=lane, generation=gen.number, groups=groups)
        return self.clock.now_ms() + self.config.idle_ms if settled else None
