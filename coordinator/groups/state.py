"""A group's assignment pass, and the working state its owning replica keeps between passes.

`GroupState` is the owner's picture of one group: its live members, its leases as last read or written, the
partitions its members subscribe to, and the Balancer (assignment.py) with the holders it decided. It is built
from the store when a replica takes the group, then kept up to date from what changed: the members (a few
hundred small records), the group's event log since the last pass (releases, sessions that ended), the leases
whose load a heartbeat reported, and the topology when its events move. A pass then plans lease changes only
for the partitions whose holder changed, whose lease changed, or whose revoke is pending, so its cost follows
what changed, not the group's size. `plan_assignment` is the same pass from a state built on the spot.

Changes are written in transactions of at most MAX_LEASE_WRITES leases, each applied only where the lease is
still as planned: epochs fence every lease on its own, so any prefix of a plan is a valid state, and a lease
that moved meanwhile is read again and planned by the next pass.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from streamplane.coordinator import keys, planted
from streamplane.coordinator.groups import config as group_config
from streamplane.coordinator.groups import rewind, slices, window
from streamplane.coordinator.groups.assignment import Balancer, PartitionSpec, WorkerSpec
from streamplane.coordinator.groups.leases import (
    FREE,
    GRANTED,
    REVOKING,
    GroupEvents,
    Lease,
    Member,
    bump_versions,
    lease_from,
    parse_lease_id,
    read_leases,
    read_members,
    write_lease,
)
from streamplane.coordinator.store import Transaction, transactional
from streamplane.coordinator.topology import events
from streamplane.coordinator.topology.records import get_stream
from streamplane.errors import NotFoundError
from streamplane.model import SETTLED, PartitionRef

MAX_LEASE_WRITES = 2_000
"""Lease changes one transaction writes at most (each with its holder index and group event: about 1 KB): a
pass with more writes them in several transactions, well under FoundationDB's 10 MB and 5 s."""
MAX_TAIL = 5_000
"""Group events or load reports a pass reads since the last one at most; past that, rebuilding from the store
costs less than following them."""
RESYNC_MS = 600_000
"""How often the owner rebuilds a group from the store although nothing says it must (a safety net: a pass
that finds the state had drifted logs it)."""
MAX_OWN_TAIL = 200_000
"""Group events a pass skips at most as the owner's own (a first assignment of a large group writes one each)."""
_LEASE_EVENTS = ("lease_released", "lease_revoked")
"""Group events that change a lease outside the owner's passes (a worker's release, a session's end)."""
_REWIND_EVENTS = (rewind.REWOUND, rewind.FINISHED, window.CREATED, window.FINISHED)
"""Group events after which the group's partitions are read again (a rewind reopens drained generations)."""
ASSIGNER = "assigner"
"""The actor of the owner's own group events. Others that write as it end a member's session (a session closed
or replaced at join), which the members' own records show: their leases are read again for that."""


@dataclass
class Applied:
    """What one assignment pass leaves for later."""

    next_deadline_ms: int = 0
    """The earliest revoke deadline still pending after the pass (0: none): when to look again."""
    proposed: frozenset[tuple[PartitionRef, str]] = frozenset()
    """Rebalancing moves the pass found worth making, left for the next pass to confirm (see assignment.py)."""
    moved: dict[PartitionRef, str] = field(default_factory=dict)
    """{partition: the live holder this pass took it from to give to another} (their cool-down starts)."""
    granted: int = 0
    """Leases the pass granted (new holders, at a new epoch)."""
    promoted: frozenset[tuple[str, str]] = frozenset()
    """(stream, lane) of lower lanes past their time-lag target: their partitions have the first claim."""


@dataclass(frozen=True)
class Change:
    """One lease's move as a pass planned it: written only if the lease is still `old` when written."""

    key: PartitionRef
    old: Lease | None
    new: Lease
    notes: tuple[tuple[str, str, Lease, str], ...] = ()
    """Group events (change, worker, lease, reason) that go with it."""


