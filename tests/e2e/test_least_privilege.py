"""Workers and producers on least-privilege, expiring tokens, as an operator runs them in production.

A coordinator with authentication on; workers hold `consumer` tokens scoped to their group and stream, the
producer a `producer` token scoped to its stream. Both Kafka engines.

- A consumer's rejects reach its stream's dlq lane (its token may write that lane and no other), and the group
  catches up: no thread dies, nothing is left behind.
- A worker whose token file is rotated under it, with tokens shorter than the run, commits throughout and
  redelivers nothing; once rotation stops, it ends loudly and its leases move to another worker.
- While the dlq lane's cluster is down, rejected records wait in the retry path and the worker goes on with the
  rest; once the lane is back, every one is copied once.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from streamplane import model
from streamplane.client import CoordinatorClient, Producer
from streamplane.client import metrics as client_metrics
from streamplane.client.kafka.watermarks import Watermarks
from streamplane.coordinator.rpc import server
from streamplane.coordinator.rpc.auth import TokenIssuer
from streamplane.coordinator.rpc.guard import Guard
from streamplane.coordinator.store import StoreConfig, open_store
from streamplane.coordinator.topology.cluster_admin import RoutingAdmin
from streamplane.devstack.cluster_control import LocalClusterControl
from streamplane.errors import PermissionDeniedError, UnauthenticatedError
from tests.helpers import Proc, RunningConsumer, wait_until

ISSUER = TokenIssuer(b"4" * 64)
FULL = os.environ.get("STREAMPLANE_FULL_SOAK") == "1"
"""The issue's full rotation soak (2 minutes of traffic, 20 s tokens); CI runs a bounded one."""


def token(role: str, subject: str, *, ttl_s: float = 3600, **scope: tuple[str, ...]) -> str:
    return ISSUER.create(subject, role, now_s=time.time(), ttl_s=ttl_s, **scope)


ADMIN = token("admin", "root")


@pytest.fixture
def dlq_home() -> Iterator[tuple[Proc, str, LocalClusterControl]]:
    """A second local cluster, its own process, that a test can kill: where a dlq lane may live."""
    proc = Proc([sys.executable, "-m", "streamplane.devstack.mockcluster", "--name", "dlq-home"])
    info = proc.wait_for(r'"bootstrap_servers": "([^"]+)", "control_endpoint": "([^"]+)"')
    yield proc, info.group(1), LocalClusterControl(info.group(2), name="dlq-home")
    proc.stop()


@pytest.fixture(params=["mock", "kafka"])
def secured(
    request: pytest.FixtureRequest, tmp_path: Path, local_cluster, dlq_home
) -> Iterator[server.RunningCoordinator]:
    """A coordinator with authentication on and clusters east and west on the chosen engine, plus dlq-home."""
    bootstrap, control = local_cluster
    running = server.start(
        open_store(StoreConfig(driver="embedded", data_dir=tmp_path / "store")),
        admin=RoutingAdmin(),
        guard=Guard(ISSUER),
        control_endpoints=[control.endpoint, dlq_home[2].endpoint],
    )
    with CoordinatorClient(running.address, token=ADMIN) as admin:
        for name in ("east", "west"):
            if request.param == "mock":
                cluster = model.Cluster(name, bootstrap, admin=model.ADMIN_LOCAL, control_endpoint=control.endpoint)
            else:
                broker = request.getfixturevalue("real_kafka")
                cluster = model.Cluster(name, broker.bootstrap_servers, admin=model.ADMIN_KAFKA)
            admin.register_cluster(cluster)
        admin.register_cluster(
            model.Cluster("dlq-home", dlq_home[1], admin=model.ADMIN_LOCAL, control_endpoint=dlq_home[2].endpoint)
        )
    yield running
    running.stop(0)


def produce(address: str, stream: str, values: list[bytes]) -> None:
    with Producer(address, token=token("producer", "ingest", streams=(stream,)), **{"linger.ms": 20}) as producer:
        for v in values:
            producer.produce(stream, v, key=v)
        assert producer.flush(60) == 0


def dlq_values(address: str, stream: str, clusters: tuple[str, ...] = ("east", "west")) -> list[bytes]:
    """Every record in the stream's dlq lane on these clusters (what Kafka holds, duplicates included)."""
    with CoordinatorClient(address, token=ADMIN) as client:
        lane = client.describe_stream(stream).require_lane("dlq")
        where = {c.name: c.bootstrap_servers for c in client.list_clusters()}
    from streamplane.client.partition_fetcher import PartitionFetcher

    out: list[bytes] = []
    marks = Watermarks()
    try:
        for gen in lane.generations:
            if gen.cluster not in clusters:
                continue
            for p in range(gen.partitions):
                low, high = marks.get(where[gen.cluster], gen.topic, p)
                fetcher = PartitionFetcher(where[gen.cluster], gen.topic, p, start_offset=low)
                try:
                    while fetcher.position < high:
                        got = fetcher.fetch()
                        if got.batch is not None:
                            out += [bytes(v) for v in got.batch.to_arrow().column("value").to_pylist()]
                finally:
                    fetcher.close()
    finally:
        marks.close()
    return out


