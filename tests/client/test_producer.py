"""The producer against a real coordinator and local cluster: routing, failover switch, ingestion time."""

from __future__ import annotations

import threading
import time

import pytest

from streamplane.client import CoordinatorClient, PartitionFetcher, Producer
from streamplane.errors import InvalidArgumentError, NotFoundError, StreamplaneError, UnavailableError
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


def test_plain_records_take_the_fast_path_across_a_failover_and_none_is_lost(address: str, local_cluster) -> None:
    """Records without on_delivery (with or without a list of headers) go straight to librdkafka; a switch
    drops the old route from that path, so the next record goes to the new generation and the old one is
    flushed, not abandoned."""
    bootstrap, _ = local_cluster
    with CoordinatorClient(address) as client:
        client.create_stream("fastpath", 1, cluster="east")  # its topics are this test's alone

    def headers(i: int) -> list[tuple[str, bytes]] | None:
        return [("n", b"%d" % i), ("service", b"api")] if i % 3 == 0 else None

    with Producer(address, **{"linger.ms": 5}) as producer:
        for i in range(100):
            producer.produce("fastpath", b"%d" % i, key=b"k", headers=headers(i))
        with CoordinatorClient(address) as client:
            client.failover("fastpath", "realtime", "west")
        wait_until(lambda: producer.route("fastpath").generation == 2, timeout=5)
        routes = {producer.produce("fastpath", b"%d" % i, headers=headers(i)).generation for i in range(100, 200)}
        assert routes == {2}
        assert producer.flush() == 0
    g1 = read_topic(bootstrap, "sp.fastpath.realtime.g1", 100)
    g2 = read_topic(bootstrap, "sp.fastpath.realtime.g2", 100)
    assert [r.value for r in g1 + g2] == [b"%d" % i for i in range(200)]
    assert [list(r.headers) for r in g1 + g2] == [headers(i) or [] for i in range(200)]
    assert all(r.key == b"k" for r in g1)
    with pytest.raises(StreamplaneError, match="closed"):
        producer.produce("fastpath", b"after close")


def test_delivery_callbacks_may_produce_while_the_queue_is_full(address: str) -> None:
    """A full librdkafka queue makes produce() wait, serving delivery reports meanwhile. Their callbacks run
    the application's code, which may produce (here: one follow-up record to the dlq lane for each record):
    waiting must not hold the producer's lock, or that callback deadlocks the producer."""
    with CoordinatorClient(address) as client:
        client.create_stream("chain", 1, cluster="east")  # its own: the metrics test counts purchases' records
    follow_ups: list[int] = []
    outcome: list[object] = []  # records left unacknowledged, or the error the writer met
    finished = threading.Event()

    def write() -> None:
        try:
            with Producer(address, **{"queue.buffering.max.messages": 2, "linger.ms": 0}) as producer:

                def delivered(err: object, msg: object) -> None:
                    producer.produce("chain", b"follow-up", lane="dlq")
                    follow_ups.append(1)

                for i in range(50):
                    producer.produce("chain", b"%d" % i, on_delivery=delivered)
                outcome.append(producer.flush(10))
        except Exception as err:  # told to the test below, not lost in this thread
            outcome.append(err)
        finished.set()

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    assert finished.wait(30), "produce() deadlocked in a delivery callback"
    assert outcome == [0] and len(follow_ups) == 50


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


def test_a_lane_prepared_ahead_is_routed_and_its_records_land(address: str, local_cluster) -> None:
    """`prepare` routes a lane and connects its producer before the first record (a redrive does it while it
    claims its first batch); an unknown stream or lane is refused there, as by `produce`."""
    bootstrap, _ = local_cluster
    with CoordinatorClient(address) as client:
        client.create_stream("prepared", 1, cluster="east")
    with Producer(address) as producer:
        with pytest.raises(NotFoundError, match="ghost"):
            producer.prepare("ghost")
        with pytest.raises(NotFoundError, match="nolane"):
            producer.prepare("prepared", "nolane")
        route = producer.prepare("prepared")
        assert route == producer.route("prepared") and route.topic.startswith("sp.prepared.realtime")
        for i in range(3):
            producer.produce("prepared", b"prepared-%d" % i)
        assert producer.flush(10) == 0 and producer.failed == 0
    assert [r.value for r in read_topic(bootstrap, route.topic, 3)] == [b"prepared-%d" % i for i in range(3)]


def test_a_record_that_finally_fails_is_counted_with_why(address: str) -> None:
    """`failed` counts records whose delivery finally failed and `last_failure` says why, for records sent
    without on_delivery too (a redrive reports its batch's failure from them)."""
    with Producer(address, **{"message.timeout.ms": 1, "linger.ms": 0}) as producer:  # before its producer id
        producer.produce("purchases", b"too late")
        producer.flush(10)
        assert producer.failed == 1 and "timed out" in producer.last_failure, producer.last_failure


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


def test_a_producer_warms_up_toward_other_clusters_when_its_cluster_turns_sick(coordinator, local_cluster) -> None:
    """When a cluster it writes to is reported unhealthy, the producer starts spare producers toward healthy
    clusters, so a failover there does not wait for a new idempotent producer id (about 500 ms): the first
    record after the switch is acknowledged soon after the failover's commit."""
    from streamplane import model

    bootstrap, control = local_cluster
    other = ",".join(reversed(bootstrap.split(",")))  # the same local cluster, named by another address list
    with CoordinatorClient(coordinator.address) as client:
        for name, servers in (("sick", bootstrap), ("spare", other)):
            client.register_cluster(
                model.Cluster(name, servers, admin=model.ADMIN_LOCAL, control_endpoint=control.endpoint)
            )
        client.set_fleet_policy(model.FleetPolicy(frozen=True))
        client.create_stream("warmed", 1, cluster="sick")
    acked: list[tuple[float, str]] = []
    with Producer(coordinator.address, **{"linger.ms": 5}) as producer:
        producer.produce("warmed", b"before", on_delivery=lambda err, msg: acked.append((time.time(), msg.topic())))
        assert producer.flush(10) == 0
        coordinator.autopilot.topology.record_health("sick", "unhealthy", ("rehearsal",), actor="test", seen_ms=0)
        wait_until(lambda: other in producer._spares, timeout=10)
        time.sleep(1.0)  # the spare gets its producer id meanwhile (the health monitor waits 10 s to move a lane)
        with CoordinatorClient(coordinator.address) as client:
            done = client.failover("warmed", "realtime", "spare", reason="rehearsal")
        moved = time.time()
        wait_until(lambda: producer.route("warmed").generation == done.current.number, timeout=10)
        producer.produce("warmed", b"after", on_delivery=lambda err, msg: acked.append((time.time(), msg.topic())))
        assert producer.flush(10) == 0
        (first_after,) = [t for t, topic in acked if topic == done.current.topic]
        assert first_after - moved < 0.3, f"the first record after the switch took {first_after - moved:.3f} s"
        assert other not in producer._spares, "the new generation's sender adopted the warm producers"
