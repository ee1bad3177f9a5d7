"""A worker process for benchmarks/scale.py: a streamplane Consumer (`run` with a no-op handler, or
`run_batches`) or a confluent-kafka consumer (`poll()` or `consume(num_messages=1000)`) on the same topic.
Prints {"pid": ...} once started; answers "count" on stdin with the records processed so far, its
monotonic clock when it read that count (the same clock on every process of the machine, so a busy worker's
late answer does not skew a rate) and, for a streamplane worker, how many leases it holds (null for
confluent-kafka's, which is assigned every partition at once); "stop" ends it."""

from __future__ import annotations

import json
import os
import sys
import threading
import time

from streamplane.client import Consumer
from streamplane.log import configure_logging


def main() -> None:
    kind, target, group, name = sys.argv[1:5]
    configure_logging("warning")
    count = [0]
    stop = threading.Event()
    consumer: Consumer | None = None

    def commands() -> None:
        for line in sys.stdin:
            if line.strip() == "count":
                leases = len(consumer.leases) if consumer is not None else None
                print(json.dumps({"count": count[0], "t": time.monotonic(), "leases": leases}), flush=True)
            elif line.strip() == "stop":
                stop.set()
                return
        stop.set()

    threading.Thread(target=commands, daemon=True).start()
    print(json.dumps({"pid": os.getpid()}), flush=True)
    if kind == "streamplane":
        consumer = Consumer(target, group=group, stream=name, concurrency=4)
        lock = threading.Lock()

        def handle(msg: object) -> None:
            with lock:
                count[0] += 1

        consumer.run(handle, stop=stop)
        consumer.close()
    elif kind == "streamplane-batches":
        consumer = Consumer(target, group=group, stream=name, concurrency=4)
        lock = threading.Lock()

        def handle_batch(batch: object) -> None:
            with lock:
                count[0] += batch.num_rows  # type: ignore[attr-defined]

        consumer.run_batches(handle_batch, stop=stop)
        consumer.close()
    else:
        from confluent_kafka import Consumer as KafkaConsumer

        c = KafkaConsumer({"bootstrap.servers": target, "group.id": group, "auto.offset.reset": "earliest"})
        c.subscribe([name])
        while not stop.is_set():
            if kind == "confluent-consume":
                count[0] += sum(1 for m in c.consume(num_messages=1000, timeout=0.1) if not m.error())
                continue
            msg = c.poll(0.1)
            if msg is not None and not msg.error():
                count[0] += 1
        c.close()


if __name__ == "__main__":
    main()
