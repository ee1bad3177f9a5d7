"""Consumer groups: members, leases with epochs, and applying an assignment, each change one transaction.

A lease covers one partition of one generation of a lane. Its epoch grows on every grant, so a worker that
was paused past its TTL and comes back holds a stale epoch and is refused (fenced). A lease is `granted`
to one worker, `revoking` (the holder has until a deadline to hand it back, and it moves to `target`), or
`free`. Liveness is `alive_until_ms` on the member, pushed forward by heartbeats; the assignment loop
expires members past it. A member served by a coordinator replica (`Member.replica`) lives at least as long as
that replica's registration: the replica ends the session itself when its worker falls silent, so a heartbeat
that says nothing new need not be written, and the store decides only once that replica is gone. Every change
appends group events to the event log, the audit trail of who held which partition, when and why.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from streamplane.coordinator import keys, planted
from streamplane.coordinator.groups import config as group_config
from streamplane.coordinator.groups import leadership
from streamplane.coordinator.groups.assignment import smooth
from streamplane.coordinator.store import Transaction, transactional
from streamplane.coordinator.topology import events
from streamplane.coordinator.topology.health import count_reporters, stored_reports
from streamplane.coordinator.topology.pages import page_window
from streamplane.coordinator.topology.records import UNDECODABLE, get_cluster, get_stream
from streamplane.errors import (
    AlreadyExistsError,
    FailedPreconditionError,
    FencedError,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    quoted,
)
from streamplane.model import (
    ClusterErrors,
    Generation,
    GroupChanged,
    Heartbeat,
    LeaseState,
    MemberInfo,
    PartitionRef,
    Slice,
    Subscription,
    parse_lease,
    slice_lease_id,
)
from streamplane.names import check_lane_name, check_object_name

GRANTED, REVOKING, FREE = LeaseState
_WORKER_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")
MAX_SUBSCRIPTIONS = 64


@dataclass(frozen=True)
class Member(MemberInfo):
    """A group member as stored: the model's MemberInfo, with its JSON form."""

    replica: str = ""
    """The coordinator replica serving the session ("": none, the stored deadline alone decides)."""

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> Member:
        d = json.loads(raw)
        subs = tuple(Subscription(s["stream"], tuple(s["lanes"])) for s in d.pop("subscriptions"))
        return cls(subscriptions=subs, **d)

    @classmethod
    def stored(cls, key: bytes, raw: bytes) -> Member:
        """The member stored under `key`. A torn one (never written so by this code) is read as a session that
        has ended, its worker id taken from the key: the Assigner's expiry frees its leases and clears it, its
        worker joins again, and no pass stops on it."""
        try:
            return cls.from_json(raw)
        except UNDECODABLE:
            return cls(worker_id=str(keys.MEMBERS.unpack(key)[1]), session_id="")


@dataclass(frozen=True)
class Lease:
    stream: str
    lane: str
    generation: int
    partition: int
    worker_id: str = ""
    epoch: int = 0
    state: str = FREE
    target: str = ""
    """While revoking: the worker it moves to."""
    deadline_ms: int = 0
    records_per_s: float = 0.0
    lag_records: int = 0
    lag_ms: int = 0
    slice_index: int = 0
    slices: int = 0
    """A slice lease's place in its split partition: which slice of how many (0 slices: the whole partition,
    stored under keys.LEASES; a slice is stored under keys.SLICE_LEASES, see groups/slices.py)."""

    @property
    def slice(self) -> Slice | None:
        return Slice(self.slice_index, self.slices) if self.slices else None

    @property
    def lease_id(self) -> str:
        return slice_lease_id(self.key, self.slice)

    @property
    def load(self) -> float:
        """Its load as assignment counts it: the records/s its holder reported, or 1.0 while unknown."""
        return self.records_per_s if self.records_per_s > 0 else 1.0

    @property
    def key(self) -> PartitionRef:
        """The partition (of a slice lease: the partition it is a slice of, whose progress it shares)."""
        return PartitionRef(self.stream, self.lane, self.generation, self.partition)

    def store_key(self, group: str) -> bytes:
        """Where the lease is stored."""
        if self.slices:
            return keys.slice_lease_key(group, *self.key, self.slice_index)
        return keys.lease_key(group, *self.key)

    def held_key(self, group: str, worker_id: str) -> bytes:
        """Its entry in `worker_id`'s holder index."""
        if self.slices:
            return keys.slice_held_key(group, worker_id, *self.key, self.slice_index)
        return keys.held_key(group, worker_id, *self.key)

    def to_json(self) -> bytes:
        # by hand, not asdict() (which copies deeply): every lease write of a large pass goes through here
        d = {
            "worker_id": self.worker_id,
            "epoch": self.epoch,
            "state": self.state,
            "target": self.target,
            "deadline_ms": self.deadline_ms,
            "records_per_s": self.records_per_s,
            "lag_records": self.lag_records,
            "lag_ms": self.lag_ms,
        }
        if self.slices:
            d["slices"] = self.slices
        return json.dumps(d, sort_keys=True).encode()


