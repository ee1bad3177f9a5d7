"""Which lease loads a consumer tells the Assigner: changes past the noise, and always a lease that went idle."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from streamplane.client.consumer.committer import IDLE, load_changed
from streamplane.model import LeaseLoad

loads = st.builds(
    LeaseLoad,
    st.floats(min_value=0, max_value=1e6, allow_nan=False),
    st.integers(min_value=0, max_value=10**9),
    st.integers(min_value=0, max_value=10**9),
)


def test_noise_is_not_told() -> None:
    assert not load_changed(LeaseLoad(500.0, 2_000, 3_000), LeaseLoad(520.0, 2_100, 3_200))
    assert load_changed(LeaseLoad(500.0, 2_000, 3_000), LeaseLoad(100.0, 2_000, 3_000))


@given(loads)
def test_a_lease_that_went_idle_is_told_whatever_its_last_load(last: LeaseLoad) -> None:
    """The slices of a split merge back only once the Assigner sees them keep up (lag under a third of the split
    lag: 500 ms for a 1.5 s one): a last report of 900 ms behind, never followed by the idle one (under the noise
    threshold of 1,000 ms), held a merge back for good."""
    assert load_changed(last, IDLE) == (last != IDLE)
