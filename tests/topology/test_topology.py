"""Topology over gRPC against a real coordinator and real local Kafka-protocol clusters."""

from __future__ import annotations

import grpc
import pytest
from confluent_kafka.admin import AdminClient

from streamplane import model
from streamplane.client.coordinator import CoordinatorClient
from streamplane.errors import (
    AlreadyExistsError,
    FailedPreconditionError,
    InvalidArgumentError,
    LimitExceededError,
    NotFoundError,
)

ACTIVE, DRAINING, SEALED, DRAINED = model.ACTIVE, model.DRAINING, model.SEALED, model.DRAINED


@pytest.fixture
def client(coordinator, local_cluster):
    """A client on a coordinator with two registered clusters (both on the one local test cluster process)."""
    bootstrap, control = local_cluster
    with CoordinatorClient(coordinator.address) as c:
        for name in ("east", "west"):
            c.register_cluster(
                model.Cluster(
                    name=name,
                    bootstrap_servers=bootstrap,
                    admin=model.ADMIN_LOCAL,
                    control_endpoint=control.endpoint,
                )
            )
        yield c


def _topics(bootstrap: str) -> dict[str, int]:
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10)
    return {name: len(t.partitions) for name, t in md.topics.items()}


def _event_count(client: CoordinatorClient) -> int:
    return len(list(client.watch_topology("", follow=False)))


def test_create_stream_makes_realtime_and_dlq_lanes_and_topics(client, local_cluster) -> None:
    done = client.create_stream("orders", partitions=3, cluster="east")
    lanes = {lane.name: lane for lane in done.stream.lanes}
    assert set(lanes) == {"realtime", "dlq"}
    assert lanes["realtime"].priority > lanes["dlq"].priority
    gen = lanes["realtime"].generations[0]
    assert (gen.number, gen.cluster, gen.topic, gen.partitions, gen.state) == (
        1,
        "east",
        "sp.orders.realtime.g1",
        3,
        ACTIVE,
    )
    topics = _topics(local_cluster[0])
    assert topics["sp.orders.realtime.g1"] == 3 and topics["sp.orders.dlq.g1"] == 3
    assert client.describe_stream("orders") == done.stream
    assert [s.name for s in client.list_streams()] == ["orders"]


def test_failover_opens_next_generation_and_drains_the_old(client, local_cluster) -> None:
    client.create_stream("metrics", partitions=2, cluster="east")
    done = client.failover("metrics", "realtime", "west", reason="disk full on east")
    assert (done.previous.number, done.previous.state, done.previous.cluster) == (1, DRAINING, "east")
    assert (done.current.number, done.current.state, done.current.cluster) == (2, ACTIVE, "west")
    assert done.current.topic == "sp.metrics.realtime.g2"
    assert _topics(local_cluster[0])["sp.metrics.realtime.g2"] == 2
    realtime = next(lane for lane in client.describe_stream("metrics").lanes if lane.name == "realtime")
    (old, new) = realtime.generations
    assert (old.number, new.number, new.state) == (1, 2, ACTIVE)
    # the sealer, woken by the failover, may already have sealed the old one (no producer holds it back), and
    # drained it (empty, read by no group)
    assert old.state in (DRAINING, SEALED, DRAINED), old.state
    # the failover's event (the sealer may already have appended the old generation's seal after it)
    last = [e for e in client.watch_topology("", follow=False) if isinstance(e, model.FailedOver)][-1]
    assert last.version == done.version
    # authentication is off here: the actor is the caller's address, never a name it sent (test_security)
    assert last.reason == "disk full on east" and last.actor.startswith("anonymous@")

    # failing over back with another partition count is a repartition on the first cluster
    again = client.failover("metrics", "realtime", "east", partitions=6)
    assert (again.current.number, again.current.cluster, again.current.partitions) == (3, "east", 6)


def test_add_lane_takes_the_realtime_placement(client) -> None:
    client.create_stream("traces", partitions=4, cluster="west")
    stream = client.add_lane("traces", "backlog", priority=50).stream
    assert [lane.name for lane in stream.lanes] == ["realtime", "backlog", "dlq"]
    backlog = stream.lanes[1].generations[0]
    assert (backlog.cluster, backlog.partitions, backlog.topic) == ("west", 4, "sp.traces.backlog.g1")
    with pytest.raises(AlreadyExistsError, match="backlog"):
        client.add_lane("traces", "backlog", priority=50)


