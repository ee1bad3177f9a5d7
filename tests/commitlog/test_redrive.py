"""The commit log's side of `dlq redrive` (issue 38): batches claimed by one run at a time, a killed run's batch
handed to the next one as in doubt with the target's offsets from before it, rejects marked redriven once
their batch lands (those the run could not read stay pending), and lag counting pending, redriven and purged
rejects."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from streamplane.coordinator import keys
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
    args: dict[str, Any] = {"target": TARGET, **kw}
    return redrive.claim(d.db, "orders", "billing", owner, now_ms=now_ms, **args)


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


def test_a_record_rejected_again_after_a_rewind_is_pending_not_redriven() -> None:
    """Redriven is a bit per offset beside the marks: a rewind takes the bits from its offset on with the marks,
    so the records it processes again, rejected again, wait for a redrive again (at chunk edges too)."""
    d = Domain().cluster("c").stream("orders", 2)
    offsets = [3, commitlog.CHUNK - 1, commitlog.CHUNK, commitlog.CHUNK + 5, 3 * commitlog.CHUNK + 1]
    top = offsets[-1] + 1
    body = Commit(rejects=[Reject(o, "bad") for o in offsets], high_watermark=top)
    commitlog.commit(d.db, "billing", REF.lease_id, 0, body, now_ms=1_000)
    _claim(d, "run-a")
    assert redrive.complete(d.db, "orders", "billing", "run-a", now_ms=100_001) == 5
    assert _lane(d) == (0, 5, 0)
    d.db.transact(lambda tr: commitlog.rewind(tr, "billing", REF, commitlog.CHUNK, now_ms=100_002))
    assert _lane(d) == (0, 2, 0), "3 and CHUNK - 1 stay redriven; the rest are forgotten"
    again = Commit(rejects=[Reject(o, "bad again") for o in offsets[2:]], high_watermark=top)
    commitlog.commit(d.db, "billing", REF.lease_id, 0, again, now_ms=100_003)
    assert _lane(d) == (3, 2, 0)
    assert [r.offset for r in _claim(d, "run-b", now_ms=200_000).batch] == offsets[2:], "claimed again"
    states = {r.offset: r.state for r in commitlog.reject_page(d.db, "orders", page_size=100).rejects}
    assert states == {o: ("redriven" if o < commitlog.CHUNK else "pending") for o in offsets}


def test_a_batch_claimed_before_a_purge_or_a_rewind_marks_redriven_only_what_is_pending_still() -> None:
    """A completion trusts its batch's marks only while no purge or rewind changed the group's marks since the
    claim: here both did, and what they changed is neither counted nor marked redriven."""
    d = _world(10)  # rejected at 1 s to 10 s
    claimed = _claim(d, "run-a")
    assert [r.offset for r in claimed.batch] == list(range(10))
    commitlog.purge_rejects(d.db, "orders", before_ms=5_500, now_ms=100_001)  # 0 to 4
    d.db.transact(lambda tr: commitlog.rewind(tr, "billing", REF, 8, now_ms=100_002))  # 8 and 9 forgotten
    assert redrive.complete(d.db, "orders", "billing", "run-a", batch_id=claimed.batch_id, now_ms=100_003) == 3
    assert _lane(d) == (0, 3, 5)
    again = Commit(rejects=[Reject(o, "bad again") for o in (8, 9)], high_watermark=10)
    commitlog.commit(d.db, "billing", REF.lease_id, 0, again, now_ms=100_004)
    states = {r.offset: r.state for r in commitlog.reject_page(d.db, "orders", purged=True, page_size=20).rejects}
    assert states == {**dict.fromkeys(range(5), "purged"), 5: "redriven", 6: "redriven", 7: "redriven", 8: "pending",
                      9: "pending"}  # fmt: skip
    assert _lane(d) == (2, 3, 5)


def test_a_claim_completes_the_batch_it_names_first_and_a_claim_sent_again_completes_nothing_twice() -> None:
    """One call a batch: the claim ahead completes the batch before, in its transaction; sent again (its answer
    lost), the completion is done already and the claim hands its batch back in doubt."""
    d = _world(10)
    first = _claim(d, "run-a", batch_size=4)
    second = _claim(d, "run-a", batch_size=4, cursor=first.cursor, in_flight=1)
    left = frozenset({(REF, 2)})
    for _ in range(2):
        third = _claim(
            d, "run-a", batch_size=4, cursor=second.cursor, in_flight=1, complete_batch_id=first.batch_id, left=left
        )
    assert _lane(d) == (7, 3, 0), "0, 1 and 3 redriven once; 2 could not be read and waits"
    assert third.in_doubt and [r.offset for r in third.batch] == [8, 9]
    states = {r.offset: r.state for r in commitlog.reject_page(d.db, "orders", page_size=20).rejects}
    assert [o for o, state in states.items() if state == "redriven"] == [0, 1, 3]
    with pytest.raises(FailedPreconditionError, match="taken over"):
        _claim(d, "run-b", now_ms=200_000, complete_batch_id=second.batch_id)  # run-a's claim lapsed: not run-b's


def test_a_mark_that_says_redriven_itself_stays_redriven_and_a_redriven_one_can_be_purged() -> None:
    """Marks written before the bitmaps said "redriven" in their own state; and purged wins over redriven."""
    d = _world(4)
    raw = d.db.transact(lambda tr: tr.get(keys.reject_key("billing", REF, 0)))
    old = commitlog.mark_json({**json.loads(raw), "state": "redriven", "redriven_ms": 50_000})
    d.db.transact(lambda tr: tr.set(keys.reject_key("billing", REF, 0), old))
    assert [r.offset for r in _claim(d, "run-a").batch] == [1, 2, 3], "the old redriven mark is not claimed"
    redrive.complete(d.db, "orders", "billing", "run-a", now_ms=100_001)
    commitlog.purge_rejects(d.db, "orders", before_ms=2_500, now_ms=100_002)  # rejected at 1 s and 2 s
    states = {r.offset: r.state for r in commitlog.reject_page(d.db, "orders", purged=True, page_size=10).rejects}
    assert states == {0: "purged", 1: "purged", 2: "redriven", 3: "redriven"}


def test_a_run_claims_its_next_batch_while_it_produces_one_and_completes_them_by_id() -> None:
    d = _world(10)
    first = _claim(d, "run-a", batch_size=4)
    ahead = _claim(d, "run-a", batch_size=4, cursor=first.cursor, in_flight=1)
    assert [r.offset for r in ahead.batch] == [4, 5, 6, 7] and not ahead.in_doubt
    assert first.batch_id != ahead.batch_id
    with pytest.raises(InvalidArgumentError, match="at most 2 batches"):
        _claim(d, "run-a", cursor=ahead.cursor, in_flight=2)
    # a completion sent again (its answer lost) completes nothing more: the batch ahead is not produced yet
    for _ in range(2):
        redrive.complete(d.db, "orders", "billing", "run-a", batch_id=first.batch_id, now_ms=100_001)
    assert _lane(d) == (6, 4, 0)
    assert redrive.complete(d.db, "orders", "billing", "run-a", batch_id=ahead.batch_id, now_ms=100_002) == 4


def test_a_claim_sent_again_gets_its_batch_back_in_doubt_and_a_walk_passes_over_batches_in_flight() -> None:
    d = _world(3)
    first = _claim(d, "run-a")  # all three: the walk has ended (cursor "")
    assert first.cursor == "" and len(first.batch) == 3
    ahead = _claim(d, "run-a", cursor="", in_flight=1)
    assert ahead.done and ahead.batch == (), "the walk from the start passes over the batch in flight"
    again = _claim(d, "run-a", cursor="", in_flight=0)  # the first claim's answer was lost: sent again
    assert again.in_doubt and [r.offset for r in again.batch] == [0, 1, 2] and again.batch_id == first.batch_id
    assert again.target == TARGET
    # the walk ended while the batch was in flight: its completion releases the claim at once
    redrive.complete(d.db, "orders", "billing", "run-a", batch_id=first.batch_id, now_ms=100_001)
    assert d.db.transact(lambda tr: tr.get(keys.redrive_key("billing", "orders"))) is None
    assert _claim(d, "run-b", now_ms=100_002).done, "a later run does not wait for a claim to lapse"


def test_the_walks_last_batch_says_so_and_its_completion_releases_the_claim() -> None:
    """A run ends with the walk's last batch, claiming nothing after it: a claim after it would walk again
    from the start, over every reject the run redrove. Completing that batch releases the claim, also when it
    was claimed ahead, while the one before it was still in flight."""
    d = _world(10)
    first = _claim(d, "run-a", batch_size=6)
    assert first.cursor and not first.last
    ahead = _claim(d, "run-a", batch_size=6, cursor=first.cursor, in_flight=1)
    assert [r.offset for r in ahead.batch] == [6, 7, 8, 9] and ahead.cursor == "" and ahead.last
    redrive.complete(d.db, "orders", "billing", "run-a", batch_id=first.batch_id, now_ms=100_001)
    assert _claim(d, "run-b", now_ms=100_002).wait_ms > 0, "the last batch is still in flight"
    assert redrive.complete(d.db, "orders", "billing", "run-a", batch_id=ahead.batch_id, now_ms=100_003) == 4
    assert d.db.transact(lambda tr: tr.get(keys.redrive_key("billing", "orders"))) is None
    assert _lane(d) == (0, 10, 0)
    later = _claim(d, "run-b", now_ms=100_004)
    assert later.done and later.wait_ms == 0 and not later.last, "a later run does not wait for a claim to lapse"
    taken = _world(3)
    _claim(taken, "run-a")
    in_doubt = _claim(taken, "run-b", now_ms=100_000 + redrive.CLAIM_MS)
    assert in_doubt.in_doubt and in_doubt.cursor == "" and not in_doubt.last, "a takeover walks from the start next"


def test_a_run_that_takes_over_gets_every_batch_in_flight_as_one_in_doubt() -> None:
    d = _world(10)
    first = _claim(d, "run-a", batch_size=3, target=TARGET)
    later = RedriveTarget(**{**TARGET.__dict__, "from_offsets": (9, 9)})
    _claim(d, "run-a", batch_size=3, cursor=first.cursor, in_flight=1, target=later)
    taken = _claim(d, "run-b", now_ms=100_000 + redrive.CLAIM_MS)
    assert taken.in_doubt and [r.offset for r in taken.batch] == list(range(6))
    assert taken.target == TARGET, "the offsets from before the first batch: where either may have landed"
    assert (
        redrive.complete(d.db, "orders", "billing", "run-b", batch_id=taken.batch_id, now_ms=100_000 + redrive.CLAIM_MS)
        == 6
    )
    assert [r.offset for r in _claim(d, "run-b", now_ms=100_000 + redrive.CLAIM_MS).batch] == list(range(6, 10))


def test_a_claim_stored_before_batches_had_ids_is_taken_over_and_completed() -> None:
    d = _world(5)
    legacy = {
        "owner": "run-old", "until_ms": 0, "cursor": "", "batch": {REF.lease_id: [0, 1]},
        "target": {**TARGET.__dict__, "from_offsets": list(TARGET.from_offsets)},
    }  # fmt: skip
    d.db.transact(lambda tr: tr.set(keys.redrive_key("billing", "orders"), json.dumps(legacy).encode()))
    taken = _claim(d, "run-new")
    assert taken.in_doubt and [r.offset for r in taken.batch] == [0, 1] and taken.target == TARGET
    assert redrive.complete(d.db, "orders", "billing", "run-new", now_ms=100_001) == 2
    assert [r.offset for r in _claim(d, "run-new").batch] == [2, 3, 4]


@pytest.mark.parametrize(
    "torn",
    [
        {"flights": "x"},
        {"flights": [{"id": 1, "batch": 5, "target": {}}]},
        {"flights": [{"id": "one", "batch": {REF.lease_id: [0]}, "target": {}}]},
        {"flights": [{"id": 1, "batch": {"not a lease": [0]}, "target": {}}]},
        {"flights": [{"id": 1, "batch": {REF.lease_id: ["zero"]}}]},
        {"until_ms": "later"},
        {"batch": {REF.lease_id: [0]}},  # a claim from before batch ids, without its target
    ],
)
def test_a_claim_torn_in_a_field_is_taken_over_as_nobodys(torn: dict[str, Any]) -> None:
    d = _world(3)
    target = {**TARGET.__dict__, "from_offsets": list(TARGET.from_offsets)}
    stored = {"owner": "run-old", "until_ms": 10**15, "cursor": "", **torn}
    for f in stored.get("flights", []) if isinstance(stored.get("flights"), list) else []:
        f["target"] = f.get("target") or target
    d.db.transact(lambda tr: tr.set(keys.redrive_key("billing", "orders"), json.dumps(stored).encode()))
    claimed = _claim(d, "run-new")
    assert [r.offset for r in claimed.batch] == [0, 1, 2] and not claimed.in_doubt
    assert redrive.complete(d.db, "orders", "billing", "run-new", batch_id=claimed.batch_id, now_ms=100_001) == 3


# -- histories: runs killed anywhere, takeovers, purges and new rejects, in any order -------------------------------


class RedriveHistory(RuleBasedStateMachine):
    """Runs of a redrive follow the client's protocol against the commit log, with a set standing for the
    target lane: claim (the next batch claimed while one is produced, unless a batch is in doubt), produce each
    batch record by record (an in-doubt batch is looked up in the target first), complete batches in order.
    Answers are lost (a claim or a completion sent again), runs are killed at any point (batches claimed,
    some records produced, not completed), the claim lapses, new rejects arrive, old ones are purged, and
    some runs are clients from before batches had ids (one batch at a time, completed by id 0). However the
    history goes, no reject is produced twice, and once a run finishes every reject pending at its end was
    produced."""

    def __init__(self) -> None:
        super().__init__()
        self.d = Domain().cluster("c").stream("orders", 2)
        self.now = 1_000
        self.produced: list[tuple[PartitionRef, int]] = []  # the target lane, in order
        self.run: dict[str, Any] | None = None  # the live run: owner, cursor, its batches in flight
        self.runs = 0
        self.next_offset = {0: 0, 1: 0}
        self.purged: set[tuple[PartitionRef, int]] = set()

    def _reject(self, p: int, n: int) -> None:
        ref = PartitionRef("orders", "realtime", 1, p)
        start = self.next_offset[p]
        body = Commit(rejects=[Reject(o, "bad") for o in range(start, start + n)], high_watermark=start + n)
        commitlog.commit(self.d.db, "billing", ref.lease_id, 0, body, now_ms=self.now)
        self.next_offset[p] += n

    @initialize(a=st.integers(0, 12), b=st.integers(0, 12))
    def rejects_wait(self, a: int, b: int) -> None:
        for p, n in ((0, a), (1, b)):
            self._reject(p, n)  # the group has read both partitions, with or without rejects

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

    @rule(size=st.integers(1, 6), legacy=st.booleans(), lost=st.booleans(), packed=st.booleans(), merged=st.booleans())
    def start_or_step(
        self, size: int, legacy: bool = False, lost: bool = False, packed: bool = True, merged: bool = True
    ) -> None:
        """The live run (or a new one) claims its next batch, while it holds none, or one not in doubt (a
        client from before batch ids: none); `lost`: the first answer is lost and the claim sent again.
        `packed`: a run that asks for its batches packed (a client from before asks for records). `merged`: a
        run that completes its oldest batch, once produced, in the claim (a client from before completes apart)."""
        if self.run is None:
            self.runs += 1
            self.run = {
                "owner": f"run-{self.runs}", "cursor": "", "held": [], "legacy": legacy, "packed": packed,
                "merged": merged and not legacy,
            }  # fmt: skip
        run = self.run
        held = run["held"]
        completing = held[0] if run["merged"] and held and not held[0]["todo"] else None
        kept = held[1:] if completing else held
        if run.get("ended") or (kept and (run["legacy"] or len(kept) > 1 or kept[-1]["claim"].in_doubt)):
            return
        in_flight = 0 if run["legacy"] else len(kept)
        try:
            for _ in range(2 if lost else 1):
                claim = redrive.claim(
                    self.d.db, "orders", "billing", run["owner"], target=TARGET, cursor=run["cursor"],
                    batch_size=size, in_flight=in_flight, packed=run["packed"],
                    complete_batch_id=completing["claim"].batch_id if completing else 0, now_ms=self.now,
                )  # fmt: skip
        except FailedPreconditionError:
            self.run = None  # its completion found the claim taken over meanwhile: this run stops
            return
        if completing:
            del held[0]
        if claim.wait_ms:
            self.now += claim.wait_ms  # another (killed) run's claim: wait it out
            return
        if claim.done:  # the run ends once it has completed what it holds
            run["ended"] = True
            if not held:
                self._ended()
            return
        landed = set(self.produced) if claim.in_doubt else set()
        batch = [(r.partition, o) for r in claim.reject_runs() for o in r.offsets]
        assert bool(claim.runs) <= run["packed"] and not (claim.batch and claim.runs), "records or runs, as asked"
        todo = [at for at in batch if at not in landed]
        held.append({"claim": claim, "todo": todo})
        run["cursor"] = claim.cursor
        if claim.last and not run["legacy"]:
            run["ended"] = True  # the walk's last batch: the run claims no more (a legacy one claims until done)

    @rule(size=st.integers(1, 6), lost=st.booleans())
    def claim_ahead(self, size: int, lost: bool) -> None:
        """The run claims twice in a row: its next batch, and (while it produces that one) the one after."""
        self.start_or_step(size)
        self.start_or_step(size, lost=lost)

    @rule(k=st.integers(0, 6))
    def produce_some(self, k: int) -> None:
        """The run produces its batches in order."""
        if self.run is None:
            return
        for batch in self.run["held"]:
            n = min(k, len(batch["todo"]))
            self.produced += batch["todo"][:n]
            del batch["todo"][:n]
            k -= n

    @rule(lost=st.booleans())
    def complete(self, lost: bool = False) -> None:
        """The run completes its oldest batch once it is produced; `lost`: the answer is lost and sent again."""
        run = self.run
        if run is None or not run["held"] or run["held"][0]["todo"]:
            return
        self.now += 1
        batch_id = 0 if run["legacy"] else run["held"][0]["claim"].batch_id
        try:
            for _ in range(2 if lost else 1):
                redrive.complete(self.d.db, "orders", "billing", run["owner"], batch_id=batch_id, now_ms=self.now)
        except FailedPreconditionError:
            self.run = None  # taken over meanwhile: this run stops
            return
        del run["held"][0]
        if run.get("ended") and not run["held"]:
            self._ended()

    def _ended(self) -> None:
        """A run that has ended released its claim: the next one need not wait for it to lapse."""
        self.run = None
        claim = self.d.db.transact(lambda tr: tr.get(keys.redrive_key("billing", "orders")))
        assert claim is None, "a run that ended left its claim held"

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

    @invariant()
    def the_lanes_counts_agree_with_the_marks(self) -> None:
        rows = commitlog.reject_page(self.d.db, "orders", group="billing", page_size=1000, purged=True).rejects
        states = [r.state for r in rows]
        (lane,) = commitlog.lag(self.d.db, "billing", stream="orders", now_ms=self.now).lanes
        counted = (lane.dlq_pending, lane.dlq_redriven, lane.dlq_purged)
        assert counted == (states.count("pending"), states.count("redriven"), states.count("purged"))

    @invariant()
    def what_is_marked_redriven_was_produced(self) -> None:
        rows = commitlog.reject_page(self.d.db, "orders", group="billing", page_size=1000, purged=True).rejects
        marked = {(r.partition, r.offset) for r in rows if r.state == "redriven"}
        assert marked <= set(self.produced), "a reject was marked redriven before it was produced"

    def teardown(self) -> None:
        # a last run goes to the end: every reject still pending was produced by then, or by an earlier run
        self.kill()
        for _ in range(1000):
            self.start_or_step(6)
            self.produce_some(12)
            self.complete()
            if self.run is None:
                break
        pending = {(r.partition, r.offset) for r in self._pending()}
        assert pending == set(), f"left pending after a run to the end: {sorted(pending)[:5]}"
        every = {(PartitionRef("orders", "realtime", 1, p), o) for p in (0, 1) for o in range(self.next_offset[p])}
        assert set(self.produced) | self.purged == every, "each reject was produced, or purged before its turn"
        self.d.close()


RedriveHistory.TestCase.settings = settings(
    max_examples=300, stateful_step_count=40, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
test_redrive_histories = RedriveHistory.TestCase
