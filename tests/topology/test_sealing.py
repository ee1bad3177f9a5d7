"""Sealing: a draining generation is sealed with its true end offsets once no live producer can write to it.
On both engines: the mock cluster, and a real Kafka broker (acks=all, end offsets from a real log)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from streamplane import model
from streamplane.client import CoordinatorClient, Producer
from streamplane.coordinator.rpc import server
from streamplane.coordinator.store import StoreConfig, open_store
from streamplane.coordinator.topology.cluster_admin import RoutingAdmin, kafka_end_offsets
from streamplane.coordinator.topology.sealing import SealingConfig
from streamplane.errors import InvalidArgumentError
from tests.helpers import Relay, register_local_clusters, register_real_clusters, wait_until

TTL_MS = 1500


@pytest.fixture(params=["mock", "kafka"])
def address(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    running = server.start(
        open_store(StoreConfig(driver="embedded", data_dir=tmp_path / "store")),
        admin=RoutingAdmin(),
        sealing_config=SealingConfig(producer_ttl_ms=TTL_MS, producer_heartbeat_ms=200, loop_ms=50),
        control_endpoints=[request.getfixturevalue("local_cluster")[1].endpoint],
    )
    if request.param == "mock":
        bootstrap, control = request.getfixturevalue("local_cluster")
        register_local_clusters(running.address, bootstrap, control.endpoint, ("east", "west"))
    else:
        register_real_clusters(running.address, request.getfixturevalue("real_kafka"), ("east", "west"))
    yield running.address
    running.stop(0)


def generation(client: CoordinatorClient, stream: str, number: int) -> model.Generation:
    lane = next(x for x in client.describe_stream(stream).lanes if x.name == "realtime")
    return next(g for g in lane.generations if g.number == number)


def sealed_events(client: CoordinatorClient) -> list[model.GenerationSealed]:
    return [e for e in client.watch_topology("", follow=False) if isinstance(e, model.GenerationSealed)]


def test_seal_waits_for_every_live_producer_then_records_the_end_offsets(address: str) -> None:
    with CoordinatorClient(address) as client, Producer(address, **{"linger.ms": 5}) as producer:
        client.create_stream("sealme", 3, cluster="east")
        for i in range(90):
            producer.produce("sealme", b"%d" % i, key=b"%d" % i)
        assert producer.flush() == 0
        # A second producer that heard of no topology change yet: the seal must wait for it.
        client.producer_heartbeat("laggard", "", [])
        client.failover("sealme", "realtime", "west", reason="test")
        # (that it holds the seal back until then is shown pass by pass in test_seal_and_drain_rules.py)
        # The switched producer writes to generation 2 meanwhile.
        wait_until(lambda: producer.route("sealme").generation == 2)
        producer.produce("sealme", b"after")
        assert producer.flush() == 0
        # The laggard's session expires: now nothing holds the seal back.
        wait_until(lambda: generation(client, "sealme", 1).state == model.SEALED, timeout=TTL_MS / 1000 + 5)
        g1 = generation(client, "sealme", 1)
        assert sum(g1.end_offsets) == 90 and len(g1.end_offsets) == 3
        (event,) = [e for e in sealed_events(client) if e.stream == "sealme"]
        assert list(event.generation.end_offsets) == list(g1.end_offsets)
        assert generation(client, "sealme", 2).state == model.ACTIVE


def test_a_producer_no_replica_answers_writes_nothing_past_a_seal_that_did_not_wait_for_it(address: str) -> None:
    """The producer's only coordinator stops answering (a SIGSTOPped replica, a black-holed link) while its
    lane fails over: its session expires and the generation is sealed without it. Every record it had
    acknowledged must lie below the seal's end offsets or in the new generation; none after the seal."""
    relay = Relay(address)
    acked: list[bytes] = []
    stop = threading.Event()
    try:
        with CoordinatorClient(address) as client, Producer(relay.address, **{"linger.ms": 5}) as producer:
            client.create_stream("cutoff", 2, cluster="east")

            def delivered(err: object, msg: object) -> None:
                if err is None:
                    acked.append(msg.value())  # type: ignore[attr-defined]

            calls: list[float] = []  # how long each produce() took: a fenced producer holds, it does not block

            def write() -> None:
                i = 0
                while not stop.is_set():
                    began = time.monotonic()
                    producer.produce("cutoff", b"%d" % i, key=b"%d" % i, on_delivery=delivered)
                    calls.append(time.monotonic() - began)
                    i += 1
                    stop.wait(0.002)  # a steady trickle, about 500 records a second

            writer = threading.Thread(target=write, daemon=True)
            writer.start()
            wait_until(lambda: len(acked) >= 100)
            relay.stall()
            client.failover("cutoff", "realtime", "west", reason="test")
            wait_until(lambda: generation(client, "cutoff", 1).state == model.SEALED, timeout=TTL_MS / 1000 + 10)
            during = len(calls)
            wait_until(lambda: len(calls) >= during + 100)  # records keep being accepted while cut off
            relay.release()
            at_release = len(acked)
            wait_until(lambda: producer.route("cutoff").generation == 2 and len(acked) >= at_release + 100)
            stop.set()
            writer.join(timeout=10)
            assert producer.flush() == 0
            clusters = {c.name: c for c in client.list_clusters()}
            g1, g2 = generation(client, "cutoff", 1), generation(client, "cutoff", 2)
            written_g1 = kafka_end_offsets(clusters["east"], g1.topic, g1.partitions)
            assert written_g1 == list(g1.end_offsets), "records were written to g1 after its seal"
            written_g2 = kafka_end_offsets(clusters["west"], g2.topic, g2.partitions)
            assert sum(written_g1) + sum(written_g2) == len(acked) == len(set(acked)) == len(calls), "none lost"
            assert max(calls) < 2.0, f"produce() blocked for {max(calls):.1f} s while the producer was fenced"
    finally:
        stop.set()
        relay.close()


def test_a_closed_producer_no_longer_holds_back_a_seal(address: str) -> None:
    with CoordinatorClient(address) as client:
        client.create_stream("sealnow", 1, cluster="east")
        expires = time.monotonic() + TTL_MS / 1000
        client.producer_heartbeat("p1", "", [])
        client.failover("sealnow", "realtime", "west")
        client.close_producer("p1")
        # sealed before p1's session would have expired: closing it is what let the seal through
        sealed = (model.SEALED, model.DRAINED)  # empty: drained as soon as it is sealed
        wait_until(lambda: generation(client, "sealnow", 1).state in sealed, timeout=expires - time.monotonic())
        assert list(generation(client, "sealnow", 1).end_offsets) == [0]


def test_bad_producer_heartbeats_are_refused_by_name(address: str) -> None:
    with CoordinatorClient(address) as client:
        with pytest.raises(InvalidArgumentError, match="producer_id"):
            client.producer_heartbeat("bad id!", "", [])
        with pytest.raises(InvalidArgumentError, match="topology_version"):
            client.producer_heartbeat("p", "xyz", [])
        with pytest.raises(InvalidArgumentError, match=r"in_flight\.generation"):
            client.producer_heartbeat("p", "", [("s", "realtime", 0)])
