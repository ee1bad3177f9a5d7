"""Rewinds: a live group sent back to a time, to the earliest records kept, or to given offsets.

A group's positions are spread over its stream's generations on several clusters, so a rewind is planned per
lane, generation and partition: each generation's own cluster says where the time falls in it (ListOffsets by
timestamp), outside any transaction. What cannot be reprocessed (a generation whose cluster is gone or does
not answer, whose topic is gone, whose records retention removed) is listed, one sentence per generation; the
caller refuses such a rewind unless forced.

Applying it is one transaction, with one `group_rewound` event and its actor: for each partition, the commit
log forgets what the group finished at or after its new position (its done offsets, retries and rejects,
for this group only); the group's lease on it is granted again to its holder at a new epoch, from the new
position, so what the holder still handles of the old epoch is fenced (a lease being moved is freed, and the
owner's next pass grants it to where it was going). A drained generation is *reopened* for this group only
(a reopened key): the group reads it again while nobody else does, and the sealer closes it again once the
group is back at its end offsets (`finish_rewinds`, with a `rewind_finished` event).
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

from streamplane.coordinator import keys
from streamplane.coordinator.commitlog import log as commitlog
from streamplane.coordinator.groups import slices
from streamplane.coordinator.groups.leases import (
    FREE,
    GRANTED,
    GroupEvents,
    Lease,
    bump_versions,
    read_lease,
    require_reader,
    write_lease,
)
from streamplane.coordinator.store import Database, Transaction, transactional
from streamplane.coordinator.topology.cluster_admin import ClusterAdmin
from streamplane.coordinator.topology.records import decoded_generation, get_cluster, get_stream
from streamplane.errors import (
    FailedPreconditionError,
    InvalidArgumentError,
    LimitExceededError,
    NotFoundError,
    StreamplaneError,
)
from streamplane.model import (
    ABANDONED,
    DRAINED,
    Generation,
    Lane,
    PartitionBounds,
    PartitionRef,
    RewindPlan,
    RewindPosition,
    RewindTarget,
    RewindTo,
    Stream,
)
from streamplane.names import check_lane_name, check_object_name

LOOKUPS_AT_ONCE = 8
"""Generations a rewind's plan asks their clusters about at the same time."""
MAX_PARTITIONS = 5_000
"""Partitions one rewind moves at most: its one transaction writes a header, clears three ranges and may free
a lease with its event for each, about 1.2 KB apiece: 6 MB, under FoundationDB's 10 MB."""
REWOUND = "group_rewound"
FINISHED = "rewind_finished"


def lanes_of(stream: Stream, lane: str) -> list[Lane]:
    if lane:
        check_lane_name("lane", lane)
        return [stream.require_lane(lane)]
    return [x for x in stream.lanes if x.name != "dlq"]


def _check_target(target: RewindTarget, now_ms: int) -> None:
    if target.to == RewindTo.TIME:
        if target.time_ms <= 0:
            raise InvalidArgumentError("a rewind to a time needs the time (milliseconds since the epoch, over 0)")
        if target.time_ms > now_ms:
            raise InvalidArgumentError("the time to rewind to is in the future: nothing was processed after it")
    elif target.to == RewindTo.OFFSETS:
        if len(target.offsets) > MAX_PARTITIONS:
            raise LimitExceededError(f"{len(target.offsets)} offsets given; the limit is {MAX_PARTITIONS}")
        if not target.offsets:
            raise InvalidArgumentError("a rewind to offsets needs at least one partition's offset")
        for ref, offset in target.offsets.items():
            if offset < 0:
                raise InvalidArgumentError(f"the offset for {ref.lease_id} must not be negative, not {offset}")


def partitions_of(stream: Stream, lanes: list[Lane], target: RewindTarget) -> list[tuple[str, Generation, list[int]]]:
    """(lane, generation, partitions) the rewind looks at: every partition of every generation that is not
    abandoned (its records were given up on purpose), or the ones given offsets."""
    if target.to != RewindTo.OFFSETS:
        return [
            (lane.name, gen, list(range(gen.partitions)))
            for lane in lanes
            for gen in lane.generations
            if gen.state != ABANDONED
        ]
    named = {x.name for x in lanes}
    wanted: dict[tuple[str, int], list[int]] = {}
    for ref in sorted(target.offsets):
        if ref.stream != stream.name or ref.lane not in named:
            raise InvalidArgumentError(f"{ref.lease_id} is not a partition of the lanes rewound ({sorted(named)})")
        wanted.setdefault((ref.lane, ref.generation), []).append(ref.partition)
    out = []
    for (lane_name, number), parts in sorted(wanted.items()):
        gen = stream.require_lane(lane_name).generation(number)
        if gen is None:
            raise NotFoundError(f"lane {lane_name} of stream {stream.name} has no generation {number}")
        if bad := [p for p in parts if p >= gen.partitions]:
            raise InvalidArgumentError(
                f"{lane_name} g{number} has {gen.partitions} partitions; there is no partition {bad[0]}"
            )
        out.append((lane_name, gen, parts))
    return out


