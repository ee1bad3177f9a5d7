"""The autopilot: probe every cluster, record health changes, and, on the leader replica, fail lanes over off
clusters that stay unhealthy, without a person. Probing is spread over the live replicas (each cluster is
probed by one of them, chosen by rendezvous hashing), so the leader of a fleet does not probe everything.

Probes run in a small pool, each with its own timeout, so one slow cluster never delays the others: a cluster
whose probe is still running is skipped until it answers. The decisions are `health.plan_failovers`'s; this
class does the I/O (probes, the store, logs).
"""

from __future__ import annotations

import collections
import enum
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass, replace

import structlog

from streamplane.clock import SYSTEM, Clock
from streamplane.coordinator.groups import leadership, leases
from streamplane.coordinator.loop import BackgroundLoop
from streamplane.coordinator.topology import events, health, sealing
from streamplane.coordinator.topology.cluster_index import read_active_load, streams_active_on
from streamplane.coordinator.topology.health import AUTOPILOT
from streamplane.coordinator.topology.probes import CANARY_TOPIC, WireProbes
from streamplane.coordinator.topology.topology import Topology
from streamplane.errors import StreamplaneError, UnavailableError
from streamplane.model import Cluster, ClusterErrors, Probe

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class AutopilotConfig:
    probe_interval_ms: int = 2000
    """How often each cluster is probed."""
    probe_timeout_ms: int = 1500
    tick_ms: int = 200
    """How often finished probes are read and due failovers made (a failover is at most this late)."""
    history: int = 30
    """Probes kept per cluster (in the leader's memory) for `cluster health`."""
    probe_threads: int = 8
    topics_every: int = 5
    """Every how many probes the partitions of our topics are read too (the others read brokers only)."""
    canary_every: int = 5
    """Every how many probes a canary record is produced to the cluster's health topic and fetched back."""
    canary_slow_ms: float = 2000.0
    """A canary slower than this makes the cluster degraded."""
    target_creations_per_s: int = 50
    """Topics the autopilot creates on one target cluster a second at most (each lane it moves there is one):
    an evacuation of hundreds of lanes respects the target's controller, and spreads over several targets
    (by capacity) at that pace each."""


class _Wire(enum.Enum):
    WIRE = "wire"


WIRE = _Wire.WIRE
"""The default look at clusters: `probes.WireProbes`, over our wire client, connections kept per cluster."""

FAILED_RETRY_MS = 1000
"""After a failover that failed (a target that did not take its topic, a lane that changed meanwhile), the
plan is made again this much later, though the topology has not changed: a failure writes no event."""


