"""Coordinator replicas on one PostgreSQL store (issue 36): each replica its own process, clients given every
address. A replica's death costs its sessions a reconnect, never a redelivery."""

from __future__ import annotations

import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from streamplane.client import Consumer, CoordinatorClient, Message, Producer
from streamplane.coordinator.rpc import server
from streamplane.coordinator.store import StoreConfig, open_store
from tests.helpers import Relay, register_local_clusters, start_coordinator, wait_until


def test_a_replica_killed_under_a_consumer_costs_a_reconnect_and_redelivers_nothing(
    postgres, local_cluster, tmp_path: Path
) -> None:
    bootstrap, control = local_cluster
    url = postgres.create_database()
    replicas = [
        start_coordinator(tmp_path / f"r{i}", control_endpoints=[control.endpoint], store=url) for i in range(2)
    ]
    both = ",".join(address for _, address in replicas)
    try:
        register_local_clusters(replicas[0][1], bootstrap, control.endpoint, ("east",))
        with CoordinatorClient(both) as client:
            client.create_stream("ha-s", 4, cluster="east")

        def produce(lo: int, hi: int) -> None:
            with Producer(both, **{"linger.ms": 5}) as producer:
                for i in range(lo, hi):
                    producer.produce("ha-s", b"%d" % i, key=b"%d" % i)
                assert producer.flush(30) == 0

        seen: Counter[bytes] = Counter()
        lock, stop = threading.Lock(), threading.Event()

        def handle(msg: Message) -> None:
            with lock:
                seen[msg.value] += 1

        with Consumer(both, group="ha-g", stream="ha-s", commit_interval_s=0.05) as consumer:
            runner = threading.Thread(target=consumer.run, args=(handle,), kwargs={"stop": stop}, daemon=True)
            runner.start()
            produce(0, 2000)
            wait_until(lambda: len(seen) == 2000, timeout=60, what=lambda: f"{len(seen)} of 2000")

            def committed() -> bool:
                with CoordinatorClient(both) as client:
                    lag = client.lag("ha-g")
                return len(lag.partitions) == 4 and lag.offset_lag == 0

            wait_until(committed, timeout=30)
            replicas[0][0].kill9()  # the replica the consumer's channel picked first
            produce(2000, 4000)
            wait_until(lambda: len(seen) == 4000, timeout=90, what=lambda: f"{len(seen)} of 4000")
            wait_until(committed, timeout=60)
            stop.set()
            runner.join(10)
            assert consumer.error is None
        assert set(seen) == {b"%d" % i for i in range(4000)}
        redelivered = sum(n - 1 for n in seen.values())
        print(f"replica kill -9: redelivered={redelivered}")
        assert redelivered == 0
    finally:
        for proc, _ in replicas:
            proc.stop()


def test_the_go_client_given_every_replica_moves_past_dead_ones(postgres, tmp_path: Path) -> None:
    """Dial with a list: the first address has nothing listening, and later the first live replica dies; each
    time the Go client reaches a live one by itself."""
    import os
    import shutil
    import subprocess

    from tests.helpers import REPO, free_port

    go = shutil.which("go")
    if go is None:
        pytest.skip("the Go client is not exercised: no Go toolchain on this machine")
    url = postgres.create_database()
    replicas = [start_coordinator(tmp_path / f"r{i}", store=url) for i in range(2)]
    listing = ",".join([f"127.0.0.1:{free_port()}", *(address for _, address in replicas)])

    def whoami() -> subprocess.CompletedProcess[str]:
        base = {k: v for k, v in os.environ.items() if not k.startswith(("STREAMPLANE_TOKEN", "STREAMPLANE_TLS"))}
        return subprocess.run(
            [go, "test", "-count=1", "-v", "-run", "TestWhoAmI", "."],
            cwd=REPO / "clients" / "go",
            env={**base, "STREAMPLANE_COORDINATOR": listing},
            capture_output=True,
            text=True,
            timeout=300,
        )

    try:
        done = whoami()
        assert done.returncode == 0 and "whoami name=" in done.stdout, done.stdout[-2000:] + done.stderr[-2000:]
        replicas[0][0].kill9()
        done = whoami()
        assert done.returncode == 0 and "whoami name=" in done.stdout, done.stdout[-2000:] + done.stderr[-2000:]
    finally:
        for proc, _ in replicas:
            proc.stop()


