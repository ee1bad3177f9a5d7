"""Split partitions, through the Assigner's own loop: a partition split by hand is leased in key slices to
different workers, each slice fenced by its own epoch; holders that go are replaced; a merge hands the
partition back whole only once every slice is free; and at no point do two live leases cover one offset,
whatever history of joins, leaves, splits and merges a user makes (a hypothesis model). A manual clock drives
the real coordinator code."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamplane.clock import ManualClock
from streamplane.coordinator import keys
from streamplane.coordinator.commitlog import log as commitlog
from streamplane.coordinator.groups import config as group_config
from streamplane.coordinator.groups import leases, slices
from streamplane.coordinator.groups.assigner import Assigner
from streamplane.coordinator.groups.sessions.host import Session
from streamplane.coordinator.groups.timing import AssignerConfig
from streamplane.coordinator.rpc import metrics
from streamplane.coordinator.store import Database
from streamplane.coordinator.topology import events
from streamplane.errors import FencedError, InvalidArgumentError, NotFoundError
from streamplane.model import SETTLED, Commit, Heartbeat, LeaseInfo, LeaseLoad, Subscription
from tests.helpers import Domain, host_of

GROUP = "hot"
P0, P1 = "logs/realtime/g1/p0", "logs/realtime/g1/p1"
STEP_MS = 100


class Group:
    """Workers of one group that hand every revoked lease back at once."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.clock = ManualClock()
        self.assigner = Assigner(db, AssignerConfig(ttl_ms=10_000, join_window_ms=0), replica_id="r", clock=self.clock)
        self.sessions: dict[str, Session] = {}
        self.stalled: set[str] = set()
        """Workers that never hand a revoked lease back (their revokes are forced at the deadline)."""

    def join(self, worker: str, *, takes_slices: bool = True) -> None:
        self.sessions[worker] = host_of(self.assigner).open_session(
            GROUP, worker, [Subscription("logs")], capacity=1.0, max_load=0.0, takes_slices=takes_slices
        )

    def leave(self, worker: str) -> None:
        self.sessions.pop(worker).close("stopped")

    def split(self, lid: str, n: int) -> None:
        group_config.configure(self.db, GROUP, split=(lid, n))

    def leases(self) -> list[LeaseInfo]:
        return list(self.assigner.describe(GROUP).leases)

    def run(self, passes: int = 20) -> None:
        for _ in range(passes):
            self.clock.advance(STEP_MS)
            self.assigner.run_once()
            check_one_holder(self.held())
            for x in self.leases():
                if x.state == "revoking" and x.worker_id in self.sessions and x.worker_id not in self.stalled:
                    self.sessions[x.worker_id].release(x.lease_id, x.epoch)

    def held(self) -> dict[str, tuple[str, int]]:
        """{lease id: (holder, epoch)} of the leases held (granted or revoking)."""
        return {x.lease_id: (x.worker_id, x.epoch) for x in self.leases() if x.state != "free"}


def check_one_holder(held: dict[str, tuple[str, int]]) -> None:
    """Every offset has one live holder at most: a partition is held whole or in the slices of one split,
    never both, and never two slices of it by one worker."""
    for part in {lid.split("/s")[0] for lid in held}:
        mine = {lid: who for lid, (who, _) in held.items() if lid == part or lid.startswith(part + "/")}
        if part in mine:
            assert len(mine) == 1, f"{part} is held whole and in slices at once: {mine}"
        counts = {lid.rsplit("of", 1)[1] for lid in mine if "/s" in lid}
        assert len(counts) <= 1, f"{part} has slices of two splits held at once: {mine}"
        holders = list(mine.values())
        assert len(holders) == len(set(holders)), f"one worker holds two slices of {part}: {mine}"


@pytest.fixture
def db(domain: Domain) -> Database:
    return domain.cluster("c").stream("logs", 2).db


