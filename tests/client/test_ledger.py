"""The per-lease ledger alone, no threads or sockets: whatever order reads and outcomes come in, every record
handed out is committed exactly as it ended, nothing is committed twice or for a lost lease, and the
consumer's budget gets every byte and record back."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from streamplane.client.consumer.ledger import HAND_OUT_S, Batch, GrantedLease, LeaseLedger, Outcomes
from streamplane.client.consumer.message import BatchOutcome
from streamplane.client.flow import Budget
from streamplane.client.records import decode_records
from streamplane.clock import SYSTEM, Clock
from streamplane.model import DlqCopy, Reject, RetryState
from streamplane.native import DEFAULT_MAX_DECOMPRESSED
from tests.recordbatch import Rec, build_batch


class Owner:
    retry_backoff_s = 0.0
    clock: Clock = SYSTEM

    def __init__(self) -> None:
        self.dlq: list[tuple[int, str]] = []

    def changed(self, ledger: LeaseLedger) -> None:
        pass


def ledger(budget: Budget, owner: Owner, end_offset: int = -1) -> LeaseLedger:
    info = GrantedLease("s/realtime/g1/p0", 1, "s", "realtime", 1, 0, "t", "b", 0, end_offset)
    return LeaseLedger(owner, info, budget, "g")


def fetched(start: int, count: int) -> Any:
    """What the fetch loop hands over for offsets [start, start + count)."""
    raw = build_batch([Rec(value=b"v%d" % (start + i)) for i in range(count)], base_offset=start)
    end = start + count
    return decode_records(memoryview(raw), start, end, max_decompressed=DEFAULT_MAX_DECOMPRESSED, aborted=None)


def read(x: LeaseLedger, start: int, count: int, *, batches: bool) -> list[Any]:
    items, used, n = x.accept(fetched(start, count), batches=batches)
    x.budget.settle(0, used, n)  # as the fetch loop does once the receiver took them
    return items


def committed(x: LeaseLedger) -> tuple[set[int], set[int], set[int]]:
    """Take what to commit and answer as the coordinator does: every dlq copy asked for is granted, and the
    test's owner writes it at once (its reject goes into the next commit). Acked: the acked offsets, the ranges
    stepped over, and the filtered ranges, as the commit request merges them."""
    taken = x.take_outcomes()
    if taken is None:
        return set(), set(), set()
    out, _ = taken
    acked = set(out.acked)
    for s, e in out.ranges + out.filtered:  # left out by a where predicate: done as acked ones (see _request)
        acked.update(range(s, e))
    result = (acked, {r.offset for r in out.retries}, {r.offset for r in out.rejects})
    for copy in x.committed(out, tuple(DlqCopy(r.offset, 1) for r in out.copying)):
        x.owner.dlq.append((copy.msg.offset, copy.reason))  # type: ignore[attr-defined]
        x.rejected(copy.msg, copy.reason, None)
    return result


outcomes = st.sampled_from(["ack", "retry", "reject"])


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 40), min_size=1, max_size=5),
    choices=st.lists(outcomes, min_size=200, max_size=200),
    batches=st.booleans(),
    lose_after=st.integers(0, 6),
    commit_between=st.booleans(),
)
def test_every_record_is_committed_as_it_ended_and_the_budget_comes_back(
    sizes: list[int], choices: list[str], batches: bool, lose_after: int, commit_between: bool
) -> None:
    budget, owner = Budget(10_000, 1 << 30), Owner()
    x = ledger(budget, owner)
    expected: dict[int, str] = {}
    seen: dict[str, set[int]] = {"ack": set(), "retry": set(), "reject": set()}
    start = 0
    for i, n in enumerate(sizes):
        if i == lose_after:
            x.drop()  # the lease is gone: what ends from now on is not recorded
        items = read(x, start, n, batches=batches)
        start += n
        if commit_between:  # a commit while records are in flight (the committer runs on its own)
            for got, kind in zip(committed(x), ("ack", "retry", "reject"), strict=True):
                seen[kind] |= got
        for item in items:
            if not isinstance(item, Batch) and choices[item.offset % 200] == "ack":
                continue
            if isinstance(item, Batch):
                retry = {o: "e" for o in item.offsets if choices[o % 200] == "retry"}
                reject = {o: "r" for o in item.offsets if choices[o % 200] == "reject"}
                x.finish_batch(item, BatchOutcome(retry=retry, reject=reject))
                offsets = item.offsets
            else:
                msg = item
                if choices[msg.offset % 200] == "retry":
                    msg.retry("e")
                else:
                    msg.reject("r")
                offsets = [msg.offset]
            if not x.lost:
                expected.update((o, choices[o % 200]) for o in offsets)
        acks = [m for m in items if not isinstance(m, Batch) and choices[m.offset % 200] == "ack"]
        x.ack_many(acks)  # run()'s path: what the handler did not end itself, at once, last
        if not x.lost:
            expected.update((m.offset, "ack") for m in acks)
        for _ in range(2):  # the second commit carries the rejects whose dlq copies the first one allowed
            acked, retried, rejected = committed(x)
            seen["ack"] |= acked
            seen["retry"] |= retried
            seen["reject"] |= rejected
    assert seen["ack"] == {o for o, c in expected.items() if c == "ack"}
    assert seen["retry"] == {o for o, c in expected.items() if c == "retry"}
    assert seen["reject"] == {o for o, c in expected.items() if c == "reject"}
    assert {o for o, _ in owner.dlq} == seen["reject"], "each reject was copied to the dlq once"
    assert committed(x) == (set(), set(), set()), "nothing is committed twice"
    x.drop()
    assert (budget.records, budget.bytes) == (0, 0), "every record and byte went back to the budget"


def test_an_idle_lease_commits_nothing_and_a_sealed_one_stops_at_its_end() -> None:
    budget, owner = Budget(10_000, 1 << 30), Owner()
    x = ledger(budget, owner, end_offset=5)
    assert x.take_outcomes() is None
    items = read(x, 0, 8, batches=False)
    assert [m.offset for m in items] == [0, 1, 2, 3, 4], "records past the sealed end are not handed out"
    assert not x.fetchable()
    for m in items:
        m.ack()
    acked, _, _ = committed(x)
    assert acked == {0, 1, 2, 3, 4}
    assert x.take_outcomes() is None


def test_a_revoked_lease_hands_out_nothing_from_just_before_its_deadline() -> None:
    """What is in hand then ends, and is committed, before the consumer hands the lease back."""
    x = ledger(Budget(10, 1 << 20), Owner())
    assert x.live(100.0)
    x.revoke_deadline = 101.0
    assert x.live(100.4) and not x.live(101.0 - HAND_OUT_S) and not x.fetchable()
    x.drop()
    assert not x.live(0.0)


def test_acks_that_come_after_a_commit_of_records_in_flight_are_committed() -> None:
    """Seen at 1,024 partitions: a commit taken while records were in flight, then run()'s ack_many, and the
    acks waited for some other change that never came on that partition."""
    x = ledger(Budget(100, 1 << 30), Owner())
    items = read(x, 0, 3, batches=False)
    assert committed(x) == (set(), set(), set())  # in flight: nothing ended yet
    x.ack_many(items)
    assert committed(x)[0] == {0, 1, 2}


def test_a_new_holder_leaves_records_with_retry_state_to_the_retry_path_with_their_attempts() -> None:
    """Attempts are counted once, in the commit log: a record a previous holder retried twice is not handed
    out as a first attempt, nor stepped over as done; when due, it comes back as attempt 3."""
    x = ledger(Budget(100, 1 << 30), Owner())
    x.skip_done([], retrying=(2,))
    items = read(x, 0, 4, batches=False)
    assert [m.offset for m in items] == [0, 1, 3]
    x.ack_many(items)
    acked, _, _ = committed(x)
    assert acked == {0, 1, 3}, "offset 2 is not acked as a gap"
    found, exhausted = x.retried(fetched(0, 4), {2: RetryState(2, attempts=2, next_attempt_ms=0)})
    assert [(m.offset, m.attempt) for m in found] == [(2, 3)] and exhausted == []


def test_a_record_being_copied_to_the_dlq_stays_busy_until_its_reject_is_recorded() -> None:
    """While its dlq copy is in flight, a record is not re-read for a retry (that made four copies of one
    poison record with a broker down); a failed copy frees it for the next try, as copy number 2."""
    x = ledger(Budget(100, 1 << 30), Owner())
    (msg,) = read(x, 0, 1, batches=False)
    msg.reject("bad")
    out, _ = x.take_outcomes()
    assert [(r.offset, r.copy) for r in out.copying] == [(0, 1)] and not out.rejects, "the copy is asked for first"
    (copy,) = x.committed(out, (DlqCopy(0, 1),))
    assert 0 in x.busy_offsets()
    x.copy_failed(copy.msg)
    assert 0 not in x.busy_offsets()
    found, exhausted = x.retried(fetched(0, 1), {0: RetryState(0, 0, 0, "bad", exhausted=True, copies=1)})
    assert found == [] and [(m.offset, reason) for m, reason in exhausted] == [(0, "bad")]
    out, _ = x.take_outcomes()
    assert [(r.offset, r.copy) for r in out.copying] == [(0, 2)]
    (copy,) = x.committed(out, (DlqCopy(0, 2),))
    x.rejected(copy.msg, copy.reason, None)
    assert 0 in x.busy_offsets()
    out, _ = x.take_outcomes()
    assert x.committed(out) == [] and 0 not in x.busy_offsets()
    assert x.committed(Outcomes(copying=[Reject(5, "late", copy=1)]), ()) == [], "not granted: no copy"


def test_a_leases_rate_is_measured_on_the_consumers_clock() -> None:
    """The ledger reads its owner's injected clock: on a ManualClock, 40 records over 2 virtual seconds are 20
    records a second, with no real time passing."""
    from streamplane.clock import ManualClock

    owner, clock = Owner(), ManualClock()
    owner.clock = clock
    x = ledger(Budget(10_000, 1 << 24), owner)
    read(x, 0, 40, batches=False)
    clock.advance(2_000)
    assert x.take_rate(clock.monotonic()) == 20.0
    clock.advance(1_000)
    assert x.take_rate(clock.monotonic()) == 0.0


def test_a_burst_of_rejects_is_committed_over_several_commits_each_within_the_store_limit() -> None:
    """A handler that rejects everything quickly leaves tens of thousands of rejects with long reasons: one
    commit of them all would pass the store's 10 MB transaction limit and be refused again and again (it only
    grows). Each commit takes what fits, the rest waits for the next, and every reject is committed once."""
    from streamplane.client.consumer.ledger import COMMIT_BYTES

    x = ledger(Budget(1 << 30, 1 << 30), Owner())
    reason = "a long error text " * 40
    x._out.rejects.extend(Reject(o, reason) for o in range(30_000))
    x._out.acked.extend(range(30_000, 30_100))
    x.dirty = True
    seen: list[int] = []
    takes = 0
    while (taken := x.take_outcomes()) is not None and (taken[0].rejects or taken[0].acked):
        out = taken[0]
        takes += 1
        assert out.cost() <= COMMIT_BYTES
        seen += [r.offset for r in out.rejects]
        assert takes < 100, "the rejects must drain"
    assert sorted(seen) == list(range(30_000)) and takes >= 2


def test_another_groups_redriven_records_are_stepped_over_and_done_for_this_group() -> None:
    """`dlq redrive` concerns its own group: a record whose sp-redrive-of names another group is never handed
    out here, by either API, and counts as done (its offset is committed)."""
    recs = [
        Rec(value=b"plain", headers=[(b"trace", b"1")]),
        Rec(value=b"theirs", headers=[(b"sp-redrive-of", b"billing logs/realtime/g1/p0@7")]),
        Rec(value=b"ours", headers=[(b"sp-redrive-of", b"g logs/realtime/g1/p0@8")]),
    ]
    raw = build_batch(recs, base_offset=0)
    for batches in (False, True):
        x = ledger(Budget(10_000, 1 << 30), Owner())  # group "g"
        got = decode_records(memoryview(raw), 0, 3, max_decompressed=DEFAULT_MAX_DECOMPRESSED, aborted=None)
        items, used, n = x.accept(got, batches=batches)
        x.budget.settle(0, used, n)
        if batches:
            (batch,) = items
            assert batch.offsets == [0, 2]
            assert batch.to_arrow().column("value").to_pylist() == [b"plain", b"ours"]
        else:
            assert [m.value for m in items] == [b"plain", b"ours"]
        out, _ = x.take_outcomes() or (Outcomes(), 0)
        assert (1, 2) in out.ranges, "their record is done here by being stepped over"


@settings(max_examples=200, deadline=None)
@given(
    kept=st.lists(st.booleans(), min_size=1, max_size=40),
    start=st.integers(0, 5),
    end=st.one_of(st.just(-1), st.integers(0, 50)),
    batches=st.booleans(),
)
def test_records_a_where_predicate_left_out_are_committed_done_and_only_they(
    kept: list[bool], start: int, end: int, batches: bool
) -> None:
    """A where predicate leaves holes between the records handed out: each hole is committed as done by being
    stepped over, up to the lease's end; every record handed out is left to its outcome."""
    from streamplane.native import compile_where

    recs = [Rec(key=b"k" if k else b"x", value=b"v%d" % i) for i, k in enumerate(kept)]
    raw = build_batch(recs, base_offset=0)
    where = compile_where("key = 'k'")
    got = decode_records(
        memoryview(raw), start, len(recs), max_decompressed=DEFAULT_MAX_DECOMPRESSED, aborted=None, where=where
    )
    x = ledger(Budget(10_000, 1 << 30), Owner(), end_offset=end)
    _, used, n = x.accept(got, batches=batches)
    x.budget.settle(0, used, n)
    stop = len(recs) if end < 0 else min(end, len(recs))
    handed = {i for i in range(start, stop) if kept[i]}
    acked, _, _ = committed(x)
    assert acked == {i for i in range(start, stop) if not kept[i]}, "the holes, and nothing handed out"
    assert n == len(handed)


