"""The commit log against a model (Python sets and dicts), with hypothesis; and at scale."""

from __future__ import annotations

import json
import random
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamplane.coordinator import keys
from streamplane.coordinator.commitlog import log as cl
from streamplane.coordinator.groups import config as group_config
from streamplane.coordinator.groups import leases
from streamplane.coordinator.groups import state as group_state
from streamplane.coordinator.store import StoreConfig, open_store
from streamplane.coordinator.store.api import MAX_VALUE_BYTES
from streamplane.coordinator.topology.cluster_admin import RoutingAdmin
from streamplane.coordinator.topology.topology import Topology
from streamplane.errors import FencedError, InvalidArgumentError, LimitExceededError, NotFoundError
from streamplane.model import ADMIN_LOCAL, GAVE_UP, Cluster, DlqCopy, PartitionRef

LEASE = "s/realtime/g1/p0"
HIGH = 200


@pytest.fixture(scope="module")
def held(local_cluster, tmp_path_factory):
    """An embedded store with stream s and a lease on s/realtime/g1/p0 held by worker w at epoch 1."""
    bootstrap, control = local_cluster
    db = open_store(StoreConfig(driver="embedded", data_dir=tmp_path_factory.mktemp("commitlog")))
    topology = Topology(db, RoutingAdmin(), control_endpoints=[control.endpoint])
    topology.register_cluster(Cluster("c", bootstrap, admin=ADMIN_LOCAL, control_endpoint=control.endpoint))
    topology.create_stream("s", 1, "c")
    now = int(time.time() * 1000)
    leases.join(db, "g", "w", "sess", [leases.Subscription("s")], capacity=1, max_load=0, now_ms=now, ttl_ms=3_600_000)
    group_state.apply_assignment(db, "g", now_ms=now, revoke_ms=1000)
    assert leases.check_lease(db, "g", LEASE, 1).worker_id == "w"
    yield db
    db.close()


def reset(db) -> None:
    def clear(tr) -> None:
        for sub in (keys.PROGRESS, keys.DONE, keys.RETRIES, keys.REJECTS, keys.GROUP_CONFIGS):
            r = sub.range(("g",))
            tr.clear_range(r.start, r.stop)

    db.transact(clear)


offsets = st.integers(0, HIGH - 1)
ack = st.tuples(offsets, st.integers(1, 12)).map(lambda t: (t[0], min(HIGH, t[0] + t[1])))
retry = st.builds(
    cl.Retry, offset=offsets, attempt=st.integers(1, 7), error=st.just("boom"), backoff_ms=st.integers(0, 50)
)
reject = st.builds(cl.Reject, offset=offsets, reason=st.just("poison"))
commits = st.builds(
    cl.Commit,
    acked=st.lists(ack, max_size=6),
    retries=st.lists(retry, max_size=4),
    rejects=st.lists(reject, max_size=2),
    high_watermark=st.just(HIGH),
    filtered=st.lists(ack, max_size=3),
)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(commits, min_size=1, max_size=8))
def test_any_commit_sequence_matches_the_model_and_replays_change_nothing(held, sequence) -> None:
    reset(held)
    done: set[int] = set()
    attempts: dict[int, int] = {}
    rejected: set[int] = set()
    filtered = 0
    for c in sequence:
        for i, commit in enumerate((c, c)):  # every commit twice: the replay must change nothing
            before = state(held)
            result = cl.commit(held, "g", LEASE, 1, commit, now_ms=1000)
            if i == 1:
                assert state(held) == before, "replaying a commit changed the log"
                continue
            # a where predicate's offsets: done, and counted once each when they were not done before
            left_out = {o for a, b in commit.filtered for o in range(a, b)}
            filtered += len(left_out - done)
            for r in commit.rejects:
                if r.offset not in done:
                    rejected.add(r.offset)
                    done.add(r.offset)
            done.update(left_out)
            for a, b in commit.acked:
                done.update(range(a, b))
            bits = int.from_bytes(commit.acked_bitmap, "little")
            done.update(commit.acked_bitmap_base + i for i in range(bits.bit_length()) if bits >> i & 1)
            before_attempts = dict(attempts)
            for r in commit.retries:
                if r.offset not in done:
                    attempts[r.offset] = max(attempts.get(r.offset, 0), r.attempt)
            for o in list(attempts):
                if o in done:
                    del attempts[o]
            low = 0
            while low in done:
                low += 1
            assert result.low_watermark == low
            # exhausted: attempts used up by this commit's newest attempt (a late re-send of an older one is not)
            newest = [r for r in commit.retries if r.attempt >= before_attempts.get(r.offset, 0)]
            assert sorted(result.exhausted) == sorted(
                {r.offset for r in newest if r.offset in attempts and attempts[r.offset] >= 5}
            )
            assert sorted(c.offset for c in result.copies) == sorted(result.exhausted), "each exhausted one is copied"
    header, progress = state(held)
    assert header["low"] == low
    assert header["done_above"] == len({o for o in done if o >= low})
    assert header["filtered"] == filtered, "each left-out offset counted once, however often it was sent"
    assert progress["retries"] == attempts
    assert progress["rejects"] == rejected


