"""Every key the coordinator writes, built from `fdb.tuple` subspaces under one root. Nothing else packs keys.

Layout (tuples; values are UTF-8 JSON unless noted), the same on FoundationDB and on the embedded store,
documented for operators in fdb/KEYS.md:

    ("streamplane", "cluster", name)                    -> Cluster
    ("streamplane", "stream", name)                     -> Stream header {name}
    ("streamplane", "lane", stream, lane)               -> Lane header {name, priority}
    ("streamplane", "gen", stream, lane, number)        -> Generation
    ("streamplane", "unsettled", stream, lane, number)  -> b"": index of the generations draining or sealed
                                                           (the sealer's work: it never scans every generation)
    ("streamplane", "cluster_gen", cluster, stream, lane, number)
                                                        -> the generation's state: index of what a cluster holds
    ("streamplane", "cluster_active", cluster)          -> 8-byte little-endian count of its active generations
    ("streamplane", "cluster_gen_indexed")              -> b"1" once the two above cover older stores
    ("streamplane", "event", Versionstamp)              -> Event {type, time_ms, actor, data}
    ("streamplane", "event_head")                       -> 8-byte little-endian count of events (a watch key)
    ("streamplane", "group", group)                     -> Group {name}: groups the assignment loop serves
    ("streamplane", "member", group, worker_id)         -> Member {session_id, capacity, load, alive_until_ms, ...}
    ("streamplane", "lease", group, stream, lane, generation, partition)
                                                        -> Lease {worker_id, epoch, state, target, deadline_ms, load}
    ("streamplane", "held", group, worker_id, stream, lane, generation, partition)
                                                        -> b"": index of the leases a member holds
    ("streamplane", "slice_lease", group, stream, lane, generation, partition, index)
                                                        -> Lease of one key slice of a split partition (+ slices)
    ("streamplane", "slice_held", group, worker_id, stream, lane, generation, partition, index)
                                                        -> b"": index of the slice leases a member holds
    ("streamplane", "member_version", group, worker_id) -> counter bumped when the member's leases change (watch)
    ("streamplane", "group_version", group)             -> counter bumped when membership or leases change (watch)
    ("streamplane", "group_loads", group)               -> counter bumped when a worker reports changed lease loads
    ("streamplane", "load_report", group, stream, lane, generation, partition) -> b"": a lease whose load changed
    ("streamplane", "leader")                           -> Leader {replica, expires_ms}: runs the sealer, autopilot
    ("streamplane", "group_owner", group)               -> {replica, expires_ms}: the replica running the group's
                                                           assignment (groups spread over the live replicas)
    ("streamplane", "replica", replica)                 -> {expires_ms}: a live coordinator replica
    ("streamplane", "sealer_wake")                     -> counter bumped by topology events, rewinds and windows
    ("streamplane", "assigner_wake")                    -> counter bumped by every group change (the loop's watch)
    ("streamplane", "group_config", group)              -> {max_attempts: {lane: n}}
    ("streamplane", "progress", group, stream, lane, generation, partition)
                                                        -> Progress {low, high, high_ts_ms, oldest_pending_ts_ms, ...}
    ("streamplane", "done", group, stream, lane, generation, partition, chunk)
                                                        -> done ranges above the low watermark with offsets in
                                                           [chunk * 4096, (chunk + 1) * 4096), as varints
    ("streamplane", "retry", group, stream, lane, generation, partition, offset)
                                                        -> {attempts, next_ms, error, exhausted, copies, copy_ms}
    ("streamplane", "reject", group, stream, lane, generation, partition, offset)
                                                        -> {reason, dlq, attempts, time_ms, state}
    ("streamplane", "redriven", group, stream, lane, generation, partition, chunk)
                                                        -> bitmap (little-endian): bit i set, the reject at offset
                                                           chunk * 4096 + i was produced again by `dlq redrive`
    ("streamplane", "redrive", group, stream)           -> a running dlq redrive's claim and its batches in flight
    ("streamplane", "redrive", group, stream, "changes")
                                                        -> count (decimal): the group's reject marks on the stream
                                                           were changed by a rewind or a purge this many times
    ("streamplane", "reopened", group, stream, lane, generation)
                                                        -> b"": a drained generation reopened for that group
    ("streamplane", "rewind", stream, time_ms, group)   -> {actor, reason}: a rewind, for the stream's timeline
    ("streamplane", "window", group)                    -> {stream, from_ms, until_ms, finished}: a replay window
    ("streamplane", "window_end", group, stream, lane, generation, partition)
                                                        -> where that partition of the group's window ends
    ("streamplane", "producer", producer_id)           -> ProducerSession {topology_version, in_flight, alive_until_ms}
    ("streamplane", "revoked", token_id)               -> {revoked_ms, by, reason}: a bearer token taken back
    ("streamplane", "seal_wait", stream, lane, generation)
                                                        -> event version producers must route by before a seal
    ("streamplane", "unsettled_indexed")                -> b"1" once the unsettled index covers older stores
    ("streamplane", "group_event", group, Versionstamp) -> GroupChanged {type, time_ms, actor, data}: group churn
    ("streamplane", "group_event_head", group)          -> 8-byte count of the group's events (its watchers' key)
    ("streamplane", "txn", process, slot)               -> idempotency token of a process's recent writing attempt
    ("streamplane", "fleet_policy")                     -> FleetPolicy {frozen, max_failovers_per_minute}
    ("streamplane", "worker_errors", group, worker_id)  -> [[cluster, errors, last error, at_ms]]: what a worker's
                                                           fetches met lately (the health monitor reads them)
    ("streamplane", "producer_errors", producer_id)     -> [[cluster, errors, last error, at_ms]]: what a producer
                                                           reported lately, kept only while it reports errors
    ("streamplane", "group_seen", group)                -> {at_ms}: when the group was last known active (a member
                                                           left; the reaper moves it to its newest commit)
    ("streamplane", "stream_count")                     -> 8-byte little-endian count of streams (a page's total
                                                           without a prefix; written by the first create or delete
                                                           after an upgrade, counted until then)
    ("streamplane", "stream_tombstone", stream)         -> {next_generation, deleted_ms}: a deleted stream; one created
                                                           again by that name numbers its generations from there,
                                                           so its topics never meet the old ones' (a topic whose
                                                           deletion failed keeps its records)
    ("streamplane", "retired_reader", stream, lane, generation)
                                                        -> b"": a deleted group had read this unsettled generation
                                                           (it drains once the groups left are done, if none are)
"""

