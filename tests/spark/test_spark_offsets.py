"""Planning micro-batches over generations and partitions (pure: no Spark, no cluster).

The unit tests pin the planner's rules one by one; `SourceHistory` then holds it to a reference model over
random histories of the stream: failovers before and during the query, partition counts changing, seals and
drains in any order, retention removing old offsets, availableNow targets, limits, and restarts from a
checkpoint (the offset's JSON, as Spark keeps it).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from streamplane.errors import InvalidArgumentError
from streamplane.model import ABANDONED, ACTIVE, DRAINED, DRAINING, SEALED, SETTLED, GenerationState, PartitionRef
from streamplane.spark.offsets import (
    Offset,
    PartState,
    generation_key,
    generation_of,
    initial_offset,
    next_offset,
    offset_key,
    parse_starting_offsets,
    ranges,
    split,
)

SOURCE = {"coordinator": "c:1", "stream": "s", "group": ""}


def state(lane: str, gen: int, p: int, earliest: int, latest: int, phase: GenerationState = ACTIVE) -> PartState:
    return PartState(PartitionRef("s", lane, gen, p), f"sp.s.{lane}.g{gen}", "b:1", earliest, latest, phase)


def at(positions: dict[str, int], done: tuple[str, ...] = ()) -> Offset:
    return Offset(SOURCE, positions, frozenset(done))


def test_a_limit_finishes_the_older_generation_first_and_shares_rows_by_what_partitions_have() -> None:
    states = [state("realtime", 1, 0, 0, 100), state("realtime", 2, 0, 0, 300), state("realtime", 2, 1, 0, 100)]
    end = next_offset(at({"realtime/1/0": 40, "realtime/2/0": 0, "realtime/2/1": 0}), states, max_rows=160)
    assert end.positions["realtime/1/0"] == 100  # the draining generation is finished first
    assert end.positions["realtime/2/0"] + end.positions["realtime/2/1"] == 100
    assert (end.positions["realtime/2/0"], end.positions["realtime/2/1"]) == (75, 25)


def test_a_sealed_generation_read_to_its_end_is_done_and_stays_done_after_it_drains() -> None:
    """The reported bug: the query's own commits drained generation 1, which then dropped out of the offset and
    came back at its earliest offset, to be read again and again."""
    sealed = [state("realtime", 1, 0, 0, 50, SEALED), state("realtime", 2, 0, 0, 10)]
    end = next_offset(at({"realtime/1/0": 20, "realtime/2/0": 0}), sealed)
    assert end == at({"realtime/1/0": 50, "realtime/2/0": 10}, done=("realtime/1",))
    drained = [state("realtime", 1, 0, 0, 50, DRAINED), state("realtime", 2, 0, 0, 10)]
    assert next_offset(end, drained) == end  # nothing new: Spark runs no batch
    assert next_offset(end, drained[1:]) == end  # nor when the topology no longer lists it


def test_a_generation_settled_before_the_query_saw_it_is_not_read() -> None:
    states = [state("realtime", 1, 0, 0, 50, DRAINED), state("realtime", 2, 0, 0, 10)]
    first = initial_offset(SOURCE, states, "earliest")
    assert first == at({"realtime/2/0": 0}, done=("realtime/1",))
    # a checkpoint written before "done" existed had dropped its keys: it is recognised the same way
    old = Offset.from_json({"source": SOURCE, "positions": {"realtime/2/0": 4}})
    assert next_offset(old, states) == at({"realtime/2/0": 10}, done=("realtime/1",))


def test_a_failover_generation_enters_at_its_earliest_offset_and_advances_from_the_next_plan() -> None:
    start = at({"realtime/1/0": 50}, done=())
    states = [state("realtime", 1, 0, 0, 50, DRAINING), state("realtime", 2, 0, 7, 30), state("realtime", 2, 1, 0, 3)]
    entered = next_offset(start, states)
    assert entered.positions == {"realtime/1/0": 50, "realtime/2/0": 7, "realtime/2/1": 0}
    assert ranges(start, entered) == []
    after = next_offset(entered, states)
    assert ranges(entered, after) == [("realtime/2/0", 7, 30), ("realtime/2/1", 0, 3)]


def test_an_abandoned_generation_is_done_where_the_query_was() -> None:
    states = [state("realtime", 1, 0, 0, 50, ABANDONED)]
    assert next_offset(at({"realtime/1/0": 20}), states) == at({"realtime/1/0": 20}, done=("realtime/1",))


def test_available_now_stops_at_its_target_and_skips_what_came_after() -> None:
    states = [state("realtime", 1, 0, 0, 500), state("realtime", 2, 0, 0, 80)]
    end = next_offset(at({"realtime/1/0": 0, "realtime/2/0": 0}), states, None, target={"realtime/1/0": 300})
    assert end.positions == {"realtime/1/0": 300, "realtime/2/0": 0}
    assert next_offset(end, states, None, target={"realtime/1/0": 300}) == end


def test_positions_never_go_back_even_when_a_cluster_reports_less() -> None:
    start = at({"realtime/1/0": 40})
    assert next_offset(start, [state("realtime", 1, 0, 0, 10)]) == start
    assert next_offset(start, []) == start  # a partition that cannot be looked at keeps its position


def test_starting_offsets() -> None:
    states = [state("realtime", 1, 0, 5, 50), state("realtime", 1, 1, 0, 70), state("backlog", 1, 0, 0, 9)]
    assert initial_offset(SOURCE, states, "earliest").positions == {
        "realtime/1/0": 5,
        "realtime/1/1": 0,
        "backlog/1/0": 0,
    }
    assert initial_offset(SOURCE, states, "latest").positions == {
        "realtime/1/0": 50,
        "realtime/1/1": 70,
        "backlog/1/0": 9,
    }
    chosen = parse_starting_offsets('{"realtime/1": {"0": 2, "1": -1}}')
    assert isinstance(chosen, dict)
    assert initial_offset(SOURCE, states, chosen).positions == {"realtime/1/0": 5, "realtime/1/1": 70, "backlog/1/0": 0}
    for bad in ("{", "[1]", '{"realtime": {"0": 1}}', '{"realtime/1": {"0": -7}}', '{"realtime/1": {"x": 1}}'):
        with pytest.raises(InvalidArgumentError, match="startingOffsets"):
            parse_starting_offsets(bad)


def test_an_offset_survives_the_checkpoint_and_a_foreign_one_is_refused_with_a_sentence() -> None:
    offset = at({"realtime/2/0": 9, "realtime/1/0": 50}, done=("realtime/1",))
    text = json.dumps(offset.to_json())
    assert Offset.from_json(json.loads(text)) == offset
    assert text == json.dumps(Offset.from_json(json.loads(text)).to_json())  # stable: equal offsets compare equal
    with pytest.raises(InvalidArgumentError, match="checkpoint holds an offset"):
        Offset.from_json({"positions": {"realtime/1/0": "x"}})


def test_split_cuts_a_range_into_nearly_equal_pieces() -> None:
    assert split(0, 10, 3) == [(0, 4), (4, 7), (7, 10)]
    assert split(5, 7, 8) == [(5, 6), (6, 7)]


# -- the model ----------------------------------------------------------------------------------------------------


@dataclass
class Gen:
    """One generation of the reference world: every record of every partition, in order."""

    lane: str
    number: int
    written: list[int]
    earliest: list[int]
    phase: GenerationState = ACTIVE
    ends: list[int] = field(default_factory=list)

    @property
    def key(self) -> str:
        return f"{self.lane}/{self.number}"

    def states(self) -> list[PartState]:
        fixed = bool(self.ends)
        out = []
        for p, written in enumerate(self.written):
            end = self.ends[p] if fixed else written
            phase = SEALED if fixed and self.phase not in SETTLED else self.phase
            out.append(state(self.lane, self.number, p, min(self.earliest[p], end), end, phase))
        return out


LANES = ("realtime", "backlog")


class SourceHistory(RuleBasedStateMachine):
    """A stream's history and a query's plans, interleaved at random; the reference is the world's records."""

    @initialize(parts=st.lists(st.integers(1, 4), min_size=2, max_size=2))
    def create(self, parts: list[int]) -> None:
        self.gens: list[Gen] = [Gen(lane, 1, [0] * n, [0] * n) for lane, n in zip(LANES, parts, strict=True)]
        self.offset: Offset | None = None
        self.target: dict[str, int] | None = None
        self.max_rows: int | None = None
        self.read: dict[str, list[tuple[int, int]]] = {}
        self.entered: dict[str, int] = {}  # where each key entered the query
        self.seen: set[str] = set()  # generations the query saw while they were not settled
        self.skipped: set[str] = set()  # generations settled before the query saw them
        self.plans_since_change = 0

    # -- the stream's history
    def active(self, lane: str) -> Gen:
        return next(g for g in reversed(self.gens) if g.lane == lane and g.phase == ACTIVE)

    def changed(self) -> None:
        self.plans_since_change = 0

    @rule(lane=st.sampled_from(LANES), p=st.integers(0, 3), n=st.integers(1, 40))
    def produce(self, lane: str, p: int, n: int) -> None:
        gen = self.active(lane)
        gen.written[p % len(gen.written)] += n
        self.changed()

    @rule(lane=st.sampled_from(LANES), parts=st.integers(1, 4))
    def failover(self, lane: str, parts: int) -> None:
        old = self.active(lane)
        old.phase = DRAINING
        self.gens.append(Gen(lane, max(g.number for g in self.gens if g.lane == lane) + 1, [0] * parts, [0] * parts))
        self.changed()

    @rule(data=st.data())
    def seal(self, data: st.DataObject) -> None:
        draining = [g for g in self.gens if g.phase == DRAINING]
        if draining:
            gen = data.draw(st.sampled_from(draining))
            gen.phase, gen.ends = SEALED, list(gen.written)
            self.changed()

    @rule(data=st.data())
    def drain(self, data: st.DataObject) -> None:
        """Drains come in any order, also before the query read a generation (other groups finished it)."""
        sealed = [g for g in self.gens if g.phase == SEALED]
        if sealed:
            data.draw(st.sampled_from(sealed)).phase = DRAINED
            self.changed()

    @rule(lane=st.sampled_from(LANES), n=st.integers(0, 30))
    def flap(self, lane: str, n: int) -> None:
        """A generation that comes and goes between two plans: written, failed over from, sealed and drained by
        other groups before this query looks again."""
        self.failover(lane, 1)
        self.produce(lane, 0, n) if n else None
        gen = self.active(lane)
        self.failover(lane, 1)
        gen.phase, gen.ends = DRAINED, list(gen.written)

    @rule(data=st.data(), n=st.integers(1, 30))
    def retention(self, data: st.DataObject, n: int) -> None:
        gen = data.draw(st.sampled_from(self.gens))
        p = data.draw(st.integers(0, len(gen.written) - 1))
        gen.earliest[p] = min(gen.written[p], gen.earliest[p] + n)
        self.changed()

    # -- the query
    def states(self) -> list[PartState]:
        return [s for g in self.gens for s in g.states()]

    def look(self) -> None:
        for g in self.gens:
            if g.key in self.seen or g.key in self.skipped:
                continue
            (self.skipped if g.phase in SETTLED else self.seen).add(g.key)

    @precondition(lambda self: self.offset is None)
    @rule(starting=st.sampled_from(["earliest", "latest"]))
    def start(self, starting: str) -> None:
        self.look()
        self.offset = initial_offset(SOURCE, self.states(), starting)
        self.entered = dict(self.offset.positions)

    @precondition(lambda self: self.offset is not None)
    @rule(max_rows=st.one_of(st.none(), st.integers(1, 60)))
    def available_now(self, max_rows: int | None) -> None:
        self.target = {offset_key(s.part): s.latest for s in self.states()}
        self.max_rows = max_rows

    @precondition(lambda self: self.offset is not None)
    @rule(max_rows=st.one_of(st.none(), st.integers(1, 60)))
    def processing_time(self, max_rows: int | None) -> None:
        self.target, self.max_rows = None, max_rows

    @precondition(lambda self: self.offset is not None)
    @rule()
    def restart_from_checkpoint(self) -> None:
        """A new reader from the checkpoint: the offset as JSON, and no availableNow target until asked."""
        assert self.offset is not None
        self.offset = Offset.from_json(json.loads(json.dumps(self.offset.to_json())))
        self.target = None

    @precondition(lambda self: self.offset is not None)
    @rule()
    def plan(self) -> None:
        assert self.offset is not None
        self.look()
        start, states = self.offset, self.states()
        end = next_offset(start, states, self.max_rows, self.target)
        latest = {offset_key(s.part): s.latest for s in states}
        earliest = {offset_key(s.part): s.earliest for s in states}
        # offsets never go back, a key never leaves, a done generation stays done
        for key, pos in start.positions.items():
            assert end.positions[key] >= pos, (key, pos, end.positions[key])
        assert start.done <= end.done
        for key, pos in end.positions.items():
            if key not in start.positions:  # first seen: it enters at its earliest offset, reading nothing yet
                assert generation_of(key) in self.seen
                assert pos == earliest[key], (key, pos, earliest[key])
                self.entered[key] = pos
        # the batch reads what exists, within its limit, right after what was read before: no overlap, no gap
        batch = ranges(start, end)
        if self.max_rows is not None:
            assert sum(b - a for _, a, b in batch) <= self.max_rows
        for key, a, b in batch:
            assert b <= latest[key]
            assert a == (self.read[key][-1][1] if self.read.get(key) else self.entered[key])
            if self.target is not None:
                assert b <= self.target.get(key, a)
            self.read.setdefault(key, []).append((a, b))
        for gkey in end.done - start.done:
            assert gkey in self.skipped or all(
                s.state in SETTLED or end.positions[offset_key(s.part)] >= s.latest
                for s in states
                if generation_key(s.part.lane, s.part.generation) == gkey
            )
        self.offset = end
        self.plans_since_change += 1

    @invariant()
    def a_stable_world_is_read_to_its_end_and_the_plan_then_stops(self) -> None:
        """With nothing changing, a few plans reach a fixpoint (availableNow ends; a processingTime trigger then
        plans nothing), and every record of every generation the query saw was planned exactly once."""
        if self.offset is None or self.plans_since_change < 1:
            return
        offset, target, max_rows = self.offset, self.target, self.max_rows
        states = self.states()
        total = sum(s.latest for s in states)
        for _ in range(total // (max_rows or total or 1) + len(self.gens) + 3):
            after = next_offset(offset, states, max_rows, target)
            if after == offset:
                break
            offset = after
        else:
            raise AssertionError("the plan never became stable")
        for s in states:
            gkey = generation_key(s.part.lane, s.part.generation)
            if gkey in self.skipped or offset_key(s.part) not in offset.positions:
                continue
            want = s.latest if target is None else min(s.latest, target.get(offset_key(s.part), 0))
            if s.state == ABANDONED or (target is not None and offset_key(s.part) not in target):
                continue
            assert offset.positions[offset_key(s.part)] >= want, (
                offset_key(s.part),
                offset.positions[offset_key(s.part)],
                want,
            )
            if s.end_fixed and target is None:
                assert gkey in offset.done


SourceHistory.TestCase.settings = settings(max_examples=300, stateful_step_count=40, deadline=None)
test_source_history = SourceHistory.TestCase
