"""The Assigner's working state of a group (issue 17): kept between passes and updated from what changed, it
stays what a fresh read of the store would give, and the passes that follow changes do not read the group
whole. Random sequences of joins, session ends, revokes honoured with releases, load reports, failovers (new
generations) and lanes added run against a real Assigner over the embedded store with a manual clock; after
every pass the state is compared with one built from the store."""

from __future__ import annotations

import contextlib
import random

import pytest

from streamplane.coordinator.groups import leases
from streamplane.coordinator.groups import state as group_state
from streamplane.coordinator.groups.assigner import Assigner
from streamplane.coordinator.groups.timing import AssignerConfig
from streamplane.coordinator.store import Database
from streamplane.errors import StreamplaneError
from streamplane.model import Heartbeat, LeaseLoad, Subscription
from tests.helpers import Domain

GROUP = "g"
TTL = 3000


class Spy:
    """Counts the whole-group reads the Assigner makes, calling through to the real function."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.builds = 0
        real = group_state.build

        def build(*args, **kwargs):  # type: ignore[no-untyped-def]
            self.builds += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(group_state, "build", build)


def check_state(db: Database, assigner: Assigner, now: int) -> None:
    """The kept state equals a fresh read: leases, live members, wanted partitions, and holders that agree
    with every granted lease."""
    state = assigner.kept[GROUP].state
    assert state is not None
    grace = now < assigner.kept[GROUP].grace_until  # a new owner's first TTL: every member counts as live
    fresh = db.transact(lambda tr: group_state.build(tr, GROUP, now_ms=now, grace=grace))
    assert state.leases == fresh.leases, "the kept leases drifted from the store"
    assert set(state.members) == set(fresh.members)
    assert state.wanted == fresh.wanted
    for key, lease in fresh.leases.items():
        if lease.state == leases.GRANTED and lease.worker_id in fresh.members and key in fresh.wanted:
            assert state.balancer.holders.get(key) == lease.worker_id, key
        if lease.state == leases.REVOKING and lease.target:
            assert state.balancer.holders.get(key) == lease.target, key
    assert set(state.balancer.holders) <= set(state.wanted)
    assert set(state.balancer.holders.values()) <= set(state.members)


@pytest.mark.parametrize("seed", range(20))
def test_the_kept_state_equals_a_fresh_read_after_every_pass(
    domain: Domain, monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    rng = random.Random(seed)
    spy = Spy(monkeypatch)
    domain.cluster("c1", "c2").stream("s", 12, "c1").stream("t", 6, "c1")
    db, clock, topology = domain.db, domain.clock, domain.topology
    assigner = Assigner(db, AssignerConfig(ttl_ms=TTL, revoke_ms=1000, rebalance_ms=500), replica_id="r", clock=clock)
    sessions: dict[str, str] = {}
    n = 0

    def join() -> None:
        nonlocal n
        n += 1
        worker = f"w{n}"
        subs = [Subscription("s"), Subscription("t")] if rng.random() < 0.7 else [Subscription("s")]
        capacity = rng.choice([1.0, 2.0])
        leases.join(db, GROUP, worker, f"s{n}", subs, capacity=capacity, max_load=0, now_ms=clock.now_ms(), ttl_ms=TTL)
        sessions[worker] = f"s{n}"

    def beat_all() -> None:  # every live session heartbeats; some report loads; revokes are honoured
        for worker, session in list(sessions.items()):
            _, held = leases.read_member_leases(db, GROUP, worker)
            loads = tuple(
                (x.lease_id, LeaseLoad(rng.uniform(10, 1000), 0, rng.randrange(0, 3000)))
                for x in held
                if rng.random() < 0.3
            )
            beat = Heartbeat(cpu=0.1, records_per_s=1.0, leases=loads)
            leases.heartbeat(db, GROUP, worker, session, beat, now_ms=clock.now_ms(), ttl_ms=TTL)
            for x in held:
                if x.state == leases.REVOKING and rng.random() < 0.8:
                    leases.release(db, GROUP, worker, session, x.lease_id, x.epoch, now_ms=clock.now_ms())

    for _ in range(3):
        join()
    for _ in range(60):
        op = rng.random()
        if op < 0.15:
            join()
        elif op < 0.25 and len(sessions) > 1:  # a session ends (closed, or silent until its TTL passes)
            worker = rng.choice(sorted(sessions))
            session = sessions.pop(worker)
            if rng.random() < 0.5:
                leases.leave(db, GROUP, worker, session, "closed", now_ms=clock.now_ms())
        elif op < 0.30:
            stream = rng.choice(["s", "t"])
            target = "c2" if rng.random() < 0.5 else "c1"
            with contextlib.suppress(StreamplaneError):  # one to the cluster it is on is refused: fine here
                topology.failover(stream, "realtime", target, partitions=rng.choice([0, 4, 16]))
        elif op < 0.32:
            with contextlib.suppress(StreamplaneError):  # the lane exists already
                topology.add_lane("s", f"bulk{rng.randrange(3)}", priority=10, partitions=3)
        beat_all()
        clock.advance(rng.choice([100, 400, 800]))
        assigner.run_once()
        clock.advance(500)  # rebalance_ms: loads and topology events are taken in at most this often
        assigner.run_once()
        check_state(db, assigner, clock.now_ms())
    # besides the checks' own reads, every pass after the first followed the changes
    assert spy.builds == 1 + 60, "a pass read the group whole instead of following what changed"


def test_a_pass_after_a_worker_dies_regrants_only_its_partitions(domain: Domain) -> None:
    db, clock = domain.cluster("c").stream("s", 300).db, domain.clock
    assigner = Assigner(db, AssignerConfig(ttl_ms=60_000), replica_id="r", clock=clock)
    for w in range(10):
        leases.join(
            db, GROUP, f"w{w}", f"s{w}", [Subscription("s")], capacity=1, max_load=0, now_ms=clock.now_ms(),
            ttl_ms=60_000,
        )  # fmt: skip
    assigner.run_once()
    before = leases.read_leases(db, GROUP)
    victims = {k for k, x in before.items() if x.worker_id == "w3"}
    leases.leave(db, GROUP, "w3", "s3", "killed", now_ms=clock.now_ms())
    clock.advance(10)
    assigner.run_once()
    after = leases.read_leases(db, GROUP)
    assert all(x.state == leases.GRANTED and x.worker_id != "w3" for x in after.values())
    assert {k for k in after if after[k] != before[k]} == victims, "only the dead worker's partitions moved"