_LEASE_FIELDS = frozenset(
    ("worker_id", "epoch", "state", "target", "deadline_ms", "records_per_s", "lag_records", "lag_ms", "slices")
)
"""The fields `Lease.to_json` stores."""


def lease_id(stream: str, lane: str, generation: int, partition: int) -> str:
    return PartitionRef(stream, lane, generation, partition).lease_id


@functools.lru_cache(maxsize=1 << 15)  # the same leases' ids come with every commit and heartbeat
def parse_lease_id(text: str) -> PartitionRef:
    """The partition a lease id names (InvalidArgumentError for one that is not a lease id)."""
    return PartitionRef.parse(text)


def check_worker_id(worker_id: str, field_name: str = "worker_id") -> str:
    if not isinstance(worker_id, str) or not _WORKER_ID.fullmatch(worker_id):
        raise InvalidArgumentError(
            f"{field_name} {quoted(worker_id)} must be 1 to 128 characters of letters, digits, . _ : -"
        )
    return worker_id


def _finite(field_name: str, value: float, *, positive: bool = False) -> float:
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        raise InvalidArgumentError(
            f"{field_name} must be a {'positive' if positive else 'non-negative'} number, not {value}"
        )
    return value


# -- reads ---------------------------------------------------------------------------------------------------------


TORN_EPOCH = 1 << 40
"""The epoch a torn lease (never written so by this code) is read at, free: above any epoch grants reach, so
whoever held it is fenced, and its next grant is above every epoch the lease had."""


def _decoded_lease(raw: bytes, stream: str, lane: str, generation: int, partition: int, index: int) -> Lease | None:
    """A stored lease (`index`: its slice's, 0 for a whole lease); None for a torn one. Fields this code does not
    know (a newer coordinator's) are left out, off the plain path a pass's many reads take."""
    try:
        data = json.loads(raw)
    except UNDECODABLE:
        return None
    if not isinstance(data, dict):
        return None
    try:
        return Lease(stream, lane, generation, partition, slice_index=index, **data)
    except TypeError:  # a field this code does not know
        known = {k: v for k, v in data.items() if k in _LEASE_FIELDS}
        return Lease(stream, lane, generation, partition, slice_index=index, **known)


@transactional
def reread_torn(tr: Transaction, group: str, lid: str) -> None:
    """A holder met its lease torn (read free at TORN_EPOCH, by its commit or its load report): the group's owner
    reads that lease again at its next pass, and grants it anew, instead of at its periodic rebuild (RESYNC_MS)
    while nobody reads the partition. A slice's lease is left to the slice planner, which reads them every pass."""
    ref, piece = parse_lease(lid)
    if piece is None:
        tr.set(keys.load_report_key(group, *ref), b"")
        tr.add(keys.group_loads_key(group), 1)  # wakes the assignment loop, as a load report does


def lease_from(key: bytes, raw: bytes) -> Lease:
    """The lease stored under `key`; a torn one is read free at TORN_EPOCH (its partition is granted again, and
    its last holder fenced), so no group's pass stops on it."""
    _, stream, lane, generation, partition = keys.LEASES.unpack(key)
    lease = _decoded_lease(raw, stream, lane, generation, partition, 0)
    return lease if lease is not None else Lease(stream, lane, generation, partition, epoch=TORN_EPOCH)


def slice_lease_from(key: bytes, raw: bytes) -> Lease:
    """A slice's lease stored under `key` (ValueError for a torn one: see `slices._decoded`)."""
    _, stream, lane, generation, partition, index = keys.SLICE_LEASES.unpack(key)
    lease = _decoded_lease(raw, stream, lane, generation, partition, index)
    if lease is None:
        raise ValueError(f"the slice lease at {key!r} does not decode")
    return lease


def lease_store_key(group: str, lid: str) -> bytes:
    """Where the lease a lease id names is stored (a slice's, or a whole partition's); InvalidArgumentError for
    one that is not a lease id."""
    ref, piece = parse_lease(lid)
    return keys.slice_lease_key(group, *ref, piece.index) if piece is not None else keys.lease_key(group, *ref)


