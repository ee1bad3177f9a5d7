"""What a worker granted many leases at once reads of their progress in one call (`progress_many`,
GetProgressBatch): every lease's as `progress` gives it, in the order asked, bounded in leases and in ranges,
every lease id checked before anything is read."""

from __future__ import annotations

from typing import Any

import pytest

from streamplane.coordinator.commitlog import log as commitlog
from streamplane.errors import InvalidArgumentError
from streamplane.model import Commit, Retry
from tests.helpers import Domain

LEASES = [f"orders/realtime/g1/p{p}" for p in range(3)]


def _world() -> Domain:
    """Three partitions, each with three done ranges above its low watermark and one retrying offset."""
    d = Domain().cluster("c").stream("orders", 3)
    for lid in LEASES:
        body = Commit(acked=[(0, 2), (3, 4), (5, 6), (7, 8)], retries=[Retry(2, 1, "boom", 0)], high_watermark=10)
        commitlog.commit(d.db, "billing", lid, 0, body, now_ms=1_000)
    return d


def test_many_leases_progress_is_each_ones_in_the_order_asked() -> None:
    d = _world()
    one_by_one = [commitlog.progress(d.db, "billing", lid, max_ranges=100) for lid in reversed(LEASES)]
    assert one_by_one[0].done == [(3, 4), (5, 6), (7, 8)] and one_by_one[0].retrying == [2]
    assert commitlog.progress_many(d.db, "billing", list(reversed(LEASES)), max_ranges=100) == one_by_one
    assert commitlog.progress_many(d.db, "billing", []) == []


def test_a_lease_whose_ranges_do_not_fit_is_left_out_with_those_after_it_and_the_first_is_cut() -> None:
    d = _world()
    got = commitlog.progress_many(d.db, "billing", LEASES, max_ranges=5)
    assert len(got) == 1 and got[0].done == [(3, 4), (5, 6), (7, 8)], "the second's 3 ranges do not fit in 2"
    exactly = commitlog.progress_many(d.db, "billing", LEASES, max_ranges=7)
    assert len(exactly) == 2, "a lease that fills what is left may have been cut: it is asked again"
    cut = commitlog.progress_many(d.db, "billing", LEASES, max_ranges=2)
    assert len(cut) == 1 and cut[0].done == [(3, 4), (5, 6)], "the first alone is cut as progress cuts"


@pytest.mark.parametrize(
    ("lids", "max_ranges", "sentence"),
    [
        ([LEASES[0]] * 1001, 10, "at most 1000 leases a call, not 1001"),
        ([LEASES[0], "orders/realtime/gX/p0"], 10, "lease_id"),
        (LEASES, 0, "max_ranges must be positive, not 0"),
    ],
)
def test_bad_batches_are_refused_with_a_sentence(lids: list[str], max_ranges: int, sentence: str) -> None:
    d = _world()
    with pytest.raises(InvalidArgumentError, match=sentence):
        commitlog.progress_many(d.db, "billing", lids, max_ranges=max_ranges)


class _Hints:
    """A transaction that notes which partitions' progress it was told would be read."""

    def __init__(self, tr: Any) -> None:
        self._tr, self.hinted = tr, 0

    def prefetch(self, keys: Any, ranges: Any = ()) -> None:
        self.hinted += len(keys)
        self._tr.prefetch(keys, ranges)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._tr, name)


def test_a_call_asks_the_store_for_the_leases_its_budget_reaches_not_for_every_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    d = _world()
    monkeypatch.setattr(commitlog, "PROGRESS_PREFETCH", 1)
    cut = d.db.transact(lambda tr: (h := _Hints(tr), commitlog.progress_many(h, "billing", LEASES, max_ranges=5)))
    assert len(cut[1]) == 1 and cut[0].hinted == 2, "the lease that did not fit was read; the third was not"
    whole = d.db.transact(lambda tr: (h := _Hints(tr), commitlog.progress_many(h, "billing", LEASES, max_ranges=99)))
    assert len(whole[1]) == 3 and whole[0].hinted == 3