def state(db) -> tuple[dict, dict]:
    def read(tr):
        pk = ("g", "s", "realtime", 1, 0)
        header = json.loads(tr.get(keys.PROGRESS.pack(pk)) or b"{}")
        r = keys.RETRIES.range(pk)
        retries = {keys.RETRIES.unpack(k)[-1]: json.loads(v)["attempts"] for k, v in tr.get_range(r.start, r.stop)}
        r = keys.REJECTS.range(pk)
        rejects = {keys.REJECTS.unpack(k)[-1] for k, _ in tr.get_range(r.start, r.stop)}
        r = keys.DONE.range(pk)
        chunks = tr.get_range(r.start, r.stop)
        return header, {"retries": retries, "rejects": rejects, "chunks": chunks}

    return db.transact(read)


def test_a_stale_epoch_changes_nothing(held) -> None:
    reset(held)
    cl.commit(held, "g", LEASE, 1, cl.Commit(acked=[(0, 5)]), now_ms=1)
    before = state(held)
    with pytest.raises(FencedError, match="stale"):
        cl.commit(held, "g", LEASE, 0, cl.Commit(acked=[(5, 50)]), now_ms=2)
    assert state(held) == before


def test_a_late_copy_of_an_earlier_commit_never_hides_the_time_lag(held) -> None:
    """Found by the simulator (seeds 58, 120, 127, 136): a worker caught up to offset 100 commits with nothing
    pending; records 100..150 arrive, written at t=5,000, and its next commit says so; the network then delivers
    the first commit again. It used to reset the oldest pending record's time to "none", and the partition
    reported no time lag while 50 records waited."""
    reset(held)
    caught_up = cl.Commit(acked=[(0, 100)], high_watermark=100)
    cl.commit(held, "g", LEASE, 1, caught_up, now_ms=4_000)
    cl.commit(held, "g", LEASE, 1, cl.Commit(high_watermark=150, oldest_pending_ts_ms=5_000), now_ms=6_000)
    cl.commit(held, "g", LEASE, 1, caught_up, now_ms=7_000)  # the late copy
    header = held.transact(lambda tr: cl.read_header(tr, "g", PartitionRef("s", "realtime", 1, 0)))
    assert header.time_lag_ms(9_000) == 4_000, "the 50 waiting records are 4 s old"
    # a newer commit still moves the time forward as records are processed
    cl.commit(
        held, "g", LEASE, 1, cl.Commit(acked=[(100, 120)], high_watermark=150, oldest_pending_ts_ms=5_500), now_ms=9_500
    )
    header = held.transact(lambda tr: cl.read_header(tr, "g", PartitionRef("s", "realtime", 1, 0)))
    assert header.time_lag_ms(10_000) == 4_500


@pytest.mark.parametrize(
    ("commit", "error", "text"),
    [
        (cl.Commit(acked=[(5, 3)]), InvalidArgumentError, r"acked\[0\] \[5, 3\) is empty, reversed"),
        (cl.Commit(acked=[(-1, 3)]), InvalidArgumentError, "negative"),
        (cl.Commit(acked=[(0, 5000)], high_watermark=100), InvalidArgumentError, "beyond the high watermark 1000"),
        (cl.Commit(rejects=[cl.Reject(3, "")]), InvalidArgumentError, r"rejects\[0\] needs a reason"),
        (cl.Commit(retries=[cl.Retry(3, 0)]), InvalidArgumentError, "attempt must be 1 or more"),
        (cl.Commit(acked=[(i, i + 1) for i in range(0, 2 * cl.MAX_ENTRIES + 2, 2)]), LimitExceededError, "limit"),
        (cl.Commit(acked_bitmap=b"\x01", acked_bitmap_base=-3), InvalidArgumentError, "acked_bitmap_base"),
        (cl.Commit(acked_bitmap=b"\x00\x80", acked_bitmap_base=990), InvalidArgumentError, "offset 1005, beyond"),
        (cl.Commit(acked_bitmap=b"\x01" * (cl.MAX_BITMAP_BYTES + 1)), LimitExceededError, "acked_bitmap"),
    ],
)
def test_bad_commits_change_nothing(held, commit, error, text) -> None:
    reset(held)
    cl.commit(held, "g", LEASE, 1, cl.Commit(acked=[(0, 2)], high_watermark=1000), now_ms=1)
    before = state(held)
    with pytest.raises(error, match=text):
        cl.commit(held, "g", LEASE, 1, commit, now_ms=2)
    assert state(held) == before


