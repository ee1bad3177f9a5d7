"""Replay windows: a side group that reads a stream from one time to another, and is told when it is done.

`streamplane group create GROUP --stream S --from T1 --until T2` makes a new group whose every partition starts
at the first record at or after T1 and ends before the first record at or after T2, looked up on each
generation's own cluster (as a rewind does). The live groups are not touched: a backfill runs beside them.
The group reads only its window's partitions, each lease ends at the window's end (as a sealed generation's
does), and a drained generation in the window is reopened for it alone. Once every partition is processed to
its end, the sealer marks the window finished (a `window_finished` event) and every session of the group is
told, so `Consumer.run()` returns.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from streamplane.coordinator import keys
from streamplane.coordinator.commitlog import log as commitlog
from streamplane.coordinator.groups import rewind
from streamplane.coordinator.groups.leases import GroupEvents, Lease, bump_versions, read_members
from streamplane.coordinator.store import Database, Transaction, transactional
from streamplane.coordinator.topology.cluster_admin import ClusterAdmin
from streamplane.coordinator.topology.records import get_stream
from streamplane.errors import AlreadyExistsError, FailedPreconditionError, InvalidArgumentError, LimitExceededError
from streamplane.model import DRAINED, PartitionRef, RewindPosition, RewindTarget, RewindTo, Window
from streamplane.names import check_object_name

CREATED, FINISHED = "window_created", "window_finished"


def _check(from_ms: int, until_ms: int, now_ms: int) -> None:
    if from_ms <= 0:
        raise InvalidArgumentError("a window needs its start (--from), a time in unix ms over 0")
    if until_ms > now_ms:
        raise InvalidArgumentError("the window ends in the future: a window ends at the latest now (leave out --until)")
    if from_ms >= until_ms:
        raise InvalidArgumentError("the window's start must be before its end: it would be empty")


@transactional
def _exists(tr: Transaction, group: str) -> bool:
    for space in (keys.MEMBERS, keys.LEASES, keys.PROGRESS):
        r = space.range((group,))
        if tr.get_range(r.start, r.stop, limit=1):
            return True
    return tr.get(keys.window_key(group)) is not None


def create(
    db: Database,
    admin: ClusterAdmin,
    group: str,
    stream_name: str,
    *,
    from_ms: int,
    until_ms: int = 0,
    lane: str = "",
    force: bool = False,
    dry_run: bool = False,
    actor: str = "",
    now_ms: int,
) -> Window:
    """Make `group` a side group reading [from_ms, until_ms) of a stream (until_ms 0: now). AlreadyExistsError
    for a group that exists; FailedPreconditionError when part of the window cannot be read, unless `force`;
    `dry_run` only plans."""
    check_object_name("group", group)
    until_ms = until_ms or now_ms
    _check(from_ms, until_ms, now_ms)
    if _exists(db, group):
        raise AlreadyExistsError(
            f"group {group!r} exists: a replay window makes a new group (pick another name)", kind="group", name=group
        )
    stream = get_stream(db, stream_name)
    chosen = rewind.partitions_of(stream, rewind.lanes_of(stream, lane), RewindTarget(RewindTo.TIME, time_ms=from_ms))
    count = sum(len(parts) for _, _, parts in chosen)
    if count > rewind.MAX_PARTITIONS:
        raise LimitExceededError(
            f"the window covers {count} partitions; the limit is {rewind.MAX_PARTITIONS}: one lane at a time (--lane)"
        )
    starts, lost = rewind.lookup(db, admin, stream.name, chosen, from_ms)
    ends, lost_end = rewind.lookup(db, admin, stream.name, chosen, until_ms)
    end_of = {ref: b.at for ref, b, _ in ends}
    positions = []
    for ref, b, state in starts:
        if ref not in end_of:
            continue  # the cluster answered once, then not: listed in lost_end
        if b.at == b.earliest > 0 and b.at < end_of[ref]:
            lost.append(f"{ref.lane} g{ref.generation} p{ref.partition}: retention removed offsets below {b.earliest}")
        positions.append(RewindPosition(ref, b.at, max(0, end_of[ref] - b.at), state))
    lost += [line for line in lost_end if line not in lost]
    window = Window(group, stream.name, from_ms, until_ms, tuple(positions), tuple(lost))
    if dry_run:
        return window
    if lost and not force:
        raise FailedPreconditionError(
            f"{len(lost)} part(s) of the window cannot be read ({lost[0]}): no group was made; --force reads the rest"
        )
    return _apply(db, window, {p.partition: end_of[p.partition] for p in positions}, actor=actor, now_ms=now_ms)


@transactional
def _apply(tr: Transaction, window: Window, ends: dict[PartitionRef, int], *, actor: str, now_ms: int) -> Window:
    if tr.get(keys.window_key(window.group)) is not None or _exists(tr, window.group):
        raise AlreadyExistsError(f"group {window.group!r} exists", kind="group", name=window.group)
    for pos in window.positions:
        ref = pos.partition
        start = min(pos.offset, ends[ref])
        commitlog.rewind(tr, window.group, ref, start, now_ms=now_ms, pending_ts_ms=window.from_ms)
        tr.set(keys.window_end_key(window.group, ref), str(ends[ref]).encode())
        if pos.generation_state == DRAINED and pos.offset < ends[ref]:
            tr.set(keys.reopened_key(window.group, *ref[:3]), b"")
    stored = {"stream": window.stream, "from_ms": window.from_ms, "until_ms": window.until_ms, "finished": False}
    tr.set(keys.window_key(window.group), json.dumps(stored).encode())
    GroupEvents(tr, actor, now_ms).group(
        window.group,
        CREATED,
        reason=f"{window.stream} from {window.from_ms} until {window.until_ms} ms: {len(window.positions)} "
        f"partition(s), {window.records} record(s)",
    )
    bump_versions(tr, window.group)
    tr.add(keys.SEALER_WAKE, 1)  # the sealer marks the window finished: it looks from now on
    return Window(window.group, window.stream, window.from_ms, window.until_ms, window.positions, window.lost, True)


def _stored(tr: Transaction, group: str) -> dict[str, Any] | None:
    raw = tr.get(keys.window_key(group))
    if raw is None:
        return None
    try:
        value = json.loads(raw)
        return value if isinstance(value, dict) else None
    except ValueError:
        return None


def ends_of(tr: Transaction, group: str) -> dict[PartitionRef, int] | None:
    """{partition: its end} of the group's window; None when the group has none."""
    if _stored(tr, group) is None:
        return None
    r = keys.WINDOW_ENDS.range((group,))
    rows = tr.get_range(r.start, r.stop, snapshot=True)
    # a value that does not decode is left out (its partition is not read), never the end of the window's pass
    return {PartitionRef(*keys.WINDOW_ENDS.unpack(k)[1:]): int(v) for k, v in rows if v.isdigit()}


