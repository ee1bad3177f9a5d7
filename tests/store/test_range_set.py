"""The cleared ranges of a transaction, as a set: any ranges added in any order answer as the plain list of
them would, merged."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from streamplane.coordinator.store.ranges import RangeSet

KEYS = st.binary(max_size=3)
RANGES = st.lists(st.tuples(KEYS, KEYS), max_size=30)


@given(RANGES, st.lists(KEYS, max_size=30), st.lists(st.tuples(KEYS, KEYS), max_size=10))
def test_a_set_of_ranges_holds_exactly_the_keys_of_the_ranges_added(
    ranges: list[tuple[bytes, bytes]], probes: list[bytes], windows: list[tuple[bytes, bytes]]
) -> None:
    kept = RangeSet(ranges)
    for key in probes + [b for b, _ in ranges] + [e for _, e in ranges]:
        assert (key in kept) == any(b <= key < e for b, e in ranges), key
    merged = list(kept)
    assert all(b < e for b, e in merged)
    assert all(e1 < b2 for (_, e1), (b2, _) in itertools.pairwise(merged))  # sorted, apart
    for begin, end in windows:
        assert kept.meets(begin, end) == any(b < end and begin < e for b, e in merged), (begin, end)


def test_ranges_that_overlap_or_touch_are_kept_as_one() -> None:
    kept = RangeSet([(b"c", b"e"), (b"a", b"b"), (b"e", b"g"), (b"d", b"f"), (b"x", b"x")])
    assert list(kept) == [(b"a", b"b"), (b"c", b"g")]
    assert b"g" not in kept and b"f\xff" in kept and b"b" not in kept
    assert len(kept) == 2