def lookup(
    db: Database, admin: ClusterAdmin, stream: str, chosen: list[tuple[str, Generation, list[int]]], at_ms: int | None
) -> tuple[list[tuple[PartitionRef, PartitionBounds, str]], list[str]]:
    """What each generation's own cluster keeps of the chosen partitions, and where `at_ms` falls in them (one
    lookup per generation, LOOKUPS_AT_ONCE of them at a time: the rewind waits on the slowest, not their sum):
    (partition, bounds, the generation's state) each, and a sentence per generation that cannot be read (its
    cluster gone or silent, its topic gone)."""

    def one(chosen_gen: tuple[str, Generation, list[int]]) -> list[PartitionBounds] | str:
        """The generation's bounds, or the sentence saying why they cannot be read."""
        lane_name, gen, _ = chosen_gen
        where = f"{lane_name} g{gen.number} on cluster {gen.cluster}"
        try:
            return admin.bounds(get_cluster(db, gen.cluster), gen.topic, gen.partitions, at_ms)
        except NotFoundError as err:
            return f"{where}: {err.message}"
        except StreamplaneError as err:
            return f"{where} cannot be read: {err.message}"

    with ThreadPoolExecutor(max(1, min(LOOKUPS_AT_ONCE, len(chosen))), thread_name_prefix="rewind-lookup") as pool:
        answers = list(pool.map(one, chosen))
    found: list[tuple[PartitionRef, PartitionBounds, str]] = []
    lost: list[str] = []
    for (lane_name, gen, parts), bounds in zip(chosen, answers, strict=True):
        if isinstance(bounds, str):
            lost.append(bounds)
            continue
        found += [(PartitionRef(stream, lane_name, gen.number, p), bounds[p], str(gen.state)) for p in parts]
    return found, lost


def _position(target: RewindTarget, ref: PartitionRef, b: PartitionBounds) -> tuple[int, str]:
    """Where the partition starts again, and why part of it cannot be read again ("" when all can)."""
    if target.to == RewindTo.EARLIEST:
        return b.earliest, ""
    if target.to == RewindTo.TIME:
        if b.at == b.earliest and b.earliest > 0 and b.at < b.end:
            return b.at, f"retention removed offsets below {b.earliest} (some may be after the time)"
        return b.at, ""
    offset = target.offsets[ref]
    if offset > b.end:
        raise InvalidArgumentError(f"{ref.lease_id} ends at offset {b.end}: it has no offset {offset}")
    if offset < b.earliest:
        return b.earliest, f"retention removed offsets below {b.earliest} (asked from {offset})"
    return offset, ""


def plan(
    db: Database,
    admin: ClusterAdmin,
    group: str,
    stream_name: str,
    target: RewindTarget,
    *,
    lane: str = "",
    now_ms: int,
) -> RewindPlan:
    """Where each partition of the group's stream (or one lane) starts again, and how many of its records are
    processed again; nothing is written. Each generation's cluster is asked once for all its partitions."""
    check_object_name("group", group)
    _check_target(target, now_ms)
    stream = get_stream(db, stream_name)
    require_reader(db, group, stream.name, "there is nothing to rewind")
    chosen = partitions_of(stream, lanes_of(stream, lane), target)
    count = sum(len(parts) for _, _, parts in chosen)
    if count > MAX_PARTITIONS:
        raise LimitExceededError(
            f"the rewind covers {count} partitions; the limit is {MAX_PARTITIONS}: rewind one lane at a time "
            "(--lane) or name offsets"
        )
    at_ms = target.time_ms if target.to == RewindTo.TIME else None
    looked, lost = lookup(db, admin, stream.name, chosen, at_ms)
    found: list[tuple[PartitionRef, int, str]] = []
    removed: dict[tuple[str, int], list[str]] = {}
    for ref, bounds, state in looked:
        offset, why = _position(target, ref, bounds)
        if why:
            removed.setdefault((ref.lane, ref.generation), []).append(f"p{ref.partition} {why}")
        found.append((ref, offset, state))
    for (lane_name, number), whys in removed.items():
        gen = stream.require_lane(lane_name).generation(number)
        where = f"{lane_name} g{number} on cluster {gen.cluster if gen else '?'}"
        lost.append(f"{where}: " + "; ".join(whys[:3]) + (f"; and {len(whys) - 3} more" if whys[3:] else ""))

    @transactional
    def count_again(tr: Transaction) -> list[RewindPosition]:
        out = []
        for ref, offset, state in found:
            header = commitlog.read_header(tr, group, ref)
            again = commitlog.done_from(tr, group, ref, offset)
            # nothing at or after it was finished: left as it is, unless a worker holds it (it may have handled
            # records at or after the position whose commits are on their way). Behind the time, its position
            # stays where the group stands: a rewind only goes back
            finished_none = header.updated_ms and offset >= header.low and again == 0
            if finished_none and not _held(tr, group, ref):
                continue
            out.append(RewindPosition(ref, offset, again, str(state)))
        return out

    positions = count_again(db)
    if target.to == RewindTo.TIME:  # no record the group reads again is older than the time
        positions = [replace(p, pending_ts_ms=target.time_ms) for p in positions]
    else:
        positions = _with_timestamps(db, admin, stream, positions)
    return RewindPlan(group, stream.name, target, tuple(positions), tuple(lost))


