"""The many-cluster stand-in (`streamplane.testing.kafka_fleet`, issue 37) and the health monitor at fleet
size: the stand-in answers what the autopilot and the cluster admin send, librdkafka's requests included; a
monitor over a hundred clusters keeps one connection a cluster and a fixed pool of threads, finds the
clusters that die and sees them come back."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from streamplane import model
from streamplane.clock import SYSTEM, ManualClock
from streamplane.coordinator.groups import leadership
from streamplane.coordinator.store.embedded import EmbeddedDatabase
from streamplane.coordinator.topology.autopilot import Autopilot, AutopilotConfig
from streamplane.coordinator.topology.cluster_admin import KafkaAdmin
from streamplane.coordinator.topology.probes import CANARY_TOPIC, WireProbes
from streamplane.coordinator.topology.topology import Topology
from streamplane.model import Cluster, Probe
from streamplane.testing.cluster_admin import MemoryClusterAdmin
from streamplane.testing.kafka_fleet import KafkaFleet
from tests.helpers import wait_until


def test_the_stand_in_answers_the_admin_the_probe_and_the_canary_and_dies_when_killed() -> None:
    with KafkaFleet(2) as fleet:
        cluster = model.Cluster("one", fleet.bootstrap(0))
        probes = WireProbes()
        try:
            assert probes.probe(cluster, timeout_s=2, now_ms=1).reachable
            admin = KafkaAdmin(timeout_s=10)
            admin.ensure_topic(cluster, CANARY_TOPIC, 1)  # librdkafka's CreateTopics
            admin.ensure_topic(cluster, CANARY_TOPIC, 1)  # exists: checked by its partitions
            looked = probes.probe(cluster, timeout_s=2, now_ms=2)
            assert (looked.brokers, looked.partitions, looked.leaderless) == (1, 1, 0)
            for _ in range(3):
                took, error = probes.canary(cluster, timeout_s=2)
                assert error == "" and took > 0
            assert admin.end_offsets(cluster, CANARY_TOPIC, 1) == [3]  # librdkafka's ListOffsets
            assert probes.connections() == 1, "the probe and the canary share the cluster's one connection"
            assert probes.probe(model.Cluster("two", fleet.bootstrap(1)), timeout_s=2, now_ms=3).partitions == 0

            fleet.kill(0)
            dead = probes.probe(cluster, timeout_s=2, now_ms=4)
            assert not dead.reachable and dead.error
            assert probes.canary(cluster, timeout_s=1)[1].startswith("canary failed")
            fleet.revive(0)
            again = probes.probe(cluster, timeout_s=2, now_ms=5)
            assert again.reachable and again.partitions == 1, "a revived cluster keeps its topics"
            assert probes.canary(cluster, timeout_s=2)[1] == ""
        finally:
            probes.close()
        assert probes.connections() == 0


def test_a_monitor_over_a_hundred_clusters_keeps_a_connection_each_and_finds_the_dead_ones() -> None:
    """The autopilot's own loop, its wire probes and canaries, against 100 stand-in clusters: each becomes
    healthy with a canary that went through; five killed become unhealthy while the rest stay healthy, and
    come back when revived. Connections stay one a cluster and threads a fixed pool, whatever the fleet."""
    db = EmbeddedDatabase(None)
    with KafkaFleet(100) as fleet:
        topology = Topology(db, KafkaAdmin(timeout_s=10), SYSTEM)
        names = [f"c{i:03d}" for i in range(100)]
        for i, name in enumerate(names):
            topology.register_cluster(model.Cluster(name, fleet.bootstrap(i)))
        threads_before = threading.active_count()
        config = AutopilotConfig(probe_interval_ms=300, canary_every=2, tick_ms=50)
        pilot = Autopilot(topology, lambda: True, config)
        pilot.start()
        try:

            def states() -> dict[str, str]:
                return {c.name: c.health for c in topology.list_clusters()}

            def canaried(name: str) -> bool:
                return any(p.canary_ms > 0 and not p.canary_error for p in pilot.probes(name))

            wait_until(lambda: set(states().values()) == {"healthy"}, timeout=60, what=lambda: str(states()))
            wait_until(lambda: all(canaried(n) for n in names), timeout=60)
            assert pilot.wire.connections() == 100
            assert threading.active_count() - threads_before <= config.probe_threads + 1  # the pool and the loop

            dead = names[10:15]
            for i in range(10, 15):
                fleet.kill(i)
            wait_until(lambda: {n for n, s in states().items() if s == "unhealthy"} == set(dead), timeout=30)
            assert all(s == "healthy" for n, s in states().items() if n not in dead)
            for i in range(10, 15):
                fleet.revive(i)
            wait_until(lambda: set(states().values()) == {"healthy"}, timeout=30, what=lambda: str(states()))
            assert pilot.wire.connections() == 100
        finally:
            pilot.stop()
            db.close()
    assert pilot.wire.connections() == 0


def test_probing_is_spread_over_the_live_replicas_and_taken_over_when_one_leaves() -> None:
    """Three replicas' autopilots over 60 clusters: each cluster is probed by exactly one replica, each probes
    a share, only the leader fails over; when a replica stops renewing, its clusters go to the others and
    theirs stay where they were."""
    db = EmbeddedDatabase(None)
    clock = ManualClock()
    try:
        topology = Topology(db, MemoryClusterAdmin(), clock)
        names = [f"c{i:02d}" for i in range(60)]
        for name in names:
            topology.register_cluster(model.Cluster(name, f"{name}:9092"))
        probed: dict[str, list[str]] = {}

        def probe_as(replica: str) -> Callable[..., Probe]:
            def probe(cluster: Cluster, *, timeout_s: float, now_ms: int, topics: bool) -> Probe:
                name = cluster.name
                probed.setdefault(replica, []).append(name)
                return Probe(name, now_ms, True, 1.0, brokers=1)

            return probe

        def renew(*replicas: str) -> None:
            for r in replicas:
                db.transact(lambda tr, r=r: leadership.claim_groups(tr, r, [], clock.now_ms(), 5_000))

        config = AutopilotConfig(probe_interval_ms=1_000)
        pilots = [
            Autopilot(topology, lambda r=r: r == "r1", config, clock=clock, probe=probe_as(r), canary=None, replica=r)
            for r in ("r1", "r2", "r3")
        ]

        def probe_round(replicas: tuple[str, ...]) -> dict[str, set[str]]:
            probed.clear()
            clock.advance(1_000)
            renew(*replicas)
            for pilot in pilots:
                pilot.run_once()
            wait_until(lambda: sum(len(v) for v in probed.values()) >= len(names), timeout=10)
            return {r: set(v) for r, v in probed.items()}

        first = probe_round(("r1", "r2", "r3"))
        assert sorted(n for got in first.values() for n in got) == names, "each cluster probed once"
        assert all(len(first.get(r, ())) >= 5 for r in ("r1", "r2", "r3")), {r: len(v) for r, v in first.items()}
        assert probe_round(("r1", "r2", "r3")) == first, "the same replica probes a cluster round after round"

        clock.advance(5_000)  # r3 stops renewing: its registration expires
        after = probe_round(("r1", "r2"))
        assert "r3" not in after and sorted(n for got in after.values() for n in got) == names
        assert first["r1"] <= after["r1"] and first["r2"] <= after["r2"], "only r3's clusters moved"
        for pilot in pilots:
            pilot.stop()
    finally:
        db.close()


def test_what_producers_report_costs_the_health_monitor_the_producers_with_errors_not_the_fleets() -> None:
    """1,000 producer sessions, three of which report errors on a cluster: the monitor reads three keys, counts
    the three producers, and forgets one once its next heartbeat reports none or it closes."""
    from streamplane.coordinator.topology import sealing
    from tests.topology.test_cluster_index import _Counting

    db = EmbeddedDatabase(None)
    try:
        quiet = model.ClusterErrors("east", 0, "")
        failing = model.ClusterErrors("east", 4, "Connection refused")
        for i in range(1000):
            errors = [failing] if i < 3 else [quiet]
            sealing.producer_heartbeat(db, f"p{i:04d}", "", [], now_ms=1_000, ttl_ms=10_000, errors=errors)

        def look(tr: Any) -> tuple[dict[str, model.ClusterErrors], int]:
            counting = _Counting(tr)
            return sealing.reported_errors(counting, 0), counting.keys

        found, read = db.transact(look)
        assert found == {"east": model.ClusterErrors("east", 3, "Connection refused")} and read == 3
        sealing.producer_heartbeat(db, "p0000", "", [], now_ms=2_000, ttl_ms=10_000, errors=[quiet])
        sealing.close_producer(db, "p0001")
        assert sealing.reported_errors(db, 0) == {"east": model.ClusterErrors("east", 1, "Connection refused")}
    finally:
        db.close()


def test_a_cluster_record_that_does_not_decode_is_named_and_every_other_cluster_is_still_probed() -> None:
    """Bad data already in the store: one of 20 cluster records is not one this coordinator can read. The
    health monitor still probes and records the other 19, says which one it left and how to mend it; cluster
    pages and the fleet list leave it out; reading it alone says why in one sentence; registering it again
    with --update replaces it, and it is probed again."""
    from streamplane.coordinator import keys
    from streamplane.errors import FailedPreconditionError

    db = EmbeddedDatabase(None)
    clock = ManualClock()
    try:
        topology = Topology(db, MemoryClusterAdmin(), clock)
        names = [f"c{i:02d}" for i in range(20)]
        for name in names:
            topology.register_cluster(model.Cluster(name, f"{name}:9092"))
        db.transact(lambda tr: tr.set(keys.cluster_key("c07"), b'{"name": "c07", "zone": '))
        probed: list[str] = []

        def probe(cluster: Cluster, *, timeout_s: float, now_ms: int, topics: bool) -> Probe:
            name = cluster.name
            probed.append(name)
            return Probe(name, now_ms, False, 1.0, error="no broker answers")

        pilot = Autopilot(topology, lambda: True, AutopilotConfig(), clock=clock, probe=probe, canary=None)
        pilot.run_once()
        wait_until(lambda: len(probed) == 19)
        clock.advance(1)
        pilot.run_once()  # records what the probes found
        assert sorted(probed) == [n for n in names if n != "c07"]
        assert [c.name for c in topology.list_clusters() if c.health == "unhealthy"] == sorted(probed)
        assert any("'c07': its stored record does not decode" in w for w in pilot.waiting), pilot.waiting
        assert topology.read_clusters().unreadable == ["c07"]
        assert [c.name for c in topology.cluster_page(page_size=100).clusters] == sorted(probed)
        with pytest.raises(FailedPreconditionError, match=r"c07.*does not decode.*--update"):
            topology.get_cluster("c07")

        topology.register_cluster(model.Cluster("c07", "c07:9092"), update_existing=True)
        assert topology.get_cluster("c07").bootstrap_servers == "c07:9092"
        probed.clear()
        clock.advance(3_000)
        pilot.run_once()
        wait_until(lambda: "c07" in probed)
        pilot.stop()
    finally:
        db.close()


def test_a_canary_rides_out_a_brokers_passing_errors_within_its_timeout() -> None:
    """A health topic whose partition has no leader yet (just created, as on a cluster starting up) fails a
    canary only if it lasts past the timeout: a producer would wait, and so does the canary. One that never
    gets a leader says why when the timeout runs out."""
    with KafkaFleet(1) as fleet:
        cluster = model.Cluster("one", fleet.bootstrap(0))
        probes = WireProbes()
        try:
            created = threading.Timer(0.3, lambda: KafkaAdmin(timeout_s=10).ensure_topic(cluster, CANARY_TOPIC, 1))
            created.start()
            took, error = probes.canary(cluster, timeout_s=5)
            created.join()
            assert error == "" and took >= 250, (took, error)
            other = model.Cluster("other", fleet.bootstrap(0))
            fleet.clusters[0].topics.clear()  # the topic is gone and stays gone
            took, error = probes.canary(other, timeout_s=0.5)
            assert "has no leader now" in error and 450 <= took < 2_000, (took, error)
        finally:
            probes.close()


def test_a_cluster_forgotten_while_its_canary_opens_a_leader_connection_leaks_no_connection(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The autopilot forgets a cluster (a failed probe, its removal) while a canary of it opens a connection to
    the health topic's leader, another broker than bootstrap's: the new connection is kept with the cluster's
    current ones, so it is counted and closed with them, never left open and unknown."""
    from streamplane.coordinator.topology import probes as probes_module
    from streamplane.devstack.mockcluster import MockCluster

    mock = MockCluster(2)
    probes = WireProbes()
    opened: list[Any] = []
    real = probes_module.KafkaConnection

    class ForgottenMeanwhile(real):  # type: ignore[misc,valid-type]
        """A real connection; the moment it is open, the cluster is forgotten (the race, made certain)."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            opened.append(self)
            probes.forget("two")

    try:
        mock.create_topic(CANARY_TOPIC, 1)
        bootstrap = mock.bootstrap_servers.split(",")[0]
        with real.connect_any(bootstrap) as boot:  # the health topic led by the broker bootstrap is not
            other = next(n for n, b in boot.metadata([]).brokers.items() if f"{b.host}:{b.port}" != boot.address)
        mock.set_leader(CANARY_TOPIC, 0, other)
        cluster = model.Cluster("two", bootstrap)
        assert probes.probe(cluster, timeout_s=2, now_ms=1).reachable
        monkeypatch.setattr(probes_module, "KafkaConnection", ForgottenMeanwhile)
        _, error = probes.canary(cluster, timeout_s=5)
        assert error == "", error
        (leader,) = opened
        assert probes.connections() == 1, "the leader's connection is kept with the cluster's"
    finally:
        probes.close()
        mock.close()
    assert probes.connections() == 0
    assert leader.fileno() == -1, "closed with the cluster's connections"


def test_a_clients_error_report_that_does_not_decode_never_blinds_the_health_monitor() -> None:
    """Bad data already in the store: one producer's and one worker's error reports are not what a heartbeat
    writes. The reports of the others are still counted, so the autopilot's tick goes on for the fleet."""
    from streamplane.coordinator import keys
    from streamplane.coordinator.groups import leases
    from streamplane.coordinator.topology import sealing

    db = EmbeddedDatabase(None)
    try:
        failing = model.ClusterErrors("east", 4, "Connection refused")
        for i in range(3):
            sealing.producer_heartbeat(db, f"p{i}", "", [], now_ms=1_000, ttl_ms=10_000, errors=[failing])
        db.transact(lambda tr: tr.set(keys.producer_errors_key("p1"), b"[[1, 2]]"))
        db.transact(lambda tr: tr.set(keys.worker_errors_key("g", "w1"), b"not json"))
        db.transact(lambda tr: tr.set(keys.worker_errors_key("g", "w2"), b'[["east", 1, "timed out", 1000]]'))
        assert sealing.reported_errors(db, 0) == {"east": model.ClusterErrors("east", 2, "Connection refused")}
        assert leases.reported_errors(db, 0) == {"east": model.ClusterErrors("east", 1, "timed out")}
    finally:
        db.close()
