"""The Consumer against a real coordinator and local cluster: both APIs, retries, rejects to the dlq lane,
draining a failed-over generation, bombs, limits and bad input."""

from __future__ import annotations

import threading
import time
from collections import Counter

import pytest
from confluent_kafka import Producer as KafkaProducer

from streamplane import model
from streamplane.client import Consumer, CoordinatorClient, Message, OutcomeError, PartitionFetcher, Producer
from streamplane.client.consumer import ATTEMPT_HEADER, COPY_HEADER, ORIGIN_HEADERS, REASON_HEADER
from streamplane.errors import InvalidArgumentError, NotFoundError, UnavailableError
from tests.helpers import free_port, register_local_clusters, wait_until


@pytest.fixture
def address(coordinator, local_cluster) -> str:
    bootstrap, control = local_cluster
    register_local_clusters(coordinator.address, bootstrap, control.endpoint, ("east", "west"))
    return coordinator.address


def produce(address: str, stream: str, values: list[bytes], lane: str = "realtime") -> None:
    with Producer(address, **{"linger.ms": 5}) as producer:
        for v in values:
            producer.produce(stream, v, key=v, lane=lane)
        assert producer.flush() == 0


def lag(address: str, group: str) -> tuple[int, int]:
    with CoordinatorClient(address) as client:
        got = client.lag(group)
    return got.offset_lag, len(got.partitions)


def read_lane(bootstrap: str, topic: str, partitions: int) -> list:
    out = []
    for p in range(partitions):
        f = PartitionFetcher(bootstrap, topic, p)
        while True:
            got = f.fetch()
            if got.batch is None:
                break
            out += list(got.batch.records())
        f.close()
    return out


def test_handler_api_processes_everything_and_commits(address: str) -> None:
    with CoordinatorClient(address) as client:
        client.create_stream("c-orders", 4, cluster="east")
    values = [b"o%d" % i for i in range(2000)]
    produce(address, "c-orders", values)
    seen: Counter[bytes] = Counter()
    lock = threading.Lock()

    def handle(msg: Message) -> None:
        with lock:
            seen[msg.value] += 1

    stop = threading.Event()
    with Consumer(address, group="c-g1", stream="c-orders", concurrency=4) as consumer:
        runner = threading.Thread(target=consumer.run, args=(handle,), kwargs={"stop": stop})
        runner.start()
        wait_until(lambda: len(seen) == 2000, timeout=20)
        wait_until(lambda: lag(address, "c-g1") == (0, 4), timeout=5)
        stop.set()
        runner.join()
    assert set(seen) == set(values)


@pytest.mark.parametrize("ranges_a_call", [100_000, 3])
def test_leases_granted_together_read_what_was_done_in_few_calls_and_skip_it(
    address: str, local_cluster, monkeypatch, ranges_a_call: int
) -> None:
    """A worker granted many leases whose previous holders finished records above their low watermarks reads
    their progress in GetProgressBatch calls, as many leases a call as fit (one call for all 8; with room for 3
    ranges a call, two leases a call), not a call a lease, and hands out only what was not done."""
    from streamplane.client.consumer import membership

    monkeypatch.setattr(membership, "PROGRESS_RANGES", ranges_a_call)
    partitions, stream, group = 8, f"c-taken-{ranges_a_call}", f"c-g9-{ranges_a_call}"
    with CoordinatorClient(address) as client:
        client.create_stream(stream, partitions, cluster="east")
        for p in range(partitions):  # as a previous holder left it: 3 to 6 done, 0 to 2 and 6 to 9 not
            body = model.Commit(acked=[(3, 6)], high_watermark=10)
            client.commit(group, model.LeaseCommit(f"{stream}/realtime/g1/p{p}", 0, body))
        topic = client.describe_stream(stream).require_lane("realtime").active.topic
    producer = KafkaProducer({"bootstrap.servers": local_cluster[0]})
    for p in range(partitions):  # offset i of partition p holds "p-i"
        for i in range(10):
            producer.produce(topic, b"%d-%d" % (p, i), partition=p)
    assert producer.flush(10) == 0
    calls: Counter[str] = Counter()
    for name in ("progress", "progress_batch"):
        real = getattr(CoordinatorClient, name)

        def counted(self, *args, _real=real, _name=name, **kwargs):
            calls[_name] += 1
            return _real(self, *args, **kwargs)

        monkeypatch.setattr(CoordinatorClient, name, counted)
    seen: Counter[bytes] = Counter()
    with Consumer(address, group=group, stream=stream) as consumer:
        runner = threading.Thread(target=consumer.run, args=(lambda m: seen.update([m.value]),), daemon=True)
        runner.start()
        wait_until(lambda: lag(address, group) == (0, partitions), timeout=20, what=lambda: f"{dict(calls)} {seen}")
        consumer.close()
        runner.join(10)
    by_partition = {int(v.split(b"-")[0]) for v in seen}
    assert by_partition == set(range(partitions)), "every lease is read"
    offsets_seen = sorted({int(v.split(b"-")[1]) for v in seen})
    assert offsets_seen == [0, 1, 2, 6, 7, 8, 9] and max(seen.values()) == 1, "what was done is skipped"
    if ranges_a_call == 3:
        assert calls["progress_batch"] >= partitions // 2, dict(calls)
    else:
        assert calls["progress"] == 0 and 1 <= calls["progress_batch"] <= 2, dict(calls)


