"""Groups spread over coordinator replicas: each replica runs the assignment of its fair share of the groups
(through a per-group owner key), and when one stops, only its groups move to the others, within a TTL
(issue 17). Two replicas over one embedded store, in one process, with a manual clock."""

from __future__ import annotations

import pytest

from streamplane.clock import ManualClock
from streamplane.coordinator import keys
from streamplane.coordinator.groups import leadership, leases
from streamplane.coordinator.groups.assigner import Assigner
from streamplane.coordinator.groups.timing import AssignerConfig
from streamplane.coordinator.store import Database
from streamplane.coordinator.store.api import Watch
from streamplane.model import Subscription
from tests.helpers import Domain

GROUPS = [f"g{i}" for i in range(6)]
CONFIG = AssignerConfig(ttl_ms=3000, rebalance_ms=500, join_window_ms=0)


@pytest.fixture
def db(domain: Domain) -> Database:
    """An embedded store with stream "s" (2 partitions) on cluster "c"."""
    return domain.cluster("c").stream("s", 2).db


def test_groups_split_between_replicas_and_a_dead_replicas_groups_move(db: Database) -> None:
    clock = ManualClock()
    a, b = Assigner(db, CONFIG, replica_id="a", clock=clock), Assigner(db, CONFIG, replica_id="b", clock=clock)
    a.run_once()
    b.run_once()
    for g in GROUPS:  # workers join after both replicas are live
        leases.join(db, g, "w", "s1", [Subscription("s")], capacity=1, max_load=0, now_ms=clock.now_ms(), ttl_ms=60_000)
    for _ in range(4):
        clock.advance(1000)
        a.run_once()
        b.run_once()
    assert len(a.owned) == len(b.owned) == 3 and a.owned | b.owned == set(GROUPS)
    for g in GROUPS:  # every group was assigned by its owner
        owner = leadership.group_owner(db, g)
        assert owner in ("a", "b") and a.describe(g).leader_replica == owner
        assert {x.worker_id for x in a.describe(g).leases} == {"w"}
    before_b = set(b.owned)

    # b dies: after its TTL, a takes its groups (and keeps its own); a group nobody serves waits at most a TTL
    for _ in range(4):
        clock.advance(1000)
        a.run_once()
    assert a.owned == set(GROUPS), "the survivor runs every group"
    assert all(leadership.group_owner(db, g) == "a" for g in before_b)
    leases.join(
        db, "g-new", "w", "s2", [Subscription("s")], capacity=1, max_load=0, now_ms=clock.now_ms(), ttl_ms=60_000
    )
    a.run_once()
    assert "g-new" in a.owned and {x.worker_id for x in a.describe("g-new").leases} == {"w"}, "a new group at once"


def test_groups_let_go_for_a_new_replica_wake_the_replicas_to_claim_them(db: Database) -> None:
    """A new replica takes its share as soon as the owner lets groups go, not at its own next renewal: the
    release wakes every replica's loop."""
    clock = ManualClock()
    a = Assigner(db, CONFIG, replica_id="a", clock=clock)
    for g in GROUPS:
        leases.join(db, g, "w", "s1", [Subscription("s")], capacity=1, max_load=0, now_ms=clock.now_ms(), ttl_ms=60_000)
    for _ in range(3):
        a.run_once()
        clock.advance(1000)
    assert a.owned == set(GROUPS)

    def wake() -> Watch:
        return db.transact(lambda tr: tr.watch(keys.ASSIGNER_WAKE))

    steady = wake()
    a.run_once()  # a renewal that changes nothing wakes nobody
    assert not steady.wait(0)
    b = Assigner(db, CONFIG, replica_id="b", clock=clock)
    b.run_once()
    assert not b.owned, "a still holds every group"
    released = wake()
    clock.advance(1000)
    a.run_once()  # its renewal: it keeps its share and lets the rest go
    assert len(a.owned) == 3
    assert set(a.kept) == a.owned, "what a kept of the groups it let go went with them"
    assert released.wait(0), "letting groups go wakes the replicas' loops"
    b.run_once()  # woken at once, at the same moment
    assert b.owned == set(GROUPS) - a.owned
    b.run_once()
    assert set(b.kept) == b.owned and all(k.state is not None for k in b.kept.values())
