"""`streamplane doctor`: gather what `streamplane.doctor.diagnose` needs, twice, and print what it finds.

The coordinator gives the topology, cluster health, the group's members and leases, and the commit log's
watermarks and retry state; Kafka gives each partition's end offset (so lag is counted against what was
written, not only against what workers reported).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from streamplane import model
from streamplane.client.coordinator import CoordinatorClient
from streamplane.coordinator.topology.cluster_admin import kafka_end_offsets
from streamplane.coordinator.topology.kafka_settings import PLAINTEXT, KafkaSettings
from streamplane.doctor import (
    HELD,
    Diagnosis,
    Observation,
    PartitionLook,
    SealedWait,
    diagnose,
    sealed_waits,
    unsettled,
)
from streamplane.errors import NotFoundError, UnavailableError

MAX_PROGRESS_READS = 200
"""Partitions whose retry state is read (the ones not moving, with records waiting)."""

Ends = dict[tuple[str, int], list[int] | None]


def _end_offsets(
    stream: model.Stream,
    clusters: dict[str, model.Cluster],
    unreachable: set[str],
    timeout_s: float,
    settings: KafkaSettings = PLAINTEXT,
) -> Ends:
    """Per unsettled generation, Kafka's end offsets (None when its cluster cannot be read; a cluster that
    failed once is not asked again); a cluster that names Kafka settings is read with `settings`' own."""
    out: Ends = {}
    for lane in stream.lanes:
        for g in lane.generations:
            if not unsettled(g.state):
                continue
            cluster = clusters.get(g.cluster)
            if cluster is None or g.cluster in unreachable:
                out[(lane.name, g.number)] = None
                continue
            try:
                config = settings.connection(cluster, timeout_s)
                out[(lane.name, g.number)] = kafka_end_offsets(cluster, g.topic, g.partitions, config=config)
            except UnavailableError:
                unreachable.add(g.cluster)
                out[(lane.name, g.number)] = None
    return out


def observe(
    client: CoordinatorClient,
    stream_name: str,
    group: str,
    *,
    interval_s: float = 2.0,
    target_ms: int = 5_000,
    kafka_timeout_s: float = 2.0,
    kafka_settings: KafkaSettings = PLAINTEXT,
    sleep: Callable[[float], None] = time.sleep,
) -> Observation:
    """Two looks at `stream_name` as `group` reads it, `interval_s` apart (clusters that name Kafka settings
    read with `kafka_settings`')."""
    stream = client.describe_stream(stream_name)
    clusters = _clusters_of(client, stream)
    unreachable: set[str] = set()
    ends_before = _end_offsets(stream, clusters, unreachable, kafka_timeout_s, kafka_settings)

    def lag() -> dict[str, model.PartitionLag]:  # no group: nobody's progress (the stream's own figures)
        return {x.lease_id: x for x in client.lag(group, stream_name).partitions} if group else {}

    lag_before = lag()
    started = time.monotonic()
    sleep(interval_s)
    ends_after = _end_offsets(stream, clusters, unreachable, kafka_timeout_s, kafka_settings)
    lag_after = lag()
    elapsed = max(time.monotonic() - started, 1e-3)
    members: tuple[model.MemberInfo, ...] = ()
    leases: dict[str, model.LeaseInfo] = {}
    if group:
        desc = client.describe_group(group)
        now_ms = int(time.time() * 1000)
        members = tuple(m for m in desc.members if m.alive_until_ms > now_ms)
        live = {m.worker_id for m in members}
        leases = {x.lease_id: x for x in desc.leases if x.state in HELD and x.worker_id in live}
    looks: list[PartitionLook] = []
    progress_reads = 0
    for lane in stream.lanes:
        for g in lane.generations:
            if not unsettled(g.state):
                continue
            before, after = ends_before.get((lane.name, g.number)), ends_after.get((lane.name, g.number))
            for p in range(g.partitions):
                lid = model.PartitionRef(stream.name, lane.name, g.number, p).lease_id
                was, now = lag_before.get(lid), lag_after.get(lid)
                low_before = was.low_watermark if was else 0
                low_after = now.low_watermark if now else low_before
                end_after = after[p] if after is not None else None
                retrying: tuple[int, ...] = ()
                done_above = max(0, now.high_watermark - now.low_watermark - now.offset_lag) if now else 0
                waiting = end_after is None or end_after > low_after
                if now is not None and low_after == low_before and waiting and progress_reads < MAX_PROGRESS_READS:
                    progress_reads += 1
                    progress = client.progress(group, lid, max_ranges=64)
                    retrying, done_above = progress.retrying, progress.done_above_low_watermark
                lease = leases.get(lid)
                looks.append(
                    PartitionLook(
                        lane=lane.name,
                        generation=g.number,
                        partition=p,
                        cluster=g.cluster,
                        state=g.state,
                        end_before=before[p] if before is not None else None,
                        end_after=end_after,
                        low_before=low_before,
                        low_after=low_after,
                        time_lag_ms=now.time_lag_ms if now else 0,
                        retrying=retrying,
                        done_above_low=done_above,
                        holder=lease.worker_id if lease else "",
                        holder_records_per_s=lease.load.records_per_s if lease else 0.0,
                    )
                )
    sealed = _sealed_waits(client, stream)
    dlq: dict[str, int] = {}
    if group:
        lanes = client.lag(group, stream.name, partitions=False).lanes
        dlq = {
            "pending": sum(x.dlq_pending for x in lanes),
            "redriven": sum(x.dlq_redriven for x in lanes),
            "purged": sum(x.dlq_purged for x in lanes),
        }
    return Observation(stream.name, group, tuple(looks), clusters, members, elapsed, target_ms, sealed, dlq)


