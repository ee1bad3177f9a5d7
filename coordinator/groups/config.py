"""A group's settings per lane: attempts before a record is rejected, and the time lag the lane should stay
under (past it, the Assigner gives the lane's partitions the first claim on the group's workers); and the
group's own: how long it may stay inactive before it expires (see groups/lifecycle.py), and the record
predicate every member filters with (a worker whose own differs is refused at join).

Kept in one small value per group (`keys.group_config_key`), read by the commit log and the Assigner.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from streamplane.coordinator import keys
from streamplane.coordinator.store import Transaction, transactional
from streamplane.coordinator.topology.records import UNDECODABLE, get_stream
from streamplane.errors import (
    FailedPreconditionError,
    InvalidArgumentError,
    LimitExceededError,
    NotFoundError,
    StreamplaneError,
)
from streamplane.model import MAX_SLICES, SETTLED, PartitionRef
from streamplane.names import check_lane_name, check_object_name
from streamplane.predicate import parse, render

DEFAULT_MAX_ATTEMPTS = 5
DEFAULT_LAG_TARGET_MS = 5_000
"""The time-lag target of a stream's top-priority lane unless configured (the others have none)."""
NO_LAG_TARGET = -1

DAY_MS = 86_400_000
DEFAULT_EXPIRE_AFTER_MS = 7 * DAY_MS
"""Like Kafka's offsets.retention.minutes (7 days since Kafka 2.0)."""
NEVER = -1
"""An `expire_after_ms` that keeps the group until it is deleted by hand."""
EXPIRE_AFTER_RANGE_MS = (1_000, 3_660 * DAY_MS)
DEFAULT_MAX_SLICES = 4
"""Slices a partition is split into at most unless the group says otherwise: each holder fetches the whole
partition, so a split into N multiplies its fetch bytes by N."""
MAX_SPLITS = 256
"""Partitions one group may have split at once (the slice planner reads them all at every pass)."""


def check_expire_after(ms: int) -> int:
    """`ms` if it is a valid expiry (NEVER, or within EXPIRE_AFTER_RANGE_MS), else InvalidArgumentError."""
    low, high = EXPIRE_AFTER_RANGE_MS
    if ms != NEVER and not low <= ms <= high:
        raise InvalidArgumentError(f"expire_after_ms must be between {low} and {high} (or -1: never), not {ms}")
    return ms


def decoded(raw_config: bytes | None) -> dict[str, Any]:
    """A group's stored settings ({} when it has none). Torn ones (not a JSON object; never written so by this
    code) are read as none, so no pass and no commit stops on them; the next `configure` writes them anew."""
    try:
        config = json.loads(raw_config) if raw_config else {}
    except UNDECODABLE:
        return {}
    return config if isinstance(config, dict) else {}


def settings(tr: Transaction, group: str) -> dict[str, Any]:
    """The group's stored settings, decoded (see `decoded`)."""
    return decoded(tr.get(keys.group_config_key(group)))


def _int(value: Any, default: int) -> int:
    """A stored number, or `default` when it is not one (torn)."""
    try:
        return int(value)
    except (ValueError, TypeError):
        return default


def expire_after_ms(raw_config: bytes | None) -> int:
    """The group's expiry as configured in its stored settings (DEFAULT_EXPIRE_AFTER_MS when unset)."""
    return _int(decoded(raw_config).get("expire_after_ms", 0), 0) or DEFAULT_EXPIRE_AFTER_MS


@transactional
def max_attempts(tr: Transaction, group: str, lane: str) -> int:
    """Attempts a record of `lane` gets before it must be rejected."""
    per_lane = settings(tr, group).get("max_attempts")
    value = per_lane.get(lane, DEFAULT_MAX_ATTEMPTS) if isinstance(per_lane, dict) else DEFAULT_MAX_ATTEMPTS
    return _int(value, DEFAULT_MAX_ATTEMPTS)


