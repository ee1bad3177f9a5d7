"""The membership's handling of one session message (grants that come together start reading together), and
the load reports its leases make through its session."""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any

import pytest

from streamplane.client.consumer.committer import Committer
from streamplane.client.consumer.fetch_loop import Read
from streamplane.client.consumer.ledger import GrantedLease, LeaseLedger
from streamplane.client.consumer.membership import Membership
from streamplane.client.flow import Budget
from streamplane.clock import ManualClock
from streamplane.model import Expect, Grant, LeaseLoad, PartitionRef, Sealed
from tests.client.test_ledger import Owner


class Recorded:
    """What the membership asks of its fetch loop, in order (the loop itself is tested against real brokers in
    test_fetch_loop.py: one add_many is one step of the loop, read in one Fetch)."""

    where = None

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def add_many(self, reads: list[Read]) -> None:
        if reads:
            self.calls.append(("add", [r.key for r in reads]))

    def remove(self, key: str) -> None:
        self.calls.append(("remove", key))

    def touch(self) -> None:
        self.calls.append(("touch", None))

    def hurry(self, for_s: float) -> None:
        self.calls.append(("hurry", for_s))


def _membership(fetch: Recorded, *, broken: str = "") -> Membership:
    def new_ledger(lease: GrantedLease) -> LeaseLedger:
        if lease.lease_id == broken:
            raise RuntimeError("a bug in one grant")
        return LeaseLedger(Owner(), lease, Budget(1000, 1 << 20), "g")

    return Membership(
        client=None,  # type: ignore[arg-type]  # grants without progress to read never call it
        group="g",
        stream="s",
        lanes=["realtime"],
        worker_id="w",
        tls=None,
        fetch=fetch,  # type: ignore[arg-type]
        dispatch=None,  # type: ignore[arg-type]
        new_ledger=new_ledger,
        start_from_latest=False,
        connected=threading.Event(),
        closed=threading.Event(),
        end=lambda err: None,
    )


def _grant(p: int) -> Grant:
    ref = PartitionRef("s", "realtime", 1, p)
    return Grant(ref.lease_id, ref, 1, "sp.s.realtime.g1", "c", "c:9092")


def test_grants_of_one_message_start_reading_in_one_step_and_other_events_keep_their_place() -> None:
    """A worker granted a thousand leases at once asks for all of them in its brokers' next Fetch, not for the
    first few while the rest wait out a response; an event after some grants (here a seal) reaches the fetch
    loop after them and before the grants that follow it."""
    fetch = Recorded()
    m = _membership(fetch)
    grants = [_grant(p) for p in range(1000)]
    m.on_events(grants)
    assert fetch.calls == [("add", [g.lease_id for g in grants])]
    assert len(m.leases()) == 1000

    fetch.calls.clear()
    more = [_grant(p) for p in range(1000, 1004)]
    m.on_events([more[0], more[1], Sealed(more[0].lease_id, more[0].partition, 10), more[2], more[3]])
    assert fetch.calls == [
        ("add", [more[0].lease_id, more[1].lease_id]),
        ("touch", None),
        ("add", [more[2].lease_id, more[3].lease_id]),
    ]


def test_told_that_grants_are_coming_the_fetch_loop_hurries_for_as_long_as_it_is_told() -> None:
    """A rewind being applied: the coordinator tells the worker its grants are coming (its brokers' long polls
    are kept short meanwhile), then for how long more once it is applied, or 0 when nothing was; the grants
    themselves start reading as any grants do."""
    fetch = Recorded()
    m = _membership(fetch)
    grant = _grant(0)
    m.on_events([Expect(2000)])
    m.on_events([grant])
    m.on_events([Expect(250)])
    m.on_events([Expect(0)])
    assert fetch.calls == [("hurry", 2.0), ("add", [grant.lease_id]), ("hurry", 0.25), ("hurry", 0.0)]


def test_grants_taken_before_one_that_fails_are_still_read() -> None:
    """A grant whose handling fails ends the message (the session is resumed and the message sent again), but
    the leases taken before it are read: a lease held and never read would stall its partition."""
    fetch = Recorded()
    grants = [_grant(p) for p in range(3)]
    m = _membership(fetch, broken=grants[2].lease_id)
    with pytest.raises(RuntimeError):
        m.on_events(grants)
    assert fetch.calls == [("add", [grants[0].lease_id, grants[1].lease_id])]


class Told:
    """A session as the committer's load reports see it: what each report told."""

    def __init__(self) -> None:
        self.reports: list[dict[str, LeaseLoad]] = []

    def report_load(self, *, leases: dict[str, LeaseLoad], **_: Any) -> None:
        self.reports.append(dict(leases))


def test_a_new_session_is_told_every_leases_load_again() -> None:
    """Loads are told once, when they change: what the last session had not sent yet (a heartbeat's worth)
    went with it, and a lease that stayed as it was would never be told again. A resumed or new session hears
    every lease's load with the next report."""
    m = _membership(Recorded())
    grants = [_grant(p) for p in range(3)]
    m.on_events(grants)
    fetch = SimpleNamespace(take_errors=dict)
    committer = Committer(
        client=None,  # type: ignore[arg-type]  # load reports go through the session alone
        group="g",
        membership=m,
        fetch=fetch,  # type: ignore[arg-type]
        dlq=None,  # type: ignore[arg-type]
        dispatch=None,  # type: ignore[arg-type]
        clock=ManualClock(),
        commit_interval_s=0.1,
        retry_backoff_s=1.0,
        closed=threading.Event(),
        end=lambda err: None,
    )
    first, resumed = Told(), Told()
    m.session = first  # type: ignore[assignment]
    committer._report_load(m.ledgers())
    committer._report_load(m.ledgers())
    assert [sorted(r) for r in first.reports] == [sorted(g.lease_id for g in grants), []], "told once"
    m.session = resumed  # type: ignore[assignment]
    committer._report_load(m.ledgers())
    assert [sorted(r) for r in resumed.reports] == [sorted(g.lease_id for g in grants)]
