"""The session reader: many sessions' looks read in a few shared transactions, each answered with its own
result, a failed transaction reported to every look of it, and no look left waiting by a stop."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from streamplane.coordinator.groups.sessions.reader import MAX_LOOKS, SessionReader
from streamplane.coordinator.store import Database, StoreConfig, Transaction, open_store
from streamplane.coordinator.store.api import StoreUnavailableError
from streamplane.errors import UnavailableError

T = TypeVar("T")


class _Counting:
    """The embedded store, counting its transactions, and holding the first one until `go` is set (so that
    every look queues behind it, as behind a large pass)."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.transactions = 0
        self.go = threading.Event()
        self.entered = threading.Event()
        """Set once a transaction is under way (held back until `go`)."""
        self.fail: Exception | None = None

    def transact(self, fn: Callable[[Transaction], T]) -> T:
        self.entered.set()
        self.go.wait(10)
        self.transactions += 1
        if self.fail is not None:
            raise self.fail
        return self.db.transact(fn)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.db, name)


@pytest.fixture
def counting(tmp_path: Path) -> _Counting:
    db = open_store(StoreConfig(driver="embedded", data_dir=tmp_path))
    db.transact(lambda tr: [tr.set(b"member/%d" % i, b"v%d" % i) for i in range(250)])
    return _Counting(db)


def _look_all(reader: SessionReader, n: int) -> tuple[list[Any], list[threading.Thread], threading.Semaphore]:
    results: list[Any] = [None] * n
    asked = threading.Semaphore(0)

    def look(i: int) -> None:
        asked.release()
        try:
            results[i] = reader.look(lambda tr: tr.get(b"member/%d" % i))
        except Exception as err:
            results[i] = err

    threads = [threading.Thread(target=look, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    return results, threads, asked


def test_looks_waiting_together_are_read_in_a_few_transactions_each_with_its_own_result(counting: _Counting) -> None:
    reader = SessionReader(counting)  # type: ignore[arg-type]
    reader.start()
    try:
        results, threads, asked = _look_all(reader, 250)
        for _ in range(250):
            asked.acquire(timeout=10)
        threading.Event().wait(0.2)  # every look queued behind the first transaction, held back
        counting.go.set()
        for t in threads:
            t.join(10)
        assert results == [b"v%d" % i for i in range(250)]
        # the first transaction took what was waiting when it began; the rest, MAX_LOOKS a transaction: at
        # most 4 transactions, where a transaction each would be 250
        assert counting.transactions <= -(-250 // MAX_LOOKS) + 1
    finally:
        reader.stop()


def test_a_failed_transaction_reaches_every_look_in_it(counting: _Counting) -> None:
    reader = SessionReader(counting)  # type: ignore[arg-type]
    reader.start()
    try:
        counting.fail = StoreUnavailableError("the store is unreachable")
        counting.go.set()
        results, threads, _ = _look_all(reader, 20)
        for t in threads:
            t.join(10)
        assert all(isinstance(r, StoreUnavailableError) for r in results), results
    finally:
        reader.stop()


def test_after_stop_a_look_is_refused_instead_of_waiting(counting: _Counting) -> None:
    counting.go.set()
    reader = SessionReader(counting)  # type: ignore[arg-type]
    reader.start()
    assert reader.look(lambda tr: tr.get(b"member/1")) == b"v1"
    reader.stop()
    with pytest.raises(UnavailableError, match="stopping"):
        reader.look(lambda tr: tr.get(b"member/1"))


def test_before_start_each_look_is_read_at_once(counting: _Counting) -> None:
    counting.go.set()
    reader = SessionReader(counting)  # type: ignore[arg-type]
    assert reader.look(lambda tr: tr.get(b"member/7")) == b"v7"
    assert counting.transactions == 1


def test_a_look_given_up_while_it_waits_is_skipped_and_the_reader_goes_on(counting: _Counting) -> None:
    """A session whose stream ends while its look waits cancels that look; the reader skips it (a crash here
    once left every later look of the replica waiting forever: no worker got a grant again)."""
    reader = SessionReader(counting)  # type: ignore[arg-type]
    reader.start()
    try:
        first = reader.submit(lambda tr: tr.get(b"member/1"))
        assert counting.entered.wait(10), "the reader took the first look"  # the store holds it back
        given_up = reader.submit(lambda tr: tr.get(b"member/2"))
        kept = reader.submit(lambda tr: tr.get(b"member/3"))
        assert given_up.cancel()
        counting.go.set()
        assert first.result(10) == b"v1" and kept.result(10) == b"v3"
        assert reader.submit(lambda tr: tr.get(b"member/4")).result(10) == b"v4", "the reader still reads"
    finally:
        reader.stop()
