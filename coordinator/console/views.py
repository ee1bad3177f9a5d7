"""What the console's pages show, read from the domain: plain JSON-able dicts, no HTTP here.

Every read is bounded: the event log is read from its tail (at most `EVENT_SCAN` events per page), groups
and partitions as the store lists them. Operator actions are previewed first (what will move) and then made
through the same domain calls as the CLI's.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import structlog

from streamplane import model
from streamplane.clock import Clock
from streamplane.coordinator.commitlog import log as commitlog
from streamplane.coordinator.console.history import LagHistory
from streamplane.coordinator.groups import config as group_config
from streamplane.coordinator.groups import leases, rewind
from streamplane.coordinator.groups.assigner import Assigner
from streamplane.coordinator.topology import events
from streamplane.coordinator.topology.health import choose_target
from streamplane.coordinator.topology.topology import Topology
from streamplane.doctor import sealed_waits
from streamplane.errors import FailedPreconditionError, InvalidArgumentError, NotFoundError
from streamplane.model import Cluster, ClusterHealth, to_jsonable
from streamplane.names import check_object_name

log = structlog.get_logger(__name__)

EVENT_SCAN = 5000
ATTENTION = 100
"""Clusters the fleet page lists as needing attention at most (the count says how many there are)."""
ATTENTION_HELD = 10
"""Of those, how many show the generations they hold (each reads a page of streams; the rest say "—")."""
CLUSTER_PAGE = 100
"""Clusters a page of the fleet's table holds."""
DLQ_SAMPLE = 1000
"""Rejects the group page reads to count them by error (the first ones, in key order)."""
STREAM_PAGE = 100
GROUP_PAGE = 100
"""Streams a page of the streams table holds."""
"""Events of the log's tail a page may read to find what it shows."""
PAGE = 200
"""Events one page of the event log shows."""


def event_row(event: model.Event) -> dict[str, Any]:
    """An event as the console lists it: when, who, what, and the stream or group it concerns."""
    return {
        "version": event.version,
        "time_ms": event.time_ms,
        "actor": event.actor,
        "kind": model.event_kind(event),
        "text": model.describe_event(event),
        "stream": model.event_stream(event),
        "group": event.group if isinstance(event, model.GroupChanged) else "",
    }