@transactional
def lag_targets(tr: Transaction, group: str) -> dict[str, int]:
    """{lane: time-lag target ms (NO_LAG_TARGET: none)} as configured for the group; lanes left out take the
    default (DEFAULT_LAG_TARGET_MS for a stream's top-priority lane, none for the others)."""
    targets = settings(tr, group).get("lag_target_ms")
    if not isinstance(targets, dict):
        return {}
    return {str(lane): ms for lane, stored in targets.items() if (ms := _int(stored, 0))}


@transactional
def group_where(tr: Transaction, group: str) -> str:
    """The record predicate the group's members must filter with, as rendered ("" for none)."""
    where = settings(tr, group).get("where", "")
    return where if isinstance(where, str) else ""


def check_where(group: str, configured: str, worker_id: str, where: str) -> None:
    """FailedPreconditionError when a worker filters with another predicate than the one its group is
    configured with (a worker with none takes the group's, from its welcome)."""
    if configured and where and where != configured:
        raise FailedPreconditionError(
            f"worker {worker_id!r} filters with {where!r}, but group {group!r} filters with {configured!r}: every "
            f"member filters alike; give the consumer where={configured!r} (or none: it takes the group's), or "
            "change the group's with group configure --where"
        )


@transactional
def configure(
    tr: Transaction,
    group: str,
    lane: str = "",
    attempts: int = 0,
    lag_target_ms: int = 0,
    expire_after: int = 0,
    where: str | None = None,
    max_slices: int = 0,
    split: tuple[str, int] | None = None,
) -> None:
    """Set a lane's max attempts and/or time-lag target, and/or the group's expiry (0 leaves a setting as it
    is; the lane is needed only for the first two), and/or its record predicate (None leaves it, "" removes
    it; a bad one is refused naming the column of its error), and/or the most slices a partition is split
    into, and/or a split: (partition's lease id, slices; 1 merges it again). See slices.py."""
    check_object_name("group", group)
    if not attempts and not lag_target_ms and not expire_after and where is None and not max_slices and not split:
        raise InvalidArgumentError("give max_attempts, lag_target_ms, expire_after_ms, where, max_slices or split")
    rendered = render(parse(where)) if where else ""
    if (attempts or lag_target_ms) and not lane:
        raise InvalidArgumentError("lane is required with max_attempts or lag_target_ms: they are set per lane")
    if lane:
        check_lane_name("lane", lane)
    if attempts and not 1 <= attempts <= 1000:
        raise InvalidArgumentError(f"max_attempts must be between 1 and 1000, not {attempts}")
    if lag_target_ms and lag_target_ms != NO_LAG_TARGET and not 1000 <= lag_target_ms <= 86_400_000:
        raise InvalidArgumentError(
            f"lag_target_ms must be between 1000 and 86400000 (or -1 for none), not {lag_target_ms}"
        )
    if expire_after:
        check_expire_after(expire_after)
    key = keys.group_config_key(group)
    config = decoded(tr.get(key))
    if attempts:
        config.setdefault("max_attempts", {})[lane] = attempts
    if lag_target_ms:
        config.setdefault("lag_target_ms", {})[lane] = lag_target_ms
    if expire_after:
        config["expire_after_ms"] = expire_after
    if where is not None:
        config["where"] = rendered
    configure_slices(config, tr, split=split, limit=max_slices)
    tr.set(key, json.dumps(config, sort_keys=True).encode())
    tr.add(keys.group_version_key(group), 1)  # the Assigner looks at the group again
    tr.add(keys.ASSIGNER_WAKE, 1)


def configured(config: Mapping[str, Any]) -> dict[PartitionRef, int]:
    """{partition: slices} as a group's stored settings ask: split by hand, or by the Assigner for its load
    (`auto_splits`; one split by hand is the operator's, never merged for load)."""
    out: dict[PartitionRef, int] = {}
    for place in ("auto_splits", "splits"):
        entries = config.get(place, {})
        for lid, entry in entries.items() if isinstance(entries, dict) else ():
            try:
                out[PartitionRef.parse(lid)] = int(entry["slices"] if place == "auto_splits" else entry)
            except (StreamplaneError, ValueError, TypeError, KeyError):
                continue  # a torn entry (never written by configure): that partition stays whole
    return out


def max_slices(config: Mapping[str, Any]) -> int:
    return _int(config.get("max_slices", DEFAULT_MAX_SLICES), DEFAULT_MAX_SLICES)


