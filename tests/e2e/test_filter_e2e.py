"""Predicate filtering in the data plane (issue 39), end to end on both Kafka engines: a consumer with `where`
gets every matching record once through the handler, iterator and batch APIs, never a record that does not
match, and its group's lag still goes to zero; with a filter on, a stream drains across a failover."""

from __future__ import annotations

import threading
import uuid
from collections import Counter
from typing import Any

import pytest

from streamplane.client import Consumer, CoordinatorClient, Message, Producer
from streamplane.client import metrics as client_metrics
from streamplane.errors import InvalidArgumentError
from streamplane.model import DRAINED
from tests.helpers import issue_token, offset_lag, wait_until

WHERE = "header(service) = 'api' and key ^= 'us-'"
N = 3000


def _record(i: int) -> tuple[bytes, bytes, list[tuple[str, bytes]]]:
    """A known mix: services api / web / db by i % 3, keys us- / eu- by i % 2, some records without a header."""
    key = (b"us-%d" if i % 2 == 0 else b"eu-%d") % i
    headers = [] if i % 7 == 0 else [("service", (b"api", b"web", b"db")[i % 3])]
    return key, b"v-%d" % i, headers


def _wanted(first: int, last: int) -> set[bytes]:
    out = set()
    for i in range(first, last):
        key, value, headers = _record(i)
        if key.startswith(b"us-") and ("service", b"api") in headers:
            out.add(value)
    return out


def _produce(address: str, stream: str, first: int, last: int) -> None:
    with Producer(address, token=issue_token("producer", "ingest"), **{"linger.ms": 10}) as producer:
        for i in range(first, last):
            key, value, headers = _record(i)
            producer.produce(stream, value, key=key, headers=headers)
        assert producer.flush(60) == 0


def _stream(address: str) -> tuple[str, str]:
    stream = f"flt-{uuid.uuid4().hex[:8]}"
    with CoordinatorClient(address, token=issue_token("admin", "ops")) as client:
        client.create_stream(stream, 4, cluster="east")
    return stream, f"g-{uuid.uuid4().hex[:6]}"


def _left_out(address: str, group: str, stream: str) -> tuple[int, int]:
    """What the commit log counts as left out by the group's predicate: (per lane, per partition), summed."""
    with CoordinatorClient(address, token=issue_token("admin", "ops")) as client:
        lag = client.lag(group, stream=stream)
    return sum(x.filtered for x in lag.lanes), sum(x.filtered for x in lag.partitions)


def _filtered(group: str) -> float:
    return sum(
        s.value
        for metric in client_metrics.REGISTRY.collect()
        if metric.name == "streamplane_client_filtered_records"
        for s in metric.samples
        if s.name.endswith("_total") and s.labels.get("group") == group
    )


@pytest.mark.parametrize("api", ["handler", "iterator", "batches"])
def test_a_filtered_consumer_gets_each_matching_record_once_and_nothing_else(secured_engine: str, api: str) -> None:
    address = secured_engine
    stream, group = _stream(address)
    _produce(address, stream, 0, N)
    wanted = _wanted(0, N)
    seen: Counter[bytes] = Counter()
    lock = threading.Lock()

    def take(value: bytes) -> None:
        with lock:
            seen[value] += 1

    consumer = Consumer(address, group=group, stream=stream, where=WHERE, token=issue_token("consumer", "worker"))
    stop = threading.Event()

    def handler(msg: Message) -> None:
        take(msg.value)

    def batches(batch: Any) -> None:
        for value in batch.column("value").to_pylist():
            take(value)

    def iterate() -> None:
        for msg in consumer:
            take(msg.value)
            msg.ack()

    runners = {
        "handler": lambda: consumer.run(handler, stop=stop),
        "batches": lambda: consumer.run_batches(batches, stop=stop),
        "iterator": iterate,
    }
    thread = threading.Thread(target=runners[api], daemon=True)
    thread.start()
    try:
        wait_until(lambda: len(seen) >= len(wanted), timeout=60, what=lambda: f"{len(seen)} of {len(wanted)}")
        wait_until(
            lambda: offset_lag(address, group, stream) == 0, timeout=30, what=lambda: "the group's lag to reach 0"
        )
        assert set(seen) == wanted, "no record the predicate does not match reached user code"
        assert max(seen.values()) == 1, "each matching record once"
        assert _filtered(group) >= N - len(wanted), "what was left out is counted"
        left_out = N - len(wanted)
        wait_until(  # the commit log counts each left out once
            lambda: _left_out(address, group, stream) == (left_out, left_out),
            timeout=30,
            what=lambda: f"{_left_out(address, group, stream)} counted as left out, not {left_out}",
        )
    finally:
        stop.set()
        consumer.close()
        thread.join(10)