class Views:
    def __init__(
        self,
        topology: Topology,
        assigner: Assigner,
        history: LagHistory,
        clock: Clock,
        probes: Callable[[str], list[model.Probe]] = lambda name: [],
    ) -> None:
        self.topology = topology
        self.db = topology.db
        self.assigner = assigner
        self.history = history
        self.clock = clock
        self.probes = probes

    # -- pages
    def fleet(self, after: str = "") -> dict[str, Any]:
        """The fleet at any size: counts by health and by zone, the clusters that need attention (not healthy,
        or cordoned; at most ATTENTION, each with what it holds), and one page of every cluster from after
        `after`. Reads no stream but those on a cluster that needs attention."""
        by_health: dict[str, int] = {}
        by_zone: dict[str, dict[str, int]] = {}
        attention: list[Cluster] = []
        attention_total = 0
        for c in self.topology.list_clusters():  # a cluster's record only: thousands cost milliseconds
            by_health[c.health] = by_health.get(c.health, 0) + 1
            zone = by_zone.setdefault(c.zone or "-", {})
            zone[c.health] = zone.get(c.health, 0) + 1
            if c.health != ClusterHealth.HEALTHY or c.cordoned:
                attention_total += 1
                if len(attention) < ATTENTION:
                    attention.append(c)
        page = self.topology.cluster_page(page_size=CLUSTER_PAGE, page_token=after)
        health = [
            event_row(e)
            for e in events.read_recent_events(self.db, limit=EVENT_SCAN)
            if isinstance(e, model.ClusterHealthChanged)
        ][:20]
        return {
            "summary": {"by_health": by_health, "by_zone": by_zone, "clusters": sum(by_health.values())},
            "attention": [self._cluster_row(c, held=i < ATTENTION_HELD) for i, c in enumerate(attention)],
            "attention_total": attention_total,
            "clusters": [self._cluster_row(c, held=False) for c in page.clusters],
            "next_page": page.next_page_token,
            "policy": to_jsonable(self.topology.fleet_policy()),
            "health_changes": health,
            "streams": self.topology.stream_page(page_size=1).total,
        }

    def _cluster_row(self, c: Cluster, *, held: bool) -> dict[str, Any]:
        """A cluster with its last probe and, with `held`, its generations by state from one page of the streams
        on it (`more` when it holds more than that page; None when not read, or when that page cannot be read,
        with `error` saying why: one bad record must not take the fleet page down with it)."""
        recent = self.probes(c.name)
        row = {**to_jsonable(c), "probe": to_jsonable(recent[-1]) if recent else None}
        row["generations"], row["more"] = None, False
        if held:
            try:
                page = self.topology.stream_page(cluster=c.name)
            except Exception as err:  # whatever a bad record raises: the page shows the rest
                log.exception("console.holdings_unreadable", cluster=c.name)
                row["error"] = f"what it holds could not be read: {err}"
                return row
            if page.unreadable:  # bad data in the store: say so, rather than count what was left out
                names = ", ".join(page.unreadable[:5])
                row["error"] = f"what it holds could not be read: the records of stream(s) {names} do not decode"
                return row
            counts: dict[str, int] = {}
            for s in page.streams:
                for lane in s.lanes:
                    for g in lane.generations:
                        if g.cluster == c.name:
                            counts[g.state.value] = counts.get(g.state.value, 0) + 1
            row["generations"], row["more"] = counts, bool(page.next_page_token)
        return row

    def streams(self, prefix: str = "", after: str = "") -> dict[str, Any]:
        """One page of streams (with `prefix`, from after `after`), the count on the first page."""
        page = self.topology.stream_page(prefix=prefix, page_size=STREAM_PAGE, page_token=after)
        return {
            "streams": [
                {
                    "name": s.name,
                    "lanes": [
                        {
                            "name": lane.name,
                            "priority": lane.priority,
                            "cluster": lane.active.cluster,
                            "generation": lane.active.number,
                            "partitions": lane.active.partitions,
                            "unsettled": sum(1 for g in lane.generations if g.state not in model.SETTLED),
                        }
                        for lane in s.lanes
                    ],
                }
                for s in page.streams
            ],
            "total": page.total,
            "next_page": page.next_page_token,
        }

    def stream(self, name: str) -> dict[str, Any]:
        """A stream with each lane's generations as a timeline: when each opened (and by which failover, who,
        why), sealed, drained or was abandoned, read from the event log's tail."""
        stream = self.topology.get_stream(name)
        marks: dict[tuple[str, int], dict[str, Any]] = {}

        def mark(lane: str, number: int) -> dict[str, Any]:
            return marks.setdefault((lane, number), {})

        oldest = 0
        for e in events.read_recent_events(self.db, limit=EVENT_SCAN):
            oldest = e.time_ms
            match e:
                case model.StreamCreated(stream=s) if s.name == name:
                    for lane in s.lanes:
                        for g in lane.generations:
                            mark(lane.name, g.number).setdefault("opened", _opening(e, "stream created"))
                case model.LaneAdded(stream=s, lane=lane) if s == name:
                    for g in lane.generations:
                        mark(lane.name, g.number).setdefault("opened", _opening(e, "lane added"))
                case model.FailedOver(stream=s, lane=lane, previous=prev, current=cur) if s == name:
                    mark(lane, cur.number).setdefault("opened", _opening(e, e.reason or "failover"))
                    mark(lane, prev.number).setdefault("draining_ms", e.time_ms)
                case model.GenerationSealed(stream=s, lane=lane, generation=g) if s == name:
                    mark(lane, g.number).setdefault("sealed_ms", e.time_ms)
                case model.GenerationDrained(stream=s, lane=lane, generation=g) if s == name:
                    mark(lane, g.number).setdefault("drained_ms", e.time_ms)
                case model.GenerationAbandoned(stream=s, lane=lane, generation=g) if s == name:
                    mark(lane, g.number).setdefault("abandoned_ms", e.time_ms)
                    mark(lane, g.number).setdefault("lost", list(e.lost))
        waits = {}
        if any(g.state == model.SEALED for lane in stream.lanes for g in lane.generations):
            every = commitlog.lag_of_every_group(self.db, stream=name, now_ms=self.clock.now_ms())
            generations = [(lane.name, g) for lane in stream.lanes for g in lane.generations]
            waits = {(w.lane, w.generation): w for w in sealed_waits(generations, every.partitions)}
        lanes = []
        for lane in stream.lanes:
            gens = []
            for g in lane.generations:
                row = {**to_jsonable(g), **marks.get((lane.name, g.number), {})}
                if (wait := waits.get((lane.name, g.number))) is not None:  # what its drain waits for
                    row["waiting_for"], row["unread"] = list(wait.groups), not wait.groups and wait.records > 0
                gens.append(row)
            lanes.append({"name": lane.name, "priority": lane.priority, "generations": gens})
        return {
            "name": stream.name,
            "lanes": lanes,
            "topic": {**to_jsonable(stream.topic), "text": stream.topic.describe()},
            "failover": to_jsonable(stream.failover),
            "now_ms": self.clock.now_ms(),
            "history_from_ms": oldest,
            "rewinds": self.db.transact(lambda tr: rewind.recent(tr, name)),
        }

    def groups(self, prefix: str = "", after: str = "") -> dict[str, Any]:
        """One page of groups (with `prefix`, from after `after`), each with its lag as the sampler last saw it
        (no commit log is read per request), and the count on the first page."""
        names, next_page, total = leases.group_page(self.db, prefix=prefix, page_size=GROUP_PAGE, page_token=after)
        rows = []
        for name in names:
            sample = self.history.latest(name)
            rows.append(
                {
                    "name": name,
                    "offset_lag": sum(sample.offset_lag.values()) if sample else None,
                    "time_lag_ms": max(sample.lanes.values(), default=0) if sample else None,
                    "sampled_ms": sample.at_ms if sample else None,
                }
            )
        return {
            "groups": rows,
            "total": total,
            "more_than_total": total >= leases.GROUP_COUNT_LIMIT,
            "next_page": next_page,
        }

    def group(self, name: str) -> dict[str, Any]:
        check_object_name("group", name)
        desc = self.assigner.describe(name)
        now = self.clock.now_ms()
        if desc.unknown:
            raise NotFoundError(f"group {name!r} does not exist", kind="group", name=name)
        headers = commitlog.read_headers(self.db, name)
        lag = commitlog.lag(self.db, name, now_ms=now)
        by_worker: dict[str, list[dict[str, Any]]] = {}
        split: dict[str, list[dict[str, Any]]] = {}
        for x in desc.leases:
            by_worker.setdefault(x.worker_id or "", []).append({**to_jsonable(x), "lease_id": x.lease_id})
            if x.slice is not None:
                split.setdefault(x.partition.lease_id, []).append(
                    {
                        "slice": x.slice.name,
                        "worker_id": x.worker_id,
                        "epoch": x.epoch,
                        "state": x.state,
                        **to_jsonable(x.load),
                    }
                )
        members = [
            {
                **to_jsonable(m),
                "ttl_left_ms": max(0, m.alive_until_ms - now),
                "leases": len(by_worker.get(m.worker_id, [])),
                "lag_records": sum(x["load"]["lag_records"] for x in by_worker.get(m.worker_id, [])),
            }
            for m in desc.members
        ]
        retries = [
            {"lease_id": ref.lease_id, "retries": h.retries, "low_watermark": h.low}
            for ref, h in headers
            if h.retries > 0
        ]
        sample = commitlog.read_rejects(self.db, name, limit=DLQ_SAMPLE)
        rejects = [
            {
                "lease_id": r.partition.lease_id,
                "offset": r.offset,
                "reason": r.reason,
                "attempts": r.attempts,
                "state": r.state,
                "rejected_ms": r.rejected_ms,
                "dlq": to_jsonable(r.dlq or {}),
            }
            for r in sample[:50]
        ]
        errors_seen = Counter(r.reason.splitlines()[0][:120] if r.reason else "" for r in sample if r.state != "purged")
        return {
            "name": name,
            "where": group_config.group_where(self.db, name),
            "filtered": sum(x.filtered for x in lag.lanes),
            "leader_replica": desc.leader_replica,
            "members": members,
            "leases": by_worker,
            "slices": [{"partition": part, "slices": pieces} for part, pieces in sorted(split.items())],
            "lag": to_jsonable(lag),
            "history": [to_jsonable(s) for s in self.history.series(name)],
            "sample_ms": self.history.sample_ms,
            "retry_backlog": {"offsets": sum(r["retries"] for r in retries), "partitions": retries[:100]},
            "rejects": {"total": sum(h.rejects for _, h in headers), "first": rejects},
            "dlq": {
                "pending": sum(x.dlq_pending for x in lag.lanes),
                "redriven": sum(x.dlq_redriven for x in lag.lanes),
                "purged": sum(x.dlq_purged for x in lag.lanes),
                "by_error": [{"reason": r, "count": n} for r, n in errors_seen.most_common(10)],
                "sampled": len(sample),
                "streams": sorted({x.stream for x in lag.lanes if x.dlq_pending}),
            },
            "events": [event_row(e) for e in events.read_recent_group_events(self.db, name, limit=50)],
        }

    def events(self, f: model.EventFilter, before: str = "") -> dict[str, Any]:
        """A page of the newest events matching `f`, newest first, older than `before` (a version)."""
        cursor = events.parse_version(before, "before") if before else None
        rows: list[dict[str, Any]] = []
        scanned = 0
        if f.group:
            check_object_name("group", f.group)
        while len(rows) < PAGE and scanned < EVENT_SCAN:
            if f.group:
                batch: list[model.Event] = list(
                    events.read_recent_group_events(self.db, f.group, before=cursor, limit=500)
                )
            else:
                batch = list(events.read_recent_events(self.db, before=cursor, limit=500))
            if not batch:
                break
            scanned += len(batch)
            cursor = bytes.fromhex(batch[-1].version)
            rows += [event_row(e) for e in batch if f.matches(e)]
        return {"events": rows[:PAGE], "more": scanned >= EVENT_SCAN or len(rows) > PAGE, "scanned": scanned}

    # -- operator actions: a preview says what will move; the same call with confirm makes it
    def failover_preview(self, stream: str, lane: str, to: str) -> dict[str, Any]:
        s = self.topology.get_stream(stream)
        current = s.require_lane(lane).active
        clusters = self.topology.list_clusters()
        if to:
            target = next((c for c in clusters if c.name == to), None)
            if target is None:
                raise NotFoundError(f"cluster {to!r} is not registered", kind="cluster", name=to)
        else:
            source = next((c for c in clusters if c.name == current.cluster), model.Cluster(current.cluster, ""))
            target = choose_target(clusters, source, self.topology.active_load())
            if target is None:
                raise FailedPreconditionError(
                    f"no healthy, uncordoned cluster other than {current.cluster!r} to fail {stream}/{lane} over to"
                )
        readers = sorted(
            {x.group for x in commitlog.lag_of_every_group(self.db, stream=stream, lane=lane, now_ms=0).lanes}
        )
        return {
            "action": "failover",
            "stream": stream,
            "lane": lane,
            "from": to_jsonable(current),
            "to": {"cluster": target.name, "health": target.health, "generation": current.number + 1},
            "groups": readers,
            "moves": [
                f"producers of {stream}/{lane} switch to g{current.number + 1} on {target.name} "
                f"({current.partitions} partitions)",
                f"g{current.number} on {current.cluster} drains: sealed once every producer switched, then read "
                f"to its end by {', '.join(readers) or 'no group yet'}",
            ],
        }

    def drain_preview(self, cluster: str, to: str) -> dict[str, Any]:
        self.topology.get_cluster(cluster)
        clusters = self.topology.list_clusters()
        held = self.topology.streams_active_on([cluster])  # what it holds, not the fleet's streams
        source = next(c for c in clusters if c.name == cluster)
        load = self.topology.active_load()
        lanes = []
        for s in held.streams:
            for lane in s.lanes:
                if lane.generations and lane.active.cluster == cluster:
                    target = next((c for c in clusters if c.name == to), None) if to else None
                    target = target or choose_target(clusters, source, load)
                    if target is not None:
                        load[target.name] = load.get(target.name, 0) + 1
                    lanes.append({"stream": s.name, "lane": lane.name, "to": target.name if target else ""})
        rate = self.topology.fleet_policy().max_failovers_per_minute
        return {
            "action": "drain",
            "cluster": cluster,
            "lanes": lanes,
            "rate_per_minute": rate,
            "moves": [f"{x['stream']}/{x['lane']} -> {x['to'] or '(no target)'}" for x in lanes]
            + [f"stream {name!r} stays: its stored records do not decode" for name in held.unreadable]
            + [f"{cluster} is cordoned: no new generation lands on it"],
        }

    def redrive_preview(self, group: str, stream: str) -> dict[str, Any]:
        """What `dlq redrive` would produce again. The console previews it; the redrive itself runs where the
        command is run, as its records go from Kafka to Kafka and never through the coordinator."""
        check_object_name("group", group)
        lanes = commitlog.lag(self.db, group, stream=stream, now_ms=self.clock.now_ms(), partitions=False).lanes
        pending = sum(x.dlq_pending for x in lanes)
        if not pending:
            raise FailedPreconditionError(f"group {group!r} has no pending rejects on {stream}: nothing to redrive")
        command = f"streamplane dlq redrive {stream} --group {group}"
        return {
            "action": "redrive",
            "pending": pending,
            "command": command,
            "moves": [
                f"{pending:,} rejected record(s) of group {group} on {stream} are produced again into "
                f"{stream}/realtime, each once, with their provenance",
                f"run it where your workers run: {command}",
            ],
        }

    def freeze_preview(self, frozen: bool) -> dict[str, Any]:
        policy = self.topology.fleet_policy()
        sick = [c.name for c in self.topology.list_clusters() if c.health != ClusterHealth.HEALTHY]
        effect = (
            "automatic failover stops fleet-wide: health is still watched and recorded, nothing moves by itself"
            if frozen
            else f"automatic failover resumes (at most {policy.max_failovers_per_minute} a minute)"
        )
        return {
            "action": "freeze" if frozen else "unfreeze",
            "frozen": policy.frozen,
            "moves": [effect] + ([f"clusters not healthy now: {', '.join(sick)}"] if sick else []),
        }

    def failover(self, stream: str, lane: str, to: str, reason: str, actor: str) -> dict[str, Any]:
        preview = self.failover_preview(stream, lane, to)
        done = self.topology.failover(stream, lane, preview["to"]["cluster"], 0, reason or "console", actor=actor)
        previous, current = done.value
        return {"done": True, "previous": to_jsonable(previous), "current": to_jsonable(current)}

    def drain(self, cluster: str, to: str, actor: str) -> dict[str, Any]:
        """Cordon the cluster and fail over its lanes, as many as the fleet's rate allows a minute; the rest
        waits for the next call (or `streamplane cluster drain`, which waits for them)."""
        preview = self.drain_preview(cluster, to)
        self.topology.cordon(cluster, True, actor=actor)
        moved: list[str] = []
        left: list[str] = []
        for x in preview["lanes"]:
            if len(moved) >= preview["rate_per_minute"] or not x["to"]:
                left.append(f"{x['stream']}/{x['lane']}")
                continue
            self.topology.failover(x["stream"], x["lane"], x["to"], 0, f"drain of cluster {cluster}", actor=actor)
            moved.append(f"{x['stream']}/{x['lane']} -> {x['to']}")
        return {"done": True, "moved": moved, "left": left}

    def freeze(self, frozen: bool, actor: str) -> dict[str, Any]:
        policy = self.topology.fleet_policy()
        done = self.topology.set_fleet_policy(model.FleetPolicy(frozen, policy.max_failovers_per_minute), actor=actor)
        return {"done": True, "policy": to_jsonable(done.value)}


def _opening(event: model.Event, why: str) -> dict[str, Any]:
    return {"time_ms": event.time_ms, "actor": event.actor, "why": why, "version": event.version}


def require_text(body: dict[str, Any], key: str, *, optional: bool = False) -> str:
    """A string field of an action's JSON body, or InvalidArgumentError naming it."""
    value = body.get(key, "")
    if not isinstance(value, str) or (not value and not optional):
        raise InvalidArgumentError(f"{key} must be a non-empty string" if not optional else f"{key} must be a string")
    return value
