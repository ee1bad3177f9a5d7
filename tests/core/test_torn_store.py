"""Bad data already in the store never stops a loop that serves the whole fleet.

A world with a history users make (two clusters, streams failed over and drained, groups with members, leases,
progress, retries, rejects, a split partition, a rewind, a producer session) is built by the real coordinator
code. Then every value in the store is torn in turn, one at a time (bytes that do not decode, and JSON of the
wrong shape), and each of the coordinator's fleet-wide loops makes a pass over it (the Assigner, the sealer,
the autopilot, the group reaper, the lag sweep), as do the reads every client, scrape or console page shares
(the topology watch, the fleet metrics, every group's lag, the console's pages). None of them may raise: a
pass that raises is retried every interval, and so stops the loop for every group and stream behind the one
torn value. The value is put back before the next one is torn. Then what each torn record is read as, where
guessing could lose data: a torn lease, member or producer session.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from streamplane import model
from streamplane.clock import ManualClock
from streamplane.coordinator import keys
from streamplane.coordinator.commitlog import log as commitlog
from streamplane.coordinator.commitlog import redrive
from streamplane.coordinator.commitlog.lag_sweep import LagSweeper
from streamplane.coordinator.console.history import LagHistory
from streamplane.coordinator.console.views import Views
from streamplane.coordinator.groups import config as group_config
from streamplane.coordinator.groups import rewind, window
from streamplane.coordinator.groups.assigner import Assigner
from streamplane.coordinator.groups.lifecycle import GroupReaper
from streamplane.coordinator.groups.timing import AssignerConfig
from streamplane.coordinator.rpc import metrics
from streamplane.coordinator.store import Database
from streamplane.coordinator.topology.autopilot import Autopilot, AutopilotConfig
from streamplane.coordinator.topology.sealing import Sealer, SealingConfig
from streamplane.model import DRAINING, Cluster, Commit, Probe, Reject, Retry, RewindTarget, RewindTo, Subscription
from tests.helpers import Domain, host_of, wait_until

T0 = 1_800_000_000_000
TORN = (b"{torn", b"null", b"[1, 2]", b"7", b'"text"', b"\xff\x00\x01")
"""What a value may be that no code of ours writes: not JSON, and JSON of every wrong shape."""


class World:
    """The history-rich store, and the coordinator's loops over it (one replica, a manual clock)."""

    def __init__(self, path: Path) -> None:
        self.producing = False
        self.d = Domain(path, clock=ManualClock(T0))
        d, clock = self.d, self.d.clock
        d.cluster("east", "west").stream("logs", 2, cluster="east").stream("metrics", 2, cluster="east")
        self.assigner = Assigner(d.db, AssignerConfig(ttl_ms=10_000, join_window_ms=0), replica_id="r", clock=clock)
        self.sealer = Sealer(d.db, d.admin, lambda: True, SealingConfig(), clock=clock)
        self.reaper = GroupReaper(d.db, lambda: True, clock=clock)
        self.sweeper = LagSweeper(d.db, clock)
        self.views = Views(d.topology, self.assigner, LagHistory(self.sweep_lag, clock=clock), clock)

        def probe(cluster: Cluster, *, timeout_s: float, now_ms: int, topics: bool) -> Probe:
            name = cluster.name
            return Probe(name, now_ms, name != "west", brokers=1, error="refused" if name == "west" else "")

        self.pilot = Autopilot(
            d.topology, lambda: True, AutopilotConfig(probe_interval_ms=1000), clock=clock, probe=probe, canary=None
        )
        for p in range(2):
            d.admin.append("east", "sp.logs.realtime.g1", p, 20, ts_ms=T0)
            d.admin.append("east", "sp.metrics.realtime.g1", p, 20, ts_ms=T0)
        host = host_of(self.assigner)
        self.sessions = [
            host.open_session("billing", w, [Subscription("logs")], capacity=1.0, max_load=0.0, takes_slices=True)
            for w in ("w1", "w2")
        ] + [host.open_session("audit", "a1", [Subscription("metrics")], capacity=1.0, max_load=0.0)]
        self.passes(5)
        for group in ("billing", "audit", "replay"):
            for lease in self.assigner.describe(group).leases:
                c = Commit(
                    acked=[(0, 5)],
                    retries=[Retry(5, 1, "slow")],
                    rejects=[Reject(6, "bad record")],
                    high_watermark=20,
                )
                commitlog.commit(d.db, group, lease.lease_id, lease.epoch, c, now_ms=clock.now_ms())
        group_config.configure(d.db, "billing", split=("logs/realtime/g1/p0", 2))
        self.producing = True
        self.passes(5)
        held = {x.lease_id for x in self.assigner.describe("billing").leases if x.state == "granted"}
        assert {"logs/realtime/g1/p0/s0of2", "logs/realtime/g1/p0/s1of2"} <= held, held
        d.topology.failover("logs", "realtime", "west", reason="history")
        d.admin.append("west", "sp.logs.realtime.g2", 0, 10, ts_ms=T0 + 1000)
        self.passes(5)
        window.create(d.db, d.admin, "replay", "metrics", from_ms=T0 - 1, until_ms=T0 + 1, now_ms=clock.now_ms())
        self.sessions.append(host.open_session("replay", "r1", [Subscription("metrics")], capacity=1.0, max_load=0.0))
        target = model.RedriveTarget("logs", "realtime", 2, "sp.logs.realtime.g2", "west:9092", (0, 0))
        redrive.claim(d.db, "logs", "billing", "run-1", target=target, now_ms=clock.now_ms())
        d.topology.cordon("west")
        d.topology.set_stream_policy("metrics", model.FailoverPolicy(unhealthy_after_ms=2_000))
        planned = rewind.plan(d.db, d.admin, "audit", "metrics", RewindTarget(RewindTo.EARLIEST), now_ms=clock.now_ms())
        d.db.transact(lambda tr: rewind.apply(tr, planned, actor="ops", now_ms=clock.now_ms()))
        self.passes(5)

    def passes(self, n: int) -> None:
        """Every loop's pass, with the workers beating and handing back what is revoked at once."""
        for _ in range(n):
            self.d.clock.advance(500)
            for _, run in self.loops():
                run()
            self.keep_alive()
            for group in ("billing", "audit", "replay"):
                for lease in self.assigner.describe(group).leases:
                    session = next((x for x in self.sessions if x.worker_id == lease.worker_id), None)
                    if lease.state == "revoking" and session is not None:
                        session.release(lease.lease_id, lease.epoch)

    def keep_alive(self) -> None:
        """The workers and a producer on logs beat."""
        for session in self.sessions:
            session.heartbeat(model.Heartbeat())
        if self.producing:
            errors = [model.ClusterErrors("west", 3, "refused")]
            self.sealer.producer_heartbeat("p1", "", [], streams=["logs"], errors=errors)

    def tear(self, tr: Any, key: bytes, torn: bytes) -> None:
        """Put `torn` under `key`, and have every group looked at again (its version moves on), so each
        group's pass reads what it reads on a change."""
        tr.set(key, torn)
        for group in ("billing", "audit", "replay"):
            counter = keys.group_version_key(group)
            if counter != key:
                tr.add(counter, 1)

    def sweep_lag(self) -> model.Lag:
        return self.sweeper.lag(self.d.clock.now_ms())

    def sweep(self) -> None:
        """A pass of the lag sweep, as while someone reads lag (a scrape, the console)."""
        self.sweeper.lag(self.d.clock.now_ms())
        self.sweeper.step()

    def loops(self) -> list[tuple[str, Callable[[], object]]]:
        def pilot() -> None:
            self.pilot.run_once()
            wait_until(lambda: all(f.done() for f in self.pilot._running.values()), timeout=5)
            self.pilot.run_once()

        d = self.d
        return [
            ("assigner", self.assigner.run_once),
            ("sealer", self.sealer.run_once),
            ("autopilot", pilot),
            ("reaper", self.reaper.run_once),
            ("lag sweep", self.sweep),
            # reads every client, scrape or console page shares: one torn record must not fail them for all
            ("fleet metrics", lambda: (d.topology.list_clusters(), d.topology.generation_counts())),
            ("topology watch", lambda: d.topology.read_events_and_watch(None, limit=1000)),
            ("lag of every group", lambda: commitlog.lag_of_every_group(d.db, now_ms=d.clock.now_ms())),
            ("console fleet page", self.views.fleet),
            ("console streams page", self.views.streams),
            ("console groups page", self.views.groups),
        ]

    @property
    def db(self) -> Database:
        return self.d.db

    def close(self) -> None:
        self.pilot.stop()
        self.d.close()