def test_a_million_scattered_acks_fit_and_compact_to_one_key(held) -> None:
    """Every other offset first (the worst case for ranges), then the gaps; in shuffled batches."""
    reset(held)
    n, batch = 1_000_000, 20_000
    rng = random.Random(3)
    for parity in (1, 0):
        offsets = list(range(parity, n, 2))
        for i in range(0, len(offsets), batch):
            chunk = offsets[i : i + batch]
            rng.shuffle(chunk)
            cl.commit(held, "g", LEASE, 1, cl.Commit(acked=[(o, o + 1) for o in chunk], high_watermark=n), now_ms=1)
        header, progress = state(held)
        if parity == 1:
            sizes = [len(v) for _, v in progress["chunks"]]
            assert header["low"] == 0 and header["done_above"] == n // 2
            assert max(sizes) < MAX_VALUE_BYTES / 10, "no value comes near the store's limit"
            started = time.perf_counter()
            p = cl.progress(held, "g", LEASE)
            assert time.perf_counter() - started < 0.5, "GetProgress stays fast"
            assert p.done[:2] == [(1, 2), (3, 4)] and len(p.done) == 1000
    header, progress = state(held)
    assert header["low"] == n and header["done_above"] == 0
    assert progress["chunks"] == [], "a fully done partition is just its header"


def test_an_unmanaged_group_commits_with_epoch_0_and_a_managed_one_cannot(held) -> None:
    result = cl.commit(held, "spark-q", LEASE, 0, cl.Commit(acked=[(0, 7)], high_watermark=7), now_ms=1)
    assert result.low_watermark == 7
    assert cl.progress(held, "spark-q", LEASE).header.low == 7
    with pytest.raises(NotFoundError, match="no generation 9"):
        cl.commit(held, "spark-q", "s/realtime/g9/p0", 0, cl.Commit(acked=[(0, 1)]), now_ms=2)
    with pytest.raises(FencedError, match="epoch 0 is stale: group 'g' has Assigner sessions"):
        cl.commit(held, "g", LEASE, 0, cl.Commit(acked=[(0, 1)]), now_ms=3)


def test_a_dlq_copy_is_counted_before_it_is_written_and_skipped_once_rejected(held) -> None:
    """Copy, then mark rejected: the commit log counts each copy begun, answers a re-sent commit the same,
    and lets nobody copy a record that is rejected already."""
    reset(held)
    group_config.configure(held, "g", "realtime", 2)
    assert cl.commit(held, "g", LEASE, 1, cl.Commit(retries=[cl.Retry(7, 1, "boom")]), now_ms=1).copies == []
    last = cl.Commit(retries=[cl.Retry(7, 2, "boom")])
    first = cl.commit(held, "g", LEASE, 1, last, now_ms=2)
    assert first.exhausted == [7] and first.copies == [DlqCopy(7, 1)], "attempts used up: copy 1 may be written"
    assert cl.commit(held, "g", LEASE, 1, last, now_ms=3).copies == [DlqCopy(7, 1)], "a re-sent commit: the same"
    late = cl.commit(held, "g", LEASE, 1, cl.Commit(retries=[cl.Retry(7, 1, "boom")]), now_ms=4)
    assert late.copies == [] and late.exhausted == [], "a late older attempt copies nothing"

    # while copy 1 may still land (stuck behind a broker fault, its holder gone), no second copy begins
    assert cl.due_retries(held, "g", LEASE, 1, now_ms=5) == []
    early = cl.commit(held, "g", LEASE, 1, cl.Commit(copying=[cl.Reject(7, "x", copy=2)]), now_ms=6)
    assert early.copies == []

    # the holder crashed after writing copy 1, before its reject: the next one finds it and asks for copy 2
    later = 2 + cl.COPY_IN_FLIGHT_MS
    (state,) = cl.due_retries(held, "g", LEASE, 1, now_ms=later)
    assert (state.exhausted, state.copies, state.last_error) == (True, 1, f"{GAVE_UP}: boom")
    ask = cl.Reject(7, state.last_error, copy=state.copies + 1)
    assert cl.commit(held, "g", LEASE, 1, cl.Commit(copying=[ask]), now_ms=later).copies == [DlqCopy(7, 2)]
    assert cl.commit(held, "g", LEASE, 1, cl.Commit(copying=[ask]), now_ms=later + 1).copies == [DlqCopy(7, 2)]
    stale = cl.commit(held, "g", LEASE, 1, cl.Commit(copying=[cl.Reject(7, "x", copy=1)]), now_ms=later + 2)
    assert stale.copies == [], "a copy number below one begun already is refused"

    cl.commit(held, "g", LEASE, 1, cl.Commit(rejects=[cl.Reject(7, state.last_error)]), now_ms=later + 3)
    again = cl.commit(held, "g", LEASE, 1, cl.Commit(copying=[cl.Reject(7, "again", copy=3)]), now_ms=later * 2)
    assert again.copies == [], "rejected already: no copy"
    assert cl.due_retries(held, "g", LEASE, 1, now_ms=later * 2) == []

    # a handler's reject of a record never retried: copy 1, and the offset is listed as retrying until rejected
    got = cl.commit(held, "g", LEASE, 1, cl.Commit(copying=[cl.Reject(9, "bad json", copy=1)]), now_ms=11)
    assert got.copies == [DlqCopy(9, 1)]
    assert cl.progress(held, "g", LEASE).retrying == [9]
