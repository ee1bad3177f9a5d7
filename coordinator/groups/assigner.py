"""The Assigner: the assignment loop, each group's run by the replica owning it.

A pass renews this replica's leader key and its share of the groups, then, for each group it owns that changed
or has something due, expires silent sessions and plans and writes the group's lease changes. What it keeps
between passes is one `OwnedGroup` per group. The worker sessions that carry its decisions to the workers are
hosted apart (`sessions/host.py`), on any replica: they read them from the store.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import structlog

from streamplane.clock import SYSTEM, Clock
from streamplane.coordinator import keys
from streamplane.coordinator.groups import leadership, leases, slices
from streamplane.coordinator.groups import lifecycle as group_lifecycle
from streamplane.coordinator.groups import state as group_state
from streamplane.coordinator.groups.leases import Lease, Member
from streamplane.coordinator.groups.state import GroupState
from streamplane.coordinator.groups.timing import AssignerConfig
from streamplane.coordinator.loop import BackgroundLoop, Schedule
from streamplane.coordinator.rpc import metrics
from streamplane.coordinator.store import Database, Transaction
from streamplane.coordinator.store.api import read_counter
from streamplane.coordinator.topology import events
from streamplane.errors import StreamplaneError, UnavailableError
from streamplane.model import (
    GroupChanged,
    GroupDeleted,
    GroupDescription,
    LeaseInfo,
    LeaseLoad,
    PartitionRef,
)
from streamplane.names import check_object_name

log = structlog.get_logger(__name__)


Look = tuple[dict[str, tuple[int, int]], int]
"""What a pass reads of every group at once: {group: (version, loads counter)}, and the topology log's head."""


@dataclass
class OwnedGroup:
    """What a replica keeps between passes of one group it owns; dropped whole when the group goes elsewhere,
    so nothing of an old ownership (proposed moves, a pass's version) steers a later one."""

    grace_until: int = 0
    """Until when this replica ends no session of the group (after a take-over or a store outage, each worker
    gets a TTL to be heard), and forces no revoke."""
    state: GroupState | None = None
    """The group's working state, caught up with the store at each pass (None: read it whole)."""
    next_expiry: tuple[int, int] = (-1, 0)
    """(group version, when its next session expiry is due) as the last expiry read found them."""
    joining: tuple[int, int, int] | None = None
    """(when its first pass was due, group version, when that version was first seen) while a group nobody holds
    a lease of waits for its members to join (join_window_ms)."""
    assigned: bool = False
    """Past that wait."""
    last_pass: tuple[int, float, int, tuple[int, int]] = (-1, 0.0, 0, (-1, -1))
    """(version, monotonic time, next deadline ms, loads version) of the last pass that computed it."""
    proposed: frozenset[tuple[PartitionRef, str]] = frozenset()
    """Rebalancing moves the last pass proposed (made only if the next pass confirms them)."""
    promoted: frozenset[tuple[str, str]] = frozenset()
    """Lower lanes past their time-lag target, served with the top tier."""
    moved: dict[PartitionRef, tuple[int, str]] = field(default_factory=dict)
    """{partition: (when it was last moved to balance load, the worker it left)}: the cool-down."""
    loads: slices.LoadWatch = field(default_factory=slices.LoadWatch)
    """Partitions behind, and automatic splits caught up, as seen since when (the confirmation of a split or
    a merge for load)."""


def _lag_of(state: GroupState, worker: str) -> int:
    """The most time lag (ms) any of a worker's whole leases reports."""
    leases_of = state.leases
    return max((leases_of[k].lag_ms for k in state.held.get(worker, ()) if k in leases_of), default=0)


