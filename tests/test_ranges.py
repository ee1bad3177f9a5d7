"""Range sets against a model made of Python sets."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from streamplane.coordinator import ranges as rset

small_ranges = st.lists(
    st.tuples(st.integers(0, 300), st.integers(0, 40)).map(lambda t: (t[0], t[0] + t[1])), max_size=30
)


def as_set(rs: list[rset.Range]) -> set[int]:
    return {o for a, b in rs for o in range(a, b)}


def is_normal(rs: list[rset.Range]) -> bool:
    return all(a < b for a, b in rs) and all(rs[i][1] < rs[i + 1][0] for i in range(len(rs) - 1))


@settings(max_examples=400, deadline=None)
@given(small_ranges, small_ranges)
def test_union_is_set_union_and_normal(a, b) -> None:
    na = rset.normalize(a)
    u = rset.union(na, b)
    assert is_normal(u)
    assert as_set(u) == as_set(a) | as_set(b)
    assert rset.count(u) == len(as_set(u))


@settings(max_examples=400, deadline=None)
@given(small_ranges, st.integers(0, 100))
def test_advance_moves_over_the_contiguous_prefix(a, low) -> None:
    na = rset.normalize(a)
    new_low, rest = rset.advance(low, na)
    done = as_set(na)
    expected = low
    while expected in done:
        expected += 1
    assert new_low == expected
    assert as_set(rest) == {o for o in done if o > new_low}


@settings(max_examples=400, deadline=None)
@given(small_ranges, st.integers(0, 100))
def test_encode_round_trips(a, base) -> None:
    na = [(s + base, e + base) for s, e in rset.normalize(a)]
    assert rset.decode(rset.encode(na, base), base) == na


@settings(max_examples=200, deadline=None)
@given(small_ranges, st.integers(0, 350))
def test_contains(a, offset) -> None:
    na = rset.normalize(a)
    assert rset.contains(na, offset) == (offset in as_set(na))


def test_a_million_scattered_offsets_encode_small() -> None:
    every_other = [(o, o + 1) for o in range(0, 1_000_000, 2)]
    assert len(rset.encode(every_other, 0)) == 1_000_000  # two one-byte varints per range
