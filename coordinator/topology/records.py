"""Stored topology records: clusters, streams, lanes and generations, read and written inside a transaction.

The functions every topology change and reader share: validation of a cluster, reads that tolerate a record
this coordinator cannot decode (`read_clusters`), and `write_generation`, which keeps the indexes a generation
is in (unsettled ones, and the index by cluster) in step with it.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace

from streamplane.coordinator import keys
from streamplane.coordinator.store import Transaction, transactional
from streamplane.coordinator.topology.health import HEALTHY
from streamplane.errors import (
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    quoted,
)
from streamplane.model import (
    ACTIVE,
    ADMIN_KAFKA,
    ADMIN_LOCAL,
    DRAINED,
    DRAINING,
    SEALED,
    Cluster,
    FleetPolicy,
    Generation,
    Lane,
    Stream,
)
from streamplane.names import check_addresses, check_object_name, parse_address

MAX_PARTITIONS = 4096
MAX_FIELD_CHARS = 1024
PRIORITY_RANGE = (0, 1000)


# -- validation (pure) -------------------------------------------------------------------------------------


def check_text(field: str, value: str, limit: int = MAX_FIELD_CHARS) -> str:
    if len(value) > limit:
        raise InvalidArgumentError(f"{field} is {len(value)} characters long; the limit is {limit}")
    return value


def check_partitions(field: str, value: int, *, allow_zero: bool = False) -> int:
    if (value == 0 and allow_zero) or 1 <= value <= MAX_PARTITIONS:
        return value
    raise InvalidArgumentError(f"{field} must be between 1 and {MAX_PARTITIONS}, not {value}")


def validate_cluster(cluster: Cluster) -> Cluster:
    """Return the cluster with defaults filled in, or raise InvalidArgumentError naming the field."""
    check_object_name("cluster.name", cluster.name)
    servers = check_addresses("cluster.bootstrap_servers", cluster.bootstrap_servers)
    for name in ("zone", "health", "config_ref", "control_endpoint"):
        check_text(f"cluster.{name}", getattr(cluster, name), 256)
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
    cluster = decoded_cluster(raw)
    if cluster is None:
        raise FailedPreconditionError(
            f"{field} {quoted(name)}: its stored record does not decode; register it again with "
            "`streamplane cluster register --update` to replace it"
        )
    return cluster


def decoded_cluster(raw: bytes) -> Cluster | None:
    """A stored cluster record, or None when it is not one this coordinator can read (bad data in the store)."""
    try:
        cluster: Cluster = Cluster.from_json(raw)
    except UNDECODABLE:
        return None
    return cluster


def decoded_generation(raw: bytes | None) -> Generation | None:
    """A stored generation record, or None when there is none or it does not decode (bad data in the store):
    for the passes over every generation, which must leave a torn one behind, never stop on it."""
    if raw is None:
        return None
    try:
        gen: Generation = Generation.from_json(raw)
    except UNDECODABLE:
        return None
    return gen


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
        cluster = decoded_cluster(raw)
        if cluster is None:
            unreadable.append(keys.CLUSTERS.unpack(key)[0])
        else:
            found.append(cluster)
    return Clusters(found, unreadable)


@transactional
def list_clusters(tr: Transaction) -> list[Cluster]:
    """Every registered cluster whose record decodes (see `read_clusters`)."""
    return read_clusters(tr).clusters


def load_lanes(tr: Transaction, stream: str) -> list[Lane]:
    r = keys.LANES.range((stream,))
    lanes = []
    for key, raw in tr.get_range(r.start, r.stop):
        (_, lane_name) = keys.LANES.unpack(key)
        g = keys.GENERATIONS.range((stream, lane_name))
        gens = [Generation.from_json(v) for _, v in tr.get_range(g.start, g.stop)]
        lanes.append(replace(Lane.from_json(raw), generations=gens))
    lanes.sort(key=lambda lane: (-lane.priority, lane.name))
    return lanes


def load_lanes_of(tr: Transaction, first: str, last: str) -> tuple[dict[str, list[Lane]], set[str]]:
    """{stream: its lanes} for every stream named from `first` to `last`, in two range reads (a page of
    streams read one by one cost three reads a stream), and the names of the streams a lane or generation
    record of which does not decode (left out of the first: one torn record never fails a page)."""
    gens: dict[tuple[str, str], list[Generation]] = {}
    unreadable: set[str] = set()
    g0, g1 = keys.GENERATIONS.range((first,)), keys.GENERATIONS.range((last,))
    for key, raw in tr.get_range(g0.start, g1.stop, snapshot=True):
        stream, lane, _ = keys.GENERATIONS.unpack(key)
        gen = decoded_generation(raw)
        if gen is None:
            unreadable.add(stream)
            continue
        gens.setdefault((stream, lane), []).append(gen)
    found: dict[str, list[Lane]] = {}
    l0, l1 = keys.LANES.range((first,)), keys.LANES.range((last,))
    for key, raw in tr.get_range(l0.start, l1.stop, snapshot=True):
        stream, lane_name = keys.LANES.unpack(key)
        try:
            lane = replace(Lane.from_json(raw), generations=gens.get((stream, lane_name), []))
        except UNDECODABLE:
            unreadable.add(stream)
            continue
        found.setdefault(stream, []).append(lane)
    for lanes in found.values():
        lanes.sort(key=lambda lane: (-lane.priority, lane.name))
    for name in unreadable:
        found.pop(name, None)
    return found, unreadable


@transactional
def require_stream(tr: Transaction, name: str) -> None:
    """NotFoundError for a stream that does not exist (its record is not decoded: one torn still exists)."""
    if tr.get(keys.stream_key(name)) is None:
        raise NotFoundError(f"stream {quoted(name)} does not exist", kind="stream", name=name)


@transactional
def get_stream(tr: Transaction, name: str, field: str = "stream") -> Stream:
    raw = tr.get(keys.stream_key(name))
    if raw is None:
        raise NotFoundError(f"{field} {quoted(name)} does not exist", kind="stream", name=name)
    try:
        stream: Stream = Stream.from_json(raw)
        return replace(stream, lanes=load_lanes(tr, name))
    except UNDECODABLE as err:  # bad data in the store: one sentence, never a crash of the caller's loop
        raise FailedPreconditionError(
            f"{field} {quoted(name)}: a record the store holds for it does not decode ({type(err).__name__}); "
            "nothing can be done with it until it is repaired or the stream deleted"
        ) from err


@transactional
def list_streams(tr: Transaction) -> list[Stream]:
    """Every stream (for the coordinator's own loops; a caller over the API reads pages: `stream_page`)."""
    r = keys.STREAMS.range()
    return [
        replace(Stream.from_json(v), lanes=load_lanes(tr, Stream.from_json(v).name))
        for _, v in tr.get_range(r.start, r.stop)
    ]


def first_generation(tr: Transaction, stream: str) -> int:
    """The number of a new lane's first generation: 1, or past every generation of a deleted stream of that
    name (its topics, if one could not be deleted, are never written or read again)."""
    raw = tr.get(keys.stream_tombstone_key(stream))
    return int(json.loads(raw)["next_generation"]) if raw else 1


def pick_cluster(clusters: list[Cluster]) -> Cluster:
    healthy = [c for c in clusters if c.health == HEALTHY and not c.cordoned]
    if not healthy:
        raise FailedPreconditionError(
            "no healthy, uncordoned cluster is registered; register one with RegisterCluster first"
        )
    return min(healthy, key=lambda c: (-c.capacity_weight, c.name))


def check_target(cluster: Cluster, field: str) -> Cluster:
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
        if (was == ACTIVE_STATE) != (state == ACTIVE_STATE):
            tr.add(keys.cluster_active_key(gen.cluster), 1 if state == ACTIVE_STATE else -1)
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
    if tr.get(entry) == ACTIVE_STATE:
        tr.add(keys.cluster_active_key(gen.cluster), -1)
    tr.clear(entry)


ACTIVE_STATE, DRAINED_STATE = ACTIVE.value.encode(), DRAINED.value.encode()
UNDECODABLE = (ValueError, TypeError, KeyError, AttributeError)
"""What decoding a stored record raises when it is not one this coordinator can read."""


def stream_named(tr: Transaction, name: str) -> Stream | None:
    """The stream `name` with its lanes, or None when there is none."""
    raw = tr.get(keys.stream_key(name))
    return None if raw is None else replace(Stream.from_json(raw), lanes=load_lanes(tr, name))


def readable_streams(tr: Transaction, names: list[str]) -> tuple[list[Stream], list[str]]:
    """The named streams that exist, in the order given, and the names of those whose stored records do not
    decode (bad data in the store): for a pass or a page over many, which one bad record must not stop."""
    found, unreadable = [], []
    for name in names:
        try:
            stream = stream_named(tr, name)
        except UNDECODABLE:
            unreadable.append(name)
            continue
        if stream is not None:
            found.append(stream)
    return found, unreadable


def write_lane(tr: Transaction, stream: str, lane: Lane) -> None:
    tr.set(keys.lane_key(stream, lane.name), Lane(lane.name, lane.priority).to_json())
    for gen in lane.generations:
        write_generation(tr, stream, lane.name, gen)
