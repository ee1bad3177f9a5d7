"""The commit a consumer sends for one lease: what a sparse `where` leaves is sent as few ranges."""

from __future__ import annotations

import pytest

from streamplane.client.consumer.committer import _request
from streamplane.client.consumer.ledger import LeaseLedger, Outcomes
from streamplane.client.flow import Budget
from streamplane.errors import InvalidArgumentError
from streamplane.v1 import commitlog_pb2 as cpb
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

    sent = convert.commit_to_pb("g", _request(_ledger(), out, 0))
    assert len(sent.filtered_bounds) == 2 * len(matched) and not sent.filtered, "packed, two numbers a range"
    back = convert.commit_from_pb(sent).commit
    assert back.acked == [(0, 100_000)] and back.filtered == out.filtered


def test_filtered_ranges_as_messages_from_an_older_client_count_the_same() -> None:
    """A client from before the packed bounds sends the ranges as messages: read the same."""
    sent = cpb.CommitRequest(group="g", lease_id="s/realtime/g1/p0", epoch=1)
    sent.filtered.add(start=5, end=9)
    sent.filtered.add(start=12, end=13)
    assert convert.commit_from_pb(sent).commit.filtered == [(5, 9), (12, 13)]


def test_an_odd_count_of_filtered_bounds_is_refused_in_one_sentence() -> None:
    sent = cpb.CommitRequest(group="g", lease_id="s/realtime/g1/p0", epoch=1, filtered_bounds=[5, 9, 12])
    with pytest.raises(InvalidArgumentError, match="filtered_bounds holds 3 numbers: its ranges are start, end pairs"):
        convert.commit_from_pb(sent)


def test_without_a_filter_acks_are_sent_as_they_are() -> None:
    out = Outcomes(acked=[1, 2, 3, 7], ranges=[(10, 20)])
    assert _request(_ledger(), out, 0).commit.acked == [(1, 4), (7, 8), (10, 20)]
