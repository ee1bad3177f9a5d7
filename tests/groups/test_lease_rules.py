"""The lease state machine, transaction by transaction: grant, revoke with a deadline, release, forced move,
expiry, and the fencing of every epoch a worker no longer holds. Time is passed in, never waited for."""

from __future__ import annotations

import pytest

from streamplane.coordinator.groups import leases
from streamplane.coordinator.groups import state as group_state
from streamplane.coordinator.store import Database
from streamplane.coordinator.topology import events
from streamplane.errors import AlreadyExistsError, FailedPreconditionError, FencedError
from streamplane.model import Heartbeat, Subscription
from tests.helpers import Domain

T0 = 1_800_000_000_000
TTL_MS = 3000
REVOKE_MS = 1000
GROUP = "g"


@pytest.fixture
def db(domain: Domain) -> Database:
    """A store with stream "jobs" of 2 partitions (its realtime lane is what the group reads)."""
    return domain.cluster("c").stream("jobs", 2).db


def join(db: Database, worker: str, now: int, session: str = "") -> None:
    leases.join(
        db,
        GROUP,
        worker,
        session or f"s-{worker}",
        [Subscription("jobs")],
        capacity=1,
        max_load=0,
        now_ms=now,
        ttl_ms=TTL_MS,
    )


def assign(db: Database, now: int) -> group_state.Applied:
    return group_state.apply_assignment(db, GROUP, now_ms=now, revoke_ms=REVOKE_MS)


def held(db: Database) -> dict[str, tuple[str, int, str]]:
    """{lease id: (worker, epoch, state)}."""
    return {x.lease_id: (x.worker_id, x.epoch, x.state) for x in leases.read_leases(db, GROUP).values()}


P0, P1 = "jobs/realtime/g1/p0", "jobs/realtime/g1/p1"


def test_the_only_worker_is_granted_every_partition_at_epoch_1(db: Database) -> None:
    join(db, "w1", T0)
    assign(db, T0)
    assert held(db) == {P0: ("w1", 1, "granted"), P1: ("w1", 1, "granted")}
    assert leases.check_lease(db, GROUP, P0, 1).worker_id == "w1"


def test_a_joining_worker_gets_a_partition_once_its_holder_releases_it_and_the_old_epoch_is_fenced(
    db: Database,
) -> None:
    join(db, "w1", T0)
    assign(db, T0)
    join(db, "w2", T0 + 10)
    applied = assign(db, T0 + 10)
    ((moving, (holder, epoch, _)),) = [(k, v) for k, v in held(db).items() if v[2] == "revoking"]
    assert (holder, epoch) == ("w1", 1), "revoking: still the old holder's until it hands it back"
    assert applied.next_deadline_ms == T0 + 10 + REVOKE_MS
    leases.check_lease(db, GROUP, moving, 1)  # w1 may still finish its in-flight work
    leases.release(db, GROUP, "w1", "s-w1", moving, 1, now_ms=T0)
    assign(db, T0 + 20)
    assert held(db)[moving] == ("w2", 2, "granted")
    with pytest.raises(FencedError, match="stale"):
        leases.check_lease(db, GROUP, moving, 1)


def test_a_revoke_not_answered_by_its_deadline_is_forced(db: Database) -> None:
    join(db, "w1", T0)
    assign(db, T0)
    join(db, "w2", T0)
    applied = assign(db, T0)
    (moving,) = [k for k, v in held(db).items() if v[2] == "revoking"]
    assign(db, applied.next_deadline_ms - 1)
    assert held(db)[moving][2] == "revoking", "one ms before the deadline the holder still has it"
    assign(db, applied.next_deadline_ms)
    assert held(db)[moving] == ("w2", 2, "granted")
    with pytest.raises(FencedError):
        leases.check_lease(db, GROUP, moving, 1)