@transactional
def read_lease_id(tr: Transaction, group: str, lid: str) -> Lease | None:
    """The lease stored where a lease id names (None: none). For a slice's id, that is the lease of the slice
    with its index, which is another slice (its `lease_id` differs) once the partition was split anew into
    another count."""
    ref, piece = parse_lease(lid)
    if piece is None:
        return read_lease(tr, group, ref)
    key = lease_store_key(group, lid)
    raw = tr.get(key)
    try:
        return slice_lease_from(key, raw) if raw else None
    except ValueError:
        return None  # torn: as none (the planner replaces it)


def live_until(alive_until_ms: int, replica: str, replicas: dict[str, int]) -> int:
    """When a member's session ends unless something is heard of it: its stored deadline, or while the replica
    serving it is registered, that replica's (`replicas`: `leadership.replica_expiries`)."""
    return max(alive_until_ms, replicas.get(replica, 0)) if replica else alive_until_ms


@transactional
def require_reader(tr: Transaction, group: str, stream: str, why: str) -> None:
    """NotFoundError (`why` ends its sentence) unless the group holds leases or progress on the stream: a
    mistyped group is refused, never taken for one with nothing to do (nor created: its progress would hold
    every generation it names back from draining)."""
    for space in (keys.LEASES, keys.PROGRESS):
        r = space.range((group, stream))
        if tr.get_range(r.start, r.stop, limit=1):
            return
    raise NotFoundError(f"group {group!r} has never read stream {stream}: {why}", kind="group", name=group)


@transactional
def read_members(tr: Transaction, group: str, *, snapshot: bool = False) -> dict[str, Member]:
    """The group's members, each `alive_until_ms` as the group's owner sees it (`live_until`)."""
    r = keys.MEMBERS.range((group,))
    rows = tr.get_range(r.start, r.stop, snapshot=snapshot)
    replicas = leadership.replica_expiries(tr)
    out = {}
    for key, raw in rows:
        m = Member.stored(key, raw)
        if m.replica:
            m = replace(m, alive_until_ms=live_until(m.alive_until_ms, m.replica, replicas))
        out[m.worker_id] = m
    return out


@transactional
def read_leases(tr: Transaction, group: str) -> dict[PartitionRef, Lease]:
    r = keys.LEASES.range((group,))
    return {lease.key: lease for lease in (lease_from(k, v) for k, v in tr.get_range(r.start, r.stop))}


@transactional
def read_lease(tr: Transaction, group: str, key: PartitionRef) -> Lease | None:
    """One lease of the group (None: no such partition)."""
    stored = keys.lease_key(group, *key)
    raw = tr.get(stored)
    return lease_from(stored, raw) if raw else None


@transactional
def read_groups(tr: Transaction) -> list[str]:
    r = keys.GROUPS.range()
    return [keys.GROUPS.unpack(k)[0] for k, _ in tr.get_range(r.start, r.stop)]


GROUP_COUNT_LIMIT = 10_000
"""A first page of groups counts them up to this many (a larger count reads as this, "or more")."""


@transactional
def group_page(
    tr: Transaction, *, prefix: str = "", page_size: int = 0, page_token: str = ""
) -> tuple[list[str], str, int]:
    """One page of group names in order, from after `page_token`, starting with `prefix`: (names, the next
    page's token or "", how many groups have the prefix, counted up to GROUP_COUNT_LIMIT on the first page
    only, 0 on later ones). Bounded work: a page's keys, and the count's on the first."""
    size, window, more = page_window(
        tr, keys.GROUPS, keys.group_key, prefix=prefix, page_size=page_size, page_token=page_token, filtered=False
    )
    names = [name for name, _ in window[:size]]
    total = 0
    if not page_token:
        named = keys.names_starting(keys.GROUPS, prefix)
        total = len(tr.get_range(named.start, named.stop, limit=GROUP_COUNT_LIMIT, snapshot=True))
    return names, names[-1] if more and names else "", total


def read_group_counters(tr: Transaction) -> dict[str, tuple[int, int]]:
    """{group: (its version, its loads counter)} of every group that has either, in two range reads: what an
    owner looks at to tell which of its groups changed, without a transaction per group (absent: (0, 0))."""
    counters: dict[str, list[int]] = {}
    for i, space in enumerate((keys.GROUP_VERSIONS, keys.GROUP_LOADS)):
        r = space.range()
        for key, raw in tr.get_range(r.start, r.stop, snapshot=True):
            counters.setdefault(space.unpack(key)[0], [0, 0])[i] = int.from_bytes(raw, "little")
    return {group: (version, loads) for group, (version, loads) in counters.items()}


