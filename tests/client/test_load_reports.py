"""Which lease loads a consumer tells the Assigner: changes past the noise, and always a lease that went idle;
and reports not yet sent, merged, say all that each said."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from streamplane.client.consumer.committer import IDLE, load_changed
from streamplane.model import ClusterErrors, Heartbeat, LeaseLoad

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


beats = st.builds(
    Heartbeat,
    st.floats(min_value=0, max_value=64, allow_nan=False),
    st.floats(min_value=0, max_value=1e6, allow_nan=False),
    st.lists(st.tuples(st.sampled_from(["s/realtime/g1/p0", "s/realtime/g1/p1", "s/dlq/g1/p0"]), loads)).map(tuple),
    st.lists(  # one entry a cluster, as a report has
        st.builds(ClusterErrors, st.sampled_from(["east", "west"]), st.integers(1, 9), st.text(max_size=3)),
        unique_by=lambda e: e.cluster,
    ).map(tuple),
)


@given(st.lists(beats, min_size=1, max_size=6))
def test_heartbeats_not_yet_sent_merge_into_one_that_loses_no_load_and_no_error(sent: list[Heartbeat]) -> None:
    """A worker reports faster than it heartbeats, and a replica writes heartbeats in batches: what several
    reports said goes out, or is written, as one, and must say everything they said."""
    merged = sent[0]
    for later in sent[1:]:
        merged = merged.merged(later)
    assert (merged.cpu, merged.records_per_s) == (sent[-1].cpu, sent[-1].records_per_s)
    latest = {lid: load for beat in sent for lid, load in beat.leases}
    assert dict(merged.leases) == latest
    counts = {e.cluster: 0 for beat in sent for e in beat.errors}
    for beat in sent:
        for e in beat.errors:
            counts[e.cluster] += e.count
    assert {e.cluster: e.count for e in merged.errors} == counts
