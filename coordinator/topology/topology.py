"""Stream topology: clusters, streams, lanes and generations, changed one event-sourced transaction at a time.

Each change validates, performs its Kafka side effect (topic creation, idempotent) outside any transaction,
then commits one transaction that re-validates, appends its event and updates the state. A request that
fails validation writes nothing; one that races another fails cleanly in the final transaction.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from streamplane.clock import SYSTEM, Clock
from streamplane.coordinator import keys
from streamplane.coordinator.rpc import metrics
from streamplane.coordinator.store import Database, Transaction, transactional
from streamplane.coordinator.store.api import StoreUnavailableError, Watch
from streamplane.coordinator.topology import events
from streamplane.coordinator.topology.cluster_admin import ClusterAdmin
from streamplane.coordinator.topology.health import AUTOPILOT, HEALTHY, choose_target
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
    ADMIN_KAFKA,
    ADMIN_LOCAL,
    DEFAULT_LANES,
    DRAINED,
    DRAINING,
    SEALED,
    Cluster,
    ClusterHealth,
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
from streamplane.names import check_addresses, check_lane_name, check_object_name, parse_address, topic_name

T = TypeVar("T")

MAX_PARTITIONS = 4096
MAX_FIELD_CHARS = 1024
PRIORITY_RANGE = (0, 1000)


# -- validation (pure) -------------------------------------------------------------------------------------


def _check_text(field: str, value: str, limit: int = MAX_FIELD_CHARS) -> str:
    if len(value) > limit:
        raise InvalidArgumentError(f"{field} is {len(value)} characters long; the limit is {limit}")
    return value


def _check_partitions(field: str, value: int, *, allow_zero: bool = False) -> int:
    if (value == 0 and allow_zero) or 1 <= value <= MAX_PARTITIONS:
        return value
    raise InvalidArgumentError(f"{field} must be between 1 and {MAX_PARTITIONS}, not {value}")


def validate_cluster(cluster: Cluster) -> Cluster:
    """Return the cluster with defaults filled in, or raise InvalidArgumentError naming the field."""
    check_object_name("cluster.name", cluster.name)
    servers = check_addresses("cluster.bootstrap_servers", cluster.bootstrap_servers)
    for name in ("zone", "health", "config_ref", "control_endpoint"):
        _check_text(f"cluster.{name}", getattr(cluster, name), 256)
    weight = cluster.capacity_weight or 1.0
    if not math.isfinite(weight) or weight <= 0:
        raise InvalidArgumentError(f"cluster.capacity_weight must be a positive number, not {cluster.capacity_weight}")
    if cluster.control_endpoint:
        parse_address("cluster.control_endpoint", cluster.control_endpoint)
    admin = cluster.admin or ADMIN_KAFKA
    if admin not in (ADMIN_KAFKA, ADMIN_LOCAL):
        raise InvalidArgumentError(f"cluster.admin must be {ADMIN_KAFKA!r} or {ADMIN_LOCAL!r}, not {quoted(admin)}")
    if admin == ADMIN_LOCAL and not cluster.control_endpoint:
        raise InvalidArgumentError("cluster.control_endpoint is required for a local cluster")
    # health and cordons are the health monitor's and the operators' (CordonCluster), not a registration's
    return replace(
        cluster,
        bootstrap_servers=servers,
        capacity_weight=weight,
        admin=admin,
        health=HEALTHY,
        health_reasons=[],
        health_since_ms=0,
        cordoned=False,
    )


# -- reads ---------------------------------------------------------------------------------------------------


@transactional
def get_cluster(tr: Transaction, name: str, field: str = "cluster") -> Cluster:
    raw = tr.get(keys.cluster_key(name))
    if raw is None:
        raise NotFoundError(f"{field} {quoted(name)} is not a registered cluster", kind="cluster", name=name)
    cluster = _decoded_cluster(raw)
    if cluster is None:
        raise FailedPreconditionError(
            f"{field} {quoted(name)}: its stored record does not decode; register it again with "
            "`streamplane cluster register --update` to replace it"
        )
    return cluster


def _decoded_cluster(raw: bytes) -> Cluster | None:
    """A stored cluster record, or None when it is not one this coordinator can read (bad data in the store)."""
    try:
        cluster: Cluster = Cluster.from_json(raw)
    except _UNDECODABLE:
        return None
    return cluster


@dataclass(frozen=True)
class Clusters:
    """Every registered cluster whose record decodes, in name order, and the names of those whose do not."""

    clusters: list[Cluster]
    unreadable: list[str]


@transactional
def read_clusters(tr: Transaction) -> Clusters:
    """Every registered cluster; one record that does not decode is named, never stops the read of the rest
    (the health monitor and every fleet view read this list)."""
    r = keys.CLUSTERS.range()
    found, unreadable = [], []
    for key, raw in tr.get_range(r.start, r.stop):
        cluster = _decoded_cluster(raw)
        if cluster is None:
            unreadable.append(keys.CLUSTERS.unpack(key)[0])
        else:
            found.append(cluster)
    return Clusters(found, unreadable)


@transactional
def list_clusters(tr: Transaction) -> list[Cluster]:
    """Every registered cluster whose record decodes (see `read_clusters`)."""
    return read_clusters(tr).clusters


def _load_lanes(tr: Transaction, stream: str) -> list[Lane]:
    r = keys.LANES.range((stream,))
    lanes = []
    for key, raw in tr.get_range(r.start, r.stop):
        (_, lane_name) = keys.LANES.unpack(key)
        g = keys.GENERATIONS.range((stream, lane_name))
        gens = [Generation.from_json(v) for _, v in tr.get_range(g.start, g.stop)]
        lanes.append(replace(Lane.from_json(raw), generations=gens))
    lanes.sort(key=lambda lane: (-lane.priority, lane.name))
    return lanes


def _load_lanes_of(tr: Transaction, first: str, last: str) -> dict[str, list[Lane]]:
    """{stream: its lanes} for every stream named from `first` to `last`, in two range reads (a page of
    streams read one by one cost three reads a stream)."""
    gens: dict[tuple[str, str], list[Generation]] = {}
    g0, g1 = keys.GENERATIONS.range((first,)), keys.GENERATIONS.range((last,))
    for key, raw in tr.get_range(g0.start, g1.stop, snapshot=True):
        stream, lane, _ = keys.GENERATIONS.unpack(key)
        gens.setdefault((stream, lane), []).append(Generation.from_json(raw))
    found: dict[str, list[Lane]] = {}
    l0, l1 = keys.LANES.range((first,)), keys.LANES.range((last,))
    for key, raw in tr.get_range(l0.start, l1.stop, snapshot=True):
        stream, lane_name = keys.LANES.unpack(key)
        lane = replace(Lane.from_json(raw), generations=gens.get((stream, lane_name), []))
        found.setdefault(stream, []).append(lane)
    for lanes in found.values():
        lanes.sort(key=lambda lane: (-lane.priority, lane.name))
    return found


@transactional
def get_stream(tr: Transaction, name: str, field: str = "stream") -> Stream:
    raw = tr.get(keys.stream_key(name))
    if raw is None:
        raise NotFoundError(f"{field} {quoted(name)} does not exist", kind="stream", name=name)
    stream: Stream = Stream.from_json(raw)
    return replace(stream, lanes=_load_lanes(tr, name))


@transactional
def list_streams(tr: Transaction) -> list[Stream]:
    """Every stream (for the coordinator's own loops; a caller over the API reads pages: `stream_page`)."""
    r = keys.STREAMS.range()
    return [
        replace(Stream.from_json(v), lanes=_load_lanes(tr, Stream.from_json(v).name))
        for _, v in tr.get_range(r.start, r.stop)
    ]


PAGE_SIZE = 500
"""Streams or clusters a page holds by default."""
MAX_PAGE_SIZE = 1000
"""Streams or clusters a page holds at most."""
FILTER_SCAN_PAGES = 10
"""A filtered page looks at no more than this many pages' worth of names (it may come back short)."""
COUNT_LIMIT = 100_000
"""A first page's `total` counts matching names up to this (counting is a key scan)."""


def _check_page_args(prefix: str, page_size: int, page_token: str) -> int:
    """A page's size, once its prefix and token are checked (InvalidArgumentError otherwise)."""
    if prefix:
        check_object_name("prefix", prefix)  # every start of a valid name is one
    if page_token:
        check_object_name("page_token", page_token)
        if not page_token.startswith(prefix):
            raise InvalidArgumentError(f"page_token {quoted(page_token)} is not from a page with prefix {prefix!r}")
    return min(page_size or PAGE_SIZE, MAX_PAGE_SIZE)


def page_window(
    tr: Transaction,
    space: Any,
    key_of: Callable[[str], bytes],
    *,
    prefix: str,
    page_size: int,
    page_token: str,
    filtered: bool,
) -> tuple[int, list[tuple[str, bytes]], bool]:
    """The names a page of `space` may take, in name order from after `page_token`: (the page's size,
    [(name, stored value)] to look at, whether names are left after them). Bounded: a page's size, or
    FILTER_SCAN_PAGES of them when a filter may drop some."""
    size = _check_page_args(prefix, page_size, page_token)
    named = keys.names_starting(space, prefix)
    start = key_of(page_token) + b"\x00" if page_token else named.start
    scan = size * FILTER_SCAN_PAGES if filtered else size
    rows = tr.get_range(start, named.stop, limit=scan + 1, snapshot=True)
    return size, [(space.unpack(key)[0], raw) for key, raw in rows[:scan]], len(rows) > scan


def _fill(size: int, window: list[tuple[str, bytes]], more: bool, items: Iterable[T | None]) -> tuple[list[T], str]:
    """The page: up to `size` of `items` (one per name of the window, None where the filter drops it), and
    the token of the next page ("" when no name is left after the last one looked at)."""
    kept: list[T] = []
    looked = 0
    for item in items:
        looked += 1
        if item is not None:
            kept.append(item)
            if len(kept) == size:
                break
    left = more or looked < len(window)
    return kept, window[looked - 1][0] if left and looked else ""


@transactional
def stream_page(
    tr: Transaction, *, prefix: str = "", page_size: int = 0, page_token: str = "", cluster: str = ""
) -> StreamPage:
    """One page of streams in name order, from after `page_token`: those whose name starts with `prefix`
    and, with `cluster`, that have a generation there (read through the index by cluster: a page costs its own
    streams, however few of the fleet's are there). Bounded work (see `page_window`); `total` counts the streams
    with the prefix, on the first page only (later ones say 0)."""
    if cluster:
        check_object_name("cluster", cluster)
        return _stream_page_on(tr, cluster, prefix, page_size, page_token)
    size, window, more = page_window(
        tr,
        keys.STREAMS,
        keys.stream_key,
        prefix=prefix,
        page_size=page_size,
        page_token=page_token,
        filtered=bool(cluster),
    )
    lanes = _load_lanes_of(tr, window[0][0], window[-1][0]) if window else {}

    def items() -> Iterator[Stream | None]:
        for name, raw in window:
            stream = replace(Stream.from_json(raw), lanes=lanes.get(name, []))
            on = not cluster or any(g.cluster == cluster for lane in stream.lanes for g in lane.generations)
            yield stream if on else None

    streams, token = _fill(size, window, more, items())
    return StreamPage(streams, token, 0 if page_token else _count_streams(tr, prefix, snapshot=True))


def _stream_page_on(tr: Transaction, cluster: str, prefix: str, page_size: int, page_token: str) -> StreamPage:
    """`stream_page` with `cluster`, through the index by cluster: a page costs its own streams."""
    size = _check_page_args(prefix, page_size, page_token)
    names, more = _streams_on(tr, cluster, prefix, page_token, size)
    streams = [s for s in map(functools.partial(_stream_named, tr), names) if s is not None]
    token = names[-1] if more and names else ""
    return StreamPage(streams, token, 0 if page_token else _count_streams(tr, prefix, snapshot=True))


@transactional
def cluster_page(
    tr: Transaction, *, prefix: str = "", page_size: int = 0, page_token: str = "", health: str = ""
) -> ClusterPage:
    """One page of clusters in name order, from after `page_token`: those whose name starts with `prefix`
    and, with `health`, in that state. Bounded work (see `page_window`); `total` counts the clusters with the
    prefix on the first page only (later ones say 0)."""
    if health and health not in set(ClusterHealth):
        raise InvalidArgumentError(
            f"health must be one of {', '.join(h.value for h in ClusterHealth)}, not {quoted(health)}"
        )
    size, window, more = page_window(
        tr,
        keys.CLUSTERS,
        keys.cluster_key,
        prefix=prefix,
        page_size=page_size,
        page_token=page_token,
        filtered=bool(health),
    )

    def items() -> Iterator[Cluster | None]:
        for _, raw in window:
            found = _decoded_cluster(raw)  # one that does not decode is left out; the health monitor names it
            yield found if found is not None and (not health or found.health == health) else None

    clusters, token = _fill(size, window, more, items())
    total = 0 if page_token else _count_names(tr, keys.CLUSTERS, prefix)
    return ClusterPage(clusters, token, total)


def _count_names(tr: Transaction, space: Any, prefix: str, *, snapshot: bool = True) -> int:
    """Names in `space` that start with `prefix`, up to COUNT_LIMIT (a key scan)."""
    r = keys.names_starting(space, prefix)
    return len(tr.get_range(r.start, r.stop, limit=COUNT_LIMIT, snapshot=snapshot))


def _count_streams(tr: Transaction, prefix: str = "", *, snapshot: bool = False) -> int:
    """Streams whose name starts with `prefix`: the kept count for all of them, else (or in a store from
    before the count) a key scan, up to COUNT_LIMIT."""
    if not prefix:
        raw = tr.get(keys.STREAM_COUNT)
        if raw is not None:
            return int.from_bytes(raw, "little", signed=True)
    return _count_names(tr, keys.STREAMS, prefix, snapshot=snapshot)


def count_stream(tr: Transaction, delta: int) -> None:
    """Keep the count of streams after a create (+1) or a delete (-1) in this transaction; the first one after
    an upgrade writes it whole (the stream it creates or deletes is already in, or out of, the scan)."""
    if tr.get(keys.STREAM_COUNT) is None:
        tr.set(keys.STREAM_COUNT, _count_streams(tr).to_bytes(8, "little", signed=True))
    else:
        tr.add(keys.STREAM_COUNT, delta)


def first_generation(tr: Transaction, stream: str) -> int:
    """The number of a new lane's first generation: 1, or past every generation of a deleted stream of that
    name (its topics, if one could not be deleted, are never written or read again)."""
    raw = tr.get(keys.stream_tombstone_key(stream))
    return int(json.loads(raw)["next_generation"]) if raw else 1


def _pick_cluster(clusters: list[Cluster]) -> Cluster:
    healthy = [c for c in clusters if c.health == HEALTHY and not c.cordoned]
    if not healthy:
        raise FailedPreconditionError(
            "no healthy, uncordoned cluster is registered; register one with RegisterCluster first"
        )
    return min(healthy, key=lambda c: (-c.capacity_weight, c.name))


def _check_target(cluster: Cluster, field: str) -> Cluster:
    if cluster.cordoned:
        raise FailedPreconditionError(f"{field} {cluster.name!r} is cordoned: no new generation lands on it")
    return cluster


@transactional
def fleet_policy(tr: Transaction) -> FleetPolicy:
    raw = tr.get(keys.FLEET_POLICY)
    return FleetPolicy.from_json(raw) if raw else FleetPolicy()


# -- writes (each one transaction: event + state) -------------------------------------------------------------


def write_generation(tr: Transaction, stream: str, lane: str, gen: Generation) -> None:
    """Store a generation, keeping the index of unsettled ones (draining or sealed: the sealer's work) and the
    index by cluster with its count of active generations (see `index_clusters`)."""
    tr.set(keys.generation_key(stream, lane, gen.number), gen.to_json())
    entry = keys.cluster_generation_key(gen.cluster, stream, lane, gen.number)
    was, state = tr.get(entry), gen.state.value.encode()
    if was != state:
        tr.set(entry, state)
        if (was == _ACTIVE) != (state == _ACTIVE):
            tr.add(keys.cluster_active_key(gen.cluster), 1 if state == _ACTIVE else -1)
    marker = keys.unsettled_key(stream, lane, gen.number)
    if gen.state in (DRAINING, SEALED):
        tr.set(marker, b"")
    else:
        tr.clear(marker)
        tr.clear(keys.retired_reader_key(stream, lane, gen.number))  # settled: no reader matters any more


def forget_generation(tr: Transaction, stream: str, lane: str, gen: Generation) -> None:
    """Take a generation of a stream being deleted out of the index by cluster (its record goes with the
    stream's range)."""
    entry = keys.cluster_generation_key(gen.cluster, stream, lane, gen.number)
    if tr.get(entry) == _ACTIVE:
        tr.add(keys.cluster_active_key(gen.cluster), -1)
    tr.clear(entry)


_ACTIVE, _DRAINED = ACTIVE.value.encode(), DRAINED.value.encode()
_UNDECODABLE = (ValueError, TypeError, KeyError, AttributeError)
"""What decoding a stored record raises when it is not one this coordinator can read."""


@dataclass(frozen=True)
class ActiveStreams:
    """What `streams_active_on` found: the streams, and the names of those whose records do not decode."""

    streams: list[Stream]
    unreadable: list[str]


def index_clusters(tr: Transaction) -> None:
    """Build the index by cluster once, for a store written before it existed: every generation's entry and
    every cluster's count of active ones, from the generations themselves (what writes kept meanwhile is
    replaced). Readers of the index call this first; afterwards it costs one read."""
    if tr.get(keys.CLUSTER_INDEXED) is not None:
        return
    for space in (keys.CLUSTER_GENERATIONS, keys.CLUSTER_ACTIVE):
        r = space.range()
        tr.clear_range(r.start, r.stop)
    active: dict[str, int] = {}
    r = keys.GENERATIONS.range()
    for key, raw in tr.get_range(r.start, r.stop):
        stream, lane, number = keys.GENERATIONS.unpack(key)
        gen = Generation.from_json(raw)
        tr.set(keys.cluster_generation_key(gen.cluster, stream, lane, number), gen.state.value.encode())
        if gen.state == ACTIVE:
            active[gen.cluster] = active.get(gen.cluster, 0) + 1
    for cluster, count in active.items():
        tr.set(keys.cluster_active_key(cluster), count.to_bytes(8, "little", signed=True))
    tr.set(keys.CLUSTER_INDEXED, b"1")


@transactional
def read_active_load(tr: Transaction) -> dict[str, int]:
    """Active generations per cluster (what a failover target is chosen by): one read per cluster."""
    index_clusters(tr)
    r = keys.CLUSTER_ACTIVE.range()
    load = {}
    for key, raw in tr.get_range(r.start, r.stop, snapshot=True):
        count = int.from_bytes(raw, "little", signed=True)
        if count:
            load[keys.CLUSTER_ACTIVE.unpack(key)[0]] = count
    return load


@transactional
def streams_active_on(tr: Transaction, clusters: Collection[str]) -> ActiveStreams:
    """The streams with a lane whose active generation is on one of `clusters` (what an evacuation moves), in
    name order: reads those clusters' own generations, not the fleet's. A stream whose stored records do not
    decode is named in `unreadable` instead: one bad record never holds back the others' evacuation."""
    index_clusters(tr)
    names: set[str] = set()
    for cluster in sorted(set(clusters)):
        r = keys.CLUSTER_GENERATIONS.range((cluster,))
        for key, state in tr.get_range(r.start, r.stop, snapshot=True):
            if state == _ACTIVE:
                names.add(keys.CLUSTER_GENERATIONS.unpack(key)[1])
    found, unreadable = [], []
    for name in sorted(names):
        try:
            stream = _stream_named(tr, name)
        except _UNDECODABLE:
            unreadable.append(name)
            continue
        if stream is not None:
            found.append(stream)
    return ActiveStreams(found, unreadable)


def _stream_named(tr: Transaction, name: str) -> Stream | None:
    """The stream `name` with its lanes, or None when there is none."""
    raw = tr.get(keys.stream_key(name))
    return None if raw is None else replace(Stream.from_json(raw), lanes=_load_lanes(tr, name))


@transactional
def generation_counts(tr: Transaction) -> dict[tuple[str, str], int]:
    """Generations per (cluster, state), from the index by cluster: its entries only, no stream is read."""
    index_clusters(tr)
    r = keys.CLUSTER_GENERATIONS.range()
    counts: dict[tuple[str, str], int] = {}
    for key, state in tr.get_range(r.start, r.stop, snapshot=True):
        at = (keys.CLUSTER_GENERATIONS.unpack(key)[0], state.decode())
        counts[at] = counts.get(at, 0) + 1
    return counts


def _streams_on(tr: Transaction, cluster: str, prefix: str, page_token: str, size: int) -> tuple[list[str], bool]:
    """Up to `size` names of streams with a generation on `cluster` (any state), in name order after
    `page_token`, starting with `prefix`; and whether more are left. Reads those streams' entries only."""
    index_clusters(tr)
    r = keys.cluster_streams_starting(cluster, prefix)
    start = keys.cluster_stream_end(cluster, page_token) if page_token else r.start
    names: list[str] = []
    while True:
        rows = tr.get_range(start, r.stop, limit=4 * size + 1, snapshot=True)
        for key, _ in rows:
            name = keys.CLUSTER_GENERATIONS.unpack(key)[1]
            if not names or names[-1] != name:
                if len(names) == size:
                    return names, True
                names.append(name)
        if len(rows) <= 4 * size:
            return names, False
        start = rows[-1][0] + b"\x00"


def _write_lane(tr: Transaction, stream: str, lane: Lane) -> None:
    tr.set(keys.lane_key(stream, lane.name), Lane(lane.name, lane.priority).to_json())
    for gen in lane.generations:
        write_generation(tr, stream, lane.name, gen)


@dataclass(frozen=True)
class Committed:
    """The result of a change and the event-log version that recorded it."""

    value: Any
    version: str


class Topology:
    """The topology domain: reads and event-sourced changes over a store and a cluster admin."""

    def __init__(
        self, db: Database, admin: ClusterAdmin, clock: Clock = SYSTEM, *, control_endpoints: Collection[str] = ()
    ) -> None:
        self.db = db
        self.admin = admin
        self.clock = clock
        self.control_endpoints = frozenset(control_endpoints)
        """The local clusters' control endpoints this coordinator may call: the coordinator sends requests
        there, so a registration cannot choose an address (the local stack, or an operator's allow-list)."""

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
            old = _decoded_cluster(raw) if raw is not None else None
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
                if state != _DRAINED:
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
        _check_partitions("partitions", partitions)
        settings = topic or TopicSettings()
        settings.check()
        if cluster:
            check_object_name("cluster", cluster)

        def plan(tr: Transaction) -> tuple[Cluster, int]:
            if tr.get(keys.stream_key(name)) is not None:
                raise AlreadyExistsError(f"stream {name!r} already exists", kind="stream", name=name)
            target = _check_target(get_cluster(tr, cluster), "cluster") if cluster else _pick_cluster(list_clusters(tr))
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
                _write_lane(tr, name, lane)
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
        _check_partitions("partitions", partitions, allow_zero=True)
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
            _write_lane(tr, stream, new_lane)
            events.append_event(tr, LaneAdded(stream=stream, lane=new_lane), actor=actor, time_ms=now)

        committed = self.commit(change)
        return Committed(self.get_stream(stream), committed.version)

    def failover(
        self, stream: str, lane: str, target_cluster: str, partitions: int = 0, reason: str = "", *, actor: str = ""
    ) -> Committed:
        """Open generation g+1 of a lane on `target_cluster` and mark g draining. Value: (previous, current).
        With no target, the autopilot's choice: a healthy, uncordoned cluster, in another zone if there is one,
        with the fewest active generations per capacity weight."""
        check_object_name("stream", stream)
        check_lane_name("lane", lane)
        if target_cluster:
            check_object_name("target_cluster", target_cluster)
        _check_partitions("partitions", partitions, allow_zero=True)
        _check_text("reason", reason)

        def plan(tr: Transaction) -> tuple[Generation, Generation, Cluster, TopicSettings]:
            whole = get_stream(tr, stream, "stream")
            current = whole.require_lane(lane)
            previous = current.active
            if target_cluster:
                target = _check_target(get_cluster(tr, target_cluster, "target_cluster"), "target_cluster")
            else:
                clusters = list_clusters(tr)
                source = next((c for c in clusters if c.name == previous.cluster), None)
                found = choose_target(clusters, source or Cluster(previous.cluster, ""), read_active_load(tr))
                if found is None:
                    raise FailedPreconditionError(
                        f"no healthy, uncordoned cluster other than {previous.cluster!r} "
                        f"to fail {stream}/{lane} over to"
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

        _, nxt, target, settings = self.db.transact(plan)
        self.admin.ensure_topic(target, nxt.topic, nxt.partitions, settings)

        now = self.clock.now_ms()  # the event's time, read outside the transaction body

        def change(tr: Transaction) -> tuple[Generation, Generation]:
            prev_now, planned, _, _ = plan(tr)
            if planned != nxt:
                raise FailedPreconditionError(f"lane {stream}/{lane} changed during the failover; retry it")
            draining = replace(prev_now, state=DRAINING)
            write_generation(tr, stream, lane, draining)
            write_generation(tr, stream, lane, nxt)
            events.append_event(
                tr,
                FailedOver(stream=stream, lane=lane, previous=draining, current=nxt, reason=reason),
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
        _check_text("reason", reason)
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


__all__ = ["ACTIVE", "DRAINING", "Committed", "Topology", "validate_cluster"]
