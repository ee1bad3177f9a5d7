"""Consumer groups: members, leases with epochs, and applying an assignment, each change one transaction.

A lease covers one partition of one generation of a lane. Its epoch grows on every grant, so a worker that
was paused past its TTL and comes back holds a stale epoch and is refused (fenced). A lease is `granted`
to one worker, `revoking` (the holder has until a deadline to hand it back, and it moves to `target`), or
`free`. Liveness is `alive_until_ms` on the member, pushed forward by heartbeats; the assignment loop
expires members past it. Every change appends group events to the event log, the audit trail of who held
which partition, when and why.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from streamplane.coordinator import events, group_config, keys, planted
from streamplane.coordinator.assignment import PartitionSpec, WorkerSpec, assign, smooth
from streamplane.coordinator.health import count_reporters, stored_reports
from streamplane.coordinator.store import Transaction, transactional
from streamplane.coordinator.topology import get_cluster, get_stream
from streamplane.errors import (
    AlreadyExistsError,
    FailedPreconditionError,
    FencedError,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    quoted,
)
from streamplane.model import SETTLED, ClusterErrors, Generation, GroupChanged, MemberInfo, PartitionRef, Subscription
from streamplane.names import check_lane_name, check_object_name

GRANTED, REVOKING, FREE = "granted", "revoking", "free"
LeaseKey = tuple[str, str, int, int]
"""(stream, lane, generation, partition)."""
_WORKER_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")
MAX_SUBSCRIPTIONS = 64


@dataclass(frozen=True)
class Member(MemberInfo):
    """A group member as stored: the model's MemberInfo, with its JSON form."""

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> Member:
        d = json.loads(raw)
        subs = tuple(Subscription(s["stream"], tuple(s["lanes"])) for s in d.pop("subscriptions"))
        return cls(subscriptions=subs, **d)


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

    @property
    def lease_id(self) -> str:
        return lease_id(self.stream, self.lane, self.generation, self.partition)

    @property
    def key(self) -> LeaseKey:
        return (self.stream, self.lane, self.generation, self.partition)

    def to_json(self) -> bytes:
        d = asdict(self)
        for k in ("stream", "lane", "generation", "partition"):
            d.pop(k)
        return json.dumps(d, sort_keys=True).encode()


def lease_id(stream: str, lane: str, generation: int, partition: int) -> str:
    return PartitionRef(stream, lane, generation, partition).lease_id


def parse_lease_id(text: str) -> tuple[str, str, int, int]:
    ref = PartitionRef.parse(text)
    return ref.stream, ref.lane, ref.generation, ref.partition


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


def _lease_from(key: bytes, raw: bytes) -> Lease:
    _, stream, lane, generation, partition = keys.LEASES.unpack(key)
    return Lease(stream, lane, generation, partition, **json.loads(raw))


@transactional
def read_members(tr: Transaction, group: str) -> dict[str, Member]:
    r = keys.MEMBERS.range((group,))
    return {m.worker_id: m for m in (Member.from_json(v) for _, v in tr.get_range(r.start, r.stop))}


@transactional
def read_leases(tr: Transaction, group: str) -> dict[LeaseKey, Lease]:
    r = keys.LEASES.range((group,))
    return {lease.key: lease for lease in (_lease_from(k, v) for k, v in tr.get_range(r.start, r.stop))}


@transactional
def read_groups(tr: Transaction) -> list[str]:
    r = keys.GROUPS.range()
    return [keys.GROUPS.unpack(k)[0] for k, _ in tr.get_range(r.start, r.stop)]


@transactional
def read_member_leases(tr: Transaction, group: str, worker_id: str) -> tuple[Member | None, list[Lease]]:
    """The member and the leases it holds (granted or revoking), through the member's index of them."""
    raw = tr.get(keys.member_key(group, worker_id))
    member = Member.from_json(raw) if raw else None
    r = keys.HELD.range((group, worker_id))
    held = []
    for key, _ in tr.get_range(r.start, r.stop):
        k = keys.HELD.unpack(key)[2:]
        lease_key = keys.lease_key(group, *k)
        lease_raw = tr.get(lease_key)
        if lease_raw is not None:
            lease = _lease_from(lease_key, lease_raw)
            if lease.worker_id == worker_id and lease.state != FREE:
                held.append(lease)
    return member, held