def group_partitions(
    tr: Transaction, members: Iterable[Member], group: str = "", split: frozenset[PartitionRef] = frozenset()
) -> dict[PartitionRef, int]:
    """Every partition the members subscribe to: {(stream, lane, generation, partition): lane priority}, but
    the `split` ones (their slices are leased apart: see slices.py).

    Generations stay until they are drained, so draining and sealed ones keep their holders; a drained one a
    rewind reopened for `group` is read again by it until it is processed again. Members mostly share their
    subscriptions: each distinct one is expanded once.
    """
    members = list(members)
    if group:
        side = window.wanted(tr, group, {s.stream for m in members for s in m.subscriptions})
        if side is not None:  # a replay window's group reads its window only
            return {k: v for k, v in side.items() if k not in split}
    again = {(s, la, g) for s, la, g in rewind.reopened(tr, group)} if group else set()
    wanted: dict[PartitionRef, int] = {}
    streams: dict[str, Any] = {}
    for stream_name, lanes in sorted({(s.stream, s.lanes) for m in members for s in m.subscriptions}):
        if stream_name not in streams:
            try:
                streams[stream_name] = get_stream(tr, stream_name)
            except NotFoundError:
                streams[stream_name] = None
        stream = streams[stream_name]
        if stream is None:
            continue
        for lane in stream.lanes:
            if (lanes and lane.name not in lanes) or (not lanes and lane.name == "dlq"):
                continue
            for gen in lane.generations:
                if gen.state in SETTLED and (stream.name, lane.name, gen.number) not in again:
                    continue
                for p in range(gen.partitions):
                    wanted[PartitionRef(stream.name, lane.name, gen.number, p)] = lane.priority
    for ref in split:
        wanted.pop(ref, None)
    return wanted


def _subscriptions(members: Iterable[Member]) -> frozenset[tuple[str, tuple[str, ...]]]:
    return frozenset((s.stream, s.lanes) for m in members for s in m.subscriptions)