LeaseCache = dict[bytes, tuple[bytes, Lease]]
"""{lease key: (its stored value, the lease it decodes to)}: what a reader of the same leases over and over
(a session) keeps, so that only leases that changed are decoded again."""


def has_holders(tr: Transaction, group: str) -> bool:
    """Whether any member of the group holds a lease (one key of the holder index, read without conflicts)."""
    r = keys.HELD.range((group,))
    return bool(tr.get_range(r.start, r.stop, limit=1, snapshot=True))


@transactional
def read_member_leases(
    tr: Transaction, group: str, worker_id: str, cache: LeaseCache | None = None
) -> tuple[Member | None, list[Lease]]:
    """The member and the leases it holds (granted or revoking), through the member's index of them. With
    `cache`, leases whose value is unchanged are taken from it, and it is left holding what was read."""
    key = keys.member_key(group, worker_id)
    raw = tr.get(key)
    member = Member.stored(key, raw) if raw else None
    index = keys.held_key_prefix(group, worker_id)
    leases_prefix = keys.lease_key_prefix(group)
    seen: LeaseCache = {}
    held = []
    for key, _ in tr.get_range(index + b"\x00", index + b"\xff"):
        lease_key = leases_prefix + key[len(index) :]  # both keys end with the same packed lease key
        lease_raw = tr.get(lease_key)
        if lease_raw is None:
            continue
        known = cache.get(lease_key) if cache is not None else None
        lease = known[1] if known is not None and known[0] == lease_raw else lease_from(lease_key, lease_raw)
        seen[lease_key] = (lease_raw, lease)
        if lease.worker_id == worker_id and lease.state != FREE:
            held.append(lease)
    index = keys.slice_held_key_prefix(group, worker_id)
    slices_prefix = keys.slice_lease_key_prefix(group)
    for key, _ in tr.get_range(index + b"\x00", index + b"\xff"):
        lease_key = slices_prefix + key[len(index) :]
        lease_raw = tr.get(lease_key)
        if lease_raw is None:
            continue
        try:
            lease = slice_lease_from(lease_key, lease_raw)
        except ValueError:
            continue  # torn: the planner replaces it (see slices._decoded)
        if lease.worker_id == worker_id and lease.state != FREE:
            held.append(lease)
    if cache is not None:
        cache.clear()
        cache.update(seen)
    return member, held


def write_lease(tr: Transaction, group: str, old: Lease | None, new: Lease) -> None:
    """Store a lease and keep the holder index (held/...) in step with it."""
    old_holder = old.worker_id if old is not None and old.state != FREE else ""
    new_holder = new.worker_id if new.state != FREE else ""
    if old_holder and old_holder != new_holder:
        tr.clear(new.held_key(group, old_holder))
    if new_holder and new_holder != old_holder:
        tr.set(new.held_key(group, new_holder), b"")
    tr.set(new.store_key(group), new.to_json())


# -- changes --------------------------------------------------------------------------------------------------------


def mark_active(tr: Transaction, group: str, now_ms: int) -> None:
    """Record that the group was active at `now_ms` (what its expiry counts from; see group_lifecycle). A blind
    write: it conflicts with nothing."""
    tr.set(keys.group_seen_key(group), json.dumps({"at_ms": now_ms}).encode())


def bump_versions(tr: Transaction, group: str, *workers: str) -> None:
    """Tell who watches that the group changed (its owner's loop, and the sessions of `workers`)."""
    tr.add(keys.group_version_key(group), 1)
    tr.add(keys.ASSIGNER_WAKE, 1)
    for worker in workers:
        if worker:
            tr.add(keys.member_version_key(group, worker), 1)


class GroupEvents:
    """Appends group events in a transaction. Each event of a transaction needs its own user version: they are
    numbered per transaction (on the transaction object), so events appended by different steps of one
    transaction (a session replaced at join, an expiry and the pass after it) never overwrite each other."""

    def __init__(self, tr: Transaction, actor: str, now_ms: int) -> None:
        self.tr, self.actor, self.now_ms = tr, actor, now_ms

    def group(self, group: str, type_: str, worker_id: str = "", lease: Lease | None = None, reason: str = "") -> None:
        event = GroupChanged(
            group=group,
            change=type_,
            worker_id=worker_id,
            lease_id=lease.lease_id if lease else "",
            epoch=lease.epoch if lease else 0,
            reason=reason,
        )
        n = getattr(self.tr, "_streamplane_group_events", 0)
        setattr(self.tr, "_streamplane_group_events", n + 1)  # noqa: B010 - a Protocol has no such attribute
        events.append_group_event(self.tr, event, actor=self.actor, time_ms=self.now_ms, user_version=n)


