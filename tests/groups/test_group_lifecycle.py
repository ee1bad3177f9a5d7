"""A group's end: `group delete`, and expiry after staying inactive, free the generations it held back.

Transaction-level rules run on the embedded store with a manual clock and an in-memory stand-in for Kafka;
a hypothesis model plays groups reading, failovers, seals and deletions in any order and holds the sealer to
one rule. The end-to-end test deletes a retired group over the CLI on a real coordinator and cluster, and the
drain it blocked finishes.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from streamplane import model
from streamplane.client import CoordinatorClient, Producer, WorkerSession
from streamplane.clock import ManualClock
from streamplane.coordinator import keys
from streamplane.coordinator.commitlog import log as commitlog
from streamplane.coordinator.groups import config as group_config
from streamplane.coordinator.groups import leases
from streamplane.coordinator.groups import lifecycle as group_lifecycle
from streamplane.coordinator.groups.config import DAY_MS
from streamplane.coordinator.rpc import server
from streamplane.coordinator.store import Database, StoreConfig, open_store
from streamplane.coordinator.topology import events
from streamplane.coordinator.topology.cluster_admin import RoutingAdmin
from streamplane.coordinator.topology.records import get_stream
from streamplane.coordinator.topology.sealing import Sealer, SealingConfig
from streamplane.coordinator.topology.topology import Topology
from streamplane.errors import FailedPreconditionError, FencedError, InvalidArgumentError, NotFoundError
from streamplane.model import DRAINED, SEALED, Commit, GroupDeleted, Heartbeat, Subscription
from streamplane.testing.cluster_admin import MemoryClusterAdmin
from tests.helpers import Domain, cli, wait_until

TTL_MS = 10_000


@dataclass
class World:
    db: Database
    admin: MemoryClusterAdmin
    clock: ManualClock
    topology: Topology
    sealer: Sealer

    def read(self, group: str, partition: int, upto: int, number: int = 1) -> None:
        """`group` processed `logs/realtime/g<number>` partition `partition` up to `upto` (an unmanaged group,
        as a Spark query commits)."""
        lid = f"logs/realtime/g{number}/p{partition}"
        commitlog.commit(
            self.db, group, lid, 0, Commit(acked=[(0, upto)], high_watermark=upto), now_ms=self.clock.now_ms()
        )

    def state(self, number: int) -> str:
        lane = get_stream(self.db, "logs").lane("realtime")
        assert lane is not None
        gen = lane.generation(number)
        assert gen is not None
        return gen.state

    def seal_g1(self) -> None:
        self.topology.failover("logs", "realtime", "west", reason="test")
        self.sealer.run_once()
        self.sealer.run_once()
        assert self.state(1) == SEALED

    def delete(self, group: str, **kw: object) -> GroupDeleted:
        return group_lifecycle.delete_group(self.db, group, now_ms=self.clock.now_ms(), **kw)  # type: ignore[arg-type]

    def join(self, group: str, worker: str) -> leases.Member:
        member = leases.join(
            self.db,
            group,
            worker,
            f"s-{worker}",
            [Subscription("logs", ("realtime",))],
            capacity=1.0,
            max_load=0.0,
            now_ms=self.clock.now_ms(),
            ttl_ms=TTL_MS,
        )
        assert member is not None
        return member


def _world(path: Path) -> World:
    d = Domain(path).cluster("east", "west").stream("logs", 2, "east")
    d.admin.append("east", "sp.logs.realtime.g1", 0, 3)
    d.admin.append("east", "sp.logs.realtime.g1", 1, 2)
    sealer = Sealer(d.db, d.admin, lambda: True, SealingConfig(producer_ttl_ms=TTL_MS), clock=d.clock)
    return World(d.db, d.admin, d.clock, d.topology, sealer)


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    w = _world(tmp_path)
    yield w
    w.db.close()


def _keys_of(db: Database, group: str) -> list[bytes]:
    """Every key of the store that belongs to `group` (beyond its two monotonic counters)."""
    counters = {keys.group_version_key(group), keys.group_event_head_key(group)}
    found = []
    r = keys.ROOT.range()
    for key, _ in db.transact(lambda tr: tr.get_range(r.start, r.stop)):
        t = keys.decode_key(key)
        if len(t) > 2 and t[2] == group and key not in counters:
            found.append(key)
    return found


def test_a_retired_groups_deletion_lets_the_generation_it_held_back_drain(world: World) -> None:
    world.read("retired", 0, 1)  # it read one record of g1's partition 0, then its application was retired
    world.seal_g1()
    world.sealer.run_once()
    assert world.state(1) == SEALED, "the group has not read g1 to its end"
    deleted = world.delete("retired", reason="app decommissioned", actor="ops")
    assert deleted.generations == ("logs/realtime/g1",) and deleted.members == () and not deleted.expired
    assert _keys_of(world.db, "retired") == [], "nothing it kept is left"
    world.sealer.run_once()
    assert world.state(1) == DRAINED
    logged = [e for e in events.read_events(world.db, None) if isinstance(e, GroupDeleted)]
    assert [(e.group, e.reason, e.actor) for e in logged] == [("retired", "app decommissioned", "ops")]
    assert world.db.transact(lambda tr: tr.get(keys.retired_reader_key("logs", "realtime", 1))) is None


def test_a_group_is_described_as_unknown_until_it_reads_or_a_worker_joins_and_again_once_deleted(
    world: World,
) -> None:
    """`group describe` of a mistyped name says it does not exist (exit 3) rather than showing an empty group: the
    description says whether the group is known, by the same rule a deletion applies."""
    from streamplane.coordinator.groups.assigner import Assigner
    from streamplane.coordinator.groups.timing import AssignerConfig

    assigner = Assigner(world.db, AssignerConfig(ttl_ms=TTL_MS), replica_id="r", clock=world.clock)
    assert assigner.describe("typo").unknown
    world.read("spark", 0, 1)  # an unmanaged group: progress only
    assert not assigner.describe("spark").unknown
    world.join("managed", "w1")
    described = assigner.describe("managed")
    assert not described.unknown and [m.worker_id for m in described.members] == ["w1"]
    world.delete("spark")
    assert assigner.describe("spark").unknown


def test_a_deleted_reader_does_not_let_a_generation_drain_before_the_groups_left_have_read_it(world: World) -> None:
    world.read("retired", 0, 3)
    world.read("live", 0, 3)
    world.seal_g1()
    world.delete("retired")
    world.sealer.run_once()
    assert world.state(1) == SEALED, "group live has not read partition 1"
    world.read("live", 1, 2)
    world.sealer.run_once()
    assert world.state(1) == DRAINED


def test_a_generation_no_group_ever_read_still_waits_after_an_unrelated_group_is_deleted(world: World) -> None:
    world.seal_g1()
    world.read("other", 0, 1, number=2)  # it reads only the new generation
    assert world.delete("other").generations == ()
    world.sealer.run_once()
    assert world.state(1) == SEALED, "no group read g1: its records stay for groups still to come"


def test_delete_is_refused_while_members_are_live_and_force_ends_their_sessions(world: World) -> None:
    world.join("busy", "w1")
    with pytest.raises(FailedPreconditionError, match=r"group 'busy' has 1 live member\(s\) \(w1\)"):
        world.delete("busy")
    assert leases.read_members(world.db, "busy"), "a refused deletion changes nothing"
    deleted = world.delete("busy", force=True)
    assert deleted.members == ("w1",)
    with pytest.raises(FencedError, match="has ended"):
        leases.heartbeat(world.db, "busy", "w1", "s-w1", Heartbeat(), now_ms=world.clock.now_ms(), ttl_ms=TTL_MS)
    assert _keys_of(world.db, "busy") == []


def test_a_member_past_its_ttl_does_not_hold_a_deletion_back(world: World) -> None:
    world.join("gone", "w1")
    world.clock.advance(TTL_MS + 1)
    assert world.delete("gone").members == ()


def test_bad_deletions_say_why_in_one_sentence_and_change_nothing(world: World) -> None:
    world.read("kept", 0, 1)
    with pytest.raises(NotFoundError, match="group 'nobody' does not exist"):
        world.delete("nobody")
    with pytest.raises(InvalidArgumentError, match="is not a valid name"):
        world.delete("bad name")
    with pytest.raises(InvalidArgumentError, match="at most 1024"):
        world.delete("kept", reason="x" * 2000)
    assert commitlog.read_groups_with_progress(world.db) == ["kept"]


def test_an_inactive_group_expires_after_its_period_and_one_with_a_live_member_does_not(world: World) -> None:
    group_config.configure(world.db, "idle", expire_after=60_000)
    group_config.configure(world.db, "busy", expire_after=60_000)
    world.read("idle", 0, 1)
    world.join("busy", "w1")
    assert group_lifecycle.expire_groups(world.db, world.clock.now_ms()) == [], "first sight: their clocks start"
    world.clock.advance(59_999)
    assert group_lifecycle.expire_groups(world.db, world.clock.now_ms()) == []
    world.clock.advance(1)
    leases.heartbeat(world.db, "busy", "w1", "s-w1", Heartbeat(), now_ms=world.clock.now_ms(), ttl_ms=TTL_MS)
    expired = group_lifecycle.expire_groups(world.db, world.clock.now_ms())
    assert [(e.group, e.expired, e.reason) for e in expired] == [("idle", True, "no member and no commit for 60 s")]
    assert commitlog.read_groups_with_progress(world.db) == []
    # busy's member stops heartbeating: its session ends at the TTL, and the group expires a period later
    world.clock.advance(TTL_MS)
    leases.expire(world.db, "busy", world.clock.now_ms())
    world.clock.advance(59_999)
    assert group_lifecycle.expire_groups(world.db, world.clock.now_ms()) == []
    world.clock.advance(1)
    assert [e.group for e in group_lifecycle.expire_groups(world.db, world.clock.now_ms())] == ["busy"]


def test_commits_keep_a_group_from_expiring_and_write_nothing_more_for_it(world: World) -> None:
    """A group with no members (a Spark query) that keeps committing never expires; once it stops, it expires
    its period after its last commit. Commits write nothing for this: the reaper reads the time of the group's
    newest commit from its progress, and only for a group whose last-seen time is past its expiry."""
    group_config.configure(world.db, "spark-q", expire_after=120_000)
    group_lifecycle.expire_groups(world.db, world.clock.now_ms())  # its clock starts
    seen = world.db.transact(lambda tr: tr.get(keys.group_seen_key("spark-q")))
    for k in range(1, 7):  # a commit every 40 s for 240 s: past its expiry since the first, never idle that long
        world.clock.advance(40_000)
        world.read("spark-q", 0, k)
        assert world.db.transact(lambda tr: tr.get(keys.group_seen_key("spark-q"))) == seen or k > 3, (
            "a commit writes no last-seen time of its own"
        )
        assert group_lifecycle.expire_groups(world.db, world.clock.now_ms()) == []
    world.clock.advance(119_999)
    assert group_lifecycle.expire_groups(world.db, world.clock.now_ms()) == []
    world.clock.advance(1)
    assert [e.group for e in group_lifecycle.expire_groups(world.db, world.clock.now_ms())] == ["spark-q"]


def test_the_default_expiry_is_seven_days_and_never_means_never(world: World) -> None:
    world.read("default", 0, 1)
    world.read("forever", 0, 1)
    group_config.configure(world.db, "forever", expire_after=group_config.NEVER)
    group_lifecycle.expire_groups(world.db, world.clock.now_ms())
    world.clock.advance(7 * DAY_MS - 1)
    assert group_lifecycle.expire_groups(world.db, world.clock.now_ms()) == []
    world.clock.advance(1)
    assert [e.group for e in group_lifecycle.expire_groups(world.db, world.clock.now_ms())] == ["default"]
    world.clock.advance(3000 * DAY_MS)
    assert group_lifecycle.expire_groups(world.db, world.clock.now_ms()) == []
    for bad in (999, -2, 3661 * DAY_MS):
        with pytest.raises(InvalidArgumentError, match="expire_after_ms must be between"):
            group_config.configure(world.db, "forever", expire_after=bad)
    with pytest.raises(InvalidArgumentError, match="lane is required"):
        group_config.configure(world.db, "forever", attempts=3)


class DeletionHistories(RuleBasedStateMachine):
    """Groups read the old generation's partitions in any order, and are deleted (by hand or by expiry) before,
    during or after the failover and the seal. The rule held at every step: g1 is drained exactly when it is
    sealed empty, or it was read by some group (live or deleted) and every live group that read it has read
    it to its end."""

    GROUPS = ("a", "b", "c")
    ENDS = (3, 2)

    def __init__(self) -> None:
        super().__init__()
        import tempfile

        self._dir = tempfile.TemporaryDirectory()
        self.w = _world(Path(self._dir.name))
        self.read_upto: dict[str, list[int]] = {}  # live groups that read g1: how far, per partition
        self.retired = False  # a deleted group had read g1 while it was unsettled
        self.failed_over = False
        self.seen_drained = False

    @initialize(empty=st.booleans())
    def start(self, empty: bool) -> None:
        if empty:  # the sealed generation holds nothing
            self.w.admin.topics[("east", "sp.logs.realtime.g1")] = [0, 0]
            self.ends = (0, 0)
        else:
            self.ends = self.ENDS

    @rule(group=st.sampled_from(GROUPS), partition=st.sampled_from([0, 1]), step=st.integers(1, 3))
    def read(self, group: str, partition: int, step: int) -> None:
        if self.w.state(1) == DRAINED:
            return  # nobody is granted a drained generation any more
        done = self.read_upto.setdefault(group, [0, 0])
        upto = min(self.ENDS[partition], done[partition] + step)
        self.w.read(group, partition, upto)
        done[partition] = upto

    @rule(group=st.sampled_from(GROUPS), by_expiry=st.booleans())
    def delete(self, group: str, by_expiry: bool) -> None:
        known = group in self.read_upto
        if by_expiry:
            deleted = []
            if known:
                group_config.configure(self.w.db, group, expire_after=1_000)
                # its clock starts now, unless an earlier pass started it (then it may expire at once)
                deleted += [e.group for e in group_lifecycle.expire_groups(self.w.db, self.w.clock.now_ms())]
                self.w.clock.advance(1_000)
            deleted += [e.group for e in group_lifecycle.expire_groups(self.w.db, self.w.clock.now_ms())]
            assert deleted == ([group] if known else [])
        elif known:
            self.w.delete(group)
        else:
            with pytest.raises(NotFoundError):
                self.w.delete(group)
        if known:
            # only a generation unsettled at the deletion is marked: records written to g1 after it were read
            # by nobody, and stay for groups still to come
            self.retired = self.retired or (self.failed_over and self.w.state(1) != DRAINED)
            del self.read_upto[group]

    @precondition(lambda self: not self.failed_over)
    @rule()
    def failover(self) -> None:
        self.w.topology.failover("logs", "realtime", "west", reason="test")
        self.failed_over = True

    @rule()
    def sealer_pass(self) -> None:
        self.w.sealer.run_once()

    @invariant()
    def drained_exactly_when_nobody_needs_it(self) -> None:
        state = self.w.state(1)
        if state != DRAINED or self.seen_drained:
            return  # checked when it became drained; it stays so
        self.seen_drained = True
        assert self.failed_over
        readers = {g: upto for g, upto in self.read_upto.items()}
        read_by_someone = bool(readers) or self.retired
        assert not any(self.ends) or (
            read_by_someone and all(upto[p] >= end for upto in readers.values() for p, end in enumerate(self.ends))
        ), f"drained while needed: readers {readers}, retired {self.retired}, ends {self.ends}"

    @invariant()
    def never_stuck_once_nobody_needs_it(self) -> None:
        """After a sealer pass or two, a sealed g1 that nobody needs any more is drained."""
        if self.w.state(1) != SEALED:
            return
        readers = self.read_upto
        finished = (bool(readers) or self.retired) and all(
            upto[p] >= end for upto in readers.values() for p, end in enumerate(self.ends)
        )
        if finished or not any(self.ends):
            self.w.sealer.run_once()
            assert self.w.state(1) == DRAINED, f"stuck sealed: readers {readers}, retired {self.retired}"
            # drained here, by this check, exactly when nobody needed it: the invariant above, which looks at a
            # generation when it is first seen drained, must not judge it later against readers deleted since
            self.seen_drained = True

    def teardown(self) -> None:
        self.w.db.close()
        self._dir.cleanup()


DeletionHistories.TestCase.settings = settings(
    max_examples=100, stateful_step_count=30, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
test_deletion_histories = DeletionHistories.TestCase


def test_a_retired_group_is_deleted_over_the_cli_and_the_drain_it_blocked_finishes(
    tmp_path: Path, local_cluster
) -> None:
    """A group read a stream, then its application was retired; after a failover its old generation waits for
    it, so `cluster drain` cannot finish. `group delete` is refused while its worker lives, then succeeds, and
    the drain finishes; `events` shows the deletion."""
    bootstrap, control = local_cluster
    running = server.start(
        open_store(StoreConfig(driver="embedded", data_dir=tmp_path / "db")),
        admin=RoutingAdmin(),
        control_endpoints=[control.endpoint],
    )
    address = running.address
    try:
        with CoordinatorClient(address) as c:
            c.set_fleet_policy(model.FleetPolicy(frozen=True))  # the operator drains
            for name in ("old-dc", "new-dc"):
                c.register_cluster(
                    model.Cluster(name, bootstrap, admin=model.ADMIN_LOCAL, control_endpoint=control.endpoint)
                )
            c.create_stream("gl-logs", 2, cluster="old-dc")
        with Producer(address, **{"linger.ms": 5}) as producer:
            for i in range(20):
                producer.produce("gl-logs", b"%d" % i, key=b"%d" % i)
            assert producer.flush(30) == 0
        with CoordinatorClient(address) as c:
            # the retired application had processed part of partition 0 (records it will never finish)
            c.commit(
                "gl-retired",
                model.LeaseCommit("gl-logs/realtime/g1/p0", 0, model.Commit(acked=[(0, 1)], high_watermark=5)),
            )
        worker = WorkerSession(
            address, group="gl-retired", worker_id="last-pod", subscriptions={"gl-logs": ["realtime"]}
        )
        worker.join()
        threading.Thread(target=lambda: [None for _ in worker.events()], daemon=True).start()
        try:
            done = cli("group", "delete", "gl-retired", coordinator=address)
            assert done.returncode == 5, done.stdout + done.stderr
            assert "has 1 live member(s) (last-pod): stop its workers first" in done.stderr
        finally:
            worker.close()
        done = cli("cluster", "drain", "old-dc", "--to", "new-dc", "--timeout", "3", coordinator=address, timeout=60)
        assert done.returncode != 0 and "gl-retired" in done.stdout + done.stderr, "the drain names what it waits for"
        done = cli("group", "delete", "gl-retired", "--reason", "app retired", coordinator=address)
        assert done.returncode == 0, done.stderr
        assert "deleted group gl-retired" in done.stdout and "gl-logs/realtime/g1" in done.stdout
        done = cli("cluster", "drain", "old-dc", "--to", "new-dc", "--timeout", "60", coordinator=address, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "generation(s) drained" in done.stdout
        assert cli("cluster", "remove", "old-dc", coordinator=address).returncode == 0
        shown = cli("events", coordinator=address)
        assert "group_deleted gl-retired (deleted: app retired)" in shown.stdout
        with CoordinatorClient(address) as c:
            wait_until(lambda: c.lag("gl-retired").partitions == (), what=lambda: "the group's progress is gone")
    finally:
        running.stop(0)


def test_bad_entries_in_the_store_never_stop_other_groups_expiring(world: World) -> None:
    """A last-seen time or settings no reader can use (a bug, a hand edit) hold back only their own group."""
    for group in ("idle", "bad-seen", "bad-config"):
        world.read(group, 0, 1)
        group_config.configure(world.db, group, expire_after=60_000)
    group_lifecycle.expire_groups(world.db, world.clock.now_ms())  # every clock starts
    world.db.transact(lambda tr: tr.set(keys.group_seen_key("bad-seen"), b"not json"))
    world.db.transact(lambda tr: tr.set(keys.group_config_key("bad-config"), b"[1, 2]"))
    world.clock.advance(60_000)
    assert [e.group for e in group_lifecycle.expire_groups(world.db, world.clock.now_ms())] == ["idle"]
    world.clock.advance(60_000)  # the unreadable last-seen time was started again a period ago
    assert [e.group for e in group_lifecycle.expire_groups(world.db, world.clock.now_ms())] == ["bad-seen"]


def test_the_history_hypothesis_found_a_group_deleted_once_its_reads_drained_the_generation() -> None:
    """Pinned: after the failover and the seal, group b reads g1 to its end (a sealer pass drains it), then is
    deleted. The model judged the drain after the deletion, against no readers, and called it early."""
    state = DeletionHistories()
    checks = (state.drained_exactly_when_nobody_needs_it, state.never_stuck_once_nobody_needs_it)
    steps = [
        lambda: state.start(empty=False),
        state.failover,
        state.sealer_pass,
        state.sealer_pass,
        lambda: state.read(group="b", partition=0, step=3),
        lambda: state.read(group="b", partition=1, step=2),
        lambda: state.delete(by_expiry=False, group="b"),
    ]
    try:
        for step in steps:
            step()
            for check in checks:
                check()
        assert state.w.state(1) == DRAINED and state.seen_drained
    finally:
        state.teardown()