from __future__ import annotations

import functools
import types
from typing import TYPE_CHECKING, Any

import fdb.tuple
from fdb.subspace_impl import Subspace

import fdb

if not hasattr(fdb, "impl"):
    # fdb.tuple's Versionstamp.to_bytes checks isinstance(x, fdb.impl.Value), and fdb.impl loads libfdb_c on
    # import. Without the C library (the embedded store) no value can be an fdb.impl.Value, so a stand-in
    # class keeps packing working; importing the real fdb.impl later replaces it.
    fdb.impl = types.SimpleNamespace(Value=type("_NoFdbValue", (), {}))

if TYPE_CHECKING:
    from streamplane.model import PartitionRef

Versionstamp = fdb.tuple.Versionstamp

KEY_CACHE = 1 << 15
"""Keys (and key tuples) remembered per direction: the coordinator packs and parses the same leases, progress
and counters again and again, and fdb.tuple does it in Python (a sixth of a simulated world's time)."""


@functools.lru_cache(maxsize=KEY_CACHE)
def _pack(prefix: bytes, t: tuple[str | int, ...]) -> bytes:
    return prefix + fdb.tuple.pack(t)


@functools.lru_cache(maxsize=KEY_CACHE)
def _unpack(key: bytes, prefix_len: int) -> tuple[Any, ...]:
    return fdb.tuple.unpack(key, prefix_len=prefix_len)


_PLAIN = frozenset((str, int))


class _Subspace(Subspace):  # type: ignore[misc]
    """fdb's Subspace, remembering what it packed and parsed. Only tuples of strings and ints are remembered:
    a cache looks tuples up by equality, and (1,), (True,) and (1.0,) are equal but pack differently."""

    def __getitem__(self, name: str) -> _Subspace:
        return _Subspace((name,), self.rawPrefix)

    def pack(self, t: tuple[Any, ...] = ()) -> bytes:
        if _PLAIN.issuperset(map(type, t)):
            return _pack(self.rawPrefix, t)
        return super().pack(t)

    def unpack(self, key: bytes) -> tuple[Any, ...]:
        if not key.startswith(self.rawPrefix):
            raise ValueError("Cannot unpack key that is not in subspace.")
        return _unpack(key, len(self.rawPrefix))

    def range(self, t: tuple[Any, ...] = ()) -> slice:
        packed = self.pack(t)
        return slice(packed + b"\x00", packed + b"\xff")