def _write_lease(tr: Transaction, group: str, old: Lease | None, new: Lease) -> None:
    """Store a lease and keep the holder index (held/...) in step with it."""
    old_holder = old.worker_id if old is not None and old.state != FREE else ""
    new_holder = new.worker_id if new.state != FREE else ""
    if old_holder and old_holder != new_holder:
        tr.clear(keys.held_key(group, old_holder, *new.key))
    if new_holder and new_holder != old_holder:
        tr.set(keys.held_key(group, new_holder, *new.key), b"")
    tr.set(keys.lease_key(group, *new.key), new.to_json())


# -- changes --------------------------------------------------------------------------------------------------------


def _bump(tr: Transaction, group: str, *workers: str) -> None:
    tr.add(keys.group_version_key(group), 1)
    tr.add(keys.ASSIGNER_WAKE, 1)
    for worker in workers:
        if worker:
            tr.add(keys.member_version_key(group, worker), 1)


class _Events:
    """Appends several events in one transaction (each needs its own user version)."""

    def __init__(self, tr: Transaction, actor: str, now_ms: int) -> None:
        self.tr, self.actor, self.now_ms, self.n = tr, actor, now_ms, 0

    def group(self, group: str, type_: str, worker_id: str = "", lease: Lease | None = None, reason: str = "") -> None:
        event = GroupChanged(
            group=group,
            change=type_,
            worker_id=worker_id,
            lease_id=lease.lease_id if lease else "",
            epoch=lease.epoch if lease else 0,
            reason=reason,
        )
        events.append_group_event(self.tr, event, actor=self.actor, time_ms=self.now_ms, user_version=self.n)
        self.n += 1


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
) -> Member:
    """Register a worker's new session; refuse a worker id that another live session holds. With
    `resume_session`, the worker's live session of that id is resumed instead: same session, same leases and
    epochs (its stream broke, say because the coordinator restarted; nothing the worker did is undone)."""
    check_object_name("group", group)
    check_worker_id(worker_id)
    capacity = _finite("capacity", capacity or 1.0, positive=True)
    max_load = _finite("max_load", max_load)
    subs = validate_subscriptions(tr, subscriptions)
    raw = tr.get(keys.member_key(group, worker_id))
    if raw:
        old = Member.from_json(raw)
        if resume_session and old.session_id == resume_session:  # not ended yet: its leases are still its own
            check_principal(old.principal, principal, f"session {resume_session}")
            resumed = replace(old, alive_until_ms=max(old.alive_until_ms, now_ms + ttl_ms))
            tr.set(keys.member_key(group, worker_id), resumed.to_json())
            _Events(tr, worker_id, now_ms).group(group, "member_resumed", worker_id, reason=f"session {old.session_id}")
            return resumed
        if old.alive_until_ms > now_ms:
            raise AlreadyExistsError(
                f"worker_id {worker_id!r} already has a live session in group {group!r}", kind="worker", name=worker_id
            )
        _leave(tr, group, old, "replaced by a new session after its TTL", _Events(tr, "assigner", now_ms))
    member = Member(
        worker_id, session_id, subs, capacity, max_load, alive_until_ms=now_ms + ttl_ms, principal=principal
    )
    tr.set(keys.group_key(group), json.dumps({"name": group}).encode())
    tr.set(keys.member_key(group, worker_id), member.to_json())
    _bump(tr, group, worker_id)
    _Events(tr, worker_id, now_ms).group(group, "member_joined", worker_id, reason=f"session {session_id}")
    return member


def check_principal(owner: str, caller: str, what: str) -> None:
    """Only the principal that opened a session acts in it (sessions opened before authentication have none)."""
    if owner and caller and owner != caller:
        raise PermissionDeniedError(
            f"{what} belongs to {owner}, not {caller}", permission="session.own", resource=what[:200]
        )


def _own_member(tr: Transaction, group: str, worker_id: str, session_id: str) -> Member:
    raw = tr.get(keys.member_key(group, worker_id))
    member = Member.from_json(raw) if raw else None
    if member is None or member.session_id != session_id:
        raise FencedError(
            f"session {session_id} of worker {worker_id!r} in group {group!r} has ended; "
            "its leases were revoked: join again"
        )
    return member


