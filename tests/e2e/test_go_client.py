"""The gRPC API from another language: a Go worker (clients/go, franz-go for Kafka) and a Python worker share
one consumer group on the local stack, through a rebalance, and every record is processed once. As in
production, authentication is on: each worker holds a `consumer` token scoped to the group and the stream,
the producer a `producer` token."""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from streamplane import model
from streamplane.client import Consumer, CoordinatorClient, Message, Producer
from streamplane.coordinator.rpc import server
from streamplane.coordinator.rpc.auth import TokenIssuer
from streamplane.coordinator.rpc.guard import Guard
from streamplane.coordinator.store import StoreConfig, open_store
from streamplane.coordinator.topology.cluster_admin import RoutingAdmin
from tests.helpers import REPO, wait_until

GO_CLIENT = REPO / "clients" / "go"
RECORDS = 4000


ISSUER = TokenIssuer(b"6" * 64)


def token(role: str, subject: str, **scope: tuple[str, ...]) -> str:
    return ISSUER.create(subject, role, now_s=time.time(), ttl_s=3600, **scope)


@pytest.fixture
def secured(tmp_path: Path, local_cluster) -> Iterator[str]:
    running = server.start(
        open_store(StoreConfig(driver="embedded", data_dir=tmp_path / "store")),
        admin=RoutingAdmin(),
        guard=Guard(ISSUER),
        control_endpoints=[local_cluster[1].endpoint],
    )
    yield running.address
    running.stop(0)


def test_a_go_worker_and_a_python_worker_share_a_group_and_process_every_record_once(
    secured: str, local_cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    go = shutil.which("go")
    if go is None:
        pytest.skip("the Go client is not exercised: no Go toolchain on this machine")
    bootstrap, control = local_cluster
    address = secured
    monkeypatch.setenv("STREAMPLANE_TOKEN", token("viewer", "go-test-observer"))  # the test's own looks
    with CoordinatorClient(address, token=token("admin", "root")) as admin:
        for name in ("east",):
            admin.register_cluster(
                model.Cluster(name, bootstrap, admin=model.ADMIN_LOCAL, control_endpoint=control.endpoint)
            )
        admin.create_stream("go-mix", 4, cluster="east")
    worker_token = token("consumer", "go-mix-worker", streams=("go-mix",), groups=("go-g",))

    def produce(lo: int, hi: int) -> None:
        ingest = token("producer", "go-ingest", streams=("go-mix",))
        with Producer(address, token=ingest, **{"linger.ms": 5}) as producer:
            for i in range(lo, hi):
                producer.produce("go-mix", b"r%d" % i, key=b"%d" % i)
            assert producer.flush(30) == 0

    python_seen: list[tuple[bytes, str, int]] = []
    lock, stop = threading.Lock(), threading.Event()

    def handle(msg: Message) -> None:
        with lock:
            python_seen.append((msg.value, msg.lease_id, msg.epoch))

    out, stop_file = tmp_path / "go.out", tmp_path / "go.stop"
    env = {
        **os.environ,
        "STREAMPLANE_COORDINATOR": address,
        "STREAMPLANE_GO_WORKER_OUT": str(out),
        "STREAMPLANE_GO_WORKER_STOP": str(stop_file),
        "STREAMPLANE_GO_WORKER_GROUP": "go-g",
        "STREAMPLANE_GO_WORKER_STREAM": "go-mix",
        "STREAMPLANE_TOKEN": worker_token,
    }

    def go_seen() -> list[bytes]:
        return [line.split(b" ")[0] for line in out.read_bytes().splitlines()] if out.exists() else []

    def processed() -> Counter[bytes]:
        with lock:
            return Counter([v for v, _, _ in python_seen] + go_seen())

    with Consumer(address, group="go-g", stream="go-mix", worker_id="py-worker", token=worker_token) as consumer:
        runner = threading.Thread(target=consumer.run, args=(handle,), kwargs={"stop": stop}, daemon=True)
        runner.start()
        produce(0, RECORDS // 2)
        wait_until(lambda: len(processed()) == RECORDS // 2, timeout=30)
        worker = subprocess.Popen(
            [go, "test", "-count=1", "-run", "TestGroupWorker", "."],
            cwd=GO_CLIENT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:

            def go_holds() -> bool:
                with CoordinatorClient(address) as client:
                    leases = client.describe_group("go-g").leases
                return any(x.worker_id == "go-worker" and x.state == "granted" for x in leases)

            wait_until(lambda: go_holds() or worker.poll() is not None, timeout=120)  # the first run compiles
            assert worker.poll() is None, worker.communicate()[0][-2000:]
            produce(RECORDS // 2, RECORDS)
            wait_until(
                lambda: len(processed()) == RECORDS,
                timeout=60,
                what=lambda: f"{RECORDS - len(processed())} of {RECORDS} not processed",
            )
            with CoordinatorClient(address) as client:
                wait_until(lambda: client.lag("go-g").offset_lag == 0, timeout=30)
        finally:
            stop_file.touch()
            output, _ = worker.communicate(timeout=60)
        stop.set()
        runner.join(15)
    assert worker.returncode == 0, output[-2000:]
    counts = processed()
    assert set(counts) == {b"r%d" % i for i in range(RECORDS)}
    twice = {v: n for v, n in counts.items() if n > 1}
    assert not twice, f"{len(twice)} records processed more than once, e.g. {list(twice.items())[:5]}"
    go_records = len(go_seen())
    print(f"\nGo worker {go_records} records, Python worker {len(python_seen)}; each of {RECORDS} once")
    assert go_records > 0 and len(python_seen) > RECORDS // 2, "both workers of the group processed records"
