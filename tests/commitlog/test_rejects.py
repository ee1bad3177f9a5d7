"""Listing a stream's rejected records (`dlq list`, issue 38): where each came from, why, after how many
attempts, when, and where its dlq copy went; paged over every group or one, in bounded work per page; one mark
that does not decode is left out, never an end to the list."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamplane.coordinator import keys
from streamplane.coordinator.commitlog import log as commitlog
from streamplane.errors import InvalidArgumentError, NotFoundError
from streamplane.model import Commit, DlqLocation, PartitionRef, Reject, RejectedRecord, Retry
from tests.helpers import Domain


def _reject(d: Domain, group: str, lid: str, offset: int, reason: str, *, now_ms: int, **kw: object) -> None:
    body = Commit(rejects=[Reject(offset, reason, **kw)], high_watermark=offset + 1)  # type: ignore[arg-type]
    commitlog.commit(d.db, group, lid, 0, body, now_ms=now_ms)


def _all(d: Domain, stream: str, page_size: int, **kw: object) -> list[RejectedRecord]:
    """Every page of the list, checking each is within its size and the tokens end."""
    found: list[RejectedRecord] = []
    token = ""
    for _ in range(10_000):
        page = commitlog.reject_page(d.db, stream, page_size=page_size, page_token=token, **kw)  # type: ignore[arg-type]
        assert len(page.rejects) <= page_size
        found += page.rejects
        token = page.next_page_token
        if not token:
            return found
    raise AssertionError("the pages never ended")


def test_a_reject_is_listed_with_its_origin_attempts_reason_time_and_dlq_copy() -> None:
    d = Domain().cluster("c").stream("orders", 2)
    lid = "orders/realtime/g1/p1"
    retry = Commit(retries=[Retry(7, 1, "timeout"), Retry(7, 2, "timeout")], high_watermark=8)
    commitlog.commit(d.db, "billing", lid, 0, retry, now_ms=1_000)
    copy = DlqLocation("orders", "dlq", 1, 0, 41)
    _reject(d, "billing", lid, 7, "schema: no field amount", now_ms=5_000, dlq=copy)  # the handler's own reject
    _reject(d, "billing", lid, 3, "bad", now_ms=6_000)  # on its first attempt, no copy recorded
    page = commitlog.reject_page(d.db, "orders")
    assert page.next_page_token == ""
    assert page.rejects == [
        RejectedRecord(PartitionRef("orders", "realtime", 1, 1), 3, "bad", 1, 6_000, None, "billing"),
        RejectedRecord(
            PartitionRef("orders", "realtime", 1, 1), 7, "schema: no field amount", 3, 5_000, copy, "billing"
        ),
    ]


def test_a_record_that_reached_its_max_attempts_counts_no_extra_attempt() -> None:
    d = Domain().cluster("c").stream("orders", 1)
    lid = "orders/realtime/g1/p0"
    failed = [Retry(0, n, "boom") for n in range(1, 6)]  # the default max attempts: 5
    commitlog.commit(d.db, "g", lid, 0, Commit(retries=failed, high_watermark=1), now_ms=1)
    _reject(d, "g", lid, 0, "max attempts reached; last error: boom", now_ms=2)
    (found,) = commitlog.reject_page(d.db, "orders").rejects
    assert found.attempts == 5


REJECTS = st.lists(
    st.tuples(
        st.sampled_from(["ga", "gb", "gc"]),
        st.sampled_from(["realtime", "bulk"]),
        st.integers(0, 2),  # partition
        st.integers(0, 40),  # offset
        st.integers(1, 5),  # when, in seconds
    ),
    max_size=60,
    unique_by=lambda r: r[:4],
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rejects=REJECTS,
    page_size=st.integers(1, 7),
    group=st.sampled_from(["", "ga", "gb"]),
    lane=st.sampled_from(["", "bulk"]),
    since_s=st.integers(0, 5),
)
def test_paging_lists_exactly_the_matching_rejects_once_in_order(
    rejects: list[tuple[str, str, int, int, int]], page_size: int, group: str, lane: str, since_s: int
) -> None:
    d = Domain().cluster("c").stream("s", 3, bulk=10).stream("t", 3)
    for g, la, p, offset, at_s in rejects:
        _reject(d, g, f"s/{la}/g1/p{p}", offset, f"r{offset}", now_ms=at_s * 1000)
        _reject(d, g, f"t/{la}/g1/p{p}", offset, "another stream", now_ms=at_s * 1000) if la == "realtime" else None
    since_ms = since_s * 1000
    want = sorted(
        (g, la, p, offset)
        for g, la, p, offset, at_s in rejects
        if (not group or g == group) and (not lane or la == lane) and at_s * 1000 >= since_ms
    )
    if group and group not in {g for g, *_ in rejects}:  # a group that never read the stream is told so
        with pytest.raises(NotFoundError, match=f"group '{group}' has never read stream s"):
            _all(d, "s", page_size, group=group, lane=lane, since_ms=since_ms)
        return
    got = _all(d, "s", page_size, group=group, lane=lane, since_ms=since_ms)
    assert [(r.group, r.partition.lane, r.partition.partition, r.offset) for r in got] == want
    assert all(r.partition.stream == "s" and r.reason == f"r{r.offset}" for r in got)


def test_a_page_filtered_by_time_looks_at_a_bounded_number_of_rejects() -> None:
    d = Domain().cluster("c").stream("s", 1)
    old = Commit(rejects=[Reject(o, "old") for o in range(2_000)], high_watermark=2_001)
    commitlog.commit(d.db, "g", "s/realtime/g1/p0", 0, old, now_ms=1_000)
    _reject(d, "g", "s/realtime/g1/p0", 2_000, "new", now_ms=9_000)
    first = commitlog.reject_page(d.db, "s", since_ms=5_000, page_size=10)
    assert first.rejects == [] and first.next_page_token, "a short page, with a token: more is left"
    assert [r.reason for r in _all(d, "s", 10, since_ms=5_000)] == ["new"]


def test_a_mark_that_does_not_decode_is_left_out_and_the_rest_is_listed() -> None:
    d = Domain().cluster("c").stream("s", 1)
    for offset in (1, 2, 3):
        _reject(d, "g", "s/realtime/g1/p0", offset, f"r{offset}", now_ms=1)
    ref = PartitionRef("s", "realtime", 1, 0)
    d.db.transact(lambda tr: tr.set(keys.reject_key("g", ref, 2), b"{torn"))
    assert [r.offset for r in _all(d, "s", 1)] == [1, 3]


@pytest.mark.parametrize(
    ("kw", "says"),
    [
        ({"stream": "Bad!"}, "stream"),
        ({"stream": "s", "group": "no such!"}, "group"),
        ({"stream": "s", "lane": "A"}, "lane"),
        ({"stream": "s", "since_ms": -1}, "since"),
        ({"stream": "s", "page_token": "g s/realtime/g1/p0 x"}, "page_token"),
        ({"stream": "s", "group": "ga", "page_token": "gb s/realtime/g1/p0 1"}, "page_token"),
        ({"stream": "s", "page_token": "g not-a-lease 1"}, "lease_id"),
    ],
)
def test_bad_arguments_say_why(kw: dict[str, object], says: str) -> None:
    d = Domain().cluster("c").stream("s", 1)
    stream = kw.pop("stream")
    with pytest.raises(InvalidArgumentError, match=says):
        commitlog.reject_page(d.db, stream, **kw)  # type: ignore[arg-type]


def test_purge_stops_listing_old_rejects_in_batches_and_leaves_their_records_done() -> None:
    d = Domain().cluster("c").stream("s", 1)
    lid = "s/realtime/g1/p0"
    old = Commit(rejects=[Reject(o, "old") for o in range(2_500)], high_watermark=2_600)
    commitlog.commit(d.db, "g", lid, 0, old, now_ms=1_000)
    commitlog.commit(d.db, "g", lid, 0, Commit(rejects=[Reject(2_500, "new")], high_watermark=2_600), now_ms=9_000)
    ref = PartitionRef("s", "realtime", 1, 0)
    low = d.db.transact(lambda tr: commitlog.read_header(tr, "g", ref).low)

    def purge(**kw: object) -> list[int]:
        counts, token = [], ""
        while True:
            n, token = commitlog.purge_rejects(d.db, "s", before_ms=5_000, now_ms=10_000, page_token=token, **kw)  # type: ignore[arg-type]
            counts.append(n)
            if not token:
                return counts

    assert sum(purge(dry_run=True)) == 2_500 and len(_all(d, "s", 1000)) == 2_501, "a dry run changes nothing"
    counts = purge()
    assert max(counts) <= commitlog.PURGE_BATCH and sum(counts) == 2_500
    assert [r.reason for r in _all(d, "s", 1000)] == ["new"], "purged ones are not listed"
    every = _all(d, "s", 1000, purged=True)
    assert len(every) == 2_501 and {r.state for r in every if r.reason == "old"} == {"purged"}
    assert sum(purge()) == 0, "purging again finds nothing"
    assert d.db.transact(lambda tr: commitlog.read_header(tr, "g", ref).low) == low == 2_501, "their records stay done"


@pytest.mark.parametrize(("before_ms", "says"), [(0, "unix ms"), (20_000, "future")])
def test_a_purge_before_nothing_or_in_the_future_is_refused(before_ms: int, says: str) -> None:
    d = Domain().cluster("c").stream("s", 1)
    with pytest.raises(InvalidArgumentError, match=says):
        commitlog.purge_rejects(d.db, "s", before_ms=before_ms, now_ms=10_000)


def test_an_unknown_stream_is_not_found_rather_than_an_empty_list() -> None:
    d = Domain().cluster("c").stream("s", 1)
    with pytest.raises(NotFoundError, match="stream 'nope' does not exist"):
        commitlog.reject_page(d.db, "nope")
    with pytest.raises(NotFoundError, match="does not exist"):
        commitlog.purge_rejects(d.db, "nope", before_ms=1, now_ms=2)


def test_the_consoles_first_rejects_leave_a_torn_mark_out() -> None:
    d = Domain().cluster("c").stream("s", 1)
    for offset in (1, 2, 3):
        _reject(d, "g", "s/realtime/g1/p0", offset, f"r{offset}", now_ms=1)
    d.db.transact(lambda tr: tr.set(keys.reject_key("g", PartitionRef("s", "realtime", 1, 0), 2), b"{torn"))
    assert [r.offset for r in commitlog.read_rejects(d.db, "g")] == [1, 3]
