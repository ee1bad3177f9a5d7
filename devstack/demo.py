"""The main job on one machine: start the local stack, then run a short pipeline through a failover.

It creates a stream, produces records with the streamplane Producer (which routes them to the lane's active
generation), reads them back with the partition fetcher and the native decoder, fails the stream over to
the second local cluster while the producer keeps writing (it follows the failover by itself), reads both
generations, and prints what happened, including the event log.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from streamplane.cli.main import describe_event
from streamplane.client import CoordinatorClient, PartitionFetcher, Producer
from streamplane.devstack.stack import LocalStack
from streamplane.v1 import topology_pb2 as pb

STREAM = "demo-logs"


def _say(text: str) -> None:
    print(text, flush=True)


def _read(bootstrap: str, topic: str, partitions: int, expected: int) -> set[int]:
    """Every record id of a generation, read raw with the partition fetcher and decoded natively."""
    seen: set[int] = set()
    fetchers = [PartitionFetcher(bootstrap, topic, p) for p in range(partitions)]
    deadline = time.monotonic() + 30
    while len(seen) < expected and time.monotonic() < deadline:
        for fetcher in fetchers:
            got = fetcher.fetch()
            if got.batch is not None:
                seen.update(int(r.value.split(b",")[0].split(b":")[1]) for r in got.batch.records())
    for fetcher in fetchers:
        fetcher.close()
    return seen


def run_demo(*, records: int = 2000, data_dir: Path | None = None) -> int:
    with tempfile.TemporaryDirectory(prefix="streamplane-demo-") as tmp:
        folder = data_dir or Path(tmp)
        _say(f"[1/6] starting the local stack (coordinator on the embedded store in {folder}, 2 local clusters)")
        with LocalStack(data_dir=folder, clusters=2, port=0) as stack:
            clusters = {c.name: c.bootstrap_servers for c in stack.local}
            for name, bootstrap in clusters.items():
                _say(f"      kafka.{name}={bootstrap}")
            _say(f"      coordinator={stack.coordinator_address}")
            with CoordinatorClient(stack.coordinator_address, actor="demo") as client:
                return _pipeline(client, clusters, records)


def _pipeline(client: CoordinatorClient, clusters: dict[str, str], records: int) -> int:
    if STREAM not in {s.name for s in client.list_streams()}:
        client.create_stream(STREAM, partitions=4, cluster="local-a")
    lane = _realtime(client.describe_stream(STREAM))
    g1 = lane.generations[-1]
    _say(f"[2/6] stream {STREAM}: realtime lane active on {g1.cluster} as {g1.topic} ({g1.partitions} partitions)")

    half = records // 2
    with Producer(client.target, **{"linger.ms": 20}) as producer:
        for i in range(half):
            producer.produce(STREAM, b'{"id":%d,"msg":"hello from the demo"}' % i, key=b"k%d" % (i % 8))
        if producer.flush():
            raise RuntimeError("records were not acknowledged")
        got1 = _read(clusters[g1.cluster], g1.topic, g1.partitions, half)
        _say(f"[3/6] produced {half} records to g{g1.number} and read {len(got1)} back (native decoder)")

        target = next(name for name in clusters if name != g1.cluster)
        done = client.failover(STREAM, "realtime", target, reason="demo: move traffic off " + g1.cluster)
        g2 = done.current
        _say(
            f"[4/6] failed over realtime to {target}: g{done.previous.number} is draining, "
            f"g{g2.number} is active as {g2.topic}"
        )
        deadline = time.monotonic() + 10
        while producer.route(STREAM).generation != g2.number and time.monotonic() < deadline:
            time.sleep(0.01)  # the producer follows the failover through the event log
        for i in range(half, records):
            producer.produce(STREAM, b'{"id":%d,"msg":"hello from the demo"}' % i, key=b"k%d" % (i % 8))
        if producer.flush():
            raise RuntimeError("records were not acknowledged")
    got2 = _read(clusters[g2.cluster], g2.topic, g2.partitions, records - half)
    _say(f"[5/6] the producer switched by itself: {records - half} records went to g{g2.number}, read {len(got2)} back")

    _say("[6/6] the event log:")
    for event in client.watch_topology("", idle_timeout_s=1.0):
        _say(f"      {event.version}  {describe_event(event)}")
    missing = set(range(records)) - (got1 | got2)
    ok = not missing
    _say(
        f"summary: {records} produced, {len(got1 | got2)} consumed across 2 generations on 2 clusters, "
        f"{len(missing)} missing -> {'OK' if ok else 'FAILED'}"
    )
    return 0 if ok else 1


def _realtime(stream: pb.Stream) -> pb.Lane:
    return next(lane for lane in stream.lanes if lane.name == "realtime")


if __name__ == "__main__":
    sys.exit(run_demo())