def _held(tr: Transaction, group: str, ref: PartitionRef) -> bool:
    """Whether a worker holds the partition (or a slice of it): it may have handled records past what the
    commit log says it finished (their commits still on their way), so a rewind to where the group stands, or
    to a time it has not reached, grants it again at a new epoch, though nothing at or after the position is
    done yet; those commits are then fenced, and the records read again (behind the time, those it handled
    before the time too, as after any lease's new epoch)."""
    return any(
        lease is not None and lease.state != FREE
        for lease in [read_lease(tr, group, ref), *slices.slices_of(tr, group, ref)]
    )


def _with_timestamps(
    db: Database, admin: ClusterAdmin, stream: Stream, positions: list[RewindPosition]
) -> list[RewindPosition]:
    """The positions with the timestamp of the record each starts at, one fetch per partition, so the time lag
    counts from it until the group's next commit (a generation that does not answer keeps 0: not known)."""
    by_gen: dict[tuple[str, int], dict[int, int]] = {}
    for p in positions:
        by_gen.setdefault((p.partition.lane, p.partition.generation), {})[p.partition.partition] = p.offset
    stamps: dict[PartitionRef, int] = {}
    for (lane, number), offsets in by_gen.items():
        gen = stream.require_lane(lane).generation(number)
        if gen is None:
            continue
        try:
            found = admin.timestamps(get_cluster(db, gen.cluster), gen.topic, offsets)
        except StreamplaneError:
            continue
        stamps.update({PartitionRef(stream.name, lane, number, p): ts for p, ts in found.items()})
    return [replace(p, pending_ts_ms=stamps.get(p.partition, 0)) for p in positions]


def _describe(plan: RewindPlan) -> str:
    target = plan.target
    if target.to == RewindTo.TIME:
        to = f"time {target.time_ms} ms"
    elif target.to == RewindTo.EARLIEST:
        to = "the earliest records kept"
    else:
        to = f"offsets of {len(target.offsets)} partition(s)"
    text = f"{plan.stream} to {to}: {len(plan.positions)} partition(s), {plan.again} record(s) again"
    return text + (f"; not reprocessed: {' | '.join(plan.lost)}" if plan.lost else "")


@transactional
def apply(tr: Transaction, plan: RewindPlan, *, actor: str, now_ms: int) -> RewindPlan:
    """Apply a plan in one transaction (see the module's docstring); FailedPreconditionError, with nothing
    written, if a generation it names went away or was abandoned since it was planned. One that sealed or
    drained meanwhile (its sealer runs on) is rewound as it is now."""
    stream = get_stream(tr, plan.stream)
    ev = GroupEvents(tr, actor, now_ms)
    holders: set[str] = set()
    freed = 0
    for pos in plan.positions:
        ref = pos.partition
        lane = stream.lane(ref.lane)
        gen = lane.generation(ref.generation) if lane is not None else None
        if gen is None or gen.state == ABANDONED:
            now = "is gone" if gen is None else "was abandoned since"
            raise FailedPreconditionError(
                f"{ref.lane} g{ref.generation} of {plan.stream} {now}: nothing was rewound; plan the rewind again"
            )
        commitlog.rewind(tr, plan.group, ref, pos.offset, now_ms=now_ms, pending_ts_ms=pos.pending_ts_ms)
        if gen.state == DRAINED:
            tr.set(keys.reopened_key(plan.group, ref.stream, ref.lane, ref.generation), b"")
        for lease in [read_lease(tr, plan.group, ref), *slices.slices_of(tr, plan.group, ref)]:
            if lease is None:
                continue
            holders.add(lease.worker_id)
            freed += _regrant(tr, plan.group, lease, ev)
    ev.group(plan.group, REWOUND, reason=_describe(plan))
    tr.add(keys.SEALER_WAKE, 1)  # it closes what this reopened once processed: it looks from now on
    tr.set(
        keys.rewind_key(plan.stream, now_ms, plan.group),
        json.dumps({"actor": actor, "reason": _describe(plan)[:1000]}).encode(),
    )
    bump_versions(tr, plan.group, *sorted(holders))
    return replace(plan, applied=True, leases_regranted=freed)


