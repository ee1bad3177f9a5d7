"""Time lag drives work: a lower lane past its time-lag target gets the first claim on the group's workers
(served with the top tier, beyond the workers' max_load), says so in the group's log, and hands the room back
once its lag is under half the target. Transaction by transaction, with time passed in."""

from __future__ import annotations

import pytest

from streamplane.coordinator.groups import config as group_config
from streamplane.coordinator.groups import leases
from streamplane.coordinator.groups import state as group_state
from streamplane.coordinator.store import Database
from streamplane.coordinator.topology import events
from streamplane.errors import InvalidArgumentError
from streamplane.model import Heartbeat, LeaseLoad, Subscription
from tests.helpers import Domain

T0 = 1_800_000_000_000
GROUP = "g"
BACKFILL = ("jobs", "backfill")
B0, B1 = "jobs/backfill/g1/p0", "jobs/backfill/g1/p1"


@pytest.fixture
def db(domain: Domain) -> Database:
    """Stream "jobs": realtime (priority 100) and backfill (priority 50), 2 partitions each; one worker whose
    max_load (3, each partition counting 1 until measured) leaves room for one backfill partition only."""
    store = domain.cluster("c").stream("jobs", 2, backfill=50).db
    leases.join(store, GROUP, "w1", "s1", [Subscription("jobs")], capacity=1, max_load=3, now_ms=T0, ttl_ms=600_000)
    return store


def report(db: Database, now: int, backfill_lag_ms: int) -> None:
    held = [x.lease_id for x in leases.read_leases(db, GROUP).values() if x.worker_id == "w1"]
    loads = tuple(
        (lid, LeaseLoad(1.0, 100, backfill_lag_ms if lid.startswith("jobs/backfill") else 200)) for lid in held
    )
    beat = Heartbeat(cpu=0.5, records_per_s=4.0, leases=loads)
    leases.heartbeat(db, GROUP, "w1", "s1", beat, now_ms=now, ttl_ms=600_000)


def states(db: Database) -> dict[str, str]:
    return {
        x.lease_id: x.state
        for x in leases.read_leases(db, GROUP).values()
        if x.lane == "backfill" and x.state != "free"
    }


def changes(db: Database) -> list[tuple[str, str]]:
    return [(e.change, e.reason) for e in events.read_group_events(db, GROUP, None) if "lane_" in e.change]


def test_a_lane_past_its_target_gets_the_first_claim_and_hands_it_back_when_its_lag_recovers(db: Database) -> None:
    group_config.configure(db, GROUP, "backfill", lag_target_ms=10_000)
    first = group_state.apply_assignment(db, GROUP, now_ms=T0, revoke_ms=1000)
    assert states(db) == {B0: "granted"}, "one backfill partition fits under max_load, the other waits"
    assert first.promoted == frozenset()

    report(db, T0 + 1000, backfill_lag_ms=20_000)
    promoted = group_state.apply_assignment(db, GROUP, now_ms=T0 + 1000, revoke_ms=1000, promoted=first.promoted)
    assert promoted.promoted == {BACKFILL}
    assert states(db) == {B0: "granted", B1: "granted"}, "past its target the lane is served with the top tier"
    ((change, reason),) = changes(db)
    assert change == "lane_promoted" and "20.0 s is past its 10 s target" in reason

    report(db, T0 + 2000, backfill_lag_ms=8_000)  # under the target, not yet under half of it: it keeps it
    still = group_state.apply_assignment(db, GROUP, now_ms=T0 + 2000, revoke_ms=1000, promoted=promoted.promoted)
    assert still.promoted == {BACKFILL} and states(db)[B1] == "granted" and len(changes(db)) == 1

    report(db, T0 + 3000, backfill_lag_ms=1_000)
    restored = group_state.apply_assignment(db, GROUP, now_ms=T0 + 3000, revoke_ms=1000, promoted=still.promoted)
    assert restored.promoted == frozenset()
    assert states(db) == {B0: "granted", B1: "revoking"}, "back under half its target, it gives the room back"
    assert [c for c, _ in changes(db)] == ["lane_promoted", "lane_restored"]
    assert "back under half its 10 s target" in changes(db)[-1][1]


