"""Decoding zstd record batches: streamplane's native decoder against confluent-kafka and the zstd floor.

The same batches serve every contender: librdkafka (confluent-kafka's Producer, zstd) writes 100-byte
JSON-like records to a local cluster; our Fetch client reads the raw record sets back. Then:
  (a) native decode to columns (and a zero-copy pyarrow.RecordBatch), CRC32C checked;
  (b) native decode to Python records, reading each record's value (as (d) reads message.value());
  (c) the pure-Python reference decoder (on a sample: it is slow by design);
  (d) a confluent-kafka Consumer poll loop reading the same topic from the cluster, tuned
      (fetch.queue.backoff.ms=10, large fetch and queue sizes); its batch consume() is shown for context;
  (e) plain zstd decompression of the same batches: the floor.
The last line is `native_columnar_vs_confluent=<ratio of records/s> native_columnar_vs_zstd_floor=<ratio of
times>`. Goals: >= 10x, <= 2x, and (b) >= 2x confluent-kafka. `--quick` runs in under 45 s.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
import uuid
from pathlib import Path

import zstandard
from confluent_kafka import Consumer, Producer, TopicPartition

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _local import local_cluster

from streamplane.client.kafka import EARLIEST, LATEST, KafkaConnection
from streamplane.log import configure_logging
from streamplane.native import decode

LEVELS = ["debug", "info", "warn", "error"]


def make_value(i: int, rng: random.Random) -> bytes:
    """A ~100-byte JSON-like log record."""
    body = {
        "ts": 1_700_000_000_000 + i,
        "level": rng.choice(LEVELS),
        "svc": f"api-{i % 17}",
        "msg": "request served",
        "id": i,
        "ms": rng.randrange(1000),
    }
    raw = json.dumps(body, separators=(",", ":")).encode()
    return raw + b" " * max(0, 100 - len(raw))


def produce(bootstrap: str, topic: str, partitions: int, records: int) -> float:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "compression.type": "zstd",
            "linger.ms": 50,
            "batch.size": 1_000_000,
            "batch.num.messages": 100_000,
            "queue.buffering.max.messages": 2_000_000,
            "queue.buffering.max.kbytes": 2_000_000,
        }
    )
    rng = random.Random(1)
    started = time.perf_counter()
    for i in range(records):
        producer.produce(topic, make_value(i, rng), partition=i % partitions)
        if i % 50_000 == 0:
            producer.poll(0)
    if producer.flush(120):
        raise SystemExit("records were not acknowledged")
    return time.perf_counter() - started


FETCH_BYTES = 1 << 20  # librdkafka's default max.partition.fetch.bytes


def fetch_raw(bootstrap: str, topic: str, partitions: int) -> list[bytes]:
    """The topic's batches as record sets of up to 1 MiB per partition, as a real broker's Fetch returns them.

    The local cluster answers each Fetch with one batch, so consecutive batches of a partition are joined
    back into fetch-sized record sets (their bytes are untouched).
    """
    sets = []
    with KafkaConnection.connect_any(bootstrap) as conn:
        for p in range(partitions):
            offset = conn.list_offsets(topic, [p], EARLIEST)[p]
            end = conn.list_offsets(topic, [p], LATEST)[p]
            pending = b""
            while offset < end:
                (part,) = conn.fetch(topic, {p: offset}, partition_max_bytes=16 << 20)
                raw = bytes(part.records)
                if len(pending) + len(raw) > FETCH_BYTES:
                    sets.append(pending)
                    pending = b""
                pending += raw
                offset = decode(raw).next_offset
            if pending:
                sets.append(pending)
    return sets


def batch_payloads(sets: list[bytes]) -> list[bytes]:
    """The records section of every batch (what zstd inflates)."""
    payloads = []
    for s in sets:
        view = memoryview(s)
        for info in decode(s).batches:
            payloads.append(bytes(view[info.position + 61 : info.position + 61 + info.compressed_size]))
    return payloads


def confluent_loop(bootstrap: str, topic: str, partitions: int, records: int, *, batched: bool) -> float:
    """Seconds for a confluent-kafka Consumer to hand every record's value to Python.

    The poll loop (`poll()` per message) is the peer the issue names; `batched` uses `consume(10000)`,
    where librdkafka's threads inflate while Python takes whole lists, for context.
    """
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": uuid.uuid4().hex,
            "enable.auto.commit": False,
            "fetch.queue.backoff.ms": 10,
            "fetch.max.bytes": 64 << 20,
            "max.partition.fetch.bytes": 16 << 20,
            "queued.max.messages.kbytes": 1 << 20,
            "queued.min.messages": 1_000_000,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    seen = 0
    started = time.perf_counter()
    while seen < records:
        messages = consumer.consume(10_000, 1.0) if batched else [consumer.poll(1.0)]
        for message in messages:
            if message is not None and message.error() is None:
                message.value()
                seen += 1
    elapsed = time.perf_counter() - started
    consumer.close()
    return elapsed


def timed(fn, repeat: int = 3) -> float:
    """Best of `repeat` runs, in seconds (the machines are noisy; the best run is the least disturbed)."""
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - started)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="200k records instead of 1M (under 45 s)")
    args = parser.parse_args()
    configure_logging("warning")
    records = 200_000 if args.quick else 1_000_000
    partitions = 4 if args.quick else 16  # the local cluster keeps about 5 MiB of batches per partition
    topic = "bench.decode"
    with local_cluster() as (bootstrap, control):
        control.create_topic(topic, partitions)
        produce_s = produce(bootstrap, topic, partitions, records)
        print(f"produced {records:,} records of ~100 bytes with zstd in {produce_s:.1f} s", flush=True)
        sets = fetch_raw(bootstrap, topic, partitions)
        total = sum(decode(s).count for s in sets)
        compressed = sum(len(s) for s in sets)
        print(
            f"fetched {len(sets)} record sets of up to 1 MiB, {compressed / 2**20:.1f} MiB compressed, "
            f"{total:,} records",
            flush=True,
        )
        if total != records:
            raise SystemExit(f"fetched {total} records, expected {records}")
        confluent_s = confluent_loop(bootstrap, topic, partitions, records, batched=False)
        confluent_batched_s = confluent_loop(bootstrap, topic, partitions, records, batched=True)

    payloads = batch_payloads(sets)
    dctx = zstandard.ZstdDecompressor()
    zstd_s = timed(lambda: [dctx.decompress(p, max_output_size=64 << 20) for p in payloads])
    columnar_s = timed(lambda: [decode(s).to_arrow() for s in sets])
    columnar_nocrc_s = timed(lambda: [decode(s, verify_crc=False) for s in sets])

    def to_records() -> None:
        for s in sets:
            for record in decode(s).records():
                record.value  # as the confluent loop reads message.value()  # noqa: B018

    records_s = timed(to_records, repeat=2)
    sample = sets[: max(1, len(sets) // (20 if args.quick else 50))]
    sample_records = sum(decode(s).count for s in sample)
    python_s = timed(lambda: [list(decode(s, impl="python").records()) for s in sample], repeat=1)

    def rate(seconds: float, n: int = records) -> float:
        return n / seconds

    print(
        f"(a) native decode to columns + Arrow: {rate(columnar_s):14,.0f} records/s  ({columnar_s * 1000:.0f} ms; "
        f"without CRC32C {rate(columnar_nocrc_s):,.0f}/s)"
    )
    print(f"(b) native decode to Python records:  {rate(records_s):14,.0f} records/s  ({records_s * 1000:.0f} ms)")
    print(
        f"(c) pure-Python reference decoder:    {rate(python_s, sample_records):14,.0f} records/s  "
        f"(sample of {sample_records:,})"
    )
    print(
        f"(d) confluent-kafka Consumer poll():  {rate(confluent_s):14,.0f} records/s  ({confluent_s * 1000:.0f} ms, "
        "tuned, from the local cluster)"
    )
    print(
        f"    (for context: consume(10000) batches {rate(confluent_batched_s):,.0f} records/s; columnar is "
        f"{rate(columnar_s) / rate(confluent_batched_s):.1f}x that)"
    )
    print(f"(e) zstd decompression alone (floor): {rate(zstd_s):14,.0f} records/s  ({zstd_s * 1000:.0f} ms)")
    vs_confluent = rate(columnar_s) / rate(confluent_s)
    vs_floor = columnar_s / zstd_s
    print(
        f"goals: columnar {vs_confluent:.1f}x confluent (>= 10x); columnar {vs_floor:.2f}x the zstd time (<= 2x); "
        f"records {rate(records_s) / rate(confluent_s):.1f}x confluent (>= 2x)"
    )
    print(f"native_columnar_vs_confluent={vs_confluent:.2f} native_columnar_vs_zstd_floor={vs_floor:.2f}")


if __name__ == "__main__":
    main()
