"""Faults during a split (issue 40), with real worker processes on both Kafka engines: a partition read in three
key slices by three workers while records flow; the holder of one slice is killed with -9 and a new worker
joins; then the lane fails over to the other cluster. Every record is processed; a record processed twice is
one the killed holder had in flight on its slice; and on the split partition, a key's records are first
processed in order (a key is one slice's, handled by one worker at a time)."""

from __future__ import annotations

import threading
import time
from collections import defaultdict

from streamplane.client import CoordinatorClient, Producer
from tests.e2e.test_client_e2e import GROUP, STREAM, Stack, rows, worker
from tests.e2e.test_client_e2e import on_engine as on_engine  # the fixture, both engines
from tests.helpers import wait_until

HOT = f"{STREAM}/realtime/g1/p0"
KEYS = 300
TOTAL = 30_000


def _produce(stack: Stack, done: threading.Event, errors: list[object]) -> None:
    """TOTAL records over about 12 s; record i: key k<i % KEYS>, value 'k<key>:<i // KEYS>' (no space: a worker's
    line is space-separated)."""
    with Producer(stack.address, token=stack.token("producer", "ingest"), **{"linger.ms": 10}) as producer:
        started = time.monotonic()
        for i in range(TOTAL):
            key = b"k%d" % (i % KEYS)
            producer.produce(
                STREAM, b"%s:%d" % (key, i // KEYS), key=key, on_delivery=lambda e, _m: e is None or errors.append(e)
            )
            if i % 500 == 0 and (ahead := started + i / (TOTAL / 12) - time.monotonic()) > 0:
                time.sleep(ahead)  # paced, so the faults land while records flow
        assert producer.flush(60) == 0
    done.set()


def _slices(stack: Stack) -> dict[str, str]:
    """{slice lease id: holder} of the hot partition's granted slices."""
    with CoordinatorClient(stack.address) as client:
        leases = client.describe_group(GROUP).leases
    return {x.lease_id: x.worker_id for x in leases if x.slice is not None and x.state == "granted"}


def test_a_slice_holder_killed_and_a_failover_during_a_split_lose_nothing(on_engine: Stack) -> None:
    stack = on_engine
    with CoordinatorClient(stack.address) as client:
        client.configure_group(GROUP, split=(HOT, 3))
    names = ["w1", "w2", "w3"]
    workers = {name: worker(stack, name, ordering="key") for name in names}
    wait_until(lambda: len(_slices(stack)) == 3, timeout=30, what=lambda: f"three slice holders: {_slices(stack)}")
    done, errors = threading.Event(), []
    producer = threading.Thread(target=_produce, args=(stack, done, errors), daemon=True)
    producer.start()
    time.sleep(3)  # records flow through the slices
    killed_lease, killed = sorted(_slices(stack).items())[0]
    workers[killed].kill9()
    killed_at_ms = time.time_ns() // 1_000_000
    workers["w4"] = worker(stack, "w4", ordering="key")
    time.sleep(3)
    with CoordinatorClient(stack.address) as client:
        client.failover(STREAM, "realtime", "b", reason="a failover during a split")
    producer.join(60)
    assert done.is_set() and not errors, errors[:3]

    wanted = {b"k%d:%d" % (i % KEYS, i // KEYS) for i in range(TOTAL)}

    def seen() -> set[bytes]:
        return {r.value for r in rows(stack, workers) if not r.failed}

    wait_until(lambda: wanted <= seen(), timeout=120, what=lambda: f"{len(wanted - seen())} records not processed")
    by_value: dict[bytes, list[tuple[int, str, str]]] = defaultdict(list)
    for name in workers:
        for r in rows(stack, {name: workers[name]}):
            by_value[r.value].append((r.at_ms, name, r.lease))
    twice = {v: sorted(hits) for v, hits in by_value.items() if len(hits) > 1}
    for value, hits in twice.items():
        at_ms, name, lease = hits[0]
        if lease.startswith(HOT):
            assert (name, lease) == (killed, killed_lease) and at_ms <= killed_at_ms, (
                f"{value!r} processed twice on the split partition, first by {name} on {lease}: only the killed "
                f"holder's slice may be processed again, {hits}"
            )
    on_slices = [hits[0] for hits in by_value.values() if "/s" in sorted(hits)[0][2]]
    assert len(on_slices) > 1000, "the split partition was read in slices"
    first = []  # the first processing of each record of the split partition: (when, key, sequence)
    for value, hits in by_value.items():
        at_ms, _, lease = min(hits)
        if lease.startswith(HOT):
            key, seq = value.split(b":")
            first.append((at_ms, key, int(seq)))
    last: dict[bytes, int] = {}
    for _, key, seq in sorted(first):
        assert seq > last.get(key, -1), f"key {key!r} was first processed at {seq} after {last.get(key)}"
        last[key] = seq
