"""Issue 12: cluster health and automatic failover.

The decisions (`health.judge`, `health.plan_failovers`) as pure functions; the autopilot over a real store
and the local cluster with a simulated clock (a flapping cluster); and a real coordinator whose cluster is
unreachable: health events, the fleet freeze, the rate cap, automatic failover with its evidence, cordons,
`cluster drain` and `cluster remove`.
"""

from __future__ import annotations

import itertools
import socket
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from streamplane import model
from streamplane.client import CoordinatorClient, Producer, WorkerSession
from streamplane.clock import ManualClock
from streamplane.coordinator import keys
from streamplane.coordinator.rpc import server
from streamplane.coordinator.store import StoreConfig, open_store
from streamplane.coordinator.topology import health
from streamplane.coordinator.topology.autopilot import AUTOPILOT, Autopilot, AutopilotConfig
from streamplane.coordinator.topology.cluster_admin import RoutingAdmin, TopicSpec
from streamplane.coordinator.topology.health import (
    DEGRADED,
    HEALTHY,
    UNHEALTHY,
    choose_target,
    judge,
    plan_failovers,
)
from streamplane.coordinator.topology.topology import Topology
from streamplane.errors import FailedPreconditionError, InvalidArgumentError, StreamplaneError, UnavailableError
from streamplane.model import Cluster, Probe
from streamplane.testing.cluster_admin import MemoryClusterAdmin
from tests.helpers import cli, wait_until

T0 = 1_800_000_000_000


def test_judge() -> None:
    assert judge(Probe("a", T0, False, error="connection refused")) == (
        UNHEALTHY,
        ("metadata unreachable: connection refused",),
    )
    assert judge(Probe("a", T0, True, brokers=3, partitions=8)) == (HEALTHY, ())
    state, reasons = judge(Probe("a", T0, True, brokers=2, partitions=8, leaderless=3), brokers_seen=3)
    assert state == DEGRADED and reasons == ("1 of 3 brokers missing", "3 of 8 partitions without a leader")
    assert judge(Probe("a", T0, True, brokers=1, partitions=4, leaderless=4))[0] == UNHEALTHY
    assert judge(Probe("a", T0, True, brokers=3, canary_ms=40.0)) == (HEALTHY, ())
    assert judge(Probe("a", T0, True, brokers=3, canary_ms=2500.0)) == (
        DEGRADED,
        ("canary took 2500 ms (over 2000 ms)",),
    )
    failed = judge(Probe("a", T0, True, brokers=3, canary_ms=900.0, canary_error="canary produce failed: timed out"))
    assert failed == (DEGRADED, ("canary produce failed: timed out",))


def test_the_canary_writes_to_each_reachable_clusters_health_topic_and_reads_it_back(fleet, local_cluster) -> None:
    address, _ = fleet
    with CoordinatorClient(address) as c:
        c.set_fleet_policy(model.FleetPolicy(frozen=True))
        wait_until(lambda: any(p.canary_ms >= 0 for p in c.cluster_health("alive-1")[1]), timeout=15)
        (canary,) = [p for p in c.cluster_health("alive-1")[1] if p.canary_ms >= 0][-1:]
        assert canary.canary_error == "" and 0 < canary.canary_ms < 2000
        assert all(p.canary_ms < 0 for p in c.cluster_health("dead")[1]), "an unreachable cluster gets no canary"
    shown = cli("cluster", "health", "alive-1", coordinator=address)
    assert "CANARY_MS" in shown.stdout
    topics = AdminClient({"bootstrap.servers": local_cluster[0]}).list_topics(timeout=10).topics
    assert "sp._canary" in topics and len(topics["sp._canary"].partitions) == 1


def _cluster(name: str, health: str = HEALTHY, *, zone: str = "", since: int = T0, **kw: object) -> model.Cluster:
    return model.Cluster(name, f"{name}:9092", zone=zone, health=health, health_since_ms=since, **kw)  # type: ignore[arg-type]


def _stream(name: str, cluster: str, **policy: object) -> model.Stream:
    lanes = [
        model.Lane(lane, prio, [model.Generation(1, cluster, f"sp.{name}.{lane}.g1", 2)])
        for lane, prio in (("realtime", 100), ("dlq", 10))
    ]
    return model.Stream(name, lanes, failover=model.FailoverPolicy(**policy))  # type: ignore[arg-type]