def lag_of(address: str, group: str) -> int:
    with CoordinatorClient(address, token=ADMIN) as client:
        lag = client.lag(group)
    return lag.offset_lag if lag.partitions else -1


def test_a_consumer_token_rejects_poison_to_its_dlq_lane_and_its_group_catches_up(secured, crashes) -> None:
    """Before the fix the dlq producer's first heartbeat was refused (a consumer lacked stream.produce), the
    error killed the commit thread, and the worker held its leases without committing anything again."""
    address = secured.address
    with CoordinatorClient(address, token=ADMIN) as admin:
        admin.create_stream("lp-poison", 4, cluster="east")
    poison = {b"poison-%05d" % i for i in range(0, 20_000, 1000)}
    values = [b"poison-%05d" % i if i % 1000 == 0 else b"ok-%05d" % i for i in range(20_000)]
    produce(address, "lp-poison", values)
    worker_token = token("consumer", "lp-worker", streams=("lp-poison",), groups=("lp-workers",))
    worker = RunningConsumer(address, "lp-workers", "lp-poison", reject=b"poison", token=worker_token)
    try:
        wait_until(
            lambda: lag_of(address, "lp-workers") == 0, timeout=120, what=lambda: f"lag {lag_of(address, 'lp-workers')}"
        )
        wait_until(lambda: len(dlq_values(address, "lp-poison")) >= 20, timeout=30)
        assert crashes == []
        assert worker.consumer.error is None and worker.thread.is_alive()
        assert all(t.is_alive() for t in worker.consumer._threads)
    finally:
        worker.stop()
    in_dlq = dlq_values(address, "lp-poison")
    assert sorted(in_dlq) == sorted(poison)  # each poison record once, nothing else
    assert set(worker.seen) == set(values)
    assert worker.raised is None


def test_the_consumer_token_writes_only_the_dlq_lane_of_its_own_streams(secured) -> None:
    address = secured.address
    with CoordinatorClient(address, token=ADMIN) as admin:
        admin.create_stream("lp-mine", 1, cluster="east")
        admin.create_stream("lp-other", 1, cluster="east")
    worker_token = token("consumer", "lp-scoped", streams=("lp-mine",), groups=("g",))
    with Producer(address, token=worker_token) as producer:
        producer.produce("lp-mine", b"rejected", lane="dlq")  # its own stream's dlq lane: allowed
        with pytest.raises(PermissionDeniedError, match=r"lacks stream\.produce on stream/lp-mine"):
            producer.produce("lp-mine", b"x", lane="realtime")
        with pytest.raises(PermissionDeniedError, match="stream/lp-other"):
            producer.produce("lp-other", b"x", lane="dlq")
        assert producer.flush(30) == 0
        assert producer.error is None  # refusals of a lane end no producer: its allowed lanes go on
    assert dlq_values(address, "lp-mine") == [b"rejected"]