def test_a_call_for_many_leases_progress_holds_those_that_fit_in_its_ranges(address: str) -> None:
    with CoordinatorClient(address) as client:
        client.create_stream("c-paged", 3, cluster="east")
        leases = [f"c-paged/realtime/g1/p{p}" for p in range(3)]
        for lid in leases:  # three done ranges above the low watermark each
            client.commit("c-g10", model.LeaseCommit(lid, 0, model.Commit(acked=[(1, 2), (3, 4), (5, 6)])))
        whole = [client.progress("c-g10", lid) for lid in leases]
        assert all(p.done == ((1, 2), (3, 4), (5, 6)) for p in whole)
        assert client.progress_batch("c-g10", leases) == whole
        assert client.progress_batch("c-g10", leases, max_ranges=4) == whole[:1], "the second's 3 do not fit in 1"
        assert client.progress_batch("c-g10", leases[1:], max_ranges=4) == whole[1:2], "asked again from it"
        assert client.progress_batch("c-g10", leases, max_ranges=2)[0].done == ((1, 2), (3, 4)), "the first is cut"
        with pytest.raises(InvalidArgumentError, match="lease_id"):
            client.progress_batch("c-g10", [leases[0], "c-paged/realtime/gX/p0"])


def test_iterator_api_with_retry_and_reject_to_the_dlq(address: str, local_cluster) -> None:
    bootstrap, _ = local_cluster
    with CoordinatorClient(address) as client:
        client.create_stream("c-mixed", 1, cluster="east")
        client.configure_group("c-g2", "realtime", 2)
    produce(address, "c-mixed", [b"ok1", b"flaky", b"poison", b"bad", b"ok2"])
    attempts: Counter[bytes] = Counter()
    with Consumer(address, group="c-g2", stream="c-mixed", retry_backoff_s=0.1) as consumer:
        for msg in consumer:
            attempts[msg.value] += 1
            if msg.value == b"flaky" and msg.attempt == 1:
                msg.retry("try again")
            elif msg.value == b"poison":
                msg.retry(RuntimeError("always fails"))
            elif msg.value == b"bad":
                msg.reject("schema violation")
                msg.reject("schema violation")  # the same outcome again: no-op
                with pytest.raises(OutcomeError, match="already rejected"):
                    msg.ack()
            else:
                msg.ack()
                msg.ack()  # idempotent
            if attempts[b"flaky"] == 2 and attempts[b"poison"] == 2:
                break
        wait_until(lambda: lag(address, "c-g2")[0] == 0, timeout=10)
    assert attempts == {b"ok1": 1, b"flaky": 2, b"poison": 2, b"bad": 1, b"ok2": 1}
    dlq = read_lane(bootstrap, "sp.c-mixed.dlq.g1", 1)
    by_value = {r.value: dict(r.headers) for r in dlq}
    assert set(by_value) == {b"poison", b"bad"}
    assert by_value[b"bad"][REASON_HEADER] == b"schema violation"
    assert b"max attempts reached; last error: RuntimeError: always fails" in by_value[b"poison"][REASON_HEADER]
    origin = [by_value[b"poison"][h] for h in ORIGIN_HEADERS]
    assert origin == [b"c-mixed", b"realtime", b"1", b"0", b"2"]
    assert (by_value[b"poison"][ATTEMPT_HEADER], by_value[b"poison"][COPY_HEADER]) == (b"2", b"1")
    assert (by_value[b"bad"][ATTEMPT_HEADER], by_value[b"bad"][COPY_HEADER]) == (b"1", b"1")
    assert len(dlq) == 2, "one copy per reject"
    with CoordinatorClient(address) as client:
        progress = client.progress("c-g2", "c-mixed/realtime/g1/p0")
    assert progress.low_watermark == 5 and progress.rejects == 2