class GroupState:
    """The owning replica's working state of one group (see the module's docstring)."""

    def __init__(self, group: str, hot_lag_ms: int = 3_000) -> None:
        self.group = group
        self.hot_lag_ms = hot_lag_ms
        """A granted lease whose holder reports a time lag this large is `hot` (a split candidate)."""
        self.hot: set[PartitionRef] = set()
        """Whole leases granted whose holder is at least `hot_lag_ms` behind (see slices.autoscale)."""
        self.members: dict[str, Member] = {}
        """The live members as of the last pass."""
        self.leases: dict[PartitionRef, Lease] = {}
        """Every lease of the group as last read or written."""
        self.held: dict[str, set[PartitionRef]] = {}
        """{worker: keys of the leases it holds (granted or revoking)} in `leases`."""
        self.revoking: set[PartitionRef] = set()
        self.wanted: dict[PartitionRef, int] = {}
        """{partition: its lane's priority} for every partition the members subscribe to."""
        self.lanes: dict[tuple[str, str], int] = {}
        """{(stream, lane): priority} of the lanes in `wanted`."""
        self.balancer = Balancer()
        self.slice_loads: dict[str, float] = {}
        """{worker: the load (records/s) of the slices it holds} as the last slice pass left them: the Balancer
        counts it as the worker's base load, so a worker carrying a hot partition's slice gets fewer others."""
        self.first_claim: frozenset[tuple[str, str]] = frozenset()
        """Lanes served with the top tier (as the balancer's partition specs have them)."""
        self.cursor: bytes | None = None
        """The group event log's position the state has seen."""
        self.topology = -1
        """The topology log's head (EVENT_HEAD) when `wanted` was computed."""
        self.subscriptions: frozenset[tuple[str, tuple[str, ...]]] = frozenset()
        self.split: frozenset[PartitionRef] = frozenset()
        """Partitions split into slices (or being merged) when `wanted` was computed: left out of it."""
        self.reread: set[PartitionRef] = set()
        """Leases to plan again at the next pass, which is due at once (a write found them changed since the
        state had them; the state has them as the write found them)."""
        self.built_ms = 0
        self.fresh = True
        """Built and not planned yet: the first pass plans every lease."""

    # -- the lease mirror
    def put_lease(self, lease: Lease) -> None:
        key = lease.key  # built once: a pass puts every lease it writes, and catching up every one it reads
        old = self.leases.get(key)
        if old is not None and old.state != FREE:
            self.held.get(old.worker_id, set()).discard(key)
        self.leases[key] = lease
        if lease.state != FREE:
            self.held.setdefault(lease.worker_id, set()).add(key)
        if lease.state == REVOKING:
            self.revoking.add(key)
        else:
            self.revoking.discard(key)
        if lease.state == GRANTED and lease.lag_ms >= self.hot_lag_ms:
            self.hot.add(key)
        else:
            self.hot.discard(key)

    def spec(self, key: PartitionRef, top: int) -> PartitionSpec:
        lease = self.leases.get(key)
        load = lease.load if lease is not None else 1.0
        priority = top if key[:2] in self.first_claim else self.wanted[key]
        return PartitionSpec(key, priority=priority, load=load)

    @property
    def top(self) -> int:
        """The group's top priority."""
        return max(self.lanes.values(), default=0)

    def set_members(self, live: dict[str, Member]) -> set[str]:
        """Take the live members; returns the workers that are gone or have a new session (the leases of the
        old one were freed when it was replaced)."""
        gone = set(self.members) - set(live)
        for worker in gone:
            self.balancer.remove_worker(worker)
        gone.update(w for w, m in live.items() if w in self.members and self.members[w].session_id != m.session_id)
        for worker, member in live.items():
            old = self.members.get(worker)
            if old is None or (old.capacity, old.max_load) != (member.capacity, member.max_load):
                self.balancer.put_worker(self._worker_spec(worker, member))
        self.members = live
        return gone

    def _worker_spec(self, worker: str, member: Member) -> WorkerSpec:
        return WorkerSpec(worker, member.capacity, member.max_load, base_load=self.slice_loads.get(worker, 0.0))

    def set_slice_loads(self, loads: Mapping[str, float]) -> None:
        """Take the load of the slices each worker holds now (see `slice_loads`); the Balancer counts it from its
        next step. Costs the workers whose slice load changed."""
        changed = {w for w in set(loads) | set(self.slice_loads) if loads.get(w, 0.0) != self.slice_loads.get(w, 0.0)}
        self.slice_loads = {w: x for w, x in loads.items() if x}
        for worker in changed:
            member = self.members.get(worker)
            if member is not None:
                self.balancer.put_worker(self._worker_spec(worker, member))

    def set_wanted(self, wanted: dict[PartitionRef, int]) -> set[PartitionRef]:
        """Take the partitions the members subscribe to now; returns the ones no longer wanted."""
        gone = set(self.wanted) - set(wanted)
        for key in gone:
            self.balancer.remove_partition(key)
        changed = [k for k, prio in wanted.items() if self.wanted.get(k) != prio]
        self.wanted = wanted
        self.lanes = {}
        for k, prio in wanted.items():
            if k[:2] not in self.lanes:
                self.lanes[k[:2]] = prio
        top = self.top
        for key in changed:
            self.balancer.put_partition(self.spec(key, top))
        return gone

    def set_first_claim(self, lanes: frozenset[tuple[str, str]]) -> None:
        """Serve these lower lanes with the top tier (and the others by their own priority again)."""
        if lanes == self.first_claim:
            return
        flipped = lanes ^ self.first_claim
        self.first_claim = lanes
        top = self.top
        for key in self.wanted:
            if key[:2] in flipped:
                self.balancer.put_partition(self.spec(key, top))


