"""Slices of split partitions: one hot partition read by several workers at once, with order per key kept.

A group may split a partition into N slices (`group configure --split`): N leases, each of a range of the
key hash (`Slice`), held by N different workers with their own epochs. Each holder fetches the whole
partition and its decoder leaves out the records of the other slices (its `mine` predicate), so a key is
always handled by the same holder, in order. Progress stays per partition and per record (the commit log's
done bitmap is shared): a holder marks only its own records done, so the partition's low watermark is the
lowest of its slices', and sealing and draining wait for every slice. A commit is fenced by its slice's epoch.

At no time do two leases cover the same offset. A partition to be split leaves the Balancer's partitions (so
its whole lease is revoked as any other no longer assigned) and its slices are granted once the whole lease
is free. A merge (or a split into another count) revokes every slice, deletes them once all are free, and only
then does the partition return to the Balancer. Slice epochs start from the whole lease's epoch, and a merge
leaves the whole lease at the highest slice epoch, so a stale holder of either is always fenced.

A split holds while enough workers read the partition's lane: it uses at most as many slices as there are live
members subscribed to it (fewer than two: it is merged until more join), and never gives one worker two slices
of one partition.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from streamplane.coordinator import keys, planted
from streamplane.coordinator.commitlog import log as commitlog
from streamplane.coordinator.groups.config import configured, forget_settled, live, max_slices, settings
from streamplane.coordinator.groups.leases import (
    FREE,
    GRANTED,
    REVOKING,
    GroupEvents,
    Lease,
    Member,
    bump_versions,
    read_lease,
    slice_lease_from,
    write_lease,
)
from streamplane.coordinator.groups.timing import AssignerConfig
from streamplane.coordinator.store import Transaction
from streamplane.errors import StreamplaneError
from streamplane.model import PartitionRef

ACTOR = "assigner"
SPLIT, MERGED = "partition_split", "partition_merged"
"""The group events of a split granted, and of a merge (or a split into another count) done."""


def _reads(member: Member, ref: PartitionRef) -> bool:
    """Whether a member may hold a slice of the partition: it reads the lane, and it reads slices."""
    if not member.takes_slices:
        return False
    for sub in member.subscriptions:
        if sub.stream == ref.stream and (ref.lane in sub.lanes if sub.lanes else ref.lane != "dlq"):
            return True
    return False


def wanted(tr: Transaction, group: str, members: Mapping[str, Member]) -> dict[PartitionRef, int]:
    """{partition: slices it is split into now}: each configured split of a partition still read, into at most
    as many slices as live members read its lane (fewer than two: none)."""
    splits = configured(settings(tr, group))
    out: dict[PartitionRef, int] = {}
    streams: dict[str, Any] = {}
    for ref, count in splits.items():
        readers = sum(1 for m in members.values() if _reads(m, ref))
        n = min(count, readers)
        if n >= 2 and live(tr, ref, streams):
            out[ref] = n
    return out


def stored(tr: Transaction, group: str) -> dict[PartitionRef, list[Lease]]:
    """The group's slice leases, by partition."""
    r = keys.SLICE_LEASES.range((group,))
    out: dict[PartitionRef, list[Lease]] = {}
    for lease in _decoded(tr.get_range(r.start, r.stop)):
        out.setdefault(lease.key, []).append(lease)
    return out


def _decoded(rows: list[tuple[bytes, bytes]]) -> list[Lease]:
    """Slice leases as stored; a torn one (never written whole by this code) is left out, and so is replaced
    by the planner, never a stop of the owner's pass over the group."""
    out = []
    for key, raw in rows:
        try:
            lease = slice_lease_from(key, raw)
        except (ValueError, TypeError):
            continue
        if lease.slices >= 2 and 0 <= lease.slice_index < lease.slices:
            out.append(lease)
    return out


def slices_of(tr: Transaction, group: str, ref: PartitionRef) -> list[Lease]:
    """The slice leases of one partition (none while it is not split)."""
    r = keys.SLICE_LEASES.range((group, *ref))
    return _decoded(tr.get_range(r.start, r.stop))


def excluded(tr: Transaction, group: str, members: Mapping[str, Member]) -> frozenset[PartitionRef]:
    """Partitions the Balancer leaves alone: the ones split now, or still holding slices from a split."""
    r = keys.SLICE_LEASES.range((group,))
    held = {PartitionRef(*keys.SLICE_LEASES.unpack(k)[1:5]) for k, _ in tr.get_range(r.start, r.stop, snapshot=True)}
    return frozenset(held | set(wanted(tr, group, members)))


def _free(lease: Lease, members: Mapping[str, Member], now_ms: int, ev: GroupEvents, group: str) -> Lease:
    """The lease as it is once a holder that is gone, or a revoke whose deadline passed, has let it go."""
    if lease.state == FREE:
        return lease
    if lease.worker_id not in members:
        ev.group(group, "lease_revoked", lease.worker_id, lease, "its holder is gone")
    elif lease.state == REVOKING and now_ms >= lease.deadline_ms:
        ev.group(group, "lease_revoked", lease.worker_id, lease, "revoke deadline passed")
    else:
        return lease
    return replace(lease, worker_id="", state=FREE, target="", deadline_ms=0)


