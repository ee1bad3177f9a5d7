"""Why is a lane late? A pure diagnosis of one stream as one group reads it, from two looks a moment apart.

`streamplane doctor` gathers the observation (topology, cluster health, the group's members and leases, the
commit log's watermarks and retry state, Kafka's end offsets) and prints what `diagnose` finds. Causes, most
specific first, each with its evidence and the next command to run:

- ``dead_cluster``: a generation that still holds records sits on a cluster that is unhealthy or cannot be
  read, so it cannot seal or drain;
- ``stuck_record``: a partition's low watermark is held by one offset in retries while records after it are
  done (a poison record, retried with backoff until its attempts run out);
- ``short_of_capacity``: partitions with records to read have no live holder (no worker, or every worker at
  its max_load);
- ``paused_lease``: a held partition with records to read whose progress did not move and whose holder
  reports no throughput for it;
- ``backlog``: the lane's partitions are held and moving, but input outpaces processing (or the time lag is
  past its target while it catches up);
- ``no_reader``: no group has ever read the stream (group ""): what is written waits for a first reader. The
  stream's other evidence (are producers writing, are its clusters healthy) is diagnosed all the same;
- ``drain_waits``: a sealed generation cannot drain (and its cluster cannot be drained or removed) until
  other groups read it to its end: they are named, with the way out for a group retired for good, and a
  sealed generation holding records no group has read says so, with its count.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from streamplane.model import (
    SEALED,
    SETTLED,
    Cluster,
    ClusterHealth,
    Generation,
    GenerationState,
    LeaseState,
    MemberInfo,
    PartitionLag,
    PartitionRef,
)

DEAD, STUCK, SHORT, PAUSED, BACKLOG = "dead_cluster", "stuck_record", "short_of_capacity", "paused_lease", "backlog"
NO_READER, DRAIN_WAITS = "no_reader", "drain_waits"
CAUSES = (DEAD, STUCK, SHORT, PAUSED, BACKLOG, NO_READER, DRAIN_WAITS)
HELD = (LeaseState.GRANTED, LeaseState.REVOKING)
"""Lease states in which a worker reads the partition."""


@dataclass(frozen=True)
class PartitionLook:
    """One partition of a generation that still holds records, seen twice, `Observation.interval_s` apart."""

    lane: str
    generation: int
    partition: int
    cluster: str
    state: GenerationState
    end_before: int | None
    """Kafka's end offset at the first look; None when the cluster could not be read."""
    end_after: int | None
    low_before: int
    """The commit log's low watermark (everything below is done) at the first look; 0 before any commit."""
    low_after: int
    time_lag_ms: int = 0
    retrying: tuple[int, ...] = ()
    """Offsets above the low watermark with retry state."""
    done_above_low: int = 0
    """Records done above the low watermark (work that went on past it)."""
    holder: str = ""
    """The live worker reading it ("" when nobody holds it)."""
    holder_records_per_s: float = 0.0

    @property
    def lease(self) -> str:
        return f"{self.lane}/g{self.generation}/p{self.partition}"

    @property
    def offset_lag(self) -> int | None:
        """Records not yet processed, by Kafka's end offset (None when the cluster could not be read)."""
        if self.end_after is None:
            return None
        return max(0, self.end_after - self.low_after - self.done_above_low)


@dataclass(frozen=True)
class SealedWait:
    """A sealed generation and the groups that have read part of it but not yet to its end offsets (the ones
    its drain waits for)."""

    lane: str
    generation: int
    cluster: str
    records: int
    """Records in it (the sum of its end offsets)."""
    groups: tuple[str, ...]
    """Groups with progress on it that are not at its end; () when no group has read any of it."""


@dataclass(frozen=True)
class Observation:
    stream: str
    group: str
    partitions: tuple[PartitionLook, ...]
    clusters: dict[str, Cluster]
    members: tuple[MemberInfo, ...] = ()
    interval_s: float = 1.0
    target_ms: int = 5_000
    """The time lag a lane should stay under."""
    sealed: tuple[SealedWait, ...] = ()
    """The stream's sealed generations that have not drained, with the groups each waits for."""
    dlq: dict[str, int] = field(default_factory=dict)
    """The group's rejects on the stream: pending, redriven and purged."""


