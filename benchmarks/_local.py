"""Shared by the benchmarks: a local Kafka-protocol cluster in a subprocess for the duration of a run."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from streamplane.devstack.control import LocalClusterControl


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
def coordinator_process(data_dir: str, control: LocalClusterControl | None = None) -> Iterator[Address]:
    """The address of a coordinator in its own process (as in production: it does not share our GIL), which
    lets the local cluster behind `control` be registered."""
    import os

    allow = ["--allow-control-endpoint", control.endpoint] if control is not None else []
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