BAD_CALLS = [
    ("invalid stream name", lambda c: c.create_stream("Bad.Name", 1), InvalidArgumentError, "name"),
    ("empty stream name", lambda c: c.create_stream("", 1), InvalidArgumentError, "name"),
    ("too many partitions", lambda c: c.create_stream("s1", 5000), InvalidArgumentError, "partitions"),
    ("zero partitions", lambda c: c.create_stream("s1", 0), InvalidArgumentError, "partitions"),
    ("unknown cluster", lambda c: c.create_stream("s1", 1, cluster="nowhere"), NotFoundError, "cluster"),
    ("duplicate stream", lambda c: c.create_stream("dup", 1), AlreadyExistsError, "dup"),
    ("unknown stream", lambda c: c.describe_stream("ghost"), NotFoundError, "ghost"),
    ("failover unknown stream", lambda c: c.failover("ghost", "realtime", "west"), NotFoundError, "stream"),
    ("failover unknown lane", lambda c: c.failover("dup", "nolane", "west"), NotFoundError, "lane"),
    ("failover unknown target", lambda c: c.failover("dup", "realtime", "mars"), NotFoundError, "target_cluster"),
    (
        "failover to active cluster",
        lambda c: c.failover("dup", "realtime", "east"),
        FailedPreconditionError,
        "already active",
    ),
    ("bad lane name", lambda c: c.add_lane("dup", "9lane", 5), InvalidArgumentError, "lane"),
    ("bad priority", lambda c: c.add_lane("dup", "bulk", 5000), InvalidArgumentError, "priority"),
    ("long reason", lambda c: c.failover("dup", "realtime", "west", reason="x" * 5000), InvalidArgumentError, "reason"),
    (
        "duplicate cluster",
        lambda c: c.register_cluster(model.Cluster(name="east", bootstrap_servers="h:1")),
        AlreadyExistsError,
        "east",
    ),
    (
        "bad bootstrap",
        lambda c: c.register_cluster(model.Cluster(name="c9", bootstrap_servers="nohostport")),
        InvalidArgumentError,
        "bootstrap_servers",
    ),
    (
        "negative weight",
        lambda c: c.register_cluster(model.Cluster(name="c9", bootstrap_servers="h:1", capacity_weight=-1)),
        InvalidArgumentError,
        "capacity_weight",
    ),
    (
        "local without control",
        lambda c: c.register_cluster(model.Cluster(name="c9", bootstrap_servers="h:1", admin=model.ADMIN_LOCAL)),
        InvalidArgumentError,
        "control_endpoint",
    ),
]


@pytest.mark.parametrize(("call", "error", "names"), [b[1:] for b in BAD_CALLS], ids=[b[0] for b in BAD_CALLS])
def test_bad_input_gets_a_clear_status_and_writes_nothing(client, call, error, names) -> None:
    client.create_stream("dup", 1, cluster="east")
    before_events = _event_count(client)
    before_streams = client.list_streams()
    before_clusters = client.list_clusters()
    with pytest.raises(error, match=names):
        call(client)
    assert _event_count(client) == before_events
    assert client.list_streams() == before_streams
    assert client.list_clusters() == before_clusters


def test_not_found_and_already_exists_name_the_object_across_grpc(client) -> None:
    client.create_stream("dup", 1, cluster="east")
    cases = [
        (lambda: client.describe_stream("ghost"), NotFoundError, ("stream", "ghost")),
        (lambda: client.failover("dup", "nolane", "west"), NotFoundError, ("lane", "dup/nolane")),
        (lambda: client.failover("dup", "realtime", "mars"), NotFoundError, ("cluster", "mars")),
        (lambda: client.create_stream("dup", 1, cluster="east"), AlreadyExistsError, ("stream", "dup")),
        (lambda: client.add_lane("dup", "realtime", 5), AlreadyExistsError, ("lane", "dup/realtime")),
    ]
    for call, kind, named in cases:
        with pytest.raises(kind) as info:
            call()
        assert (info.value.kind, info.value.name) == named


def test_oversized_request_is_refused(coordinator) -> None:
    with CoordinatorClient(coordinator.address) as c, pytest.raises(LimitExceededError):
        c.register_cluster(model.Cluster(name="big", bootstrap_servers="h:1", zone="z" * (5 * 1024 * 1024)))
    with CoordinatorClient(coordinator.address) as c:
        assert c.list_clusters() == []


def test_health_and_reflection_are_served(coordinator) -> None:
    from grpc_health.v1 import health_pb2, health_pb2_grpc
    from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

    with grpc.insecure_channel(coordinator.address) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        status = health.Check(health_pb2.HealthCheckRequest(service="streamplane.v1.TopologyService"), timeout=5)
        assert status.status == health_pb2.HealthCheckResponse.SERVING
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        answer = next(
            stub.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=5)
        )
        names = {s.name for s in answer.list_services_response.service}
    assert "streamplane.v1.TopologyService" in names and "grpc.health.v1.Health" in names