def test_a_filtered_group_drains_a_generation_across_a_failover(secured_engine: str) -> None:
    address = secured_engine
    stream, group = _stream(address)
    _produce(address, stream, 0, N // 2)
    seen: Counter[bytes] = Counter()
    consumer = Consumer(address, group=group, stream=stream, where=WHERE, token=issue_token("consumer", "worker"))

    def handler(msg: Message) -> None:
        seen[msg.value] += 1

    thread = threading.Thread(target=consumer.run, args=(handler,), daemon=True)
    thread.start()
    try:
        admin = issue_token("admin", "ops")
        with CoordinatorClient(address, token=admin) as client:
            client.failover(stream, "realtime", "west", reason="drill")
        _produce(address, stream, N // 2, N)
        wanted = _wanted(0, N)
        wait_until(lambda: set(seen) == wanted, timeout=60, what=lambda: f"{len(set(seen) & wanted)} of {len(wanted)}")

        def g1() -> str:
            with CoordinatorClient(address, token=admin) as client:
                gen = client.describe_stream(stream).require_lane("realtime").generation(1)
                assert gen is not None
                return str(gen.state)

        wait_until(lambda: g1() == DRAINED, timeout=60, what=lambda: f"g1 drained with a filter on; it is {g1()}")
        wait_until(lambda: offset_lag(address, group, stream) == 0, timeout=30)
        assert max(seen.values()) == 1
    finally:
        consumer.close()
        thread.join(10)


def test_a_bad_predicate_is_refused_at_construction_with_its_column() -> None:
    with pytest.raises(InvalidArgumentError, match=r"^where, column 17: expected an operator"):
        Consumer("127.0.0.1:1", group="g", stream="s", where="header(service) 'api'")


def test_a_group_configured_with_a_predicate_refuses_a_worker_that_filters_otherwise(secured_engine: str) -> None:
    """`group configure --where` (issue 39): every member filters alike; a worker with another predicate is
    refused at join with a sentence, the same predicate written otherwise is the same, and a worker with none
    takes the group's from its welcome."""
    from streamplane.errors import FailedPreconditionError
    from tests.helpers import cli

    address = secured_engine
    stream, group = _stream(address)
    operator = {"STREAMPLANE_TOKEN": issue_token("operator", "oncall")}
    bad = cli("group", "configure", group, "--where", "header(service) = ", coordinator=address, env=operator)
    assert bad.returncode == 2 and "where, column 19: expected a quoted string" in bad.stderr, bad.stderr
    done = cli("group", "configure", group, "--where", WHERE, coordinator=address, env=operator)
    assert done.returncode == 0, done.stderr
    assert "every member filters with where" in done.stdout
    token = issue_token("consumer", "worker")
    with pytest.raises(FailedPreconditionError, match=f"but group '{group}' filters with"):
        Consumer(address, group=group, stream=stream, where="key ^= 'us-'", token=token)
    _produce(address, stream, 0, 300)
    seen: Counter[bytes] = Counter()
    same = "header('service')='api' AND key ^= 'us-'"  # the same predicate, written otherwise
    workers = [
        Consumer(address, group=group, stream=stream, where=same, token=token, worker_id="same"),
        Consumer(address, group=group, stream=stream, token=token, worker_id="none"),  # takes the group's
    ]
    threads = [
        threading.Thread(target=w.run, args=(lambda msg: seen.update([msg.value]),), daemon=True) for w in workers
    ]
    for t in threads:
        t.start()
    try:
        wait_until(lambda: set(seen) >= _wanted(0, 300), timeout=30, what=lambda: f"{len(seen)} matched")
        wait_until(lambda: offset_lag(address, group, stream) == 0, timeout=30)
        assert set(seen) == _wanted(0, 300), "whichever member read a partition, nothing else reached a handler"
    finally:
        for w in workers:
            w.close()
        for t in threads:
            t.join(10)
    cleared = cli("group", "configure", group, "--no-where", coordinator=address, env=operator)
    assert cleared.returncode == 0 and "members read every record" in cleared.stdout
    Consumer(address, group=group, stream=stream, token=token).close()
