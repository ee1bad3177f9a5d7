"""WatchTopology: every later event exactly once, in order, live and across a coordinator restart."""

from __future__ import annotations

import queue
import threading
import time
from pathlib import Path

import grpc
import pytest

from streamplane import model
from streamplane.client.coordinator import CoordinatorClient
from streamplane.errors import InvalidArgumentError
from streamplane.v1 import topology_pb2 as pb
from tests.helpers import start_coordinator


def _register(client: CoordinatorClient, names: list[str]) -> None:
    for name in names:
        client.register_cluster(model.Cluster(name=name, bootstrap_servers=f"{name}:9092"))


def _names(events: list[model.TopologyEvent]) -> list[str]:
    return [e.cluster.name for e in events if isinstance(e, model.ClusterRegistered)]


def test_watch_delivers_history_then_live_events_in_order(coordinator) -> None:
    with CoordinatorClient(coordinator.address) as client:
        _register(client, ["a1", "a2"])
        received: queue.Queue[model.TopologyEvent] = queue.Queue()

        def follow() -> None:
            for event in client.watch_topology(""):
                received.put(event)

        threading.Thread(target=follow, daemon=True).start()
        got = [received.get(timeout=5), received.get(timeout=5)]
        started = time.monotonic()
        _register(client, ["a3"])
        got.append(received.get(timeout=5))
        latency = time.monotonic() - started
        _register(client, ["a4", "a5"])
        got += [received.get(timeout=5), received.get(timeout=5)]
    assert _names(got) == ["a1", "a2", "a3", "a4", "a5"]
    assert [e.version for e in got] == sorted(e.version for e in got)
    assert latency < 1.0
    assert received.empty()


def test_watch_from_a_version_skips_what_came_before(coordinator) -> None:
    with CoordinatorClient(coordinator.address) as client:
        _register(client, ["b1", "b2", "b3"])
        all_events = list(client.watch_topology("", idle_timeout_s=0.5))
        later = list(client.watch_topology(all_events[0].version, idle_timeout_s=0.5))
    assert _names(later) == ["b2", "b3"]


def test_watcher_resumed_after_restart_gets_exactly_the_missed_events(tmp_path: Path) -> None:
    proc, address = start_coordinator(tmp_path)
    try:
        with CoordinatorClient(address) as client:
            _register(client, ["r1", "r2"])
            seen = list(client.watch_topology("", idle_timeout_s=0.5))
    finally:
        proc.kill9()
    assert _names(seen) == ["r1", "r2"]
    last = seen[-1].version

    proc, address = start_coordinator(tmp_path)
    try:
        with CoordinatorClient(address) as client:
            _register(client, ["r3", "r4", "r5"])
            resumed = list(client.watch_topology(last, idle_timeout_s=0.5))
    finally:
        proc.stop()
    assert _names(resumed) == ["r3", "r4", "r5"]
    assert all(e.version > last for e in resumed)


@pytest.mark.parametrize("bad", ["xyz", "00", "0" * 23 + "g"])
def test_malformed_from_version_is_invalid_argument(coordinator, bad: str) -> None:
    with CoordinatorClient(coordinator.address) as client, pytest.raises(InvalidArgumentError, match="from_version"):
        list(client.watch_topology(bad, idle_timeout_s=1))


def test_watch_stream_ends_cleanly_when_the_server_stops(tmp_path: Path) -> None:
    proc, address = start_coordinator(tmp_path)
    channel = grpc.insecure_channel(address)
    from streamplane.v1 import topology_pb2_grpc

    with CoordinatorClient(address) as client:
        _register(client, ["s1"])
    # The deadline only bounds a broken run; a clean stop ends the stream long before it.
    call = topology_pb2_grpc.TopologyServiceStub(channel).WatchTopology(pb.WatchTopologyRequest(), timeout=60)
    try:
        # The stream must be live first: a call still waiting for its connection when the server goes away is
        # queued by gRPC until a server is back (what a client wants across a restart), not failed.
        assert next(call).cluster_registered.name == "s1"
        started = time.monotonic()
        proc.stop()
        with pytest.raises(grpc.RpcError) as info:
            for _ in call:
                pass
    finally:
        channel.close()
    assert info.value.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED)
    assert time.monotonic() - started < 30
