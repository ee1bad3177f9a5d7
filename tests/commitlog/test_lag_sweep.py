"""The lag sweep (issue 37): every group's lag read a bounded number of pages a pass. Once a sweep ends, what
it shows is what reading every group whole shows, whatever the page size, the pages a pass and the groups,
streams and lanes committed to; its time lag keeps growing after the sweep; and a pass reads no more than its
pages."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from streamplane import model
from streamplane.clock import ManualClock
from streamplane.coordinator.commitlog import log as commitlog
from streamplane.coordinator.commitlog.lag_sweep import READ_LAPSE_MS as LAG_READ_LAPSE_MS
from streamplane.coordinator.commitlog.lag_sweep import LagSweeper
from streamplane.model import Cluster, PartitionRef
from tests.helpers import Domain


@settings(max_examples=40, deadline=None)
@given(
    commits=st.lists(
        st.tuples(
            st.sampled_from(["ga", "gb", "gc"]),
            st.sampled_from(["s1", "s2"]),
            st.sampled_from(["realtime", "dlq"]),
            st.integers(0, 2),
            st.integers(0, 5),  # records acked of the 5 written
            st.integers(1, 1999),  # when the oldest pending record was ingested
        ),
        max_size=30,
        unique_by=lambda c: c[:4],
    ),
    page_size=st.integers(1, 6),
    pages_per_pass=st.integers(1, 3),
    top=st.integers(0, 3),
)
def test_a_finished_sweep_shows_what_reading_every_group_whole_shows(
    commits: list[tuple[str, str, str, int, int, int]], page_size: int, pages_per_pass: int, top: int
) -> None:
    clock = ManualClock(2000)
    domain = Domain(clock=clock)
    db, t = domain.db, domain.topology
    try:
        t.register_cluster(Cluster("east", "east:9092"))
        for name in ("s1", "s2"):
            t.create_stream(name, 3, "east")
        for g, s, la, p, acked, oldest in commits:
            done = model.Commit(acked=[(0, acked)] if acked else [], high_watermark=5, oldest_pending_ts_ms=oldest)
            commitlog.commit(db, g, f"{s}/{la}/g1/p{p}", 0, done, now_ms=1000)
        sweeper = LagSweeper(db, clock, pages_per_pass=pages_per_pass, page_size=page_size, top_partitions=top)
        assert sweeper.lag(2000) == model.Lag(""), "nothing before the first sweep ends"
        passes = 0
        while sweeper.latest is None:
            sweeper.step()
            passes += 1
        pages = max(1, math.ceil(len(commits) / page_size))
        assert passes >= math.ceil(pages / pages_per_pass), "a pass reads its pages and no more"
        clock.advance(1000)
        whole = commitlog.lag_of_every_group(db, now_ms=3000)
        swept = sweeper.lag(3000)
        assert swept.lanes == whole.lanes, "per lane: records not processed, and time lag as of now"
        for group in {g for g, *_ in commits}:
            ranked = sorted(
                (p for p in whole.partitions if p.group == group and p.offset_lag > 0),
                key=lambda p: (p.time_lag_ms, p.offset_lag, p.lease_id),
                reverse=True,
            )
            assert [p for p in swept.partitions if p.group == group] == ranked[:top]
    finally:
        db.close()


def test_a_commit_shows_in_the_next_sweep_and_time_lag_grows_between_sweeps() -> None:
    clock = ManualClock(10_000)
    domain = Domain(clock=clock)
    db, t = domain.db, domain.topology
    try:
        t.register_cluster(Cluster("east", "east:9092"))
        t.create_stream("web", 2, "east")
        stuck = model.Commit(acked=[(0, 10)], high_watermark=50, oldest_pending_ts_ms=4_000)
        commitlog.commit(db, "g", "web/realtime/g1/p0", 0, stuck, now_ms=10_000)
        sweeper = LagSweeper(db, clock)
        sweeper.step()
        (lane,) = sweeper.lag(10_000).lanes
        assert (lane.offset_lag, lane.time_lag_ms) == (40, 6_000)
        clock.advance(30_000)
        assert sweeper.lag(clock.now_ms()).lanes[0].time_lag_ms == 36_000, "a stuck lane's time lag keeps growing"
        caught_up = model.Commit(acked=[(10, 50)], high_watermark=50)
        commitlog.commit(db, "g", "web/realtime/g1/p0", 0, caught_up, now_ms=clock.now_ms())
        assert sweeper.lag(clock.now_ms()).lanes[0].offset_lag == 40, "until the next sweep"
        sweeper.step()
        assert [(x.offset_lag, x.time_lag_ms) for x in sweeper.lag(clock.now_ms()).lanes] == [(0, 0)]
    finally:
        db.close()


def test_nobody_reading_lag_stops_the_sweep_and_a_read_starts_it_again() -> None:
    """An unwatched coordinator (no scrape, no console) reads no commit log at all once a minute has passed
    without a reader; the first read after that shows the last sweep, and the sweep goes on from there."""
    clock = ManualClock(10_000)
    domain = Domain(clock=clock)
    db, t = domain.db, domain.topology
    try:
        t.register_cluster(Cluster("east", "east:9092"))
        t.create_stream("web", 1, "east")
        commitlog.commit(db, "g", "web/realtime/g1/p0", 0, model.Commit(acked=[(0, 5)], high_watermark=50), now_ms=1)
        sweeper = LagSweeper(db, clock)
        sweeper.step()
        assert sweeper.lag(clock.now_ms()).lanes[0].offset_lag == 45
        commitlog.commit(db, "g", "web/realtime/g1/p0", 0, model.Commit(acked=[(5, 50)], high_watermark=50), now_ms=2)
        clock.advance(LAG_READ_LAPSE_MS + 1)
        swept = sweeper.latest
        sweeper.step()
        assert sweeper.latest is swept, "no reader for a minute: no sweep"
        assert sweeper.lag(clock.now_ms()).lanes[0].offset_lag == 45, "the first read shows the last sweep"
        sweeper.step()
        assert sweeper.lag(clock.now_ms()).lanes[0].offset_lag == 0, "and the next a fresh one"
    finally:
        db.close()


def test_a_progress_header_that_does_not_decode_never_stops_the_sweep_of_every_group() -> None:
    """Bad data already in the store: one group's header for one partition is not JSON. The sweep still ends,
    and every other partition and group shows its lag."""
    from streamplane.coordinator import keys

    clock = ManualClock(10_000)
    domain = Domain(clock=clock)
    db, t = domain.db, domain.topology
    try:
        t.register_cluster(Cluster("east", "east:9092"))
        t.create_stream("web", 2, "east")
        for group in ("ga", "gb"):
            for p in (0, 1):
                done = model.Commit(acked=[(0, 5)], high_watermark=50)
                commitlog.commit(db, group, f"web/realtime/g1/p{p}", 0, done, now_ms=1)
        db.transact(lambda tr: tr.set(keys.progress_key("ga", PartitionRef("web", "realtime", 1, 0)), b"{torn"))
        sweeper = LagSweeper(db, clock, page_size=1)
        for _ in range(10):
            sweeper.step()
        assert sweeper.latest is not None, "the sweep ended"
        assert {(x.group, x.offset_lag) for x in sweeper.lag(clock.now_ms()).lanes} == {("ga", 45), ("gb", 90)}
    finally:
        db.close()