@transactional
def heartbeat(
    tr: Transaction,
    group: str,
    worker_id: str,
    session_id: str,
    *,
    cpu: float,
    records_per_s: float,
    lease_loads: list[tuple[str, float, int, int]],
    now_ms: int,
    ttl_ms: int,
    errors: Sequence[ClusterErrors] = (),
) -> None:
    """Extend the session and record the worker's load, each held lease's throughput and lag, and the errors
    its fetches met per cluster (kept apart, for the health monitor; only a report with errors writes)."""
    _finite("heartbeat.cpu", cpu)
    _finite("heartbeat.records_per_s", records_per_s)
    seen = [r for r in stored_reports(errors, now_ms, "heartbeat.errors") if r[1] > 0]
    member = _own_member(tr, group, worker_id, session_id)
    if seen:
        tr.set(keys.worker_errors_key(group, worker_id), json.dumps(seen).encode())
    tr.set(
        keys.member_key(group, worker_id),
        replace(member, cpu=cpu, records_per_s=records_per_s, alive_until_ms=now_ms + ttl_ms).to_json(),
    )
    if lease_loads:
        tr.add(keys.group_loads_key(group), 1)  # the assignment loop looks again only when loads moved
    for lid, rps, lag_records, lag_ms in lease_loads:
        _finite("heartbeat.leases.records_per_s", rps)
        key = keys.lease_key(group, *parse_lease_id(lid))
        raw = tr.get(key)
        lease = _lease_from(key, raw) if raw else None
        if lease is None or lease.worker_id != worker_id or lease.state == FREE:
            continue  # a lease that moved away in the meantime: its load is the new holder's to report
        load = smooth(lease.records_per_s, rps)
        tr.set(key, replace(lease, records_per_s=load, lag_records=lag_records, lag_ms=lag_ms).to_json())


@transactional
def release(
    tr: Transaction, group: str, worker_id: str, session_id: str, lid: str, epoch: int, *, now_ms: int
) -> Lease | None:
    """The holder hands a lease back (after a revoke, or of its own accord). A release racing the lease's own
    end (freed, granted again at a newer epoch, or gone with its partition) changes nothing; one of a lease
    never held at that epoch is bad input."""
    _own_member(tr, group, worker_id, session_id)
    key = keys.lease_key(group, *parse_lease_id(lid))
    raw = tr.get(key)
    lease = _lease_from(key, raw) if raw else None
    if lease is not None and epoch > lease.epoch:
        raise FailedPreconditionError(f"worker {worker_id!r} never held lease {lid} at epoch {epoch}")
    if lease is None or lease.worker_id != worker_id or lease.state == FREE or lease.epoch != epoch:
        # a late release: the lease was freed (its generation drained, say) or moved on since this worker
        # held it at `epoch`; nothing to do, and no reason to end the session
        return lease
    freed = replace(lease, worker_id="", state=FREE, target="", deadline_ms=0)
    _write_lease(tr, group, lease, freed)
    _bump(tr, group, worker_id)
    _Events(tr, worker_id, now_ms).group(group, "lease_released", worker_id, lease)
    return freed


def _leave(tr: Transaction, group: str, member: Member, reason: str, ev: _Events) -> None:
    tr.clear(keys.member_key(group, member.worker_id))
    tr.clear(keys.worker_errors_key(group, member.worker_id))
    _, held = read_member_leases(tr, group, member.worker_id)
    for lease in held:
        _write_lease(tr, group, lease, replace(lease, worker_id="", state=FREE, target="", deadline_ms=0))
        ev.group(group, "lease_revoked", member.worker_id, lease, reason)
    _bump(tr, group, member.worker_id)
    ev.group(group, "member_left", member.worker_id, reason=reason)


@transactional
def leave(tr: Transaction, group: str, worker_id: str, session_id: str, reason: str, *, now_ms: int) -> bool:
    """End a session and free its leases at once; False if it had already ended."""
    raw = tr.get(keys.member_key(group, worker_id))
    member = Member.from_json(raw) if raw else None
    if member is None or member.session_id != session_id:
        return False
    _leave(tr, group, member, reason, _Events(tr, "assigner", now_ms))
    return True