def build(tr: Transaction, group: str, *, now_ms: int, grace: bool, hot_lag_ms: int = 3_000) -> GroupState:
    """A group's state read whole from the store (the holders it had, kept where their holder lives). It only
    reads: load reports already pending are read again by the next `catch_up`, which clears them."""
    state = GroupState(group, hot_lag_ms)
    for lease in read_leases(tr, group).values():
        state.put_lease(lease)
    members = {w: m for w, m in read_members(tr, group).items() if grace or m.alive_until_ms > now_ms}
    state.set_members(members)
    state.subscriptions = _subscriptions(members.values())
    state.topology = events.head(tr)
    state.split = slices.excluded(tr, group, members)
    state.set_wanted(group_partitions(tr, members.values(), group, state.split))
    for key, lease in state.leases.items():
        owner = lease.target if lease.state == REVOKING else lease.worker_id
        if key in state.wanted and lease.state != FREE and owner in members:
            state.balancer.hold(key, owner)
    state.cursor = events.last_group_event(tr, group)
    state.built_ms = now_ms
    return state


def catch_up(tr: Transaction, state: GroupState, *, now_ms: int, grace: bool) -> set[PartitionRef] | None:
    """Bring the state up to date with the store; returns the leases that changed outside the owner's passes
    (None: too much changed to follow, rebuild instead)."""
    group = state.group
    touched = set(state.reread)
    state.reread.clear()
    # the owner's own writes (grants, revokes, expiries) are in the state already: only others' are followed
    tail = events.read_group_events_of_others(tr, group, state.cursor, ASSIGNER, limit=MAX_TAIL, max_rows=MAX_OWN_TAIL)
    if tail is None:
        return None
    rewound = False
    for event in tail[0]:
        if event.lease_id and event.change in _LEASE_EVENTS:
            touched.add(parse_lease_id(event.lease_id))
        rewound = rewound or event.change in _REWIND_EVENTS
    state.cursor = tail[1]
    r = keys.LOAD_REPORTS.range((group,))
    reports = tr.get_range(r.start, r.stop, limit=MAX_TAIL + 1, snapshot=True)
    if len(reports) > MAX_TAIL:
        return None
    if reports:  # a report written after this read lands past the cleared range, or is lost (loads are advisory)
        tr.clear_range(r.start, reports[-1][0] + b"\x00")
        touched.update(PartitionRef(*keys.LOAD_REPORTS.unpack(k)[1:]) for k, _ in reports)
    members = {w: m for w, m in read_members(tr, group, snapshot=True).items() if grace or m.alive_until_ms > now_ms}
    for worker in state.set_members(members):
        touched.update(state.held.get(worker, ()))
    subscriptions = _subscriptions(members.values())
    topology = events.head(tr)
    split = slices.excluded(tr, group, members)
    if topology != state.topology or subscriptions != state.subscriptions or rewound or split != state.split:
        state.topology, state.subscriptions, state.split = topology, subscriptions, split
        wanted = group_partitions(tr, members.values(), group, split)
        touched.update(k for k in state.set_wanted(wanted) if k in state.leases)
    read_again(tr, state, touched)
    return touched


def read_again(tr: Transaction, state: GroupState, touched: Iterable[PartitionRef]) -> None:
    """Read these leases from the store into the state (and their loads into the Balancer)."""
    top = state.top
    for key in touched:
        raw = tr.get(keys.lease_key(state.group, *key))
        if raw is None:
            continue
        lease = lease_from(keys.lease_key(state.group, *key), raw)
        old = state.leases.get(key)
        state.put_lease(lease)
        if key in state.wanted and (old is None or old.records_per_s != lease.records_per_s):
            state.balancer.put_partition(state.spec(key, top))