def test_a_silent_worker_expires_at_its_ttl_and_its_partitions_go_to_the_others(db: Database) -> None:
    join(db, "w1", T0)
    join(db, "w2", T0 + 1000)
    assign(db, T0 + 1000)
    assert sorted(v[0] for v in held(db).values()) == ["w1", "w2"]
    leases.heartbeat(db, GROUP, "w2", "s-w2", Heartbeat(), now_ms=T0 + 2000, ttl_ms=TTL_MS)
    assert leases.expire(db, GROUP, T0 + TTL_MS - 1) == T0 + TTL_MS, "w1 expires next, at its TTL"
    leases.expire(db, GROUP, T0 + TTL_MS)
    assign(db, T0 + TTL_MS)
    assert {v[0] for v in held(db).values()} == {"w2"}
    with pytest.raises(FencedError, match="has ended"):
        leases.release(db, GROUP, "w1", "s-w1", P0, 1, now_ms=T0)


def test_a_worker_id_is_taken_while_its_session_lives_and_free_after_its_ttl(db: Database) -> None:
    join(db, "w1", T0)
    with pytest.raises(AlreadyExistsError, match="live session"):
        join(db, "w1", T0 + TTL_MS - 1, session="again")
    join(db, "w1", T0 + TTL_MS, session="again")  # the old session is replaced; its leases were freed
    (member,) = leases.read_members(db, GROUP).values()
    assert member.session_id == "again"


def test_releasing_a_lease_never_held_at_that_epoch_is_refused_and_a_late_release_changes_nothing(
    db: Database,
) -> None:
    join(db, "w1", T0)
    assign(db, T0)
    with pytest.raises(FailedPreconditionError, match="never held"):
        leases.release(db, GROUP, "w1", "s-w1", P0, 7, now_ms=T0)
    leases.release(db, GROUP, "w1", "s-w1", P0, 1, now_ms=T0)
    assign(db, T0 + 1)
    assert held(db)[P0] == ("w1", 2, "granted"), "granted again, at a new epoch"
    leases.release(db, GROUP, "w1", "s-w1", P0, 1, now_ms=T0)  # a late duplicate of the first release
    assert held(db)[P0] == ("w1", 2, "granted")


def test_a_broken_session_is_resumed_with_its_leases_and_epochs_while_it_has_not_ended(db: Database) -> None:
    join(db, "w1", T0)
    assign(db, T0)
    before = held(db)
    resume = dict(capacity=1, max_load=0, ttl_ms=TTL_MS, resume_session="s-w1")
    # the coordinator restarted past the session's TTL; nobody expired it yet: resumed, nothing moves
    member = leases.join(db, GROUP, "w1", "s-new", [Subscription("jobs")], now_ms=T0 + 2 * TTL_MS, **resume)
    assert member.session_id == "s-w1" and member.alive_until_ms == T0 + 3 * TTL_MS
    assert held(db) == before
    assert assign(db, T0 + 2 * TTL_MS).moved == {}

    # once it has expired, a resume is a new session: the old leases were freed, the new grants have new epochs
    leases.expire(db, GROUP, T0 + 4 * TTL_MS)
    member = leases.join(db, GROUP, "w1", "s-new", [Subscription("jobs")], now_ms=T0 + 4 * TTL_MS, **resume)
    assert member.session_id == "s-new"
    assign(db, T0 + 4 * TTL_MS)
    assert {lid: epoch for lid, (_, epoch, _) in held(db).items()} == {P0: 2, P1: 2}
    with pytest.raises(AlreadyExistsError):  # another process naming the live session of w1: not a resume
        leases.join(
            db,
            GROUP,
            "w1",
            "s-x",
            [Subscription("jobs")],
            now_ms=T0 + 4 * TTL_MS,
            **{**resume, "resume_session": "s-w1"},
        )


def test_a_session_replaced_at_join_keeps_every_event_of_that_transaction(db: Database) -> None:
    """The audit trail (and the Assigner, which follows it) sees each lease the old session lost, its leaving
    and the new session's joining: events appended by two steps of one transaction get distinct numbers."""
    join(db, "w", T0, "first")
    assign(db, T0)
    join(db, "w", T0 + TTL_MS + 1, "second")  # the first session's TTL passed: it is replaced
    tail = events.read_recent_group_events(db, GROUP, limit=4)[::-1]
    assert [(e.change, e.lease_id) for e in tail] == [
        ("lease_revoked", P0),
        ("lease_revoked", P1),
        ("member_left", ""),
        ("member_joined", ""),
    ]