@pytest.fixture
def world(tmp_path: Path) -> World:
    built = World(tmp_path)
    yield built  # type: ignore[misc]
    built.close()


STREAM_RECORDS = {"stream", "lane", "gen"}
"""A stream's own records: while one is torn, the groups reading the stream hold still (their passes fail with a
sentence naming the stream, counted), and the other groups go on."""


def space(key: bytes) -> str:
    """The key space a key is in (its first element after the root)."""
    return str(keys.ROOT.unpack(key)[0])


def group_failures() -> float:
    return float(metrics.LOOP_FAILURES.labels("assigner", "group_failed")._value.get())


def test_no_fleet_loop_is_stopped_by_any_one_torn_value_in_the_store(world: World) -> None:
    everything = world.db.transact(lambda tr: tr.get_range(b"", b"\xff\xff\xff"))
    assert len(everything) > 80, "the world holds a history"
    failures: Counter[str] = Counter()
    for key, value in everything:
        for torn, step_ms in itertools.product(TORN, (10, 4_000)):  # 4 s: past every periodic read (the leader)
            world.db.transact(lambda tr, key=key, torn=torn: world.tear(tr, key, torn))
            world.d.clock.advance(step_ms)
            for name, run in world.loops():
                try:
                    before = group_failures()
                    run()
                    if group_failures() != before and space(key) not in STREAM_RECORDS:
                        failures[f"{name}: {key[:60]!r} = {torn!r}: a group's pass failed"] += 1
                except Exception as err:
                    failures[f"{name}: {key[:60]!r} = {torn!r}: {type(err).__name__}: {str(err)[:100]}"] += 1
            world.db.transact(lambda tr, key=key, value=value: tr.set(key, value))
            world.keep_alive()
    print("\n".join(failures))
    assert not failures, "\n".join(failures)