@settings(max_examples=60, deadline=None)
@given(
    keys=st.lists(st.sampled_from([b"a", b"b", b"c", b"d", None]), min_size=1, max_size=40),
    filtered=st.lists(st.booleans(), min_size=40, max_size=40),
    index=st.integers(0, 1),
    batches=st.booleans(),
)
def test_a_slice_holder_commits_its_own_records_and_its_filtered_ones_never_another_slices(
    keys: list[bytes | None], filtered: list[bool], index: int, batches: bool
) -> None:
    """A slice of a split partition: the other slices' records are left out by the decoder as foreign, and
    their offsets are neither handed out nor committed here (their holder does them); the holder's own records
    that its where predicate leaves out are committed done."""
    from streamplane.model import Slice
    from streamplane.native import compile_where
    from streamplane.predicate import slice_hash

    piece = Slice(index, 2)
    recs = [Rec(key=k, value=b"v%d" % i, headers=[] if filtered[i] else [(b"keep", b"1")]) for i, k in enumerate(keys)]
    raw = build_batch(recs, base_offset=0)
    got = decode_records(
        memoryview(raw),
        0,
        len(recs),
        max_decompressed=DEFAULT_MAX_DECOMPRESSED,
        aborted=None,
        where=compile_where("header(keep) = '1'"),
        mine=compile_where(piece.predicate) if piece.predicate else None,
    )
    x = ledger(Budget(10_000, 1 << 30), Owner())
    items, used, n = x.accept(got, batches=batches)
    x.budget.settle(0, used, n)
    ours = {i for i, k in enumerate(keys) if piece.lo <= slice_hash(k, i) < piece.hi}
    handed = set()
    for item in items:
        handed.update(item.offsets if batches else [item.offset])
    assert handed == {i for i in ours if not filtered[i]}, "its own matching records, and only they"
    acked, _, _ = committed(x)
    assert acked == {i for i in ours if filtered[i]}, "its own filtered records are done; others' never"