@transactional
def expire(tr: Transaction, group: str, now_ms: int) -> int:
    """End every session past its TTL; return when the next live one would expire (0: none left). Heartbeats
    only move that time later, and a new member wakes the loop, so nothing can expire sooner."""
    ev = _Events(tr, "assigner", now_ms)
    members = read_members(tr, group).values()
    for member in members:
        if member.alive_until_ms <= now_ms:
            _leave(tr, group, member, "no heartbeat within the session TTL", ev)
    return min((m.alive_until_ms for m in members if m.alive_until_ms > now_ms), default=0)


@transactional
def check_lease(tr: Transaction, group: str, lid: str, epoch: int, principal: str = "") -> Lease:
    """The lease if it is still held at `epoch`; FencedError otherwise (a newer grant, or none). With
    `principal`, also PermissionDeniedError unless that principal opened the holder's session."""
    check_object_name("group", group)
    key = keys.lease_key(group, *parse_lease_id(lid))
    raw = tr.get(key)
    lease = _lease_from(key, raw) if raw else None
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
    if principal and lease.worker_id:
        raw = tr.get(keys.member_key(group, lease.worker_id))
        if raw:
            check_principal(Member.from_json(raw).principal, principal, f"lease {lid}")
    return lease


# -- assignment --------------------------------------------------------------------------------------------------


@dataclass
class Applied:
    """What one assignment pass leaves for later."""

    next_deadline_ms: int = 0
    """The earliest revoke deadline still pending after the pass (0: none): when to look again."""
    proposed: frozenset[tuple[LeaseKey, str]] = frozenset()
    """Rebalancing moves the pass found worth making, left for the next pass to confirm (see assignment.py)."""
    moved: dict[LeaseKey, str] = field(default_factory=dict)
    """{partition: the live holder this pass took it from to give to another} (their cool-down starts)."""
    granted: int = 0
    """Leases the pass granted (new holders, at a new epoch)."""
    promoted: frozenset[tuple[str, str]] = frozenset()
    """(stream, lane) of lower lanes past their time-lag target: their partitions have the first claim."""


def group_partitions(tr: Transaction, members: dict[str, Member]) -> dict[LeaseKey, int]:
    """Every partition the members subscribe to: {(stream, lane, generation, partition): lane priority}.

    Generations stay until they are drained, so draining and sealed ones keep their holders.
    """
    wanted: dict[LeaseKey, int] = {}
    streams: dict[str, Any] = {}
    for member in members.values():
        for sub in member.subscriptions:
            if sub.stream not in streams:
                try:
                    streams[sub.stream] = get_stream(tr, sub.stream)
                except NotFoundError:
                    continue
            stream = streams[sub.stream]
            for lane in stream.lanes:
                if (sub.lanes and lane.name not in sub.lanes) or (not sub.lanes and lane.name == "dlq"):
                    continue
                for gen in lane.generations:
                    if gen.state in SETTLED:
                        continue
                    for p in range(gen.partitions):
                        wanted[(stream.name, lane.name, gen.number, p)] = lane.priority
    return wanted


MAX_LEASE_WRITES = 2_000
"""Lease changes one transaction writes at most (each with its holder index and group event: about 1 KB): a
pass with more writes them in several transactions, well under FoundationDB's 10 MB and 5 s."""


@dataclass(frozen=True)
class Change:
    """One lease's move as a pass planned it: written only if the lease is still `old` when written."""

    key: LeaseKey
    old: Lease | None
    new: Lease
    notes: tuple[tuple[str, str, Lease, str], ...] = ()
    """Group events (change, worker, lease, reason) that go with it."""


@transactional
def apply_assignment(
    tr: Transaction,
    group: str,
    *,
    now_ms: int,
    revoke_ms: int,
    threshold: float = 0.1,
    proposed: frozenset[tuple[LeaseKey, str]] | None = None,
    pinned: Mapping[LeaseKey, str] | None = None,
    grace: bool = False,
    promoted: frozenset[tuple[str, str]] = frozenset(),
) -> Applied:
    """Plan the group's assignment and write every change in this transaction (see `plan_assignment`; the
    Assigner writes large passes in several, `write_changes`)."""
    done, changes, events_so_far = plan_assignment(
        tr,
        group,
        now_ms=now_ms,
        revoke_ms=revoke_ms,
        threshold=threshold,
        proposed=proposed,
        pinned=pinned,
        grace=grace,
        promoted=promoted,
    )
    write_changes(tr, group, changes, now_ms=now_ms, events_so_far=events_so_far)
    return done


