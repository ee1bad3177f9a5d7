"""Rewinding a group (issue 38): the commit log forgets what a group finished from a position on, for that
group only; a rewind is planned per generation on each generation's own cluster, reopens a drained
generation for its group alone until it is processed again, lists what cannot be reprocessed, and frees the
group's leases so their holders are fenced."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import suppress

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from streamplane.coordinator import keys
from streamplane.coordinator.commitlog import log as commitlog
from streamplane.coordinator.groups import rewind, state
from streamplane.coordinator.groups.leases import FREE, GRANTED, REVOKING, Lease, Member, read_lease, write_lease
from streamplane.coordinator.topology import events
from streamplane.coordinator.topology.records import get_cluster, get_stream
from streamplane.coordinator.topology.sealing import Sealer, SealingConfig
from streamplane.errors import (
    FailedPreconditionError,
    FencedError,
    InvalidArgumentError,
    LimitExceededError,
    NotFoundError,
)
from streamplane.model import (
    DRAINED,
    Commit,
    PartitionRef,
    Reject,
    Retry,
    RewindTarget,
    RewindTo,
    Subscription,
)
from tests.helpers import Domain

LID = "logs/realtime/g1/p0"
REF = PartitionRef("logs", "realtime", 1, 0)

# -- the commit log's side: a model of one partition's progress --------------------------------------------------

OPS = st.lists(
    st.one_of(
        st.tuples(st.just("ack"), st.integers(0, 300), st.integers(1, 40)),
        st.tuples(st.just("retry"), st.integers(0, 300), st.just(0)),
        st.tuples(st.just("reject"), st.integers(0, 300), st.just(0)),
        st.tuples(st.just("rewind"), st.integers(0, 340), st.just(0)),
    ),
    max_size=40,
)


def _observed(d: Domain, group: str) -> tuple[set[int], set[int], set[int], commitlog.Header]:
    """(done offsets, offsets with retry state, rejected offsets) as the commit log has them, and its header."""
    got = commitlog.progress(d.db, group, LID, max_ranges=10_000)
    done = set(range(got.header.low)) | {o for s, e in got.done for o in range(s, e)}
    rejected = {r.offset for r in commitlog.reject_page(d.db, "logs", group=group, page_size=1000).rejects}
    return done, set(got.retrying), rejected, got.header


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPS)
def test_a_rewind_forgets_exactly_what_was_finished_from_its_offset_on(ops: list[tuple[str, int, int]]) -> None:
    d = Domain().cluster("c").stream("logs", 1)
    done: set[int] = set()
    retrying: set[int] = set()
    rejected: set[int] = set()
    high = 400
    fresh = True  # no progress yet: a rewind then sets where the group starts (all below it is done)
    for kind, offset, size in ops:
        if kind == "ack":
            commitlog.commit(d.db, "g", LID, 0, Commit(acked=[(offset, offset + size)], high_watermark=high), now_ms=1)
            done |= set(range(offset, offset + size))
            fresh = False
        elif kind == "retry" and offset not in done:
            commitlog.commit(d.db, "g", LID, 0, Commit(retries=[Retry(offset, 1, "e")], high_watermark=high), now_ms=1)
            retrying.add(offset)
            fresh = False
        elif kind == "reject" and offset not in done:
            commitlog.commit(d.db, "g", LID, 0, Commit(rejects=[Reject(offset, "bad")], high_watermark=high), now_ms=1)
            done.add(offset)
            rejected.add(offset)
            fresh = False
        elif kind == "rewind":
            low = min(set(range(high + 1)) - done)
            assert _in(d, lambda tr, o=offset: commitlog.done_from(tr, "g", REF, o)) == len(
                {o for o in done if o >= offset}
            ), "the preview counts what the rewind makes the group process again"
            _in(d, lambda tr, o=offset: commitlog.rewind(tr, "g", REF, o, now_ms=2))
            # below the new position nothing changes (everything under the low watermark stays done)
            done = {o for o in done if o < offset} | set(range(offset if fresh else min(low, offset)))
            fresh = False
            retrying = {o for o in retrying if o < offset}
            rejected = {o for o in rejected if o < offset}
        retrying -= done
        got_done, got_retrying, got_rejected, header = _observed(d, "g")
        assert got_done == done
        assert got_retrying == retrying
        assert got_rejected == rejected
        low = min(set(range(high + 1)) - done)
        assert header.low == low
        assert header.done_above == len({o for o in done if o >= low})
        assert (header.retries, header.rejects) == (len(retrying), len(rejected))
    d.close()


def _in(d: Domain, body: object) -> object:
    return d.db.transact(body)  # type: ignore[arg-type]


def test_a_rewind_touches_its_group_only() -> None:
    d = Domain().cluster("c").stream("logs", 1)
    for group in ("a", "b"):
        commitlog.commit(d.db, group, LID, 0, Commit(acked=[(0, 50)], high_watermark=50), now_ms=1)
    _in(d, lambda tr: commitlog.rewind(tr, "a", REF, 10, now_ms=2))
    assert commitlog.progress(d.db, "a", LID).header.low == 10
    assert commitlog.progress(d.db, "b", LID).header.low == 50


# -- planning and applying -------------------------------------------------------------------------------------

T0 = 1_000_000
HOUR = 3_600_000


class World:
    """logs/realtime with two partitions: g1 on east (records at T0 and T0 + 1 h), failed over to g2 on west
    (records at T0 + 2 h), sealed and drained; group "billing" has processed all of it."""

    def __init__(self, d: Domain) -> None:
        self.d = d
        self.sealer = Sealer(d.db, d.admin, lambda: True, SealingConfig(), clock=d.clock)
        for p in range(2):
            d.admin.append("east", "sp.logs.realtime.g1", p, 10, ts_ms=T0)
            d.admin.append("east", "sp.logs.realtime.g1", p, 10, ts_ms=T0 + HOUR)
        d.topology.failover("logs", "realtime", "west", reason="test")
        for p in range(2):
            d.admin.append("west", "sp.logs.realtime.g2", p, 10, ts_ms=T0 + 2 * HOUR)
        self.clock.advance(T0 + 3 * HOUR)
        for gen in (1, 2):
            for p in range(2):
                lid = f"logs/realtime/g{gen}/p{p}"
                commitlog.commit(d.db, "billing", lid, 0, Commit(acked=[(0, 20 if gen == 1 else 10)]), now_ms=1)
        for _ in range(3):
            self.sealer.run_once()
        assert self.generation(1).state == DRAINED

    @property
    def clock(self):  # type: ignore[no-untyped-def]
        return self.d.clock

    def generation(self, number: int):  # type: ignore[no-untyped-def]
        lane = get_stream(self.d.db, "logs").require_lane("realtime")
        return lane.generation(number)

    def plan(self, target: RewindTarget, **kw: object) -> rewind.RewindPlan:
        return rewind.plan(self.d.db, self.d.admin, "billing", "logs", target, now_ms=self.clock.now_ms(), **kw)  # type: ignore[arg-type]

    def apply(self, plan: rewind.RewindPlan) -> rewind.RewindPlan:
        return rewind.apply(self.d.db, plan, actor="alice", now_ms=self.clock.now_ms())

    def low(self, gen: int, p: int, group: str = "billing") -> int:
        return commitlog.progress(self.d.db, group, f"logs/realtime/g{gen}/p{p}").header.low


@pytest.fixture
def world(domain: Domain) -> Iterator[World]:
    yield World(domain.cluster("east", "west").stream("logs", 2, "east"))


def test_a_time_is_looked_up_on_each_generations_own_cluster(world: World) -> None:
    plan = world.plan(RewindTarget(RewindTo.TIME, time_ms=T0 + HOUR))
    assert {(p.partition.generation, p.partition.partition, p.offset, p.again) for p in plan.positions} == {
        (1, 0, 10, 10),  # the hour's records of g1, on east
        (1, 1, 10, 10),
        (2, 0, 0, 10),  # all of g2, on west
        (2, 1, 0, 10),
    }
    assert plan.again == 40 and plan.lost == () and not plan.applied
    assert world.low(1, 0) == 20, "a plan is a preview: nothing changed"


def test_a_time_after_every_record_rewinds_nothing(world: World) -> None:
    plan = world.plan(RewindTarget(RewindTo.TIME, time_ms=T0 + 2 * HOUR + 1))
    assert plan.positions == ()


def test_applying_reopens_the_drained_generation_for_that_group_alone_until_it_is_processed_again(
    world: World,
) -> None:
    d = world.d
    member = Member("w1", "s1", subscriptions=(Subscription("logs"),))
    before = _in(d, lambda tr: state.group_partitions(tr, [member], "billing"))
    assert all(k.generation == 2 for k in before), "a drained generation is nobody's to read"

    applied = world.apply(world.plan(RewindTarget(RewindTo.TIME, time_ms=T0 + HOUR)))
    assert applied.applied
    assert [world.low(1, p) for p in range(2)] == [10, 10]
    assert [world.low(2, p) for p in range(2)] == [0, 0]
    assert world.generation(1).state == DRAINED, "the generation stays drained for everybody else"
    wanted = _in(d, lambda tr: state.group_partitions(tr, [member], "billing"))
    assert {k.generation for k in wanted} == {1, 2}
    assert {k.generation for k in _in(d, lambda tr: state.group_partitions(tr, [member], "other"))} == {2}
    (event,) = [e for e in events.read_group_events(d.db, "billing", None) if e.change == rewind.REWOUND]
    assert event.actor == "alice" and "4 partition(s), 40 record(s) again" in event.reason

    # the group processes g1 again: the sealer closes it, and the group stops reading it
    for p in range(2):
        commitlog.commit(d.db, "billing", f"logs/realtime/g1/p{p}", 0, Commit(acked=[(10, 20)]), now_ms=2)
    world.sealer.run_once()
    assert _in(d, lambda tr: rewind.reopened(tr, "billing")) == []
    assert {k.generation for k in _in(d, lambda tr: state.group_partitions(tr, [member], "billing"))} == {2}
    finished = [e for e in events.read_group_events(d.db, "billing", None) if e.change == rewind.FINISHED]
    assert len(finished) == 1 and "g1 processed again" in finished[0].reason


def test_a_held_lease_is_granted_again_to_its_holder_at_a_new_epoch_so_the_old_epoch_is_fenced(world: World) -> None:
    d = world.d
    ref = PartitionRef("logs", "realtime", 2, 0)
    held = Lease(*ref, worker_id="w1", epoch=3, state=GRANTED)
    _in(d, lambda tr: write_lease(tr, "billing", None, held))
    applied = world.apply(world.plan(RewindTarget(RewindTo.EARLIEST)))
    assert applied.leases_regranted == 1
    lease = _in(d, lambda tr: read_lease(tr, "billing", ref))
    assert lease is not None and (lease.state, lease.worker_id, lease.epoch) == (GRANTED, "w1", 4), (
        "its holder starts over at once, at a new epoch, without waiting for the owner's pass"
    )
    with pytest.raises(FencedError):
        commitlog.commit(d.db, "billing", ref.lease_id, 3, Commit(acked=[(0, 10)]), now_ms=5)
    assert world.low(2, 0) == 0, "the old holder's late commit did not undo the rewind"


def test_a_held_partition_with_nothing_committed_past_the_position_is_rewound_too(domain: Domain) -> None:
    """Its holder may have handled records whose commits are still on their way: left as it is, they would
    land at the old epoch and never be processed again. It is granted again at a new epoch, and their commits
    are fenced; a partition nobody holds, with nothing finished past the position, is left as it is."""
    d = domain.cluster("east").stream("logs", 2, "east")
    for p in range(2):
        d.admin.append("east", "sp.logs.realtime.g1", p, 10, ts_ms=T0)
        commitlog.commit(d.db, "billing", f"logs/realtime/g1/p{p}", 0, Commit(high_watermark=10), now_ms=1)
    held = Lease(*PartitionRef("logs", "realtime", 1, 0), worker_id="w1", epoch=3, state=GRANTED)
    _in(d, lambda tr: write_lease(tr, "billing", None, held))
    plan = rewind.plan(d.db, d.admin, "billing", "logs", RewindTarget(RewindTo.EARLIEST), now_ms=T0)
    assert [(p.partition.partition, p.offset, p.again) for p in plan.positions] == [(0, 0, 0)]
    rewind.apply(d.db, plan, actor="alice", now_ms=T0)
    lease = _in(d, lambda tr: read_lease(tr, "billing", held.key))
    assert lease is not None and lease.epoch == 4
    with pytest.raises(FencedError):  # what the old epoch handled before the rewind comes again
        commitlog.commit(d.db, "billing", "logs/realtime/g1/p0", 3, Commit(acked=[(0, 5)]), now_ms=5)


def test_a_held_partition_behind_the_time_keeps_its_position_and_is_granted_again(domain: Domain) -> None:
    """The group stands at 2 and its worker has handled 2..8, their commits on their way: a rewind to 4 must
    not let them land, or 4..8 would never be processed again. The partition keeps its position (a rewind
    only goes back), its holder starts over at a new epoch; one nobody holds is left as it is."""
    d = domain.cluster("east").stream("logs", 2, "east")
    waiting_since = T0 - 5_000  # the record at 2, the oldest the group has to do
    for p in range(2):
        d.admin.append("east", "sp.logs.realtime.g1", p, 10, ts_ms=T0)
        body = Commit(acked=[(0, 2)], oldest_pending_ts_ms=waiting_since)
        commitlog.commit(d.db, "billing", f"logs/realtime/g1/p{p}", 0, body, now_ms=1)
    held = Lease(*PartitionRef("logs", "realtime", 1, 0), worker_id="w1", epoch=3, state=GRANTED)
    _in(d, lambda tr: write_lease(tr, "billing", None, held))
    to_4 = {PartitionRef("logs", "realtime", 1, p): 4 for p in range(2)}
    plan = rewind.plan(d.db, d.admin, "billing", "logs", RewindTarget(RewindTo.OFFSETS, offsets=to_4), now_ms=T0)
    assert [(p.partition.partition, p.offset, p.again) for p in plan.positions] == [(0, 4, 0)]
    rewind.apply(d.db, plan, actor="alice", now_ms=T0)
    with pytest.raises(FencedError):
        commitlog.commit(d.db, "billing", "logs/realtime/g1/p0", 3, Commit(acked=[(2, 8)]), now_ms=5)
    headers = [commitlog.progress(d.db, "billing", f"logs/realtime/g1/p{p}").header for p in range(2)]
    assert [h.low for h in headers] == [2, 2]
    assert headers[0].oldest_pending_ts_ms == waiting_since, "the time lag still counts from the record at 2"


def test_a_lease_being_moved_is_freed_for_the_owner_to_grant_where_it_was_going(world: World) -> None:
    d = world.d
    ref = PartitionRef("logs", "realtime", 2, 1)
    moving = Lease(*ref, worker_id="w1", epoch=3, state=REVOKING, target="w2", deadline_ms=10_000)
    _in(d, lambda tr: write_lease(tr, "billing", None, moving))
    world.apply(world.plan(RewindTarget(RewindTo.EARLIEST)))
    lease = _in(d, lambda tr: read_lease(tr, "billing", ref))
    assert lease is not None and (lease.state, lease.worker_id, lease.epoch) == (FREE, "", 3)
    with pytest.raises(FencedError):
        commitlog.commit(d.db, "billing", ref.lease_id, 3, Commit(acked=[(0, 10)]), now_ms=5)


def test_what_cannot_be_reprocessed_is_listed_per_generation(world: World) -> None:
    d = world.d
    d.admin.down.add("east")
    plan = world.plan(RewindTarget(RewindTo.TIME, time_ms=T0))
    assert [p.partition.generation for p in plan.positions] == [2, 2]
    (lost,) = plan.lost
    assert lost.startswith("realtime g1 on cluster east cannot be read:") and "unreachable" in lost

    d.admin.down.clear()
    d.admin.expire("east", "sp.logs.realtime.g1", 1, 5)
    (lost,) = world.plan(RewindTarget(RewindTo.TIME, time_ms=T0)).lost
    assert lost == "realtime g1 on cluster east: p1 retention removed offsets below 5 (some may be after the time)"

    d.admin.delete_topic(get_cluster(d.db, "east"), "sp.logs.realtime.g1")
    (lost,) = world.plan(RewindTarget(RewindTo.EARLIEST)).lost
    assert "sp.logs.realtime.g1 is not on cluster east any more" in lost


def test_offsets_are_checked_against_the_stream(world: World) -> None:
    ref = PartitionRef("logs", "realtime", 2, 1)
    plan = world.plan(RewindTarget(RewindTo.OFFSETS, offsets={ref: 4}))
    assert [(p.partition, p.offset, p.again) for p in plan.positions] == [(ref, 4, 6)]
    cases = {
        PartitionRef("logs", "realtime", 2, 9): "has 2 partitions; there is no partition 9",
        PartitionRef("logs", "realtime", 7, 0): "has no generation 7",
        PartitionRef("other", "realtime", 1, 0): "is not a partition of the lanes rewound",
    }
    for bad, sentence in cases.items():
        with pytest.raises((InvalidArgumentError, NotFoundError), match=sentence):
            world.plan(RewindTarget(RewindTo.OFFSETS, offsets={bad: 0}))
    with pytest.raises(InvalidArgumentError, match="ends at offset 10: it has no offset 11"):
        world.plan(RewindTarget(RewindTo.OFFSETS, offsets={ref: 11}))


def test_bad_rewinds_are_refused_with_a_sentence(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    now = world.clock.now_ms()
    with pytest.raises(InvalidArgumentError, match="in the future"):
        world.plan(RewindTarget(RewindTo.TIME, time_ms=now + 1))
    with pytest.raises(InvalidArgumentError, match="needs the time"):
        world.plan(RewindTarget(RewindTo.TIME))
    with pytest.raises(NotFoundError, match="group 'bililng' has never read stream logs"):
        rewind.plan(world.d.db, world.d.admin, "bililng", "logs", RewindTarget(RewindTo.EARLIEST), now_ms=now)
    with pytest.raises(NotFoundError, match="stream 'nope' does not exist"):
        rewind.plan(world.d.db, world.d.admin, "billing", "nope", RewindTarget(RewindTo.EARLIEST), now_ms=now)
    with pytest.raises(NotFoundError, match="lane"):
        world.plan(RewindTarget(RewindTo.EARLIEST), lane="bulk2")
    monkeypatch.setattr(rewind, "MAX_PARTITIONS", 3)
    with pytest.raises(LimitExceededError, match="covers 4 partitions; the limit is 3"):
        world.plan(RewindTarget(RewindTo.EARLIEST))


def test_a_plan_made_before_its_generation_was_abandoned_is_refused_and_writes_nothing(world: World) -> None:
    plan = world.plan(RewindTarget(RewindTo.EARLIEST))
    world.d.admin.append("west", "sp.logs.realtime.g2", 0, 5)  # nobody processes these
    world.d.topology.failover("logs", "realtime", "east", reason="back")  # g2 seals (no producer), undrained
    for _ in range(2):
        world.sealer.run_once()
    world.d.topology.abandon_generation("logs", "realtime", 2, "given up")
    with pytest.raises(FailedPreconditionError, match="g2 of logs was abandoned since: nothing was rewound"):
        world.apply(plan)
    assert [world.low(g, p) for g in (1, 2) for p in range(2)] == [20, 20, 10, 10]
    assert _in(world.d, lambda tr: rewind.reopened(tr, "billing")) == []


def test_deleting_the_group_forgets_what_its_rewind_reopened(world: World) -> None:
    from streamplane.coordinator.groups import lifecycle

    world.apply(world.plan(RewindTarget(RewindTo.EARLIEST)))
    assert _in(world.d, lambda tr: rewind.reopened(tr, "billing"))
    lifecycle.delete_group(world.d.db, "billing", now_ms=world.clock.now_ms(), force=True)
    r = keys.REOPENED.range()
    assert _in(world.d, lambda tr: tr.get_range(r.start, r.stop)) == []


# -- histories: rewinds among failovers, seals, drains and processing, in any order --------------------------------


class RewindHistory(RuleBasedStateMachine):
    """A stream that fails over between two clusters while records arrive (each at a later time), a group
    that processes what it is given, a holder whose commits are on their way, the sealer, and rewinds to random
    times, in any order. Whatever the history: every partition the group has not finished is one it reads (no
    record is ever left behind), a rewind never lets the group skip a record at or after its time (nor a
    commit on its way count one as done), and a reopened generation is closed once the group is done with it."""

    def __init__(self) -> None:
        super().__init__()
        self.d = Domain().cluster("east", "west").stream("logs", 2, "east")
        self.sealer = Sealer(self.d.db, self.d.admin, lambda: True, SealingConfig(), clock=self.d.clock)
        self.member = Member("w1", "s1", subscriptions=(Subscription("logs"),))
        self.times: list[int] = []
        self.handled: dict[PartitionRef, tuple[int, int, int]] = {}
        """Records a holder handled, their commit on its way: (epoch, from, to) by partition."""
        self.d.clock.advance(1_000)

    def _lane(self):  # type: ignore[no-untyped-def]
        return get_stream(self.d.db, "logs").require_lane("realtime")

    @rule(records=st.integers(1, 5), partition=st.integers(0, 1))
    def write(self, records: int, partition: int) -> None:
        gen = self._lane().active
        self.d.clock.advance(10)
        self.d.admin.append(gen.cluster, gen.topic, partition, records, ts_ms=self.d.clock.now_ms())
        self.times.append(self.d.clock.now_ms())

    @rule()
    def fail_over(self) -> None:
        gen = self._lane().active
        self.d.topology.failover("logs", "realtime", "west" if gen.cluster == "east" else "east", reason="t")

    @rule()
    def sealer_pass(self) -> None:
        self.sealer.run_once()

    @rule(share=st.floats(0, 1))
    def process(self, share: float) -> None:
        """The group processes a share of what it has left on every partition it reads."""
        wanted = _in(self.d, lambda tr: state.group_partitions(tr, [self.member], "logs-readers"))
        lane = self._lane()
        for ref in wanted:
            gen = lane.generation(ref.generation)
            assert gen is not None
            end = self.d.admin.topics[(gen.cluster, gen.topic)][ref.partition]
            low = commitlog.progress(self.d.db, "logs-readers", ref.lease_id).header.low
            upto = low + int((end - low) * share)
            if upto > low:
                commitlog.commit(
                    self.d.db,
                    "logs-readers",
                    ref.lease_id,
                    0,
                    Commit(acked=[(low, upto)], high_watermark=end),
                    now_ms=1,
                )

    @rule(partition=st.integers(0, 3), share=st.floats(0, 1))
    def handle(self, partition: int, share: float) -> None:
        """A worker holds one partition the group reads and handles a share of what is left: its commit is on
        its way (it lands in `land`, or is fenced)."""
        wanted = sorted(_in(self.d, lambda tr: state.group_partitions(tr, [self.member], "logs-readers")))
        if not wanted:
            return
        ref = wanted[partition % len(wanted)]
        gen = self._lane().generation(ref.generation)
        assert gen is not None
        lease = _in(self.d, lambda tr: read_lease(tr, "logs-readers", ref))
        if lease is None or lease.state == FREE:
            taken = Lease(*ref, worker_id="w1", epoch=(lease.epoch if lease else 0) + 1, state=GRANTED)
            _in(self.d, lambda tr: write_lease(tr, "logs-readers", lease, taken))
            lease = taken
        end = self.d.admin.topics[(gen.cluster, gen.topic)][ref.partition]
        low = commitlog.progress(self.d.db, "logs-readers", ref.lease_id).header.low
        upto = low + int((end - low) * share)
        if upto > low:
            self.handled[ref] = (lease.epoch, low, upto)

    def _land(self, ref: PartitionRef) -> None:
        """The holder's commit of what it handled on `ref` arrives (FencedError if its epoch is over)."""
        epoch, low, upto = self.handled.pop(ref)
        late = Commit(acked=[(low, upto)], high_watermark=upto)
        commitlog.commit(self.d.db, "logs-readers", ref.lease_id, epoch, late, now_ms=1)

    def _rewind(self, target: RewindTarget) -> bool:
        """Plan and apply a rewind of the group; False when it has read nothing yet (nothing to rewind)."""
        now = self.d.clock.now_ms()
        try:
            plan = rewind.plan(self.d.db, self.d.admin, "logs-readers", "logs", target, now_ms=now)
        except NotFoundError:
            return False
        assert plan.lost == ()
        rewind.apply(self.d.db, plan, actor="t", now_ms=now)
        return True

    @rule()
    def land(self) -> None:
        """The commits on their way land, or are fenced (their records are read again)."""
        for ref in sorted(self.handled):
            with suppress(FencedError):
                self._land(ref)

    @precondition(lambda self: bool(self.times))
    @rule(pick=st.integers(0, 10**6))
    def rewind_to_a_time(self, pick: int) -> None:
        at = self.times[pick % len(self.times)]
        if not self._rewind(RewindTarget(RewindTo.TIME, time_ms=at)):
            return
        lane = self._lane()
        for gen in lane.generations:
            for p in range(gen.partitions):
                first = self.d.admin.bounds(get_cluster(self.d.db, gen.cluster), gen.topic, gen.partitions, at)[p].at
                header = commitlog.progress(self.d.db, "logs-readers", f"logs/realtime/g{gen.number}/p{p}").header
                if header.updated_ms:
                    assert header.low <= first, "a record at or after the time would be skipped"
                ref = PartitionRef("logs", "realtime", gen.number, p)
                if ref in self.handled and self.handled[ref][2] > first:
                    with pytest.raises(FencedError):  # else records at or after the time count as done
                        self._land(ref)

    @precondition(lambda self: bool(self.handled))
    @rule(pick=st.integers(0, 10**6))
    def rewind_into_what_a_holder_handled(self, pick: int) -> None:
        """A rewind to an offset among records a holder handled, their commit on its way: that commit is fenced
        (the group standing before the offset or not), so the records from the offset on come again."""
        ref = sorted(self.handled)[pick % len(self.handled)]
        _, low, upto = self.handled[ref]
        at = low + pick % (upto - low)
        if not self._rewind(RewindTarget(RewindTo.OFFSETS, offsets={ref: at})):
            return
        with pytest.raises(FencedError):
            self._land(ref)
        assert commitlog.progress(self.d.db, "logs-readers", ref.lease_id).header.low <= at

    @invariant()
    def nothing_unfinished_is_left_unread(self) -> None:
        wanted = _in(self.d, lambda tr: state.group_partitions(tr, [self.member], "logs-readers"))
        for gen in self._lane().generations:
            for p in range(gen.partitions):
                ref = PartitionRef("logs", "realtime", gen.number, p)
                header = commitlog.progress(self.d.db, "logs-readers", ref.lease_id).header
                end = self.d.admin.topics[(gen.cluster, gen.topic)][p]
                if header.low < end:
                    assert ref in wanted, f"{ref.lease_id} has records {header.low}..{end} nobody will read"

    @invariant()
    def a_reopened_generation_closes_once_done(self) -> None:
        for stream, lane, number in _in(self.d, lambda tr: rewind.reopened(tr, "logs-readers")):
            gen = get_stream(self.d.db, stream).require_lane(lane).generation(number)
            assert gen is not None and gen.state == DRAINED
        self.sealer.run_once()
        for _, _, number in _in(self.d, lambda tr: rewind.reopened(tr, "logs-readers")):
            gen = self._lane().generation(number)
            assert gen is not None
            assert any(
                commitlog.progress(self.d.db, "logs-readers", f"logs/realtime/g{number}/p{p}").header.low < end
                for p, end in enumerate(gen.end_offsets)
            ), "a reopened generation the group has finished again is closed"

    def teardown(self) -> None:
        self.d.close()


RewindHistory.TestCase.settings = settings(
    max_examples=60, stateful_step_count=30, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
test_rewind_histories = RewindHistory.TestCase


def test_the_time_lag_after_a_rewind_counts_from_the_oldest_record_to_do_again(world: World) -> None:
    """Until the group's next commit says better, the commit log's time lag counts from the record each
    partition starts at: its own timestamp (looked up) for earliest and offsets, the time for a time."""
    d = world.d
    now = world.clock.now_ms()
    at = world.plan(RewindTarget(RewindTo.TIME, time_ms=T0 + HOUR))
    assert at.positions and {p.pending_ts_ms for p in at.positions} == {T0 + HOUR}
    plan = world.plan(RewindTarget(RewindTo.EARLIEST))
    assert {(p.partition.generation, p.pending_ts_ms) for p in plan.positions} == {(1, T0), (2, T0 + 2 * HOUR)}
    world.apply(plan)
    lag = commitlog.lag(d.db, "billing", now_ms=now)
    assert lag.time_lag_ms == now - T0, "the oldest record to do again is g1's first"
