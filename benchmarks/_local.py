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
