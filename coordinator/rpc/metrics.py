"""The coordinator's Prometheus metrics and their HTTP endpoint (/metrics).

Counters are bumped after a change commits (never inside a transaction body); gauges that describe state
(cluster health, generations) are read from the store when Prometheus scrapes, and lag from the replica's lag
sweep (`lag_sweep`), so a scrape reads no commit log. `compose/grafana/` and
`compose/prometheus/` query these names, and a test checks that they exist.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import structlog
from prometheus_client import REGISTRY, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily

from streamplane.coordinator.topology.health import DEGRADED, HEALTHY, UNHEALTHY
from streamplane.model import GENERATION_STATES, Cluster, FleetPolicy, Lag

log = structlog.get_logger(__name__)
T = TypeVar("T")

RPCS = Counter("streamplane_rpc_total", "gRPC calls handled, by method and status code", ["method", "code"])
RPC_SECONDS = Histogram(
    "streamplane_rpc_seconds",
    "gRPC unary call latency, by method",
    ["method"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
)


COMMITS = Counter("streamplane_commits_total", "Commits applied to the commit log, by group", ["group"])
ACKED = Counter("streamplane_acked_offsets_total", "Offsets newly done (acked or rejected), by group", ["group"])
RETRIES = Counter("streamplane_retries_total", "Retry entries in commits, by group", ["group"])
REJECTS = Counter("streamplane_rejects_total", "Reject entries in commits, by group", ["group"])
STALE_EPOCH = Counter(
    "streamplane_stale_epoch_refusals_total", "Calls refused for a stale lease epoch, by group", ["group"]
)


FAILOVERS = Counter(
    "streamplane_failovers_total",
    "Lanes failed over to a new generation, by stream, lane and who moved them (autopilot or operator)",
    ["stream", "lane", "by"],
)
LOOP_FAILURES = Counter(
    "streamplane_loop_pass_failures_total",
    "Background passes (assigner, sealer, autopilot) that failed: 'failed' on a store or cluster error, "
    "'crashed' on a bug. A pass that fails for one cluster or stream skips it instead; this counts whole passes, "
    "and 'group_failed' one group's part of the Assigner's pass (the other groups' go on)",
    ["loop", "kind"],
)
LEASE_GRANTS = Counter("streamplane_lease_grants_total", "Leases granted by the Assigner, by group", ["group"])
LEASE_MOVES = Counter(
    "streamplane_lease_moves_total", "Held leases the Assigner moved to another worker to balance load", ["group"]
)
SLICES = Gauge(
    "streamplane_slices",
    "Slice leases of the group's split partitions (each slice holder fetches the whole partition: a split into N "
    "multiplies its fetch bytes by N)",
    ["group"],
)


def _read(source: Callable[[], T] | None) -> T | None:
    """What a collector's source says, or None: a scrape never fails (a store that is down or closed shows
    as missing series, and the coordinator's logs say why)."""
    if source is None:
        return None
    try:
        return source()
    except Exception as err:
        log.warning("metrics.source_failed", error=str(err)[:200])
        return None


class LagCollector:
    """Time and offset lag per group, stream and lane, as the lag sweep last read them (time lag as of now)."""

    def __init__(self) -> None:
        self.source: Callable[[], Lag] | None = None

    def collect(self) -> Any:
        time_lag = GaugeMetricFamily(
            "streamplane_time_lag_seconds",
            "Now minus the ingestion time of the oldest record not yet processed",
            labels=["group", "stream", "lane"],
        )
        offset_lag = GaugeMetricFamily(
            "streamplane_offset_lag", "Records not yet processed", labels=["group", "stream", "lane"]
        )
        lag = _read(self.source)
        for lane in lag.lanes if lag else ():
            time_lag.add_metric([lane.group, lane.stream, lane.lane], lane.time_lag_ms / 1000)
            offset_lag.add_metric([lane.group, lane.stream, lane.lane], lane.offset_lag)
        yield time_lag
        yield offset_lag


LAG = LagCollector()
REGISTRY.register(LAG)


class FleetCollector:
    """Cluster health, cordons, the fleet's freeze and generations by state, read at scrape time."""

    def __init__(self) -> None:
        self.source: Callable[[], tuple[list[Cluster], dict[tuple[str, str], int], FleetPolicy]] | None = None
        """(clusters, generations per (cluster, state), the fleet policy): read per scrape, no stream decoded."""

    def collect(self) -> Any:
        health = GaugeMetricFamily(
            "streamplane_cluster_health",
            "1 for a cluster's current health state, 0 for the others",
            labels=["cluster", "state"],
        )
        cordoned = GaugeMetricFamily(
            "streamplane_cluster_cordoned", "1 while a cluster is cordoned", labels=["cluster"]
        )
        frozen = GaugeMetricFamily("streamplane_fleet_frozen", "1 while automatic failover is frozen fleet-wide")
        generations = GaugeMetricFamily(
            "streamplane_generations", "Generations by cluster and state", labels=["cluster", "state"]
        )
        fleet = _read(self.source)
        if fleet is not None:
            clusters, counts, policy = fleet
            for c in clusters:
                for state in (HEALTHY, DEGRADED, UNHEALTHY):
                    health.add_metric([c.name, state.value], 1.0 if c.health == state else 0.0)
                cordoned.add_metric([c.name], 1.0 if c.cordoned else 0.0)
            for c in clusters:
                for gen_state in GENERATION_STATES:
                    generations.add_metric([c.name, gen_state.value], counts.get((c.name, gen_state.value), 0))
            frozen.add_metric([], 1.0 if policy.frozen else 0.0)
        yield health
        yield cordoned
        yield frozen
        yield generations


FLEET = FleetCollector()
REGISTRY.register(FLEET)


def serve_metrics(host: str, port: int) -> int:
    """Serve /metrics on host:port (0: a free port, bound here so no other process can take it first) in a
    background thread; returns the port it listens on."""
    http, _ = start_http_server(port, addr=host)
    return int(http.server_address[1])