def test_a_split_partition_is_leased_in_slices_to_different_workers_once_its_whole_lease_is_free(
    db: Database,
) -> None:
    g = Group(db)
    for w in ("w1", "w2", "w3"):
        g.join(w)
    g.run()
    whole_epoch = g.held()[P0][1]
    g.split(P0, 2)
    g.run()
    held = g.held()
    assert P0 not in held, "the whole lease is given up before any slice is granted"
    a, b = held[P0 + "/s0of2"], held[P0 + "/s1of2"]
    assert a[0] != b[0], "two slices of one partition never go to one worker"
    assert min(a[1], b[1]) > whole_epoch, "a slice's epoch is above every epoch its partition had"
    assert P1 in held, "the other partition is not touched"
    changes = [e.change for e in events.read_group_events(db, GROUP, None)]
    assert slices.SPLIT in changes
    assert metrics.SLICES.labels(GROUP)._value.get() == 2, "streamplane_slices says how many slices are leased"


def test_a_holder_slow_to_hand_the_whole_lease_back_keeps_it_until_its_deadline_and_no_slice_starts_before(
    db: Database,
) -> None:
    g = Group(db)
    for w in ("w1", "w2"):
        g.join(w)
    g.run()
    holder = g.held()[P0][0]
    g.stalled.add(holder)
    g.split(P0, 2)
    g.run(5)  # 0.5 s: within the revoke's deadline
    held = g.held()
    assert held[P0][0] == holder and not [lid for lid in held if "/s" in lid]
    g.run(120)  # past it (and past the owner's first TTL, a grace in which no revoke is forced): forced
    assert {lid for lid in g.held() if lid.startswith(P0)} == {P0 + "/s0of2", P0 + "/s1of2"}


def test_the_consoles_group_page_lists_each_split_partitions_slices_and_their_holders(db: Database) -> None:
    from streamplane.coordinator.console.history import LagHistory
    from streamplane.coordinator.console.views import Views
    from streamplane.coordinator.topology.topology import Topology
    from streamplane.model import Lag
    from streamplane.testing.cluster_admin import MemoryClusterAdmin

    g = Group(db)
    for w in ("w1", "w2"):
        g.join(w)
    g.split(P0, 2)
    g.run()
    history = LagHistory(lambda: Lag(""), clock=g.clock)
    page = Views(Topology(db, MemoryClusterAdmin(), g.clock), g.assigner, history, g.clock).group(GROUP)
    ((split,),) = [page["slices"]]
    assert split["partition"] == P0
    assert [(x["slice"], x["state"]) for x in split["slices"]] == [("s0of2", "granted"), ("s1of2", "granted")]
    assert {x["worker_id"] for x in split["slices"]} == {"w1", "w2"}


def test_a_rewind_of_a_split_partition_grants_each_slice_again_at_a_new_epoch(domain: Domain, db: Database) -> None:
    """A rewind reopens what the slices finished: each slice's holder starts over at once, at a new epoch (what
    it still handles of the old one is fenced), and the partition's progress goes back for every slice."""
    from streamplane.coordinator.groups import rewind
    from streamplane.model import RewindTarget, RewindTo

    g = Group(db)
    for w in ("w1", "w2"):
        g.join(w)
    g.split(P0, 2)
    g.run()
    domain.admin.append("c", "sp.logs.realtime.g1", 0, 10, ts_ms=g.clock.now_ms())
    before = {lid: hold for lid, hold in g.held().items() if lid.startswith(P0 + "/")}
    for lid, (_, epoch) in before.items():
        commitlog.commit(db, GROUP, lid, epoch, Commit(acked=[(0, 10)], high_watermark=10), now_ms=g.clock.now_ms())
    ref = leases.parse_lease_id(P0)
    target = RewindTarget(RewindTo.OFFSETS, offsets={ref: 0})
    rewind.rewind_group(db, domain.admin, GROUP, "logs", target, force=True, actor="ops", now_ms=g.clock.now_ms())
    after = {lid: hold for lid, hold in g.held().items() if lid.startswith(P0 + "/")}
    assert {lid: (who, epoch + 1) for lid, (who, epoch) in before.items()} == after, "same holders, new epochs"
    for lid, (_, epoch) in before.items():
        with pytest.raises(FencedError):
            commitlog.commit(db, GROUP, lid, epoch, Commit(acked=[(0, 1)], high_watermark=10), now_ms=g.clock.now_ms())
    assert db.transact(lambda tr: commitlog.read_header(tr, GROUP, ref)).low == 0