def test_a_lower_lane_without_a_target_is_served_by_its_priority_whatever_its_lag(db: Database) -> None:
    first = group_state.apply_assignment(db, GROUP, now_ms=T0, revoke_ms=1000)
    report(db, T0 + 1000, backfill_lag_ms=3_600_000)
    again = group_state.apply_assignment(db, GROUP, now_ms=T0 + 1000, revoke_ms=1000, promoted=first.promoted)
    assert again.promoted == frozenset() and states(db) == {B0: "granted"} and changes(db) == []
    group_config.configure(db, GROUP, "backfill", lag_target_ms=group_config.NO_LAG_TARGET)
    assert group_state.apply_assignment(db, GROUP, now_ms=T0 + 2000, revoke_ms=1000).promoted == frozenset()


def test_lane_settings_are_checked(db: Database) -> None:
    for bad in ({"lag_target_ms": 999}, {"lag_target_ms": -2}, {"attempts": 1001}, {}):
        with pytest.raises(InvalidArgumentError):
            group_config.configure(db, GROUP, "backfill", **bad)
    group_config.configure(db, GROUP, "backfill", attempts=3)
    group_config.configure(db, GROUP, "backfill", lag_target_ms=60_000)  # one setting leaves the other
    assert group_config.max_attempts(db, GROUP, "backfill") == 3
    assert group_config.lag_targets(db, GROUP) == {"backfill": 60_000}


def test_the_cli_refuses_unclear_lane_settings_in_one_sentence() -> None:
    from tests.helpers import cli

    done = cli("group", "configure", "g", "--lane", "backfill")
    assert done.returncode == 2
    assert "give --max-attempts, --lag-target-ms, --no-lag-target, --expire-after" in done.stderr
    done = cli("group", "configure", "g", "--max-attempts", "3")
    assert done.returncode == 2 and "--lane is required with --max-attempts" in done.stderr
    done = cli("group", "configure", "g", "--expire-after", "1d", "--never-expire")
    assert done.returncode == 2 and "not both" in done.stderr
    done = cli("group", "configure", "g", "--lane", "backfill", "--lag-target-ms", "9000", "--no-lag-target")
    assert done.returncode == 2 and "not both" in done.stderr
    done = cli("dev", "--console-port", "70000")
    assert done.returncode == 2 and "--console-port must be a port number" in done.stderr


def test_a_groups_where_predicate_is_kept_as_rendered_and_checked_at_join(db: Database) -> None:
    from streamplane.errors import FailedPreconditionError

    with pytest.raises(InvalidArgumentError, match="where, column 5"):
        group_config.configure(db, GROUP, where="key 'x'")
    assert group_config.group_where(db, GROUP) == "", "a refused predicate changes nothing"
    group_config.configure(db, GROUP, where="header(service)='api'")
    assert group_config.group_where(db, GROUP) == "header('service') = 'api'"
    group_config.configure(db, GROUP, attempts=2, lane="realtime")
    assert group_config.group_where(db, GROUP) == "header('service') = 'api'", "other settings leave it"

    def join(where: str) -> object:
        subs = [Subscription("jobs")]
        return leases.join(db, GROUP, "w9", "s9", subs, capacity=1.0, max_load=0.0, now_ms=T0, ttl_ms=1000, where=where)

    with pytest.raises(FailedPreconditionError, match="worker 'w9' filters with \"key = 'x'\", but group 'g'"):
        join("key = 'x'")
    assert join("header('service') = 'api'")
    group_config.configure(db, GROUP, where="")
    assert group_config.group_where(db, GROUP) == ""