@dataclass(frozen=True)
class Finding:
    cause: str
    lane: str
    summary: str
    evidence: tuple[str, ...] = ()
    next_steps: tuple[str, ...] = ()


@dataclass(frozen=True)
class Diagnosis:
    stream: str
    group: str
    findings: tuple[Finding, ...] = field(default_factory=tuple)
    lanes: dict[str, dict[str, float]] = field(default_factory=dict)
    """Per lane: offset_lag, time_lag_ms, input_per_s, processed_per_s (the figures the findings rest on)."""
    dlq: dict[str, int] = field(default_factory=dict)
    """The group's rejects on the stream: pending, redriven and purged (not a cause of lateness: shown)."""

    @property
    def healthy(self) -> bool:
        return not self.findings


def _rate(before: int | None, after: int | None, interval_s: float) -> float:
    if before is None or after is None or interval_s <= 0:
        return 0.0
    return max(0, after - before) / interval_s


def diagnose(obs: Observation) -> Diagnosis:
    """The causes of lateness in `obs`, most specific first; a lane is named under at most one cause."""
    s, g = obs.stream, obs.group
    findings: list[Finding] = []
    explained: set[tuple[str, int, int]] = set()  # partitions a finding already accounts for

    def key(p: PartitionLook) -> tuple[str, int, int]:
        return (p.lane, p.generation, p.partition)

    # 1. generations that cannot seal or drain: their cluster is sick or unreadable
    by_generation: dict[tuple[str, int], list[PartitionLook]] = {}
    for p in obs.partitions:
        by_generation.setdefault((p.lane, p.generation), []).append(p)
    for (lane, number), parts in sorted(by_generation.items()):
        first = parts[0]
        cluster = obs.clusters.get(first.cluster)
        health = cluster.health if cluster else "removed"
        unreadable = all(p.end_after is None for p in parts)
        if health == ClusterHealth.HEALTHY and not unreadable:
            continue
        pending = sum(p.offset_lag or 0 for p in parts)
        active = first.state == GenerationState.ACTIVE
        if not unreadable and pending == 0 and not active:
            continue  # everything there is processed: it seals and drains by itself
        reasons = ", ".join(cluster.health_reasons) if cluster and cluster.health_reasons else ""
        evidence = [
            f"{s}/{lane} g{number} is {first.state.value} on cluster {first.cluster}, whose health is {health}"
            + (f" ({reasons})" if reasons else ""),
            "its end offsets cannot be read from Kafka" if unreadable else f"{pending:,} records there not processed",
            f"processed up to: {', '.join(f'p{p.partition}<{p.low_after}' for p in parts[:8])}"
            + (" ..." if len(parts) > 8 else ""),
        ]
        if active:
            summary = f"{s}/{lane} is still written to g{number} on sick cluster {first.cluster}"
            steps = (f"streamplane cluster health {first.cluster}", f"streamplane failover {s} --lane {lane}")
        else:
            summary = (
                f"generation g{number} of {s}/{lane} is stranded on sick cluster {first.cluster}: it cannot seal "
                "or drain until the cluster is back"
            )
            steps = (
                f"streamplane cluster health {first.cluster}",
                f"streamplane generation abandon {s} {lane} {number} --reason '...'  "
                "(only if the cluster is gone for good: records the unread offsets as lost)",
            )
        findings.append(Finding(DEAD, lane, summary, tuple(evidence), steps))
        explained.update(key(p) for p in parts)

    findings += _drain_waits(obs)
    if not g:  # nobody reads the stream: what is written, and where, is the rest of the story
        lanes = _lane_figures(obs)
        findings.append(_no_reader(obs, lanes))
        return Diagnosis(s, g, tuple(findings), lanes, obs.dlq)

    # 2. one offset in retries holds a partition's low watermark while work after it is done
    for p in obs.partitions:
        if key(p) in explained or p.low_after not in p.retrying:
            continue
        if p.low_after != p.low_before or not (p.done_above_low or (p.offset_lag or 0) > 1):
            continue
        findings.append(
            Finding(
                STUCK,
                p.lane,
                f"offset {p.low_after} of {s}/{p.lease} is being retried and holds the partition's progress",
                (
                    f"low watermark stuck at {p.low_after} for {obs.interval_s:.0f} s",
                    f"{p.done_above_low:,} records after it already done; {len(p.retrying)} offset(s) in retry",
                ),
                (
                    f"streamplane lag --group {g} --stream {s} --lane {p.lane} --partitions",
                    f"streamplane group configure {g} --lane {p.lane} --max-attempts N  (fewer attempts send it to "
                    "the dlq lane sooner)",
                ),
            )
        )
        explained.add(key(p))

    # 3. partitions with records to read and nobody reading them
    unheld: dict[str, list[PartitionLook]] = {}
    for p in obs.partitions:
        if key(p) not in explained and not p.holder and (p.offset_lag or 0) > 0:
            unheld.setdefault(p.lane, []).append(p)
    for lane, parts in sorted(unheld.items()):
        pending = sum(p.offset_lag or 0 for p in parts)
        if obs.members:
            members = ", ".join(
                f"{m.worker_id} (capacity {m.capacity:g}"
                + (f", max_load {m.max_load:g}" if m.max_load else "")
                + f", cpu {m.cpu:.2f})"
                for m in obs.members[:5]
            )
            why = f"{len(obs.members)} live worker(s), all at their limit: {members}"
        else:
            why = f"group {g} has no live worker"
        findings.append(
            Finding(
                SHORT,
                lane,
                f"{len(parts)} partition(s) of {s}/{lane} have no holder: group {g} is short of workers",
                (why, f"{pending:,} records waiting in {', '.join(p.lease for p in parts[:6])}"),
                (
                    f"streamplane group describe {g}",
                    "start more workers in the group, or raise their max_load",
                ),
            )
        )
        explained.update(key(p) for p in parts)

    # 4. held, with records to read, and not moving
    for p in obs.partitions:
        if key(p) in explained or not p.holder or not (p.offset_lag or 0) > 0:
            continue
        if p.low_after == p.low_before and p.holder_records_per_s <= 0 and p.time_lag_ms > obs.target_ms:
            findings.append(
                Finding(
                    PAUSED,
                    p.lane,
                    f"{s}/{p.lease} is held by {p.holder} but not read: its progress has not moved",
                    (
                        f"low watermark {p.low_after} unchanged for {obs.interval_s:.0f} s, {p.offset_lag:,} records "
                        "waiting",
                        f"{p.holder} reports 0 records/s for it",
                    ),
                    (f"streamplane group describe {g}", f"check worker {p.holder} (stuck handler, paused process)"),
                ),
            )
            explained.add(key(p))

    # 5. per lane: input against processing
    lanes = _lane_figures(obs)
    named = {f.lane for f in findings}
    for lane, row in sorted(lanes.items()):
        if lane in named or row["offset_lag"] <= 0:
            continue
        falling_behind = row["input_per_s"] > row["processed_per_s"] * 1.05
        if not falling_behind and row["time_lag_ms"] <= obs.target_ms:
            continue
        behind = "falling behind" if falling_behind else "catching up"
        eta = ""
        if not falling_behind and row["processed_per_s"] > row["input_per_s"]:
            eta = f"; caught up in about {row['offset_lag'] / (row['processed_per_s'] - row['input_per_s']):.0f} s"
        findings.append(
            Finding(
                BACKLOG,
                lane,
                f"{s}/{lane} has a backlog of {int(row['offset_lag']):,} records: {behind}{eta}",
                (
                    f"input {row['input_per_s']:,.0f} records/s, processed {row['processed_per_s']:,.0f} records/s "
                    f"over {obs.interval_s:.0f} s",
                    f"time lag {row['time_lag_ms'] / 1000:.1f} s (target {obs.target_ms / 1000:g} s)",
                    "every partition with records is held, and none is stuck",
                ),
                (
                    f"streamplane group describe {g}",
                    "add workers or raise their concurrency (processing must exceed input to catch up)",
                ),
            )
        )
    order = {c: i for i, c in enumerate(CAUSES)}
    findings.sort(key=lambda f: (order[f.cause], f.lane))
    return Diagnosis(s, g, tuple(findings), lanes, obs.dlq)