def validate_subscriptions(tr: Transaction, subscriptions: list[Subscription]) -> tuple[Subscription, ...]:
    if not subscriptions:
        raise InvalidArgumentError("subscriptions must name at least one stream")
    if len(subscriptions) > MAX_SUBSCRIPTIONS:
        raise InvalidArgumentError(f"subscriptions name {len(subscriptions)} streams; the limit is {MAX_SUBSCRIPTIONS}")
    out = []
    for sub in subscriptions:
        check_object_name("subscriptions.stream", sub.stream)
        stream = get_stream(tr, sub.stream, "subscriptions.stream")
        for lane in sub.lanes:
            check_lane_name("subscriptions.lanes", lane)
            if stream.lane(lane) is None:
                raise NotFoundError(
                    f"subscriptions.lanes: lane {quoted(lane)} does not exist in stream {sub.stream!r}",
                    kind="lane",
                    name=f"{sub.stream}/{lane}",
                )
        out.append(Subscription(sub.stream, tuple(sub.lanes)))
    return tuple(out)


@transactional
def join(
    tr: Transaction,
    group: str,
    worker_id: str,
    session_id: str,
    subscriptions: list[Subscription],
    *,
    capacity: float,
    max_load: float,
    now_ms: int,
    ttl_ms: int,
    resume_session: str = "",
    principal: str = "",
    replica: str = "",
    where: str = "",
    takes_slices: bool = False,
) -> Member | None:
    """Register a worker's new session, served by `replica`; refuse a worker id that another live session
    holds, and a worker whose `where` predicate is not the one its group is configured with. With
    `resume_session`, the worker's live session of that id is resumed instead: same session, same leases and
    epochs (its stream broke, say because the coordinator restarted; nothing the worker did is undone), now
    served by `replica`. None when the worker's expired session holds more leases than one
    transaction frees (see LEAVE_LEASES): this transaction freed some, and a later join succeeds."""
    check_object_name("group", group)
    check_worker_id(worker_id)
    capacity = _finite("capacity", capacity or 1.0, positive=True)
    max_load = _finite("max_load", max_load)
    subs = validate_subscriptions(tr, subscriptions)
    group_config.check_where(group, group_config.group_where(tr, group), worker_id, where)
    key = keys.member_key(group, worker_id)
    raw = tr.get(key)
    if raw:
        old = Member.stored(key, raw)
        if resume_session and old.session_id == resume_session:  # not ended yet: its leases are still its own
            check_principal(old.principal, principal, f"session {resume_session}")
            resumed = replace(
                old, alive_until_ms=max(old.alive_until_ms, now_ms + ttl_ms), replica=replica, takes_slices=takes_slices
            )
            tr.set(keys.member_key(group, worker_id), resumed.to_json())
            GroupEvents(tr, principal or ANONYMOUS_ACTOR, now_ms).group(
                group, "member_resumed", worker_id, reason=f"session {old.session_id}"
            )
            return resumed
        if live_until(old.alive_until_ms, old.replica, leadership.replica_expiries(tr)) > now_ms:
            raise AlreadyExistsError(
                f"worker_id {worker_id!r} already has a live session in group {group!r}", kind="worker", name=worker_id
            )
        ev = GroupEvents(tr, "assigner", now_ms)
        if not _leave(tr, group, old, "replaced by a new session after its TTL", ev)[1]:
            return None  # the old session's leases are still being freed (committed so far): join again soon
    member = Member(
        worker_id,
        session_id,
        subs,
        capacity,
        max_load,
        alive_until_ms=now_ms + ttl_ms,
        principal=principal,
        replica=replica,
        takes_slices=takes_slices,
    )
    tr.set(keys.group_key(group), json.dumps({"name": group}).encode())
    tr.set(keys.member_key(group, worker_id), member.to_json())
    bump_versions(tr, group, worker_id)
    actor = principal or ANONYMOUS_ACTOR  # who proved it, never the worker id the client sent (a separate field)
    GroupEvents(tr, actor, now_ms).group(group, "member_joined", worker_id, reason=f"session {session_id}")
    return member


ANONYMOUS_ACTOR = "anonymous"
"""The actor of a worker's own group events when its coordinator checks no credentials."""


def check_principal(owner: str, caller: str, what: str) -> None:
    """Only the principal that opened a session acts in it (sessions opened before authentication have none)."""
    if owner and caller and owner != caller:
        raise PermissionDeniedError(
            f"{what} belongs to {owner}, not {caller}", permission="session.own", resource=what[:200]
        )