def test_a_spark_query_given_every_replica_reads_and_records_its_progress_past_a_dead_one(
    spark, postgres, local_cluster, tmp_path: Path
) -> None:
    """The source's `coordinator` option and its progress listener take the replica list: with the first
    replica killed before the query starts, the query reads everything and its group's lag reaches zero."""
    bootstrap, control = local_cluster
    url = postgres.create_database()
    replicas = [
        start_coordinator(tmp_path / f"r{i}", control_endpoints=[control.endpoint], store=url) for i in range(2)
    ]
    both = ",".join(address for _, address in replicas)
    try:
        register_local_clusters(replicas[0][1], bootstrap, control.endpoint, ("east",))
        with CoordinatorClient(both) as client:
            client.create_stream("ha-spark", 2, cluster="east")
        with Producer(both, **{"linger.ms": 5}) as producer:
            for i in range(500):
                producer.produce("ha-spark", b"%d" % i, key=b"%d" % i)
            assert producer.flush(30) == 0
        replicas[0][0].kill9()
        query = (
            spark.readStream.format("streamplane")
            .option("coordinator", both)
            .option("stream", "ha-spark")
            .load()
            .writeStream.format("parquet")
            .option("path", str(tmp_path / "data"))
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .queryName("ha_spark")
            .trigger(availableNow=True)
            .start()
        )
        assert query.awaitTermination(120) and query.exception() is None
        got = {bytes(r.value) for r in spark.read.parquet(str(tmp_path / "data")).select("value").collect()}
        assert got == {b"%d" % i for i in range(500)}

        def caught_up() -> bool:
            with CoordinatorClient(both) as client:
                lag = client.lag("spark-ha_spark")
            return len(lag.partitions) == 2 and lag.offset_lag == 0

        wait_until(caught_up, timeout=30, what=lambda: "the query's progress was not recorded")
    finally:
        for proc, _ in replicas:
            proc.stop()


def test_a_replica_that_stops_answering_is_left_within_seconds_not_at_the_deadline(tmp_path: Path) -> None:
    """A SIGSTOPped replica, or one behind a black-holed link, keeps its TCP connections open: the client's
    pings find it out and its calls go to the next replica, long before their 30 s deadline."""
    running = server.start(open_store(StoreConfig(driver="embedded", data_dir=tmp_path / "store")))
    first, second = Relay(running.address), Relay(running.address)
    try:
        with CoordinatorClient(f"{first.address},{second.address}") as client:
            client.list_clusters()  # connected to the first replica
            first.stall()
            began = time.monotonic()
            assert client.list_clusters() == []
            assert time.monotonic() - began < 10, "the call waited on the stopped replica"
    finally:
        first.close()
        second.close()
        running.stop(0)


def test_the_go_client_leaves_a_replica_that_stops_answering(tmp_path: Path) -> None:
    """The Go client's keepalive: its replica stops answering (a stalled relay, as a SIGSTOPped replica looks);
    the call under way fails UNAVAILABLE long before its 30 s deadline (grpc-go pings at most every 10 s, so
    after about 12 s), and the call asked again reaches the other replica."""
    import shutil

    from tests.helpers import REPO, Proc

    go = shutil.which("go")
    if go is None:
        pytest.skip("the Go client is not exercised: no Go toolchain on this machine")
    running = server.start(open_store(StoreConfig(driver="embedded", data_dir=tmp_path / "store")))
    first, second = Relay(running.address), Relay(running.address)
    stalled = tmp_path / "stalled"
    env = {"STREAMPLANE_COORDINATOR": f"{first.address},{second.address}", "STREAMPLANE_GO_STALLED": str(stalled)}
    command = [go, "test", "-count=1", "-v", "-run", "TestWhoAmIAcrossAStall", "."]
    asker = Proc(command, env=env, cwd=REPO / "clients" / "go")
    try:
        asker.wait_for("asked once", timeout=240)  # the first run compiles
        first.stall()
        stalled.touch()
        took = float(asker.wait_for(r"asked again in ([\d.]+) s", timeout=60).group(1))
        assert took < 20, f"the Go client waited {took} s on the stopped replica"
        assert asker.popen.wait(timeout=60) == 0
    finally:
        if asker.popen.poll() is None:
            asker.popen.kill()
        first.close()
        second.close()
        running.stop(0)
