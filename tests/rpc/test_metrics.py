"""The coordinator serves Prometheus metrics that count its calls by method and status."""

from __future__ import annotations

import socket
import sys
import urllib.request
import uuid
from pathlib import Path

import pytest

from streamplane.client.coordinator import CoordinatorClient
from streamplane.errors import NotFoundError
from tests.helpers import Proc, cli, wait_until


def test_metrics_count_calls_by_method_and_code(tmp_path: Path) -> None:
    proc = Proc(
        [
            sys.executable,
            "-m",
            "streamplane.cli.main",
            "coordinator",
            "--data-dir",
            str(tmp_path),
            "--port",
            "0",
            "--metrics-port",
            "0",
        ]
    )
    try:
        started = proc.wait_for(r"coordinator=(\S+) .*metrics=(\S+)")
        address, metrics = started.group(1), started.group(2)
        with CoordinatorClient(address) as client:
            client.list_streams()
            client.list_streams()
            with pytest.raises(NotFoundError):
                client.describe_stream("nope")
        expected = [
            'streamplane_rpc_total{code="OK",method="ListStreams"} 2.0',
            'streamplane_rpc_total{code="NOT_FOUND",method="DescribeStream"} 1.0',
            'streamplane_rpc_seconds_count{method="ListStreams"} 2.0',
        ]

        def scraped() -> str:
            return str(urllib.request.urlopen(f"http://{metrics}/metrics", timeout=5).read().decode())

        # a refused call's status can reach the client a moment before its handler's thread counts it
        wait_until(lambda: all(line in scraped() for line in expected), timeout=10, what=lambda: scraped()[-2000:])
    finally:
        proc.stop()


def test_a_metrics_port_already_taken_is_refused_in_a_sentence(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = cli("coordinator", "--data-dir", str(tmp_path), "--port", "0", "--metrics-port", str(port))
    assert done.returncode == 6, done.stderr
    assert f"cannot serve metrics on 127.0.0.1:{port}" in done.stderr
    assert "coordinator=" not in done.stdout


def test_failovers_cluster_health_and_generations_are_exported(coordinator, local_cluster) -> None:
    """The series the dashboard and the alert rules read move with the fleet: a failover by an operator is
    counted, a cordon and the fleet's freeze show, and generations are counted by cluster and state."""
    from prometheus_client import REGISTRY, generate_latest

    from streamplane import model

    bootstrap, control = local_cluster
    stream = f"metrics-{uuid.uuid4().hex[:6]}"
    with CoordinatorClient(coordinator.address) as client:
        for name in ("m-east", "m-west"):
            client.register_cluster(
                model.Cluster(name, bootstrap, admin=model.ADMIN_LOCAL, control_endpoint=control.endpoint)
            )
        client.create_stream(stream, partitions=2, cluster="m-east")
        client.failover(stream, "realtime", "m-west", reason="rehearsal")
        client.cordon_cluster("m-east")
        client.set_fleet_policy(model.FleetPolicy(frozen=True))
    text = generate_latest(REGISTRY).decode()
    assert f'streamplane_failovers_total{{by="operator",lane="realtime",stream="{stream}"}} 1.0' in text
    assert 'streamplane_cluster_cordoned{cluster="m-east"} 1.0' in text
    assert 'streamplane_cluster_health{cluster="m-west",state="healthy"} 1.0' in text
    assert "streamplane_fleet_frozen 1.0" in text
    # the old generation: draining, or already sealed (no producer holds it back, and each event above wakes
    # the sealer), or drained too (it is empty)
    assert any(
        f'streamplane_generations{{cluster="m-east",state="{state}"}} 1.0' in text
        for state in ("draining", "sealed", "drained")
    )
    assert 'streamplane_generations{cluster="m-west",state="active"} 1.0' in text