def _own_member(tr: Transaction, group: str, worker_id: str, session_id: str) -> dict[str, Any]:
    """The session's member record as stored (a dict: a heartbeat changes three of its fields, and decoding
    the whole member was most of its cost); FencedError once the session has ended."""
    raw = tr.get(keys.member_key(group, worker_id))
    try:
        member = json.loads(raw) if raw else None
    except UNDECODABLE:  # torn (never written so by this code): ended, as Member.stored reads it
        member = None
    if not isinstance(member, dict) or member.get("session_id") != session_id:
        raise FencedError(
            f"session {session_id} of worker {worker_id!r} in group {group!r} has ended; "
            "its leases were revoked: join again"
        )
    return member


def check_heartbeat(beat: Heartbeat) -> list[list[Any]]:
    """Refuse a heartbeat with bad figures or lease ids (InvalidArgumentError naming the field), before anything
    is written; returns its error reports in their stored form."""
    _finite("heartbeat.cpu", beat.cpu)
    _finite("heartbeat.records_per_s", beat.records_per_s)
    for lid, load in beat.leases:
        parse_lease_id(lid)
        _finite("heartbeat.leases.records_per_s", load.records_per_s)
    return stored_reports(beat.errors, 0, "heartbeat.errors")


@transactional
def heartbeat(
    tr: Transaction, group: str, worker_id: str, session_id: str, beat: Heartbeat, *, now_ms: int, ttl_ms: int
) -> None:
    """Extend the session and record the worker's load, each held lease's throughput and lag, and the errors
    its fetches met per cluster (kept apart, for the health monitor; only a report with errors writes).
    FencedError when the session has ended; nothing is written then."""
    check_heartbeat(beat)
    if planted.ANY_SESSION_HEARTBEAT in planted.active and (raw := tr.get(keys.member_key(group, worker_id))):
        member = json.loads(raw)  # the planted bug: whichever session sent it
    else:
        member = _own_member(tr, group, worker_id, session_id)
    seen = [r for r in stored_reports(beat.errors, now_ms, "heartbeat.errors") if r[1] > 0]
    if seen:
        tr.set(keys.worker_errors_key(group, worker_id), json.dumps(seen).encode())
    # never earlier than written: a heartbeat taken before its replica was stopped is written after the others
    alive_until_ms = max(member.get("alive_until_ms", 0), now_ms + ttl_ms)
    member.update(cpu=beat.cpu, records_per_s=beat.records_per_s, alive_until_ms=alive_until_ms)
    tr.set(keys.member_key(group, worker_id), json.dumps(member, sort_keys=True).encode())
    if beat.leases:
        tr.add(keys.group_loads_key(group), 1)  # the assignment loop looks again only when loads moved
    for lid, load in beat.leases:
        lease = read_lease_id(tr, group, lid)
        if lease is not None and lease.epoch == TORN_EPOCH:
            reread_torn(tr, group, lid)
        if lease is None or lease.lease_id != lid or lease.worker_id != worker_id or lease.state == FREE:
            continue  # a lease that moved away (or a slice of an earlier split): its load is not this one's
        records_per_s = smooth(lease.records_per_s, load.records_per_s)
        tr.set(
            lease.store_key(group),
            replace(lease, records_per_s=records_per_s, lag_records=load.lag_records, lag_ms=load.lag_ms).to_json(),
        )
        if not lease.slices:  # a slice's load is the slice planner's, which reads its slices every pass
            tr.set(keys.load_report_key(group, *lease.key), b"")  # the group's owner reads these leases again


@transactional
def release(
    tr: Transaction, group: str, worker_id: str, session_id: str, lid: str, epoch: int, *, now_ms: int
) -> Lease | None:
    """The holder hands a lease back (after a revoke, or of its own accord). A release racing the lease's own
    end (freed, granted again at a newer epoch, or gone with its partition) changes nothing; one of a lease
    never held at that epoch is bad input."""
    _own_member(tr, group, worker_id, session_id)
    lease = read_lease_id(tr, group, lid)
    if lease is not None and lease.lease_id != lid:
        return None  # a slice of an earlier split: gone with it
    if lease is not None and epoch > lease.epoch:
        raise FailedPreconditionError(f"worker {worker_id!r} never held lease {lid} at epoch {epoch}")
    if lease is None or lease.state == FREE:
        return lease  # a late release: the lease was freed (its generation drained, say), or is gone
    if (lease.worker_id != worker_id or lease.epoch != epoch) and planted.LATE_RELEASE not in planted.active:
        # a late release: the lease moved on since this worker held it at `epoch`; nothing to do, and no
        # reason to end the session
        return lease
    freed = replace(lease, worker_id="", state=FREE, target="", deadline_ms=0)
    write_lease(tr, group, lease, freed)
    bump_versions(tr, group, worker_id)
    member = tr.get(keys.member_key(group, worker_id))
    actor = (Member.from_json(member).principal if member else "") or ANONYMOUS_ACTOR
    GroupEvents(tr, actor, now_ms).group(group, "lease_released", worker_id, lease)
    return freed