ROOT = _Subspace(("streamplane",))

CLUSTERS = ROOT["cluster"]
STREAMS = ROOT["stream"]
LANES = ROOT["lane"]
GENERATIONS = ROOT["gen"]
UNSETTLED = ROOT["unsettled"]
UNSETTLED_INDEXED = ROOT.pack(("unsettled_indexed",))
CLUSTER_GENERATIONS = ROOT["cluster_gen"]
"""(cluster, stream, lane, generation) -> the generation's state: what each cluster holds, read in O(its own)."""
CLUSTER_ACTIVE = ROOT["cluster_active"]
"""(cluster,) -> how many active generations it holds (a counter): the load a failover target is chosen by."""
CLUSTER_INDEXED = ROOT.pack(("cluster_gen_indexed",))
EVENTS = ROOT["event"]
EVENT_HEAD = ROOT.pack(("event_head",))
GROUPS = ROOT["group"]
GROUP_LOADS = ROOT["group_loads"]
LOAD_REPORTS = ROOT["load_report"]
MEMBERS = ROOT["member"]
WORKER_ERRORS = ROOT["worker_errors"]
LEASES = ROOT["lease"]
HELD = ROOT["held"]
SLICE_LEASES = ROOT["slice_lease"]
"""(group, stream, lane, generation, partition, index) -> the lease of one slice of a split partition."""
SLICE_HELD = ROOT["slice_held"]
"""(group, worker, stream, lane, generation, partition, index) -> b"": the slice leases a member holds."""
MEMBER_VERSIONS = ROOT["member_version"]
GROUP_VERSIONS = ROOT["group_version"]
LEADER = ROOT.pack(("leader",))
GROUP_OWNERS = ROOT["group_owner"]
REPLICAS = ROOT["replica"]
ASSIGNER_WAKE = ROOT.pack(("assigner_wake",))
SEALER_WAKE = ROOT.pack(("sealer_wake",))
"""A counter bumped with every topology event and by rewinds and replay windows: the sealer watches it."""
GROUP_CONFIGS = ROOT["group_config"]
PROGRESS = ROOT["progress"]
DONE = ROOT["done"]
RETRIES = ROOT["retry"]
REJECTS = ROOT["reject"]
PRODUCERS = ROOT["producer"]
PRODUCER_ERRORS = ROOT["producer_errors"]
REVOKED = ROOT["revoked"]
SEAL_WAITS = ROOT["seal_wait"]
GROUP_EVENTS = ROOT["group_event"]
GROUP_EVENT_HEADS = ROOT["group_event_head"]
TXN_TOKENS = ROOT["txn"]
FLEET_POLICY = ROOT.pack(("fleet_policy",))
GROUP_SEEN = ROOT["group_seen"]
RETIRED_READERS = ROOT["retired_reader"]
STREAM_TOMBSTONES = ROOT["stream_tombstone"]
STREAM_COUNT = ROOT.pack(("stream_count",))
REDRIVEN = ROOT["redriven"]
"""(group, stream, lane, generation, partition, chunk) -> bitmap of the rejects `dlq redrive` produced again: a
batch sets bits a chunk at a time instead of rewriting thousands of marks (a purged mark stays purged)."""
REDRIVES = ROOT["redrive"]
"""(group, stream) -> a running redrive's claim: its owner, until when, its cursor and the batches in flight."""
WINDOWS = ROOT["window"]
"""(group,) -> a side group's replay window: its stream, start and end times, and whether it is finished."""
WINDOW_ENDS = ROOT["window_end"]
"""(group, stream, lane, generation, partition) -> where that partition of the group's window ends."""
REWINDS = ROOT["rewind"]
"""(stream, time_ms, group) -> {actor, reason}: the rewinds of a stream's groups, for its page's timeline."""
REOPENED = ROOT["reopened"]
"""(group, stream, lane, generation) -> b"": a drained generation a rewind reopened for that group alone."""


def cluster_key(name: str) -> bytes:
    return CLUSTERS.pack((name,))


def stream_key(name: str) -> bytes:
    return STREAMS.pack((name,))


def lane_key(stream: str, lane: str) -> bytes:
    return LANES.pack((stream, lane))


def generation_key(stream: str, lane: str, number: int) -> bytes:
    return GENERATIONS.pack((stream, lane, number))


def unsettled_key(stream: str, lane: str, number: int) -> bytes:
    return UNSETTLED.pack((stream, lane, number))