def _lane_figures(obs: Observation) -> dict[str, dict[str, float]]:
    """Per lane: offset_lag, time_lag_ms, input_per_s and processed_per_s over the two looks."""
    lanes: dict[str, dict[str, float]] = {}
    for p in obs.partitions:
        row = lanes.setdefault(
            p.lane, dict.fromkeys(("offset_lag", "time_lag_ms", "input_per_s", "processed_per_s"), 0)
        )
        row["offset_lag"] += p.offset_lag or 0
        row["time_lag_ms"] = max(row["time_lag_ms"], p.time_lag_ms)
        row["input_per_s"] += _rate(p.end_before, p.end_after, obs.interval_s)
        row["processed_per_s"] += _rate(p.low_before, p.low_after, obs.interval_s)
    return lanes


def _no_reader(obs: Observation, lanes: dict[str, dict[str, float]]) -> Finding:
    s = obs.stream
    written = sum(p.end_after or 0 for p in obs.partitions)
    writing = {lane: row["input_per_s"] for lane, row in lanes.items() if row["input_per_s"] > 0}
    producers = (
        "producers are writing: " + ", ".join(f"{lane} {rate:,.0f} records/s" for lane, rate in sorted(writing.items()))
        if writing
        else f"no records were written in the last {obs.interval_s:g} s"
    )
    return Finding(
        NO_READER,
        "",
        f"no group reads stream {s}: {written:,} records wait in its unsettled generations for a first reader",
        (producers, "no group has committed progress on it"),
        (
            f"start a consumer: Consumer(coordinator, group='GROUP', stream='{s}')",
            f"streamplane doctor {s} --group GROUP  (once a group reads it)",
        ),
    )