def plan_assignment(
    tr: Transaction,
    group: str,
    *,
    now_ms: int,
    revoke_ms: int,
    threshold: float = 0.1,
    proposed: frozenset[tuple[LeaseKey, str]] | None = None,
    pinned: Mapping[LeaseKey, str] | None = None,
    grace: bool = False,
    promoted: frozenset[tuple[str, str]] = frozenset(),
) -> tuple[Applied, list[Change], int]:
    """Compute the group's assignment and the lease changes that move towards it: grant free ones, revoke
    moved ones with a deadline, and force moves whose deadline passed (the old holder's epoch is then stale).
    `proposed` is the previous pass's `Applied.proposed` (None rebalances at once); `pinned`, {partition: the
    worker it was recently moved away from}, not to be moved back there yet. With `grace` (a new leader's
    first TTL) every member counts as live, since none could heartbeat while nobody led. `promoted` is the
    previous pass's `Applied.promoted`: lower lanes past their time-lag target are served with the top tier
    until their lag is back under half the target, and each change is a group event (written here). Returns
    the pass's result, the changes in key order, and how many events this transaction appended so far."""
    members = {w: m for w, m in read_members(tr, group).items() if grace or m.alive_until_ms > now_ms}
    leases = read_leases(tr, group)
    wanted = group_partitions(tr, members)
    ev = _Events(tr, "assigner", now_ms)
    first_claim = _first_claim(tr, group, wanted, leases, promoted, ev)
    top = max(wanted.values(), default=0)
    specs = [
        PartitionSpec(
            k,
            priority=top if k[:2] in first_claim else prio,
            load=(leases[k].records_per_s if k in leases and leases[k].records_per_s > 0 else 1.0),
        )
        for k, prio in wanted.items()
    ]
    workers = [WorkerSpec(w, m.capacity, m.max_load) for w, m in members.items()]
    current: dict[LeaseKey, str] = {}
    for k, lease in leases.items():
        owner = lease.target if lease.state == REVOKING else lease.worker_id
        if lease.state != FREE and owner in members:
            current[k] = owner
    plan = assign(specs, workers, current, threshold=threshold, proposed=proposed, pinned=pinned)
    target = plan.holders
    done = Applied(proposed=plan.proposed, promoted=first_claim)
    changes: list[Change] = []
    for k in sorted(set(wanted) | set(leases)):
        lease = leases.get(k) or Lease(*k)
        want = target.get(k, "")
        if lease.state != FREE and lease.worker_id not in members:
            lease = replace(lease, worker_id="", state=FREE, target="", deadline_ms=0)  # holder is gone
        new = lease
        notes: list[tuple[str, str, Lease, str]] = []
        if lease.state == GRANTED and lease.worker_id != want:
            new = replace(lease, state=REVOKING, target=want, deadline_ms=now_ms + revoke_ms)
            if want:
                done.moved[k] = lease.worker_id
            reason = f"rebalance: moving to {want!r}" if want else "no longer assigned"
            notes.append(("lease_revoking", lease.worker_id, lease, reason))
        elif lease.state == REVOKING:
            if lease.worker_id == want:
                new = replace(lease, state=GRANTED, target="", deadline_ms=0)  # the move was called off
            elif now_ms >= lease.deadline_ms:
                notes.append(("lease_revoked", lease.worker_id, lease, "revoke deadline passed"))
                new = replace(lease, worker_id="", state=FREE, target="", deadline_ms=0)
            elif lease.target != want:
                new = replace(lease, target=want)
        if new.state == FREE and want:
            new = replace(
                new,
                worker_id=want,
                epoch=new.epoch + (0 if planted.NO_EPOCH_BUMP in planted.active and new.epoch else 1),
                state=GRANTED,
                target="",
                deadline_ms=0,
                lag_records=0,
                lag_ms=0,
            )
            notes.append(("lease_granted", want, new, "assignment"))
            done.granted += 1
        if new != leases.get(k):
            changes.append(Change(k, leases.get(k), new, tuple(notes)))
        if new.state == REVOKING and (not done.next_deadline_ms or new.deadline_ms < done.next_deadline_ms):
            done.next_deadline_ms = new.deadline_ms
    return done, changes, ev.n