def wanted(tr: Transaction, group: str, streams: set[str]) -> dict[PartitionRef, int] | None:
    """The window's partitions the group has left to process, of the streams its members read: {partition:
    1}; None for a group with no window (it reads its streams' live partitions)."""
    ends = ends_of(tr, group)
    if ends is None:
        return None
    lows = {ref: commitlog.low_or_none(tr, group, ref) for ref in ends if ref.stream in streams}
    return {ref: 1 for ref, low in lows.items() if low is not None and low < ends[ref]}


def session_view(tr: Transaction, group: str, held: Sequence[Lease], ends: dict[str, int]) -> bool:
    """What a session of `group` is told of its window: its leases end at the window's end (or at their
    generation's, when that is sooner), written into `ends`; returns whether the window is finished. A group
    with no window costs one read."""
    stored = _stored(tr, group)
    if stored is None:
        return False
    window = ends_of(tr, group) or {}
    for lease in held:
        end = window.get(lease.key)
        if end is not None:
            sealed = ends.get(lease.lease_id, -1)
            ends[lease.lease_id] = end if sealed < 0 else min(sealed, end)
    return bool(stored.get("finished"))


def finish_windows(tr: Transaction, now_ms: int) -> bool:
    """Mark finished the windows whose group has processed every partition to its end (a `window_finished`
    event; every member's session is told). Returns whether any window is still running."""
    r = keys.WINDOWS.range()
    running = False
    for key, _ in tr.get_range(r.start, r.stop):
        (group,) = keys.WINDOWS.unpack(key)
        stored = _stored(tr, group)
        if stored is None or stored.get("finished"):
            continue
        ends = ends_of(tr, group) or {}
        lows = [(commitlog.low_or_none(tr, group, ref), end) for ref, end in ends.items()]
        if any(low is None or low < end for low, end in lows):  # a torn header keeps its own window running
            running = True
            continue
        tr.set(key, json.dumps({**stored, "finished": True, "finished_ms": now_ms}).encode())
        GroupEvents(tr, "sealer", now_ms).group(group, FINISHED, reason=f"{stored.get('stream')}: every partition")
        bump_versions(tr, group, *read_members(tr, group))
    return running
