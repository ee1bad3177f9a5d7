"""`stream delete`: the stream and every group's progress on it go in one transaction, then its topics on every
cluster; refused while in use; a stream created again by that name never meets the old topics.

Transaction-level rules run on the embedded store with an in-memory stand-in for Kafka; the end-to-end test
runs the CLI against a real coordinator on both engines: a real broker's topics are gone afterwards, and a
local mock cluster (which has no DeleteTopics) keeps them, said so.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from streamplane import model
from streamplane.client import Consumer, CoordinatorClient, Producer
from streamplane.coordinator import keys
from streamplane.coordinator.commitlog import log as commitlog
from streamplane.coordinator.rpc import server
from streamplane.coordinator.store import StoreConfig, open_store
from streamplane.coordinator.topology import events, sealing
from streamplane.coordinator.topology.cluster_admin import RoutingAdmin
from streamplane.coordinator.topology.lifecycle import delete_stream
from streamplane.coordinator.topology.topology import Topology
from streamplane.errors import FailedPreconditionError, InvalidArgumentError, NotFoundError
from streamplane.model import Cluster, Commit, StreamDeleted
from streamplane.testing.cluster_admin import MemoryClusterAdmin
from tests.helpers import Domain, cli, wait_until

TTL_MS = 10_000


@pytest.fixture
def topology(domain: Domain) -> Topology:
    return domain.cluster("east", "west").stream("logs", 2, "east").stream("metrics", 1, "east").topology


def _commit(t: Topology, group: str, lid: str) -> None:
    commitlog.commit(t.db, group, lid, 0, Commit(acked=[(0, 1)], high_watermark=1), now_ms=t.clock.now_ms())


def test_a_deleted_stream_takes_its_progress_and_topics_and_nothing_else(topology: Topology) -> None:
    admin = topology.admin
    assert isinstance(admin, MemoryClusterAdmin)
    topology.failover("logs", "realtime", "west", reason="test")
    _commit(topology, "g", "logs/realtime/g1/p0")
    _commit(topology, "g", "metrics/realtime/g1/p0")
    done = delete_stream(topology, "logs", reason="retired", actor="ops")
    assert set(done.topics_deleted) == {
        "east/sp.logs.realtime.g1",
        "west/sp.logs.realtime.g2",
        "east/sp.logs.dlq.g1",
    }
    assert done.topics_left == ()
    assert {t for _, t in admin.topics} == {"sp.metrics.realtime.g1", "sp.metrics.dlq.g1"}
    with pytest.raises(NotFoundError):
        topology.get_stream("logs")
    assert [x.lease_id for x in commitlog.lag(topology.db, "g", now_ms=0).partitions] == ["metrics/realtime/g1/p0"]
    (event,) = [e for e in events.read_events(topology.db, None) if isinstance(e, StreamDeleted)]
    assert (event.stream, event.reason, event.actor, event.version) == ("logs", "retired", "ops", done.version)
    unsettled = keys.UNSETTLED.range(("logs",))
    assert topology.db.transact(lambda tr: tr.get_range(unsettled.start, unsettled.stop)) == []


def test_a_stream_created_again_numbers_its_generations_past_the_deleted_ones(topology: Topology) -> None:
    topology.failover("logs", "realtime", "west", reason="test")  # realtime reached g2
    delete_stream(topology, "logs")
    again = topology.create_stream("logs", 2, "east").value
    assert {lane.name: lane.active.number for lane in again.lanes} == {"realtime": 3, "dlq": 3}
    assert again.lane("realtime").active.topic == "sp.logs.realtime.g3"  # type: ignore[union-attr]
    added = topology.add_lane("logs", "backfill", 10).value
    assert added.lane("backfill").active.number == 3  # type: ignore[union-attr]


def test_deletion_is_refused_while_a_producer_writes_the_stream_and_force_cuts_it_off(topology: Topology) -> None:
    now = topology.clock.now_ms()
    sealing.producer_heartbeat(topology.db, "p-logs", "", [], now_ms=now, ttl_ms=TTL_MS, streams=["logs"])
    sealing.producer_heartbeat(topology.db, "p-other", "", [], now_ms=now, ttl_ms=TTL_MS, streams=["metrics"])
    with pytest.raises(FailedPreconditionError, match="stream 'logs' is in use by producer p-logs: stop them"):
        delete_stream(topology, "logs")
    assert topology.get_stream("logs").name == "logs", "a refused deletion changes nothing"
    done = delete_stream(topology, "logs", force=True)
    assert done.deleted.producers == ("p-logs",)
    topology.clock.advance(TTL_MS)  # a producer whose session ended holds nothing back
    delete_stream(topology, "metrics")


def test_topics_on_an_unreachable_cluster_are_left_and_named_and_the_stream_is_still_deleted(
    topology: Topology,
) -> None:
    admin = topology.admin
    assert isinstance(admin, MemoryClusterAdmin)
    admin.down.add("east")
    done = delete_stream(topology, "logs")
    assert done.topics_deleted == ()
    assert sorted(done.topics_left) == [
        "east/sp.logs.dlq.g1: cluster east (east:9092) is unreachable",
        "east/sp.logs.realtime.g1: cluster east (east:9092) is unreachable",
    ]
    with pytest.raises(NotFoundError):
        topology.get_stream("logs")


def test_bad_deletions_say_why_and_change_nothing(topology: Topology) -> None:
    with pytest.raises(NotFoundError, match="stream 'nope' does not exist"):
        delete_stream(topology, "nope")
    with pytest.raises(InvalidArgumentError, match="is not a valid name"):
        delete_stream(topology, "no such")
    with pytest.raises(InvalidArgumentError, match="at most 1024"):
        delete_stream(topology, "logs", reason="x" * 1025)
    assert {s.name for s in topology.list_streams()} == {"logs", "metrics"}


@pytest.fixture(params=["mock", "kafka"])
def engine(request: pytest.FixtureRequest, tmp_path: Path, local_cluster) -> Iterator[tuple[str, str, bool]]:
    """A coordinator with one cluster 'home': the local mock cluster or a real broker; (address, bootstrap,
    whether the cluster can delete topics)."""
    running = server.start(
        open_store(StoreConfig(driver="embedded", data_dir=tmp_path / "db")),
        admin=RoutingAdmin(),
        control_endpoints=[local_cluster[1].endpoint],
    )
    with CoordinatorClient(running.address) as c:
        if request.param == "mock":
            bootstrap, control = local_cluster
            c.register_cluster(Cluster("home", bootstrap, admin=model.ADMIN_LOCAL, control_endpoint=control.endpoint))
        else:
            bootstrap = request.getfixturevalue("kafka_bootstrap")
            c.register_cluster(Cluster("home", bootstrap, admin=model.ADMIN_KAFKA))
    yield running.address, bootstrap, request.param == "kafka"
    running.stop(0)


def test_stream_delete_over_the_cli_on_both_engines(engine: tuple[str, str, bool]) -> None:
    address, bootstrap, deletes = engine
    name = f"sd-{'kafka' if deletes else 'mock'}"
    with CoordinatorClient(address) as c:
        c.create_stream(name, 2, cluster="home")
    with Producer(address, **{"linger.ms": 5}) as producer:
        for i in range(20):
            producer.produce(name, b"%d" % i, key=b"%d" % i)
        assert producer.flush(30) == 0
        refused = cli("stream", "delete", name, coordinator=address)
        assert refused.returncode == 5, refused.stdout + refused.stderr
        assert f"stream '{name}' is in use by producer" in refused.stderr
    seen: list[bytes] = []
    with Consumer(address, group=f"{name}-g", stream=name) as consumer:
        for message in consumer:
            message.ack()
            seen.append(message.value)
            if len(seen) == 20:
                break
        refused = cli("stream", "delete", name, coordinator=address)
        assert refused.returncode == 5 and f"in use by group {name}-g" in refused.stderr, refused.stderr
    assert sorted(seen) == sorted(b"%d" % i for i in range(20))
    done = cli("stream", "delete", name, "--reason", "retired", coordinator=address)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"deleted stream {name}" in done.stdout
    topics = {f"sp.{name}.realtime.g1", f"sp.{name}.dlq.g1"}
    if deletes:
        assert "topics deleted: 2 of 2" in done.stdout
        listed = AdminClient({"bootstrap.servers": bootstrap})
        wait_until(
            lambda: not topics & set(listed.list_topics(timeout=10).topics),
            what=lambda: f"{topics} still on the broker",
        )
    else:
        assert "topics deleted: 0 of 2" in done.stdout
        assert "a local mock cluster cannot delete topics" in done.stdout
    with CoordinatorClient(address) as c:
        with pytest.raises(NotFoundError):
            c.describe_stream(name)
        assert [p for p in c.lag(f"{name}-g").partitions if p.lease_id.startswith(name)] == []
        again = c.create_stream(name, 2, cluster="home").stream
        assert again.lane("realtime").active.number == 2  # type: ignore[union-attr]
    shown = cli("events", coordinator=address)
    assert f"stream_deleted {name} (retired) topics=2" in shown.stdout