def write_changes(
    tr: Transaction, group: str, changes: Sequence[Change], *, now_ms: int, events_so_far: int = 0
) -> int:
    """Write the planned changes whose lease is still as planned (one that moved meanwhile is left to the next
    pass: epochs fence every lease on its own, so any subset of a plan is a valid state). Returns how many
    were written. `events_so_far`: events this transaction already appended (each needs its own number)."""
    ev = _Events(tr, "assigner", now_ms)
    ev.n = events_so_far
    written = 0
    for c in changes:
        raw = tr.get(keys.lease_key(group, *c.key))
        if (_lease_from(keys.lease_key(group, *c.key), raw) if raw else None) != c.old:
            continue
        for change, worker, lease, reason in c.notes:
            ev.group(group, change, worker, lease, reason)
        _write_lease(tr, group, c.old, c.new)
        _bump(tr, group, c.old.worker_id if c.old is not None else "", c.new.worker_id)
        written += 1
    return written


def _first_claim(
    tr: Transaction,
    group: str,
    wanted: dict[LeaseKey, int],
    leases: dict[LeaseKey, Lease],
    before: frozenset[tuple[str, str]],
    ev: _Events,
) -> frozenset[tuple[str, str]]:
    """Lower lanes whose time lag (the most any holder reports for one of its partitions) is past their
    target, or was and is not yet back under half of it: they are served with the top tier now. Each lane
    that gains or loses the first claim is a group event with its lag and target."""
    top = max(wanted.values(), default=0)
    priority: dict[tuple[str, str], int] = {}
    tops: dict[str, int] = {}  # each stream's top priority
    for k, prio in wanted.items():
        priority[k[:2]] = prio
        tops[k[0]] = max(tops.get(k[0], prio), prio)
    configured = group_config.lag_targets(tr, group)
    lag: dict[tuple[str, str], int] = {}
    for k, lease in leases.items():
        if lease.state != FREE and k in wanted:
            lag[k[:2]] = max(lag.get(k[:2], 0), lease.lag_ms)
    now: set[tuple[str, str]] = set()
    for lane, prio in priority.items():
        if prio >= top:
            continue  # already served first
        target = configured.get(lane[1], group_config.DEFAULT_LAG_TARGET_MS if prio >= tops[lane[0]] else 0)
        if target <= 0:
            continue
        seen = lag.get(lane, 0)
        if seen > target or (lane in before and seen > target // 2):
            now.add(lane)
            if lane not in before:
                ev.group(
                    group,
                    "lane_promoted",
                    reason=f"{lane[0]}/{lane[1]}: time lag {seen / 1000:.1f} s is past its {target / 1000:g} s "
                    "target; its partitions get the first claim on the workers",
                )
        elif lane in before:
            ev.group(
                group,
                "lane_restored",
                reason=f"{lane[0]}/{lane[1]}: time lag {seen / 1000:.1f} s is back under half its "
                f"{target / 1000:g} s target; served by its priority again",
            )
    return frozenset(now)


@transactional
def reported_errors(tr: Transaction, since_ms: int) -> dict[str, ClusterErrors]:
    """{cluster: errors} workers' fetches met since `since_ms`; `count` counts workers. Only workers whose
    sessions reported errors have a key here (it goes with their session)."""
    r = keys.WORKER_ERRORS.range()
    return count_reporters((json.loads(raw) for _, raw in tr.get_range(r.start, r.stop, snapshot=True)), since_ms)


def end_offset(tr: Transaction, lease: Lease) -> int:
    """The lease partition's end offset once its generation is sealed; -1 before (and once it is gone)."""
    raw = tr.get(keys.generation_key(lease.stream, lease.lane, lease.generation))
    ends = Generation.from_json(raw).end_offsets if raw is not None else []
    return ends[lease.partition] if lease.partition < len(ends) else -1


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
