"""Several coordinator replicas: one runs the assignment loop; one that stops renewing loses it within a TTL."""

from __future__ import annotations

from pathlib import Path

import pytest

from streamplane.clock import ManualClock
from streamplane.coordinator.groups import leadership
from streamplane.coordinator.groups.assigner import Assigner
from streamplane.coordinator.groups.timing import AssignerConfig
from streamplane.coordinator.store import StoreConfig, open_store


def test_leadership_moves_when_the_leader_stops_renewing(tmp_path: Path) -> None:
    db = open_store(StoreConfig(driver="embedded", data_dir=tmp_path))
    config, clock = AssignerConfig(ttl_ms=300), ManualClock()
    a, b = Assigner(db, config, replica_id="a", clock=clock), Assigner(db, config, replica_id="b", clock=clock)
    a.run_once()
    b.run_once()
    assert (a.is_leader, b.is_leader) == (True, False)
    assert leadership.leader(db) == "a"

    clock.advance(299)  # a stops renewing (paused, partitioned, dead): one ms short of its TTL it still leads
    b.run_once()
    assert not b.is_leader and leadership.leader(db) == "a"
    clock.advance(1)  # now a's TTL has passed
    b.run_once()
    assert b.is_leader and leadership.leader(db) == "b"
    a.run_once()
    assert not a.is_leader, "the old leader stops assigning once another replica holds the key"
    with pytest.raises(leadership.NotLeaderError):
        db.transact(lambda tr: leadership.ensure(tr, "a", clock.now_ms()))
    db.close()
