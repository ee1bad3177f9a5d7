"""The commit a consumer sends for one lease: what a sparse `where` leaves is sent as few ranges."""

from __future__ import annotations

from streamplane.client.consumer.committer import _request
from streamplane.client.consumer.ledger import LeaseLedger, Outcomes
from streamplane.client.flow import Budget
from streamplane.v1 import convert
from tests.client.test_ledger import Owner, ledger


def _ledger() -> LeaseLedger:
    return ledger(Budget(1000, 1 << 20), Owner())


def test_a_sparse_filters_acks_and_left_out_runs_are_sent_as_one_acked_range() -> None:
    """One record in a hundred matched and acked, the rest left out by the predicate: the commit says the
    whole run is done in one acked range (the commit log merges filtered offsets into the done ones anyway),
    and still lists the left-out ranges, which the commit log counts apart. It was one range per matched
    record, each built as a message: a third of a busy filtered consumer's time."""
    matched = list(range(0, 100_000, 100))
    out = Outcomes(
        ranges=[(o, o + 1) for o in matched],
        batch_acked=len(matched),
        filtered=[(o + 1, o + 100) for o in matched],
    )
    commit = _request(_ledger(), out, 0).commit
    assert commit.acked == [(0, 100_000)]
    assert commit.filtered == out.filtered

    back = convert.commit_from_pb(convert.commit_to_pb("g", _request(_ledger(), out, 0))).commit
    assert back.acked == [(0, 100_000)] and back.filtered == out.filtered


def test_without_a_filter_acks_are_sent_as_they_are() -> None:
    out = Outcomes(acked=[1, 2, 3, 7], ranges=[(10, 20)])
    assert _request(_ledger(), out, 0).commit.acked == [(1, 4), (7, 8), (10, 20)]