def test_each_slice_is_fenced_by_its_own_epoch_and_the_old_whole_lease_by_its_own(db: Database) -> None:
    g = Group(db)
    for w in ("w1", "w2"):
        g.join(w)
    g.run()
    old_epoch = g.held()[P0][1]
    g.split(P0, 2)
    g.run()
    s0, s1 = P0 + "/s0of2", P0 + "/s1of2"
    _, epoch = g.held()[s0]
    commit = Commit(acked=[(0, 1)], high_watermark=10)
    done = commitlog.commit(db, GROUP, s0, epoch, commit, now_ms=g.clock.now_ms())
    assert done.low_watermark == 1
    with pytest.raises(FencedError):
        commitlog.commit(db, GROUP, s1, epoch - 1, commit, now_ms=g.clock.now_ms())
    with pytest.raises(FencedError):
        commitlog.commit(db, GROUP, P0, old_epoch, commit, now_ms=g.clock.now_ms())
    with pytest.raises(FencedError, match="no longer split"):
        commitlog.commit(db, GROUP, P0 + "/s0of4", epoch, commit, now_ms=g.clock.now_ms())


def test_the_partitions_time_lag_is_its_oldest_slices(db: Database) -> None:
    g = Group(db)
    for w in ("w1", "w2"):
        g.join(w)
    g.split(P0, 2)
    g.run()
    now = g.clock.now_ms()
    s0, s1 = P0 + "/s0of2", P0 + "/s1of2"
    behind = Commit(acked=[(0, 1)], high_watermark=10, oldest_pending_ts_ms=now - 60_000)
    commitlog.commit(db, GROUP, s0, g.held()[s0][1], behind, now_ms=now)
    ahead = Commit(acked=[(1, 2)], high_watermark=10, oldest_pending_ts_ms=now - 1_000)
    commitlog.commit(db, GROUP, s1, g.held()[s1][1], ahead, now_ms=now)
    header = db.transact(lambda tr: commitlog.read_header(tr, GROUP, leases.parse_lease_id(P0)))
    assert header.oldest_pending_ts_ms == now - 60_000, "the slice ahead does not hide the one behind"
    assert header.low == 2


def test_a_slice_whose_holder_leaves_goes_to_a_worker_not_holding_the_other(db: Database) -> None:
    g = Group(db)
    for w in ("w1", "w2", "w3"):
        g.join(w)
    g.split(P0, 2)
    g.run()
    s0, s1 = P0 + "/s0of2", P0 + "/s1of2"
    gone, epoch = g.held()[s0]
    g.leave(gone)
    g.run()
    held = g.held()
    assert held[s0][0] not in (gone, held[s1][0])
    assert held[s0][1] > epoch


def test_a_merge_returns_the_partition_whole_only_once_every_slice_is_free_and_above_their_epochs(
    db: Database,
) -> None:
    g = Group(db)
    for w in ("w1", "w2"):
        g.join(w)
    g.split(P0, 2)
    g.run()
    top = max(epoch for lid, (_, epoch) in g.held().items() if "/s" in lid)
    g.split(P0, 1)
    g.clock.advance(STEP_MS)
    g.assigner.run_once()  # the slices are revoking: nothing else holds the partition yet
    held = g.held()
    assert P0 not in held and {lid for lid in held if "/s" in lid} == {P0 + "/s0of2", P0 + "/s1of2"}
    g.run()
    held = g.held()
    assert not [lid for lid in held if "/s" in lid]
    assert held[P0][1] > top
    assert slices.MERGED in [e.change for e in events.read_group_events(db, GROUP, None)]
    assert metrics.SLICES.labels(GROUP)._value.get() == 0


