"""The main job on one machine: start the local stack, then run a short pipeline through a failover.

It creates a stream, produces records to its active generation, consumes them back, fails the stream over
to the second local cluster, produces and consumes again across both generations, and prints what happened,
including the event log. Producing and consuming use confluent-kafka on the topics the coordinator resolves,
until the streamplane Producer and Consumer take over that part.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition

from streamplane.cli.main import describe_event
from streamplane.client.coordinator import CoordinatorClient
from streamplane.devstack.stack import LocalStack
from streamplane.v1 import topology_pb2 as pb

STREAM = "demo-logs"


def _say(text: str) -> None:
    print(text, flush=True)


def _produce(bootstrap: str, topic: str, partitions: int, start: int, count: int) -> None:
    producer = Producer(
        {"bootstrap.servers": bootstrap, "compression.type": "zstd", "linger.ms": 20, "enable.idempotence": True}
    )
    for i in range(start, start + count):
        producer.produce(topic, value=b'{"id":%d,"msg":"hello from the demo"}' % i, key=b"k%d" % (i % partitions))
        producer.poll(0)
    left = producer.flush(30)
    if left:
        raise RuntimeError(f"{left} record(s) not acknowledged by {topic}")


def _consume(bootstrap: str, topic: str, partitions: int, expected: int) -> set[int]:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "demo", "enable.auto.commit": False, "fetch.queue.backoff.ms": 10}
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    seen: set[int] = set()
    deadline = time.monotonic() + 30
    while len(seen) < expected and time.monotonic() < deadline:
        for msg in consumer.consume(1000, 0.5):
            if msg.error() is None:
                seen.add(int(msg.value().split(b",")[0].split(b":")[1]))
    consumer.close()
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
    names = {s.name for s in client.list_streams()}
    if STREAM not in names:
        client.create_stream(STREAM, partitions=4, cluster="local-a")
    lane = _realtime(client.describe_stream(STREAM))
    g1 = lane.generations[-1]
    _say(f"[2/6] stream {STREAM}: realtime lane active on {g1.cluster} as {g1.topic} ({g1.partitions} partitions)")

    half = records // 2
    _produce(clusters[g1.cluster], g1.topic, g1.partitions, 0, half)
    got1 = _consume(clusters[g1.cluster], g1.topic, g1.partitions, half)
    _say(f"[3/6] produced {half} records to g{g1.number} and consumed {len(got1)} back")

    target = next(name for name in clusters if name != g1.cluster)
    done = client.failover(STREAM, "realtime", target, reason="demo: move traffic off " + g1.cluster)
    g2 = done.current
    _say(
        f"[4/6] failed over realtime to {target}: g{done.previous.number} is draining, "
        f"g{g2.number} is active as {g2.topic}"
    )

    _produce(clusters[g2.cluster], g2.topic, g2.partitions, half, records - half)
    got2 = _consume(clusters[g2.cluster], g2.topic, g2.partitions, records - half)
    _say(f"[5/6] produced {records - half} records to g{g2.number} and consumed {len(got2)} back")

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
