"""A group of 100,000 partitions on the embedded store, which enforces FoundationDB's limits (10 MB a
transaction): the Assigner's first assignment, a worker's death and a new generation each apply in bounded
transactions, and every partition ends with exactly one holder (issue 17). The real Assigner loop, driven by
a manual clock."""

from __future__ import annotations

from collections import Counter

import pytest

from streamplane.clock import ManualClock
from streamplane.coordinator import keys
from streamplane.coordinator.groups import leases
from streamplane.coordinator.groups.assigner import Assigner
from streamplane.coordinator.groups.timing import AssignerConfig
from streamplane.coordinator.store import Transaction
from streamplane.coordinator.store.api import MAX_TRANSACTION_BYTES
from streamplane.coordinator.store.embedded import EmbeddedDatabase
from streamplane.coordinator.topology.topology import Topology
from streamplane.model import Heartbeat, Subscription
from streamplane.testing.cluster_admin import MemoryClusterAdmin
from tests.helpers import Domain

STREAMS, PARTITIONS, WORKERS = 25, 4000, 100  # 100,000 partitions
TTL_MS = 60_000


@pytest.fixture
def store(domain: Domain) -> EmbeddedDatabase:
    domain.cluster("c1", "c2")
    for s in range(STREAMS):
        domain.stream(f"big{s}", PARTITIONS, "c1")
    return domain.db


def beat(store: EmbeddedDatabase, clock: ManualClock, workers: range) -> None:
    for w in workers:
        now = clock.now_ms()
        leases.heartbeat(store, "g", f"w{w}", f"s{w}", Heartbeat(), now_ms=now, ttl_ms=TTL_MS)


def holders(db: EmbeddedDatabase) -> Counter[str]:
    """{lease id: live holders} from the lease records, checked against the held index."""

    def read(tr: Transaction) -> tuple[dict[leases.LeaseKey, leases.Lease], set[tuple[str, leases.LeaseKey]]]:
        r = keys.HELD.range(("g",))
        index = {(k[1], tuple(k[2:])) for k in (keys.HELD.unpack(key) for key, _ in tr.get_range(r.start, r.stop))}
        return leases.read_leases(tr, "g"), index

    found, index = db.transact(read)
    held = {(x.worker_id, x.key) for x in found.values() if x.state != leases.FREE}
    assert held == index, "the held index and the lease records disagree"
    return Counter(x.lease_id for x in found.values() if x.state == leases.GRANTED)


def test_a_100k_partition_group_assigns_in_bounded_transactions(store: EmbeddedDatabase) -> None:
    clock = ManualClock()
    assigner = Assigner(store, AssignerConfig(ttl_ms=TTL_MS), replica_id="r", clock=clock)
    subs = [Subscription(f"big{s}", ("realtime",)) for s in range(STREAMS)]
    for w in range(WORKERS):
        leases.join(store, "g", f"w{w}", f"s{w}", subs, capacity=1, max_load=0, now_ms=clock.now_ms(), ttl_ms=TTL_MS)

    def settle(passes: int = 20) -> None:
        for _ in range(passes):
            clock.advance(1000)
            assigner.run_once()

    settle(3)
    first = holders(store)
    assert len(first) == STREAMS * PARTITIONS and set(first.values()) == {1}
    assert store.largest_write < MAX_TRANSACTION_BYTES / 4, store.largest_write

    # a worker dies: the others heartbeat, its leases go to them
    clock.advance(TTL_MS)
    beat(store, clock, range(1, WORKERS))
    settle(3)
    after = leases.read_leases(store, "g")
    assert not [x for x in after.values() if x.worker_id == "w0" and x.state != leases.FREE]
    assert set(holders(store).values()) == {1} and len(holders(store)) == STREAMS * PARTITIONS

    # a new generation of one stream: its 4,000 new partitions get holders too (the old ones stay until drained)
    topology = Topology(store, MemoryClusterAdmin())
    topology.failover("big0", "realtime", "c2", reason="rehearsal")
    beat(store, clock, range(1, WORKERS))
    settle(3)
    final = holders(store)
    assert len(final) == (STREAMS + 1) * PARTITIONS and set(final.values()) == {1}
    assert store.largest_write < MAX_TRANSACTION_BYTES / 4, store.largest_write
    print(f"largest transaction {store.largest_write:,} bytes")
