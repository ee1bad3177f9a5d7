"""The coordinator serves Prometheus metrics that count its calls by method and status."""

from __future__ import annotations

import sys
import urllib.request
from pathlib import Path

import pytest

from streamplane.client.coordinator import CoordinatorClient
from streamplane.errors import NotFoundError
from tests.helpers import Proc, free_port


def test_metrics_count_calls_by_method_and_code(tmp_path: Path) -> None:
    port = free_port()
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
            str(port),
        ]
    )
    try:
        address = proc.wait_for(r"coordinator=(\S+)").group(1)
        with CoordinatorClient(address) as client:
            client.list_streams()
            client.list_streams()
            with pytest.raises(NotFoundError):
                client.describe_stream("nope")
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    finally:
        proc.stop()
    assert 'streamplane_rpc_total{code="OK",method="ListStreams"} 2.0' in text
    assert 'streamplane_rpc_total{code="NOT_FOUND",method="DescribeStream"} 1.0' in text
    assert 'streamplane_rpc_seconds_count{method="ListStreams"} 2.0' in text
