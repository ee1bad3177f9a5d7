"""Stream topology: clusters, streams, lanes and generations, changed one event-sourced transaction at a time.

Each change validates, performs its Kafka side effect (topic creation, idempotent) outside any transaction,
then commits one transaction that re-validates, appends its event and updates the state. A request that
fails validation writes nothing; one that races another fails cleanly in the final transaction.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, replace
from typing import Any

from streamplane.clock import SYSTEM, Clock
from streamplane.coordinator import keys
from streamplane.coordinator.rpc import metrics
from streamplane.coordinator.store import Database, Transaction
from streamplane.coordinator.store.api import StoreUnavailableError, Watch
from streamplane.coordinator.topology import events
from streamplane.coordinator.topology.cluster_admin import ClusterAdmin, TopicSpec
from streamplane.coordinator.topology.cluster_index import (
    ActiveStreams,
    generation_counts,
    index_clusters,
    read_active_load,
    streams_active_on,
)
from streamplane.coordinator.topology.health import AUTOPILOT, Move, choose_target
from streamplane.coordinator.topology.kafka_settings import PLAINTEXT, KafkaSettings
from streamplane.coordinator.topology.pages import (
    cluster_page,
    count_stream,
    stream_page,
)
from streamplane.coordinator.topology.records import (
    DRAINED_STATE,
    PRIORITY_RANGE,
    Clusters,
    check_partitions,
    check_target,
    check_text,
    decoded_cluster,
    first_generation,
    fleet_policy,
    get_cluster,
    get_stream,
    list_clusters,
    list_streams,
    pick_cluster,
    read_clusters,
    validate_cluster,
    write_generation,
    write_lane,
)
from streamplane.errors import (
    AlreadyExistsError,
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    quoted,
)
from streamplane.model import (
    ABANDONED,
    ACTIVE,
    ADMIN_LOCAL,
    DEFAULT_LANES,
    DRAINING,
    SEALED,
    Cluster,
    ClusterHealthChanged,
    ClusterPage,
    ClusterRegistered,
    ClusterRemoved,
    ClusterUpdated,
    Event,
    FailedOver,
    FailoverPolicy,
    FleetPolicy,
    Generation,
    GenerationAbandoned,
    Lane,
    LaneAdded,
    PolicyChanged,
    Stream,
    StreamCreated,
    StreamPage,
    TopicSettings,
)
from streamplane.names import check_lane_name, check_object_name, topic_name


@dataclass(frozen=True)
class Committed:
    """The result of a change and the event-log version that recorded it."""

    value: Any
    version: str


class Topology:
    """The topology domain: reads and event-sourced changes over a store and a cluster admin."""

    def __init__(
        self,
        db: Database,
        admin: ClusterAdmin,
        clock: Clock = SYSTEM,
        *,
        control_endpoints: Collection[str] = (),
        kafka_settings: KafkaSettings = PLAINTEXT,
    ) -> None:
        self.db = db
        self.admin = admin
        self.clock = clock
        self.control_endpoints = frozenset(control_endpoints)
        """The local clusters' control endpoints this coordinator may call: the coordinator sends requests
        there, so a registration cannot choose an address (the local stack, or an operator's allow-list)."""
        self.kafka_settings = kafka_settings
        """The Kafka settings a cluster may name (`config_ref`): a registration naming others is refused."""

    def commit(self, change: Callable[[Transaction], Any]) -> Committed:
        """Run `change` (which appends exactly one event) and return its result with the event's version."""
        holder: dict[str, Transaction] = {}

        def body(tr: Transaction) -> Any:
            holder["tr"] = tr
            return change(tr)

        value = self.db.transact(body)
        try:
            version = events.committed_version(holder["tr"])
        except StoreUnavailableError:
            # FoundationDB cannot tell the versionstamp of a commit whose result was unknown (its retry found
            # the idempotency token): the log's head is at or after this change, which is what callers need
            version = events.head_version(self.db)
        return Committed(value, version)

    # clusters
    def register_cluster(self, cluster: Cluster, *, update_existing: bool = False, actor: str = "") -> Committed:
        cluster = validate_cluster(cluster)
        self.kafka_settings.check(cluster.config_ref)
        if cluster.admin == ADMIN_LOCAL and cluster.control_endpoint not in self.control_endpoints:
            raise PermissionDeniedError(
                f"cluster.control_endpoint {quoted(cluster.control_endpoint)} is not a local cluster this coordinator "
                "was started with (streamplane dev registers its own; otherwise --allow-control-endpoint)",
                permission="cluster.control_endpoint",
                resource=f"cluster/{cluster.name}",
            )

        now = self.clock.now_ms()  # the event's time, read outside the transaction body

        def change(tr: Transaction) -> Cluster:
            key = keys.cluster_key(cluster.name)
            raw = tr.get(key)
            exists = raw is not None
            if exists and not update_existing:
                raise AlreadyExistsError(
                    f"cluster {cluster.name!r} is already registered", kind="cluster", name=cluster.name
                )
            stored = cluster
            old = decoded_cluster(raw) if raw is not None else None
            if old is not None:  # an update keeps what the health monitor and the operators set (a record
                stored = replace(  # that does not decode is replaced whole)
                    cluster,
                    health=old.health,
                    health_reasons=old.health_reasons,
                    health_since_ms=old.health_since_ms,
                    cordoned=old.cordoned,
                )
            tr.set(key, stored.to_json())
            kind = ClusterUpdated if exists else ClusterRegistered
            events.append_event(tr, kind(cluster=stored), actor=actor, time_ms=now)
            return stored

        return self.commit(change)

    def list_clusters(self) -> list[Cluster]:
        return list_clusters(self.db)

    def read_clusters(self) -> Clusters:
        return read_clusters(self.db)

    def get_cluster(self, name: str) -> Cluster:
        check_object_name("name", name)
        return get_cluster(self.db, name)

    def record_health(
        self, name: str, state: str, reasons: tuple[str, ...] | list[str], *, actor: str, seen_ms: int = 0
    ) -> Committed | None:
        """Store a cluster's health as the monitor judged it from a probe begun at `seen_ms` (the state's start
        when it changed); one `cluster_health_changed` event when the state or its reasons changed, nothing
        (None) when they did not."""
        current = get_cluster(self.db, name)
        if current.health == state and current.health_reasons == list(reasons):
            return None
        now = seen_ms or self.clock.now_ms()

        def change(tr: Transaction) -> Cluster:
            old = get_cluster(tr, name)
            since = old.health_since_ms if old.health == state else now
            new = replace(old, health=state, health_reasons=list(reasons), health_since_ms=since)
            tr.set(keys.cluster_key(name), new.to_json())
            events.append_event(tr, ClusterHealthChanged(cluster=new, previous=old.health), actor=actor, time_ms=now)
            return new

        return self.commit(change)

    def cordon(self, name: str, cordoned: bool = True, *, actor: str = "") -> Committed:
        """Stop (or let again) new generations landing on a cluster; its existing ones stay until drained."""
        check_object_name("cluster", name)
        now = self.clock.now_ms()

        def change(tr: Transaction) -> Cluster:
            new = replace(get_cluster(tr, name), cordoned=cordoned)
            tr.set(keys.cluster_key(name), new.to_json())
            events.append_event(tr, ClusterUpdated(cluster=new), actor=actor, time_ms=now)
            return new

        return self.commit(change)

    def remove_cluster(self, name: str, *, actor: str = "") -> Committed:
        """Forget a cluster; refused while any generation there is not drained (its data would be lost)."""
        check_object_name("cluster", name)
        now = self.clock.now_ms()

        def change(tr: Transaction) -> str:
            get_cluster(tr, name)
            index_clusters(tr)
            r = keys.CLUSTER_GENERATIONS.range((name,))
            undrained = []
            for key, state in tr.get_range(r.start, r.stop):  # what it holds, not the fleet's streams
                if state != DRAINED_STATE:
                    _, stream, lane, number = keys.CLUSTER_GENERATIONS.unpack(key)
                    undrained.append(f"{stream}/{lane}/g{number} ({state.decode()})")
            if undrained:
                shown = ", ".join(undrained[:5]) + (f" and {len(undrained) - 5} more" if len(undrained) > 5 else "")
                raise FailedPreconditionError(
                    f"cluster {name!r} still holds {len(undrained)} undrained generation(s): {shown}; "
                    f"drain it first (streamplane cluster drain {name})"
                )
            tr.clear(keys.cluster_key(name))
            events.append_event(tr, ClusterRemoved(cluster=name), actor=actor, time_ms=now)
            return name

        return self.commit(change)

    def fleet_policy(self) -> FleetPolicy:
        return fleet_policy(self.db)

    def set_fleet_policy(self, policy: FleetPolicy, *, actor: str = "") -> Committed:
        policy.check()
        now = self.clock.now_ms()

        def change(tr: Transaction) -> FleetPolicy:
            tr.set(keys.FLEET_POLICY, policy.to_json())
            events.append_event(tr, PolicyChanged(fleet=policy), actor=actor, time_ms=now)
            return policy

        return self.commit(change)

    def set_stream_policy(self, stream: str, policy: FailoverPolicy, *, actor: str = "") -> Committed:
        check_object_name("stream", stream)
        policy.check()
        now = self.clock.now_ms()

        def change(tr: Transaction) -> Stream:
            current = get_stream(tr, stream, "stream")
            tr.set(keys.stream_key(stream), Stream(stream, topic=current.topic, failover=policy).to_json())
            events.append_event(tr, PolicyChanged(stream=stream, failover=policy), actor=actor, time_ms=now)
            return replace(current, failover=policy)

        return self.commit(change)

    # streams
    def get_stream(self, name: str) -> Stream:
        check_object_name("name", name)
        return get_stream(self.db, name, "stream")

    def describe_stream(self, name: str) -> Committed:
        """The stream and the newest event version it reflects (a watch resumed there misses no change)."""
        check_object_name("name", name)
        return Committed(*self.db.transact(lambda tr: (get_stream(tr, name, "stream"), events.head_version(tr))))

    def list_streams(self) -> list[Stream]:
        return list_streams(self.db)

    def active_load(self) -> dict[str, int]:
        return read_active_load(self.db)

    def streams_active_on(self, clusters: Collection[str]) -> ActiveStreams:
        return streams_active_on(self.db, clusters)

    def generation_counts(self) -> dict[tuple[str, str], int]:
        return generation_counts(self.db)

    def stream_page(
        self, *, prefix: str = "", page_size: int = 0, page_token: str = "", cluster: str = ""
    ) -> StreamPage:
        return stream_page(self.db, prefix=prefix, page_size=page_size, page_token=page_token, cluster=cluster)

    def cluster_page(
        self, *, prefix: str = "", page_size: int = 0, page_token: str = "", health: str = ""
    ) -> ClusterPage:
        return cluster_page(self.db, prefix=prefix, page_size=page_size, page_token=page_token, health=health)

    def create_stream(
        self, name: str, partitions: int, cluster: str = "", *, topic: TopicSettings | None = None, actor: str = ""
    ) -> Committed:
        check_object_name("name", name)
        check_partitions("partitions", partitions)
        settings = topic or TopicSettings()
        settings.check()
        if cluster:
            check_object_name("cluster", cluster)

        def plan(tr: Transaction) -> tuple[Cluster, int]:
            if tr.get(keys.stream_key(name)) is not None:
                raise AlreadyExistsError(f"stream {name!r} already exists", kind="stream", name=name)
            target = check_target(get_cluster(tr, cluster), "cluster") if cluster else pick_cluster(list_clusters(tr))
            return target, first_generation(tr, name)

        target, first = self.db.transact(plan)
        lanes = [
            Lane(lane, priority, [Generation(first, target.name, topic_name(name, lane, first), partitions)])
            for lane, priority in DEFAULT_LANES.items()
        ]
        for lane in lanes:
            self.admin.ensure_topic(target, lane.active.topic, partitions, settings)

        now = self.clock.now_ms()  # the event's time, read outside the transaction body

        def change(tr: Transaction) -> Stream:
            plan(tr)  # re-check inside the committing transaction: a concurrent create loses cleanly
            stream = Stream(name, sorted(lanes, key=lambda lane: -lane.priority), settings)
            tr.set(keys.stream_key(name), Stream(name, topic=settings).to_json())  # the policy: the default
            count_stream(tr, 1)
            for lane in lanes:
                write_lane(tr, name, lane)
            events.append_event(tr, StreamCreated(stream=stream), actor=actor, time_ms=now)
            return stream

        committed = self.commit(change)
        return Committed(self.get_stream(name), committed.version)

    def add_lane(
        self, stream: str, lane: str, priority: int, partitions: int = 0, cluster: str = "", *, actor: str = ""
    ) -> Committed:
        check_object_name("stream", stream)
        check_lane_name("lane", lane)
        if not PRIORITY_RANGE[0] <= priority <= PRIORITY_RANGE[1]:
            raise InvalidArgumentError(
                f"priority must be between {PRIORITY_RANGE[0]} and {PRIORITY_RANGE[1]}, not {priority}"
            )
        check_partitions("partitions", partitions, allow_zero=True)
        if cluster:
            check_object_name("cluster", cluster)

        def plan(tr: Transaction) -> tuple[Cluster, int, TopicSettings, int]:
            current = get_stream(tr, stream, "stream")
            if current.lane(lane) is not None:
                raise AlreadyExistsError(
                    f"lane {lane!r} already exists in stream {stream!r}", kind="lane", name=f"{stream}/{lane}"
                )
            template = (current.lane("realtime") or current.lanes[0]).active
            target = get_cluster(tr, cluster or template.cluster)
            return target, partitions or template.partitions, current.topic, first_generation(tr, stream)

        target, count, settings, first = self.db.transact(plan)
        new_lane = Lane(lane, priority, [Generation(first, target.name, topic_name(stream, lane, first), count)])
        self.admin.ensure_topic(target, new_lane.active.topic, count, settings)

        now = self.clock.now_ms()  # the event's time, read outside the transaction body

        def change(tr: Transaction) -> None:
            plan(tr)
            write_lane(tr, stream, new_lane)
            events.append_event(tr, LaneAdded(stream=stream, lane=new_lane), actor=actor, time_ms=now)

        committed = self.commit(change)
        return Committed(self.get_stream(stream), committed.version)

    def failover(
        self, stream: str, lane: str, target_cluster: str, partitions: int = 0, reason: str = "", *, actor: str = ""
    ) -> Committed:
        """Open generation g+1 of a lane on `target_cluster` and mark g draining. Value: (previous, current).
        With no target, the autopilot's choice: a healthy, uncordoned cluster, in another zone if there is one,
        with the fewest active generations per capacity weight."""
        planned = self._plan_failover(stream, lane, target_cluster, partitions, reason)
        self.admin.ensure_topic(planned.target, planned.next.topic, planned.next.partitions, planned.settings)
        return self._commit_failover(planned, actor)

    def failover_many(self, moves: Sequence[Move], *, actor: str = "") -> list[Committed | Exception]:
        """Fail many lanes over at once (a dead or drained cluster's lanes leaving it), each as `failover` does
        with the same partition count, but with one topic creation request per target cluster for all of them,
        whose leaders are made side by side and waited for together (on Kafka, creating topics one at a time
        takes tens of milliseconds each). Returns each move's result in its place: its commit, or why it failed
        (a StreamplaneError, or whatever a bug raised): one lane's failure never holds back the others."""
        results: list[Committed | Exception | None] = [None] * len(moves)
        by_target: dict[str, list[tuple[int, _PlannedFailover]]] = {}
        for i, move in enumerate(moves):
            try:
                planned = self._plan_failover(move.stream, move.lane, move.target, 0, move.reason)
            except Exception as err:  # each lane its own result
                results[i] = err
                continue
            by_target.setdefault(planned.target.name, []).append((i, planned))
        for lanes in by_target.values():
            target = lanes[0][1].target
            specs = [TopicSpec(p.next.topic, p.next.partitions, p.settings) for _, p in lanes]
            try:
                failed: dict[str, Exception] = dict(self.admin.ensure_topics(target, specs))
            except Exception as err:  # the target's lanes fail, the other targets' go on
                failed = {spec.topic: err for spec in specs}
            for i, planned in lanes:
                try:
                    refused = failed.get(planned.next.topic)
                    results[i] = refused if refused is not None else self._commit_failover(planned, actor)
                except Exception as err:  # each lane its own result
                    results[i] = err
        return [r for r in results if r is not None]

    def _plan_failover(
        self, stream: str, lane: str, target_cluster: str, partitions: int, reason: str
    ) -> _PlannedFailover:
        """A failover's checked arguments and its next generation, read in a transaction of its own (the topic is
        created outside any transaction, then the change is committed if the lane is still as planned)."""
        check_object_name("stream", stream)
        check_lane_name("lane", lane)
        if target_cluster:
            check_object_name("target_cluster", target_cluster)
        check_partitions("partitions", partitions, allow_zero=True)
        check_text("reason", reason)
        _, nxt, target, settings = self.db.transact(
            lambda tr: _failover_plan(tr, stream, lane, target_cluster, partitions)
        )
        return _PlannedFailover(stream, lane, target_cluster, partitions, reason, nxt, target, settings)

    def _commit_failover(self, planned: _PlannedFailover, actor: str) -> Committed:
        stream, lane = planned.stream, planned.lane
        now = self.clock.now_ms()  # the event's time, read outside the transaction body

        def change(tr: Transaction) -> tuple[Generation, Generation]:
            prev_now, nxt, _, _ = _failover_plan(tr, stream, lane, planned.target_cluster, planned.partitions)
            if nxt != planned.next:
                raise FailedPreconditionError(f"lane {stream}/{lane} changed during the failover; retry it")
            draining = replace(prev_now, state=DRAINING)
            write_generation(tr, stream, lane, draining)
            write_generation(tr, stream, lane, nxt)
            events.append_event(
                tr,
                FailedOver(stream=stream, lane=lane, previous=draining, current=nxt, reason=planned.reason),
                actor=actor,
                time_ms=now,
            )
            return draining, nxt

        done = self.commit(change)
        metrics.FAILOVERS.labels(stream, lane, "autopilot" if actor == AUTOPILOT else "operator").inc()
        return done

    def abandon_generation(self, stream: str, lane: str, number: int, reason: str, *, actor: str = "") -> Committed:
        """Give up a draining or sealed generation whose cluster is gone for good. Nothing is dropped silently:
        the event lists, per group and partition, the offsets never processed (to the sealed end, or "?" when
        the end could not be read). Nobody is granted its partitions again."""
        check_object_name("stream", stream)
        check_lane_name("lane", lane)
        check_text("reason", reason)
        if not reason.strip():
            raise InvalidArgumentError("reason is required: say why the generation's unread records are given up")
        now = self.clock.now_ms()

        def change(tr: Transaction) -> GenerationAbandoned:
            gen = get_stream(tr, stream, "stream").require_lane(lane).generation(number)
            if gen is None:
                name = f"{stream}/{lane}/g{number}"
                raise NotFoundError(f"{stream}/{lane} has no generation {number}", kind="generation", name=name)
            if gen.state not in (DRAINING, SEALED):
                raise FailedPreconditionError(
                    f"{stream}/{lane}/g{number} is {gen.state}: only a draining or sealed generation can be abandoned"
                    + (" (fail its lane over first)" if gen.state == ACTIVE else "")
                )
            lost = []
            r = keys.PROGRESS.range()
            for key, raw in tr.get_range(r.start, r.stop, snapshot=True):
                group, s, ln, g, partition = keys.PROGRESS.unpack(key)
                if (s, ln, g) != (stream, lane, number):
                    continue
                low = int(json.loads(raw).get("low", 0))
                end = gen.end_offsets[partition] if partition < len(gen.end_offsets) else None
                if end is None:
                    lost.append(f"group {group} p{partition}: [{low}, ?)")
                elif low < end:
                    lost.append(f"group {group} p{partition}: [{low}, {end}) ({end - low} records)")
            if not lost:
                ends = sum(gen.end_offsets) if gen.end_offsets else None
                lost.append(
                    "no group recorded progress on it: "
                    + ("its records (end offsets unknown)" if ends is None else f"its {ends} records")
                    + " are not processed by any group"
                )
            abandoned = replace(gen, state=ABANDONED)
            write_generation(tr, stream, lane, abandoned)
            event = GenerationAbandoned(stream=stream, lane=lane, generation=abandoned, reason=reason, lost=tuple(lost))
            events.append_event(tr, event, actor=actor, time_ms=now)
            return event

        return self.commit(change)

    # events
    def read_events_and_watch(self, after: bytes | None, limit: int = 1000) -> tuple[list[Event], Watch]:
        return events.read_events_and_watch(self.db, after, limit=limit)


@dataclass(frozen=True)
class _PlannedFailover:
    """A failover between its plan and its commit: what was asked, and the generation it opens where."""

    stream: str
    lane: str
    target_cluster: str
    partitions: int
    reason: str
    next: Generation
    target: Cluster
    settings: TopicSettings


def _failover_plan(
    tr: Transaction, stream: str, lane: str, target_cluster: str, partitions: int
) -> tuple[Generation, Generation, Cluster, TopicSettings]:
    """(the lane's active generation, the next one, its cluster, the stream's topic settings) of a failover."""
    whole = get_stream(tr, stream, "stream")
    current = whole.require_lane(lane)
    previous = current.active
    if target_cluster:
        target = check_target(get_cluster(tr, target_cluster, "target_cluster"), "target_cluster")
    else:
        clusters = list_clusters(tr)
        source = next((c for c in clusters if c.name == previous.cluster), None)
        found = choose_target(clusters, source or Cluster(previous.cluster, ""), read_active_load(tr))
        if found is None:
            raise FailedPreconditionError(
                f"no healthy, uncordoned cluster other than {previous.cluster!r} to fail {stream}/{lane} over to"
            )
        target = found
    count = partitions or previous.partitions
    if target.name == previous.cluster and count == previous.partitions:
        raise FailedPreconditionError(
            f"lane {stream}/{lane} is already active on cluster {target.name!r} with {count} partitions; "
            "fail over to another cluster or give another partition count"
        )
    number = previous.number + 1
    nxt = Generation(number, target.name, topic_name(stream, lane, number), count)
    return previous, nxt, target, whole.topic


__all__ = ["ACTIVE", "DRAINING", "Committed", "Topology", "validate_cluster"]