def test_plan_moves_lanes_off_a_cluster_unhealthy_long_enough_to_the_least_loaded_other_zone() -> None:
    clusters = [
        _cluster("a", UNHEALTHY, zone="z1", health_reasons=["metadata unreachable: refused"]),
        _cluster("b", zone="z1"),
        _cluster("c", zone="z2"),
        _cluster("d", zone="z2", cordoned=True),
    ]
    streams = [_stream("s1", "a"), _stream("s2", "c")]
    early = plan_failovers(clusters, streams, model.FleetPolicy(), now_ms=T0 + 9_000, recent=[], last_moved={})
    assert early.moves == [], "unhealthy for less than the policy's 10 s"
    assert early.recheck_ms == T0 + 10_000, "planned again once the policy's 10 s are up"
    plan = plan_failovers(clusters, streams, model.FleetPolicy(), now_ms=T0 + 11_000, recent=[], last_moved={})
    assert [(m.stream, m.lane, m.target) for m in plan.moves] == [("s1", "realtime", "c"), ("s1", "dlq", "c")]
    assert "unhealthy for 11.0 s (metadata unreachable: refused)" in plan.moves[0].reason
    # the other zone is full? then the same zone: choose_target prefers another zone only when it has room
    assert choose_target(clusters, clusters[0], {}, exclude=["c"]).name == "b"  # type: ignore[union-attr]


def test_plan_respects_manual_mode_freeze_rate_cap_hysteresis_and_missing_targets() -> None:
    clusters = [_cluster("a", UNHEALTHY), _cluster("b")]
    now = T0 + 60_000
    manual = plan_failovers(
        clusters, [_stream("s", "a", mode="manual")], model.FleetPolicy(), now_ms=now, recent=[], last_moved={}
    )
    assert manual.moves == [] and manual.waiting == [] and manual.recheck_ms == 0
    frozen = plan_failovers(
        clusters, [_stream("s", "a")], model.FleetPolicy(frozen=True), now_ms=now, recent=[], last_moved={}
    )
    assert frozen.moves == [] and all("frozen" in w for w in frozen.waiting) and len(frozen.waiting) == 2
    many = [_stream(f"s{i}", "a") for i in range(5)]
    capped = plan_failovers(clusters, many, model.FleetPolicy(max_failovers_per_minute=3), now_ms=now,
                            recent=[now - 70_000, now - 30_000], last_moved={})  # fmt: skip
    assert len(capped.moves) == 2, "3 a minute, one of them spent 30 s ago"
    assert sum("rate cap" in w for w in capped.waiting) == 8
    assert capped.recheck_ms == now + 30_000, "when the failover of 30 s ago leaves the minute"
    moved_recently = plan_failovers(clusters, [_stream("s", "a")], model.FleetPolicy(), now_ms=now, recent=[],
                                    last_moved={("s", "realtime"): now - 5_000})  # fmt: skip
    assert [m.lane for m in moved_recently.moves] == ["dlq"] and "hysteresis" in moved_recently.waiting[0]
    assert moved_recently.recheck_ms == now - 5_000 + model.FailoverPolicy().min_interval_ms
    nowhere = plan_failovers([clusters[0], _cluster("b", cordoned=True)], [_stream("s", "a")], model.FleetPolicy(),
                             now_ms=now, recent=[], last_moved={})  # fmt: skip
    assert nowhere.moves == [] and "no healthy, uncordoned cluster" in nowhere.waiting[0]
    assert nowhere.recheck_ms == 0 and frozen.recheck_ms == 0, "only a change in the topology can move these"


def test_a_dead_clusters_lanes_leave_together_top_priority_first() -> None:
    """The cap counts clusters, not lanes: 40 streams (80 lanes) on one dead cluster all move in one plan. The
    old cap of 10 lanes a minute took 150 s to move 30 of them (about 20 minutes for 200)."""
    clusters = [_cluster("a", UNHEALTHY), _cluster("b"), _cluster("c", zone="z2")]
    streams = [_stream(f"s{i:02d}", "a") for i in range(40)]
    plan = plan_failovers(clusters, streams, model.FleetPolicy(), now_ms=T0 + 60_000, recent=[], last_moved={})
    assert len(plan.moves) == 80 and plan.waiting == [] and plan.evacuating == ["a"]
    priorities = [next(x.priority for x in s.lanes if x.name == m.lane) for m in plan.moves for s in streams
                  if s.name == m.stream]  # fmt: skip
    assert priorities == sorted(priorities, reverse=True), "every realtime lane before any dlq lane"
    assert {m.target for m in plan.moves} == {"b", "c"}, "spread over the targets by load"


def test_the_evacuation_cap_and_the_unhealthy_share_hold_the_fleet_back_and_say_why() -> None:
    now = T0 + 60_000
    five = [_cluster(n, UNHEALTHY if n in "abc" else HEALTHY) for n in "abcde"]
    streams = [_stream(f"on-{n}", n) for n in "abcde"]
    stop = plan_failovers(five, streams, model.FleetPolicy(), now_ms=now, recent=[], last_moved={})
    assert stop.moves == [] and len(stop.waiting) == 1
    assert "3 of 5 clusters are unhealthy" in stop.waiting[0] and "moves nothing" in stop.waiting[0]
    capped = plan_failovers(
        five,
        streams,
        model.FleetPolicy(max_unhealthy_fraction=0.8, max_evacuations_per_hour=2),
        now_ms=now,
        recent=[],
        last_moved={},
        evacuations={"a": now - 600_000},  # a began 10 minutes ago: b may start, c must wait
    )
    assert {m.source for m in capped.moves} == {"a", "b"} and capped.evacuating == ["b"]
    assert any("the cap holds c back" in w for w in capped.waiting)
    assert capped.recheck_ms == now - 600_000 + 3_600_000, "when a's evacuation leaves the hour"
    with pytest.raises(InvalidArgumentError, match="max_unhealthy_fraction"):
        model.FleetPolicy(max_unhealthy_fraction=0).check()


