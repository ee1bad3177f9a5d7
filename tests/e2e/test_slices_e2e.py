"""A hot partition split into key slices (issue 40), end to end on both Kafka engines: `group configure
--split` while workers run hands the partition from its one holder to two slice holders, every record is
handled once, a key's records in order and by one worker after the split, and the group's lag goes to zero;
merged again, one worker reads on and the lag still goes to zero."""

from __future__ import annotations

import subprocess
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from streamplane.client import Consumer, CoordinatorClient, Message, Producer
from tests.helpers import cli, issue_token, offset_lag, wait_until

KEYS = 40


def _produce(address: str, stream: str, first: int, last: int) -> None:
    """Records i of [first, last): key k<i % KEYS>, value '<key> <sequence of that key>'."""
    with Producer(address, token=issue_token("producer", "ingest"), **{"linger.ms": 5}) as producer:
        for i in range(first, last):
            key = b"k%d" % (i % KEYS)
            producer.produce(stream, b"%s %d" % (key, i // KEYS), key=key)
        assert producer.flush(60) == 0


def _slice_holders(address: str, group: str, lid: str) -> dict[str, str]:
    """{slice lease id: its holder} of the partition's granted slices."""
    with CoordinatorClient(address, token=issue_token("admin", "ops")) as client:
        described = client.describe_group(group)
    return {x.lease_id: x.worker_id for x in described.leases if x.slice is not None and x.state == "granted"}


def _cli(address: str, *args: str) -> subprocess.CompletedProcess[str]:
    return cli("--token", issue_token("admin", "ops"), *args, coordinator=address)


class Handled:
    """What the handlers saw, in the order they saw it: (worker, key, sequence)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seen: list[tuple[str, bytes, int]] = []

    def handler(self, worker: str, takes_s: float = 0.0):  # type: ignore[no-untyped-def]
        """A handler that records what it handled; taking `takes_s` a record (a sleep: an I/O-bound one)."""

        def handle(msg: Message) -> None:
            if takes_s:
                time.sleep(takes_s)
            key, seq = msg.value.split(b" ")
            with self.lock:
                self.seen.append((worker, key, int(seq)))

        return handle

    def count(self) -> int:
        with self.lock:
            return len(self.seen)

    def check_once_in_order(self, total: int) -> list[tuple[str, bytes, int]]:
        """Every one of `total` records handled once, each key's in order; returns what was handled."""
        with self.lock:
            seen = list(self.seen)
        counts = Counter((key, seq) for _, key, seq in seen)
        assert len(counts) == total and max(counts.values()) == 1, "every record handled once"
        last: dict[bytes, int] = {}
        for _, key, seq in seen:
            assert seq > last.get(key, -1), f"key {key!r} went back from {last.get(key)} to {seq}"
            last[key] = seq
        return seen


def _stream(address: str, prefix: str) -> tuple[str, str, str]:
    """A new one-partition stream, a group name, and the partition's id."""
    stream, group = f"{prefix}-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:6]}"
    with CoordinatorClient(address, token=issue_token("admin", "ops")) as client:
        client.create_stream(stream, 1, cluster="east")
    return stream, group, f"{stream}/realtime/g1/p0"


@contextmanager
def _workers(
    address: str, group: str, stream: str, handled: Handled, n: int, takes_s: float = 0.0, **settings: Any
) -> Iterator[None]:
    """`n` consumers w1..wn of the group running in threads, stopped and closed at the end."""
    stop, token = threading.Event(), issue_token("consumer", "worker")
    consumers = [
        Consumer(address, group=group, stream=stream, worker_id=f"w{i}", token=token, **settings)
        for i in range(1, n + 1)
    ]
    threads = [
        threading.Thread(target=c.run, args=(handled.handler(c.worker_id, takes_s),), kwargs={"stop": stop})
        for c in consumers
    ]
    for t in threads:
        t.daemon = True
        t.start()
    try:
        yield
    finally:
        stop.set()
        for t in threads:
            t.join(30)
        for c in consumers:
            c.close()


def _events(address: str, group: str) -> list[tuple[str, str]]:
    """(change, reason) of the group's events so far."""
    with CoordinatorClient(address, token=issue_token("admin", "ops")) as client:
        return [(e.change, e.reason) for e in client.watch_group(group, follow=False)]


@pytest.mark.timeout(180)
def test_a_partition_split_while_workers_run_is_read_in_slices_once_each_in_key_order(secured_engine: str) -> None:
    address = secured_engine
    stream, group, lid = _stream(address, "hot")
    handled = Handled()
    # a key's records in order on its worker's handler threads too: what ordering="key" asks (by default, each
    # of the 4 threads takes the next chunk, and one chunk's records may be handled after the next one's)
    with _workers(address, group, stream, handled, 2, ordering="key"):
        _produce(address, stream, 0, 2000)
        wait_until(lambda: handled.count() >= 2000, timeout=60, what=lambda: f"{handled.count()} of 2000 first")
        done = _cli(address, "group", "configure", group, "--split", lid, "2")
        assert done.returncode == 0 and "2 key slices" in done.stdout, done.stderr
        wait_until(lambda: len(_slice_holders(address, group, lid)) == 2, timeout=30, what=lambda: "two slice holders")
        holders = _slice_holders(address, group, lid)
        assert sorted(holders.values()) == ["w1", "w2"], "each slice has its own worker"
        _produce(address, stream, 2000, 6000)
        wait_until(lambda: handled.count() >= 6000, timeout=60, what=lambda: f"{handled.count()} of 6000")
        wait_until(lambda: offset_lag(address, group, stream) == 0, timeout=30, what=lambda: "the lag to reach 0")
        seen = handled.check_once_in_order(6000)
        after = [(w, key) for w, key, seq in seen if seq >= 2000 // KEYS]
        by_key = {key: {w for w, k in after if k == key} for _, key in after}
        assert all(len(ws) == 1 for ws in by_key.values()), "after the split, a key's records go to one worker"
        assert {w for w, _ in after} == {"w1", "w2"}, "both slices are read"

        assert _cli(address, "group", "configure", group, "--split", lid, "1").returncode == 0
        wait_until(lambda: not _slice_holders(address, group, lid), timeout=30, what=lambda: "the slices to merge")
        _produce(address, stream, 6000, 7000)
        wait_until(lambda: handled.count() >= 7000, timeout=60, what=lambda: f"{handled.count()} of 7000")
        wait_until(lambda: offset_lag(address, group, stream) == 0, timeout=30, what=lambda: "the lag to reach 0")
        handled.check_once_in_order(7000)


@pytest.mark.timeout(180)
def test_a_partition_left_behind_is_split_by_the_assigner_across_idle_workers_in_key_order(
    secured_engine: str,
) -> None:
    """No split by hand: four workers, one of them holding a one-partition stream's backlog at 2 ms a record;
    the Assigner sees it stay behind while the others idle, splits it in four, and every record is handled
    once, a key's in order."""
    address = secured_engine
    stream, group, lid = _stream(address, "auto")
    _produce(address, stream, 0, 12_000)
    handled = Handled()
    with _workers(address, group, stream, handled, 4, 0.002, concurrency=1):
        wait_until(lambda: len(_slice_holders(address, group, lid)) == 4, timeout=60, what=lambda: "a split in four")
        hot = [reason for change, reason in _events(address, group) if change == "partition_hot"]
        assert hot and "behind" in hot[0], _events(address, group)
        wait_until(lambda: handled.count() >= 12_000, timeout=90, what=lambda: f"{handled.count()} of 12000")
        wait_until(lambda: offset_lag(address, group, stream) == 0, timeout=30, what=lambda: "the lag to reach 0")
        handled.check_once_in_order(12_000)


@pytest.mark.timeout(180)
@pytest.mark.assigner(split_lag_ms=1_500, split_confirm_ms=1_000, merge_after_ms=3_000)
def test_a_split_for_load_merges_back_when_the_load_falls_and_the_lag_reaches_zero(secured_engine: str) -> None:
    """Split by the Assigner while two workers work off a backlog, merged back by it once the backlog is gone
    (a coordinator that waits 3 s of calm, not 30, to merge); records written after the merge are read whole,
    and every record is handled once, a key's in order."""
    address = secured_engine
    stream, group, lid = _stream(address, "merge")
    _produce(address, stream, 0, 4_000)
    handled = Handled()

    def changes() -> list[str]:
        return [change for change, _ in _events(address, group)]

    with _workers(address, group, stream, handled, 2, 0.002, concurrency=1):
        wait_until(lambda: len(_slice_holders(address, group, lid)) == 2, timeout=60, what=lambda: "a split in two")
        calm = lambda: (  # noqa: E731 (what a failure says: whether the slices' records were worked off)
            f"a merge: {changes()}; {handled.count()} of 4000 handled, slices held by "
            f"{_slice_holders(address, group, lid)}, offset lag {offset_lag(address, group, stream)}"
        )
        wait_until(lambda: "partition_merged" in changes(), timeout=60, what=calm)
        assert "partition_cooled" in changes()
        assert not _slice_holders(address, group, lid)
        _produce(address, stream, 4_000, 5_000)
        wait_until(lambda: handled.count() >= 5_000, timeout=60, what=lambda: f"{handled.count()} of 5000")
        wait_until(lambda: offset_lag(address, group, stream) == 0, timeout=30, what=lambda: "the lag to reach 0")
        handled.check_once_in_order(5_000)


def test_a_bad_split_is_refused_by_the_cli_in_one_sentence_and_a_viewer_may_not_split(secured_engine: str) -> None:
    address = secured_engine
    stream, group, lid = _stream(address, "bad")
    for args, text in [
        ((lid, "9"), "splits into 2 to 4 slices"),
        ((lid, "two"), "--split takes a partition and a number of slices, not 'two'"),
        (("nope", "2"), "is not of the form stream/lane/g<generation>/p<partition>"),
        ((f"{stream}/realtime/g1/p7", "2"), "is not a partition of"),
    ]:
        done = _cli(address, "group", "configure", group, "--split", *args)
        assert done.returncode != 0 and text in done.stderr, (args, done.stderr)
    refused = cli(
        "--token", issue_token("viewer", "v"), "group", "configure", group, "--split", lid, "2", coordinator=address
    )
    assert refused.returncode != 0 and "lacks group.configure" in refused.stderr, refused.stderr
    assert _cli(address, "group", "configure", group, "--max-slices", "0").returncode == 2
