"""The producer against a real coordinator and local cluster: routing, failover switch, ingestion time."""

from __future__ import annotations

import time

import pytest

from streamplane.client import CoordinatorClient, PartitionFetcher, Producer
from streamplane.errors import InvalidArgumentError, NotFoundError, UnavailableError
from tests.helpers import free_port, register_local_clusters, wait_until


@pytest.fixture
def address(coordinator, local_cluster) -> str:
    bootstrap, control = local_cluster
    register_local_clusters(coordinator.address, bootstrap, control.endpoint, ("east", "west"))
    with CoordinatorClient(coordinator.address) as client:
        client.create_stream("purchases", 1, cluster="east")
    return coordinator.address


def read_topic(bootstrap: str, topic: str, expected: int) -> list:
    fetcher = PartitionFetcher(bootstrap, topic, 0)
    records: list = []
    deadline = time.monotonic() + 10
    while len(records) < expected:
        assert time.monotonic() < deadline, f"{topic}: {len(records)} of {expected}"
        got = fetcher.fetch()
        if got.batch is not None:
            records += list(got.batch.records())
    fetcher.close()
    return records


def test_records_follow_a_failover_and_none_is_lost(address: str, local_cluster) -> None:
    bootstrap, _ = local_cluster
    acked: list[int] = []
    with Producer(address, **{"linger.ms": 5}) as producer:
        before = time.time() * 1000
        for i in range(100):
            route = producer.produce("purchases", b"%d" % i, on_delivery=lambda err, msg: acked.append(err is None))
        assert (route.generation, route.cluster, route.topic) == (1, "east", "sp.purchases.realtime.g1")
        assert producer.flush() == 0
        with CoordinatorClient(address) as client:
            client.failover("purchases", "realtime", "west")
        wait_until(lambda: producer.route("purchases").generation == 2, timeout=5)  # it follows the event log
        for i in range(100, 200):
            route = producer.produce("purchases", b"%d" % i, on_delivery=lambda err, msg: acked.append(err is None))
        assert (route.generation, route.cluster) == (2, "west")
    assert acked == [True] * 200
    g1 = read_topic(bootstrap, "sp.purchases.realtime.g1", 100)
    g2 = read_topic(bootstrap, "sp.purchases.realtime.g2", 100)
    assert [r.value for r in g1 + g2] == [b"%d" % i for i in range(200)]
    assert before - 1 <= g1[0].timestamp <= g2[-1].timestamp <= time.time() * 1000, "stamped with the ingestion time"


def test_bad_input(address: str) -> None:
    with Producer(address) as producer:
        with pytest.raises(NotFoundError, match="ghost"):
            producer.produce("ghost", b"x")
        with pytest.raises(NotFoundError, match="nolane"):
            producer.produce("purchases", b"x", lane="nolane")
    with pytest.raises(InvalidArgumentError, match=r"bootstrap\.servers"):
        Producer(address, **{"bootstrap.servers": "h:1"})
    with pytest.raises(InvalidArgumentError, match="max_batch_decompressed"):
        Producer(address, max_batch_decompressed=1 << 40)


def test_bad_settings_and_an_unreachable_coordinator_are_clear_errors(address: str) -> None:
    with pytest.raises(ValueError, match=r"linger\.mss"):
        Producer(address, **{"linger.mss": 5})
    with pytest.raises(ValueError, match="metrics_port"):
        Producer(address, metrics_port=70000)
    with pytest.raises(UnavailableError, match=r"127\.0\.0\.1:1"):
        Producer("127.0.0.1:1")


def test_metrics_count_records_out_when_asked(address: str) -> None:
    import urllib.request

    port = free_port()
    with Producer(address, metrics_port=port) as producer:
        for i in range(30):
            producer.produce("purchases", b"%d" % i, lane="dlq")
        assert producer.flush() == 0
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode()
    assert 'streamplane_client_records_out_total{lane="dlq",stream="purchases"} 30.0' in text