def cluster_generation_key(cluster: str, stream: str, lane: str, number: int) -> bytes:
    return CLUSTER_GENERATIONS.pack((cluster, stream, lane, number))


def cluster_active_key(cluster: str) -> bytes:
    return CLUSTER_ACTIVE.pack((cluster,))


def cluster_stream_end(cluster: str, stream: str) -> bytes:
    """A key past every index entry of `stream` on `cluster` and before the next stream's."""
    return CLUSTER_GENERATIONS.pack((cluster, stream)) + b"\xff"


def cluster_streams_starting(cluster: str, prefix: str) -> slice:
    """The index entries of `cluster`'s generations whose stream's name starts with `prefix`."""
    return names_starting(CLUSTER_GENERATIONS[cluster], prefix)


def group_owner_key(group: str) -> bytes:
    return GROUP_OWNERS.pack((group,))


def replica_key(replica: str) -> bytes:
    return REPLICAS.pack((replica,))


def group_key(group: str) -> bytes:
    return GROUPS.pack((group,))


def member_key(group: str, worker_id: str) -> bytes:
    return MEMBERS.pack((group, worker_id))


def worker_errors_key(group: str, worker_id: str) -> bytes:
    return WORKER_ERRORS.pack((group, worker_id))


def lease_key(group: str, stream: str, lane: str, generation: int, partition: int) -> bytes:
    return LEASES.pack((group, stream, lane, generation, partition))


def slice_lease_key(group: str, stream: str, lane: str, generation: int, partition: int, index: int) -> bytes:
    return SLICE_LEASES.pack((group, stream, lane, generation, partition, index))


def slice_held_key(
    group: str, worker_id: str, stream: str, lane: str, generation: int, partition: int, index: int
) -> bytes:
    return SLICE_HELD.pack((group, worker_id, stream, lane, generation, partition, index))


def slice_held_key_prefix(group: str, worker_id: str) -> bytes:
    """What every key of a member's slice holder index begins with; the rest is the packed slice key's tail."""
    return SLICE_HELD.pack((group, worker_id))


def slice_lease_key_prefix(group: str) -> bytes:
    """What every slice lease key of a group begins with."""
    return SLICE_LEASES.pack((group,))


def member_version_key(group: str, worker_id: str) -> bytes:
    return MEMBER_VERSIONS.pack((group, worker_id))


def group_version_key(group: str) -> bytes:
    return GROUP_VERSIONS.pack((group,))


def group_loads_key(group: str) -> bytes:
    return GROUP_LOADS.pack((group,))


def load_report_key(group: str, stream: str, lane: str, generation: int, partition: int) -> bytes:
    """Set by a heartbeat that wrote a lease's load, cleared by the group's owner once it has read it."""
    return LOAD_REPORTS.pack((group, stream, lane, generation, partition))


def held_key(group: str, worker_id: str, stream: str, lane: str, generation: int, partition: int) -> bytes:
    return HELD.pack((group, worker_id, stream, lane, generation, partition))


def held_key_prefix(group: str, worker_id: str) -> bytes:
    """What every key of a member's holder index begins with; the rest is the packed lease key's tail."""
    return HELD.pack((group, worker_id))


def lease_key_prefix(group: str) -> bytes:
    """What every lease key of a group begins with (followed by the packed stream, lane, generation, partition)."""
    return LEASES.pack((group,))


def group_config_key(group: str) -> bytes:
    return GROUP_CONFIGS.pack((group,))


def group_seen_key(group: str) -> bytes:
    return GROUP_SEEN.pack((group,))


def retired_reader_key(stream: str, lane: str, generation: int) -> bytes:
    return RETIRED_READERS.pack((stream, lane, generation))


def names_starting(space: _Subspace, prefix: str) -> slice:
    """The keys of `space` whose first element is a name starting with `prefix` (a tuple's string element is
    0x02, its UTF-8 bytes, then 0x00: names hold no 0x00)."""
    begin = space.pack(()) + b"\x02" + prefix.encode()
    return slice(begin, begin + b"\xff")


def stream_tombstone_key(stream: str) -> bytes:
    return STREAM_TOMBSTONES.pack((stream,))


def progress_key(group: str, ref: PartitionRef) -> bytes:
    """A group's progress header on a partition (the commit log's unit)."""
    return PROGRESS.pack((group, *ref))