def plan(
    tr: Transaction,
    state: GroupState,
    touched: set[PartitionRef],
    *,
    now_ms: int,
    revoke_ms: int,
    threshold: float = 0.1,
    proposed: frozenset[tuple[PartitionRef, str]] | None = None,
    pinned: Mapping[PartitionRef, str] | None = None,
    promoted: frozenset[tuple[str, str]] = frozenset(),
    hold_until_ms: int = 0,
) -> tuple[Applied, list[Change]]:
    """Step the group's assignment and plan the lease changes that move towards it: grant free ones, revoke
    moved ones with a deadline, and force moves whose deadline passed (the old holder's epoch is then stale).
    `proposed` is the previous pass's `Applied.proposed` (None rebalances at once); `pinned`, {partition: the
    worker it was recently moved away from}, not to be moved back there yet. `promoted` is the previous pass's
    `Applied.promoted`: lower lanes past their time-lag target are served with the top tier until their lag is
    back under half the target, and each change is a group event (written here). A revoke deadline that passes
    before `hold_until_ms` is moved to it (a new owner's grace: a holder whose replica died with the old owner
    is still reconnecting to finish, commit what it did and hand the lease back; forced, that work would be
    done again). Returns the pass's result and the changes in key order."""
    group = state.group
    ev = GroupEvents(tr, ASSIGNER, now_ms)
    state.set_first_claim(_first_claim(tr, group, state, promoted, ev))
    step = state.balancer.step(threshold=threshold, proposed=proposed, pinned=pinned)
    done = Applied(proposed=step.proposed, promoted=state.first_claim)
    if state.fresh:
        candidates: Iterable[PartitionRef] = set(state.wanted) | set(state.leases)
        state.fresh = False
    else:
        candidates = set(step.changed) | touched | state.revoking
    holders = state.balancer.holders
    changes: list[Change] = []
    for key in sorted(candidates):
        change = _lease_change(
            key,
            state.leases.get(key),
            holders.get(key, ""),
            state.members,
            now_ms=now_ms,
            revoke_ms=revoke_ms,
            done=done,
            hold_until_ms=hold_until_ms,
        )
        if change is not None:
            changes.append(change)
    for c in changes:  # the state as it will be once written (a write that finds its lease changed: `reread`)
        state.put_lease(c.new)
    done.next_deadline_ms = min((state.leases[k].deadline_ms for k in state.revoking), default=0)
    return done, changes


def _lease_change(
    key: PartitionRef,
    old: Lease | None,
    want: str,
    members: Mapping[str, Member],
    *,
    now_ms: int,
    revoke_ms: int,
    done: Applied,
    hold_until_ms: int = 0,
) -> Change | None:
    """The change that moves one lease towards its wanted holder ("" for none), or None; a revoke deadline that
    passes before `hold_until_ms` is moved to it."""
    lease = old or Lease(*key)
    if lease.state != FREE and lease.worker_id not in members:
        lease = replace(lease, worker_id="", state=FREE, target="", deadline_ms=0)  # holder is gone
    new = lease
    notes: list[tuple[str, str, Lease, str]] = []
    if lease.state == GRANTED and lease.worker_id != want:
        new = replace(lease, state=REVOKING, target=want, deadline_ms=now_ms + revoke_ms)
        if want:
            done.moved[key] = lease.worker_id
        reason = f"rebalance: moving to {want!r}" if want else "no longer assigned"
        notes.append(("lease_revoking", lease.worker_id, lease, reason))
    elif lease.state == REVOKING:
        if lease.worker_id == want:
            new = replace(lease, state=GRANTED, target="", deadline_ms=0)  # the move was called off
        elif now_ms >= lease.deadline_ms and now_ms < hold_until_ms:
            # a new owner's grace: the holder may be reconnecting (its replica died with the old owner) to finish,
            # commit and hand back; its resumed session is told the later deadline
            new = replace(lease, target=want, deadline_ms=hold_until_ms)
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
    return Change(key, old, new, tuple(notes)) if new != old else None


