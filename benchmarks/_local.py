"""Shared by the benchmarks: a local Kafka-protocol cluster in a subprocess for the duration of a run."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from streamplane.devstack.cluster_control import LocalClusterControl


@contextmanager
def cleaned_up_on_sigterm() -> Iterator[None]:
    """SIGTERM (what `timeout` sends) ends the run through its cleanups, as Ctrl-C does: a Kafka broker runs in
    a session of its own and would otherwise outlive a benchmark killed by the signal's default action."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, _frame: object) -> None:
        raise SystemExit(f"stopped by signal {signum}")

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextmanager
def local_cluster(brokers: int = 1) -> Iterator[tuple[str, LocalClusterControl]]:
    """(bootstrap servers, control channel) of a fresh local cluster, stopped afterwards."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamplane.devstack.mockcluster", "--brokers", str(brokers)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        if not line:
            raise SystemExit("the local cluster did not start")
        info = json.loads(line)
        yield info["bootstrap_servers"], LocalClusterControl(info["control_endpoint"])
    finally:
        proc.terminate()
        proc.wait(timeout=10)


class Address(str):
    """A coordinator's host:port that also knows the coordinator's process id (to measure what it costs)."""

    pid: int


@contextmanager
def coordinator_process(data_dir: str, *controls: LocalClusterControl | None) -> Iterator[Address]:
    """The address of a coordinator in its own process (as in production: it does not share our GIL), which
    lets the local clusters behind `controls` be registered."""
    import os

    allow = [arg for c in controls if c is not None for arg in ("--allow-control-endpoint", c.endpoint)]
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamplane.cli.main", "coordinator", "--data-dir", data_dir, "--port", "0", *allow],
        env={**os.environ, "STREAMPLANE_LOG_LEVEL": "warning"},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        if not line.startswith("coordinator="):
            raise SystemExit("the coordinator did not start")
        address = Address(line.split()[0].split("=", 1)[1])
        address.pid = proc.pid
        yield address
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def register_local(client: object, bootstrap: str, control: LocalClusterControl, name: str = "local") -> None:
    """Register a local cluster with a coordinator (through a CoordinatorClient)."""
    from streamplane.model import ADMIN_LOCAL, Cluster

    client.register_cluster(  # type: ignore[attr-defined]
        Cluster(name=name, bootstrap_servers=bootstrap, admin=ADMIN_LOCAL, control_endpoint=control.endpoint)
    )


@dataclass(frozen=True)
class Engine:
    """A Kafka engine for a benchmark: where it is, how to register it (as "local"), how to make a plain topic
    (for a peer client), and its control channel when it is the local mock cluster."""

    bootstrap: str
    register: Callable[[object], None]
    create_topic: Callable[[str, int], None]
    control: LocalClusterControl | None


@contextmanager
def engine(kind: str, *, brokers: int = 3, heap_mb: int = 768) -> Iterator[Engine]:
    """A real Apache Kafka broker (`kind` "kafka", from Maven Central) or librdkafka's mock cluster ("mock",
    `brokers` of them), stopped afterwards."""
    if kind == "mock":
        with local_cluster(brokers) as (bootstrap, control):
            yield Engine(
                bootstrap,
                lambda client: register_local(client, bootstrap, control, "local"),
                control.create_topic,
                control,
            )
        return
    from streamplane.coordinator.topology.cluster_admin import KafkaAdmin
    from streamplane.devstack.kafka import KafkaBroker
    from streamplane.model import Cluster

    with cleaned_up_on_sigterm(), tempfile.TemporaryDirectory() as tmp:
        broker = KafkaBroker(Path(tmp), heap_mb=heap_mb).start()
        try:
            cluster = Cluster(name="local", bootstrap_servers=broker.bootstrap_servers)
            yield Engine(
                broker.bootstrap_servers,
                lambda client: client.register_cluster(cluster),  # type: ignore[attr-defined]
                lambda name, partitions: KafkaAdmin().ensure_topic(cluster, name, partitions),
                None,
            )
        finally:
            broker.stop()
