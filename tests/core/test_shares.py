"""Cutting work into shares of about equal size, in order."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from streamplane.shares import even_runs


@settings(max_examples=200, deadline=None)
@given(sizes=st.lists(st.integers(0, 1 << 20), min_size=1, max_size=300), n=st.integers(1, 8))
def test_work_is_cut_into_n_runs_at_most_in_order_each_item_once(sizes: list[int], n: int) -> None:
    shares = even_runs(sizes, n)
    assert 1 <= len(shares) <= n
    assert [i for a, b in shares for i in range(a, b)] == list(range(len(sizes))), "each item once, in order"
    assert all(a < b for a, b in shares)
    if len(sizes) >= n and len(set(sizes)) == 1 and sizes[0]:
        assert len(shares) == n, "equal items use every run"
