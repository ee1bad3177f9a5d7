"""Replay windows (issue 38): a side group reads [T1, T2) of a stream, on every generation that holds part of
it (a drained one is reopened for it alone), its leases end at the window's end, and once it is processed the
sealer marks it finished and its sessions are told; the live groups are not touched."""

from __future__ import annotations

import pytest

from streamplane.coordinator.commitlog import log as commitlog
from streamplane.coordinator.groups import rewind, state, window
from streamplane.coordinator.groups.leases import GRANTED, Lease, Member
from streamplane.coordinator.topology import events
from streamplane.errors import AlreadyExistsError, FailedPreconditionError, InvalidArgumentError
from streamplane.model import Commit, PartitionRef, Subscription
from tests.groups.test_rewind import HOUR, T0, World, _in
from tests.helpers import Domain

MEMBER = Member("w1", "s1", subscriptions=(Subscription("logs"),))


@pytest.fixture
def world(domain: Domain) -> World:
    return World(domain.cluster("east", "west").stream("logs", 2, "east"))


def _create(world: World, **kw: object) -> window.Window:
    return window.create(
        world.d.db,
        world.d.admin,
        "backfill",
        "logs",
        now_ms=world.clock.now_ms(),
        actor="alice",
        **kw,  # type: ignore[arg-type]
    )


def test_a_window_reads_each_generation_from_its_start_to_its_end_and_is_told_when_done(world: World) -> None:
    d = world.d
    made = _create(world, from_ms=T0 + HOUR, until_ms=T0 + 2 * HOUR + 1)
    assert made.applied and made.lost == ()
    assert {(p.partition.generation, p.partition.partition, p.offset, p.again) for p in made.positions} == {
        (1, 0, 10, 10),  # the second half of g1 (drained)
        (1, 1, 10, 10),
        (2, 0, 0, 10),  # all of g2
        (2, 1, 0, 10),
    }
    assert made.records == 40
    assert [world.low(1, p, "backfill") for p in range(2)] == [10, 10]
    assert [world.low(1, p) for p in range(2)] == [20, 20], "the live group is not touched"
    wanted = _in(d, lambda tr: state.group_partitions(tr, [MEMBER], "backfill"))
    assert {(k.generation, k.partition) for k in wanted} == {(1, 0), (1, 1), (2, 0), (2, 1)}

    # a lease of g2, active and growing, ends at the window's end
    held = [Lease(*PartitionRef("logs", "realtime", 2, 0), worker_id="w1", epoch=1, state=GRANTED)]
    ends = {held[0].lease_id: -1}
    assert _in(d, lambda tr: window.session_view(tr, "backfill", held, ends)) is False
    assert ends == {held[0].lease_id: 10}
    d.admin.append("west", "sp.logs.realtime.g2", 0, 5, ts_ms=T0 + 3 * HOUR)  # after the window: never read

    for gen, start, end in ((1, 10, 20), (2, 0, 10)):
        for p in range(2):
            lid = f"logs/realtime/g{gen}/p{p}"
            commitlog.commit(d.db, "backfill", lid, 0, Commit(acked=[(start, end)], high_watermark=end), now_ms=9)
    world.sealer.run_once()
    assert _in(d, lambda tr: window.session_view(tr, "backfill", held, {})) is True
    assert _in(d, lambda tr: state.group_partitions(tr, [MEMBER], "backfill")) == {}
    changes = [e.change for e in events.read_group_events(d.db, "backfill", None)]
    assert changes[0] == window.CREATED and window.FINISHED in changes
    assert _in(d, lambda tr: rewind.reopened(tr, "backfill")) == [], "the reopened g1 is closed again"


def test_a_dry_run_makes_nothing_and_bad_windows_are_refused(world: World) -> None:
    now = world.clock.now_ms()
    preview = _create(world, from_ms=T0, until_ms=T0 + 1, dry_run=True)
    assert not preview.applied and preview.records == 20, "g1's first half, 10 a partition"
    assert _in(world.d, lambda tr: window.ends_of(tr, "backfill")) is None
    for kw, sentence in (
        ({"from_ms": now + 1, "until_ms": 0}, "start must be before its end"),
        ({"from_ms": T0, "until_ms": now + 1}, "ends in the future"),
        ({"from_ms": 0}, "needs its start"),
    ):
        with pytest.raises(InvalidArgumentError, match=sentence):
            _create(world, **kw)
    with pytest.raises(AlreadyExistsError, match="group 'billing' exists"):
        window.create(world.d.db, world.d.admin, "billing", "logs", from_ms=T0, now_ms=now)


def test_a_window_part_of_which_cannot_be_read_is_refused_unless_forced(world: World) -> None:
    world.d.admin.down.add("east")
    with pytest.raises(FailedPreconditionError, match=r"cannot be read .*realtime g1 on cluster east"):
        _create(world, from_ms=T0)
    assert _in(world.d, lambda tr: window.ends_of(tr, "backfill")) is None, "no group was made"
    made = _create(world, from_ms=T0, force=True)
    assert {p.partition.generation for p in made.positions} == {2}


def test_one_torn_entry_holds_back_only_its_own_window_or_rewind_never_the_sealers_pass(world: World) -> None:
    """The sealer closes every group's reopened generations and windows in one pass: a torn progress header,
    a window end that does not decode or a generation record that does not decode concern their own entry."""
    from streamplane.coordinator import keys

    d = world.d
    _create(world, from_ms=T0 + HOUR, until_ms=T0 + 2 * HOUR + 1)  # "backfill"
    window.create(d.db, d.admin, "torn", "logs", from_ms=T0, now_ms=world.clock.now_ms())
    world.apply(world.plan(rewind.RewindTarget(rewind.RewindTo.EARLIEST)))  # billing reopens g1
    ref = PartitionRef("logs", "realtime", 1, 0)

    def poison(tr: object) -> None:
        tr.set(keys.progress_key("billing", ref), b"{torn")  # type: ignore[attr-defined]
        tr.set(keys.window_end_key("torn", ref), b"not a number")  # type: ignore[attr-defined]
        tr.set(keys.progress_key("torn", PartitionRef("logs", "realtime", 2, 0)), b"[1")  # type: ignore[attr-defined]

    _in(d, poison)
    for gen, start, end in ((1, 10, 20), (2, 0, 10)):
        for p in range(2):
            lid = f"logs/realtime/g{gen}/p{p}"
            commitlog.commit(d.db, "backfill", lid, 0, Commit(acked=[(start, end)], high_watermark=end), now_ms=9)
    world.sealer.run_once()  # raises nothing
    assert _in(d, lambda tr: window.session_view(tr, "backfill", [], {})) is True, "the healthy window finished"
    assert _in(d, lambda tr: window.session_view(tr, "torn", [], {})) is False, "the torn one waits, alone"
    assert ("logs", "realtime", 1) in _in(d, lambda tr: rewind.reopened(tr, "billing")), "kept open, not lost"
    member = Member("w1", "s1", subscriptions=(Subscription("logs"),))
    assert ref not in _in(d, lambda tr: state.group_partitions(tr, [member], "torn")), "its torn end is not read"