LEAVE_LEASES = 4_000
"""Leases one transaction frees at most for a session that ends. A session holding more (the first worker of a
large group holds all of it) ends over several transactions: its member record stays, with no session and
no TTL, until the rest are freed (by the next expiry passes, or the owner's pass, which regrants leases whose
holder is gone); its worker id cannot join again until then."""


def _leave(tr: Transaction, group: str, member: Member, reason: str, ev: GroupEvents) -> tuple[int, bool]:
    """End a member's session and free its leases (at most LEAVE_LEASES); returns how many it freed, and
    whether it is gone (False: leases remain, freed by later transactions)."""
    _, held = read_member_leases(tr, group, member.worker_id)
    for lease in held[:LEAVE_LEASES]:
        write_lease(tr, group, lease, replace(lease, worker_id="", state=FREE, target="", deadline_ms=0))
        ev.group(group, "lease_revoked", member.worker_id, lease, reason)
    bump_versions(tr, group, member.worker_id)
    if len(held) > LEAVE_LEASES:
        tr.set(keys.member_key(group, member.worker_id), replace(member, session_id="", alive_until_ms=0).to_json())
        return LEAVE_LEASES, False
    tr.clear(keys.member_key(group, member.worker_id))
    tr.clear(keys.worker_errors_key(group, member.worker_id))
    mark_active(tr, group, ev.now_ms)  # active until now: its expiry counts from here
    ev.group(group, "member_left", member.worker_id, reason=reason)
    return len(held), True


@transactional
def leave(
    tr: Transaction, group: str, worker_id: str, session_id: str, reason: str, *, now_ms: int, replica: str = ""
) -> bool:
    """End a session and free its leases at once; False if it had already ended. With `replica`, only while that
    replica serves it: a replica stopped past the TTL (SIGSTOP, a stalled VM) wakes with the streams of sessions
    their workers resumed on another replica meanwhile, and its ending them (silent, it thinks) must change
    nothing."""
    raw = tr.get(keys.member_key(group, worker_id))
    member = Member.from_json(raw) if raw else None
    if member is None or member.session_id != session_id:
        return False
    if replica and member.replica and member.replica != replica:
        return False
    _leave(tr, group, member, reason, GroupEvents(tr, "assigner", now_ms))
    return True


def _deadline(key: bytes, raw: bytes, replicas: dict[str, int]) -> tuple[str, int]:
    """(worker id, until when its session lives) of a stored member; a torn one has ended (see Member.stored)."""
    try:
        d = json.loads(raw)
        return str(d["worker_id"]), live_until(int(d["alive_until_ms"]), str(d.get("replica", "")), replicas)
    except UNDECODABLE:
        return str(keys.MEMBERS.unpack(key)[1]), 0


EXPIRE_LEASES = 2_000
"""Leases one expiry transaction frees at most, over the sessions it ends (it ends at least one): many sessions
past their TTL at once (a network partition) are ended over several passes, each transaction well under
FoundationDB's 10 MB."""


@transactional
def expire(tr: Transaction, group: str, now_ms: int) -> int:
    """End sessions past their TTL, or whose replica is gone (`live_until`; see EXPIRE_LEASES); return when the
    next one is due (0: no live session left; `now_ms` while expired ones remain). Heartbeats and renewals only
    move that time later, and a new member wakes the loop, so nothing can expire sooner. The members and
    replicas are read without conflicts (heartbeats and renewals rewrite them all the time); one about to
    expire is read again, with one, so a heartbeat or a renewal that lands meanwhile keeps it."""
    ev = GroupEvents(tr, "assigner", now_ms)
    r = keys.MEMBERS.range((group,))
    replicas = leadership.replica_expiries(tr)
    # only each member's deadline: decoding whole members (subscriptions and all) at every pass was most of
    # an idle fleet's assignment loop
    deadlines = [_deadline(k, v, replicas) for k, v in tr.get_range(r.start, r.stop, snapshot=True)]
    freed, left = 0, False
    for worker_id, until_ms in deadlines:
        if until_ms <= now_ms:
            if freed >= EXPIRE_LEASES:
                left = True
                continue
            key = keys.member_key(group, worker_id)
            raw = tr.get(key)
            again = Member.stored(key, raw) if raw else None
            if again is not None and again.replica:
                replicas[again.replica] = leadership.replica_expires(tr, again.replica)
            if again is not None and live_until(again.alive_until_ms, again.replica, replicas) <= now_ms:
                count, gone = _leave(tr, group, again, "no heartbeat within the session TTL", ev)
                freed += count
                left = left or not gone
    if left:
        return now_ms
    return min((t for _, t in deadlines if t > now_ms), default=0)