def _clusters_of(client: CoordinatorClient, stream: model.Stream) -> dict[str, model.Cluster]:
    """The clusters the stream's unsettled generations are on, each asked for by name (a fleet's thousands
    are never listed); a removed one is left out."""
    out = {}
    for name in sorted({g.cluster for lane in stream.lanes for g in lane.generations if unsettled(g.state)}):
        try:
            out[name] = client.cluster_health(name)[0]
        except NotFoundError:
            continue
    return out


def _sealed_waits(client: CoordinatorClient, stream: model.Stream) -> tuple[SealedWait, ...]:
    """The stream's sealed generations with the groups each waits for: one lag call for every group on the
    stream, made only when it has a sealed generation."""
    if not any(g.state == model.SEALED for lane in stream.lanes for g in lane.generations):
        return ()
    generations = [(lane.name, g) for lane in stream.lanes for g in lane.generations]
    return sealed_waits(generations, client.lag("", stream.name).partitions)


def groups_of(client: CoordinatorClient, stream: str) -> list[str]:
    """Groups that have progress on `stream`; [""] when none has read it yet (the stream is diagnosed without a
    group: are producers writing, are its clusters healthy, and that no group reads it)."""
    client.describe_stream(stream)  # NotFoundError for a stream that does not exist
    return sorted({x.group for x in client.lag("", stream).lanes}) or [""]


def run(
    client: CoordinatorClient,
    stream: str,
    group: str,
    *,
    interval_s: float,
    target_ms: int,
    kafka_settings: KafkaSettings = PLAINTEXT,
) -> list[Diagnosis]:
    return [
        diagnose(observe(client, stream, g, interval_s=interval_s, target_ms=target_ms, kafka_settings=kafka_settings))
        for g in ([group] if group else groups_of(client, stream))
    ]


def render(diagnosis: Diagnosis, interval_s: float) -> str:
    """The diagnosis for a person: the lanes' figures, then each cause with its evidence and next commands."""
    reader = f"group {diagnosis.group}" if diagnosis.group else "no group"
    lines = [f"doctor: stream {diagnosis.stream}, {reader} (two looks {interval_s:g} s apart)"]
    for lane, row in sorted(diagnosis.lanes.items()):
        lines.append(
            f"  {lane}: {int(row['offset_lag']):,} records behind, time lag {row['time_lag_ms'] / 1000:.1f} s, "
            f"input {row['input_per_s']:,.0f}/s, processed {row['processed_per_s']:,.0f}/s"
        )
    if any(diagnosis.dlq.values()):
        d = diagnosis.dlq
        lines.append(
            f"  dlq: {d['pending']:,} rejected records pending, {d['redriven']:,} redriven, {d['purged']:,} purged"
            + (
                f" (see `streamplane dlq list {diagnosis.stream} --group {diagnosis.group}`; once the handler is "
                f"fixed, `streamplane dlq redrive {diagnosis.stream} --group {diagnosis.group}`)"
                if d["pending"]
                else ""
            )
        )
    if diagnosis.healthy:
        lines.append("no cause of lateness found: every lane is on time")
    for i, f in enumerate(diagnosis.findings, 1):
        lines.append(f"{i}. [{f.cause}] {f.summary}")
        lines += [f"     evidence: {e}" for e in f.evidence]
        lines += [f"     next: {step}" for step in f.next_steps]
    return "\n".join(lines)