class Autopilot:
    """Health monitor and automatic failover; runs on every replica, probes its share of the clusters, and
    fails over only while `is_leader()`."""

    def __init__(
        self,
        topology: Topology,
        is_leader: Callable[[], bool],
        config: AutopilotConfig | None = None,
        *,
        clock: Clock = SYSTEM,
        probe: Callable[..., Probe] | _Wire = WIRE,
        canary: Callable[..., tuple[float, str]] | _Wire | None = WIRE,
        replica: str = "",
    ) -> None:
        """`probe` and `canary` are what look at a cluster (tests give stand-ins; canary None runs none).
        `replica`: this replica's id, with which probing is spread over the live replicas (see
        `_probed_here`); without it the leader probes every cluster."""
        self.replica = replica
        self.topology = topology
        self.is_leader = is_leader
        self.config = config or AutopilotConfig()
        self.clock = clock
        self.wire = WireProbes(topology.kafka_settings)
        self._probe = self.wire.probe if probe is WIRE else probe
        self._canary = self.wire.canary if canary is WIRE else canary
        self._canary_topics: set[str] = set()  # clusters whose health topic exists
        self._pool = futures.ThreadPoolExecutor(self.config.probe_threads, thread_name_prefix="probe")
        self._running: dict[str, futures.Future[Probe]] = {}
        self._probed_at: dict[str, float] = {}
        self._next_due = float("-inf")
        self._probes_made: dict[str, int] = {}
        self._partitions: dict[str, Probe] = {}
        """The last probe of each cluster that read its partitions."""
        self._unhealthy = False
        self._planned: tuple[int, int] = (-1, 0)  # (topology head, recheck ms) of the last failover plan
        self._brokers_seen: dict[str, int] = {}
        self.history: dict[str, collections.deque[Probe]] = {}
        self._recent: collections.deque[int] = collections.deque(maxlen=100_000)
        self._evacuations: dict[str, int] = {}
        """When each cluster's evacuation started (this replica's memory, while it leads: the hour's cap)."""
        self._last_moved: dict[tuple[str, str], int] = {}
        self._created: dict[str, collections.deque[int]] = {}
        """Per target cluster, when the autopilot's failovers created a topic there in the last second."""
        self.waiting: list[str] = []
        self._listed: dict[str, Cluster] = {}
        """The clusters as last read, by name, and the event log's head then."""
        self._listed_head = -1
        self._unreadable: list[str] = []
        """Why clusters whose stored record does not decode, or whose Kafka settings this replica lacks, are not
        probed (shown with `waiting`)."""
        self._unprobed: set[str] = set()
        """The clusters whose Kafka settings this replica lacks."""
        self._spread: tuple[tuple[int, tuple[str, ...]], set[str]] = ((-1, ()), set())
        """((cluster list's head, live replicas), the clusters this replica probes then)."""
        self._loop = BackgroundLoop(  # on every replica when probing is spread: failovers check `is_leader`
            "autopilot", self.run_once, interval_ms=self.config.tick_ms, clock=clock, is_leader=lambda: True
        )

    def probes(self, cluster: str) -> list[Probe]:
        """The newest probes of a cluster, oldest first (this replica's, while it leads)."""
        return list(self.history.get(cluster, ()))

    def start(self) -> None:
        self._loop.start()

    def stop(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._loop.stop()
        self.wire.close()

    def run_once(self) -> None:
        """Record the probes that finished, start those due, then fail over what the policies call for. A tick
        with nothing finished and nothing due reads nothing, and while a cluster is unhealthy, only whether the
        topology changed: failovers are planned again on a change or when one held back by time may go (an
        idle fleet costs little, and so does one waiting for a cluster to come back)."""
        now = self.clock.now_ms()
        leading = self.is_leader()
        finished = [name for name, running in self._running.items() if running.done()]
        replan = leading and self._unhealthy and self._replan_due(now)
        if not finished and not replan and self.clock.monotonic() < self._next_due:
            return
        if finished:
            since = now - 2 * self.config.probe_interval_ms
            reported = sealing.reported_errors(self.topology.db, since)
            fetching = leases.reported_errors(self.topology.db, since)
            for name in finished:
                try:  # one cluster's bad probe (a bug, an entry no client can use) never stops the pass
                    self._observe(self._probe_result(name, now), reported.get(name), fetching.get(name))
                except Exception:
                    log.exception("autopilot.observe_failed", cluster=name)
        clusters = self._clusters()
        mine = [c for c in self._probed_here(clusters, now, leading) if c.name not in self._unprobed]
        interval = self.config.probe_interval_ms / 1000
        due = self.clock.monotonic() - interval
        for c in mine:
            if c.name not in self._running and self._probed_at.get(c.name, float("-inf")) <= due:
                self._probed_at[c.name] = self.clock.monotonic()
                count = self._probes_made[c.name] = self._probes_made.get(c.name, -1) + 1
                self._running[c.name] = self._pool.submit(self._look, c, count, now)
        for gone in set(self._probed_at) - {c.name for c in mine}:  # removed, or probed by another replica now
            del self._probed_at[gone]
            self.wire.forget(gone)
        self._next_due = min(self._probed_at.values(), default=self.clock.monotonic()) + interval
        self._unhealthy = any(c.health == health.UNHEALTHY for c in clusters)
        if not leading:
            return
        if self._unhealthy and self._replan_due(now):  # streams are read only when a lane may move
            self.fail_over(now)
        elif not self._unhealthy:
            self.waiting, self._planned = list(self._unreadable), (-1, 0)

    def _clusters(self) -> list[Cluster]:
        """The registered clusters, read again only when the topology changed (every change is an event): a
        tick of a fleet of a thousand decodes none of them when nothing changed."""
        head = events.head(self.topology.db)  # before the list: a change meanwhile reads it again next tick
        if head != self._listed_head:
            listed = self.topology.read_clusters()
            if listed.unreadable:  # the others are probed; these wait for a registration that replaces them
                log.error("autopilot.unreadable_clusters", clusters=listed.unreadable)
            self._unreadable = [
                f"cluster {name!r}: its stored record does not decode, so it is not probed "
                "(`streamplane cluster register --update` replaces it)"
                for name in listed.unreadable
            ]
            # a replica not given a cluster's Kafka settings does not probe it: its failing probes would say the
            # cluster is down, and fail its streams over, for what is this replica's configuration
            lacking = [c for c in listed.clusters if not self.topology.kafka_settings.knows(c.config_ref)]
            if lacking:
                log.error("autopilot.kafka_settings_missing", clusters=[c.name for c in lacking])
            self._unreadable += [
                f"cluster {c.name!r} needs Kafka settings {c.config_ref!r}, which this replica was not given "
                "(--kafka-settings): it is not probed here"
                for c in lacking
            ]
            self._unprobed = {c.name for c in lacking}
            self._listed, self._listed_head = {c.name: c for c in listed.clusters}, head
        return list(self._listed.values())

    def _probed_here(self, clusters: list[Cluster], now_ms: int, leading: bool) -> list[Cluster]:
        """The clusters this replica probes: of each cluster, the live replica ranked first by rendezvous
        hashing probes it (a replica joining or leaving moves only its own share). Without a replica id, or
        while this one is not registered live, the leader probes every cluster and the others none."""
        if not self.replica:
            return clusters if leading else []
        expiries = self.topology.db.transact(leadership.replica_expiries)
        live = tuple(sorted(r for r, until in expiries.items() if until > now_ms))
        if self.replica not in live:
            return clusters if leading else []
        if self._spread[0] != (self._listed_head, live):
            mine = {c.name for c in clusters if health.prober(c.name, live) == self.replica}
            self._spread = ((self._listed_head, live), mine)
        return [c for c in clusters if c.name in self._spread[1]]

    def _probe_result(self, name: str, now_ms: int) -> Probe:
        """The finished probe of `name`; a probe that raised (a bug, or an entry no client can use) is an
        unreachable cluster with that error, logged against it."""
        try:
            return self._running.pop(name).result()
        except Exception as err:
            log.exception("autopilot.probe_failed", cluster=name)
            return Probe(name, now_ms, False, 0.0, error=f"the probe failed: {err!r}"[:300])

    def _replan_due(self, now_ms: int) -> bool:
        head, recheck_ms = self._planned
        return events.head(self.topology.db) != head or 0 < recheck_ms <= now_ms

    def _look(self, cluster: Cluster, count: int, now_ms: int) -> Probe:
        """One probe of a cluster (in the pool); every `canary_every` probes of a reachable cluster, the canary
        too, its health topic created first if need be."""
        cfg = self.config
        probe = self._probe(
            cluster,
            timeout_s=cfg.probe_timeout_ms / 1000,
            now_ms=now_ms,
            topics=count % cfg.topics_every == 0 or cluster.health != health.HEALTHY,
        )
        if self._canary is None or not probe.reachable or count % cfg.canary_every:
            return probe
        try:
            if cluster.name not in self._canary_topics:
                self.topology.admin.ensure_topic(cluster, CANARY_TOPIC, 1)
                self._canary_topics.add(cluster.name)
        except StreamplaneError as err:
            return replace(probe, canary_ms=0.0, canary_error=f"canary topic not created: {err.message[:200]}")
        took, error = self._canary(cluster, timeout_s=cfg.probe_timeout_ms / 1000)
        return replace(probe, canary_ms=took, canary_error=error)

    def _observe(self, probe: Probe, reported: ClusterErrors | None, fetching: ClusterErrors | None = None) -> None:
        if probe.partitions < 0:  # a brokers-only look: the partitions as last read
            last = self._partitions.get(probe.cluster, Probe(probe.cluster, 0, True))
            probe = replace(
                probe, partitions=last.partitions, leaderless=last.leaderless, under_replicated=last.under_replicated
            )
        elif probe.reachable:
            self._partitions[probe.cluster] = probe
        seen = max(self._brokers_seen.get(probe.cluster, 0), probe.brokers)
        self._brokers_seen[probe.cluster] = seen
        self.history.setdefault(probe.cluster, collections.deque(maxlen=self.config.history)).append(probe)
        state, reasons = health.judge(probe, seen, reported, fetching, canary_slow_ms=self.config.canary_slow_ms)
        listed = self._listed.get(probe.cluster)
        if listed is not None and listed.health == state and listed.health_reasons == list(reasons):
            return  # as stored when the fleet was last read (a change since is an event, which reads it again)
        try:
            changed = self.topology.record_health(probe.cluster, state, reasons, actor=AUTOPILOT, seen_ms=probe.at_ms)
        except StreamplaneError as err:  # removed meanwhile, or the store is away: the next probe tells again
            log.info("autopilot.health_not_recorded", cluster=probe.cluster, error=err.message)
            return
        if changed is not None:
            log.info("cluster.health_changed", cluster=probe.cluster, state=state, reasons=list(reasons))

    def fail_over(self, now_ms: int) -> list[health.Move]:
        """Apply the failovers the policies call for now; returns them."""
        head = events.head(self.topology.db)  # read before the plan: a change meanwhile plans again
        clusters = self.topology.list_clusters()
        unhealthy = [c.name for c in clusters if c.health == health.UNHEALTHY]
        # only what the unhealthy clusters hold: a dead cluster costs its own lanes, not the fleet's streams
        held, load = self.topology.db.transact(lambda tr: (streams_active_on(tr, unhealthy), read_active_load(tr)))
        plan = health.plan_failovers(
            clusters,
            held.streams,
            self.topology.fleet_policy(),
            now_ms=now_ms,
            recent=list(self._recent),
            evacuations=self._evacuations,
            last_moved=self._last_moved,
            load=load,
        )
        unreadable = (f"stream {name!r}: its stored records do not decode" for name in held.unreadable)
        waiting = [*plan.waiting, *unreadable, *self._unreadable]
        if waiting != self.waiting:
            for line in waiting:
                log.warning("autopilot.waiting", why=line)
        self.waiting = waiting
        self._planned = (head, plan.recheck_ms)
        for cluster in plan.evacuating:
            self._evacuations[cluster] = now_ms
            log.warning("autopilot.evacuating", cluster=cluster, lanes=sum(m.source == cluster for m in plan.moves))
        for cluster, since in list(self._evacuations.items()):
            if now_ms - since >= health.EVACUATION_WINDOW_MS:
                del self._evacuations[cluster]
        done = []
        ceiling = self.config.target_creations_per_s
        paced: dict[str, int] = {}
        refused: dict[str, str] = {}  # target: why it did not take a topic in this pass
        waiting_for: collections.Counter[str] = collections.Counter()  # target: the lanes that wait for it
        failed = False
        taken: list[health.Move] = []
        for move in plan.moves:
            created = self._created.setdefault(move.target, collections.deque())
            while created and now_ms - created[0] >= 1000:
                created.popleft()
            if len(created) >= ceiling:  # the target's controller has had its share this second
                paced[move.target] = paced.get(move.target, 0) + 1
                continue
            created.append(now_ms)
            taken.append(move)
        # one topic creation request per target: a try can last the admin's timeout, and the pass serves the fleet
        for move, result in zip(taken, self.topology.failover_many(taken, actor=AUTOPILOT), strict=True):
            if isinstance(result, Exception):
                failed = True
                if not isinstance(result, StreamplaneError):  # a bug, in this lane's failover only
                    log.error("autopilot.failover_failed", stream=move.stream, lane=move.lane, exc_info=result)
                    continue
                log.warning("autopilot.failover_failed", stream=move.stream, lane=move.lane, error=result.message)
                if isinstance(result, UnavailableError):
                    refused.setdefault(move.target, result.message)
                    waiting_for[move.target] += 1
                continue
            self._recent.append(now_ms)
            self._last_moved[(move.stream, move.lane)] = now_ms
            log.info("autopilot.failed_over", stream=move.stream, lane=move.lane, to=move.target, reason=move.reason)
            done.append(move)
        again: list[int] = []
        if paced:
            lines = [
                f"{count} lane(s) wait for {target}: {ceiling} topic creations a second on one target at most"
                for target, count in sorted(paced.items())
            ]
            for line in lines:
                log.info("autopilot.paced", why=line)
            self.waiting = [*self.waiting, *lines]
            again.append(min(self._created[t][0] for t in paced) + 1000)  # when the first of them has room again
        if refused:
            lines = [
                f"{waiting_for[t]} lane(s) wait for {t}, which did not take a topic: {why}"
                for t, why in refused.items()
            ]
            for line in sorted(lines):
                log.warning("autopilot.waiting", why=line)
            self.waiting = [*self.waiting, *sorted(lines)]
        if failed:  # tried again in a second, though nothing in the topology changes meanwhile
            again.append(now_ms + FAILED_RETRY_MS)
        if again:
            first = min(again)
            self._planned = (self._planned[0], min(first, self._planned[1]) if self._planned[1] else first)
        return done