# -- over a real store and the local cluster ------------------------------------------------------------------


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_flapping_cluster_moves_each_lane_at_most_once_a_minute(tmp_path: Path, local_cluster) -> None:
    """Down 3 s, up 3 s, for two minutes of simulated time: probes every 2 s see it come and go."""
    bootstrap, control = local_cluster
    db = open_store(StoreConfig(driver="embedded", data_dir=tmp_path))
    clock = ManualClock(T0)
    topology = Topology(db, RoutingAdmin(), clock, control_endpoints=[control.endpoint])
    for name in ("flap-a", "flap-b"):
        topology.register_cluster(
            model.Cluster(name, bootstrap, admin=model.ADMIN_LOCAL, control_endpoint=control.endpoint)
        )
    topology.create_stream("flappy", 1, "flap-a")
    topology.set_stream_policy("flappy", model.FailoverPolicy(unhealthy_after_ms=2_000))
    down = lambda: (clock.now_ms() - T0) // 3000 % 2 == 1  # noqa: E731

    def probe(cluster: Cluster, *, timeout_s: float, now_ms: int, topics: bool) -> Probe:
        name = cluster.name
        current = topology.describe_stream("flappy").value.lane("realtime").active.cluster  # type: ignore[union-attr]
        dead = down() and name == current
        return Probe(name, now_ms, not dead, brokers=3, error="refused" if dead else "")

    pilot = Autopilot(topology, lambda: True, AutopilotConfig(probe_interval_ms=1000), clock=clock, probe=probe)
    try:
        moves: list[tuple[int, str]] = []
        for _ in range(120):
            pilot.run_once()
            wait_until(lambda: all(f.done() for f in pilot._running.values()), timeout=5)  # this pass's probes
            pilot.run_once()
            clock.advance(1000)
        for event in topology.read_events_and_watch(None, limit=10_000)[0]:
            if isinstance(event, model.FailedOver):
                moves.append((event.time_ms, event.lane))
                assert event.actor == AUTOPILOT
        assert moves, "the flapping cluster was noticed"
        for lane in ("realtime", "dlq"):
            times = [t for t, x in moves if x == lane]
            assert all(b - a >= 60_000 for a, b in itertools.pairwise(times)), (lane, times)
    finally:
        pilot.stop()
        db.close()


