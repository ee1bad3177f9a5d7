"""WatchTopology and WatchGroup: every later event exactly once, in order, live and across a restart; group
churn in each group's own log, never in the topology's."""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from streamplane import model
from streamplane.client.coordinator import CoordinatorClient
from streamplane.errors import InvalidArgumentError, UnavailableError
from tests.helpers import cli, register_local_clusters, start_coordinator


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
        all_events = list(client.watch_topology("", follow=False))
        later = list(client.watch_topology(all_events[0].version, follow=False))
    assert _names(later) == ["b2", "b3"]


def test_watcher_resumed_after_restart_gets_exactly_the_missed_events(tmp_path: Path) -> None:
    proc, address = start_coordinator(tmp_path)
    try:
        with CoordinatorClient(address) as client:
            _register(client, ["r1", "r2"])
            seen = list(client.watch_topology("", follow=False))
    finally:
        proc.kill9()
    assert _names(seen) == ["r1", "r2"]
    last = seen[-1].version

    proc, address = start_coordinator(tmp_path)
    try:
        with CoordinatorClient(address) as client:
            _register(client, ["r3", "r4", "r5"])
            resumed = list(client.watch_topology(last, follow=False))
    finally:
        proc.stop()
    assert _names(resumed) == ["r3", "r4", "r5"]
    assert all(e.version > last for e in resumed)


@pytest.mark.parametrize("bad", ["xyz", "00", "0" * 23 + "g"])
def test_malformed_from_version_is_invalid_argument(coordinator, bad: str) -> None:
    with CoordinatorClient(coordinator.address) as client, pytest.raises(InvalidArgumentError, match="from_version"):
        list(client.watch_topology(bad, follow=False))


def test_watch_stream_ends_cleanly_when_the_server_stops(tmp_path: Path) -> None:
    proc, address = start_coordinator(tmp_path)
    with CoordinatorClient(address) as client:
        _register(client, ["s1"])
        watch = client.watch_topology("")
        # The stream must be live first: a call still waiting for its connection when the server goes away is
        # queued by gRPC until a server is back (what a client wants across a restart), not failed.
        first = next(watch)
        assert isinstance(first, model.ClusterRegistered) and first.cluster.name == "s1"
        started = time.monotonic()
        proc.stop()
        with contextlib.suppress(UnavailableError):  # ended by the server (cancelled) or unreachable: both clean
            for _ in watch:
                pass
    assert time.monotonic() - started < 30


def _topology_log(client: CoordinatorClient) -> list[model.TopologyEvent]:
    """The topology log as it stands, without the health monitor's own events (which may come at any time)."""
    return [e for e in client.watch_topology("", follow=False) if not isinstance(e, model.ClusterHealthChanged)]


def test_a_log_read_without_follow_ends_at_its_head_however_slow_the_store(coordinator, monkeypatch) -> None:
    """`streamplane events` without --follow printed what came before a second without an event: a store
    slower than that to answer (a loaded machine, a distant database) printed nothing, and said so with exit 0.
    The coordinator now ends the call at the log's head, however long reading it takes."""
    from streamplane.coordinator.topology.topology import Topology

    with CoordinatorClient(coordinator.address) as client:
        _register(client, ["h1", "h2"])
        read = Topology.read_events_and_watch

        def slow(self: Topology, after: bytes | None, limit: int = 1000) -> Any:
            time.sleep(1.5)  # longer than the one second of idleness the CLI used to wait
            return read(self, after, limit)

        monkeypatch.setattr(Topology, "read_events_and_watch", slow)
        assert _names(list(client.watch_topology("", follow=False))) == ["h1", "h2"]
        shown = cli("events", "--kind", "cluster_registered", coordinator=coordinator.address)
    assert shown.returncode == 0, shown.stderr
    names = [line.partition("cluster_registered ")[2].split(" ")[0] for line in shown.stdout.splitlines()]
    assert names == ["h1", "h2"] and "2 event(s) shown" in shown.stderr, (shown.stdout, shown.stderr)


def test_a_group_has_a_log_of_its_own_and_topology_watchers_never_see_its_churn(coordinator, local_cluster) -> None:
    from streamplane.client import WorkerSession

    bootstrap, control = local_cluster
    register_local_clusters(coordinator.address, bootstrap, control.endpoint, ("g1",))
    with CoordinatorClient(coordinator.address) as client:
        client.create_stream("churn", 2, cluster="g1")
        topology_before = _topology_log(client)
        live: queue.Queue[model.GroupChanged] = queue.Queue()

        def follow() -> None:
            for event in client.watch_group("churners"):
                live.put(event)

        threading.Thread(target=follow, daemon=True).start()
        session = WorkerSession(coordinator.address, group="churners", worker_id="w1", subscriptions={"churn": []})
        session.join()
        threading.Thread(target=lambda: [None for _ in session.events()], daemon=True).start()
        got = [live.get(timeout=10) for _ in range(3)]  # joined, then both partitions granted
        session.close()
        got.append(live.get(timeout=10))
        assert [(e.change, e.worker_id) for e in got[:1]] == [("member_joined", "w1")]
        assert sorted(e.lease_id for e in got[1:3]) == ["churn/realtime/g1/p0", "churn/realtime/g1/p1"]
        assert {e.change for e in got[1:3]} == {"lease_granted"} and all(e.group == "churners" for e in got)
        assert [e.version for e in got] == sorted(e.version for e in got)
        history = list(client.watch_group("churners", follow=False))
        assert history[: len(got)] == got, "the log replays what the live watcher saw"
        later = list(client.watch_group("churners", got[1].version, follow=False))
        assert later[:2] == got[2:4]
        assert list(client.watch_group("nobody-here", follow=False)) == []
        assert _topology_log(client) == topology_before, "no group churn here"
        with pytest.raises(InvalidArgumentError, match="group"):
            list(client.watch_group("Bad Group", follow=False))


def test_group_events_an_older_store_kept_in_the_topology_log_are_skipped(coordinator) -> None:
    import json

    from streamplane.coordinator import keys

    def legacy(tr) -> None:  # what a coordinator before the group logs wrote
        body = {"type": "group_event", "time_ms": 1, "actor": "old", "data": {"group": "g", "type": "member_joined"}}
        tr.set_versionstamped_key(keys.event_key_incomplete(), json.dumps(body).encode())
        tr.add(keys.EVENT_HEAD, 1)

    with CoordinatorClient(coordinator.address) as client:
        _register(client, ["l1"])
        coordinator.db.transact(legacy)
        _register(client, ["l2"])
        seen = list(client.watch_topology("", follow=False))
    # the health monitor may record the unreachable l1 and l2 meanwhile: those events are the log's own
    logged = [e for e in seen if not isinstance(e, model.ClusterHealthChanged)]
    assert _names(seen) == ["l1", "l2"] and len(logged) == 2