def test_a_group_whose_stream_record_is_torn_holds_still_and_every_other_group_is_still_assigned(
    world: World,
) -> None:
    """Group "audit" (the first the Assigner passes over) reads a stream whose record does not decode: its
    pass fails with a sentence, is counted, and leaves its leases where they are; group "billing" after it is
    still assigned (a worker leaves, the other takes its partitions)."""
    failed = metrics.LOOP_FAILURES.labels("assigner", "group_failed")
    before = failed._value.get()
    audit = {x.lease_id: x.worker_id for x in world.assigner.describe("audit").leases}
    world.db.transact(lambda tr: tr.set(keys.stream_key("metrics"), b"{torn"))
    world.db.transact(lambda tr: tr.add(keys.group_version_key("audit"), 1))  # its pass reads the stream again
    world.sessions.pop(1).close("stopped")  # w2 of billing
    world.passes(5)
    assert failed._value.get() > before, "the torn group's failed passes are counted"
    billing = {x.lease_id: x.worker_id for x in world.assigner.describe("billing").leases if x.state != "free"}
    assert billing and set(billing.values()) == {"w1"}, billing
    assert {x.lease_id: x.worker_id for x in world.assigner.describe("audit").leases} == audit


def test_a_torn_member_or_lease_costs_no_other_worker_its_heartbeat(world: World) -> None:
    """A replica writes its sessions' heartbeats in batches: one worker's torn member record, and another's
    torn lease it reports a load for, leave every other heartbeat of the batch written; the worker whose member
    is torn is told its session ended (it joins again)."""
    import json

    from streamplane.coordinator.groups.sessions.writer import SessionWriter

    def alive_until(group: str, worker: str) -> int:
        raw = world.db.transact(lambda tr: tr.get(keys.member_key(group, worker)))
        return int(json.loads(raw)["alive_until_ms"])

    w1, w2, a1 = world.sessions[:3]
    held = next(x for x in world.assigner.describe("billing").leases if x.worker_id == "w2")
    world.db.transact(lambda tr: tr.set(keys.member_key("billing", "w1"), b"{torn"))
    world.db.transact(lambda tr: tr.set(keys.lease_key("billing", *held.partition), b"[1, 2]"))
    before = {"w2": alive_until("billing", "w2"), "a1": alive_until("audit", "a1")}
    writer = SessionWriter(world.db, ttl_ms=10_000, flush_ms=60_000, clock=world.d.clock)
    writer.start()  # batched from now on: nothing is written until the flush below
    fenced: list[str] = []
    try:
        world.d.clock.advance(1000)
        report = model.Heartbeat(leases=((held.lease_id, model.LeaseLoad(100.0, 5, 50)),))
        for session, beat in ((w1, model.Heartbeat()), (w2, report), (a1, model.Heartbeat())):
            writer.heartbeat(
                session.group,
                session.worker_id,
                session.session_id,
                beat,
                lambda err, w=session.worker_id: fenced.append(w),
            )
        writer.flush()
    finally:
        writer.stop()
    assert alive_until("billing", "w2") > before["w2"] and alive_until("audit", "a1") > before["a1"]
    assert fenced == ["w1"], "the worker whose member is torn is told to join again"


