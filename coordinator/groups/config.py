"""A group's settings per lane: attempts before a record is rejected, and the time lag the lane should stay
under (past it, the Assigner gives the lane's partitions the first claim on the group's workers); and the
group's own: how long it may stay inactive before it expires (see groups/lifecycle.py), and the record
predicate every member filters with (a worker whose own differs is refused at join).

Kept in one small value per group (`keys.group_config_key`), read by the commit log and the Assigner.
"""

from __future__ import annotations

import json

from streamplane.coordinator import keys
from streamplane.coordinator.store import Transaction, transactional
from streamplane.errors import FailedPreconditionError, InvalidArgumentError
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


def check_expire_after(ms: int) -> int:
    """`ms` if it is a valid expiry (NEVER, or within EXPIRE_AFTER_RANGE_MS), else InvalidArgumentError."""
    low, high = EXPIRE_AFTER_RANGE_MS
    if ms != NEVER and not low <= ms <= high:
        raise InvalidArgumentError(f"expire_after_ms must be between {low} and {high} (or -1: never), not {ms}")
    return ms


def expire_after_ms(raw_config: bytes | None) -> int:
    """The group's expiry as configured in its stored settings (DEFAULT_EXPIRE_AFTER_MS when unset)."""
    value = json.loads(raw_config).get("expire_after_ms", 0) if raw_config else 0
    return int(value) or DEFAULT_EXPIRE_AFTER_MS


@transactional
def max_attempts(tr: Transaction, group: str, lane: str) -> int:
    """Attempts a record of `lane` gets before it must be rejected."""
    raw = tr.get(keys.group_config_key(group))
    return json.loads(raw).get("max_attempts", {}).get(lane, DEFAULT_MAX_ATTEMPTS) if raw else DEFAULT_MAX_ATTEMPTS


@transactional
def lag_targets(tr: Transaction, group: str) -> dict[str, int]:
    """{lane: time-lag target ms (NO_LAG_TARGET: none)} as configured for the group; lanes left out take the
    default (DEFAULT_LAG_TARGET_MS for a stream's top-priority lane, none for the others)."""
    raw = tr.get(keys.group_config_key(group))
    targets: dict[str, int] = json.loads(raw).get("lag_target_ms", {}) if raw else {}
    return targets


@transactional
def group_where(tr: Transaction, group: str) -> str:
    """The record predicate the group's members must filter with, as rendered ("" for none)."""
    raw = tr.get(keys.group_config_key(group))
    return str(json.loads(raw).get("where", "")) if raw else ""


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
) -> None:
    """Set a lane's max attempts and/or time-lag target, and/or the group's expiry (0 leaves a setting as it
    is; the lane is needed only for the first two), and/or its record predicate (None leaves it, "" removes
    it; a bad one is refused naming the column of its error)."""
    check_object_name("group", group)
    if not attempts and not lag_target_ms and not expire_after and where is None:
        raise InvalidArgumentError("give max_attempts, lag_target_ms, expire_after_ms or where")
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
    config = json.loads(tr.get(key) or b"{}")
    if attempts:
        config.setdefault("max_attempts", {})[lane] = attempts
    if lag_target_ms:
        config.setdefault("lag_target_ms", {})[lane] = lag_target_ms
    if expire_after:
        config["expire_after_ms"] = expire_after
    if where is not None:
        config["where"] = rendered
    tr.set(key, json.dumps(config, sort_keys=True).encode())
    tr.add(keys.group_version_key(group), 1)  # the Assigner looks at the group again
    tr.add(keys.ASSIGNER_WAKE, 1)
