"""Several coordinator replicas: one runs the assignment loop; one that stops renewing loses it within a TTL."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from streamplane.coordinator import leadership
from streamplane.coordinator.assigner import Assigner, AssignerConfig
from streamplane.coordinator.store import StoreConfig, open_store


def test_leadership_moves_when_the_leader_stops_renewing(tmp_path: Path) -> None:
    db = open_store(StoreConfig(driver="embedded", data_dir=tmp_path))
    config = AssignerConfig(ttl_ms=300)
    a, b = Assigner(db, config, replica_id="a"), Assigner(db, config, replica_id="b")
    a.run_once()
    b.run_once()
    assert (a.is_leader, b.is_leader) == (True, False)
    assert leadership.leader(db) == "a"

    time.sleep(0.35)  # a stops renewing (paused, partitioned, dead) for longer than the TTL
    b.run_once()
    assert b.is_leader and leadership.leader(db) == "b"
    a.run_once()
    assert not a.is_leader, "the old leader stops assigning once another replica holds the key"
    with pytest.raises(leadership.NotLeaderError):
        db.transact(lambda tr: leadership.ensure(tr, "a", int(time.time() * 1000)))
    db.close()