def test_a_worker_that_does_not_read_slices_is_never_granted_one(db: Database) -> None:
    """A worker of a client that does not read slices (its hello does not say takes_slices: the Go client)
    would handle every record of the partition: it gets whole partitions only."""
    g = Group(db)
    g.join("w1")
    g.join("w2")
    g.join("go", takes_slices=False)
    g.split(P0, 3)
    g.run()
    held = {lid: who for lid, (who, _) in g.held().items() if lid.startswith(P0)}
    assert set(held) == {P0 + "/s0of2", P0 + "/s1of2"} and "go" not in held.values()


def test_a_split_waits_for_a_second_reader(db: Database) -> None:
    g = Group(db)
    g.join("w1")
    g.split(P0, 4)
    g.run()
    assert set(g.held()) == {P0, P1}, "one worker cannot take two slices: the partition stays whole"
    g.join("w2")
    g.run()
    held = g.held()
    assert {lid for lid in held if lid.startswith(P0)} == {P0 + "/s0of2", P0 + "/s1of2"}


@pytest.mark.parametrize(
    ("split", "error", "text"),
    [
        ((P0, 0), InvalidArgumentError, "2 to 4 slices"),
        ((P0, 5), InvalidArgumentError, "2 to 4 slices"),
        (("logs/realtime/g1/p9", 2), NotFoundError, "not a partition"),
        (("logs/realtime/g7/p0", 2), NotFoundError, "not a partition"),
        ((P0 + "/s0of2", 2), InvalidArgumentError, "names a partition"),
        (("nope", 2), InvalidArgumentError, "is not of the form"),
    ],
)
def test_a_bad_split_is_refused_in_one_sentence_and_changes_nothing(
    db: Database, split: tuple[str, int], error: type[Exception], text: str
) -> None:
    with pytest.raises(error, match=text):
        group_config.configure(db, GROUP, split=split)
    with pytest.raises(InvalidArgumentError, match="max_slices must be between 1"):
        group_config.configure(db, GROUP, max_slices=17)
    assert db.transact(lambda tr: tr.get(keys.group_config_key(GROUP))) is None, "nothing was written"


class Loaded(Group):
    """Workers that report their leases' load every pass: `behind` says how far each partition is (lag ms,
    records) and at what rate it goes, as a holder would measure it."""

    def __init__(self, db: Database) -> None:
        super().__init__(db)
        self.load: dict[str, LeaseLoad] = {}
        """{partition: the load its holders report}; a slice reports its share."""

    def run(self, passes: int = 20) -> None:
        for _ in range(passes):
            super().run(1)
            for worker, session in self.sessions.items():
                mine = [x for x in self.leases() if x.worker_id == worker and x.state == "granted"]
                beats = []
                for x in mine:
                    load = self.load.get(x.partition.lease_id, LeaseLoad())
                    share = x.slice.count if x.slice is not None else 1
                    beats.append((x.lease_id, LeaseLoad(load.records_per_s / share, load.lag_records, load.lag_ms)))
                session.heartbeat(Heartbeat(leases=tuple(beats)))

    def changes(self) -> list[str]:
        return [e.change for e in events.read_group_events(self.db, GROUP, None)]