def _regrant(tr: Transaction, group: str, lease: Lease, ev: GroupEvents) -> int:
    """A rewound partition's lease (or slice lease) held: granted again to its holder at a new epoch, here (the
    holder starts over at once, with no pass of the owner in between, and whatever it still handles of the old
    epoch is fenced); one moving is freed, and the owner grants it to its target. Returns 1 if it was either."""
    if lease.state == GRANTED:
        again = replace(lease, epoch=lease.epoch + 1, lag_records=0, lag_ms=0)
        write_lease(tr, group, lease, again)
        ev.group(group, "lease_granted", lease.worker_id, again, "the group was rewound: a new epoch")
        return 1
    if lease.state != FREE:
        write_lease(tr, group, lease, replace(lease, worker_id="", state=FREE, target="", deadline_ms=0))
        ev.group(group, "lease_revoked", lease.worker_id, lease, "the group was rewound")
        return 1
    return 0


def recent(tr: Transaction, stream: str, limit: int = 20) -> list[dict[str, Any]]:
    """The newest rewinds of a stream's groups, newest first: {time_ms, group, actor, reason}."""
    r = keys.REWINDS.range((stream,))
    out = []
    for key, raw in tr.get_range(r.start, r.stop, limit=limit, reverse=True, snapshot=True):
        _, time_ms, group = keys.REWINDS.unpack(key)
        try:
            value = json.loads(raw)
        except ValueError:
            continue
        out.append(
            {"time_ms": time_ms, "group": group, "actor": value.get("actor", ""), "reason": value.get("reason", "")}
        )
    return out


def reopened(tr: Transaction, group: str) -> list[tuple[str, str, int]]:
    """The drained generations a rewind reopened for `group`: (stream, lane, generation)."""
    r = keys.REOPENED.range((group,))
    return [keys.REOPENED.unpack(k)[1:] for k, _ in tr.get_range(r.start, r.stop, snapshot=True)]


def _window_end(tr: Transaction, group: str, ref: PartitionRef, end: int) -> int:
    raw = tr.get(keys.window_end_key(group, ref))
    return min(end, int(raw)) if raw is not None and raw.isdigit() else end


def finish_rewinds(tr: Transaction, now_ms: int) -> bool:
    """Close the reopened generations their group has processed to their end offsets again (a
    `rewind_finished` event each; the group's owner then lets their leases go). Returns whether any stays
    open. Its cost is the reopened generations', which only rewinds create."""
    r = keys.REOPENED.range()
    still = False
    for key, _ in tr.get_range(r.start, r.stop):
        group, stream, lane, number = keys.REOPENED.unpack(key)
        # a record that does not decode: nothing to read again there; the pass goes on
        gen = decoded_generation(tr.get(keys.generation_key(stream, lane, number)))
        if gen is not None and gen.state == DRAINED:
            ends = [(PartitionRef(stream, lane, number, p), end) for p, end in enumerate(gen.end_offsets)]
            capped = [(ref, _window_end(tr, group, ref, end)) for ref, end in ends]  # a replay window ends sooner
            lows = [(commitlog.low_or_none(tr, group, ref), end) for ref, end in capped]
            if any(low is None or low < end for low, end in lows):  # a torn header keeps it open, alone
                still = True
                continue
        tr.clear(key)
        GroupEvents(tr, "sealer", now_ms).group(group, FINISHED, reason=f"{stream}/{lane} g{number} processed again")
        bump_versions(tr, group)
    return still


def rewind_group(
    db: Database,
    admin: ClusterAdmin,
    group: str,
    stream: str,
    target: RewindTarget,
    *,
    lane: str = "",
    dry_run: bool = False,
    force: bool = False,
    actor: str = "",
    now_ms: int,
) -> RewindPlan:
    """Plan a rewind and, unless `dry_run`, apply it. One that would leave some generation unreprocessed is
    refused, with nothing changed, unless `force`."""
    planned = plan(db, admin, group, stream, target, lane=lane, now_ms=now_ms)
    if dry_run:
        return planned
    if planned.lost and not force:
        raise FailedPreconditionError(
            f"{len(planned.lost)} generation(s) of {planned.stream} cannot be reprocessed ({planned.lost[0]}"
            + (f"; and {len(planned.lost) - 1} more" if planned.lost[1:] else "")
            + "): nothing was rewound; --force rewinds the rest"
        )
    return apply(db, planned, actor=actor, now_ms=now_ms)
