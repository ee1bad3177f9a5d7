"""End to end through the client: our Producer -> a local cluster -> our Consumer with a trivial handler, side by
side with confluent-kafka's own Producer and group Consumer on the same records and partition counts.

Each round writes the same ~100-byte records (zstd, the same batching settings) once through our Producer to a
stream and once through confluent-kafka's Producer to a plain topic, then reads each back: ours with
`Consumer.run(handler)`, theirs with a subscribed group Consumer's `poll()` loop calling the same handler
(tuned fetch settings; its batch `consume()` is shown for context). Consumption is timed from the first record
to the last, so group joins do not count on either side. Rounds alternate who goes first, and the ratios
compare medians over the rounds: this machine's noise makes single runs swing by 2x and more, both ways.

The records go to librdkafka's mock cluster (the default, one broker), or with `--engine kafka` to a real
Apache Kafka broker from Maven Central (KRaft, its own JVM), what users run.

The last line is `consume_vs_confluent=<ratio of records/s> produce_vs_confluent=<ratio of records/s>
produce_headers_vs_confluent=<ratio of records/s>` (the last with two headers on every record, as observability
records carry). Goals: consume >= 1.0 (our fetch path is not slower than librdkafka's), produce >= 0.9 with and
without headers. `--quick` runs in under 60 s.
"""

from __future__ import annotations

import argparse
import itertools
import os
import random
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

from confluent_kafka import Consumer as KafkaConsumer
from confluent_kafka import Producer as KafkaProducer

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _local import coordinator_process, engine
from decode import make_value

from streamplane.client import Consumer, CoordinatorClient, Message, Producer
from streamplane.log import configure_logging

PRODUCER_CONFIG = {"compression.type": "zstd", "linger.ms": 10, "batch.size": 1_000_000, "enable.idempotence": True}
Headers = list[tuple[str, bytes]]
HEADERS: Headers = [("service", b"api"), ("region", b"us-east-1")]
"""What an observability record typically carries besides its value: produced with and without them."""


def produce_ours(address: str, stream: str, values: list[bytes], headers: Headers | None = None) -> float:
    with Producer(address, **PRODUCER_CONFIG) as producer:
        # warm, as theirs is: the route looked up, connected, its producer id had (one record, delivered)
        producer.produce(stream, values[0])
        producer.flush(30)
        started = time.perf_counter()
        for value in values:
            producer.produce(stream, value, headers=headers)
        if producer.flush(120):
            raise SystemExit("our producer left records unacknowledged")
        return time.perf_counter() - started


def produce_confluent(bootstrap: str, topic: str, values: list[bytes], headers: Headers | None = None) -> float:
    producer = KafkaProducer({"bootstrap.servers": bootstrap, **PRODUCER_CONFIG})
    producer.produce(topic, values[0])  # warm, as ours is: connected, its producer id had
    producer.flush(30)
    extra = {"headers": headers} if headers else {}
    started = time.perf_counter()
    for i, value in enumerate(values):
        while True:
            try:
                producer.produce(topic, value, **extra)
                break
            except BufferError:
                producer.poll(0.01)
        if i % 10_000 == 0:
            producer.poll(0)
    if producer.flush(120):
        raise SystemExit("confluent-kafka's producer left records unacknowledged")
    return time.perf_counter() - started


class Counted:
    """The trivial handler: reads the value, counts, notes when the first and the last record came."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.count = itertools.count(1)
        self.first = 0.0
        self.last = 0.0
        self.done = threading.Event()

    def __call__(self, value: bytes | None) -> None:
        n = next(self.count)
        if n == 1:
            self.first = time.perf_counter()
        if n == self.total:
            self.last = time.perf_counter()
            self.done.set()

    def seconds(self) -> float:
        return self.last - self.first


def consume_ours(address: str, stream: str, total: int) -> float:
    counted = Counted(total)

    def handler(msg: Message) -> None:
        counted(msg.value)

    consumer = Consumer(
        address,
        group=f"bench-{uuid.uuid4().hex[:6]}",
        stream=stream,
        concurrency=int(os.environ.get("BENCH_CONCURRENCY", "2")),
    )
    runner = threading.Thread(target=consumer.run, args=(handler,), kwargs={"stop": counted.done}, daemon=True)
    runner.start()
    if not counted.done.wait(120):
        raise SystemExit("our consumer did not read every record")
    consumer.close()
    return counted.seconds()


def confluent_consumer(bootstrap: str) -> KafkaConsumer:
    """confluent-kafka's group consumer in a new group, tuned to read fast (deep queues, big fetches)."""
    return KafkaConsumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{uuid.uuid4().hex[:6]}",
            "auto.offset.reset": "earliest",
            "fetch.queue.backoff.ms": 10,
            "fetch.max.bytes": 64 << 20,
            "max.partition.fetch.bytes": 16 << 20,
            "queued.max.messages.kbytes": 1 << 20,
            "queued.min.messages": 1_000_000,
        }
    )