class Assigner:
    """The Assigner of one coordinator replica.

    `replica_id` must be new for every process (the default is random): the members of the sessions a replica
    serves live as long as its registration, so a restarted process that took its predecessor's id would keep
    sessions alive that nobody serves any more.
    """

    def __init__(
        self,
        db: Database,
        config: AssignerConfig | None = None,
        *,
        replica_id: str | None = None,
        clock: Clock = SYSTEM,
    ) -> None:
        self.db = db
        self.config = config or AssignerConfig()
        self.clock = clock
        self.replica_id = replica_id or f"replica-{uuid.uuid4().hex[:8]}"
        self._loop = BackgroundLoop(
            "assigner",
            self.run_once,
            interval_ms=self.config.loop_ms,
            clock=clock,
            # at once on any group change (a join, a leave, a release)
            wake=lambda: self.db.transact(lambda tr: tr.watch(keys.ASSIGNER_WAKE)),
        )
        self._renew_at = 0
        self.owned: set[str] = set()
        """The groups whose assignment this replica runs (its fair share of the live replicas')."""
        self.kept: dict[str, OwnedGroup] = {}
        """What this replica keeps between passes of each group it owns (the same keys as `owned`)."""
        self._groups: set[str] = set()  # the groups there were at the last claim
        self.is_leader = False
        """Whether this replica holds the leader key (it runs the sealer and the autopilot)."""
        self._leader_until = 0  # when the leader key, as last read, runs out
        self._claimable_at = 0  # when another replica's hold on a group, as last read, first runs out
        self._store_lost = False  # a pass failed on the store: the next one that reaches it gives a grace

    def group_events(self, group: str, after: bytes | None, *, until_head: bool = False) -> AsyncIterator[GroupChanged]:
        """The group's log after `after`, then its new events as they commit (on an event loop); with
        `until_head`, only what the log holds (see events.follow)."""
        check_object_name("group", group)
        return events.follow(
            lambda cursor: events.read_group_events_and_watch(self.db, group, cursor), after, until_head=until_head
        )

    def delete_group(self, group: str, *, force: bool = False, reason: str = "", actor: str = "") -> GroupDeleted:
        """Remove a group and everything it kept (see group_lifecycle.delete_group)."""
        return group_lifecycle.delete_group(
            self.db, group, now_ms=self.clock.now_ms(), force=force, reason=reason, actor=actor
        )

    def describe(self, group: str) -> GroupDescription:
        """Members and leases of a group, and which replica leads the assignment; InvalidArgumentError for a name
        no group can have (the one rule every RPC applies)."""
        check_object_name("group", group)

        def read(tr: Transaction) -> tuple[dict[str, Member], list[Lease], str, bool]:
            owner = leadership.group_owner(tr, group) or leadership.leader(tr)
            held = list(leases.read_leases(tr, group).values())
            held += [x for split in slices.stored(tr, group).values() for x in split]
            members = leases.read_members(tr, group)
            return members, held, owner, not (members or held or group_lifecycle.exists(tr, group))

        members, held, leader, unknown = self.db.transact(read)
        return GroupDescription(
            group=group,
            leader_replica=leader,
            unknown=unknown,
            members=tuple(members.values()),
            leases=tuple(
                LeaseInfo(
                    partition=x.key,
                    epoch=x.epoch,
                    state=x.state,
                    worker_id=x.worker_id,
                    load=LeaseLoad(x.records_per_s, x.lag_records, x.lag_ms),
                    slice=x.slice,
                )
                for x in sorted(held, key=lambda x: (x.key, x.slices, x.slice_index))
            ),
        )

    # -- the assignment loop
    @property
    def schedule(self) -> Schedule:
        """When this loop's passes run: the thread's, and the simulator's on its own time."""
        return self._loop.schedule

    def start(self) -> None:
        self._loop.start()

    def stop(self) -> None:
        self._loop.stop()

    def _kept_for(self, group: str) -> OwnedGroup:
        """What this replica keeps of an owned group (made empty the first time it is asked for)."""
        kept = self.kept.get(group)
        if kept is None:
            kept = self.kept[group] = OwnedGroup()
        return kept

    def _pinned(self, group: str, now: int) -> dict[PartitionRef, str]:
        """{partition: the worker it left} for the group's partitions still in their cool-down after a move
        (older entries are forgotten)."""
        moved = self._kept_for(group).moved
        if not moved:
            return {}
        for k in [k for k, (t, _) in moved.items() if now - t >= self.config.cooldown_ms]:
            del moved[k]
        return {k: w for k, (_, w) in moved.items()}

    def _write_rest(self, state: GroupState, rest: list[group_state.Change], now: int) -> None:
        """The rest of a large pass, MAX_LEASE_WRITES changes a transaction, each while still the group's owner."""
        group = state.group
        for i in range(0, len(rest), group_state.MAX_LEASE_WRITES):
            chunk = rest[i : i + group_state.MAX_LEASE_WRITES]

            def write(tr: Transaction, chunk: list[group_state.Change] = chunk) -> list[PartitionRef]:
                leadership.ensure_group(tr, group, self.replica_id, now)
                stale = group_state.write_changes(tr, group, chunk, now_ms=now)
                group_state.read_again(tr, state, stale)
                return stale

            state.reread.update(self.db.transact(write))

    def _pass(
        self, tr: Transaction, group: str, now: int, grace: bool, first_try: bool
    ) -> tuple[GroupState, group_state.Applied, list[group_state.Change]]:
        """Plan a pass of a group on its working state (caught up with the store), or on one read whole: at the
        first pass, after too many changes to follow, every RESYNC_MS, and whenever a transaction body runs
        again (the state is updated as the body runs; a retried body cannot trust what an attempt left)."""
        cfg = self.config
        owned = self._kept_for(group)
        kept = owned.state if first_try else None
        touched = None
        if kept is not None and now - kept.built_ms < group_state.RESYNC_MS:
            touched = group_state.catch_up(tr, kept, now_ms=now, grace=grace)
        if kept is None or touched is None:
            kept = group_state.build(tr, group, now_ms=now, grace=grace, hot_lag_ms=cfg.split_lag_ms)
            touched = set()
        state = owned.state = kept
        applied, changes = group_state.plan(
            tr,
            state,
            touched,
            now_ms=now,
            revoke_ms=cfg.revoke_ms,
            threshold=cfg.threshold,
            proposed=owned.proposed,
            pinned=self._pinned(group, now),
            promoted=owned.promoted,
            hold_until_ms=owned.grace_until,
        )
        return state, applied, changes

    def _slices(self, tr: Transaction, state: GroupState, applied: group_state.Applied, now: int) -> None:
        """The pass's step for the group's split partitions (slices.py), after the Balancer's: its revoke
        deadlines join the pass's, and a merge done is looked at again at once (the Balancer takes it back)."""
        cfg, group = self.config, state.group
        hot = [state.leases[k] for k in sorted(state.hot)]
        scaled, check_at = slices.autoscale(
            tr, group, state.members, hot, lambda w: _lag_of(state, w), self._kept_for(group).loads, cfg, now_ms=now
        )
        load = state.balancer.partition_loads()  # slices go to the workers with the least load, not leases
        sliced = slices.plan(tr, group, state.members, now_ms=now, revoke_ms=cfg.revoke_ms, load=load)
        state.set_slice_loads(sliced.loads)
        group_state.read_again(tr, state, sliced.touched)
        metrics.SLICES.labels(group).set(sliced.slices)
        again = now if sliced.merged or scaled else 0  # the Balancer's partitions change: look again at once
        due = [d for d in (applied.next_deadline_ms, sliced.next_deadline_ms, again, check_at) if d]
        applied.next_deadline_ms = min(due, default=0)

    def _join_window(self, tr: Transaction, group: str, version: int, now: int) -> int:
        """When a group nobody holds a lease of yet is to be assigned, while members may still be joining (0:
        now). A join changes the group's version and wakes the loop, which extends the wait."""
        cfg = self.config
        owned = self._kept_for(group)
        if owned.assigned or not cfg.join_window_ms:
            return 0
        if leases.has_holders(tr, group):  # already assigned (by another replica, or before a restart)
            owned.assigned = True
            return 0
        first, seen_version, since = owned.joining or (now, version, now)
        if version != seen_version:
            since = now
        owned.joining = (first, version, since)
        until = min(since + cfg.join_window_ms, first + cfg.join_window_max_ms)
        if now >= until:
            owned.assigned, owned.joining = True, None
            return 0
        return until

    def _expiry_known(self, group: str, version: int, now: int) -> int | None:
        """When the group's next session expiry is, without reading its members (None: they must be read). In
        its grace after a take-over, nobody is ended before it ends; else, if nobody joined or left since the
        last expiry read, heartbeats only move deadlines later, so nothing expires before the known time."""
        owned = self._kept_for(group)
        if now < owned.grace_until:
            return owned.grace_until
        known_version, known_expiry = owned.next_expiry
        if version == known_version and now < known_expiry:
            return known_expiry
        return None

    def _unchanged(self, group: str, version: int, loads: tuple[int, int], now: int) -> bool:
        """Whether a group needs no new plan: no join, leave or lease change since its last pass, no deadline
        due, and no new loads or topology events (looked at every rebalance_ms at most: a failover's new
        generation)."""
        last_version, last_time, deadline, last_loads = self._kept_for(group).last_pass
        if version != last_version or (deadline and now >= deadline):
            return False
        return loads == last_loads or self.clock.monotonic() - last_time < self.config.rebalance_ms / 1000

    def run_once(self) -> int:
        """One pass of the loop: renew the leader key and this replica's groups (claiming its fair share of the
        groups among the live replicas); expire sessions and rebalance the groups it owns that need it.
        Returns when the next pass is due (ms since the epoch), unless a group changes first."""
        cfg = self.config
        now = self.clock.now_ms()
        renew = now >= self._renew_at

        def membership(tr: Transaction) -> tuple[list[str], tuple[bool, int] | None, tuple[set[str], int] | None, Look]:
            """The groups; the leader key and this replica's groups, renewed or claimed when due; and, for a
            replica with groups, every group's counters (a group that did not change since its last pass,
            with nothing due, needs no transaction of its own: an idle fleet's pass is this one transaction)."""
            groups = leases.read_groups(tr)
            leader = None
            if renew or not self.is_leader:  # a standby tries every pass it makes (see `due` below)
                leader = leadership.acquire(tr, self.replica_id, now, cfg.ttl_ms)
            # a new group is claimed at once, and a replica without groups looks for free ones every pass
            claimed = None
            if renew or set(groups) != self._groups or (groups and not self.owned):
                claimed = leadership.claim_groups(tr, self.replica_id, groups, now, cfg.ttl_ms)
            owned = claimed[0] if claimed is not None else self.owned
            looked: Look = (leases.read_group_counters(tr), events.head(tr)) if owned else ({}, 0)
            return groups, leader, claimed, looked

        try:
            groups, leader, claimed, (counters, head) = self.db.transact(membership)
        except UnavailableError:
            self._store_lost = True
            raise
        if leader is not None:
            self.is_leader, self._leader_until = leader
        if claimed is not None:
            self._groups = set(groups)
            owned, self._claimable_at = claimed
            for group in owned - self.owned:  # new to this process: its workers may not have reached anyone
                self.kept[group] = OwnedGroup(grace_until=now + cfg.ttl_ms)
            self.owned = owned
            for gone in set(self.kept) - owned:  # gone to another replica: all it kept goes, at once
                del self.kept[gone]
        if self._store_lost:
            # the store was away (a database restart): no heartbeat was written and no replica renewed its
            # registration meanwhile, so every member looks expired; each gets a TTL to be heard, as after a
            # take-over, and the revokes it could not answer are not forced before then either
            self._store_lost = False
            for group in self.owned:
                kept = self._kept_for(group)
                kept.grace_until = max(kept.grace_until, now + cfg.ttl_ms)
        if renew:
            self._renew_at = now + cfg.ttl_ms // 3  # renewed well before it expires
        # a standby, or a replica with no group, looks again when the leader's key or another replica's hold on
        # a group runs out (at once after a TTL if its holder died), and otherwise when it renews its own
        due = self._renew_at
        if not self.is_leader:
            due = min(due, max(now, self._leader_until))
        if groups and not self.owned and self._claimable_at:
            due = min(due, max(now, self._claimable_at))
        # loads and topology events do not wake the loop: each group with members looks again every rebalance_ms
        poll = now + cfg.rebalance_ms
        for group in sorted(self.owned):
            looked_version, looked_loads = counters.get(group, (0, 0))
            idle_until = self._expiry_known(group, looked_version, now)
            if idle_until is not None and self._unchanged(group, looked_version, (looked_loads, head), now):
                due = min(due, idle_until, poll)
                deadline = self._kept_for(group).last_pass[2]
                if deadline:
                    due = min(due, deadline)
                continue
            tries = 0
            expiry_read: tuple[int, int] | None = None

            def step(
                tr: Transaction, group: str = group
            ) -> tuple[int, group_state.Applied | None, tuple[int, tuple[int, int]], list[group_state.Change]]:
                nonlocal tries, expiry_read
                tries += 1
                expiry_read = None
                leadership.ensure_group(tr, group, self.replica_id, now)
                grace = now < self._kept_for(group).grace_until
                version = read_counter(tr, keys.group_version_key(group))
                next_expiry = self._expiry_known(group, version, now)
                if next_expiry is None:
                    next_expiry = leases.expire(tr, group, now)
                    version = read_counter(tr, keys.group_version_key(group))  # with the leaves it wrote
                    expiry_read = (version, next_expiry)  # kept once this transaction commits
                loads = (read_counter(tr, keys.group_loads_key(group)), events.head(tr))
                if self._unchanged(group, version, loads, now):
                    return next_expiry, None, (version, loads), []  # nothing computed: `seen` is not used
                joined_by = self._join_window(tr, group, version, now)
                if joined_by:  # its first assignment waits for the members still joining
                    return min(next_expiry or joined_by, joined_by), None, (version, loads), []
                state, applied, changes = self._pass(tr, group, now, grace, tries == 1)
                # a pass that fits one transaction is written in it; a larger one in several after it
                first = changes[: group_state.MAX_LEASE_WRITES]
                stale = group_state.write_changes(tr, group, first, now_ms=now)
                group_state.read_again(tr, state, stale)  # as they are, and planned again at once
                state.reread.update(stale)
                watched = self._kept_for(group).loads
                if state.split or state.hot or watched.hot or watched.calm:
                    self._slices(tr, state, applied, now)
                elif state.slice_loads:  # the last slices are gone: the Balancer stops counting them
                    state.set_slice_loads({})
                # the versions this pass has seen, read in its own transaction: a join committed after it
                # is a change the next pass sees (read apart, it could be taken as already computed)
                seen = (
                    read_counter(tr, keys.group_version_key(group)),
                    (read_counter(tr, keys.group_loads_key(group)), events.head(tr)),
                )
                return next_expiry, applied, seen, changes[group_state.MAX_LEASE_WRITES :]

            try:
                next_expiry, applied, seen, rest = self.db.transact(step)
                kept = self._kept_for(group)
                if expiry_read is not None:
                    kept.next_expiry = expiry_read
                if rest and kept.state is not None:
                    self._write_rest(kept.state, rest, now)
            except UnavailableError:
                self._kept_for(group).state = None  # it may hold what was not written: read it whole next time
                self._store_lost = True
                raise  # the store is away: no group's pass can be written
            except leadership.NotLeaderError:  # its key was taken over (or is torn): not this replica's now
                self._kept_for(group).state = None
                self._renew_at = now  # the next pass claims its share again
                log.info("assigner.group_lost", group=group)
                continue
            except Exception as err:
                # one group's failure (a record of its that does not decode, a bug) never stops the passes
                # of the groups after it: it is logged and counted, and the group is looked at again later
                self._kept_for(group).state = None
                metrics.LOOP_FAILURES.labels("assigner", "group_failed").inc()
                if isinstance(err, StreamplaneError):
                    log.warning("assigner.group_pass_failed", group=group, error=err.message)
                else:
                    log.exception("assigner.group_pass_crashed", group=group)
                due = min(due, poll)
                continue
            except BaseException:
                self._kept_for(group).state = None
                raise
            if next_expiry:
                due = min(due, next_expiry, poll)
            if applied is not None:
                version, loads = seen
                kept.proposed, kept.promoted = applied.proposed, applied.promoted
                metrics.LEASE_GRANTS.labels(group).inc(applied.granted)
                metrics.LEASE_MOVES.labels(group).inc(len(applied.moved))
                kept.moved.update({k: (now, w) for k, w in applied.moved.items()})
                deadline = applied.next_deadline_ms
                if applied.proposed:  # look again after rebalance_ms to confirm (or drop) the proposed moves
                    confirm = now + cfg.rebalance_ms
                    deadline = min(deadline, confirm) if deadline else confirm
                if kept.state is not None and kept.state.reread:  # a lease moved under the pass
                    deadline = now
                kept.last_pass = (version, self.clock.monotonic(), deadline, loads)
            deadline = self._kept_for(group).last_pass[2]
            if deadline:
                due = min(due, deadline)
        return due
