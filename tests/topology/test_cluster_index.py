"""The index by cluster (issue 37): what each cluster holds, and its count of active generations, kept by every
write of a generation, so that a dead cluster costs the autopilot its own lanes, a failover's target choice
one read per cluster, and a page of the streams on a cluster its own streams, never the fleet's.

A state machine drives the topology through histories users make (streams created, failed over back and
forth, generations sealed, drained and abandoned, streams deleted and created again, a store written before
the index existed) and holds every index reader to a full scan of the streams after each step."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from streamplane import model
from streamplane.clock import ManualClock
from streamplane.coordinator import keys
from streamplane.coordinator.topology.autopilot import Autopilot
from streamplane.coordinator.topology.cluster_index import read_active_load, streams_active_on
from streamplane.coordinator.topology.health import active_load
from streamplane.coordinator.topology.lifecycle import delete_stream
from streamplane.coordinator.topology.records import write_generation
from streamplane.errors import StreamplaneError
from streamplane.model import DRAINED, DRAINING, SEALED
from tests.helpers import Domain

CLUSTERS = ("a", "b", "c")
STREAMS = ("s1", "s2", "s3", "s4")


class ClusterIndex(RuleBasedStateMachine):
    """Topology histories; after each step, the index answers as a scan of every stream does."""

    @initialize()
    def start(self) -> None:
        domain = Domain()
        self.db, self.topology = domain.db, domain.topology
        for name in CLUSTERS:
            self.topology.register_cluster(model.Cluster(name, f"{name}:9092"))

    def teardown(self) -> None:
        self.db.close()

    def _streams(self) -> dict[str, model.Stream]:
        return {s.name: s for s in self.topology.list_streams()}

    @rule(stream=st.sampled_from(STREAMS), cluster=st.sampled_from(CLUSTERS), partitions=st.integers(1, 3))
    def create(self, stream: str, cluster: str, partitions: int) -> None:
        if stream not in self._streams():
            self.topology.create_stream(stream, partitions, cluster)

    @rule(stream=st.sampled_from(STREAMS), lane=st.sampled_from(("realtime", "dlq")), to=st.sampled_from(CLUSTERS))
    def failover(self, stream: str, lane: str, to: str) -> None:
        s = self._streams().get(stream)
        if s is not None and s.lane(lane) is not None and s.require_lane(lane).active.cluster != to:
            self.topology.failover(stream, lane, to, reason="test")

    @rule(stream=st.sampled_from(STREAMS), lane=st.sampled_from(("realtime", "dlq")), data=st.data())
    def settle(self, stream: str, lane: str, data: Any) -> None:
        """A draining generation is sealed, a sealed one drained, or one given up (as the sealer and the
        operator write them)."""
        s = self._streams().get(stream)
        if s is None or s.lane(lane) is None:
            return
        older = [g for g in s.require_lane(lane).generations if g.state in (DRAINING, SEALED)]
        if not older:
            return
        gen = data.draw(st.sampled_from(older))
        if data.draw(st.booleans()):
            self.topology.abandon_generation(stream, lane, gen.number, reason="the cluster is gone")
        else:
            after = SEALED if gen.state == DRAINING else DRAINED
            self.db.transact(lambda tr: write_generation(tr, stream, lane, replace(gen, state=after)))

    @rule(stream=st.sampled_from(STREAMS))
    def delete(self, stream: str) -> None:
        if stream in self._streams():
            delete_stream(self.topology, stream, force=True, reason="test")

    @rule()
    def written_before_the_index(self) -> None:
        """The store is one from before the index: the next reader builds it from the generations."""

        def wipe(tr: Any) -> None:
            for space in (keys.CLUSTER_GENERATIONS, keys.CLUSTER_ACTIVE):
                r = space.range()
                tr.clear_range(r.start, r.stop)
            tr.clear(keys.CLUSTER_INDEXED)

        self.db.transact(wipe)

    @invariant()
    def answers_as_a_scan(self) -> None:
        if not hasattr(self, "db"):
            return
        streams = list(self._streams().values())
        assert self.topology.active_load() == active_load(streams)
        counts: dict[tuple[str, str], int] = {}
        for s in streams:
            for lane in s.lanes:
                for g in lane.generations:
                    counts[(g.cluster, g.state.value)] = counts.get((g.cluster, g.state.value), 0) + 1
        assert self.topology.generation_counts() == counts
        for cluster in CLUSTERS:
            active_there = [s for s in streams if any(lane.active.cluster == cluster for lane in s.lanes)]
            assert self.topology.streams_active_on([cluster]).streams == active_there
            held = [s.name for s in streams if any(g.cluster == cluster for lane in s.lanes for g in lane.generations)]
            paged: list[str] = []
            token = ""
            while True:  # pages of one stream: every page boundary
                page = self.topology.stream_page(cluster=cluster, page_size=1, page_token=token)
                paged += [s.name for s in page.streams]
                token = page.next_page_token
                if not token:
                    break
            assert paged == held, (cluster, paged, held)


TestClusterIndex = ClusterIndex.TestCase
TestClusterIndex.settings = settings(max_examples=60, stateful_step_count=25, deadline=None)


def test_removing_a_cluster_names_what_it_still_holds_from_its_own_generations() -> None:
    domain = Domain()
    db, topology = domain.db, domain.topology
    try:
        for name in ("a", "b"):
            topology.register_cluster(model.Cluster(name, f"{name}:9092"))
        topology.create_stream("logs", 1, "a")
        topology.failover("logs", "realtime", "b", reason="test")
        try:
            topology.remove_cluster("a")
            raise AssertionError("a still holds generations")
        except StreamplaneError as err:
            assert "2 undrained generation(s): logs/dlq/g1 (active), logs/realtime/g1 (draining)" in err.message
        topology.failover("logs", "dlq", "b", reason="test")
        for lane in ("realtime", "dlq"):
            gen = topology.get_stream("logs").require_lane(lane).generation(1)
            db.transact(lambda tr, lane=lane, gen=gen: write_generation(tr, "logs", lane, replace(gen, state=DRAINED)))
        topology.remove_cluster("a")
        assert [c.name for c in topology.list_clusters()] == ["b"]
    finally:
        db.close()


class _Counting:
    """A transaction that counts the keys it reads (what a plan costs, whatever the machine's speed)."""

    def __init__(self, tr: Any) -> None:
        self.tr, self.keys = tr, 0

    def get(self, key: bytes, **kw: Any) -> bytes | None:
        self.keys += 1
        return self.tr.get(key, **kw)  # type: ignore[no-any-return]

    def get_range(self, *args: Any, **kw: Any) -> list[tuple[bytes, bytes]]:
        rows: list[tuple[bytes, bytes]] = self.tr.get_range(*args, **kw)
        self.keys += len(rows)
        return rows

    def __getattr__(self, name: str) -> Any:
        return getattr(self.tr, name)


def test_a_dead_clusters_failovers_read_its_lanes_not_the_fleets_streams() -> None:
    """20 streams on a cluster that dies, and 2,000 on a healthy one: what the autopilot's plan reads (the dead
    cluster's streams, the load counters) is the same with or without the 2,000; it moves the 40 lanes."""
    clock = ManualClock()
    domain = Domain(clock=clock)
    db, topology = domain.db, domain.topology
    try:
        for name in ("big", "dead", "spare"):
            topology.register_cluster(model.Cluster(name, f"{name}:9092"))
        for i in range(20):
            topology.create_stream(f"d{i:02d}", 1, "dead")
        topology.create_stream("b0000", 1, "big")

        def plan_reads() -> int:
            def look(tr: Any) -> int:
                counting = _Counting(tr)
                streams_active_on(counting, ["dead"])
                read_active_load(counting)
                return counting.keys

            return db.transact(look)

        plan_reads()  # the first reader indexes the store once
        small = plan_reads()
        for i in range(1, 2000):
            topology.create_stream(f"b{i:04d}", 1, "big")
        assert plan_reads() == small, "the plan reads the dead cluster's lanes, whatever else the fleet holds"
        topology.set_fleet_policy(model.FleetPolicy(max_failovers_per_minute=1000))
        topology.record_health("dead", "unhealthy", ["no broker answers"], actor="test")
        clock.advance(60_000)
        moves = Autopilot(topology, lambda: True, clock=clock, canary=None).fail_over(clock.now_ms())
        assert sorted((m.stream, m.lane) for m in moves) == sorted(
            (f"d{i:02d}", lane) for i in range(20) for lane in ("realtime", "dlq")
        )
        assert {m.target for m in moves} == {"spare"}, "the least loaded target: big holds 4,000 active generations"
        assert topology.active_load() == {"big": 4000, "spare": 40}
    finally:
        db.close()


def test_a_stream_record_that_does_not_decode_never_holds_back_a_dead_clusters_evacuation() -> None:
    """Bad data already in the store: one stream on a dead cluster whose stored record is not one this
    coordinator can read (a torn write, a newer coordinator's shape). The autopilot still moves every other
    lane off the dead cluster, and says which stream it left and why."""
    clock = ManualClock()
    domain = Domain(clock=clock)
    db, topology = domain.db, domain.topology
    try:
        for name in ("dead", "spare"):
            topology.register_cluster(model.Cluster(name, f"{name}:9092"))
        for name in ("s1", "s2", "s3"):
            topology.create_stream(name, 1, "dead")
        db.transact(lambda tr: tr.set(keys.stream_key("s2"), b'{"name": "s2", "topic": 7'))
        topology.set_fleet_policy(model.FleetPolicy(max_failovers_per_minute=1000))
        topology.record_health("dead", "unhealthy", ["no broker answers"], actor="test")
        clock.advance(60_000)
        autopilot = Autopilot(topology, lambda: True, clock=clock, canary=None)
        moves = autopilot.fail_over(clock.now_ms())
        assert sorted((m.stream, m.lane) for m in moves) == [
            (s, lane) for s in ("s1", "s3") for lane in ("dlq", "realtime")
        ]
        assert "stream 's2': its stored records do not decode" in autopilot.waiting
        assert topology.streams_active_on(["dead"]).unreadable == ["s2"]
    finally:
        db.close()