def consume_confluent(bootstrap: str, topic: str, total: int, *, batched: bool) -> float:
    counted = Counted(total)
    consumer = confluent_consumer(bootstrap)
    consumer.subscribe([topic])
    deadline = time.monotonic() + 120
    while not counted.done.is_set():
        if time.monotonic() > deadline:
            raise SystemExit("confluent-kafka's consumer did not read every record")
        messages = consumer.consume(1000, 0.5) if batched else [consumer.poll(0.5)]
        for message in messages:
            if message is not None and message.error() is None:
                counted(message.value())
    consumer.close()
    return counted.seconds()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer records and rounds (under 45 s)")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--engine", choices=["mock", "kafka"], default="mock", help="the mock cluster or a real broker")
    args = parser.parse_args()
    configure_logging("warning")
    per_partition = 40_000 if args.quick else 100_000  # the local cluster keeps ~5 MiB of batches per partition
    total = per_partition * args.partitions
    rounds = 5 if args.quick else 7
    rng = random.Random(7)
    values = [make_value(i, rng) for i in range(total)]
    results: dict[str, list[float]] = {}

    def note(name: str, seconds: float) -> None:
        results.setdefault(name, []).append(total / seconds)
        print(f"  {name:<34} {total / seconds:>12,.0f} records/s", flush=True)

    with (
        tempfile.TemporaryDirectory() as tmp,
        engine(args.engine, brokers=1) as kafka,
        coordinator_process(tmp, kafka.control) as address,
        CoordinatorClient(address) as client,
    ):
        bootstrap = kafka.bootstrap
        kafka.register(client)
        print(
            f"{total:,} records of ~100 bytes, {args.partitions} partitions, {rounds} round(s), engine {args.engine}",
            flush=True,
        )
        for r in range(rounds):
            print(f"round {r + 1}", flush=True)
            stream, topic = f"bench{r}", f"confluent-{r}"
            client.create_stream(stream, args.partitions, cluster="local")
            kafka.create_topic(topic, args.partitions)
            ours_first = r % 2 == 0  # alternate who goes first: the machine is noisy
            for who in ("ours", "theirs") if ours_first else ("theirs", "ours"):
                if who == "ours":
                    note("produce: streamplane Producer", produce_ours(address, stream, values))
                else:
                    note("produce: confluent-kafka Producer", produce_confluent(bootstrap, topic, values))
            client.create_stream(f"{stream}h", args.partitions, cluster="local")
            kafka.create_topic(f"{topic}h", args.partitions)
            for who in ("ours", "theirs") if ours_first else ("theirs", "ours"):
                if who == "ours":
                    seconds = produce_ours(address, f"{stream}h", values, HEADERS)
                    note("produce with headers: streamplane", seconds)
                else:
                    seconds = produce_confluent(bootstrap, f"{topic}h", values, HEADERS)
                    note("produce with headers: confluent-kafka", seconds)
            for who in ("ours", "theirs") if ours_first else ("theirs", "ours"):
                if who == "ours":
                    note("consume: streamplane Consumer.run", consume_ours(address, stream, total))
                else:
                    seconds = consume_confluent(bootstrap, topic, total, batched=False)
                    note("consume: confluent-kafka poll()", seconds)
            if r == 0:
                batched = consume_confluent(bootstrap, topic, total, batched=True)
                note("consume: confluent consume(1000)", batched)
    median = {name: statistics.median(rates) for name, rates in results.items()}
    best = {name: max(rates) for name, rates in results.items()}
    for name in median:
        print(f"  {name:<34} median {median[name]:>12,.0f}   best {best[name]:>12,.0f} records/s")
    consume = median["consume: streamplane Consumer.run"] / median["consume: confluent-kafka poll()"]
    produce = median["produce: streamplane Producer"] / median["produce: confluent-kafka Producer"]
    headers = median["produce with headers: streamplane"] / median["produce with headers: confluent-kafka"]
    print(f"medians of {rounds} rounds (goals: consume >= 1.0x, produce >= 0.9x, with headers too)")
    print(
        f"consume_vs_confluent={consume:.2f} produce_vs_confluent={produce:.2f} "
        f"produce_headers_vs_confluent={headers:.2f}"
    )


if __name__ == "__main__":
    main()
