"""The commit log's side of `dlq redrive` (issue 38): batches claimed by one run at a time, a killed run's batch
handed to the next one as in doubt with the target's offsets from before it, rejects marked redriven once
their batch lands (those the run could not read stay pending), and lag counting pending, redriven and purged
rejects."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from streamplane.coordinator.commitlog import log as commitlog
from streamplane.coordinator.commitlog import redrive
from streamplane.errors import FailedPreconditionError, InvalidArgumentError
from streamplane.model import Commit, PartitionRef, RedriveTarget, Reject, RejectedRecord
from tests.helpers import Domain

TARGET = RedriveTarget("orders", "realtime", 1, "sp.orders.realtime.g1", "c:9092", (5, 7))
REF = PartitionRef("orders", "realtime", 1, 0)


def _world(rejects: int = 30) -> Domain:
    d = Domain().cluster("c").stream("orders", 2)
    for i in range(rejects):  # one reject a second, from t = 1 s
        c = Commit(rejects=[Reject(i, f"bad {i}")], high_watermark=rejects)
        commitlog.commit(d.db, "billing", REF.lease_id, 0, c, now_ms=1_000 * (i + 1))
    return d


def _claim(d: Domain, owner: str, now_ms: int = 100_000, **kw: object) -> redrive.RedriveClaim:
    return redrive.claim(d.db, "orders", "billing", owner, target=TARGET, now_ms=now_ms, **kw)  # type: ignore[arg-type]


def _lane(d: Domain) -> tuple[int, int, int]:
    (lane,) = commitlog.lag(d.db, "billing", stream="orders", now_ms=200_000).lanes
    return lane.dlq_pending, lane.dlq_redriven, lane.dlq_purged


def test_batches_are_claimed_in_order_and_marked_redriven_once_they_land() -> None:
    d = _world()
    first = _claim(d, "run-a", batch_size=12)
    assert [r.offset for r in first.batch] == list(range(12)) and not first.in_doubt and first.target == TARGET
    assert redrive.complete(d.db, "orders", "billing", "run-a", now_ms=100_001) == 12
    second = _claim(d, "run-a", batch_size=12, cursor=first.cursor)
    assert [r.offset for r in second.batch] == list(range(12, 24))
    redrive.complete(d.db, "orders", "billing", "run-a", now_ms=100_002)
    assert _lane(d) == (6, 24, 0)
    states = {r.offset: r.state for r in commitlog.reject_page(d.db, "orders", purged=True, page_size=100).rejects}
    assert states == {o: ("redriven" if o < 24 else "pending") for o in range(30)}
    third = _claim(d, "run-a", batch_size=12, cursor=second.cursor)
    redrive.complete(d.db, "orders", "billing", "run-a", now_ms=100_003)
    assert _claim(d, "run-a", cursor=third.cursor).done
    assert _lane(d) == (0, 30, 0)
    assert _claim(d, "run-b").done, "a later run finds nothing pending"


def test_a_second_run_waits_while_the_first_holds_its_claim_then_takes_its_batch_in_doubt() -> None:
    d = _world()
    first = _claim(d, "run-a", batch_size=10)
    busy = _claim(d, "run-b", now_ms=100_000 + redrive.CLAIM_MS - 1)
    assert busy.wait_ms == 1 and busy.batch == () and not busy.done
    taken = _claim(d, "run-b", now_ms=100_000 + redrive.CLAIM_MS)  # run-a was killed before completing
    assert taken.in_doubt and [r.offset for r in taken.batch] == [r.offset for r in first.batch]
    assert taken.target == TARGET, "the target's offsets from before the batch: where to look for what landed"
    with pytest.raises(FailedPreconditionError, match="taken over by another run: stop"):
        redrive.complete(d.db, "orders", "billing", "run-a", now_ms=100_000 + redrive.CLAIM_MS + 1)
    assert redrive.complete(d.db, "orders", "billing", "run-b", now_ms=100_000 + redrive.CLAIM_MS + 1) == 10
    # run-b was killed between batches: a new run walks from the start, passing over what was redriven
    later = _claim(d, "run-c", now_ms=100_000 + 3 * redrive.CLAIM_MS)
    assert [r.offset for r in later.batch][:1] == [10] and not later.in_doubt


def test_records_the_run_could_not_read_stay_pending_and_purged_ones_stay_purged() -> None:
    d = _world(10)
    claimed = _claim(d, "run-a")
    commitlog.purge_rejects(d.db, "orders", before_ms=2_500, now_ms=100_000)  # offsets 0 and 1
    assert _lane(d) == (8, 0, 2)
    marked = redrive.complete(d.db, "orders", "billing", "run-a", left=frozenset({(REF, 5)}), now_ms=100_001)
    assert marked == 7 and len(claimed.batch) == 10
    assert _lane(d) == (1, 7, 2)


def test_a_window_claims_only_what_was_rejected_in_it() -> None:
    d = _world()
    claimed = _claim(d, "run-a", since_ms=5_000, until_ms=8_000)
    assert [r.offset for r in claimed.batch] == [4, 5, 6]


@pytest.mark.parametrize(
    ("kw", "sentence"),
    [
        ({"since_ms": 9, "until_ms": 9}, "since must be before until"),
        ({"since_ms": -1}, "since and until must be times"),
        ({"target": RedriveTarget("orders", "dlq", 1, "t", "c:9092", ())}, "not the dlq lane"),
    ],
)
def test_bad_claims_are_refused_with_a_sentence(kw: dict[str, object], sentence: str) -> None:
    d = _world(1)
    args = {"target": TARGET, "now_ms": 1, **kw}
    with pytest.raises(InvalidArgumentError, match=sentence):
        redrive.claim(d.db, "orders", "billing", "run-a", **args)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="owner"):
        redrive.claim(d.db, "orders", "billing", "", target=TARGET, now_ms=1)


def test_a_rewind_recounts_the_states_of_the_rejects_it_keeps() -> None:
    d = _world(10)
    commitlog.purge_rejects(d.db, "orders", before_ms=2_500, now_ms=100_000)  # offsets 0 and 1
    _claim(d, "run-a", batch_size=4)  # 2 to 5
    redrive.complete(d.db, "orders", "billing", "run-a", now_ms=100_001)
    assert _lane(d) == (4, 4, 2)
    d.db.transact(lambda tr: commitlog.rewind(tr, "billing", REF, 5, now_ms=100_003))
    assert _lane(d) == (0, 3, 2), "offsets 5 on are forgotten: 0-1 purged and 2-4 redriven stay"


# -- histories: runs killed anywhere, takeovers, purges and new rejects, in any order -------------------------------


class RedriveHistory(RuleBasedStateMachine):
    """Runs of a redrive follow the client's protocol (claim, produce the batch record by record, complete; an
    in-doubt batch is looked up in the target first) against the commit log, with a set standing for the
    target lane. Runs are killed at any point (a claim taken, some records produced, not completed), the
    claim lapses, new rejects arrive, old ones are purged. However the history goes, no reject is produced
    twice, and once a run finishes every reject pending at its end was produced."""

    def __init__(self) -> None:
        super().__init__()
        self.d = Domain().cluster("c").stream("orders", 2)
        self.now = 1_000
        self.produced: list[tuple[PartitionRef, int]] = []  # the target lane, in order
        self.run: dict[str, object] | None = None  # the live run: owner, its claim, produced of its batch
        self.runs = 0
        self.next_offset = {0: 0, 1: 0}
        self.purged: set[tuple[PartitionRef, int]] = set()

    def _reject(self, p: int, n: int) -> None:
        ref = PartitionRef("orders", "realtime", 1, p)
        start = self.next_offset[p]
        body = Commit(rejects=[Reject(o, "bad") for o in range(start, start + n)], high_watermark=start + n)
        commitlog.commit(self.d.db, "billing", ref.lease_id, 0, body, now_ms=self.now)
        self.next_offset[p] += n

    @rule(p=st.integers(0, 1), n=st.integers(1, 7))
    def rejects_arrive(self, p: int, n: int) -> None:
        self.now += 10
        self._reject(p, n)

    @rule()
    def purge_old(self) -> None:
        self.now += 10
        before = {(r.partition, r.offset) for r in self._pending()}
        commitlog.purge_rejects(self.d.db, "orders", before_ms=self.now - 50, now_ms=self.now)
        self.purged |= before - {(r.partition, r.offset) for r in self._pending()}

    def _pending(self) -> list[RejectedRecord]:
        rows = commitlog.reject_page(self.d.db, "orders", group="billing", page_size=1000).rejects
        return [r for r in rows if r.state == "pending"]

    @rule(size=st.integers(1, 6))
    def start_or_step(self, size: int) -> None:
        """The live run (or a new one) claims its next batch; an in-doubt batch is looked up in the target."""
        if self.run is None:
            self.runs += 1
            self.run = {"owner": f"run-{self.runs}", "cursor": "", "claim": None, "done_of_batch": 0}
        run = self.run
        if run["claim"] is not None:
            return  # it has a batch to produce first
        claim = redrive.claim(
            self.d.db, "orders", "billing", run["owner"], target=TARGET, cursor=run["cursor"], batch_size=size,
            now_ms=self.now,
        )  # fmt: skip
        if claim.wait_ms:
            self.now += claim.wait_ms  # another (killed) run's claim: wait it out
            return
        if claim.done:
            self.run = None
            return
        landed = set(self.produced) if claim.in_doubt else set()
        run["claim"], run["todo"] = (
            claim,
            [(r.partition, r.offset) for r in claim.batch if (r.partition, r.offset) not in landed],
        )

    @rule(k=st.integers(0, 6))
    def produce_some(self, k: int) -> None:
        if self.run is None or self.run["claim"] is None:
            return
        todo = self.run["todo"]
        self.produced += todo[:k]
        del todo[:k]

    @rule()
    def complete(self) -> None:
        run = self.run
        if run is None or run["claim"] is None or run["todo"]:
            return
        self.now += 1
        try:
            redrive.complete(self.d.db, "orders", "billing", run["owner"], now_ms=self.now)
        except FailedPreconditionError:
            self.run = None  # taken over meanwhile: this run stops
            return
        run["cursor"], run["claim"] = run["claim"].cursor, None

    @rule()
    def kill(self) -> None:
        self.run = None  # whatever it claimed or produced stays as it is
        self.now += redrive.CLAIM_MS

    @rule(size=st.integers(1, 6), k=st.integers(0, 6))
    def crash_mid_batch(self, size: int, k: int) -> None:
        """A run claims a batch, produces part of it, and is killed before it completes it."""
        self.start_or_step(size)
        self.produce_some(k)
        self.kill()

    @invariant()
    def nothing_is_produced_twice(self) -> None:
        assert len(self.produced) == len(set(self.produced)), "a reject was produced twice"

    def teardown(self) -> None:
        # a last run goes to the end: every reject still pending was produced by then, or by an earlier run
        self.kill()
        for _ in range(1000):
            self.start_or_step(6)
            self.produce_some(6)
            self.complete()
            if self.run is None:
                break
        pending = {(r.partition, r.offset) for r in self._pending()}
        assert pending == set(), f"left pending after a run to the end: {sorted(pending)[:5]}"
        every = {(PartitionRef("orders", "realtime", 1, p), o) for p in (0, 1) for o in range(self.next_offset[p])}
        assert set(self.produced) | self.purged == every, "each reject was produced, or purged before its turn"
        self.d.close()


RedriveHistory.TestCase.settings = settings(
    max_examples=150, stateful_step_count=40, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
test_redrive_histories = RedriveHistory.TestCase
