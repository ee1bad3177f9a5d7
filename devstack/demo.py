"""The main job on one machine: start the local stack, then run a short pipeline through a failover.

It creates a stream, starts a consumer group member (the streamplane Consumer, reading straight from Kafka
through the native decoder, handlers on 4 threads), produces records with the streamplane Producer, fails
the stream over to the second local cluster while both keep going, and shows the old generation sealed and
drained, a malformed record rejected to the dlq lane, the group's lag and the event log.
"""

from __future__ import annotations

import json
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from streamplane import model
from streamplane.client import Consumer, CoordinatorClient, Message, Producer
from streamplane.devstack.stack import LocalStack
from streamplane.model import DRAINED, Generation, Lane, Stream

STREAM = "demo-logs"
GROUP = "demo-readers"


def _say(text: str) -> None:
    print(text, flush=True)


class _Handler:
    """Counts the ids of well-formed records; rejects the others to the dlq lane."""

    def __init__(self) -> None:
        self.ids: set[int] = set()
        self.lock = threading.Lock()

    def __call__(self, msg: Message) -> None:
        try:
            record = json.loads(msg.value or b"")
        except ValueError:
            msg.reject("not JSON")
            return
        with self.lock:
            self.ids.add(record["id"])


def _wait(condition, seconds: float = 30) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def run_demo(*, records: int = 2000, data_dir: Path | None = None) -> int:
    with tempfile.TemporaryDirectory(prefix="streamplane-demo-") as tmp:
        folder = data_dir or Path(tmp)
        _say(f"[1/6] starting the local stack (coordinator on the embedded store in {folder}, 2 local clusters)")
        with LocalStack(data_dir=folder, clusters=2, port=0) as stack:
            clusters = {c.name: c.bootstrap_servers for c in stack.local}
            for name, bootstrap in clusters.items():
                _say(f"      kafka.{name}={bootstrap}")
            _say(f"      coordinator={stack.coordinator_address}")
            with CoordinatorClient(stack.coordinator_address) as client:
                return _pipeline(client, clusters, records)


def _pipeline(client: CoordinatorClient, clusters: dict[str, str], records: int) -> int:
    if STREAM not in {s.name for s in client.list_streams()}:
        client.create_stream(STREAM, partitions=4, cluster="local-a")
    g1 = _realtime(client.describe_stream(STREAM)).active
    _say(f"[2/6] stream {STREAM}: realtime lane active on {g1.cluster} as {g1.topic} ({g1.partitions} partitions)")

    handler, stop = _Handler(), threading.Event()
    consumer = Consumer(client.target, group=GROUP, stream=STREAM, concurrency=4)
    runner = threading.Thread(target=consumer.run, args=(handler,), kwargs={"stop": stop}, daemon=True)
    runner.start()
    half = records // 2
    try:
        settings: dict[str, Any] = {"linger.ms": 20}  # librdkafka's names
        with Producer(client.target, **settings) as producer:
            for i in range(half):
                producer.produce(STREAM, b'{"id":%d,"msg":"hello from the demo"}' % i, key=b"k%d" % (i % 8))
            if producer.flush():
                raise RuntimeError("records were not acknowledged")
            _wait(lambda: len(handler.ids) >= half)
            _say(f"[3/6] produced {half} records to g{g1.number}; group {GROUP} processed {len(handler.ids)}")

            target = next(name for name in clusters if name != g1.cluster)
            done = client.failover(STREAM, "realtime", target, reason="demo: move traffic off " + g1.cluster)
            g2 = done.current
            _say(
                f"[4/6] failed over realtime to {target}: g{done.previous.number} is draining, "
                f"g{g2.number} is active as {g2.topic}"
            )
            _wait(lambda: producer.route(STREAM).generation == g2.number, 10)  # it follows the event log
            for i in range(half, records):
                producer.produce(STREAM, b'{"id":%d,"msg":"hello from the demo"}' % i, key=b"k%d" % (i % 8))
            producer.produce(STREAM, b"this is not JSON", key=b"bad")
            if producer.flush():
                raise RuntimeError("records were not acknowledged")
        _wait(lambda: len(handler.ids) >= records)
        drained = _wait(lambda: _generation(client, g1.number).state == DRAINED)
        sealed = _generation(client, g1.number)
        _wait(lambda: _rejects(client) >= 1, 10)  # marked once its copy is in the dlq lane
        rejects = _rejects(client)
        lag = client.lag(GROUP)
        _say(
            f"[5/6] the producer switched by itself; {GROUP} processed {len(handler.ids)} records across "
            f"g{g1.number} and g{g2.number}; g{g1.number} sealed at end offsets {list(sealed.end_offsets)} and "
            f"{'drained' if drained else 'not drained'}; {rejects} malformed record(s) rejected to the dlq lane; "
            f"offset lag {lag.offset_lag}"
        )
    finally:
        stop.set()
        runner.join(10)
        consumer.close()

    _say("[6/6] the topology's event log (the group's churn is in its own: streamplane group events):")
    for event in client.watch_topology("", follow=False):
        _say(f"      {event.version}  {model.describe_event(event)}")
    missing = set(range(records)) - handler.ids
    ok = not missing and drained and rejects == 1 and lag.offset_lag == 0
    _say(
        f"summary: {records} produced, {len(handler.ids)} consumed across 2 generations on 2 clusters, "
        f"{len(missing)} missing -> {'OK' if ok else 'FAILED'}"
    )
    return 0 if ok else 1


def _rejects(client: CoordinatorClient) -> int:
    """Records the group marked rejected, over every partition it has leases on."""
    leases = [x.lease_id for x in client.describe_group(GROUP).leases]
    return sum(client.progress(GROUP, lid).rejects for lid in leases)


def _generation(client: CoordinatorClient, number: int) -> Generation:
    found = _realtime(client.describe_stream(STREAM)).generation(number)
    if found is None:
        raise RuntimeError(f"{STREAM}/realtime has no generation {number}")
    return found


def _realtime(stream: Stream) -> Lane:
    return stream.require_lane("realtime")


if __name__ == "__main__":
    sys.exit(run_demo())