@pytest.mark.parametrize("met_by", ["commit", "commit batch", "load report", "nothing"])
def test_a_torn_lease_is_granted_again_and_its_last_holder_is_fenced(world: World, met_by: str) -> None:
    """A lease that does not decode is read free at an epoch above any it had: its last holder's commits are
    fenced, and the partition is granted again above that epoch. The owner's state of the group still has it
    held (a torn value is no change it follows): the holder's fenced commit, or its next load report, has the
    owner read it again at its next pass. Met by nobody, the owner reads it at its periodic rebuild (RESYNC_MS,
    10 min), as at a restart or a move of the group."""
    from streamplane.coordinator.commitlog.service import CommitLog
    from streamplane.coordinator.groups import leases, state
    from streamplane.errors import FencedError

    held = next(x for x in world.assigner.describe("audit").leases if x.state == "granted" and x.slice is None)
    world.db.transact(lambda tr: tr.set(keys.lease_key("audit", *held.partition), b"{torn"))
    world.passes(3)
    with pytest.raises(FencedError):
        leases.check_lease(world.db, "audit", held.lease_id, held.epoch)
    log, c = CommitLog(world.db, clock=world.d.clock), Commit(acked=[(5, 6)], high_watermark=20)
    if met_by == "commit":
        with pytest.raises(FencedError):
            log.commit("audit", held.lease_id, held.epoch, c)
    elif met_by == "commit batch":
        (outcome,) = log.commit_many("audit", [(held.lease_id, held.epoch, c)])
        assert isinstance(outcome.error, FencedError)
    elif met_by == "load report":
        (session,) = [x for x in world.sessions if x.worker_id == held.worker_id]
        session.heartbeat(model.Heartbeat(leases=((held.lease_id, model.LeaseLoad(10.0, 5, 50)),)))
    world.passes(3)
    again = next(x for x in world.assigner.describe("audit").leases if x.lease_id == held.lease_id)
    if met_by == "nothing":
        assert again.state == "free", "read free, and granted to nobody: nothing told the owner of the change"
        world.d.clock.advance(state.RESYNC_MS)
        world.passes(3)
        again = next(x for x in world.assigner.describe("audit").leases if x.lease_id == held.lease_id)
    assert again.state == "granted" and again.epoch > held.epoch


def test_a_lease_a_newer_coordinator_wrote_with_more_fields_is_read_as_it_is() -> None:
    """Not torn: a rolling upgrade's newer replica may store fields this code does not know; they are left out,
    and the lease keeps its holder and epoch (read as torn, every lease would be fenced)."""
    from streamplane.coordinator.groups.leases import lease_from

    key = keys.lease_key("g", "logs", "realtime", 1, 0)
    lease = lease_from(key, b'{"epoch": 3, "state": "granted", "worker_id": "w1", "added_later": [1]}')
    assert (lease.lease_id, lease.epoch, lease.state, lease.worker_id) == ("logs/realtime/g1/p0", 3, "granted", "w1")


@pytest.mark.parametrize("producer_lives", [True, False])
def test_a_torn_producer_session_holds_back_seals_for_one_ttl_and_no_longer(
    tmp_path: Path, producer_lives: bool
) -> None:
    """What a torn producer session said is lost, so it may still write to the generation a failover leaves: the
    sealer writes it again as one that holds back every seal for one TTL. Its producer's next heartbeat writes
    it anew (the seal goes on as soon as it routes by the failover); a producer that is gone lets it expire."""
    from streamplane.coordinator.topology import events

    d = Domain(tmp_path, clock=ManualClock(T0))
    try:
        d.cluster("a", "b").stream("s", 1, cluster="a")
        sealer = Sealer(d.db, d.admin, lambda: True, SealingConfig(producer_ttl_ms=10_000), clock=d.clock)
        sealer.producer_heartbeat("p1", "", [], streams=["s"])
        d.db.transact(lambda tr: tr.set(keys.producer_key("p1"), b"{torn"))
        d.topology.failover("s", "realtime", "b", reason="test")
        for _ in range(8):  # 8 s of a 10 s TTL
            sealer.run_once()
            d.clock.advance(1000)
        assert first_generation_state(d) == DRAINING, "held back while the torn session may still write"
        if producer_lives:
            sealer.producer_heartbeat("p1", d.db.transact(events.head_version), [], streams=["s"])
            sealer.run_once()
            assert first_generation_state(d) != DRAINING, "sealed once its producer routes by the failover"
        else:
            for _ in range(3):
                sealer.run_once()
                d.clock.advance(1000)
            assert first_generation_state(d) != DRAINING, "sealed once the torn session expired"
    finally:
        d.close()


def first_generation_state(d: Domain) -> str:
    from streamplane.coordinator.topology.records import get_stream

    gen = get_stream(d.db, "s").require_lane("realtime").generation(1)
    assert gen is not None
    return str(gen.state)
