"""When a draining generation is sealed and a sealed one drained, transaction by transaction.

The sealer runs against an embedded store, an in-memory stand-in for the Kafka clusters and a manual clock:
each rule is shown by one pass that must not seal (so the sealer did run and held back) and one, after the
single thing that changed, that must.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from streamplane.clock import ManualClock
from streamplane.coordinator import keys
from streamplane.coordinator.commitlog import log as commitlog
from streamplane.coordinator.store import Database, Transaction
from streamplane.coordinator.topology import events, sealing
from streamplane.coordinator.topology.records import get_stream
from streamplane.coordinator.topology.sealing import Sealer, SealingConfig
from streamplane.coordinator.topology.topology import Topology
from streamplane.model import (
    ACTIVE,
    DRAINED,
    DRAINING,
    SEALED,
    Cluster,
    Commit,
    FailedOver,
    Generation,
    GenerationDrained,
    GenerationSealed,
    GenerationState,
)
from streamplane.testing.cluster_admin import MemoryClusterAdmin
from tests.helpers import Domain

TTL_MS = 10_000
G1 = ("logs", "realtime", 1)


@dataclass
class World:
    db: Database
    admin: MemoryClusterAdmin
    clock: ManualClock
    topology: Topology
    sealer: Sealer

    def heartbeat(self, producer: str, version: str, in_flight: list[tuple[str, str, int]] | None = None) -> str:
        now = self.clock.now_ms()
        return sealing.producer_heartbeat(self.db, producer, version, in_flight or [], now_ms=now, ttl_ms=TTL_MS)

    def generation(self, number: int) -> Generation:
        lane = get_stream(self.db, "logs").lane("realtime")
        assert lane is not None
        found = lane.generation(number)
        assert found is not None
        return found

    def state(self, number: int) -> GenerationState:
        return self.generation(number).state

    def failover(self) -> str:
        """Fail logs/realtime over to west, and let the sealer's first pass note the topology version every
        producer must route by from now on (it seals nothing yet); the version of the failover's event."""
        version = self.topology.failover("logs", "realtime", "west", reason="test").version
        self.sealer.run_once()
        assert self.state(1) == DRAINING
        return version


@pytest.fixture
def world(domain: Domain) -> World:
    d = domain.cluster("east", "west").stream("logs", 2, "east")
    d.admin.append("east", "sp.logs.realtime.g1", 0, 3)
    d.admin.append("east", "sp.logs.realtime.g1", 1, 2)
    sealer = Sealer(d.db, d.admin, lambda: True, SealingConfig(producer_ttl_ms=TTL_MS), clock=d.clock)
    return World(d.db, d.admin, d.clock, d.topology, sealer)


def test_with_no_producer_a_failover_is_sealed_at_the_old_topics_end_offsets(world: World) -> None:
    world.failover()
    world.sealer.run_once()
    g1 = world.generation(1)
    assert (g1.state, g1.end_offsets) == (SEALED, [3, 2])
    assert world.state(2) == ACTIVE
    (sealed,) = [e for e in events.read_events(world.db, None) if isinstance(e, GenerationSealed)]
    (moved,) = [e for e in events.read_events(world.db, None) if isinstance(e, FailedOver)]
    assert sealed.time_ms == moved.time_ms == world.clock.now_ms(), "events are stamped by the injected clock"
    assert (sealed.stream, sealed.lane, sealed.generation.end_offsets, sealed.reason) == (
        "logs",
        "realtime",
        [3, 2],
        "no live producer session",
    )


def test_a_producer_that_has_not_heard_of_the_failover_holds_the_seal_back_until_its_session_expires(
    world: World,
) -> None:
    before = world.heartbeat("laggard", "")
    assert before == events.head_version(world.db)
    world.failover()
    world.clock.advance(TTL_MS - 1)
    world.sealer.run_once()
    assert world.state(1) == DRAINING, "a producer still routing by the old topology may write to g1"
    world.clock.advance(1)
    world.sealer.run_once()
    assert world.state(1) == SEALED


def test_a_producer_that_routes_by_the_new_topology_does_not_hold_the_seal(world: World) -> None:
    world.heartbeat("laggard", "")
    version = world.failover()
    world.sealer.run_once()
    assert world.state(1) == DRAINING
    world.heartbeat("laggard", version)
    world.sealer.run_once()
    assert world.state(1) == SEALED


def test_records_in_flight_to_the_old_generation_hold_the_seal_until_they_are_acknowledged(world: World) -> None:
    version = world.failover()
    world.heartbeat("busy", version, in_flight=[G1])
    world.sealer.run_once()
    assert world.state(1) == DRAINING, "records still in flight to g1 would land after the seal"
    world.admin.append("east", "sp.logs.realtime.g1", 0)  # they land
    world.heartbeat("busy", version, in_flight=[])
    world.sealer.run_once()
    assert world.generation(1).end_offsets == [4, 2], "the late record is inside the sealed range"