def test_a_failed_over_generation_is_read_to_its_end_then_drained(address: str) -> None:
    with CoordinatorClient(address) as client:
        client.create_stream("c-move", 2, cluster="east")
    produce(address, "c-move", [b"old%d" % i for i in range(300)])
    seen: set[bytes] = set()
    stop = threading.Event()
    with Consumer(address, group="c-g3", stream="c-move") as consumer:
        runner = threading.Thread(target=consumer.run, args=(lambda m: seen.add(m.value),), kwargs={"stop": stop})
        runner.start()
        with CoordinatorClient(address) as client:
            client.failover("c-move", "realtime", "west")
        produce(address, "c-move", [b"new%d" % i for i in range(300)])

        def g1_state() -> int:
            with CoordinatorClient(address) as client:
                lane = next(x for x in client.describe_stream("c-move").lanes if x.name == "realtime")
            return lane.generations[0].state

        wait_until(lambda: g1_state() == model.DRAINED, timeout=20)
        wait_until(lambda: len(seen) == 600, timeout=10)
        wait_until(lambda: all("/g2/" in lease for lease in consumer.leases), timeout=10)
        stop.set()
        runner.join()


def test_a_zstd_bomb_is_a_rejected_batch_and_the_partition_keeps_flowing(address: str, local_cluster) -> None:
    from confluent_kafka import Producer as KafkaProducer

    bootstrap, _ = local_cluster
    with CoordinatorClient(address) as client:
        client.create_stream("c-bomb", 1, cluster="east")
    raw = KafkaProducer({"bootstrap.servers": bootstrap, "compression.type": "zstd", "message.max.bytes": 64 << 20})
    raw.produce("sp.c-bomb.realtime.g1", b"before")
    raw.flush(10)
    raw.produce("sp.c-bomb.realtime.g1", b"\0" * (32 << 20))  # 32 MiB of zeros: a few KB as zstd
    raw.flush(10)
    raw.produce("sp.c-bomb.realtime.g1", b"after")
    assert raw.flush(10) == 0
    got: list[bytes] = []
    with Consumer(address, group="c-g4", stream="c-bomb", max_decompressed=4 << 20, max_buffered_bytes=16 << 20) as c:
        for msg in c:
            got.append(msg.value)
            msg.ack()
            if len(got) == 2:
                break
        assert c.budget.peak_bytes <= 16 << 20
        wait_until(lambda: lag(address, "c-g4")[0] == 0, timeout=10)
    assert got == [b"before", b"after"]
    with CoordinatorClient(address) as client:
        progress = client.progress("c-g4", "c-bomb/realtime/g1/p0")
    assert progress.low_watermark == 3 and progress.rejects == 1


def test_bad_input_is_a_clear_error(address: str) -> None:
    with CoordinatorClient(address) as client:
        client.create_stream("c-bad", 1, cluster="east")
    with pytest.raises(NotFoundError, match="ghost"):
        Consumer(address, group="g", stream="ghost")
    with pytest.raises(NotFoundError, match="nolane"):
        Consumer(address, group="g", stream="c-bad", lanes=["nolane"])
    with pytest.raises(UnavailableError, match=r"127\.0\.0\.1:1"):
        Consumer("127.0.0.1:1", group="g", stream="c-bad")
    for key, value in [("concurrency", 0), ("max_in_flight", -1), ("max_decompressed", 1 << 40), ("ordering", "x")]:
        with pytest.raises(ValueError, match=key):
            Consumer(address, group="g", stream="c-bad", **{key: value})
    with pytest.raises(ValueError, match=r"security\.protocol"):
        Consumer(address, group="g", stream="c-bad", kafka_config={"security.protocol": "sasl_ssl"})


