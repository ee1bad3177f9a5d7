"""The end of a consumer group: deleted by an operator, or expired after staying inactive too long.

A group that went away for good (its application was retired) still holds progress on the generations it
read, so a generation sealed after a failover waited for it forever: `cluster drain` never finished, and the
only way out was `generation abandon`, which gives up records no one may have read. Deleting the group
removes everything it kept (members, leases, progress, retries, rejects, settings, its own log) in one
transaction, with a `group_deleted` event. The draining or sealed generations it had read are marked
(`retired_reader`): one of them drains once the groups left have processed it, even when none are left.

Expiry follows Kafka's offsets retention: a group with no live member that has not committed for its
`expire_after` (7 days unless configured; never, if configured so) is deleted by the leader's reaper, with
`expired` set on the event. "Last active" is the `group_seen` key (`leases.mark_active`), written when a member's
session ends, and the newest `updated_ms` of the group's progress (every commit writes it): the reaper reads
those only for a group whose `group_seen` is past its expiry, so the commit path writes nothing more.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import structlog

from streamplane.clock import SYSTEM, Clock
from streamplane.coordinator import keys
from streamplane.coordinator.commitlog import log as commitlog
from streamplane.coordinator.groups import leases
from streamplane.coordinator.groups.config import DAY_MS, NEVER, expire_after_ms
from streamplane.coordinator.loop import BackgroundLoop
from streamplane.coordinator.store import Database, Transaction, transactional
from streamplane.coordinator.topology import events
from streamplane.errors import FailedPreconditionError, InvalidArgumentError, NotFoundError, StreamplaneError
from streamplane.model import GroupDeleted
from streamplane.names import check_object_name

log = structlog.get_logger(__name__)

REAP_EVERY_MS = 60_000
"""How often the leader looks for groups to expire."""
REAP_PER_PASS = 100
"""Groups one reaper pass deletes at most (one transaction each); the rest wait for the next pass."""
_GROUP_SPACES = (
    keys.MEMBERS,
    keys.LEASES,
    keys.HELD,
    keys.SLICE_LEASES,
    keys.SLICE_HELD,
    keys.MEMBER_VERSIONS,
    keys.LOAD_REPORTS,
    keys.WORKER_ERRORS,
    keys.PROGRESS,
    keys.DONE,
    keys.RETRIES,
    keys.REJECTS,
    keys.REDRIVEN,
    keys.REOPENED,
    keys.REDRIVES,
    keys.WINDOW_ENDS,
    keys.GROUP_EVENTS,
)
"""Every subspace whose keys begin with the group: what a deletion clears, one range each."""


def exists(tr: Transaction, group: str) -> bool:
    """Whether the group is known: a worker joined it, it was configured, or it has progress (an unmanaged
    group's, Spark's)."""
    if tr.get(keys.group_key(group)) is not None or tr.get(keys.group_config_key(group)) is not None:
        return True
    r = keys.PROGRESS.range((group,))
    return bool(tr.get_range(r.start, r.stop, limit=1))


def live_members(tr: Transaction, group: str, now_ms: int) -> list[str]:
    """The group's members whose sessions are alive at `now_ms` (by their replica's hold too), sorted."""
    members = leases.read_members(tr, group)  # each alive until what its owner sees (its replica's hold too)
    return sorted(w for w, m in members.items() if m.session_id and m.alive_until_ms > now_ms)


def _retire_reads(tr: Transaction, group: str) -> list[str]:
    """Mark every draining or sealed generation the group read (leases or progress on it), so that it drains
    without the group; returns them as "stream/lane/gN"."""
    marked = []
    r = keys.UNSETTLED.range()
    for key, _ in tr.get_range(r.start, r.stop):
        stream, lane, number = keys.UNSETTLED.unpack(key)
        for space in (keys.LEASES, keys.PROGRESS):
            within = space.range((group, stream, lane, number))
            if tr.get_range(within.start, within.stop, limit=1):
                tr.set(keys.retired_reader_key(stream, lane, number), b"")
                marked.append(f"{stream}/{lane}/g{number}")
                break
    return marked


@transactional
def delete_group(
    tr: Transaction,
    group: str,
    *,
    now_ms: int,
    force: bool = False,
    reason: str = "",
    actor: str = "",
    expired: bool = False,
) -> GroupDeleted:
    """Remove the group and everything it kept, in this one transaction, with a `group_deleted` event.
    Refused (FailedPreconditionError naming them) while members are live, unless `force`: their sessions end,
    and a worker still running joins again as the first member of a new group of that name."""
    check_object_name("group", group)
    if len(reason) > 1024:
        raise InvalidArgumentError(f"reason is {len(reason)} characters long; at most 1024")
    if not exists(tr, group):
        raise NotFoundError(f"group {group!r} does not exist", kind="group", name=group)
    live = live_members(tr, group, now_ms)
    if live and not force:
        shown = ", ".join(live[:5]) + (f" and {len(live) - 5} more" if len(live) > 5 else "")
        raise FailedPreconditionError(
            f"group {group!r} has {len(live)} live member(s) ({shown}): stop its workers first, or delete it "
            "with force (their sessions end; a worker still running joins again as a new group)"
        )
    generations = _retire_reads(tr, group)
    for space in _GROUP_SPACES:
        r = space.range((group,))
        tr.clear_range(r.start, r.stop)
    for key in (
        keys.group_key(group),
        keys.group_loads_key(group),
        keys.group_owner_key(group),
        keys.group_config_key(group),
        keys.group_seen_key(group),
        keys.window_key(group),
    ):
        tr.clear(key)
    # the counters stay, and move on: a group of the same name created later is never taken for this one
    # by an owner's loop that remembers a version, and whoever watches them (sessions, the loop) wakes now
    tr.add(keys.group_version_key(group), 1)
    tr.add(keys.group_event_head_key(group), 1)
    tr.add(keys.ASSIGNER_WAKE, 1)
    event = GroupDeleted(
        group=group,
        reason=reason or ("inactive past its expiry" if expired else "deleted by an operator"),
        expired=expired,
        members=tuple(live),
        generations=tuple(generations),
    )
    events.append_event(tr, event, actor=actor, time_ms=now_ms)
    return event


def _known_groups(tr: Transaction) -> set[str]:
    """Every group with members, settings, progress or a last-seen time."""
    found = set(leases.read_groups(tr)) | set(commitlog.read_groups_with_progress(tr))
    for space in (keys.GROUP_CONFIGS, keys.GROUP_SEEN):
        r = space.range()
        found.update(space.unpack(k)[0] for k, _ in tr.get_range(r.start, r.stop, snapshot=True))
    return found


@transactional
def _due(tr: Transaction, now_ms: int) -> list[str]:
    """Groups inactive past their expiry (their members not yet checked); a group without a last-seen time
    gets one now (its clock starts: a store written before expiry existed loses no group at once)."""
    r = keys.GROUP_SEEN.range()
    seen = {keys.GROUP_SEEN.unpack(k)[0]: _seen_ms(v) for k, v in tr.get_range(r.start, r.stop, snapshot=True)}
    r = keys.GROUP_CONFIGS.range()
    configs = {keys.GROUP_CONFIGS.unpack(k)[0]: v for k, v in tr.get_range(r.start, r.stop, snapshot=True)}
    due = []
    for group in sorted(_known_groups(tr)):
        at = seen.get(group)
        if at is None:  # none yet, or one no reader can use: the clock starts (again) now
            leases.mark_active(tr, group, now_ms)
            continue
        try:
            after = expire_after_ms(configs.get(group))
        except (ValueError, TypeError, AttributeError):  # one group's bad settings never stop the pass
            continue
        if after != NEVER and at + after <= now_ms:
            due.append(group)
    return due


def _seen_ms(raw: bytes | None) -> int | None:
    """A stored last-seen time; None when absent or not one (the caller starts the clock again)."""
    if raw is None:
        return None
    try:
        return int(json.loads(raw)["at_ms"])
    except (ValueError, TypeError, KeyError):
        return None


@transactional
def _expire(tr: Transaction, group: str, now_ms: int) -> GroupDeleted | None:
    """Delete the group if it is still inactive past its expiry; one with a live member is active (its
    last-seen time moves to now), and so is one that committed since (it moves to that commit's time)."""
    at = _seen_ms(tr.get(keys.group_seen_key(group)))
    after = expire_after_ms(tr.get(keys.group_config_key(group)))
    if at is None or after == NEVER or at + after > now_ms:
        return None
    if live_members(tr, group, now_ms):
        leases.mark_active(tr, group, now_ms)
        return None
    committed = max((h.updated_ms for _, h in commitlog.read_headers(tr, group)), default=0)
    if committed + after > now_ms:
        leases.mark_active(tr, group, committed)
        return None
    days = after / DAY_MS
    span = f"{days:g} days" if days >= 1 else f"{after / 1000:g} s"
    return delete_group(
        tr, group, now_ms=now_ms, reason=f"no member and no commit for {span}", actor="reaper", expired=True
    )


def expire_groups(db: Database, now_ms: int, limit: int = REAP_PER_PASS) -> list[GroupDeleted]:
    """Delete up to `limit` groups inactive past their expiry, one transaction each; a group whose deletion
    fails is logged and left for the next pass (it never stops the others)."""
    done = []
    for group in _due(db, now_ms)[:limit]:
        try:
            deleted = _expire(db, group, now_ms)
        except StreamplaneError as err:
            log.warning("group_expiry_failed", group=group, error=str(err))
            continue
        except Exception:  # a bug or a bad entry of one group never stops the others' expiry
            log.exception("group_expiry_failed", group=group)
            continue
        if deleted is not None:
            log.info("group_expired", group=group, reason=deleted.reason)
            done.append(deleted)
    return done


class GroupReaper:
    """The leader's loop that expires inactive groups, every REAP_EVERY_MS."""

    def __init__(
        self, db: Database, is_leader: Callable[[], bool], *, clock: Clock = SYSTEM, every_ms: int = REAP_EVERY_MS
    ) -> None:
        self.db = db
        self.clock = clock
        self._loop = BackgroundLoop(
            "group-reaper", self.run_once, interval_ms=every_ms, clock=clock, is_leader=is_leader
        )

    def start(self) -> None:
        self._loop.start()

    def stop(self) -> None:
        self._loop.stop()

    def run_once(self) -> int | None:
        expire_groups(self.db, self.clock.now_ms())
        return None
