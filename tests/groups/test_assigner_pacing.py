"""The assignment loop's pace: it sleeps until something is due (a session expiry, a revoke deadline, the next
load check, leadership renewal), so an idle fleet costs the coordinator almost nothing; a change wakes it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from streamplane.clock import ManualClock
from streamplane.coordinator import keys
from streamplane.coordinator.groups import leadership, leases
from streamplane.coordinator.groups.assigner import Assigner
from streamplane.coordinator.groups.leases import Subscription
from streamplane.coordinator.groups.timing import AssignerConfig
from streamplane.coordinator.store import Database, StoreConfig, open_store
from streamplane.coordinator.topology.cluster_admin import RoutingAdmin
from streamplane.coordinator.topology.topology import Topology
from streamplane.errors import FencedError, UnavailableError
from streamplane.model import ADMIN_LOCAL, Cluster, Heartbeat, Revoke
from streamplane.testing.chaos_store import ChaosDatabase, Faults
from tests.helpers import Domain, host_of

CONFIG = AssignerConfig(ttl_ms=3000, loop_ms=50, rebalance_ms=500, join_window_ms=0)  # paced by joins: below


@pytest.fixture
def with_stream(tmp_path: Path, local_cluster) -> Iterator[Database]:
    """An embedded store with the local cluster registered as "c" and a 4-partition stream "paced" on it."""
    bootstrap, control = local_cluster
    db = open_store(StoreConfig(driver="embedded", data_dir=tmp_path))
    topology = Topology(db, RoutingAdmin(), control_endpoints=[control.endpoint])
    topology.register_cluster(Cluster("c", bootstrap, admin=ADMIN_LOCAL, control_endpoint=control.endpoint))
    topology.create_stream("paced", 4, "c")
    yield db
    db.close()


def test_with_no_group_the_next_pass_is_the_leadership_renewal(tmp_path: Path) -> None:
    db = open_store(StoreConfig(driver="embedded", data_dir=tmp_path))
    clock = ManualClock()
    assigner = Assigner(db, CONFIG, replica_id="a", clock=clock)
    due = assigner.run_once()
    assert assigner.is_leader
    assert due == clock.now_ms() + CONFIG.ttl_ms // 3
    db.close()


def test_an_idle_group_is_looked_at_every_rebalance_interval_and_a_session_at_its_expiry(
    with_stream: Database,
) -> None:
    db, clock = with_stream, ManualClock()
    assigner = Assigner(db, CONFIG, replica_id="a", clock=clock)
    host_of(assigner).open_session("g", "w1", [Subscription("paced")], capacity=1.0, max_load=0.0)
    assigner.run_once()  # grants every lease
    due = assigner.run_once()
    # not the 50 ms beat: the next load check, well before the session could expire
    assert due == clock.now_ms() + CONFIG.rebalance_ms

    short = Assigner(
        db, AssignerConfig(ttl_ms=3000, rebalance_ms=10_000, join_window_ms=0), replica_id="a", clock=clock
    )
    short.run_once()  # leads from the member's join on (a new leader ends no session within its first TTL)
    clock.advance(2500)  # the silent member has 500 ms left: sooner than the renewal or the next load check
    (member,) = short.describe("g").members
    due = short.run_once()
    assert short.is_leader
    assert due == member.alive_until_ms, "the loop wakes when the member's session would expire"


def test_a_standby_replica_looks_again_exactly_when_the_leaders_key_runs_out(tmp_path: Path) -> None:
    """A standby does not poll the store every rebalance interval: it sleeps until the leader's key runs out
    (or its own registration needs renewing), and takes over then if the leader did not renew."""
    db = open_store(StoreConfig(driver="embedded", data_dir=tmp_path))
    clock = ManualClock()
    Assigner(db, CONFIG, replica_id="a", clock=clock).run_once()
    leader_until = clock.now_ms() + CONFIG.ttl_ms
    standby = Assigner(db, CONFIG, replica_id="b", clock=clock)
    due = standby.run_once()
    assert not standby.is_leader
    assert due == clock.now_ms() + CONFIG.ttl_ms // 3, "its own registration is renewed first"
    clock.advance(CONFIG.ttl_ms * 4 // 5)  # the leader has died: it renews nothing more
    due = standby.run_once()
    assert not standby.is_leader
    assert due == leader_until, "it looks again when the leader's key runs out, not every rebalance_ms"
    clock.advance(due - clock.now_ms())
    standby.run_once()
    assert standby.is_leader, "and takes over at that moment"
    db.close()


def test_partitions_moved_for_balance_cool_down_and_a_join_waits_one_confirming_pass(with_stream: Database) -> None:
    db, clock = with_stream, ManualClock()
    config = AssignerConfig(ttl_ms=60_000, rebalance_ms=500, cooldown_ms=30_000, join_window_ms=0)
    assigner = Assigner(db, config, replica_id="a", clock=clock)
    host_of(assigner).open_session("g", "w1", [Subscription("paced")], capacity=1.0, max_load=0.0)
    assigner.run_once()
    host_of(assigner).open_session("g", "w2", [Subscription("paced")], capacity=1.0, max_load=0.0)

    def revoking() -> set[tuple[str, str, int, int]]:
        return {tuple(x.partition) for x in assigner.describe("g").leases if x.state == "revoking"}

    due = assigner.run_once()  # sees the imbalance once: proposes, moves nothing
    assert revoking() == set() and due == clock.now_ms() + 500, "the confirming pass is due after rebalance_ms"
    clock.advance(500)
    assigner.run_once()  # the second look confirms it
    moved = revoking()
    assert len(moved) == 2
    assert assigner._pinned("g", clock.now_ms()) == dict.fromkeys(moved, "w1"), "the cool-down keeps where it left"


def test_a_new_leader_gives_every_session_a_ttl_to_find_it_before_ending_any(with_stream: Database) -> None:
    """A coordinator restart longer than the session TTL: the new leader does not end the sessions nobody could
    heartbeat to; a worker that comes back resumes its session with its leases and epochs; one that does not
    is ended once the grace is over."""
    db, clock = with_stream, ManualClock()
    old = Assigner(db, CONFIG, replica_id="old", clock=clock)
    first = host_of(old).open_session("g", "w1", [Subscription("paced")], capacity=1.0, max_load=0.0)
    host_of(old).open_session("g", "w2", [Subscription("paced")], capacity=1.0, max_load=0.0)
    old.run_once()
    w1_before = {(x.lease_id, x.epoch) for x in old.describe("g").leases if x.worker_id == "w1"}
    clock.advance(2 * CONFIG.ttl_ms)  # the old coordinator is gone for two TTLs
    new = Assigner(db, CONFIG, replica_id="new", clock=clock)
    new.run_once()
    assert new.is_leader and {m.worker_id for m in new.describe("g").members} == {"w1", "w2"}, "nobody ended yet"
    resumed = host_of(new).open_session(
        "g", "w1", [Subscription("paced")], capacity=1.0, max_load=0.0, resume_session=first.session_id
    )
    assert resumed.session_id == first.session_id
    clock.advance(CONFIG.ttl_ms // 2)
    resumed.heartbeat(Heartbeat())
    clock.advance(CONFIG.ttl_ms // 2)
    new.run_once()
    assert {m.worker_id for m in new.describe("g").members} == {"w1"}, "w2 did not come back within the grace"
    w1_after = {(x.lease_id, x.epoch) for x in new.describe("g").leases if x.worker_id == "w1"}
    assert w1_before <= w1_after, new.describe("g")


def test_a_replica_woken_past_the_ttl_does_not_end_sessions_its_workers_resumed_elsewhere(
    with_stream: Database,
) -> None:
    """A replica stopped (SIGSTOP) for longer than the TTL wakes with the streams of its workers' sessions, all
    silent as it sees them. The workers resumed them on another replica meanwhile: ending them there would
    revoke every lease they hold and redeliver what they had processed."""
    db, clock = with_stream, ManualClock()
    zombie = Assigner(db, CONFIG, replica_id="zombie", clock=clock)
    other = Assigner(db, CONFIG, replica_id="other", clock=clock)
    stale = host_of(zombie).open_session("g", "w1", [Subscription("paced")], capacity=1.0, max_load=0.0)
    zombie.run_once()
    before = {(x.lease_id, x.epoch) for x in zombie.describe("g").leases if x.worker_id == "w1"}
    assert len(before) == 4
    clock.advance(CONFIG.ttl_ms // 2)  # the zombie is stopped; its worker resumes on the other replica
    resumed = host_of(other).open_session(
        "g", "w1", [Subscription("paced")], capacity=1.0, max_load=0.0, resume_session=stale.session_id
    )
    assert resumed.session_id == stale.session_id
    clock.advance(CONFIG.ttl_ms)  # the zombie wakes: its stream of that session has been silent past the TTL
    assert stale.silent()
    stale.expire()
    stale.fail(FencedError("its credential ran out"), "credential expired")  # any end on its side: none applies
    resumed.heartbeat(Heartbeat())
    other.run_once()
    after = {(x.lease_id, x.epoch) for x in other.describe("g").leases if x.worker_id == "w1"}
    assert after == before, "the resumed session kept its leases at their epochs"
    resumed.close("the worker left")  # while the replica serving it can still end it
    assert {m.worker_id for m in other.describe("g").members} == set()


def test_a_revoke_cut_by_its_owners_death_gets_a_deadline_past_the_new_owners_grace(with_stream: Database) -> None:
    """The group's owner revokes a lease and dies; the holder's replica died with it. By the time a new owner
    takes over, the revoke's deadline has passed, though the holder could neither commit nor hand back. The new
    owner moves the deadline to the end of its grace (a TTL) and the holder's resumed session is told: the
    holder finishes and hands back, instead of the lease being forced and its work done again. A holder that
    does not come back is forced once the grace is over."""
    db, clock = with_stream, ManualClock()
    old = Assigner(db, CONFIG, replica_id="old", clock=clock)
    first = host_of(old).open_session("g", "w1", [Subscription("paced")], capacity=1.0, max_load=0.0)
    old.run_once()
    second = host_of(old).open_session("g", "w2", [Subscription("paced")], capacity=1.0, max_load=0.0)

    def revoking() -> dict[str, leases.Lease]:
        return {x.lease_id: x for x in leases.read_leases(db, "g").values() if x.state == leases.REVOKING}

    for _ in range(50):
        old.run_once()
        if revoking():
            break
        clock.advance(CONFIG.loop_ms)
    cut = revoking()
    assert cut and all(x.worker_id == "w1" for x in cut.values()), "w2's join moves leases away from w1"
    clock.advance(CONFIG.revoke_ms + CONFIG.ttl_ms)  # the old owner is gone: its revoke deadlines passed too
    new = Assigner(db, CONFIG, replica_id="new", clock=clock)
    resumed, resumed2 = (
        host_of(new).open_session(
            "g", w, [Subscription("paced")], capacity=1.0, max_load=0.0, resume_session=s.session_id
        )
        for w, s in (("w1", first), ("w2", second))
    )

    def told() -> dict[str, int]:
        look, watch = db.transact(resumed.look)
        watch.cancel()
        return {e.lease_id: e.deadline_ms for e in (resumed.tell(*look) if look else ()) if isinstance(e, Revoke)}

    assert told() == {lid: x.deadline_ms for lid, x in cut.items()}, "the resumed session hears its revokes"
    new.run_once()
    grace_end = clock.now_ms() + CONFIG.ttl_ms
    assert {lid: (x.worker_id, x.epoch, x.deadline_ms) for lid, x in revoking().items()} == {
        lid: ("w1", x.epoch, grace_end) for lid, x in cut.items()
    }, "not forced: its deadline moved to the end of the new owner's grace"
    assert told() == dict.fromkeys(cut, grace_end), "and the holder is told"
    kept, (handed, lease) = sorted(cut)[1:], sorted(cut.items())[0]
    resumed.release(handed, lease.epoch)  # it finished that one in time
    new.run_once()
    after = leases.read_leases(db, "g")
    moved = next(x for x in after.values() if x.lease_id == handed)
    assert (moved.worker_id, moved.epoch) == ("w2", lease.epoch + 1)
    clock.advance(CONFIG.ttl_ms)
    resumed.heartbeat(Heartbeat())
    resumed2.heartbeat(Heartbeat())
    new.run_once()
    forced = {x.lease_id: (x.worker_id, x.epoch) for x in leases.read_leases(db, "g").values() if x.lease_id in kept}
    assert forced == {lid: ("w2", cut[lid].epoch + 1) for lid in kept}, "the rest are forced after the grace"


def test_a_store_outage_past_the_ttl_ends_no_session_whose_worker_kept_its_stream(with_stream: Database) -> None:
    """The database restarts, down for two TTLs: no heartbeat is written and no replica renews its registration
    meanwhile. When it is back, the group's owner passes before the other replica renews: every member of that
    replica looks expired. The owner gives each session a TTL to be heard first, as after a take-over: the
    workers kept their streams, and keep their leases and epochs (ended, their work would be done again)."""
    db, clock = ChaosDatabase(with_stream, seed=1, faults=Faults()), ManualClock()
    owner, other = (
        Assigner(db, CONFIG, replica_id="owner", clock=clock),
        Assigner(db, CONFIG, replica_id="other", clock=clock),
    )
    owner.run_once()  # registered first: it owns the group
    other.run_once()
    w1 = host_of(owner).open_session("g", "w1", [Subscription("paced")], capacity=1.0, max_load=0.0)
    w2 = host_of(other).open_session("g", "w2", [Subscription("paced")], capacity=1.0, max_load=0.0)
    owner.run_once()
    assert "g" in owner.owned
    before = {(x.lease_id, x.epoch, x.worker_id) for x in owner.describe("g").leases}
    assert {w for _, _, w in before} == {"w1", "w2"}
    db.down = True
    clock.advance(2 * CONFIG.ttl_ms)
    with pytest.raises(UnavailableError):
        owner.run_once()
    db.down = False
    owner.run_once()  # back first: before the other replica renews, and before any heartbeat is written again
    assert {(x.lease_id, x.epoch, x.worker_id) for x in owner.describe("g").leases} == before
    other.run_once()
    clock.advance(CONFIG.ttl_ms)
    w1.heartbeat(Heartbeat())
    w2.heartbeat(Heartbeat())
    other.run_once()
    owner.run_once()  # the grace is over: both are alive (their replicas renewed), nothing moved
    assert {(x.lease_id, x.epoch, x.worker_id) for x in owner.describe("g").leases} == before


def test_a_new_groups_first_assignment_waits_for_its_members_to_stop_joining(with_stream: Database) -> None:
    """A fleet starting together is assigned once, to all of it: not to whoever joined first, then moved."""
    db, clock = with_stream, ManualClock()
    config = AssignerConfig(ttl_ms=60_000, join_window_ms=300, join_window_max_ms=1000)
    assigner = Assigner(db, config, replica_id="a", clock=clock)

    def held() -> dict[str, int]:
        out: dict[str, int] = {}
        for lease in assigner.describe("g").leases:
            if lease.worker_id:
                out[lease.worker_id] = out.get(lease.worker_id, 0) + 1
        return out

    host_of(assigner).open_session("g", "w1", [Subscription("paced")], capacity=1.0, max_load=0.0)
    due = assigner.run_once()
    assert held() == {} and due == clock.now_ms() + 300  # waits for more joins
    clock.advance(200)
    host_of(assigner).open_session("g", "w2", [Subscription("paced")], capacity=1.0, max_load=0.0)
    assigner.run_once()
    clock.advance(200)  # 400 ms after the first join, 200 after the last: still waiting
    assigner.run_once()
    assert held() == {}
    clock.advance(100)
    assigner.run_once()
    assert held() == {"w1": 2, "w2": 2}  # one assignment to both: no lease moved
    # once assigned, a join is served at once (it rebalances as before)
    host_of(assigner).open_session("g", "w3", [Subscription("paced")], capacity=1.0, max_load=0.0)
    assigner.run_once()
    assert sum(held().values()) == 4


def test_joins_that_never_stop_delay_a_first_assignment_only_up_to_the_maximum(with_stream: Database) -> None:
    db, clock = with_stream, ManualClock()
    config = AssignerConfig(ttl_ms=60_000, join_window_ms=300, join_window_max_ms=1000)
    assigner = Assigner(db, config, replica_id="a", clock=clock)
    for i in range(6):  # a join every 200 ms, for 1.2 s
        host_of(assigner).open_session("g", f"w{i}", [Subscription("paced")], capacity=1.0, max_load=0.0)
        assigner.run_once()
        granted = [x for x in assigner.describe("g").leases if x.worker_id]
        assert bool(granted) == (i * 200 >= 1000), f"after {i * 200} ms"
        clock.advance(200)


def test_an_idle_heartbeat_writes_nothing_and_news_are_written_at_once(with_stream: Database) -> None:
    """An idle fleet's heartbeats say nothing new: none is written (the replica serving the session keeps its
    liveness, and the store keeps the member while that replica is registered); news are written at once."""
    db, clock = with_stream, ManualClock()
    cfg = AssignerConfig(ttl_ms=3000, heartbeat_interval_ms=750, join_window_ms=0)
    assigner = Assigner(db, cfg, replica_id="a", clock=clock)
    session = host_of(assigner).open_session("g", "w1", [Subscription("paced")], capacity=1.0, max_load=0.0)
    session.heartbeat(Heartbeat())  # the first one says what the worker's figures are

    stored = db.transact(lambda tr: tr.get(keys.member_key("g", "w1")))
    for _ in range(8):  # 6 s of heartbeats every 750 ms, nothing new in them, the replica renewing itself
        clock.advance(cfg.heartbeat_interval_ms)
        session.heartbeat(Heartbeat())
        assigner.run_once()
        assert db.transact(lambda tr: tr.get(keys.member_key("g", "w1"))) == stored, "an idle heartbeat was written"
        assert not session.silent()
    assert [m.worker_id for m in assigner.describe("g").members] == ["w1"], "a live session expired"
    session.heartbeat(Heartbeat(records_per_s=120.0))  # news: written at once
    assert {m.worker_id: m.records_per_s for m in assigner.describe("g").members}["w1"] == 120.0


def test_a_member_outlives_its_stored_deadline_only_while_its_replica_is_registered(with_stream: Database) -> None:
    """Replica "a" serves w1 and dies; "b" runs the group. w1 is not ended while a's registration holds (its
    worker may be resuming at "b"), and is ended at the first pass after it lapses."""
    db, clock = with_stream, ManualClock()
    cfg = AssignerConfig(ttl_ms=3000, rebalance_ms=500, join_window_ms=0)
    a = Assigner(db, cfg, replica_id="a", clock=clock)
    host_of(a).open_session("g", "w1", [Subscription("paced")], capacity=1.0, max_load=0.0)
    for _ in range(10):  # 5 s: a renews, w1 says nothing new (nothing is written for it)
        a.run_once()
        clock.advance(500)
    a_expires = db.transact(lambda tr: leadership.replica_expires(tr, "a"))
    assert a_expires > clock.now_ms() > cfg.ttl_ms, "w1's stored deadline has passed, a's registration holds"
    assert [m.worker_id for m in a.describe("g").members] == ["w1"], "ended while its replica was registered"
    b = Assigner(db, cfg, replica_id="b", clock=clock)
    clock.advance(cfg.ttl_ms)  # a died: b takes the group over once a's keys lapse
    b.run_once()
    assert "g" in b.owned
    clock.advance(cfg.ttl_ms)  # b's grace for a group it took over ends; a's registration is long gone
    b.run_once()
    assert b.describe("g").members == (), "a member of a dead replica outlived it"


def test_idle_passes_read_no_member_and_a_silent_session_still_expires_on_time(
    with_stream: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each pass used to decode every member's deadline: a thousand idle workers cost the loop more than all
    else. Until the known next expiry (or a join or leave), a pass reads no member; then it expires on time."""
    db, clock = with_stream, ManualClock()
    cfg = AssignerConfig(ttl_ms=3000, rebalance_ms=500, join_window_ms=0)
    assigner = Assigner(db, cfg, replica_id="a", clock=clock)
    # joined directly, not through a session of this replica: only its stored deadline keeps it
    leases.join(
        db, "g", "w1", "s1", [Subscription("paced")], capacity=1.0, max_load=0.0, now_ms=clock.now_ms(), ttl_ms=3000
    )
    assigner.run_once()  # grants every lease; reads w1's deadline
    member_reads = []
    original = leases.expire

    def counted(*args: object, **kwargs: object) -> int:
        member_reads.append(1)
        return original(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(leases, "expire", counted)
    for _ in range(5):  # 2.5 s of passes every rebalance_ms: w1 has not expired yet
        clock.advance(cfg.rebalance_ms)
        assigner.run_once()
    assert member_reads == [], "an idle pass read the members"
    assert [m.worker_id for m in assigner.describe("g").members] == ["w1"]
    clock.advance(600)  # past w1's deadline: the next pass reads and ends it
    assigner.run_once()
    assert member_reads == [1]
    assert assigner.describe("g").members == ()


def test_an_idle_fleets_pass_is_one_transaction_whatever_its_groups(
    domain: Domain, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pass looks at every group's counters at once, with its leadership renewal: groups that did not
    change cost no transaction of their own (with FoundationDB, a round trip each, every rebalance_ms), and a
    change in one group makes a pass of that group alone."""
    db, clock = domain.cluster("c").stream("s", 1).db, domain.clock
    assigner = Assigner(db, CONFIG, replica_id="a", clock=clock)
    groups = [f"g{i}" for i in range(20)]
    for g in groups:
        leases.join(db, g, "w", "s1", [Subscription("s")], capacity=1, max_load=0, now_ms=clock.now_ms(), ttl_ms=10**9)
    for _ in range(8):  # assigned, and past the take-over grace (a TTL), after which the members are read once
        assigner.run_once()
        clock.advance(CONFIG.rebalance_ms)
    assert assigner.owned == set(groups)
    assert all(x.worker_id == "w" for g in groups for x in assigner.describe(g).leases)
    transactions: list[str] = []
    transact = db.transact

    def counted(fn):  # type: ignore[no-untyped-def]
        transactions.append("t")
        return transact(fn)

    monkeypatch.setattr(db, "transact", counted)
    for _ in range(4):  # 2 s of passes every rebalance_ms, with two leadership renewals among them
        assigner.run_once()
        clock.advance(CONFIG.rebalance_ms)
    assert len(transactions) == 4, "an idle pass is one transaction"
    transactions.clear()
    leases.join(db, "g7", "w2", "s2", [Subscription("s")], capacity=1, max_load=0, now_ms=clock.now_ms(), ttl_ms=10**9)
    transactions.clear()  # the join's own
    assigner.run_once()
    assert len(transactions) == 2, "the look, and a pass of the group that changed"
    assert {m.worker_id for m in assigner.describe("g7").members} == {"w", "w2"}