def test_a_partition_that_stays_behind_is_split_across_the_workers_keeping_up_and_merged_when_load_falls(
    db: Database,
) -> None:
    g = Loaded(db)
    for w in ("w1", "w2", "w3"):
        g.join(w)
    g.run()
    assert P0 in g.held()
    g.load[P0] = LeaseLoad(500, 20_000, 8_000)
    g.run(10)  # 1 s: not yet confirmed
    assert P0 in g.held() and slices.HOT not in g.changes()
    g.run(30)
    split = {lid: who for lid, (who, _) in g.held().items() if lid.startswith(P0 + "/")}
    assert set(split) == {P0 + "/s0of3", P0 + "/s1of3", P0 + "/s2of3"}, "a slice per worker keeping up, and its own"
    assert len(set(split.values())) == 3
    (hot,) = [e for e in events.read_group_events(db, GROUP, None) if e.change == slices.HOT]
    assert "8.0 s behind" in hot.reason and "split into 3 slices" in hot.reason
    g.load[P0] = LeaseLoad(450, 10, 100)  # caught up, but still most of what it carried: stays split
    g.run(400)
    assert P0 not in g.held()
    g.load[P0] = LeaseLoad(90, 0, 0)  # the load fell
    g.run(200)  # 20 s: not yet long enough
    assert P0 not in g.held()
    g.run(200)
    held = g.held()
    assert P0 in held and not [lid for lid in held if "/s" in lid], "merged back whole"
    assert slices.COOLED in g.changes()


def test_the_holders_of_a_hot_partitions_slices_give_their_other_partitions_to_the_workers_without_one(
    domain: Domain,
) -> None:
    """The slices' load counts in the balance: four workers read eight partitions of 10 records/s, and p0, split
    in two, carries 300 (150 a slice). Its two slice holders carry more than their share with their slices
    alone, so the seven other partitions go to the two other workers (counted by partitions alone, as before,
    the slice holders kept some of them beside their slices)."""
    db = domain.cluster("c").stream("logs", 8).db
    g = Loaded(db)
    for w in ("w1", "w2", "w3", "w4"):
        g.join(w)
    for p in range(8):
        g.load[f"logs/realtime/g1/p{p}"] = LeaseLoad(10, 0, 0)
    g.run()
    g.split(P0, 2)
    g.load[P0] = LeaseLoad(300, 0, 0)
    g.run(300)  # 30 s: past the rebalance's confirmation and its moves' cool-down
    held = g.held()
    slice_holders = {held[P0 + "/s0of2"][0], held[P0 + "/s1of2"][0]}
    whole = {lid: who for lid, (who, _) in held.items() if "/s" not in lid}
    assert len(whole) == 7 and not slice_holders & set(whole.values()), (slice_holders, whole)
    assert sorted(Counter(whole.values()).values()) == [3, 4]


def test_slices_go_to_the_workers_with_the_least_load_not_the_fewest_leases(domain: Domain) -> None:
    """Three workers read seven partitions: p1 carries 300 records/s and is held alone, the others 10 each. A
    split of p0 in two gives its slices to the two workers holding the light partitions, not to p1's holder,
    which has the fewest leases (counted by leases, as before, it took one)."""
    db = domain.cluster("c").stream("logs", 7).db
    g = Loaded(db)
    for w in ("w1", "w2", "w3"):
        g.join(w)
    for p in range(7):
        g.load[f"logs/realtime/g1/p{p}"] = LeaseLoad(300 if p == 1 else 10, 0, 0)
    g.run(300)  # past the rebalance's confirmation and its moves' cool-down
    busy = g.held()[P1][0]
    assert [lid for lid, (who, _) in g.held().items() if who == busy] == [P1], "p1's holder holds it alone"
    g.split(P0, 2)
    g.run()
    held = g.held()
    slice_holders = {held[P0 + "/s0of2"][0], held[P0 + "/s1of2"][0]}
    assert busy not in slice_holders and len(slice_holders) == 2


def test_a_partition_catching_up_on_its_own_or_without_other_readers_is_not_split(db: Database) -> None:
    g = Loaded(db)
    g.join("w1")
    g.run()
    g.load[P0] = LeaseLoad(500, 20_000, 8_000)
    g.run(40)
    assert P0 in g.held(), "nobody else reads it"
    g.load[P0] = LeaseLoad(500, 0, 0)  # caught up (a pass sees it: loads are looked at every rebalance_ms)
    g.run(10)
    g.join("w2")
    g.run(5)
    for behind in range(20_000, 0, -500):  # behind, but catching up
        g.load[P0] = LeaseLoad(500, behind, 8_000)
        g.run(1)
    assert not [lid for lid in g.held() if "/s" in lid] and slices.HOT not in g.changes()
    group_config.configure(db, GROUP, max_slices=1)
    g.load[P0] = LeaseLoad(500, 20_000, 8_000)
    g.run(40)
    assert not [lid for lid in g.held() if "/s" in lid], "max_slices 1: never split"