@transactional
def check_lease(tr: Transaction, group: str, lid: str, epoch: int, principal: str = "", session_id: str = "") -> Lease:
    """The lease if it is still held at `epoch`; FencedError otherwise (a newer grant, or none). With
    `principal`, also PermissionDeniedError unless that principal opened the holder's session; with
    `session_id`, also FencedError unless that session holds it (two workers sharing a credential cannot
    commit for each other's leases)."""
    check_object_name("group", group)
    lease = read_lease_id(tr, group, lid)
    if (lease is None or lease.lease_id != lid) and parse_lease(lid)[1] is not None:
        raise FencedError(
            f"lease {lid} is stale: its partition is no longer split into those slices",
            lease_id=lid,
            held_epoch=epoch,
            current_epoch=0,
        )
    if lease is None:
        raise NotFoundError(f"lease {lid} does not exist in group {group!r}", kind="lease", name=lid)
    if lease.state == FREE or (lease.epoch != epoch and planted.STALE_EPOCH not in planted.active):
        holder = f"epoch {lease.epoch}" + (f" held by {lease.worker_id!r}" if lease.worker_id else ", unheld")
        raise FencedError(
            f"lease {lid} epoch {epoch} is stale: the lease is at {holder}",
            lease_id=lid,
            held_epoch=epoch,
            current_epoch=lease.epoch,
        )
    if (principal or session_id) and lease.worker_id:
        raw = tr.get(keys.member_key(group, lease.worker_id))
        if raw:
            member = Member.from_json(raw)
            check_principal(member.principal, principal, f"lease {lid}")
            if session_id and member.session_id != session_id:
                raise FencedError(
                    f"lease {lid} is held by another session, not {session_id}: only its holder commits for it",
                    lease_id=lid,
                    held_epoch=epoch,
                    current_epoch=lease.epoch,
                )
    return lease


@transactional
def reported_errors(tr: Transaction, since_ms: int) -> dict[str, ClusterErrors]:
    """{cluster: errors} workers' fetches met since `since_ms`; `count` counts workers. Only workers whose
    sessions reported errors have a key here (it goes with their session)."""
    r = keys.WORKER_ERRORS.range()
    return count_reporters((raw for _, raw in tr.get_range(r.start, r.stop, snapshot=True)), since_ms)


@functools.lru_cache(maxsize=256)
def _end_offsets_of(raw: bytes) -> tuple[int, ...]:
    """A stored generation's end offsets, decoded once per value: every session's look reads them. A value
    with thousands of end offsets is tens of KB, so only the generations in use recently are kept."""
    return tuple(Generation.from_json(raw).end_offsets)


def end_offsets(tr: Transaction, held: Sequence[Lease]) -> dict[str, int]:
    """{lease id: its partition's end offset once its generation is sealed; -1 before (and once it is gone)},
    each generation read once."""
    by_generation: dict[tuple[str, str, int], tuple[int, ...]] = {}
    out = {}
    for lease in held:
        gen = (lease.stream, lease.lane, lease.generation)
        ends = by_generation.get(gen)
        if ends is None:
            raw = tr.get(keys.generation_key(*gen))
            ends = by_generation[gen] = _end_offsets_of(raw) if raw is not None else ()
        out[lease.lease_id] = ends[lease.partition] if lease.partition < len(ends) else -1
    return out


@dataclass(frozen=True)
class Placement:
    """Where a lease's records are: what its Grant tells the worker to read."""

    topic: str = ""
    cluster: str = ""
    bootstrap_servers: str = ""


def placement(tr: Transaction, lease: Lease) -> Placement:
    """The topic and cluster of a lease's generation (empty once the generation is gone)."""
    stream = get_stream(tr, lease.stream)
    lane = stream.lane(lease.lane)
    gen = lane.generation(lease.generation) if lane else None
    if gen is None:
        return Placement()
    return Placement(gen.topic, gen.cluster, get_cluster(tr, gen.cluster).bootstrap_servers)
