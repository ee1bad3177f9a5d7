"""A hot partition split into key slices (issue 40), end to end on both Kafka engines: `group configure
--split` while workers run hands the partition from its one holder to two slice holders, every record is
handled once, a key's records in order and by one worker after the split, and the group's lag goes to zero;
merged again, one worker reads on and the lag still goes to zero."""

from __future__ import annotations

import subprocess
import threading
import uuid
from collections import Counter

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

    def handler(self, worker: str):  # type: ignore[no-untyped-def]
        def handle(msg: Message) -> None:
            key, seq = msg.value.split(b" ")
            with self.lock:
                self.seen.append((worker, key, int(seq)))

        return handle

    def count(self) -> int:
        with self.lock:
            return len(self.seen)


@pytest.mark.timeout(180)
def test_a_partition_split_while_workers_run_is_read_in_slices_once_each_in_key_order(secured_engine: str) -> None:
    address = secured_engine
    stream, group = f"hot-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:6]}"
    with CoordinatorClient(address, token=issue_token("admin", "ops")) as client:
        client.create_stream(stream, 1, cluster="east")
    lid = f"{stream}/realtime/g1/p0"
    handled = Handled()
    stop = threading.Event()
    consumers = [
        Consumer(address, group=group, stream=stream, worker_id=w, token=issue_token("consumer", "worker"))
        for w in ("w1", "w2")
    ]
    threads = [
        threading.Thread(target=c.run, args=(handled.handler(c.worker_id),), kwargs={"stop": stop}, daemon=True)
        for c in consumers
    ]
    for t in threads:
        t.start()
    try:
        _produce(address, stream, 0, 2000)
        wait_until(
            lambda: handled.count() >= 2000, timeout=60, what=lambda: f"{handled.count()} of 2000 before the split"
        )
        done = _cli(address, "group", "configure", group, "--split", lid, "2")
        assert done.returncode == 0 and "2 key slices" in done.stdout, done.stderr
        wait_until(lambda: len(_slice_holders(address, group, lid)) == 2, timeout=30, what=lambda: "two slice holders")
        holders = _slice_holders(address, group, lid)
        assert sorted(holders.values()) == ["w1", "w2"], "each slice has its own worker"
        _produce(address, stream, 2000, 6000)
        wait_until(lambda: handled.count() >= 6000, timeout=60, what=lambda: f"{handled.count()} of 6000")
        wait_until(
            lambda: offset_lag(address, group, stream) == 0, timeout=30, what=lambda: "the group's lag to reach 0"
        )
        with handled.lock:
            seen = list(handled.seen)
        counts = Counter((key, seq) for _, key, seq in seen)
        assert len(counts) == 6000 and max(counts.values()) == 1, "every record handled once"
        last: dict[bytes, int] = {}
        for _, key, seq in seen:
            assert seq > last.get(key, -1), f"key {key!r} went back from {last.get(key)} to {seq}"
            last[key] = seq
        after = [(w, key) for w, key, seq in seen if seq >= 2000 // KEYS]
        by_key = {key: {w for w, k in after if k == key} for _, key in after}
        assert all(len(ws) == 1 for ws in by_key.values()), "after the split, a key's records go to one worker"
        assert {w for w, _ in after} == {"w1", "w2"}, "both slices are read"

        assert _cli(address, "group", "configure", group, "--split", lid, "1").returncode == 0
        wait_until(lambda: not _slice_holders(address, group, lid), timeout=30, what=lambda: "the slices to merge")
        _produce(address, stream, 6000, 7000)
        wait_until(lambda: handled.count() >= 7000, timeout=60, what=lambda: f"{handled.count()} of 7000")
        wait_until(
            lambda: offset_lag(address, group, stream) == 0, timeout=30, what=lambda: "the lag to reach 0 merged"
        )
        with handled.lock:
            assert len({(key, seq) for _, key, seq in handled.seen}) == 7000
    finally:
        stop.set()
        for t in threads:
            t.join(30)
        for c in consumers:
            c.close()


@pytest.mark.timeout(180)
def test_a_partition_left_behind_is_split_by_the_assigner_across_idle_workers_in_key_order(
    secured_engine: str,
) -> None:
    """No split by hand: four workers, one of them holding a one-partition stream's backlog at 2 ms a record;
    the Assigner sees it stay behind while the others idle, splits it in four, and every record is handled
    once, a key's in order."""
    import time

    address = secured_engine
    stream, group = f"auto-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:6]}"
    with CoordinatorClient(address, token=issue_token("admin", "ops")) as client:
        client.create_stream(stream, 1, cluster="east")
    _produce(address, stream, 0, 12_000)
    handled = Handled()

    def slow(worker: str):  # type: ignore[no-untyped-def]
        record = handled.handler(worker)

        def handle(msg: Message) -> None:
            time.sleep(0.002)
            record(msg)

        return handle

    stop = threading.Event()
    consumers = [
        Consumer(
            address, group=group, stream=stream, worker_id=f"w{i}", concurrency=1, token=issue_token("consumer", "w")
        )
        for i in range(4)
    ]
    threads = [
        threading.Thread(target=c.run, args=(slow(c.worker_id),), kwargs={"stop": stop}, daemon=True) for c in consumers
    ]
    for t in threads:
        t.start()
    lid = f"{stream}/realtime/g1/p0"
    try:
        wait_until(lambda: len(_slice_holders(address, group, lid)) == 4, timeout=60, what=lambda: "a split in four")
        with CoordinatorClient(address, token=issue_token("admin", "ops")) as client:
            changes = {e.change: e.reason for e in client.watch_group(group, idle_timeout_s=1)}
        assert "behind" in changes.get("partition_hot", ""), changes
        wait_until(lambda: handled.count() >= 12_000, timeout=90, what=lambda: f"{handled.count()} of 12000")
        wait_until(lambda: offset_lag(address, group, stream) == 0, timeout=30, what=lambda: "the lag to reach 0")
        with handled.lock:
            seen = list(handled.seen)
        assert len({(k, s) for _, k, s in seen}) == 12_000 and len(seen) == 12_000, "every record once"
        last: dict[bytes, int] = {}
        for _, key, seq in seen:
            assert seq > last.get(key, -1), f"key {key!r} went back from {last.get(key)} to {seq}"
            last[key] = seq
    finally:
        stop.set()
        for t in threads:
            t.join(30)
        for c in consumers:
            c.close()