def test_metrics_are_served_when_asked(address: str) -> None:
    import urllib.request

    with CoordinatorClient(address) as client:
        client.create_stream("c-metrics", 1, cluster="east")
    produce(address, "c-metrics", [b"m%d" % i for i in range(20)])
    port = free_port()
    with Consumer(address, group="c-g5", stream="c-metrics", metrics_port=port) as consumer:
        for n, msg in enumerate(consumer, 1):
            msg.ack()
            if n == 20:
                break
        acks = 'streamplane_client_acks_total{group="c-g5",lane="realtime",stream="c-metrics"} 20.0'

        def scrape() -> str:
            return urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode()

        wait_until(lambda: acks in scrape(), what=scrape)  # acks are counted when the next commit records them
        text = scrape()
    assert 'streamplane_client_records_in_total{group="c-g5",lane="realtime",stream="c-metrics"} 20.0' in text


def test_ordering_by_key_handles_each_key_in_offset_order_across_threads(address: str) -> None:
    import random

    with CoordinatorClient(address) as client:
        client.create_stream("c-keyed", 1, cluster="east")
    with Producer(address, **{"linger.ms": 5}) as producer:
        for i in range(2000):
            producer.produce("c-keyed", b"%d" % i, key=b"k%d" % (i % 7))
        assert producer.flush() == 0
    seen: dict[bytes, list[int]] = {}
    lock = threading.Lock()
    threads: set[str] = set()

    def handle(msg: Message) -> None:
        time.sleep(random.random() / 10_000)  # uneven handling times, so threads finish out of order
        with lock:
            seen.setdefault(msg.key, []).append(int(msg.value))
            threads.add(threading.current_thread().name)

    stop = threading.Event()
    with Consumer(address, group="c-g6", stream="c-keyed", concurrency=4, ordering="key") as consumer:
        runner = threading.Thread(target=consumer.run, args=(handle,), kwargs={"stop": stop})
        runner.start()
        wait_until(lambda: sum(len(v) for v in seen.values()) == 2000, timeout=20)
        stop.set()
        runner.join()
    assert len(threads) > 1, "the keys were spread over several threads"
    assert all(values == sorted(values) for values in seen.values())


def test_batch_api_hands_out_arrow_batches_and_takes_outcomes_per_offset(address: str) -> None:
    from streamplane.client import BatchOutcome

    with CoordinatorClient(address) as client:
        client.create_stream("c-batches", 4, cluster="east")
        client.configure_group("c-g7", "realtime", 2)
    values = [b"ok%d" % i for i in range(3000)] + [b"poison-1", b"bad-1"]
    produce(address, "c-batches", values)
    seen: Counter[bytes] = Counter()
    attempts: dict[bytes, list[int]] = {}
    lock = threading.Lock()

    def handle(batch) -> BatchOutcome | None:
        assert batch.schema.names[:4] == ["stream", "lane", "generation", "partition"]
        rows = batch.to_pydict()
        retry, reject = {}, {}
        with lock:
            for offset, value, attempt in zip(rows["offset"], rows["value"], rows["attempt"], strict=True):
                seen[value] += 1
                attempts.setdefault(value, []).append(attempt)
                if value.startswith(b"poison"):
                    retry[offset] = "cannot parse"
                elif value.startswith(b"bad"):
                    reject[offset] = "malformed"
        return BatchOutcome(retry=retry, reject=reject, backoff_s=0.05) if retry or reject else None

    stop = threading.Event()
    with Consumer(address, group="c-g7", stream="c-batches", concurrency=3) as consumer:
        runner = threading.Thread(target=consumer.run_batches, args=(handle,), kwargs={"stop": stop})
        runner.start()
        wait_until(lambda: len(attempts.get(b"poison-1", [])) == 2, timeout=30)
        wait_until(lambda: lag(address, "c-g7") == (0, 4) and len(seen) == len(values), timeout=30)
        with pytest.raises(ValueError, match="cannot be mixed"):
            next(iter(consumer))
        stop.set()
        runner.join()
    assert all(seen[v] == 1 for v in values if v.startswith(b"ok")), "every good record once"
    assert attempts[b"poison-1"] == [1, 2], "retried with its attempt counted, then rejected at the max"
    with CoordinatorClient(address) as client:
        described = client.describe_stream("c-batches")
        dlq = next(lane for lane in described.lanes if lane.name == "dlq")
        rejected = read_lane(
            client.list_clusters()[0].bootstrap_servers, dlq.generations[-1].topic, dlq.generations[-1].partitions
        )
    reasons = sorted(dict(r.headers)[REASON_HEADER] for r in rejected if r.value in (b"poison-1", b"bad-1"))
    assert len(reasons) == 2 and reasons[0] == b"malformed"