def test_a_worker_whose_token_file_rotates_commits_throughout_and_ends_loudly_when_rotation_stops(
    secured, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, crashes
) -> None:
    address = secured.address
    ttl_s, traffic_s = (20, 120) if FULL else (8, 20)
    with CoordinatorClient(address, token=ADMIN) as admin:
        admin.create_stream("lp-rotate", 4, cluster="east")
    path = tmp_path / "token"

    def rotate() -> None:
        fresh = tmp_path / "token.new"
        fresh.write_text(token("consumer", "lp-rotating", ttl_s=ttl_s, streams=("lp-rotate",), groups=("lp-rot",)))
        fresh.replace(path)  # atomically, as Kubernetes swaps a projected token

    rotate()
    rotating = threading.Event()
    rotating.set()

    def rotator() -> None:
        while rotating.is_set():
            time.sleep(ttl_s / 4)  # paces the rotation, as a token service does: no condition to wait on
            if rotating.is_set():
                rotate()

    threading.Thread(target=rotator, daemon=True).start()
    monkeypatch.setenv("STREAMPLANE_TOKEN_FILE", str(path))
    failures_before = (
        client_metrics.REGISTRY.get_sample_value("streamplane_client_commit_failures_total", {"group": "lp-rot"}) or 0.0
    )
    worker = RunningConsumer(address, "lp-rot", "lp-rotate")
    monkeypatch.delenv("STREAMPLANE_TOKEN_FILE")
    sent: list[bytes] = []
    try:
        deadline = time.monotonic() + traffic_s
        with Producer(address, token=token("producer", "ingest", streams=("lp-rotate",))) as producer:
            while time.monotonic() < deadline:
                batch = [b"r-%07d" % (len(sent) + i) for i in range(200)]
                for v in batch:
                    producer.produce("lp-rotate", v, key=v)
                sent += batch
                time.sleep(0.05)  # paces the traffic over the run
            assert producer.flush(60) == 0
        wait_until(lambda: len(worker.seen) >= len(sent), timeout=60, what=lambda: f"{len(worker.seen)}/{len(sent)}")
        wait_until(lambda: lag_of(address, "lp-rot") == 0, timeout=60)
        assert worker.consumer.error is None
        failures = (
            client_metrics.REGISTRY.get_sample_value("streamplane_client_commit_failures_total", {"group": "lp-rot"})
            or 0.0
        )
        assert failures == failures_before, "a commit failed while the token rotated"
        assert set(worker.seen) == set(sent) and max(worker.seen.values()) == 1  # nothing redelivered

        # rotation stops: the token expires, the coordinator ends the session, the worker ends loudly
        other = RunningConsumer(address, "lp-rot", "lp-rotate", token=token("consumer", "lp-other", groups=("lp-rot",)))
        rotating.clear()
        stopped = time.monotonic()
        try:
            wait_until(lambda: worker.raised is not None, timeout=ttl_s + 45, what=lambda: "the worker did not end")
            assert isinstance(worker.raised, UnauthenticatedError), worker.raised
            assert "expired" in str(worker.raised)
            assert time.monotonic() - stopped <= ttl_s + 5 + 15 + 10
            wait_until(lambda: len(other.consumer.leases) == 4, timeout=20, what=lambda: str(other.consumer.leases))
        finally:
            other.stop()
        assert crashes == []
    finally:
        rotating.clear()
        worker.stop()


def test_while_the_dlq_lane_is_down_rejects_wait_and_the_worker_goes_on(secured, dlq_home, crashes) -> None:
    address = secured.address
    proc, _, _ = dlq_home
    with CoordinatorClient(address, token=ADMIN) as admin:
        admin.create_stream("lp-dlqdown", 2, cluster="east")
        admin.failover("lp-dlqdown", "dlq", "dlq-home", reason="the dlq lives apart")
        # the test moves the dlq lane back itself; the autopilot would race it once dlq-home is unhealthy
        admin.set_stream_policy("lp-dlqdown", model.FailoverPolicy(mode="manual"))
    produce(address, "lp-dlqdown", [b"ok-%04d" % i for i in range(1000)])
    worker_token = token("consumer", "lp-dw", streams=("lp-dlqdown",), groups=("lp-dw",))
    worker = RunningConsumer(address, "lp-dw", "lp-dlqdown", reject=b"poison", token=worker_token)
    try:
        wait_until(lambda: lag_of(address, "lp-dw") == 0, timeout=60)
        proc.kill9()  # every broker of the dlq lane's cluster is gone
        poison = [b"poison-%02d" % i for i in range(10)]
        produce(address, "lp-dlqdown", poison + [b"ok-%04d" % i for i in range(1000, 2000)])
        wait_until(lambda: all(worker.seen[b"ok-%04d" % i] for i in range(1000, 2000)), timeout=60)
        assert worker.consumer.error is None and worker.thread.is_alive()  # it goes on with the rest

        def copies_failed() -> float:
            labels = {"group": "lp-dw", "stream": "lp-dlqdown"}
            return client_metrics.REGISTRY.get_sample_value("streamplane_client_dlq_copy_failures_total", labels) or 0

        wait_until(lambda: copies_failed() >= len(poison), timeout=60)  # the copies wait, tried again and again
        assert worker.consumer.error is None and worker.thread.is_alive()
        with CoordinatorClient(address, token=ADMIN) as admin:
            admin.failover("lp-dlqdown", "dlq", "west", reason="the dlq cluster is down")
        wait_until(lambda: len(dlq_values(address, "lp-dlqdown", ("west",))) >= len(poison), timeout=90)
        assert sorted(dlq_values(address, "lp-dlqdown", ("west",))) == sorted(poison)  # each once
        wait_until(lambda: lag_of(address, "lp-dw") == 0, timeout=30)
        assert crashes == [] and worker.consumer.error is None
    finally:
        worker.stop()
