"""Cluster health and the autopilot's decisions, as pure functions of what was observed.

A probe reads a cluster's metadata (brokers, and the partitions of our topics without a leader or with
replicas out of sync); `judge` turns it into a state with reasons. `plan_failovers` decides which lanes move
off clusters that stayed unhealthy, where to, and which wait: the streams' policies (auto or manual, how long
a cluster must be unhealthy), hysteresis (a lane that moved recently stays), the fleet-wide rate cap and the
freeze switch. The health monitor (`streamplane.coordinator.topology.autopilot`) does the I/O around them.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from streamplane.errors import InvalidArgumentError
from streamplane.model import ACTIVE, Cluster, ClusterErrors, ClusterHealth, FleetPolicy, Probe, Stream

HEALTHY, DEGRADED, UNHEALTHY = ClusterHealth.HEALTHY, ClusterHealth.DEGRADED, ClusterHealth.UNHEALTHY
AUTOPILOT = "autopilot"
"""The actor of every change the autopilot makes."""
MAX_REPORTED_CLUSTERS = 1000


def stored_reports(errors: Sequence[ClusterErrors], now_ms: int, field: str) -> list[list[Any]]:
    """What a client (producer or worker) reported per cluster, as kept with its session: [cluster, errors,
    last error, when], bounded; InvalidArgumentError naming `field` for too many clusters."""
    if len(errors) > MAX_REPORTED_CLUSTERS:
        raise InvalidArgumentError(f"{field} lists {len(errors)} clusters; the limit is {MAX_REPORTED_CLUSTERS}")
    return [[e.cluster[:64], max(0, e.count), e.last_error[:300], now_ms] for e in errors]


def count_reporters(reports: Iterable[bytes], since_ms: int) -> dict[str, ClusterErrors]:
    """{cluster: errors} from each client's stored reports (as `stored_reports` made them, JSON) since
    `since_ms`: `count` counts the clients that saw errors there, with one of their last errors. A client's
    report that does not decode is passed over: one bad entry never blinds the health monitor to the rest."""
    found: dict[str, ClusterErrors] = {}
    for raw in reports:
        try:
            entries = [(str(c), int(n), str(last), int(at)) for c, n, last, at in json.loads(raw)]
        except (ValueError, TypeError):
            continue
        for cluster, count, last, at_ms in entries:
            if at_ms >= since_ms and count > 0:
                seen = found.get(cluster)
                found[cluster] = ClusterErrors(cluster, (seen.count if seen else 0) + 1, last)
    return found


def prober(cluster: str, replicas: Sequence[str]) -> str:
    """Which of the live `replicas` probes `cluster` (rendezvous hashing: the highest hash of the pair wins, so
    a replica joining or leaving moves only the clusters it gains or had); "" when there is none."""
    return max(replicas, key=lambda r: hashlib.blake2b(f"{cluster}\0{r}".encode(), digest_size=8).digest(), default="")


def judge(
    probe: Probe,
    brokers_seen: int = 0,
    reported: ClusterErrors | None = None,
    fetching: ClusterErrors | None = None,
    *,
    canary_slow_ms: float = 2000.0,
) -> tuple[str, tuple[str, ...]]:
    """The state a probe shows, with its reasons. `brokers_seen`: the most brokers this cluster had;
    `reported`: what producers told of it lately (`count` producers saw errors); `fetching`: what workers'
    fetches met (`count` workers)."""
    told = [f"{reported.count} producer(s) report errors ({reported.last_error})"] if reported else []
    if fetching:
        told.append(f"{fetching.count} worker(s) report fetch errors ({fetching.last_error})")
    if not probe.reachable:
        return UNHEALTHY, (f"metadata unreachable: {probe.error or 'no answer'}", *told)
    reasons = list(told)
    if probe.canary_error:
        reasons.append(probe.canary_error)
    elif probe.canary_ms > canary_slow_ms:
        reasons.append(f"canary took {probe.canary_ms:.0f} ms (over {canary_slow_ms:.0f} ms)")
    if brokers_seen and probe.brokers < brokers_seen:
        reasons.append(f"{brokers_seen - probe.brokers} of {brokers_seen} brokers missing")
    if probe.leaderless:
        reasons.append(f"{probe.leaderless} of {probe.partitions} partitions without a leader")
    if probe.under_replicated:
        reasons.append(f"{probe.under_replicated} partitions with replicas out of sync")
    if probe.partitions and probe.leaderless == probe.partitions:
        return UNHEALTHY, tuple(reasons)
    return (DEGRADED if reasons else HEALTHY), tuple(reasons)


@dataclass(frozen=True)
class Move:
    """One automatic failover: a lane off an unhealthy cluster, to `target`, with the evidence."""

    stream: str
    lane: str
    source: str
    target: str
    reason: str


@dataclass(frozen=True)
class Plan:
    moves: list[Move]
    waiting: list[str]
    """Why lanes that should move did not (frozen, rate cap, no healthy target), one line each."""
    recheck_ms: int = 0
    """When a lane held back only by time (unhealthy too briefly, hysteresis, rate cap) may move with nothing
    else changed (0: none is; only a change in the topology can move one)."""
    evacuating: list[str] = field(default_factory=list)
    """Clusters whose evacuation this plan starts (the autopilot remembers them for the hour's cap)."""


def choose_target(
    clusters: Sequence[Cluster], source: Cluster, load: Mapping[str, int], exclude: Iterable[str] = ()
) -> Cluster | None:
    """Where a lane goes: a healthy, uncordoned cluster other than the source, in another zone if there is
    one, with the fewest active generations per unit of capacity weight; None if there is none."""
    barred = {source.name, *exclude}
    fit = [c for c in clusters if c.health == HEALTHY and not c.cordoned and c.name not in barred]
    if not fit:
        return None
    other_zone = [c for c in fit if not source.zone or c.zone != source.zone]
    pool = other_zone or fit
    return min(pool, key=lambda c: ((load.get(c.name, 0) + 1) / c.capacity_weight, c.name))


def active_load(streams: Sequence[Stream]) -> dict[str, int]:
    """Active generations per cluster."""
    load: dict[str, int] = {}
    for s in streams:
        for lane in s.lanes:
            if lane.generations:
                load[lane.active.cluster] = load.get(lane.active.cluster, 0) + 1
    return load


EVACUATION_WINDOW_MS = 3_600_000
"""The window `FleetPolicy.max_evacuations_per_hour` counts in."""


def plan_failovers(
    clusters: Sequence[Cluster],
    streams: Sequence[Stream],
    fleet: FleetPolicy,
    *,
    now_ms: int,
    recent: Sequence[int],
    last_moved: Mapping[tuple[str, str], int],
    evacuations: Mapping[str, int] | None = None,
    load: Mapping[str, int] | None = None,
) -> Plan:
    """The failovers due now, of the lanes of `streams` (it may hold only those with an active generation on
    an unhealthy cluster: no other lane moves). `load`: active generations per cluster, the fleet's (counted
    from `streams` when not given). `recent`: times of the fleet's automatic failovers (lanes moved: the pace);
    `last_moved`: when each (stream, lane) last failed over (hysteresis); `evacuations`: when each cluster's
    evacuation started (the blast radius: at most `max_evacuations_per_hour` clusters an hour). A cluster
    whose evacuation has started sends all its lanes away together, top priority first, at the pace."""
    by_name = {c.name: c for c in clusters}
    budget = fleet.max_failovers_per_minute - sum(1 for t in recent if now_ms - t < 60_000)
    started = {c: t for c, t in (evacuations or {}).items() if now_ms - t < EVACUATION_WINDOW_MS}
    load = dict(load) if load is not None else active_load(streams)
    moves: list[Move] = []
    waiting: list[str] = []
    rechecks: list[int] = []
    unhealthy = [c.name for c in clusters if c.health == UNHEALTHY]
    if len(clusters) > 1 and len(unhealthy) / len(clusters) > fleet.max_unhealthy_fraction:
        share = f"{len(unhealthy)} of {len(clusters)} clusters are unhealthy ({', '.join(sorted(unhealthy)[:8])})"
        return Plan(
            [],
            [
                f"{share}, more than {fleet.max_unhealthy_fraction:.0%} of the fleet: the autopilot moves nothing "
                "(a monitoring fault is likelier than so many dead clusters); fail over by hand, or raise "
                "max_unhealthy_fraction"
            ],
        )
    starting: list[str] = []
    lanes = sorted(
        ((stream, lane) for stream in streams for lane in stream.lanes),
        key=lambda sl: (-sl[1].priority, sl[0].name, sl[1].name),
    )
    for stream, lane in lanes:  # top priority first, across every stream of the cluster
        policy = stream.failover
        if not lane.generations or lane.active.state != ACTIVE:
            continue
        source = by_name.get(lane.active.cluster)
        if source is None or source.health != UNHEALTHY:
            continue
        unhealthy_for = now_ms - source.health_since_ms
        if policy.mode != "auto":
            continue
        if unhealthy_for < policy.unhealthy_after_ms:
            rechecks.append(source.health_since_ms + policy.unhealthy_after_ms)
            continue
        what = f"{stream.name}/{lane.name} on {source.name}"
        moved_at = last_moved.get((stream.name, lane.name))
        if moved_at is not None and now_ms - moved_at < policy.min_interval_ms:
            waiting.append(f"{what}: it failed over {(now_ms - moved_at) / 1000:.0f} s ago (hysteresis)")
            rechecks.append(moved_at + policy.min_interval_ms)
            continue
        if fleet.frozen:
            waiting.append(f"{what}: the fleet is frozen")
            continue
        if source.name not in started and source.name not in starting:
            if len(started) + len(starting) >= fleet.max_evacuations_per_hour:
                waiting.append(
                    f"{what}: {fleet.max_evacuations_per_hour} cluster(s) were evacuated in the last hour "
                    f"({', '.join(sorted([*started, *starting]))}); the cap holds {source.name} back"
                )
                rechecks.append(min(started.values(), default=now_ms) + EVACUATION_WINDOW_MS)
                continue
            starting.append(source.name)
        if budget <= 0:
            waiting.append(f"{what}: {fleet.max_failovers_per_minute} failovers in the last minute (rate cap)")
            rechecks.append(min((t for t in recent if now_ms - t < 60_000), default=now_ms) + 60_000)
            continue
        target = choose_target(clusters, source, load)
        if target is None:
            waiting.append(f"{what}: no healthy, uncordoned cluster to move to")
            continue
        reasons = "; ".join(source.health_reasons) or "unhealthy"
        why = f"autopilot: {source.name} unhealthy for {unhealthy_for / 1000:.1f} s ({reasons})"
        moves.append(Move(stream.name, lane.name, source.name, target.name, why))
        load[target.name] = load.get(target.name, 0) + 1
        load[source.name] = load.get(source.name, 1) - 1
        budget -= 1
    evacuating = sorted({m.source for m in moves} - set(started))
    return Plan(moves, waiting, min(rechecks, default=0), evacuating)