def test_a_closed_producer_no_longer_holds_the_seal(world: World) -> None:
    world.heartbeat("p1", "")
    world.failover()
    world.sealer.run_once()
    assert world.state(1) == DRAINING
    sealing.close_producer(world.db, "p1")
    world.sealer.run_once()
    assert world.state(1) == SEALED


def test_an_unreachable_old_cluster_delays_the_seal_and_it_is_sealed_once_back(world: World) -> None:
    world.admin.down.add("east")
    world.failover()
    world.sealer.run_once()
    assert world.state(1) == DRAINING, "no end offsets, no seal"
    world.admin.down.discard("east")
    world.sealer.run_once()
    assert world.state(1) == DRAINING, "a cluster that did not answer is asked again only after a backoff"
    world.clock.advance(sealing.END_OFFSETS_BACKOFF_MS[0])
    world.sealer.run_once()
    assert world.generation(1).end_offsets == [3, 2]


def test_a_dead_cluster_is_asked_once_a_pass_at_most_and_holds_back_no_other_clusters_seal(world: World) -> None:
    """Every stream failed over from a dead cluster has a generation to seal there, and a try can last the
    admin's whole timeout: one try per backoff for that cluster, while the others' generations are sealed."""
    world.topology.register_cluster(Cluster("north", "north:9092"))
    world.topology.create_stream("metrics", 1, "east")
    world.topology.create_stream("audit", 1, "west")
    asked: list[str] = []
    end_offsets = world.admin.end_offsets

    def counted(cluster: Cluster, topic: str, partitions: int) -> list[int]:
        asked.append(cluster.name)
        return end_offsets(cluster, topic, partitions)

    world.admin.end_offsets = counted  # type: ignore[method-assign]
    world.admin.down.add("east")
    for stream, to in (("logs", "west"), ("metrics", "west"), ("audit", "north")):
        world.topology.failover(stream, "realtime", to, reason="test")
    world.sealer.run_once()  # notes the version producers must route by
    world.sealer.run_once()
    audit = get_stream(world.db, "audit").lane("realtime")
    sealed_or_past = (SEALED, DRAINED)  # an empty generation is drained once sealed: nobody has anything left
    assert audit is not None and audit.generation(1).state in sealed_or_past, "the live cluster's seal did not wait"
    assert asked.count("east") == 1, "two generations on the dead cluster, one try"
    for _ in range(5):
        world.sealer.run_once()
    assert asked.count("east") == 1, "and none more before its backoff is over"
    world.admin.down.discard("east")
    world.clock.advance(sealing.END_OFFSETS_BACKOFF_MS[1])
    world.sealer.run_once()
    assert world.state(1) == SEALED
    metrics = get_stream(world.db, "metrics").lane("realtime")
    assert metrics is not None and metrics.generation(1).state in sealed_or_past


def test_a_sealed_generation_is_drained_once_every_group_processed_it_to_its_end(world: World) -> None:
    world.failover()
    world.sealer.run_once()
    now = world.clock.now_ms()
    for group in ("spark-a", "spark-b"):  # unmanaged groups (epoch 0), as a Spark query commits
        commitlog.commit(
            world.db, group, "logs/realtime/g1/p0", 0, Commit(acked=[(0, 3)], high_watermark=3), now_ms=now
        )
    commitlog.commit(
        world.db, "spark-a", "logs/realtime/g1/p1", 0, Commit(acked=[(0, 2)], high_watermark=2), now_ms=now
    )
    world.sealer.run_once()
    assert world.state(1) == SEALED, "spark-b has not finished partition 1"
    commitlog.commit(
        world.db, "spark-b", "logs/realtime/g1/p1", 0, Commit(acked=[(0, 2)], high_watermark=2), now_ms=now
    )
    world.sealer.run_once()
    assert world.state(1) == DRAINED
    (drained,) = [e for e in events.read_events(world.db, None) if isinstance(e, GenerationDrained)]
    assert drained.groups == ("spark-a", "spark-b") and drained.generation.number == 1


def test_the_sealer_looks_often_only_while_a_generation_is_unsettled(world: World) -> None:
    """Nothing draining or sealed: its next look is idle_ms away (a failover's event wakes its loop). From the
    failover until the old generation is drained: every loop_ms (None)."""
    idle = world.sealer.config.idle_ms
    assert world.sealer.run_once() == world.clock.now_ms() + idle
    world.topology.failover("logs", "realtime", "west", reason="test")
    assert world.sealer.run_once() is None  # draining: notes the version producers must reach
    assert world.sealer.run_once() is None  # sealed now, not yet drained
    assert world.state(1) == SEALED
    now = world.clock.now_ms()
    for p, end in enumerate([3, 2]):
        commitlog.commit(
            world.db, "g", f"logs/realtime/g1/p{p}", 0, Commit(acked=[(0, end)], high_watermark=end), now_ms=now
        )
    assert world.sealer.run_once() == now + idle  # drained in this pass: settled again
    assert world.state(1) == DRAINED


def test_a_sealed_generation_no_group_ever_read_stays_sealed(world: World) -> None:
    world.failover()
    world.sealer.run_once()
    world.sealer.run_once()
    assert world.state(1) == SEALED, "nobody has processed it: draining it would hide its records"


