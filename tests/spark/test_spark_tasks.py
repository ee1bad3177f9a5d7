"""Packing a read's ranges into Spark tasks (pure: no Spark, no cluster)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from streamplane.spark.reader import RANGE_COST, Slice, pack


def ranges(sizes: list[int]) -> list[Slice]:
    return [Slice("s", "realtime", 1, p, "sp.s.realtime.g1", "b:9092", 100, 100 + n) for p, n in enumerate(sizes)]


@settings(max_examples=300, deadline=None)
@given(sizes=st.lists(st.integers(0, 3_000_000), max_size=200), per_task=st.integers(1, 2_000_000))
def test_every_range_is_read_once_in_order_by_few_tasks_of_about_the_same_size(sizes: list[int], per_task: int) -> None:
    slices = ranges(sizes)
    tasks = pack(slices, per_task)
    assert [s for t in tasks for s in t.slices] == slices, "each range once, in order"
    assert all(t.slices for t in tasks), "no empty task"
    weight = sum(sizes) + RANGE_COST * len(sizes)
    assert len(tasks) <= -(-weight // per_task), "no more tasks than the records ask for"
    if slices:
        # a task holds more than its share only by its last range
        share = weight / len(tasks)
        assert all(sum(s.end - s.begin + RANGE_COST for s in t.slices[:-1]) <= share for t in tasks)


def test_small_ranges_share_a_task_and_none_is_packed_when_asked_not_to() -> None:
    slices = ranges([31_250] * 64)  # 2,000,000 records on 64 partitions
    assert [len(t.slices) for t in pack(slices, 1_000_000)] == [22, 21, 21]
    assert [len(t.slices) for t in pack(slices, 0)] == [1] * 64
    tiny = pack(ranges([10] * 10_000), 1_000_000)  # each range costs beside its records
    assert len(tiny) == 101 and max(len(t.slices) for t in tiny) == 100
    assert pack([], 1_000_000) == []
