"""Offset sets in their three forms (ranges, bitmaps, chunk masks), each conversion against Python sets."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from streamplane import offsets as off

CHUNK = off.CHUNK
small_ranges = st.lists(
    st.tuples(st.integers(0, 300), st.integers(-5, 40)).map(lambda t: (t[0], t[0] + t[1])), max_size=30
)
# offsets spread over a few chunks, so chunk boundaries are crossed often
spread = st.lists(
    st.one_of(st.integers(0, 3 * CHUNK), st.integers(CHUNK - 3, CHUNK + 3), st.integers(2 * CHUNK - 3, 2 * CHUNK + 3)),
    max_size=60,
)


def members(ranges: list[off.Range]) -> set[int]:
    return {o for a, b in ranges for o in range(a, b)}


def from_masks(masks: dict[int, int]) -> set[int]:
    return {o for chunk, mask in masks.items() for o in members(off.mask_ranges(mask, chunk * CHUNK))}


@settings(max_examples=400, deadline=None)
@given(small_ranges)
def test_normalize_keeps_the_offsets_and_makes_ranges_disjoint_and_apart(ranges) -> None:
    out = off.normalize(ranges)
    assert members(out) == members(ranges)
    assert all(a < b for a, b in out)
    assert all(out[i][1] < out[i + 1][0] for i in range(len(out) - 1)), "touching ranges are merged"


@settings(max_examples=300, deadline=None)
@given(spread)
def test_offsets_as_ranges_and_as_a_bitmap_hold_the_same_set(offsets) -> None:
    ranges = off.to_ranges(offsets)
    assert members(ranges) == set(offsets) and ranges == off.normalize(ranges)
    assert members(off.runs(sorted(set(offsets)))) == set(offsets)
    bitmap, base = off.to_bitmap(offsets)
    assert members(off.bitmap_ranges(bitmap, base)) == set(offsets)
    assert (base == min(offsets)) if offsets else (bitmap, base) == (b"", 0)


@settings(max_examples=300, deadline=None)
@given(spread, st.integers(0, 3 * CHUNK))
def test_chunk_masks_hold_the_offsets_at_or_above_the_floor_from_ranges_and_from_a_bitmap(offsets, floor) -> None:
    want = {o for o in offsets if o >= floor}
    assert from_masks(off.chunk_masks(off.to_ranges(offsets), floor=floor)) == want
    bitmap, base = off.to_bitmap(offsets)
    masks = off.bitmap_chunk_masks(bitmap, base, floor=floor)
    assert from_masks(masks) == want
    assert all(mask for mask in masks.values()), "no empty chunk is written"
    assert all(mask < 1 << CHUNK for mask in masks.values()), "a mask stays inside its chunk"


@settings(max_examples=200, deadline=None)
@given(spread, spread)
def test_merged_masks_are_the_union(a, b) -> None:
    merged = off.merge_masks(off.chunk_masks(off.to_ranges(a)), off.chunk_masks(off.to_ranges(b)))
    assert from_masks(merged) == set(a) | set(b)


@settings(max_examples=300, deadline=None)
@given(st.sets(st.integers(0, 200)), st.integers(0, 200))
def test_contiguous_from_counts_the_run_starting_at_a_bit(done, start) -> None:
    mask = sum(1 << o for o in done)
    expected = 0
    while start + expected in done:
        expected += 1
    assert off.contiguous_from(mask, start) == expected


@settings(max_examples=300, deadline=None)
@given(small_ranges, small_ranges)
def test_subtract_keeps_exactly_the_offsets_of_the_first_not_in_the_second(
    a: list[off.Range], b: list[off.Range]
) -> None:
    ranges, minus = off.normalize(a), off.normalize(b)
    out = off.subtract(ranges, minus)
    assert members(out) == members(ranges) - members(minus)
    assert out == off.normalize(out), "normalized: sorted, disjoint, no empty range"