TORN = object()
"""A stream whose records do not decode, as `live` keeps it."""


def live(tr: Transaction, ref: PartitionRef, streams: dict[str, Any]) -> bool | None:
    """Whether the partition's generation is still to be read (not drained or abandoned, not gone); None when
    its stream's records do not decode (bad data in the store: nothing is decided on it). `streams` keeps the
    streams read, for the next call."""
    if ref.stream not in streams:
        try:
            streams[ref.stream] = get_stream(tr, ref.stream)
        except NotFoundError:
            streams[ref.stream] = None
        except FailedPreconditionError:
            streams[ref.stream] = TORN
    stream = streams[ref.stream]
    if stream is TORN:
        return None
    lane = stream.lane(ref.lane) if stream is not None else None
    gen = lane.generation(ref.generation) if lane is not None else None
    return gen is not None and gen.state not in SETTLED and ref.partition < gen.partitions


def forget_settled(tr: Transaction, config: dict[str, Any]) -> bool:
    """Drop from a group's settings the splits of partitions no longer read (their generation drained or
    abandoned, their stream deleted), by hand or for load, so none lingers or counts towards the group's
    limit; whether any was dropped. A torn entry is left to `configured`, which reads it as none."""
    streams: dict[str, Any] = {}
    dropped = False
    for place in ("splits", "auto_splits"):
        entries = config.get(place)
        if not isinstance(entries, dict):
            continue
        for lid in list(entries):
            try:
                ref = PartitionRef.parse(lid)
            except StreamplaneError:
                continue
            if live(tr, ref, streams) is False:
                del entries[lid]
                dropped = True
    return dropped


def check_split(tr: Transaction, lid: str, count: int, limit: int) -> PartitionRef:
    """The partition `lid` names, if it exists and `count` is a split it may take (1: merged again);
    InvalidArgumentError or NotFoundError naming what is wrong otherwise."""
    ref = PartitionRef.parse(lid)
    if lid != ref.lease_id:
        raise InvalidArgumentError(f"split names a partition (stream/lane/g<generation>/p<partition>), not {lid!r}")
    if not 1 <= count <= limit:
        raise InvalidArgumentError(
            f"a partition splits into 2 to {limit} slices (the group's max_slices), or 1 to merge it, not {count}"
        )
    stream = get_stream(tr, ref.stream, "split")
    lane = stream.lane(ref.lane)
    gen = lane.generation(ref.generation) if lane is not None else None
    if gen is None or ref.partition >= gen.partitions:
        raise NotFoundError(f"split: {lid} is not a partition of {ref.stream}", kind="partition", name=lid)
    if gen.state in SETTLED:
        raise InvalidArgumentError(f"split: {lid} is in a {gen.state} generation: nothing is left to read in it")
    return ref


def configure_slices(config: dict[str, Any], tr: Transaction, *, split: tuple[str, int] | None, limit: int) -> None:
    """Apply `max_slices` (`limit`, 0: as it is) and a split (count 1 removes it) to a group's stored settings
    (forgetting the splits of partitions no longer read)."""
    forget_settled(tr, config)
    if limit:
        if not 1 <= limit <= MAX_SLICES:
            raise InvalidArgumentError(f"max_slices must be between 1 (never split) and {MAX_SLICES}, not {limit}")
        config["max_slices"] = limit
    if split is None:
        return
    lid, count = split
    ref = check_split(tr, lid, count, max_slices(config))
    for place in ("splits", "auto_splits"):  # a torn one (not a mapping; never written here) starts again empty
        if not isinstance(config.get(place, {}), dict):
            config[place] = {}
    splits = config.setdefault("splits", {})
    config.get("auto_splits", {}).pop(ref.lease_id, None)  # by hand from now on
    if count == 1:
        splits.pop(ref.lease_id, None)
    elif ref.lease_id not in splits and len(splits) >= MAX_SPLITS:
        raise LimitExceededError(f"the group has {len(splits)} split partitions; the limit is {MAX_SPLITS}")
    else:
        splits[ref.lease_id] = count
