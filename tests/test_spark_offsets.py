"""Planning micro-batches over generations and partitions (pure: no Spark, no cluster)."""

from __future__ import annotations

import pytest

from streamplane.errors import InvalidArgumentError
from streamplane.spark.offsets import Part, PartState, initial_positions, parse_starting_offsets, plan_end, split


def state(lane: str, gen: int, p: int, earliest: int, latest: int, drained: bool = False) -> PartState:
    return PartState(Part(gen, lane, p), f"sp.s.{lane}.g{gen}", "b:1", earliest, latest, drained)


def test_a_limit_finishes_the_older_generation_first_and_shares_rows_by_what_partitions_have() -> None:
    states = [state("realtime", 1, 0, 0, 100), state("realtime", 2, 0, 0, 300), state("realtime", 2, 1, 0, 100)]
    start = {"realtime/1/0": 40}
    end = plan_end(start, states, max_rows=160)
    assert end["realtime/1/0"] == 100  # the draining generation is finished first
    assert end["realtime/2/0"] + end["realtime/2/1"] == 100
    assert (end["realtime/2/0"], end["realtime/2/1"]) == (75, 25)


def test_a_drained_generation_drops_out_once_read_to_its_end() -> None:
    states = [state("realtime", 1, 0, 0, 50, drained=True), state("realtime", 2, 0, 0, 10)]
    assert plan_end({"realtime/1/0": 20}, states, None) == {"realtime/1/0": 50, "realtime/2/0": 10}
    assert plan_end({"realtime/1/0": 50, "realtime/2/0": 10}, states, None) == {"realtime/2/0": 10}


def test_available_now_stops_at_its_target_and_skips_what_came_after() -> None:
    states = [state("realtime", 1, 0, 0, 500), state("realtime", 2, 0, 0, 80)]
    end = plan_end({"realtime/1/0": 0}, states, None, target={"realtime/1/0": 300})
    assert end == {"realtime/1/0": 300, "realtime/2/0": 0}


def test_starting_offsets() -> None:
    states = [state("realtime", 1, 0, 5, 50), state("realtime", 1, 1, 0, 70), state("backlog", 1, 0, 0, 9)]
    assert initial_positions(states, "earliest") == {"realtime/1/0": 5, "realtime/1/1": 0, "backlog/1/0": 0}
    assert initial_positions(states, "latest") == {"realtime/1/0": 50, "realtime/1/1": 70, "backlog/1/0": 9}
    chosen = parse_starting_offsets('{"realtime/1": {"0": 2, "1": -1}}')
    assert initial_positions(states, chosen) == {"realtime/1/0": 5, "realtime/1/1": 70, "backlog/1/0": 0}
    for bad in ("{", "[1]", '{"realtime": {"0": 1}}', '{"realtime/1": {"0": -7}}', '{"realtime/1": {"x": 1}}'):
        with pytest.raises(InvalidArgumentError, match="startingOffsets"):
            parse_starting_offsets(bad)


def test_split_cuts_a_range_into_nearly_equal_pieces() -> None:
    assert split(0, 10, 3) == [(0, 4), (4, 7), (7, 10)]
    assert split(5, 7, 8) == [(5, 6), (6, 7)]