def test_torn_split_settings_and_a_torn_slice_lease_stop_neither_the_groups_pass_nor_its_split(db: Database) -> None:
    """Bad data already in the store (a split entry and a slice lease no code of ours writes so): the owner's
    pass goes on, the torn entry is left alone, and the torn slice lease is replaced by a good one."""
    g = Group(db)
    for w in ("w1", "w2"):
        g.join(w)
    g.split(P0, 2)

    def poison(tr: Any) -> None:
        config = json.loads(tr.get(keys.group_config_key(GROUP)))
        config["splits"]["logs/realtime/g1/p1"] = "many"
        config["auto_splits"] = {"not a partition": {"slices": 2}, P1: {}}
        tr.set(keys.group_config_key(GROUP), json.dumps(config).encode())
        tr.set(keys.slice_lease_key(GROUP, "logs", "realtime", 1, 0, 1), b"{torn")

    db.transact(poison)
    g.run()
    held = g.held()
    assert {lid for lid in held if lid.startswith(P0)} == {P0 + "/s0of2", P0 + "/s1of2"}
    assert P1 in held, "the partition with the torn entry is read whole"


def test_a_split_by_hand_over_torn_split_settings_replaces_them(db: Database) -> None:
    """Settings no code of ours writes (`splits` and `auto_splits` that are not mappings): a split by hand is
    still applied, not refused as an internal error."""
    g = Group(db)
    for w in ("w1", "w2"):
        g.join(w)

    def poison(tr: Any) -> None:
        raw = tr.get(keys.group_config_key(GROUP))
        config = json.loads(raw) if raw is not None else {}
        config.update(splits=["torn"], auto_splits="torn")
        tr.set(keys.group_config_key(GROUP), json.dumps(config).encode())

    db.transact(poison)
    group_config.configure(db, GROUP, split=(P0, 2))
    g.run()
    assert {lid for lid in g.held() if lid.startswith(P0)} == {P0 + "/s0of2", P0 + "/s1of2"}


ACTIONS = st.lists(
    st.one_of(
        st.tuples(st.just("join"), st.sampled_from(["w1", "w2", "w3", "w4"])),
        st.tuples(st.just("leave"), st.sampled_from(["w1", "w2", "w3", "w4"])),
        st.tuples(st.just("split"), st.sampled_from([0, 1]), st.integers(1, 4)),
        st.tuples(st.just("pass"), st.integers(1, 12)),
        st.tuples(st.just("stall"), st.sampled_from(["w1", "w2", "w3", "w4"])),
        st.tuples(st.just("late"), st.integers(0, 3)),
        st.tuples(st.just("failover")),
        st.tuples(st.just("seal")),
    ),
    min_size=6,
    max_size=25,
)


