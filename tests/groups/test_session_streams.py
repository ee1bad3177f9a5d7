"""Worker sessions at fleet scale on one replica: each open session costs a coroutine on the event loop, not a
server thread, and a session whose worker falls silent ends at its TTL."""

from __future__ import annotations

import threading

from benchmarks._session_fleet import SessionFleet
from streamplane.client.coordinator import CoordinatorClient
from streamplane.coordinator.rpc import server
from tests.helpers import register_local_clusters, wait_until

SESSIONS = 400
PARTITIONS = 64


def test_hundreds_of_sessions_take_no_thread_each_and_silent_ones_end_at_their_ttl(
    coordinator: server.RunningCoordinator, local_cluster
) -> None:
    bootstrap, control = local_cluster
    register_local_clusters(coordinator.address, bootstrap, control.endpoint, ["c"])
    with CoordinatorClient(coordinator.address) as client:
        client.create_stream("fleet", PARTITIONS)
        before = threading.active_count()
        fleet = SessionFleet(coordinator.address, "g", ["fleet"], SESSIONS)
        fleet.start(timeout_s=60)
        wait_until(lambda: fleet.held() == PARTITIONS, timeout=60, what=lambda: f"{fleet.held()} held")
        members = client.describe_group("g").members
        assert len(members) == SESSIONS
        # the load generator's one thread, the loop's few blocking-work threads: nothing per session
        grown = threading.active_count() - before
        assert grown <= 24, f"{grown} threads more with {SESSIONS} sessions open"
        assert fleet.ended == [], fleet.ended[:3]
        holders = {x.worker_id for x in client.describe_group("g").leases}
        assert len(holders) == PARTITIONS, "one partition each: the fleet is balanced"

        fleet.stop()  # the workers fall silent with their streams open (as a hung host would)
        ttl_s = coordinator.assigner.config.ttl_ms / 1000
        wait_until(
            lambda: not client.describe_group("g").members,
            timeout=ttl_s + 10,
            what=lambda: f"{len(client.describe_group('g').members)} members left",
        )