def write_changes(tr: Transaction, group: str, changes: Sequence[Change], *, now_ms: int) -> list[PartitionRef]:
    """Write the planned changes whose lease is still as planned (one that moved meanwhile is left to the next
    pass: epochs fence every lease on its own, so any subset of a plan is a valid state). Returns the leases
    not written."""
    ev = GroupEvents(tr, ASSIGNER, now_ms)
    stale = []
    for c in changes:
        raw = tr.get(keys.lease_key(group, *c.key))
        if (lease_from(keys.lease_key(group, *c.key), raw) if raw else None) != c.old:
            stale.append(c.key)
            continue
        for change, worker, lease, reason in c.notes:
            ev.group(group, change, worker, lease, reason)
        write_lease(tr, group, c.old, c.new)
        bump_versions(tr, group, c.old.worker_id if c.old is not None else "", c.new.worker_id)
    return stale


def plan_assignment(
    tr: Transaction,
    group: str,
    *,
    now_ms: int,
    revoke_ms: int,
    threshold: float = 0.1,
    proposed: frozenset[tuple[PartitionRef, str]] | None = None,
    pinned: Mapping[PartitionRef, str] | None = None,
    grace: bool = False,
    promoted: frozenset[tuple[str, str]] = frozenset(),
) -> tuple[Applied, list[Change]]:
    """The whole pass from a state read on the spot (`plan` on `build`). With `grace` (a new owner's first TTL)
    every member counts as live, since none could heartbeat while nobody owned the group."""
    state = build(tr, group, now_ms=now_ms, grace=grace)
    return plan(
        tr,
        state,
        set(),
        now_ms=now_ms,
        revoke_ms=revoke_ms,
        threshold=threshold,
        proposed=proposed,
        pinned=pinned,
        promoted=promoted,
    )


@transactional
def apply_assignment(
    tr: Transaction,
    group: str,
    *,
    now_ms: int,
    revoke_ms: int,
    threshold: float = 0.1,
    proposed: frozenset[tuple[PartitionRef, str]] | None = None,
    pinned: Mapping[PartitionRef, str] | None = None,
    grace: bool = False,
    promoted: frozenset[tuple[str, str]] = frozenset(),
) -> Applied:
    """Plan the group's assignment and write every change in this transaction (the Assigner writes large
    passes in several)."""
    done, changes = plan_assignment(
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
    write_changes(tr, group, changes, now_ms=now_ms)
    return done


def _first_claim(
    tr: Transaction, group: str, state: GroupState, before: frozenset[tuple[str, str]], ev: GroupEvents
) -> frozenset[tuple[str, str]]:
    """Lower lanes whose time lag (the most any holder reports for one of its partitions) is past their
    target, or was and is not yet back under half of it: they are served with the top tier now. Each lane
    that gains or loses the first claim is a group event with its lag and target. Only lower lanes' leases
    are looked at (a group with one tier looks at none)."""
    top = state.top
    tops: dict[str, int] = {}  # each stream's top priority
    for (stream, _), prio in state.lanes.items():
        tops[stream] = max(tops.get(stream, prio), prio)
    lower = {lane: prio for lane, prio in state.lanes.items() if prio < top}
    if not lower:
        return frozenset()
    configured = group_config.lag_targets(tr, group)
    targets = {}
    for lane, prio in lower.items():
        target = configured.get(lane[1], group_config.DEFAULT_LAG_TARGET_MS if prio >= tops[lane[0]] else 0)
        if target > 0:
            targets[lane] = target
    lag: dict[tuple[str, str], int] = {}
    if targets:
        for worker_keys in state.held.values():
            for k in worker_keys:
                if k[:2] in targets and k in state.wanted:
                    lag[k[:2]] = max(lag.get(k[:2], 0), state.leases[k].lag_ms)
    now: set[tuple[str, str]] = set()
    for lane, target in targets.items():
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