def test_poison_records_reach_the_dlq_once_while_its_broker_is_down(address: str, local_cluster) -> None:
    """Seen in a chaos run: with a broker of the dlq lane down, one poison record was copied four times (each
    retry check re-read the exhausted record while its copy was still in flight)."""
    _, control = local_cluster
    with CoordinatorClient(address) as client:
        client.create_stream("c-dlq-down", 1, cluster="east")
        client.configure_group("c-g9", "realtime", 2)
    control.set_leader("sp.c-dlq-down.realtime.g1", 0, 1)
    control.set_leader("sp.c-dlq-down.dlq.g1", 0, 3)
    produce(address, "c-dlq-down", [b"ok1", b"poison1", b"poison2", b"ok2"])
    attempts: Counter[bytes] = Counter()

    def handle(msg: Message) -> None:
        attempts[msg.value] += 1
        if msg.value.startswith(b"poison"):
            raise RuntimeError("always fails")

    control.broker_down(3)
    try:
        with Consumer(address, group="c-g9", stream="c-dlq-down", retry_backoff_s=0.05) as consumer:
            worker = threading.Thread(target=consumer.run, args=(handle,), daemon=True)
            worker.start()
            wait_until(lambda: attempts[b"poison1"] == 2 and attempts[b"poison2"] == 2, timeout=15)
            time.sleep(3.0)  # several retry checks while the copies cannot be written
            control.broker_up(3)
            wait_until(lambda: lag(address, "c-g9")[0] == 0, timeout=30)
            consumer.close()
            worker.join(10)
    finally:
        control.broker_up(3)
    bootstrap, _ = local_cluster
    dlq = read_lane(bootstrap, "sp.c-dlq-down.dlq.g1", 1)
    assert sorted(r.value for r in dlq) == [b"poison1", b"poison2"], "each poison record is copied once"
    assert {dict(r.headers)[COPY_HEADER] for r in dlq} == {b"1"}
    assert attempts[b"poison1"] == attempts[b"poison2"] == 2, "no attempt beyond the limit"


def test_a_worker_rewound_while_it_handles_records_reads_every_partition_again(address: str) -> None:
    """A rewind grants each lease again to its holder at a new epoch while the holder still handles and
    commits records of the old one: the old epoch's commits are fenced, and that must stop only the old
    epoch, not the partition's reads for the new one."""
    stream, group = "rewound-live", "slow"
    with CoordinatorClient(address) as client:
        client.create_stream(stream, 4, cluster="east")
    values = [b"r-%d" % i for i in range(400)]
    produce(address, stream, values)
    epochs: dict[str, int] = {}
    again: Counter[bytes] = Counter()
    lock = threading.Lock()

    def handle(msg: Message) -> None:
        with lock:
            first = epochs.setdefault(msg.lease_id, msg.epoch)
            if msg.epoch > first:
                again[msg.value] += 1
        time.sleep(0.002)  # slower than the reads: old-epoch records are still in hand at the rewind

    consumer = Consumer(address, group=group, stream=stream)
    thread = threading.Thread(target=consumer.run, args=(handle,), daemon=True)
    thread.start()
    try:
        wait_until(lambda: len(epochs) == 4, timeout=30, what=lambda: f"every partition read, {len(epochs)} are")
        with CoordinatorClient(address) as client:
            wait_until(lambda: client.lag(group, stream=stream).offset_lag < len(values), timeout=30)
            client.rewind_group(group, stream, model.RewindTarget(model.RewindTo.EARLIEST))
        wait_until(
            lambda: len(again) == len(values),
            timeout=60,
            what=lambda: f"{len(again)} of {len(values)} records read again at the new epochs",
        )
        with CoordinatorClient(address) as client:
            wait_until(lambda: client.lag(group, stream=stream).offset_lag == 0, timeout=30)
    finally:
        consumer.close()
        thread.join(10)