@settings(max_examples=150, deadline=None)
@given(actions=ACTIONS)
def test_any_history_of_joins_leaves_splits_merges_and_failovers_never_gives_one_offset_two_live_holders(
    actions: list[tuple[Any, ...]],
) -> None:
    """Splits name the lane's active generation's partitions; failovers move the lane between two clusters and
    seal passes drain what is left behind, before, during and after splits."""
    from streamplane.coordinator.topology.records import get_stream
    from streamplane.coordinator.topology.sealing import Sealer, SealingConfig

    d = Domain()  # in memory, one per example
    try:
        db = d.cluster("c", "d").stream("logs", 3).db
        g = Group(db)
        sealer = Sealer(db, d.admin, lambda: True, SealingConfig(), clock=d.clock)
        on = "c"

        def lane() -> Any:
            return get_stream(db, "logs").require_lane("realtime")

        fenced_ids: list[tuple[str, int]] = []  # (lease id, epoch) of leases that ended: never valid again
        seen: dict[str, int] = {}
        for action in actions:
            kind = action[0]
            if kind == "join" and action[1] not in g.sessions:
                g.join(action[1])
            elif kind == "leave" and action[1] in g.sessions:
                g.leave(action[1])
            elif kind == "split":
                g.split(f"logs/realtime/g{lane().active.number}/p{action[1]}", action[2])
            elif kind == "failover":
                on = "d" if on == "c" else "c"
                d.topology.failover("logs", "realtime", on, reason="model")
            elif kind == "seal":
                sealer.run_once()
            elif kind == "pass":
                g.run(action[1])
            elif kind == "stall":
                g.stalled ^= {action[1]}
            elif kind == "late" and fenced_ids:
                lid, epoch = fenced_ids[action[1] % len(fenced_ids)]
                with pytest.raises(FencedError):
                    leases.check_lease(db, GROUP, lid, epoch)
            held = g.held()
            for lid, epoch in seen.items():
                if held.get(lid, ("", -1))[1] != epoch:
                    fenced_ids.append((lid, epoch))
            seen = {lid: epoch for lid, (_, epoch) in held.items()}
            check_one_holder(held)
        g.stalled.clear()
        g.run(5)
        settled = {f"g{gen.number}" for gen in lane().generations if gen.state in SETTLED}
        assert not [lid for lid in g.held() if lid.split("/")[2] in settled], "a drained generation is not held"
        group_config.configure(db, GROUP, max_slices=4)  # as does the Assigner's pass over split partitions
        config = json.loads(db.transact(lambda tr: tr.get(keys.group_config_key(GROUP))) or b"{}")
        kept = [*config.get("splits", {}), *config.get("auto_splits", {})]
        assert not [lid for lid in kept if lid.split("/")[2] in settled], "a drained generation's split is forgotten"
    finally:
        d.close()


def test_splits_of_a_drained_generation_are_forgotten_after_a_failover(domain: Domain) -> None:
    """A stream split by hand and for load fails over and its old generation drains: the splits of the drained
    partitions leave the group's settings (they would otherwise linger and count towards its limit), and the
    new generation's partitions split as any other."""
    from streamplane.coordinator.topology.records import get_stream
    from streamplane.coordinator.topology.sealing import Sealer, SealingConfig
    from streamplane.model import DRAINED

    db = domain.cluster("c", "d").stream("logs", 2).db
    g = Group(db)
    for w in ("w1", "w2"):
        g.join(w)
    g.split(P0, 2)

    def auto_split(tr: Any) -> None:  # as the Assigner writes a split for load
        config = json.loads(tr.get(keys.group_config_key(GROUP)))
        config["auto_splits"] = {P1: {"slices": 2, "rate": 1000.0}}
        tr.set(keys.group_config_key(GROUP), json.dumps(config).encode())

    db.transact(auto_split)
    g.run()
    assert {lid for lid in g.held() if "/s" in lid} == {f"{p}/s{i}of2" for p in (P0, P1) for i in (0, 1)}
    domain.topology.failover("logs", "realtime", "d", reason="test")
    sealer = Sealer(db, domain.admin, lambda: True, SealingConfig(), clock=domain.clock)
    for _ in range(3):
        sealer.run_once()
        g.run(5)
    assert get_stream(db, "logs").require_lane("realtime").generation(1).state == DRAINED
    g.run()
    config = json.loads(db.transact(lambda tr: tr.get(keys.group_config_key(GROUP))))
    assert (config.get("splits"), config.get("auto_splits")) == ({}, {}), "the drained partitions' splits go"
    assert not [lid for lid in g.held() if "/g1/" in lid], "nothing of the drained generation is held"
    g.split("logs/realtime/g2/p0", 2)
    g.run()
    assert {lid for lid in g.held() if "/s" in lid} == {"logs/realtime/g2/p0/s0of2", "logs/realtime/g2/p0/s1of2"}
