"""Range sets against a model made of Python sets."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from streamplane.coordinator.ranges import normalize

small_ranges = st.lists(
    st.tuples(st.integers(0, 300), st.integers(-5, 40)).map(lambda t: (t[0], t[0] + t[1])), max_size=30
)


@settings(max_examples=400, deadline=None)
@given(small_ranges)
def test_normalize_keeps_the_offsets_and_makes_ranges_disjoint_and_apart(ranges) -> None:
    out = normalize(ranges)
    assert {o for a, b in out for o in range(a, b)} == {o for a, b in ranges for o in range(a, b)}
    assert all(a < b for a, b in out)
    assert all(out[i][1] < out[i + 1][0] for i in range(len(out) - 1)), "touching ranges are merged"
