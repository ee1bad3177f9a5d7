"""One hot partition read by 1, 2 and 4 workers (issue 40), side by side in one run on a real Kafka 4.4 broker.

A stream of one partition holds a backlog of records with 200 keys, each value '<key> <sequence of that key>';
every handler takes 2 ms a record (a sleep: an I/O-bound handler) and each worker has one handler thread, so
one worker handles about 500 records a second, whatever its machine. With more workers, ours splits the
partition by itself (the Assigner sees it stay behind while the other workers keep up) into one key slice
per worker; a Kafka share group (KIP-932, confluent-kafka's ShareConsumer, every record acknowledged) spreads
the partition's records over its consumers by itself too, without regard to keys.

- `slice_speedup_4`: records a second with 4 workers over records a second with 1, ours, measured over a
  window once the workers hold their slices (the split's own seconds are printed apart). Goal >= 3.5.
- `share_group_speedup_4`: the same for the share group on the same broker, with 4 consumers over 1.
- `key_order_violations`: records handled before an earlier record of their key, summed over the runs with
  4 workers: ours must be 0; the share group's is counted the same way.
- `fetch_bytes_factor`: bytes our workers fetch from the broker per record written to another one-partition
  stream under live traffic they keep up with (2,000 records a second), split in 4 by hand over whole: each
  slice holder reads the whole partition, so about 4 is what a split into 4 costs the broker.

The last line is `slice_speedup_4=<x> share_group_speedup_4=<x> key_order_violations=<n> fetch_bytes_factor=<x>`.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _local import coordinator_process, engine

from streamplane.client import Consumer, CoordinatorClient, Producer
from streamplane.client import metrics as client_metrics
from streamplane.log import configure_logging

KEYS = 200
HANDLER_S = 0.002


class Handled:
    """Records handled, in the order handlers ended them: the rate over a window, and key order."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.n = 0
        self.last: dict[bytes, int] = {}
        self.violations = 0

    def handle(self, value: bytes) -> None:
        time.sleep(HANDLER_S)
        key, seq = value.split(b" ")
        with self.lock:
            self.n += 1
            if int(seq) < self.last.get(key, -1):
                self.violations += 1
            self.last[key] = max(self.last.get(key, -1), int(seq))

    def count(self) -> int:
        with self.lock:
            return self.n

    def rate(self, window_s: float) -> float:
        """Records a second over the next `window_s` seconds."""
        first, began = self.count(), time.perf_counter()
        time.sleep(window_s)
        return (self.count() - first) / (time.perf_counter() - began)