def done_key(group: str, ref: PartitionRef, chunk: int) -> bytes:
    return DONE.pack((group, *ref, chunk))


def retry_key(group: str, ref: PartitionRef, offset: int) -> bytes:
    return RETRIES.pack((group, *ref, offset))


def reject_key(group: str, ref: PartitionRef, offset: int) -> bytes:
    return REJECTS.pack((group, *ref, offset))


def redriven_key(group: str, ref: PartitionRef, chunk: int) -> bytes:
    return REDRIVEN.pack((group, *ref, chunk))


def reject_prefix(group: str, ref: PartitionRef) -> bytes:
    """What every reject key of one partition of a group begins with (followed by the packed offset)."""
    return REJECTS.pack((group, *ref))


def offset_in(key: bytes, prefix: bytes) -> int:
    """The offset a key holds after its partition's `prefix` (a reject's, a retry's): decoded from the suffix
    alone, for walks that read thousands of a partition's keys. A non-negative integer is a code byte 0x14 + n
    and n big-endian bytes (the tuple layer's encoding), read directly; anything else goes through the layer."""
    at = len(prefix)
    size = key[at] - 0x14 if len(key) > at else -1
    if 0 <= size <= 8 and len(key) == at + 1 + size:
        return int.from_bytes(key[at + 1 :], "big")
    return int(fdb.tuple.unpack(key[at:])[0])


def redrive_key(group: str, stream: str) -> bytes:
    return REDRIVES.pack((group, stream))


def redrive_changes_key(group: str, stream: str) -> bytes:
    """Beside the claim, inside its (group, stream) range: cleared with it by a group's or stream's deletion."""
    return REDRIVES.pack((group, stream, "changes"))


def window_key(group: str) -> bytes:
    return WINDOWS.pack((group,))


def window_end_key(group: str, ref: PartitionRef) -> bytes:
    return WINDOW_ENDS.pack((group, *ref))


def rewind_key(stream: str, time_ms: int, group: str) -> bytes:
    return REWINDS.pack((stream, time_ms, group))


def reopened_key(group: str, stream: str, lane: str, generation: int) -> bytes:
    return REOPENED.pack((group, stream, lane, generation))


def producer_key(producer_id: str) -> bytes:
    return PRODUCERS.pack((producer_id,))


def producer_errors_key(producer_id: str) -> bytes:
    return PRODUCER_ERRORS.pack((producer_id,))


def revoked_key(token_id: str) -> bytes:
    return REVOKED.pack((token_id,))


def seal_wait_key(stream: str, lane: str, generation: int) -> bytes:
    return SEAL_WAITS.pack((stream, lane, generation))


def event_key_incomplete(user_version: int = 0) -> bytes:
    """Key for a new event, its versionstamp to be filled in at commit (`tr.set_versionstamped_key`)."""
    return EVENTS.pack_with_versionstamp((Versionstamp(user_version=user_version),))


def event_key(version: bytes) -> bytes:
    """Key of the event at a complete 12-byte version (10-byte commit stamp + 2-byte user version)."""
    return EVENTS.pack((Versionstamp.from_bytes(version),))


def event_version(key: bytes) -> bytes:
    """The 12-byte version of an event key."""
    (stamp,) = EVENTS.unpack(key)
    return stamp.to_bytes()


def group_event_key_incomplete(group: str, user_version: int = 0) -> bytes:
    """Key for a new event of a group's log, its versionstamp filled in at commit."""
    return GROUP_EVENTS.pack_with_versionstamp((group, Versionstamp(user_version=user_version)))


def group_event_key(group: str, version: bytes) -> bytes:
    return GROUP_EVENTS.pack((group, Versionstamp.from_bytes(version)))


def group_event_version(key: bytes) -> bytes:
    (_, stamp) = GROUP_EVENTS.unpack(key)
    return stamp.to_bytes()


def group_event_head_key(group: str) -> bytes:
    return GROUP_EVENT_HEADS.pack((group,))


def txn_token_key(process: str, slot: int) -> bytes:
    return TXN_TOKENS.pack((process, slot))


def decode_key(key: bytes) -> tuple[Any, ...]:
    """A key as the tuple it packs, for inspection; raw bytes stay bytes when they are not a tuple."""
    try:
        return fdb.tuple.unpack(key)
    except Exception:
        return (key,)


def pack_prefix(elements: tuple[Any, ...]) -> bytes:
    """The packed prefix for an inspection path such as ("gen", "logs")."""
    return ROOT.pack(elements)