def _put(tr: Transaction, group: str, old: Lease | None, new: Lease) -> None:
    if new != old:
        write_lease(tr, group, old, new)
        bump_versions(tr, group, old.worker_id if old is not None else "", new.worker_id)


@dataclass
class SlicePass:
    """What one pass of the slice planner leaves for later."""

    next_deadline_ms: int = 0
    """The earliest slice revoke deadline still pending (0: none)."""
    merged: bool = False
    """A partition's slices were all deleted: it returns to the Balancer."""
    touched: set[PartitionRef] = field(default_factory=set)
    """Whole leases the pass wrote (the owner's state reads them again)."""
    slices: int = 0
    """Slice leases the group has after the pass."""
    loads: dict[str, float] = field(default_factory=dict)
    """{worker: the load (records/s) of the slices it holds after the pass}: the Balancer's base loads."""

    def count(self, lease: Lease) -> None:
        """Count a slice lease's load as the lease is after the pass."""
        if lease.state != FREE:
            self.loads[lease.worker_id] = self.loads.get(lease.worker_id, 0.0) + lease.load


@dataclass
class LoadWatch:
    """What a group's owner has seen of its partitions' load between passes (in memory: a new owner looks
    anew), for the confirmation of automatic splits and merges."""

    hot: dict[PartitionRef, tuple[int, int]] = field(default_factory=dict)
    """{whole partition behind: (since when, its records behind then)}."""
    calm: dict[PartitionRef, int] = field(default_factory=dict)
    """{partition split for load whose slices keep up, carrying under half of what it did: since when}."""


HOT, COOLED = "partition_hot", "partition_cooled"
"""The group events of an automatic split decided (its reason: the lag, for how long, the workers keeping up)
and of an automatic merge decided (its reason: the load that fell)."""


def autoscale(
    tr: Transaction,
    group: str,
    members: Mapping[str, Member],
    hot: list[Lease],
    lag_of: Callable[[str], int],
    watch: LoadWatch,
    cfg: AssignerConfig,
    *,
    now_ms: int,
) -> tuple[bool, int]:
    """Split for load, and merge back when the load falls: written to the group's settings (`auto_splits`) for
    `plan` to carry out, each decision a group event with its reason. A whole partition is split when its
    holder stays `cfg.split_lag_ms` behind (`hot`: the whole leases past it) for `cfg.split_confirm_ms`
    without catching up, and other readers of its lane keep up with their own (`lag_of`: a worker's lag):
    into one slice per such worker and its holder, at most the group's max_slices. Its slices merge back once
    they all keep up, carrying under half of the rate the whole partition had when it was split, for
    `cfg.merge_after_ms`. A split of a partition no longer read (its generation drained or abandoned, its
    stream deleted) is forgotten, by hand or not, so it neither lingers nor counts towards the group's limit.
    Returns whether the settings changed, and when to look again (0: no need)."""
    config = settings(tr, group)
    limit = max_slices(config)
    changed = forget_settled(tr, config)
    manual = set(config.get("splits", {}))
    auto: dict[str, Any] = config.get("auto_splits", {})
    if not isinstance(auto, dict):
        auto = {}
    ev = GroupEvents(tr, ACTOR, now_ms)
    check_at = 0
    behind = {lease.key: lease for lease in hot if lease.lease_id not in manual and lease.lease_id not in auto}
    for gone in [ref for ref in watch.hot if ref not in behind]:
        del watch.hot[gone]
    for ref, lease in behind.items():
        since, lag_then = watch.hot.get(ref, (now_ms, lease.lag_records))
        if lease.lag_records < lag_then:  # catching up on its own: it is watched anew
            since, lag_then = now_ms, lease.lag_records
        watch.hot[ref] = (since, lag_then)
        if now_ms - since < cfg.split_confirm_ms:
            check_at = min(check_at or since + cfg.split_confirm_ms, since + cfg.split_confirm_ms)
            continue
        keeping_up = [
            w for w, m in members.items() if w != lease.worker_id and _reads(m, ref) and lag_of(w) < cfg.split_lag_ms
        ]
        n = min(limit, 1 + len(keeping_up))
        if n < 2:
            continue
        auto[ref.lease_id] = {"slices": n, "rate": lease.records_per_s}
        del watch.hot[ref]
        ev.group(
            group,
            HOT,
            lease.worker_id,
            lease,
            f"{ref.lease_id}: {lease.lag_ms / 1000:.1f} s behind for {(now_ms - since) / 1000:.1f} s, "
            f"{lease.lag_records:,} records, at {lease.records_per_s:,.0f} records/s, with {len(keeping_up)} "
            f"other worker(s) keeping up: split into {n} slices",
        )
        changed = True
    calm_lag = cfg.split_lag_ms // 3
    split_now = stored(tr, group) if auto else {}
    for lid, entry in list(auto.items()):
        try:
            ref, split_rate = PartitionRef.parse(lid), float(entry.get("rate", 0.0))
        except (StreamplaneError, ValueError, TypeError, AttributeError):
            continue  # a torn entry: `configured` leaves it out too
        current = split_now.get(ref, [])
        rate = sum(x.records_per_s for x in current)
        calm = bool(current) and all(x.state == GRANTED and x.lag_ms < calm_lag for x in current)
        if not calm or rate >= split_rate / 2:
            watch.calm.pop(ref, None)
            continue
        since = watch.calm.setdefault(ref, now_ms)
        if now_ms - since < cfg.merge_after_ms:
            check_at = min(check_at or since + cfg.merge_after_ms, since + cfg.merge_after_ms)
            continue
        del auto[lid]
        del watch.calm[ref]
        ev.group(
            group,
            COOLED,
            reason=f"{lid}: its {len(current)} slices kept up for {(now_ms - since) / 1000:.0f} s carrying "
            f"{rate:,.0f} records/s, under half the {split_rate:,.0f} it had when split: merged back",
        )
        changed = True
    if changed:
        config["auto_splits"] = auto
        tr.set(keys.group_config_key(group), json.dumps(config, sort_keys=True).encode())
    return changed, check_at