def _drain_waits(obs: Observation) -> list[Finding]:
    """Sealed generations held back by groups other than the one diagnosed (its own lag is told by the other
    causes), or by records no group has read. A generation on a sick cluster is `dead_cluster`'s."""
    s, findings = obs.stream, []
    for w in obs.sealed:
        cluster = obs.clusters.get(w.cluster)
        if cluster is None or cluster.health != ClusterHealth.HEALTHY:
            continue
        where = f"g{w.generation} of {s}/{w.lane} (sealed on {w.cluster}, {w.records:,} records)"
        if not w.groups and w.records:
            findings.append(
                Finding(
                    DRAIN_WAITS,
                    w.lane,
                    f"{where} holds records no group has read: it stays sealed for groups still to come",
                    ("no group has committed progress on it",),
                    (
                        f"start a group that reads {s}, or give them up: streamplane generation abandon {s} "
                        f"{w.lane} {w.generation} --reason '...'",
                    ),
                )
            )
            continue
        others = tuple(x for x in w.groups if x != obs.group)
        if not others:
            continue
        findings.append(
            Finding(
                DRAIN_WAITS,
                w.lane,
                f"{where} waits for group(s) {', '.join(others)} to read it to its end before it drains",
                (f"{len(others)} group(s) with progress on it are not at its end offsets",),
                (
                    *(f"streamplane doctor {s} --group {x}" for x in others[:3]),
                    "a group retired for good: streamplane group delete GROUP",
                ),
            )
        )
    return findings


def sealed_waits(generations: Iterable[tuple[str, Generation]], lag: Iterable[PartitionLag]) -> tuple[SealedWait, ...]:
    """Of one stream's (lane, generation)s, each sealed one with the groups that read some of it and are not at
    its end offsets (a partition a group never committed on counts as unread), from every group's lag on the
    stream. Generations every reader finished, and empty ones, are left out: they drain by themselves (an empty
    one was once named as holding 0 records no group had read, and a drain gave up on it)."""
    sealed = {(lane, g.number): g for lane, g in generations if g.state == SEALED}
    lows: dict[tuple[str, int], dict[str, dict[int, int]]] = {}  # generation: group: partition: low watermark
    for p in lag:
        ref = PartitionRef.parse(p.lease_id)
        if (ref.lane, ref.generation) in sealed:
            lows.setdefault((ref.lane, ref.generation), {}).setdefault(p.group, {})[ref.partition] = p.low_watermark
    out = []
    for (lane, number), g in sorted(sealed.items()):
        if not any(g.end_offsets):
            continue
        readers = lows.get((lane, number), {})
        behind = tuple(
            sorted(x for x, low in readers.items() if any(low.get(i, 0) < end for i, end in enumerate(g.end_offsets)))
        )
        if behind or not readers:
            out.append(SealedWait(lane, number, g.cluster, sum(g.end_offsets), behind))
    return tuple(out)


def unsettled(state: GenerationState) -> bool:
    """Whether a generation in `state` may still hold records somebody must read."""
    return state not in SETTLED