def test_a_store_written_before_the_unsettled_index_still_gets_its_draining_generations_sealed(
    world: World,
) -> None:
    world.topology.failover("logs", "realtime", "west", reason="test")

    def forget_index(tr: Transaction) -> None:  # what a store written by an older coordinator looks like
        r = keys.UNSETTLED.range()
        tr.clear_range(r.start, r.stop)
        tr.clear(keys.UNSETTLED_INDEXED)

    world.db.transact(forget_index)
    world.sealer.run_once()  # first sight of the draining generation: records what producers must reach
    world.sealer.run_once()
    assert [world.state(1), world.state(2)] == [SEALED, ACTIVE]


def test_two_generations_drained_in_one_pass_each_get_their_event(world: World) -> None:
    """Found by the simulator: both events of one transaction were written under one key."""
    world.failover()  # g1 -> g2 on west
    world.admin.append("west", "sp.logs.realtime.g2", 0, 1)  # not empty: an empty one drains once sealed
    world.topology.failover("logs", "realtime", "east", reason="again")  # g2 -> g3 on east
    world.sealer.run_once()
    world.sealer.run_once()
    assert (world.state(1), world.state(2)) == (SEALED, SEALED)
    now = world.clock.now_ms()
    for number, ends in ((1, [3, 2]), (2, [1, 0])):
        for p, end in enumerate(ends):
            lid = f"logs/realtime/g{number}/p{p}"
            commitlog.commit(
                world.db, "spark-a", lid, 0, Commit(acked=[(0, end)] if end else [], high_watermark=end), now_ms=now
            )
    world.sealer.run_once()
    assert (world.state(1), world.state(2)) == (DRAINED, DRAINED)
    drained = [e.generation.number for e in events.read_events(world.db, None) if isinstance(e, GenerationDrained)]
    assert sorted(drained) == [1, 2]


def test_a_sealed_generation_that_holds_nothing_is_drained_at_once_with_no_reader(world: World) -> None:
    """A stream no one wrote to and no group reads: its old generation, sealed at end offsets [0, 0], has
    nothing left for anybody. Before the fix it stayed sealed forever, and `cluster drain` waited on it."""
    world.topology.create_stream("quiet", 2, "east")
    world.topology.failover("quiet", "realtime", "west", reason="drain of east")
    for _ in range(3):
        world.sealer.run_once()
    lane = get_stream(world.db, "quiet").lane("realtime")
    assert lane is not None and lane.generation(1).state == DRAINED  # type: ignore[union-attr]
    (drained,) = [e for e in events.read_events(world.db, None) if isinstance(e, GenerationDrained)]
    assert drained.stream == "quiet" and drained.groups == ()
    # the stream with records no group has read keeps its old generation sealed: a group may still want them
    world.failover()
    for _ in range(3):
        world.sealer.run_once()
    assert world.state(1) == SEALED


def test_a_torn_progress_header_or_generation_record_holds_back_only_itself_never_the_drain_pass(
    world: World,
) -> None:
    """One group's progress header that does not decode, and one generation record that does not decode, in
    the store beside healthy ones: the sealer's pass goes on (it used to raise, every pass, so that no
    generation of the fleet drained), the healthy generation drains, and the torn ones stay as they are."""
    world.failover()  # g1 -> g2 on west
    world.admin.append("west", "sp.logs.realtime.g2", 0, 1)
    world.topology.failover("logs", "realtime", "east", reason="again")  # g2 -> g3
    world.sealer.run_once()
    world.sealer.run_once()
    assert (world.state(1), world.state(2)) == (SEALED, SEALED)
    now = world.clock.now_ms()
    for p, end in enumerate([3, 2]):
        commitlog.commit(
            world.db, "a", f"logs/realtime/g1/p{p}", 0, Commit(acked=[(0, end)], high_watermark=end), now_ms=now
        )
    for p, end in enumerate([1, 0]):
        commit = Commit(acked=[(0, end)] if end else [], high_watermark=end)
        commitlog.commit(world.db, "b", f"logs/realtime/g2/p{p}", 0, commit, now_ms=now)
    commitlog.commit(world.db, "a", "logs/realtime/g2/p0", 0, Commit(acked=[(0, 1)], high_watermark=1), now_ms=now)
    commitlog.commit(world.db, "a", "logs/realtime/g2/p1", 0, Commit(high_watermark=0), now_ms=now)

    def poison(tr: Transaction) -> None:
        tr.set(keys.progress_key("b", commitlog.PartitionRef("logs", "realtime", 2, 1)), b"{torn")
        tr.set(keys.unsettled_key("ghost", "realtime", 9), b"")  # indexed, and its record is torn
        tr.set(keys.generation_key("ghost", "realtime", 9), b"[not a generation")

    world.db.transact(poison)
    world.sealer.run_once()  # raises nothing
    assert world.state(1) == DRAINED, "the healthy generation drained in the same pass"
    assert world.state(2) == SEALED, "group b's torn header holds g2 back, alone"
