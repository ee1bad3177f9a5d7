"""The Assigner's own loop (store, measured loads, smoothing, confirming passes, cool-downs) under steady
traffic whose measured rates are noisy: a group of 8 partitions on 3 workers makes no lease move in two
minutes, and a fourth worker joining moves what balance needs, in one go. Simulated time: a manual clock
drives the real coordinator domain code, so two minutes take a second."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from streamplane.clock import ManualClock
from streamplane.coordinator.groups.assigner import Assigner
from streamplane.coordinator.groups.leases import Subscription
from streamplane.coordinator.groups.sessions.host import Session
from streamplane.coordinator.groups.timing import AssignerConfig
from streamplane.coordinator.store import Database
from streamplane.model import Heartbeat, LeaseLoad
from tests.helpers import Domain, host_of

STEP_MS = 250
RATE = 2000.0  # records/s per partition, the same for all: the noise is all there is


@pytest.fixture
def db(domain: Domain) -> Database:
    return domain.cluster("c").stream("steady", 8).db


class Group:
    """Workers that heartbeat every second with their leases' rates measured +-20 %, and hand revoked leases
    back at once; every lease move is recorded."""

    def __init__(self, db: Database, seed: int) -> None:
        self.clock = ManualClock()
        self.assigner = Assigner(db, AssignerConfig(ttl_ms=10_000), replica_id="r", clock=self.clock)
        self.rng = random.Random(seed)
        self.sessions: dict[str, Session] = {}
        self.holders: dict[str, str] = {}
        self.moves: list[tuple[int, str, str, str]] = []  # (time, lease, from, to)

    def join(self, worker: str) -> None:
        self.sessions[worker] = host_of(self.assigner).open_session(
            "g", worker, [Subscription("steady")], capacity=1.0, max_load=0.0
        )

    def run(self, seconds: float) -> None:
        for _ in range(int(seconds * 1000 / STEP_MS)):
            self.clock.advance(STEP_MS)
            now = self.clock.now_ms()
            self.assigner.run_once()
            leases = [x for x in self.assigner.describe("g").leases if x.partition.lane == "realtime"]
            for x in leases:
                if x.state == "revoking":
                    self.sessions[x.worker_id].release(x.lease_id, x.epoch)
                elif x.state == "granted":
                    before = self.holders.get(x.lease_id)
                    if before is not None and before != x.worker_id:
                        self.moves.append((now, x.lease_id, before, x.worker_id))
                    self.holders[x.lease_id] = x.worker_id
            if now % 1000 == 0:
                for worker, session in self.sessions.items():
                    mine = [x.lease_id for x in leases if x.worker_id == worker and x.state == "granted"]
                    loads = tuple((lid, LeaseLoad(RATE * self.rng.uniform(0.8, 1.2))) for lid in mine)
                    session.heartbeat(Heartbeat(records_per_s=sum(x.records_per_s for _, x in loads), leases=loads))

    def split(self) -> list[int]:
        return sorted(Counter(self.holders.values()).values())


@pytest.mark.parametrize("seed", range(3))
def test_steady_noisy_traffic_moves_no_lease_in_two_minutes_and_a_join_moves_what_balance_needs_once(
    db: Database, seed: int
) -> None:
    group = Group(db, seed)
    for worker in ("w1", "w2", "w3"):
        group.join(worker)
    group.run(10)  # joins, grants, first measurements
    assert group.split() == [2, 3, 3], "as balanced as whole partitions allow"
    settled = len(group.moves)
    group.run(120)
    assert group.moves[settled:] == [], f"lease moves under steady traffic: {group.moves[settled:][:5]}"

    group.join("w4")
    joined = len(group.moves)
    group.run(60)
    moves = group.moves[joined:]
    assert group.split() == [2, 2, 2, 2]
    assert len(moves) == 2 and {to for *_, to in moves} == {"w4"}, f"only what balance needs: {moves}"
    assert max(t for t, *_ in moves) - min(t for t, *_ in moves) <= 2 * STEP_MS, "in one go, not spread out"
