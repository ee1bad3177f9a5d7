"""Deleting a stream: its topology and every group's progress on it in one transaction, then its topics on
every cluster.

Refused while the stream is in use, unless forced: a live producer session that declares it writes the
stream, or a group with a live member holding leases on it. The store is changed first, with a
`stream_deleted` event (producers and workers learn from it and stop routing to it; a group's owner frees
its leases there as it does for a drained generation), and the topics are deleted after: a cluster that
does not answer, or a local mock cluster (librdkafka's mock has no DeleteTopics), leaves its topics, and the
answer names each with why. A stream created again by that name numbers its generations past the deleted
one's (`stream_tombstone`), so a topic left behind is never written or read again.
"""

from __future__ import annotations

import json

import structlog

from streamplane.coordinator import keys
from streamplane.coordinator.commitlog import log as commitlog
from streamplane.coordinator.groups import leases
from streamplane.coordinator.groups import lifecycle as group_lifecycle
from streamplane.coordinator.store import Transaction
from streamplane.coordinator.topology import events, sealing
from streamplane.coordinator.topology.pages import count_stream
from streamplane.coordinator.topology.records import forget_generation, get_cluster, get_stream
from streamplane.coordinator.topology.topology import Topology
from streamplane.errors import FailedPreconditionError, InvalidArgumentError, StreamplaneError
from streamplane.model import StreamDeleted, StreamDeletion
from streamplane.names import check_object_name

log = structlog.get_logger(__name__)

_STREAM_SPACES = (keys.LANES, keys.GENERATIONS, keys.UNSETTLED, keys.SEAL_WAITS, keys.RETIRED_READERS)
"""The topology's subspaces keyed by stream first: what a deletion clears, one range each."""
_GROUP_SPACES = (
    keys.PROGRESS,
    keys.DONE,
    keys.RETRIES,
    keys.REJECTS,
    keys.REDRIVEN,
    keys.LOAD_REPORTS,
    keys.REOPENED,
    keys.REDRIVES,
    keys.WINDOW_ENDS,
)
"""Each group's subspaces keyed by (group, stream): its progress on the stream, cleared per group. Lease
records stay: the group's owner frees them, as for a drained generation (a group deletion removes them)."""


def _live_producers(tr: Transaction, stream: str, now_ms: int) -> list[str]:
    """Producer sessions alive now that declare they write `stream` (one that declares nothing is not
    counted: it may write anywhere, and would block every deletion)."""
    return sorted(
        p.producer_id
        for p in sealing.read_producers(tr)
        if p.alive_until_ms > now_ms and p.streams is not None and stream in p.streams
    )


def _groups_on(tr: Transaction, stream: str, now_ms: int) -> tuple[list[str], list[str]]:
    """(every group with leases or progress on the stream, those of them with a live member holding leases
    there); O(groups) reads, members read only for groups with leases on it."""
    on, live = [], []
    now_groups = set(leases.read_groups(tr))
    for group in sorted(now_groups | set(commitlog.read_groups_with_progress(tr))):
        held = keys.LEASES.range((group, stream))
        has_leases = bool(tr.get_range(held.start, held.stop, limit=1))
        progress = keys.PROGRESS.range((group, stream))
        if has_leases or tr.get_range(progress.start, progress.stop, limit=1):
            on.append(group)
        if has_leases and group in now_groups and group_lifecycle.live_members(tr, group, now_ms):
            live.append(group)
    return on, live


def delete_stream(
    topology: Topology, stream: str, *, force: bool = False, reason: str = "", actor: str = ""
) -> StreamDeletion:
    """Delete `stream` (see the module's docstring); FailedPreconditionError naming what uses it, unless
    `force`. Changes nothing when refused."""
    check_object_name("stream", stream)
    if len(reason) > 1024:
        raise InvalidArgumentError(f"reason is {len(reason)} characters long; at most 1024")
    now = topology.clock.now_ms()

    def change(tr: Transaction) -> StreamDeleted:
        whole = get_stream(tr, stream, "stream")
        producers = _live_producers(tr, stream, now)
        groups, live_groups = _groups_on(tr, stream, now)
        if (producers or live_groups) and not force:
            users = [f"producer {p}" for p in producers[:5]] + [f"group {g}" for g in live_groups[:5]]
            raise FailedPreconditionError(
                f"stream {stream!r} is in use by {', '.join(users)}: stop them first, or delete it with force "
                "(producers then fail to write it, and the groups' workers lose its leases)"
            )
        generations = [(lane.name, g) for lane in whole.lanes for g in lane.generations]
        for lane_name, g in generations:
            forget_generation(tr, stream, lane_name, g)
        tr.clear(keys.stream_key(stream))
        count_stream(tr, -1)
        for space in _STREAM_SPACES:
            r = space.range((stream,))
            tr.clear_range(r.start, r.stop)
        for group in groups:
            for space in _GROUP_SPACES:
                r = space.range((group, stream))
                tr.clear_range(r.start, r.stop)
            leases.bump_versions(tr, group)  # its owner looks again now: the stream's partitions are gone
        r = keys.REWINDS.range((stream,))
        tr.clear_range(r.start, r.stop)
        raw = tr.get(keys.stream_tombstone_key(stream))
        known = int(json.loads(raw)["next_generation"]) if raw else 1
        following = max([known, *(g.number + 1 for _, g in generations)])
        tr.set(
            keys.stream_tombstone_key(stream), json.dumps({"next_generation": following, "deleted_ms": now}).encode()
        )
        event = StreamDeleted(
            stream=stream,
            reason=reason or "deleted by an operator",
            topics=tuple(f"{g.cluster}/{g.topic}" for _, g in generations),
            producers=tuple(producers),
            groups=tuple(live_groups),
        )
        events.append_event(tr, event, actor=actor, time_ms=now)
        return event

    committed = topology.commit(change)
    event: StreamDeleted = committed.value
    deleted, left = _delete_topics(topology, event.topics)
    log.info("stream.deleted", stream=stream, actor=actor, topics_deleted=len(deleted), topics_left=len(left))
    return StreamDeletion(event, committed.version, tuple(deleted), tuple(left))


def _delete_topics(topology: Topology, topics: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """Delete each "cluster/topic"; returns (deleted, left with why). A cluster that fails once is not asked
    again in this call: each of its topics would wait out the admin's timeout."""
    deleted, left = [], []
    failed: dict[str, str] = {}
    for name in topics:
        cluster_name, topic = name.split("/", 1)
        if cluster_name in failed:
            left.append(f"{name}: {failed[cluster_name]}")
            continue
        try:
            cluster = get_cluster(topology.db, cluster_name)
            topology.admin.delete_topic(cluster, topic)
        except StreamplaneError as err:
            failed[cluster_name] = err.message
            left.append(f"{name}: {err.message}")
            continue
        except Exception as err:  # the stream is deleted already: an admin's bug leaves a topic, said so
            log.exception("stream.topic_delete_failed", topic=name)
            failed[cluster_name] = f"the deletion failed: {err!r}"[:300]
            left.append(f"{name}: {failed[cluster_name]}")
            continue
        deleted.append(name)
    return deleted, left