class Source:
    """Writes the stream: a backlog at once, then live records at a steady rate while a window is measured.
    Record i has key k<i % KEYS> and value '<key> <i // KEYS>': a key's sequence grows with i."""

    def __init__(self, address: str, stream: str) -> None:
        # batches of 50 records: a share group acquires whole batches, and a consumer holding one big batch (up
        # to the partition's 2,000 in-flight records) leaves the others nothing to share
        self.producer = Producer(address, **{"linger.ms": 5, "batch.num.messages": 50})
        self.address, self.stream, self.next = address, stream, 0

    def write(self, records: int) -> None:
        for i in range(self.next, self.next + records):
            key = b"k%d" % (i % KEYS)
            self.producer.produce(self.stream, b"%s %d" % (key, i // KEYS), key=key)
        self.next += records
        if self.producer.flush(120):
            raise SystemExit("records left unacknowledged")

    def live(self, per_s: int, stop: threading.Event) -> int:
        """Write `per_s` records a second until `stop`; returns how many."""
        began, written = time.perf_counter(), 0
        while not stop.wait(0.05):
            due = int((time.perf_counter() - began) * per_s) - written
            if due > 0:
                self.write(due)
                written += due
        return written

    def close(self) -> None:
        self.producer.close()


def fetched_bytes(group: str) -> float:
    return sum(
        s.value
        for metric in client_metrics.REGISTRY.collect()
        if metric.name == "streamplane_client_fetch_bytes"
        for s in metric.samples
        if s.name.endswith("_total") and s.labels.get("group") == group
    )


LIVE_PER_S = 2_000
"""Live records a second written while the fetch cost is measured."""


def fetch_cost(address: str, stream: str, workers: int, seconds: float) -> float:
    """Bytes `workers` fetch per record written to a partition split by hand into as many slices (whole for
    one), with live traffic they keep up with: what the broker sends for each record."""
    group = f"cost-{uuid.uuid4().hex[:6]}"
    lid = f"{stream}/realtime/g1/p0"
    if workers > 1:
        with CoordinatorClient(address) as client:
            client.configure_group(group, split=(lid, workers))
    stop = threading.Event()
    consumers = [Consumer(address, group=group, stream=stream, worker_id=f"c{i}") for i in range(workers)]
    threads = [
        threading.Thread(target=c.run, args=(lambda m: None,), kwargs={"stop": stop}, daemon=True) for c in consumers
    ]
    for t in threads:
        t.start()
    source = Source(address, stream)
    try:
        with CoordinatorClient(address) as client:
            deadline = time.monotonic() + 60
            while len([x for x in client.describe_group(group).leases if x.state == "granted"]) < workers:
                if time.monotonic() > deadline:
                    raise SystemExit(f"{workers} workers never held the partition's {workers} slices")
                time.sleep(0.1)
        time.sleep(1.0)
        before, stop_live = fetched_bytes(group), threading.Event()
        timer = threading.Timer(seconds, stop_live.set)
        timer.start()
        written = source.live(LIVE_PER_S, stop_live)
        time.sleep(1.0)  # the last of them fetched
        return (fetched_bytes(group) - before) / written
    finally:
        source.close()
        stop.set()
        for t in threads:
            t.join(30)
        for c in consumers:
            c.close()


def ours(address: str, stream: str, workers: int, window_s: float) -> tuple[float, int, float]:
    """(records/s once the workers hold their slices, key order violations, seconds until they did)."""
    group = f"hot-{uuid.uuid4().hex[:6]}"
    handled = Handled()
    stop = threading.Event()
    consumers = [
        Consumer(address, group=group, stream=stream, worker_id=f"w{i}", concurrency=1) for i in range(workers)
    ]
    threads = [
        threading.Thread(target=c.run, args=(lambda m: handled.handle(m.value),), kwargs={"stop": stop}, daemon=True)
        for c in consumers
    ]
    began = time.perf_counter()
    for t in threads:
        t.start()
    try:
        with CoordinatorClient(address) as client:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                leases = [x for x in client.describe_group(group).leases if x.state == "granted"]
                held = [x for x in leases if (x.slice.count if x.slice is not None else 1) == workers]
                if held and len(held) == workers:
                    break
                time.sleep(0.2)
            else:
                raise SystemExit(f"{workers} workers never held {workers} slices of the hot partition")
        split_s = time.perf_counter() - began
        time.sleep(1.0)  # the new holders' first fetches
        return handled.rate(window_s), handled.violations, split_s
    finally:
        stop.set()
        for t in threads:
            t.join(30)
        for c in consumers:
            c.close()


def share_group(bootstrap: str, topic: str, consumers: int, window_s: float) -> tuple[float, int]:
    """(records/s, key order violations) of a share group of `consumers` on the topic."""
    from confluent_kafka import ShareConsumer
    from peers import _share_group

    group = f"share-{uuid.uuid4().hex[:6]}"
    _share_group(bootstrap, group)
    handled = Handled()
    stop = threading.Event()
    started = threading.Barrier(consumers + 1)

    def run() -> None:
        c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "share.acknowledgement.mode": "explicit"})
        c.subscribe([topic])
        started.wait()
        try:
            while not stop.is_set():
                for m in c.poll(0.5):
                    if m.error() is None:
                        handled.handle(m.value())
                        c.acknowledge(m)
                c.commit_async()
        finally:
            c.close()

    threads = [threading.Thread(target=run, daemon=True) for _ in range(consumers)]
    for t in threads:
        t.start()
    started.wait()
    deadline = time.monotonic() + 60
    while handled.count() == 0 and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(2.0)  # every consumer has its share
    rate = handled.rate(window_s)
    stop.set()
    for t in threads:
        t.join(30)
    return rate, handled.violations


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="shorter windows (CI-sized)")
    parser.add_argument("--engine", choices=["mock", "kafka"], default="kafka", help="where ours runs")
    args = parser.parse_args()
    configure_logging("warning")
    window_s = 4.0 if args.quick else 10.0
    backlog = 60_000 if args.quick else 150_000
    with (
        engine(args.engine, heap_mb=1024) as broker,
        tempfile.TemporaryDirectory() as tmp,
        coordinator_process(tmp, broker.control) as address,
        CoordinatorClient(address) as client,
    ):
        broker.register(client)
        stream = "hot"
        client.create_stream(stream, 1, cluster="local")
        topic = client.describe_stream(stream).require_lane("realtime").active.topic
        source = Source(address, stream)
        source.write(backlog)
        source.close()
        print(f"backlog: {backlog:,} records on 1 partition, {KEYS} keys, {HANDLER_S * 1000:g} ms a record")
        rates: dict[int, float] = {}
        per_record: dict[int, float] = {}
        violations = 0
        for workers in (1, 2, 4):
            rate, bad, split_s = ours(address, stream, workers, window_s)
            rates[workers] = rate
            violations += bad if workers == 4 else 0
            print(
                f"ours, {workers} worker(s): {rate:,.0f} records/s, {bad} key order violations, "
                f"its slices held in {split_s:.1f} s (the split for load included)"
            )
        client.create_stream("cost", 1, cluster="local")
        for workers in (1, 4):
            per_record[workers] = fetch_cost(address, "cost", workers, window_s)
            print(f"fetch cost, {workers} worker(s): {per_record[workers]:,.1f} bytes fetched a record written")
        share: dict[int, float] = {}
        share_violations = 0
        if args.engine == "kafka":
            for consumers in (1, 4):
                rate, bad = share_group(broker.bootstrap, topic, consumers, window_s)
                share[consumers] = rate
                share_violations += bad if consumers == 4 else 0
                print(f"share group, {consumers} consumer(s): {rate:,.0f} records/s, {bad} key order violations")
            print(f"share group key order violations with 4 consumers: {share_violations}")
        speedup = rates[4] / rates[1]
        share_speedup = f"{share[4] / share[1]:.2f}" if share else "n/a"
        factor = per_record[4] / per_record[1] if per_record[1] else 0.0
        print(
            f"slice_speedup_4={speedup:.2f} share_group_speedup_4={share_speedup} "
            f"key_order_violations={violations} fetch_bytes_factor={factor:.2f}"
        )


if __name__ == "__main__":
    main()