def plan(
    tr: Transaction,
    group: str,
    members: Mapping[str, Member],
    *,
    now_ms: int,
    revoke_ms: int,
    load: Mapping[str, float] | None = None,
) -> SlicePass:
    """Move every split partition of the group one step towards the slices it should have, and write it:
    slices of a merge (or of an earlier count) revoked, then deleted once all are free; new slices created once
    the whole lease is free; free slices granted to live readers of the lane, each holding one slice of the
    partition at most, the least loaded first (`load`: {worker: the load of the whole partitions it holds},
    to which the slices it holds add theirs)."""
    ev = GroupEvents(tr, ACTOR, now_ms)
    want = wanted(tr, group, members)
    have = stored(tr, group)
    held = dict(load or {})
    for slices in have.values():
        for lease in slices:
            if lease.state != FREE:
                held[lease.worker_id] = held.get(lease.worker_id, 0.0) + lease.load
    out = SlicePass()
    for ref in sorted(set(want) | set(have)):
        n = want.get(ref, 0)
        current = have.get(ref, [])
        if current and any(lease.slices != n for lease in current):
            done = True
            for lease in current:
                new = _free(lease, members, now_ms, ev, group)
                if new.state == GRANTED:
                    reason = f"splitting into {n} slices" if n else "merging its slices"
                    ev.group(group, "lease_revoking", lease.worker_id, lease, reason)
                    new = replace(new, state=REVOKING, deadline_ms=now_ms + revoke_ms)
                _put(tr, group, lease, new)
                out.count(new)
                if new.state != FREE:
                    done = False
                    out.next_deadline_ms = min(out.next_deadline_ms or new.deadline_ms, new.deadline_ms)
            if not done:
                out.slices += len(current)
                continue
            top = max(lease.epoch for lease in current)
            for lease in current:
                tr.clear(lease.store_key(group))
            if planted.MERGE_DROPS_SLICE in planted.active:
                commitlog.planted_skip_to_top(tr, group, ref)
            whole = read_lease(tr, group, ref) or Lease(*ref)
            if whole.epoch < top:  # the whole lease's next grant fences every slice holder
                write_lease(tr, group, whole, replace(whole, epoch=top))
                out.touched.add(ref)
            ev.group(group, MERGED, reason=f"{ref.lease_id}: its {current[0].slices} slices are free and merged")
            out.merged = out.merged or not n
            current = []
        if not n:
            continue
        if not current:
            whole = read_lease(tr, group, ref) or Lease(*ref)
            if whole.state != FREE and whole.worker_id in members:
                continue  # the Balancer revokes it (the partition left its partitions): slices wait for it
            if whole.state != FREE:
                write_lease(tr, group, whole, replace(whole, worker_id="", state=FREE, target="", deadline_ms=0))
                out.touched.add(ref)
            current = [
                Lease(*ref, epoch=whole.epoch, slice_index=i, slices=n, records_per_s=whole.records_per_s / n)
                for i in range(n)
            ]
            ev.group(group, SPLIT, reason=f"{ref.lease_id}: split into {n} slices by key hash")
            for lease in current:
                tr.set(lease.store_key(group), lease.to_json())
        holders = {lease.worker_id for lease in current if lease.state != FREE}
        for lease in current:
            new = _free(lease, members, now_ms, ev, group)
            if new.state == REVOKING:
                out.next_deadline_ms = min(out.next_deadline_ms or new.deadline_ms, new.deadline_ms)
            if new.state == FREE:
                holders.discard(lease.worker_id)
                readers = [w for w, m in members.items() if w not in holders and _reads(m, ref)]
                if readers:
                    worker = min(readers, key=lambda w: (held.get(w, 0.0), w))
                    new = replace(new, worker_id=worker, epoch=new.epoch + 1, state=GRANTED, lag_records=0, lag_ms=0)
                    ev.group(group, "lease_granted", worker, new, f"slice {lease.slice_index} of {n}")
                    holders.add(worker)
                    held[worker] = held.get(worker, 0.0) + new.load
            _put(tr, group, lease, new)
            out.count(new)
        out.slices += len(current)
    return out