def test_a_cluster_that_stays_unhealthy_is_planned_for_again_only_on_a_change_or_when_time_allows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Planning reads every stream: a fleet waiting for a cluster to come back (nowhere to move to) used to
    plan five times a second. Now: when the policy's wait is up, and when the topology changes."""
    db = open_store(StoreConfig(driver="embedded", data_dir=tmp_path))
    clock = ManualClock(T0)
    topology = Topology(db, MemoryClusterAdmin(), clock)
    for name in ("a", "b"):
        topology.register_cluster(model.Cluster(name, f"{name}:9092"))
    topology.create_stream("s", 1, "a")
    topology.cordon("b")

    def probe(cluster: Cluster, *, timeout_s: float, now_ms: int, topics: bool) -> Probe:
        name = cluster.name
        return Probe(name, now_ms, name != "a", brokers=1, error="refused" if name == "a" else "")

    plans: list[int] = []
    real_plan = health.plan_failovers

    def counted(*args: object, **kwargs: object) -> health.Plan:
        plans.append(clock.now_ms() - T0)
        return real_plan(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(health, "plan_failovers", counted)
    pilot = Autopilot(
        topology, lambda: True, AutopilotConfig(probe_interval_ms=600_000), clock=clock, probe=probe, canary=None
    )
    try:
        pilot.run_once()
        wait_until(lambda: all(f.done() for f in pilot._running.values()), timeout=5)
        pilot.run_once()  # "a" is unhealthy from now on: planned once (its 10 s have not passed)
        for _ in range(150):  # 15 s of ticks
            clock.advance(100)
            pilot.run_once()
        assert plans == [0, 10_000], "planned at every tick, or not when the policy's 10 s were up"
        assert pilot.waiting and "no healthy, uncordoned cluster" in pilot.waiting[0]
        topology.cordon("b", False)  # a change: planned again at the next tick, and the lanes move
        pilot.run_once()
        assert plans[-1] == 15_000, plans
        assert topology.describe_stream("s").value.require_lane("realtime").active.cluster == "b"
    finally:
        pilot.stop()
        db.close()


@pytest.fixture
def fleet(tmp_path: Path, local_cluster) -> Iterator[tuple[str, server.RunningCoordinator]]:
    """A coordinator probing every 200 ms; cluster 'dead' (unreachable metadata, topics on the local cluster's
    control channel) and clusters 'alive-1' and 'alive-2' (the local cluster)."""
    bootstrap, control = local_cluster
    running = server.start(
        open_store(StoreConfig(driver="embedded", data_dir=tmp_path / "db")),
        admin=RoutingAdmin(),
        control_endpoints=[control.endpoint],
        autopilot_config=AutopilotConfig(probe_interval_ms=200, probe_timeout_ms=500),
    )
    with CoordinatorClient(running.address) as c:
        c.register_cluster(
            model.Cluster(
                "dead", f"127.0.0.1:{_closed_port()}", admin=model.ADMIN_LOCAL, control_endpoint=control.endpoint
            )
        )
        for name in ("alive-1", "alive-2"):
            c.register_cluster(
                model.Cluster(name, bootstrap, admin=model.ADMIN_LOCAL, control_endpoint=control.endpoint)
            )
    yield running.address, running
    running.stop(0)


def _failovers(c: CoordinatorClient) -> list[model.FailedOver]:
    return [e for e in c.watch_topology("", follow=False) if isinstance(e, model.FailedOver)]


def test_freeze_records_health_but_moves_nothing_then_the_autopilot_moves_within_the_rate_cap(fleet) -> None:
    address, _ = fleet
    with CoordinatorClient(address) as c:
        c.set_fleet_policy(model.FleetPolicy(frozen=True, max_failovers_per_minute=3))
        for i in range(3):
            c.create_stream(f"ap-{i}", 1, cluster="dead")
            c.set_stream_policy(f"ap-{i}", model.FailoverPolicy(unhealthy_after_ms=1_000))
        wait_until(lambda: c.cluster_health("dead")[0].health == UNHEALTHY, timeout=10)
        cluster, probes = c.cluster_health("dead")
        assert cluster.health_reasons[0].startswith("metadata unreachable") and probes and not probes[-1].reachable
        changed = [e for e in c.watch_topology("", follow=False) if isinstance(e, model.ClusterHealthChanged)]
        assert changed[-1].cluster.name == "dead" and changed[-1].actor == AUTOPILOT
        import time

        time.sleep(2.5)  # past the policy's second: frozen, nothing moves
        assert _failovers(c) == []
        assert {x.name: x.health for x in c.list_clusters()} == {
            "dead": UNHEALTHY,
            "alive-1": HEALTHY,
            "alive-2": HEALTHY,
        }
        c.set_fleet_policy(model.FleetPolicy(frozen=False, max_failovers_per_minute=3))
        wait_until(lambda: len(_failovers(c)) == 3, timeout=10)
        time.sleep(1.0)  # time for a fourth failover past the cap, which must not come
        moved = _failovers(c)
        assert len(moved) == 3, "the rate cap: 3 a minute, of 6 lanes"
        assert all(e.actor == AUTOPILOT and "dead unhealthy for" in e.reason for e in moved)
        assert {e.current.cluster for e in moved} <= {"alive-1", "alive-2"}


def test_cordon_drain_and_remove(fleet, tmp_path: Path) -> None:
    address, _ = fleet
    streams = [f"dr-{i}" for i in range(20)]
    with CoordinatorClient(address) as c:
        c.set_fleet_policy(model.FleetPolicy(frozen=True, max_failovers_per_minute=100))  # the operator drains
        c.cordon_cluster("alive-2")
        with pytest.raises(FailedPreconditionError, match="cordoned"):
            c.create_stream("nope", 1, cluster="alive-2")
        for s in streams:
            c.create_stream(s, 1, cluster="alive-1")
        c.cordon_cluster("alive-2", False)
    # a group reading every stream, so that their old generations drain once sealed
    worker = WorkerSession(
        address, group="drainers", worker_id="w", subscriptions={s: ["realtime", "dlq"] for s in streams}
    )
    worker.join()
    threading.Thread(target=lambda: [None for _ in worker.events()], daemon=True).start()
    try:
        done = cli("cluster", "remove", "alive-1", coordinator=address)
        assert done.returncode == 5 and "undrained generation" in done.stderr
        done = cli(
            "cluster", "drain", "alive-1", "--to", "alive-2", "--timeout", "120", "--rate", "3000",
            coordinator=address, timeout=180,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert "[40/40]" in done.stderr and "drained [" in done.stderr
        assert "cluster alive-1 is drained: 40 lane(s) moved, 40 generation(s) drained" in done.stdout
        done = cli("cluster", "remove", "alive-1", coordinator=address)
        assert done.returncode == 0, done.stderr
        with CoordinatorClient(address) as c:
            assert "alive-1" not in {x.name for x in c.list_clusters()}
    finally:
        worker.close()


def test_a_drain_of_streams_no_group_reads_finishes_and_names_what_holds_unread_records(fleet, local_cluster) -> None:
    """Streams nobody wrote to and no group reads: their old generations hold nothing and drain at once, so the
    drain finishes and the cluster can be removed. A stream whose records no group has read makes the drain
    stop at once and say so, with the count and the way out, instead of waiting out its timeout."""
    address, _ = fleet
    with CoordinatorClient(address) as c:
        c.set_fleet_policy(model.FleetPolicy(frozen=True, max_failovers_per_minute=100))  # the operator drains
        for i in range(4):
            c.create_stream(f"idle-{i}", 2, cluster="alive-1")
    started = time.monotonic()
    done = cli(
        "cluster", "drain", "alive-1", "--to", "alive-2", "--timeout", "60", "--rate", "120",
        coordinator=address, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "cluster alive-1 is drained: 8 lane(s) moved, 8 generation(s) drained" in done.stdout
    assert "moving 8 lane(s) at 120 a minute" in done.stderr
    assert time.monotonic() - started >= 7 * 0.5, "8 lanes at 120 a minute: one every 0.5 s"
    done = cli("cluster", "remove", "alive-1", coordinator=address)
    assert done.returncode == 0, done.stderr

    bootstrap, control = local_cluster
    with CoordinatorClient(address) as c:
        c.register_cluster(
            model.Cluster("alive-3", bootstrap, admin=model.ADMIN_LOCAL, control_endpoint=control.endpoint)
        )
        c.create_stream("unread", 2, cluster="alive-2")
    with Producer(address, **{"linger.ms": 5}) as producer:
        for i in range(10):
            producer.produce("unread", b"%d" % i, key=b"%d" % i)
        assert producer.flush(30) == 0
    started = time.monotonic()
    done = cli(
        "cluster", "drain", "alive-2", "--to", "alive-3", "--timeout", "600", "--rate", "3000",
        coordinator=address, timeout=120,
    )  # fmt: skip
    assert done.returncode == 5, done.stdout + done.stderr
    assert "unread/realtime/g1 holds 10 record(s) no group has read" in done.stderr
    assert "streamplane generation abandon unread realtime 1" in done.stderr
    assert time.monotonic() - started < 60, "the drain waited instead of saying why"


def test_a_generation_on_a_cluster_gone_for_good_is_abandoned_with_its_unread_range_recorded(fleet) -> None:
    """Stranded data: the old generation cannot seal while its cluster is down; an operator gives it up."""
    address, _ = fleet
    with CoordinatorClient(address) as c:
        c.set_fleet_policy(model.FleetPolicy(frozen=True))
        c.create_stream("stranded", 2, cluster="dead")
        c.failover("stranded", "realtime", "alive-1", reason="dead is gone")
        lease = model.LeaseCommit("stranded/realtime/g1/p0", 0, model.Commit(acked=[(0, 40)], high_watermark=100))
        c.commit("reader", lease)  # a group had read 40 records of partition 0 before the cluster died
        with pytest.raises(FailedPreconditionError, match="only a draining or sealed generation"):
            c.abandon_generation("stranded", "realtime", 2, "wrong one")
        assert c.describe_stream("stranded").lane("realtime").generations[0].state == model.DRAINING  # type: ignore[union-attr]
    done = cli("generation", "abandon", "stranded", "realtime", "1", "--reason", "cluster dead decommissioned",
               coordinator=address)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "group reader p0: [40, ?)" in done.stdout
    with CoordinatorClient(address) as c:
        assert c.describe_stream("stranded").lane("realtime").generations[0].state == model.ABANDONED  # type: ignore[union-attr]
        event = [e for e in c.watch_topology("", follow=False) if isinstance(e, model.GenerationAbandoned)][-1]
        assert event.reason == "cluster dead decommissioned" and event.lost == ("group reader p0: [40, ?)",)
        # lost, not late: the lag leaves the abandoned partitions out, and `lag GROUP` lists what was lost
        assert [x.lease_id for x in c.lag("reader").partitions if "/g1/" in x.lease_id] == []
    shown = cli("lag", "reader", "--stream", "stranded", coordinator=address)
    assert shown.returncode == 0, shown.stderr
    assert "records of abandoned generations this group never processed" in shown.stdout
    assert "stranded/realtime/g1/p0  [40, ?)" in shown.stdout and "stranded/realtime/g1/p1  [0, ?)" in shown.stdout
    with CoordinatorClient(address) as c:
        assert (
            cli(
                "generation", "abandon", "stranded", "realtime", "1", "--reason", "again", coordinator=address
            ).returncode
            == 5
        )


def test_workers_tell_the_health_monitor_what_their_fetches_meet(fleet) -> None:
    from streamplane.client import Consumer

    address, _ = fleet
    with CoordinatorClient(address) as c:
        c.set_fleet_policy(model.FleetPolicy(frozen=True))
        c.create_stream("fetched", 1, cluster="dead")
        with Consumer(address, group="fetchers", stream="fetched") as consumer:
            consumer.dispatch.start("records")  # fetch without a handler: the fetch loop alone meets the dead cluster
            wait_until(
                lambda: any("1 worker(s) report fetch errors" in r for r in c.cluster_health("dead")[0].health_reasons),
                timeout=20,
                what=lambda: str(c.cluster_health("dead")[0].health_reasons),
            )
        assert not any("fetch errors" in r for r in c.cluster_health("alive-1")[0].health_reasons)


def test_producers_tell_the_health_monitor_what_they_see_of_a_cluster(fleet) -> None:
    from streamplane.client import Producer

    address, _ = fleet
    with CoordinatorClient(address) as c:
        c.set_fleet_policy(model.FleetPolicy(frozen=True))
        c.create_stream("told", 1, cluster="dead")
        producer = Producer(address, **{"message.timeout.ms": 60_000})
        try:
            producer.produce("told", b"x")
            wait_until(
                lambda: any("1 producer(s) report errors" in r for r in c.cluster_health("dead")[0].health_reasons),
                timeout=15,
                what=lambda: str(c.cluster_health("dead")[0].health_reasons),
            )
            assert not any("report errors" in r for r in c.cluster_health("alive-1")[0].health_reasons)
        finally:
            producer.close(timeout_s=0.5)  # its record cannot be delivered: the cluster is dead


BAD_ADDRESSES = [
    "127.0.0.1:100000000000000000000",  # a port of 10^20
    ":9092",  # an empty host
    "127.0.0.1:\uff19\uff10\uff19\uff12",  # full-width digits in the port
    "bad\x00host:9092",  # a NUL in the host
    "bad host:9092",  # a space in the host
    "127.0.0.1:0",
    "127.0.0.1:65536",
    "127.0.0.1",
    "[::1:9092",
    "300.1.1.1:9092",
    "a..b:9092",
]


def test_registrations_refuse_what_is_not_an_address_and_unknown_admin_kinds(fleet) -> None:
    from streamplane.errors import InvalidArgumentError
    from streamplane.v1 import topology_pb2 as pb

    address, _ = fleet
    with CoordinatorClient(address) as c:
        for bad in BAD_ADDRESSES:
            with pytest.raises(InvalidArgumentError, match="is not an address") as caught:
                c.register_cluster(model.Cluster("poison", bad))
            assert "cluster.bootstrap_servers" in caught.value.message, bad
        for kind in (99, -1, 2**31 - 1):
            request = pb.RegisterClusterRequest(
                cluster=pb.Cluster(name="poison", bootstrap_servers="127.0.0.1:9092", admin=kind)
            )
            with pytest.raises(InvalidArgumentError, match=f"cluster.admin {kind} is not a known admin kind"):
                c._call(c.topology.RegisterCluster, request)
        assert "poison" not in {x.name for x in c.list_clusters()}
        c.register_cluster(model.Cluster("fine", "broker-1.example.com:9092,[::1]:9093,10.0.0.1:19092"))
    shown = cli("cluster", "register", "poison", "--bootstrap", "127.0.0.1:99999", coordinator=address)
    assert shown.returncode == 2 and "is not an address" in shown.stderr and "Traceback" not in shown.stderr


def test_a_poisoned_cluster_in_the_store_does_not_stop_the_autopilot_moving_a_dead_clusters_lanes(fleet) -> None:
    """Entries written past the validation (an older coordinator's, or a bug's): probing them raises inside the
    pass. Before the fix the pass crashed on them every tick, and no lane anywhere moved."""
    from streamplane.coordinator.store.api import Transaction

    address, running = fleet

    def poison(tr: Transaction) -> None:
        for i, bad in enumerate(BAD_ADDRESSES[:5]):
            tr.set(keys.cluster_key(f"poison-{i}"), model.Cluster(f"poison-{i}", bad).to_json())

    from prometheus_client import REGISTRY

    def crashed() -> float:
        labels = {"loop": "autopilot", "kind": "crashed"}
        return REGISTRY.get_sample_value("streamplane_loop_pass_failures_total", labels) or 0.0

    before = crashed()
    running.db.transact(poison)
    with CoordinatorClient(address) as c:
        # five poisoned entries are unhealthy beside the dead cluster: past the default unhealthy share (0.5) the
        # autopilot would move nothing by design; this test is about one entry never stopping the pass
        c.set_fleet_policy(model.FleetPolicy(max_unhealthy_fraction=1.0))
        c.create_stream("ap-poisoned", 2, cluster="dead")
        c.set_stream_policy("ap-poisoned", model.FailoverPolicy(unhealthy_after_ms=1_000))

        def moved() -> bool:
            lane = c.describe_stream("ap-poisoned").require_lane("realtime")
            return lane.active.cluster in ("alive-1", "alive-2")

        wait_until(moved, timeout=30, what=lambda: str(c.describe_stream("ap-poisoned")))
        poisoned = c.cluster_health("poison-0")[1]
        assert poisoned and not poisoned[-1].reachable and "the probe failed" in poisoned[-1].error
    assert crashed() == before, "an autopilot pass crashed"


def test_an_evacuation_creates_at_most_the_ceiling_of_topics_a_second_on_each_target(tmp_path: Path) -> None:
    """60 lanes leave dead cluster a for b and c (equal capacity): no target gets more than 5 topic creations
    in any second, the rest wait, saying why, and every lane has left within the seconds that pace allows."""
    db = open_store(StoreConfig(driver="embedded", data_dir=tmp_path))
    clock = ManualClock(T0)
    topology = Topology(db, MemoryClusterAdmin(), clock)
    for name in "abc":
        topology.register_cluster(model.Cluster(name, f"{name}:9092"))
    for i in range(30):
        topology.create_stream(f"paced-{i:02d}", 1, "a")
    for i in range(30):
        topology.set_stream_policy(f"paced-{i:02d}", model.FailoverPolicy(unhealthy_after_ms=1_000))

    def probe(cluster: Cluster, *, timeout_s: float, now_ms: int, topics: bool) -> Probe:
        name = cluster.name
        return Probe(name, now_ms, name != "a", brokers=3, error="refused" if name == "a" else "")

    config = AutopilotConfig(probe_interval_ms=200, target_creations_per_s=5)
    pilot = Autopilot(topology, lambda: True, config, clock=clock, probe=probe, canary=None)
    waited: list[str] = []
    try:
        for _ in range(100):
            pilot.run_once()
            wait_until(lambda: all(f.done() for f in pilot._running.values()), timeout=5)
            pilot.run_once()
            waited += pilot.waiting
            clock.advance(200)
        moved = [e for e in topology.read_events_and_watch(None, limit=10_000)[0] if isinstance(e, model.FailedOver)]
        assert len(moved) == 60, "every lane left a"
        per_second: dict[tuple[str, int], int] = {}
        for e in moved:
            for start in range(e.time_ms - 999, e.time_ms + 1):  # every one-second window holding it
                key = (e.current.cluster, start)
                per_second[key] = per_second.get(key, 0) + 1
        assert max(per_second.values()) <= 5, "a target took more than its ceiling in a second"
        assert {e.current.cluster for e in moved} == {"b", "c"}
        assert any("topic creations a second on one target at most" in w for w in waited)
        span_s = (max(e.time_ms for e in moved) - min(e.time_ms for e in moved)) / 1000
        assert span_s <= 60 / 10 + 1, f"the pace is the ceiling's, not slower: {span_s} s"
    finally:
        pilot.stop()
        db.close()


class _RefusingTarget(MemoryClusterAdmin):
    """Kafka in memory, where cluster `refusing` does not take a topic while `refuse` is set (its leaders do
    not serve, say); every try counted."""

    def __init__(self) -> None:
        super().__init__()
        self.refuse = True
        self.tries = 0
        self.batches: list[tuple[str, int]] = []  # (cluster, topics) of each ensure_topics

    def ensure_topics(self, cluster: model.Cluster, topics: Sequence[TopicSpec]) -> dict[str, StreamplaneError]:
        self.batches.append((cluster.name, len(topics)))
        if cluster.name == "buggy":
            raise RuntimeError("a bug in the admin")
        return super().ensure_topics(cluster, topics)

    def ensure_topic(self, cluster: model.Cluster, topic: str, partitions: int, settings: object = None) -> None:
        if cluster.name == "refusing":
            self.tries += 1
            if self.refuse:
                raise UnavailableError(f"topic {topic} on cluster refusing: its leaders do not serve it")
        super().ensure_topic(cluster, topic, partitions)


def test_a_target_that_does_not_take_a_topic_is_tried_once_a_pass_and_again_without_a_topology_change(
    tmp_path: Path,
) -> None:
    """Eight lanes leave dead cluster a for the one other cluster, which does not take topics for a while: a pass
    tries it once (each try can last the admin's timeout, and the pass serves the fleet), says why the lanes
    wait, and tries again a second later although nothing in the topology changed; once it takes topics, every
    lane leaves."""
    db = open_store(StoreConfig(driver="embedded", data_dir=tmp_path))
    clock = ManualClock(T0)
    admin = _RefusingTarget()
    topology = Topology(db, admin, clock)
    topology.register_cluster(model.Cluster("a", "a:9092"))
    topology.register_cluster(model.Cluster("refusing", "r:9092"))
    for i in range(4):
        topology.create_stream(f"refused-{i}", 1, "a")
        topology.set_stream_policy(f"refused-{i}", model.FailoverPolicy(unhealthy_after_ms=1_000))

    def probe(cluster: Cluster, *, timeout_s: float, now_ms: int, topics: bool) -> Probe:
        name = cluster.name
        return Probe(name, now_ms, name != "a", brokers=3, error="refused" if name == "a" else "")

    pilot = Autopilot(
        topology, lambda: True, AutopilotConfig(probe_interval_ms=200), clock=clock, probe=probe, canary=None
    )

    def moved() -> list[model.FailedOver]:
        return [e for e in topology.read_events_and_watch(None, limit=1_000)[0] if isinstance(e, model.FailedOver)]

    def passes(seconds: float) -> None:
        for _ in range(int(seconds * 5)):
            pilot.run_once()
            wait_until(lambda: all(f.done() for f in pilot._running.values()), timeout=5)
            pilot.run_once()
            clock.advance(200)

    try:
        passes(3)  # a is unhealthy past its second: every pass tries the target once
        assert admin.tries and not moved()
        assert admin.tries <= 3, f"{admin.tries} tries in 3 s: the target is tried once a pass, at most once a second"
        assert any("refusing" in w and "leaders do not serve" in w for w in pilot.waiting), pilot.waiting
        admin.refuse = False
        admin.batches.clear()
        passes(2)
        assert len(moved()) == 8, "every lane left once the target took topics, with no topology change between"
        assert admin.batches[0] == ("refusing", 8), "the lanes' topics were asked of the target together"
    finally:
        pilot.stop()
        db.close()


def test_many_lanes_fail_over_together_and_one_lanes_error_holds_back_none_of_the_others(tmp_path: Path) -> None:
    """`failover_many` (the autopilot's pass): the topics of the lanes bound for one target are asked of it in one
    request; each move gets its own result in its place: a target that does not take topics fails its lanes
    only (tried once), an unknown stream and a move onto the lane's own cluster fail alone, and the others
    commit their FailedOver with their reason; a bug creating one target's topics fails that target's lanes only, and
    so does a stream whose stored record does not decode (a torn write)."""
    db = open_store(StoreConfig(driver="embedded", data_dir=tmp_path))
    admin = _RefusingTarget()
    topology = Topology(db, admin, ManualClock(T0))
    for name in ("a", "b", "refusing", "buggy"):
        topology.register_cluster(model.Cluster(name, f"{name}:9092"))
    for i in range(6):
        topology.create_stream(f"s{i}", 2, "a")
    topology.create_stream("torn", 2, "a")
    db.transact(lambda tr: tr.set(keys.stream_key("torn"), b'{"name": "torn", "topic": 7'))
    admin.batches.clear()
    moves = [
        health.Move("s0", "realtime", "a", "b", "a is down"),
        health.Move("s1", "realtime", "a", "refusing", "a is down"),
        health.Move("ghost", "realtime", "a", "b", "a is down"),
        health.Move("s2", "realtime", "a", "b", "a is down"),
        health.Move("s3", "realtime", "a", "refusing", "a is down"),
        health.Move("s4", "realtime", "a", "a", "a is down"),
        health.Move("s5", "dlq", "a", "b", "a is down"),
        health.Move("s5", "realtime", "a", "buggy", "a is down"),
        health.Move("torn", "realtime", "a", "b", "a is down"),
    ]
    try:
        results = topology.failover_many(moves, actor=AUTOPILOT)
        assert isinstance(results.pop(), Exception), "the torn stream's lane fails alone"
        kinds = [type(r).__name__ for r in results]
        assert kinds == [
            "Committed",
            "UnavailableError",
            "NotFoundError",
            "Committed",
            "UnavailableError",
            "FailedPreconditionError",
            "Committed",
            "RuntimeError",
        ]
        assert sorted(admin.batches) == [("b", 3), ("buggy", 1), ("refusing", 2)] and admin.tries == 1
        moved = [e for e in topology.read_events_and_watch(None, limit=1_000)[0] if isinstance(e, model.FailedOver)]
        assert [(e.stream, e.lane, e.current.cluster, e.current.number, e.reason) for e in moved] == [
            ("s0", "realtime", "b", 2, "a is down"),
            ("s2", "realtime", "b", 2, "a is down"),
            ("s5", "dlq", "b", 2, "a is down"),
        ]
        assert {(c, t) for c, t in admin.topics if c == "b"} == {
            ("b", "sp.s0.realtime.g2"),
            ("b", "sp.s2.realtime.g2"),
            ("b", "sp.s5.dlq.g2"),
        }
        assert topology.get_stream("s1").require_lane("realtime").active.cluster == "a", "a refused lane stays"
    finally:
        db.close()
